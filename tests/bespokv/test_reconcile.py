"""The node's reconciliation decisions (reconcile.py), without a network: what to merge
before a switch, which shards to rejoin, which moves to take, when a move is moot."""

from __future__ import annotations

import dataclasses

from bespokv import reconcile
from bespokv.shardmap import NodeInfo, ShardInfo, ShardMap

NODES = {n: NodeInfo(n, f"127.0.0.1:{i + 1}") for i, n in enumerate(["n1", "n2", "n3", "n4"])}


def _map(*shards: ShardInfo) -> ShardMap:
    return ShardMap({s.id: s for s in shards}, NODES)


def test_only_the_replicas_of_a_frozen_merging_active_active_shard_merge():
    merging = ShardInfo(0, "aa-sc", ("n1", "n2", "n3"), frozen=True, merge=True)
    assert reconcile.switch_merge_asked(merging, "n2")
    assert not reconcile.switch_merge_asked(merging, "n4")  # not a replica
    assert not reconcile.switch_merge_asked(dataclasses.replace(merging, frozen=False), "n2")  # called off
    assert not reconcile.switch_merge_asked(dataclasses.replace(merging, merge=False), "n2")  # still draining
    assert not reconcile.switch_merge_asked(dataclasses.replace(merging, mode="ms-sc"), "n2")  # switched


def test_a_dropped_replica_rejoins_a_short_shard_unless_a_move_or_a_freeze_is_under_way():
    home = _map(*(ShardInfo(i, "ms-sc", ("n1", "n2", "n3")) for i in range(5)))
    now = _map(
        ShardInfo(0, "ms-sc", ("n1", "n2")),  # short, n3 dropped: rejoin
        ShardInfo(1, "ms-sc", ("n1", "n2"), move=("n4", "n2")),  # the move fills it
        ShardInfo(2, "ms-sc", ("n1", "n2"), frozen=True),  # a switch drains it
        ShardInfo(3, "ms-sc", ("n1", "n2", "n4")),  # full (n4 took the place)
        ShardInfo(4, "aa-sc", ("n1", "n2")),  # active-active: not dropped, not rejoined
    )
    assert reconcile.rejoins(home, now, "n3") == {0: 3}
    assert reconcile.rejoins(home, now, "n1") == {}  # a member of them all
    assert not reconcile.may_rejoin(ShardInfo(9, "ms-ec", ()), "n3", 3)  # nobody left to copy from


def test_moves_to_take_and_a_move_made_moot_by_a_rejoin():
    smap = _map(
        ShardInfo(0, "ms-sc", ("n1", "n2", "n3"), move=("n4", "n3")),
        ShardInfo(1, "ms-sc", ("n1", "n2", "n4"), move=("n4", "n3"), frozen=True),
        ShardInfo(2, "ms-sc", ("n1", "n2", "n3"), move=("n1", "n2")),
    )
    assert reconcile.moves_to_take(smap, "n4") == [0, 1]
    end = reconcile.end_moot_move("n4")
    assert end(smap.shard(0)) is None  # n4 is not in it yet: the move goes on
    assert end(smap.shard(1)) == ShardInfo(1, "ms-sc", ("n1", "n2", "n4"))  # done, freeze lifted
    assert end(smap.shard(2)) is None  # not a move to n4
