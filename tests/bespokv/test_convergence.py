"""Eventual modes: conflicting writes on every replica, a kill -9 and a restart in the
middle; once writes stop, every replica must hold the same data (and aa-ec must collect
its tombstones)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from bespokv.config import DataletSpec, Tuning
from bespokv.errors import UnavailableError
from bespokv.shardmap import ShardMap
from bespokv.testing import LocalCluster, make_config, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

KEYS = [b"c%03d" % i for i in range(150)]


def replicas_identical(client, smap) -> tuple[bool, str]:
    """Whether every replica holds the same data; a replica not reachable yet (a restarted
    node, or the client's channel to it still backing off its reconnects) is "not yet"."""
    for sid, info in smap.shards.items():
        try:
            contents = [dict(client.scan_local(node, sid)) for node in info.replicas]
        except UnavailableError as e:
            return False, f"shard {sid}: a replica is unreachable ({e})"
        if any(c != contents[0] for c in contents[1:]):
            sizes = [len(c) for c in contents]
            return False, f"shard {sid}: sizes {sizes}"
    return True, ""


@pytest.mark.parametrize("mode", ["ms-ec", "aa-ec"])
def test_replicas_converge_after_writes_stop(mode):
    tuning = Tuning(request_timeout=3.0, anti_entropy_interval=0.5, tombstone_grace=2.0, recovery_timeout=5.0)
    with LocalCluster(3, replicas=3, shards=2, mode=mode, datalet="memory", tuning=tuning) as cluster:
        # Several clients; in aa-ec each writes through its own home replica, so the same
        # keys are written concurrently on different replicas (last writer wins).
        clients = [cluster.client(retries=30, timeout=5.0, seed=s) for s in range(4)]
        stop = threading.Event()
        counts = [0] * len(clients)

        def writer(i: int) -> None:
            c = clients[i]
            n = 0
            while not stop.is_set():
                batch = [(KEYS[(n * 7 + j * 13 + i) % len(KEYS)], b"w%d-%d" % (i, n)) for j in range(10)]
                try:
                    c.put_many(batch)
                    c.delete(KEYS[(n * 11 + i) % len(KEYS)])
                except Exception:  # the killed node's clients see errors
                    time.sleep(0.1)
                n += 1
                counts[i] = n

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(len(clients))]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: sum(counts) >= 20, 60, "writes before the kill")
            cluster.kill("n3")
            cluster.wait_reported_down("n3")  # writes go on against the broken cluster
            cluster.start_node("n3")
            cluster.wait_ready(60)
            at_ready = sum(counts)
            wait_until(lambda: sum(counts) >= at_ready + 8, 60, "writes after n3 returned")
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        assert all(n > 5 for n in counts), counts
        c = clients[0]
        smap = c.shard_map()
        deadline = time.monotonic() + 30
        while True:
            ok, why = replicas_identical(c, smap)
            if ok:
                break
            assert time.monotonic() < deadline, f"replicas did not converge: {why}"
            time.sleep(0.2)
        # Every client now reads the same values wherever it reads.
        values = [cl.get_many(KEYS) for cl in clients]
        assert all(v == values[0] for v in values)
        assert any(v is not None for v in values[0]) and any(v is None for v in values[0])

        st = c.cluster_status()
        if mode == "ms-ec":
            # lag is reported per replica and is back to zero
            lags = [lag for n in st.nodes for s in n.shards for lag in s.lag.values()]
            assert lags and all(lag == 0 for lag in lags), lags
        else:
            # tombstones are collected after the grace period, and stay collected
            deadline = time.monotonic() + 20
            while True:
                st = c.cluster_status()
                stored = sum(v for n in st.nodes for k, v in n.counters.items() if k.endswith(".datalet.keys"))
                live = sum(1 for v in values[0] if v is not None) * 3
                if stored == live:
                    break
                assert time.monotonic() < deadline, (stored, live)
                time.sleep(0.5)
            collected = sum(v for n in st.nodes for k, v in n.counters.items() if k.endswith("tombstones_collected"))
            assert collected > 0
            assert c.get_many(KEYS) == values[0]
        for cl in clients:
            cl.close()


def test_ms_ec_replica_lag_is_bounded_and_reported(tmp_path):
    """A slow replica (0.3 ms per written key) makes the master hold writers back so the
    replica never lags more than max_lag_entries (plus the writes already admitted)."""
    bound = 100
    plain = DataletSpec("plugin_datalet:PlainDictDatalet")
    tuning = Tuning(max_lag_entries=bound, request_timeout=10.0)
    probe = make_config(3, replicas=3, shards=1, mode="ms-ec", ports=[1, 2, 3])
    slow_node = ShardMap.from_config(probe).shards[0].tail  # placement depends on ids only
    slow = DataletSpec("plugin_datalet:PlainDictDatalet", {"write_delay": 0.0003})
    cfg = make_config(
        3, replicas=3, shards=1, mode="ms-ec", datalet=plain, tuning=tuning,
        node_datalets={slow_node: slow}, base_dir=str(tmp_path),
    )
    here = os.path.dirname(__file__)
    env = {"PYTHONPATH": here + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with LocalCluster(config=cfg, dir=str(tmp_path), env=env) as cluster:
        c = cluster.client(retries=5)
        master = c.shard_map().shards[0].head
        stop = threading.Event()
        written = [0]

        def writer() -> None:
            n = 0
            while not stop.is_set():
                c.put_many((b"lag%05d" % ((n + j) % 3000), b"v") for j in range(50))
                n += 50
                written[0] = n

        t = threading.Thread(target=writer)
        t.start()
        lags = []
        try:
            for _ in range(20):
                st = c.node_stats(master)
                lags.append(st.shards[0].lag[slow_node])
                time.sleep(0.1)
        finally:
            stop.set()
            t.join(30)
        assert max(lags) > 0, lags  # reported
        assert max(lags) <= bound + 50 + 5, lags  # bounded (50 writes per admitted batch)
        assert f"lag_s.{slow_node}" in c.node_stats(master).shards[0].info
        deadline = time.monotonic() + 20
        while c.node_stats(master).shards[0].lag[slow_node] != 0:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        c.close()


def test_aa_ec_read_repair():
    """A value only one replica has reaches the others through reads alone."""
    from bespokv import versioned
    from bespokv.testing import ThreadedCluster

    tuning = Tuning(anti_entropy_interval=3600.0, read_repair_chance=1.0)
    cfg = make_config(3, replicas=3, shards=1, mode="aa-ec", tuning=tuning)
    with ThreadedCluster(cfg) as tc, tc.client() as c:
        c.put(b"rr", b"old")
        info = c.shard_map().shards[0]
        home = c.aio.target(info, write=False)
        holder = next(n for n in info.replicas if n != home)
        ctl = tc.nodes[holder].controlets[0]
        newer = versioned.encode(tc.run(lambda: ctl.ctx.clock.now()) + 1000, 1, b"new")
        tc.call(ctl.store_if_newer([(b"rr", newer)]))
        assert c.get_local(home, b"rr") == b"old"
        deadline = time.monotonic() + 10
        while any(c.get_local(n, b"rr") != b"new" for n in info.replicas):
            c.get(b"rr")  # served by `home`, repaired in the background
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert c.get(b"rr") == b"new"


@pytest.mark.parametrize("datalet", ["memory", "rocksdb"])
def test_aa_sc_collects_tombstones_only_when_safe(datalet, tmp_path):
    """n3 misses ten deletes. Memory: it comes back empty. RocksDB: it comes back with the
    old values, which block collection until anti-entropy has given it the tombstones."""
    from bespokv.datalets.memory import MemoryDatalet
    from bespokv.datalets.rocksdb import RocksDBDatalet
    from bespokv.testing import ThreadedCluster

    def factory(node, shard):
        if datalet == "memory":
            return MemoryDatalet()
        return RocksDBDatalet(str(tmp_path / node / str(shard)))

    tuning = Tuning(tombstone_grace=0.5, anti_entropy_interval=0.3)
    cfg = make_config(3, replicas=3, shards=1, mode="aa-sc", tuning=tuning)
    with ThreadedCluster(cfg, datalet_factory=factory) as tc, tc.client(retries=20) as c:

        def collected() -> float:
            return sum(tc.run(lambda: n.controlets[0].stats["tombstones_collected"]) for n in tc.nodes.values())

        def stored() -> int:
            return sum(len(tc.call(n.workers[0].scan())) for n in tc.nodes.values())

        c.put_many((b"t%02d" % i, b"v") for i in range(20))
        # One replica down: a delete reaches the other two, whose tombstones must stay.
        tc.call(tc.cluster.stop_node("n3"))
        for i in range(10):
            c.delete(b"t%02d" % i)

        def kept() -> float:
            return sum(tc.run(lambda: n.controlets[0].stats["tombstones_kept"]) for n in tc.nodes.values())

        # Wait until both live replicas have run a collection round over the expired
        # tombstones (grace 0.5 s) and kept them because n3 could not answer.
        wait_until(lambda: kept() >= 20, 30, "a collection round over the expired tombstones")
        assert collected() == 0
        tc.call(tc.cluster.start_node("n3"))
        tc.call(tc.nodes["n3"].wait_ready(30))
        # Back up: once no replica holds a value older than the tombstones (memory: n3 is
        # empty; rocksdb: anti-entropy replaced its old values by the tombstones), they go.
        deadline = time.monotonic() + 20
        while stored() != 3 * 10:
            assert time.monotonic() < deadline, (stored(), collected())
            time.sleep(0.2)
        assert collected() == (20 if datalet == "memory" else 30)
        assert c.get_many(b"t%02d" % i for i in range(20)) == [None] * 10 + [b"v"] * 10
        c.put(b"t00", b"again")  # a new write outranks the collected tombstone everywhere
        assert c.get(b"t00") == b"again"
