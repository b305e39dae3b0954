"""Multi-process clusters on loopback: kill -9 a replica mid-stream, restart it, and check
that it catches up and that no acknowledged write is lost."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import REDIS_MISSING

from bespokv.config import Tuning
from bespokv.testing import LocalCluster, redis_available, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CASES = [
    ("ms-sc", "memory"),
    ("ms-ec", "memory"),
    ("aa-sc", "memory"),
    ("aa-ec", "memory"),
    ("ms-sc", "rocksdb"),
    ("aa-ec", "redis"),
]


def wait_converged(cluster: LocalCluster, client, expected: dict[bytes, bytes], timeout: float = 30.0) -> None:
    """Every replica of a shard holds the same data, including every acknowledged write.
    (A write that failed ambiguously, e.g. DEADLINE_EXCEEDED while a chain was broken,
    may be there too: it was not acknowledged, and may or may not be applied.)"""
    smap = client.shard_map()
    deadline = time.monotonic() + timeout
    while True:
        bad = []
        try:
            for sid, info in smap.shards.items():
                want = {k: v for k, v in expected.items() if smap.shard_for(k) == sid}
                first: dict[bytes, bytes] | None = None
                for node in info.replicas:
                    have = dict(client.scan_local(node, sid))
                    missing = sum(1 for k, v in want.items() if have.get(k) != v)
                    if missing or (first is not None and have != first):
                        bad.append(f"{node}/shard{sid}: {len(have)} keys, {missing} acknowledged missing")
                    first = have if first is None else first
        except Exception as exc:  # a node may still be starting
            bad.append(repr(exc))
        if not bad:
            return
        if time.monotonic() > deadline:
            raise AssertionError("replicas did not converge: " + "; ".join(bad))
        time.sleep(0.2)


@pytest.mark.parametrize(("mode", "datalet"), CASES, ids=[f"{m}-{d}" for m, d in CASES])
def test_kill9_replica_mid_stream_then_catch_up(mode, datalet):
    if datalet == "redis" and not redis_available():
        pytest.skip(REDIS_MISSING)
    tuning = Tuning(request_timeout=3.0, anti_entropy_interval=0.5, recovery_timeout=5.0)
    with LocalCluster(3, replicas=3, shards=3, mode=mode, datalet=datalet, tuning=tuning) as cluster:
        victim = "n2"
        client = cluster.client(retries=30, timeout=5.0)
        smap = client.shard_map()
        acked: dict[bytes, bytes] = {}
        errors: list[str] = []
        stop = threading.Event()

        def eligible(key: bytes) -> bool:
            # In the eventual modes a write acknowledged only by the node we kill may die
            # with it (that is what eventual means); write where the ack survives.
            if mode in ("ms-ec", "aa-ec"):
                return client.aio.target(smap.shard_of_key(key), write=True) != victim
            return True

        def writer() -> None:
            i = 0
            while not stop.is_set():
                batch = []
                while len(batch) < 20:
                    k = b"key%06d" % i
                    i += 1
                    if eligible(k):
                        batch.append((k, b"value-%d" % i))
                try:
                    client.put_many(batch)
                    acked.update(batch)
                except Exception as exc:  # recorded; those writes are not acknowledged
                    errors.append(repr(exc))

        t = threading.Thread(target=writer)
        t.start()
        try:
            wait_until(lambda: len(acked) >= 200, 60, "acknowledged writes before the kill")
            before = len(acked)
            cluster.kill(victim)  # SIGKILL, mid-stream
            # Restart only once the other nodes have noticed, with writes in flight.
            cluster.wait_reported_down(victim)
            cluster.start_node(victim)
            cluster.wait_ready(60)
            at_ready = len(acked)
            wait_until(lambda: len(acked) >= at_ready + 100, 60, "acknowledged writes after the restart")
        finally:
            stop.set()
            t.join(60)
        assert before > 0 and len(acked) > before, (before, len(acked), errors[-3:])
        wait_converged(cluster, client, acked)
        # and through the normal read path
        got = client.get_many(list(acked))
        assert got == list(acked.values())
        st = client.cluster_status()
        assert all(n.up for n in st.nodes)
        client.close()
