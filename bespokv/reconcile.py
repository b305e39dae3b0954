"""Decisions a node takes when the shard map or liveness changes, as pure functions.

Each function maps what the node sees (the shard map, who is down, the shards the config
gives it) to what it should do; ``server.py``, ``rejoin.py`` and ``membership.py`` carry
the decisions out (the I/O: copies, merges, compare-and-swaps). Kept free of gRPC and
etcd so that each rule is tested on its own (tests/bespokv/test_reconcile.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from bespokv.shardmap import ShardInfo, ShardMap

__all__ = ["switch_merge_asked", "may_rejoin", "rejoins", "moves_to_take", "end_moot_move"]

MASTER_SLAVE = ("ms-sc", "ms-ec")


def switch_merge_asked(info: ShardInfo, me: str) -> bool:
    """Whether ``me``'s active-active replica of ``info`` must merge the others' values
    before a switch to a master-slave mode (modeswitch.py, decision 0049)."""
    return info.merge and info.frozen and me in info.replicas and info.mode not in MASTER_SLAVE


def may_rejoin(info: ShardInfo, me: str, count: int) -> bool:
    """Whether ``me`` may put itself back into ``info`` (rejoin.py): a master-slave shard
    that dropped it and runs short of ``count`` replicas, with no move or freeze under way.
    A move fills the shard itself (its target takes the dropped replica's place), and a
    member added under a freeze would make the mode switch or the move that froze it fail
    at its last compare; the rejoin waits for either to end."""
    return (
        info.mode in MASTER_SLAVE
        and me not in info.replicas
        and 0 < len(info.replicas) < count
        and info.move is None
        and not info.frozen
    )


def rejoins(home: ShardMap, smap: ShardMap, me: str) -> dict[int, int]:
    """``{shard: replica count}`` for every shard the config (``home``) gives ``me`` that it
    may rejoin now (:func:`may_rejoin`)."""
    out: dict[int, int] = {}
    for h in home.shards_of(me):
        info = smap.shards.get(h.id)
        if info is not None and may_rejoin(info, me, len(h.replicas)):
            out[h.id] = len(h.replicas)
    return out


def moves_to_take(smap: ShardMap, me: str) -> list[int]:
    """The shards whose map asks for a move of a replica to ``me`` (membership.py)."""
    return [s.id for s in smap.shards.values() if s.move is not None and s.move[0] == me]


def end_moot_move(me: str) -> Callable[[ShardInfo], ShardInfo | None]:
    """A shard change (for ``Coordinator.change_shard``) that clears a move to ``me`` once
    ``me`` is a replica already (it came in by a rejoin or a repair: nothing is left to
    copy), with the freeze the move may have set; None when there is no such move."""

    def change(s: ShardInfo) -> ShardInfo | None:
        if s.move is None or s.move[0] != me or me not in s.replicas:
            return None
        return dataclasses.replace(s, move=None, frozen=False)

    return change
