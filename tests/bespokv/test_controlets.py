"""Every controlet against every datalet (built-in and plug-in), with one suite.

Each (mode, datalet) pair gets a 3-node, 3-replica, 2-shard cluster of in-process nodes
(real gRPC over loopback). The backbone is a property-based test: random operation
sequences run through the client and against a dict, with identical results required.
The eventual modes are checked through a client that reads where it writes (the master
in ms-ec, its home replica in aa-ec), plus convergence of every replica afterwards.
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from conftest import DATALET_KINDS, make_factory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bespokv.config import Tuning
from bespokv.errors import UnsupportedError
from bespokv.testing import ThreadedCluster, make_config

MODES = ["ms-sc", "ms-ec", "aa-sc", "aa-ec"]
NODES = ["n1", "n2", "n3"]


class Harness:
    def __init__(self, tc: ThreadedCluster, mode: str) -> None:
        self.tc = tc
        self.mode = mode
        self.client = tc.client(retries=20, timeout=5.0)
        self.smap = self.client.shard_map()
        self.prefixes = (b"x%06d/" % i for i in itertools.count())

    def replica_contents(self, prefix: bytes = b"") -> dict[str, dict[int, dict[bytes, bytes]]]:
        out: dict[str, dict[int, dict[bytes, bytes]]] = {}
        for node in NODES:
            out[node] = {}
            for sid, info in self.smap.shards.items():
                if node in info.replicas:
                    pairs = self.client.scan_local(node, sid)
                    out[node][sid] = {k: v for k, v in pairs if k.startswith(prefix)}
        return out

    def wait_converged(self, expected: dict[bytes, bytes], prefix: bytes, timeout: float = 20.0) -> None:
        """Every replica of every shard holds exactly ``expected`` (restricted to prefix)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                contents = self.replica_contents(prefix)
            except Exception as exc:  # a restarted node may still be unreachable
                contents, err = {}, exc
                if time.monotonic() > deadline:
                    raise AssertionError(f"replicas unreachable: {err}") from exc
                time.sleep(0.1)
                continue
            bad = []
            for node, shards in contents.items():
                for sid, kv in shards.items():
                    want = {k: v for k, v in expected.items() if self.smap.shard_for(k) == sid}
                    if kv != want:
                        bad.append((node, sid, len(kv), len(want)))
            if not bad:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"replicas did not converge: (node, shard, have, want) {bad}")
            time.sleep(0.1)


@pytest.fixture(scope="module", params=[(m, k) for m in MODES for k in DATALET_KINDS], ids=lambda p: f"{p[0]}-{p[1]}")
def harness(request, tmp_path_factory):
    mode, kind = request.param
    factory = make_factory(kind, tmp_path_factory.mktemp(f"{mode}-{kind}"), request)
    tuning = Tuning(request_timeout=5.0, anti_entropy_interval=0.3, recovery_timeout=5.0)
    cfg = make_config(3, replicas=3, shards=2, mode=mode, tuning=tuning)
    with ThreadedCluster(cfg, datalet_factory=factory) as tc:
        h = Harness(tc, mode)
        try:
            yield h
        finally:
            h.client.close()


KEYS = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f"])
VALUES = st.binary(max_size=6)
OP = st.one_of(
    st.tuples(st.just("put"), KEYS, VALUES),
    st.tuples(st.just("get"), KEYS),
    st.tuples(st.just("delete"), KEYS),
    st.tuples(st.just("batch"), st.lists(st.tuples(KEYS, st.one_of(st.none(), VALUES)), max_size=5)),
    st.tuples(st.just("get_many"), st.lists(KEYS, max_size=4)),
    st.tuples(st.just("scan"), st.sampled_from([None, b"b", b"d"]), st.sampled_from([None, b"c", b"f"]),
              st.one_of(st.none(), st.integers(1, 4)), st.booleans()),
    st.tuples(st.just("cas"), KEYS, st.one_of(st.none(), VALUES), st.one_of(st.none(), VALUES)),
)


def test_matches_a_dict(harness: Harness):
    c = harness.client
    cas_ok = harness.mode.startswith("ms")

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(OP, min_size=1, max_size=25))
    def run(ops):
        p = next(harness.prefixes)
        model: dict[bytes, bytes] = {}
        for op in ops:
            kind = op[0]
            if kind == "put":
                c.put(p + op[1], op[2])
                model[p + op[1]] = op[2]
            elif kind == "get":
                assert c.get(p + op[1]) == model.get(p + op[1]), op
            elif kind == "delete":
                c.delete(p + op[1])
                model.pop(p + op[1], None)
            elif kind == "batch":
                c.write_batch([(p + k, v) for k, v in op[1]])
                for k, v in op[1]:
                    if v is None:
                        model.pop(p + k, None)
                    else:
                        model[p + k] = v
            elif kind == "get_many":
                assert c.get_many([p + k for k in op[1]]) == [model.get(p + k) for k in op[1]]
            elif kind == "scan":
                _, lo, hi, limit, rev = op
                lo_k = p + (lo or b"")
                hi_k = p + hi if hi else p[:-1] + b"0"  # "/"+1: the end of this prefix
                want = sorted((k, v) for k, v in model.items() if lo_k <= k < hi_k)
                if rev:
                    want.reverse()
                if limit:
                    want = want[:limit]
                assert list(c.scan(lo_k, hi_k, limit=limit, reverse=rev)) == want, op
            elif kind == "cas":
                key, expected, new = p + op[1], op[2], op[3]
                if not cas_ok:
                    with pytest.raises(UnsupportedError):
                        c.cas(key, expected, new)
                    continue
                res = c.cas(key, expected, new)
                cur = model.get(key)
                assert res.current == cur and res.succeeded == (cur == expected), op
                if res.succeeded:
                    if new is None:
                        model.pop(key, None)
                    else:
                        model[key] = new

    run()


def test_replicas_converge(harness: Harness):
    c = harness.client
    p = next(harness.prefixes)
    expected = {}
    for i in range(60):
        k = p + b"%03d" % i
        expected[k] = b"v%d" % i
    c.put_many(expected.items())
    for i in range(0, 60, 3):
        c.delete(p + b"%03d" % i)
        del expected[p + b"%03d" % i]
    c.write_batch([(p + b"%03d" % i, b"w") for i in range(1, 60, 3)])
    for i in range(1, 60, 3):
        expected[p + b"%03d" % i] = b"w"
    harness.wait_converged(expected, p)


def test_batches_are_atomic(harness: Harness):
    """Readers never see half of a batch (master-slave modes: batches are atomic; the
    active-active modes promise atomicity per key only, so there it is not asserted)."""
    c = harness.client
    p = next(harness.prefixes)
    # two keys of the same shard
    sid = harness.smap.shard_for(p + b"a")
    other = next(p + b"b%d" % i for i in range(100) if harness.smap.shard_for(p + b"b%d" % i) == sid)
    keys = [p + b"a", other]
    c.write_batch([(k, b"0") for k in keys])
    stop = threading.Event()
    torn = []

    def reader():
        while not stop.is_set():
            vals = dict(c.scan(p, p[:-1] + b"0"))
            if vals.get(keys[0]) != vals.get(keys[1]):
                torn.append(vals)

    t = threading.Thread(target=reader)
    if harness.mode.startswith("ms"):
        t.start()
    try:
        for i in range(1, 60):
            c.write_batch([(k, b"%d" % i) for k in keys])
    finally:
        stop.set()
        if t.is_alive():
            t.join()
    assert not torn, torn[:3]
    assert [c.get(k) for k in keys] == [b"59", b"59"]


def test_restarted_replica_catches_up(harness: Harness):
    """Stop a node, keep writing where the mode stays available, restart it (volatile
    datalets come back empty), and check every replica ends up with every write."""
    c = harness.client
    tc = harness.tc
    p = next(harness.prefixes)
    expected = {p + b"pre%02d" % i: b"1" for i in range(30)}
    c.put_many(expected.items())
    victim = "n2"
    tc.call(tc.cluster.stop_node(victim))
    try:
        if harness.mode != "ms-sc":  # a chain needs every replica for writes
            for i in range(30):
                k = p + b"mid%02d" % i
                info = harness.smap.shard_of_key(k)
                if harness.mode == "ms-ec" and info.head == victim:
                    continue  # its master is down
                c.put(k, b"2")
                expected[k] = b"2"
    finally:
        tc.call(tc.cluster.start_node(victim))
    tc.call(tc.nodes[victim].wait_ready(30))
    more = {p + b"post%02d" % i: b"3" for i in range(30)}
    c.put_many(more.items())
    expected.update(more)
    harness.wait_converged(expected, p, timeout=30)
    for k, v in expected.items():
        assert c.get(k) == v
