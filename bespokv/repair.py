"""Re-replication: a shard that has run short of a replica for ``Tuning.replace_after``
seconds gets a new one on a live node, with no command.

A replica goes missing when its node's lease expires (killed, paused, cut off, its disk
lost). A master-slave shard drops it at the failover and then runs with fewer replicas
than its config gives it; an active-active shard keeps the dead replica in its map. Either
way the shard is one or two failures closer to losing acknowledged writes (ms) or to
standing still (aa-sc). A node that comes back within ``replace_after`` puts itself back
(rejoin.py) and nothing is copied. After that, the live node with the fewest replicas
that holds none of the shard (ties by id) adds one:

* **master-slave**: as a returning replica does (rejoin.py): a full copy from the
  shard's source, the entries written meanwhile, then one CAS appends it, only if the
  shard is unchanged and still short. It is the chain's new tail (or a new backup).
* **active-active**: a move from the dead replica (membership.py), whose merges and drain
  leave the dead one out while it is down. aa-sc loses nothing: every acknowledged write
  is on a majority, so on a live replica. aa-ec: writes that only the dead replica had are
  lost with it, as they are without a replacement (docs/cluster.md).

Every node computes the same choice from the same map, so one node copies; two that saw
different maps both try, and the CAS makes the second a no-op. A replaced node that
returns finds its shards full and serves none of them; its data stays on disk, unused,
until a later full copy overwrites it (``bespokv node remove`` takes it out of the map).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from bespokv.shardmap import ShardInfo, ShardMap

__all__ = ["Shortfall", "shortfalls", "replacement", "ask_move"]

MASTER_SLAVE = ("ms-sc", "ms-ec")


@dataclasses.dataclass(frozen=True)
class Shortfall:
    """Shard ``shard`` lacks a replica: ``dead`` is the dead replica an active-active shard
    still lists (replaced by a move); None: a master-slave shard short of its count
    (a replica is appended)."""

    shard: int
    dead: str | None


def shortfalls(smap: ShardMap, counts: Mapping[int, int], down: set[str]) -> list[Shortfall]:
    """The shards of ``smap`` short of a replica now: master-slave ones with fewer replicas
    than ``counts`` gives them (the config's), active-active ones listing a node in
    ``down``. Shards that are frozen (a mode switch) or moving are left to that first."""
    out: list[Shortfall] = []
    for s in smap.shards.values():
        if s.frozen or s.move is not None or not s.replicas:
            continue
        if s.mode in MASTER_SLAVE:
            if len(s.replicas) < counts.get(s.id, len(s.replicas)):
                out.append(Shortfall(s.id, None))
        else:
            dead = next((r for r in s.replicas if r in down), None)
            if dead is not None:
                out.append(Shortfall(s.id, dead))
    return out


def replacement(smap: ShardMap, info: ShardInfo, down: set[str]) -> str | None:
    """The node that adds the replica ``info`` lacks: the live member with the fewest
    replicas that holds none of this shard, ties broken by id. None: no node can."""
    load = smap.load()
    candidates = [n for n in smap.nodes if n not in down and n not in info.replicas]
    return min(candidates, key=lambda n: (load[n], n), default=None)


def ask_move(me: str, dead: str, down: Callable[[], set[str]]) -> Callable[[ShardInfo], ShardInfo | None]:
    """A shard change (for ``Coordinator.change_shard``) asking for the move of ``dead``'s
    replica to ``me``, only while the shard still lists ``dead``, ``down()`` still has it,
    and nothing else is under way on the shard."""

    def change(s: ShardInfo) -> ShardInfo | None:
        if dead not in s.replicas or dead not in down() or me in s.replicas or s.move is not None or s.frozen:
            return None
        return dataclasses.replace(s, move=(me, dead))

    return change
