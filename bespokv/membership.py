"""Adding and removing nodes online (``bespokv node add`` / ``bespokv node remove``).

Keys map to shards by a ring of *shards* (shardmap.py), which no membership change
touches; a membership change only moves shard replicas between nodes. So only the shards
whose replica sets change move, one replica at a time, while clients go on reading and
writing every shard:

* **add**: one CAS puts the node into the map (``nodes/<id>``); the node starts and holds
  its lease; then, while some node holds more replicas than the even share
  (``ceil(replicas x shards / nodes)``), one of its replicas moves to the new node.
* **remove**: each replica of the node moves to the node with the fewest replicas that
  does not replicate that shard yet; then one CAS takes the node out of the map.

One move of shard S from node F to node T (:func:`move_replica` sets ``move = (T, F)`` on
the shard by CAS; node T runs :func:`take_over`, which the map tells it to):

1. T empties its replica of S and pulls a full copy from S's source (the chain's tail or
   the master, as rejoin.py does), then the entries written meanwhile: online.
2. T freezes S (modeswitch.py: new writes refused, not applied, retried by the clients)
   and waits until it is drained (every replica at the same sequence number, no write
   running), then pulls again: T now holds exactly what every replica holds.
3. One CAS, only if S is still the frozen entry: F out, T appended at the end (the new
   tail of a chain), the freeze and the move cleared. T's upstream has nothing to send it,
   so it serves at once; F stops serving S when it installs the map (its data stays,
   unused, until a later full copy overwrites it).

A failure in 2 or 3 lifts the freeze; T retries the move from 1 while the map still asks
for it. If T dies (its lease expires), the shard's other replicas clear the move and any
freeze it left, and the driver reports the move as cancelled. If F dies, a master-slave
shard fails over without it, which ends T's drain at once (the shard changed), and T
starts over on the shard as it is now, F already out. If T entered the shard another way
first (a rejoin or a repair), it clears the move as done (reconcile.end_moot_move); the
driver plans each move of ``add`` on the map as it is then.

Active-active shards move the same way, except that step 1 and the pull of step 2 are
merges: T empties its replica and merges every replica's versioned values (``Peer.Export``,
tombstones included, newest version wins; every replica must answer, since an aa-ec write
may be on one replica only), once online and once more under the freeze. Writes
acknowledged in the moment between the swap and T's controlet opening reach T by the
other replicas' pushes or anti-entropy (aa-ec reads are eventually consistent anyway; an
aa-sc write is on a majority).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable

from bespokv import representation, versioned
from bespokv.config import Tuning
from bespokv.controlets.catchup import pull
from bespokv.controlets.replstore import FORMAT_KEY, ReplicatedStore
from bespokv.coordinator import Coordinator
from bespokv.datalets.worker import DataletWorker
from bespokv.errors import InvalidArgumentError, UnavailableError
from bespokv.modeswitch import freeze, thaw, wait_drained
from bespokv.peers import PeerPool
from bespokv.proto import bespokv_pb2 as pb
from bespokv.reconcile import end_moot_move
from bespokv.rejoin import source_of
from bespokv.shardmap import ShardInfo, ShardMap

__all__ = ["take_over", "move_replica", "plan_add", "plan_remove", "add_node", "remove_node"]

log = logging.getLogger(__name__)

MASTER_SLAVE = ("ms-sc", "ms-ec")
#: Seconds a drain (step 2) may take before the move lifts the freeze and starts over.
DRAIN_TIMEOUT = 10.0
#: Seconds one replica's export may stream (active-active moves).
EXPORT_TIMEOUT = 60.0


async def take_over(
    *,
    coordinator: Coordinator,
    peers: PeerPool,
    me: str,
    shard: int,
    worker: Callable[[], DataletWorker],
    tuning: Tuning,
    observe: Callable[[int], None] = lambda ts: None,
) -> bool:
    """Steps 1-3 (module doc) on node ``me``, the move's target. True once ``me`` has
    taken the donor's place; False when the map no longer asks for the move.
    ``observe(ts)``: the node's clock sees the newest version merged (active-active)."""
    info = coordinator.shard_map().shard(shard)
    if info.move is None or info.move[0] != me:
        return False
    if me in info.replicas:  # came in another way (a rejoin, a repair): nothing to copy
        if await coordinator.change_shard(shard, end_moot_move(me)) is not None:
            log.warning("node %s: already a replica of shard %s; its move from %s is done", me, shard, info.move[1])
        return True
    donor = info.move[1]
    # A frozen shard with a move is this move's own earlier attempt: a mode switch does not
    # start on a moving shard, and a move is not asked for on a frozen one.
    master_slave = info.mode in MASTER_SLAVE
    w = worker()
    store = ReplicatedStore(w, tuning)
    if master_slave:
        await store.begin_copy()
        await pull(store, peers, shard, source_of(info), me)  # 1: the full copy, online
        await pull(store, peers, shard, source_of(info), me)  # what was written meanwhile
    else:
        await w.clear()
        await _merge_replicas(peers, _live(coordinator, info, donor), w, observe)  # 1: online
    await coordinator.change_shard(shard, freeze)  # 2
    frozen = coordinator.shard_map().shard(shard)
    try:
        if frozen.move != (me, donor) or not frozen.frozen:
            raise UnavailableError(f"shard {shard} changed while {me} copied it")
        # A failover in the drain (the donor died: master-slave drops it) fails the drain
        # at once, so the freeze is lifted within the failover, not after DRAIN_TIMEOUT.
        await wait_drained(
            peers, frozen, time.monotonic() + DRAIN_TIMEOUT,
            current=lambda: coordinator.shard_map().shard(shard),
            skip=lambda: set() if master_slave else {donor} & coordinator.down(),
        )
        if master_slave:
            await pull(store, peers, shard, source_of(frozen), me)  # exact now
        else:  # newest version wins, so a second full pass adds what came meanwhile
            await _merge_replicas(peers, _live(coordinator, frozen, donor), w, observe)

        def swap(s: ShardInfo) -> ShardInfo | None:
            if s != frozen:
                return None
            replicas = (*(r for r in s.replicas if r != donor), me)
            return dataclasses.replace(s, replicas=replicas, frozen=False, move=None)

        new = await coordinator.change_shard(shard, swap)
        if new is None:
            raise UnavailableError(f"shard {shard} changed while it drained for the move to {me}")
    except BaseException:
        await asyncio.shield(coordinator.change_shard(shard, thaw))
        raise
    log.warning(
        "node %s: took over shard %s from %s at seq %d: %s (epoch %d)",
        me, shard, donor, store.seq, ",".join(new.shard(shard).replicas), new.epoch,
    )
    return True


def _live(coordinator: Coordinator, info: ShardInfo, donor: str) -> ShardInfo:
    """``info`` without the donor while its lease is gone (a dead replica replaced by
    repair.py, or ``node remove`` of a dead node): the merges and the drain ask only the
    replicas that can answer. An active-active donor only: a master-slave shard dropped
    its dead replicas at the failover."""
    if donor not in coordinator.down() or info.mode in MASTER_SLAVE:
        return info
    return dataclasses.replace(info, replicas=tuple(r for r in info.replicas if r != donor))


async def _merge_replicas(
    peers: PeerPool, info: ShardInfo, w: DataletWorker, observe: Callable[[int], None]
) -> None:
    """Merge every replica's versioned values (``Peer.Export``, tombstones included) into
    ``w``, newest version winning. Every replica listed must answer: an aa-ec write may be
    on one replica only (a dead donor is not listed: see _live)."""
    for node in info.replicas:
        call = peers.peer(node).Export(
            pb.ExportRequest(shard=info.id), timeout=EXPORT_TIMEOUT, metadata=peers.metadata
        )
        async for chunk in call:
            pairs = [(kv.key, kv.value) for kv in chunk.pairs]
            if pairs:
                observe(max(versioned.version_of(v)[0] for _, v in pairs))
            await w.run(representation.merge_newer, w.inner, pairs)
    await w.write([(FORMAT_KEY, representation.VERSIONED)])


def plan_add(smap: ShardMap, node: str) -> list[tuple[int, str]]:
    """``(shard, donor)`` moves that give ``node`` its even share (``floor(replicas x shards
    / nodes)``) of replicas, each taken from the most loaded node at the time
    (a non-head before a head), only from nodes holding at least two more than it."""
    load = smap.load()
    total = sum(len(s.replicas) for s in smap.shards.values())
    share = total // max(1, len(smap.nodes))
    mine = {s.id for s in smap.shards.values() if node in s.replicas}
    moves: list[tuple[int, str]] = []
    while load[node] < share:
        candidates = [
            (load[r], i != 0, s.id, r)
            for s in smap.shards.values()
            if s.id not in mine and s.move is None
            for i, r in enumerate(s.replicas)
            if load[r] >= load[node] + 2
        ]
        if not candidates:
            break
        _, _, sid, donor = max(candidates)
        moves.append((sid, donor))
        mine.add(sid)
        load[donor] -= 1
        load[node] += 1
    return moves


def plan_remove(smap: ShardMap, node: str) -> list[tuple[int, str]]:
    """``(shard, target)`` moves that take every replica off ``node``: each to the least
    loaded other node that does not replicate the shard. Raises InvalidArgumentError when
    no node can take one."""
    load = smap.load()
    del load[node]
    moves: list[tuple[int, str]] = []
    for s in smap.shards.values():
        if node not in s.replicas:
            continue
        candidates = [n for n in load if n not in s.replicas]
        if not candidates:
            raise InvalidArgumentError(f"no node can take node {node}'s replica of shard {s.id} (too few nodes)")
        target = min(candidates, key=lambda n: (load[n], n))
        moves.append((s.id, target))
        load[target] += 1
    return moves


async def move_replica(coordinator: Coordinator, shard: int, to: str, from_: str, timeout: float) -> bool:
    """Ask for one move by CAS and wait until ``to`` has taken ``from_``'s place, or is in
    the shard by another way (a rejoin or a repair put it there first: the move is then
    moot, and ``to`` clears it): True. False when there was nothing to move (``from_`` had
    left the shard before the ask, a failover dropped it)."""
    seen: list[ShardInfo] = []

    def ask(s: ShardInfo) -> ShardInfo | None:
        seen.append(s)
        if to in s.replicas or from_ not in s.replicas:
            return None
        if s.move is not None and s.move != (to, from_):
            raise UnavailableError(f"shard {shard} is already moving {s.move[1]} -> {s.move[0]}")
        if s.frozen and s.move is None:
            raise UnavailableError(f"shard {shard} is frozen by a mode switch; move it after")
        return dataclasses.replace(s, move=(to, from_))

    if await coordinator.change_shard(shard, ask) is None:
        s = seen[-1]  # as etcd had it
        if to in s.replicas:
            return True
        if from_ not in s.replicas:
            return False
    deadline = time.monotonic() + timeout
    while True:
        s = coordinator.shard_map().shard(shard)
        if to in s.replicas and (from_ not in s.replicas or s.move is None):
            return True
        if s.move is None:
            raise UnavailableError(f"shard {shard}: the move {from_} -> {to} was cancelled ({to} went down?)")
        if time.monotonic() > deadline:
            raise UnavailableError(
                f"shard {shard}: the move {from_} -> {to} did not finish in {timeout:g} s (it goes on; "
                f"replicas now {','.join(s.replicas)})"
            )
        await asyncio.sleep(0.05)


async def add_node(
    coordinator: Coordinator, node: str, address: str, *, start: Callable[[], None] | None = None,
    timeout: float = 120.0,
) -> list[tuple[int, str]]:
    """Add ``node`` at ``address`` to the map, call ``start()`` (start its process), wait
    for its lease, then move its share of replicas to it. Returns the moves made."""
    smap = coordinator.shard_map()
    if node in smap.nodes:
        raise InvalidArgumentError(f"node {node} is already a member")
    await coordinator.change_nodes(add={node: address})
    if start is not None:
        start()
    deadline = time.monotonic() + timeout
    while node in coordinator.down():
        if time.monotonic() > deadline:
            raise UnavailableError(f"node {node} did not come up (no lease) within {timeout:g} s")
        await asyncio.sleep(0.05)
    # Planned again after each move: a failover meanwhile changes the loads, and the new
    # node may enter a shard left short by a rejoin (its config gives it the shard).
    moves: list[tuple[int, str]] = []
    while plan := plan_add(coordinator.shard_map(), node):
        shard, donor = plan[0]
        if await move_replica(coordinator, shard, node, donor, max(1.0, deadline - time.monotonic())):
            moves.append((shard, donor))
        elif time.monotonic() > deadline:
            raise UnavailableError(f"node {node}: no move could be made within {timeout:g} s")
        else:
            await asyncio.sleep(0.05)  # the map changed under the plan: plan again on the new one
    return moves


async def remove_node(coordinator: Coordinator, node: str, *, timeout: float = 120.0) -> list[tuple[int, str]]:
    """Move every replica off ``node``, then take it out of the map. The caller stops its
    process afterwards. Returns the moves made."""
    smap = coordinator.shard_map()
    if node not in smap.nodes:
        raise InvalidArgumentError(f"node {node} is not a member")
    moves = plan_remove(smap, node)
    deadline = time.monotonic() + timeout
    for shard, target in moves:
        await move_replica(coordinator, shard, target, node, max(1.0, deadline - time.monotonic()))
    await coordinator.change_nodes(remove=node)
    return moves
