"""Switching a shard's mode while the cluster runs (``bespokv mode --shard S --to MODE``).

The switch is driven from outside the nodes (the CLI, a test, an operator's program) through
the coordinator (etcd: every step is one compare-and-swap on the map epoch) and the nodes'
``Admin.NodeStats``:

1. **Freeze.** One CAS marks the shard ``frozen`` (a new shard epoch: requests routed with
   the old map are fenced, so every client and node moves to the frozen one). A node that
   has the frozen map refuses every new write of the shard with OVERLOADED (not applied;
   the client retries after a backoff). Reads go on in the old mode.
2. **Drain.** Wait until every replica has installed the frozen map, runs no write of the
   shard (``writes_in_flight`` 0: a write that entered before the freeze has finished),
   and, in the master-slave modes, every replica holds the head's sequence number (the
   chain or the backups have applied everything the head numbered, acknowledged or not).
   A replica that does not answer fails the switch: the freeze is lifted again (one CAS),
   the shard keeps its mode, and :class:`~bespokv.errors.UnavailableError` says why.
   A driver that dies here (killed, its machine lost) leaves the shard frozen: the driver
   holds a lease for the whole switch (``switch/<shard>`` in etcd_coordinator.py), and
   once it expires the shard's replicas lift the freeze (:func:`orphaned`).
3. **Merge** (aa -> ms only, decision 0049). One CAS sets ``merge`` on the drained entry;
   every replica merges every other one's versioned values into its own and stores a
   marker naming the history the shard will start (registers.py). Wait until each
   reports it (``merged_epoch``). As in 2, a replica that does not answer fails the switch.
4. **Switch.** One CAS sets the new mode and lifts the freeze, only if the shard is still
   exactly the drained (merging) one (a failover in between fails the switch as in 2).
   Each node, on installing that map, takes the shard's old controlet out of service in
   the same step (calls get OVERLOADED, retried), stops it, converts the replica's stored
   form on its worker thread (``representation.py``: ms -> aa versions every value with
   the replica's position, which the drain made equal on every replica; aa -> ms rewrites
   the merged values plain with the marker's history at seq 0, the same on every replica,
   in one batch) and starts the new controlet. A replica that dies from here on is an
   ordinary failure of the new mode (failover, rejoin); one that restarts before the
   failover converts as it opens.
5. **Serving.** Wait until every replica the map lists now reports the shard in the new
   mode and ready.

So no acknowledged write is lost (the drain leaves none in flight, and every replica holds
the same writes before its form changes), reads pause only for the conversion and the new
controlet's start, and writes pause from the freeze to the new controlet's start (both
measured in docs/cluster.md). aa-ec -> aa-sc goes through ms-sc: LWW replicas may differ,
and only the merge of every replica makes them equal before quorum reads start counting
on a majority.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from bespokv.config import normalize_mode
from bespokv.coordinator import Coordinator
from bespokv.errors import UnavailableError, UnsupportedError
from bespokv.peers import PeerPool
from bespokv.proto import bespokv_pb2 as pb
from bespokv.shardmap import ShardInfo

__all__ = ["SwitchReport", "switch_mode", "freeze", "thaw", "orphaned", "wait_drained"]

#: Seconds between two polls of the replicas' status.
POLL = 0.05


@dataclass(frozen=True)
class SwitchReport:
    """One switch: the shard epochs of its two map changes and how long its steps took
    (seconds from the freeze)."""

    shard: int
    before: str
    after: str
    freeze_epoch: int
    switch_epoch: int
    drained_s: float
    serving_s: float


async def switch_mode(
    coordinator: Coordinator, peers: PeerPool, shard: int, to: str, *, timeout: float = 60.0
) -> list[SwitchReport]:
    """Switch ``shard`` to mode ``to`` (steps in the module doc); one report per switch
    made (none when the shard already runs ``to``; two for aa-ec -> aa-sc). Raises
    UnavailableError when a step does not finish within ``timeout`` seconds (the shard
    then keeps its old mode, unless the map already changed it: the message says which),
    UnsupportedError for a coordinator whose map is fixed."""
    to = normalize_mode(to)
    if not coordinator.dynamic:
        raise UnsupportedError("a live mode switch needs etcd coordination (this map is fixed); switch offline")
    async with coordinator.switch_lease(shard, to, wait=timeout):  # one driver at a time
        info = coordinator.shard_map().shard(shard)
        if info.move is not None:
            raise UnavailableError(f"shard {shard} is moving a replica ({info.move[1]} -> {info.move[0]}); switch it after")
        if info.mode == to and not info.frozen:
            return []
        if info.mode == "aa-ec" and to == "aa-sc":
            first = await _switch_once(coordinator, peers, shard, "ms-sc", timeout)
            return [first, await _switch_once(coordinator, peers, shard, "aa-sc", timeout)]
        return [await _switch_once(coordinator, peers, shard, to, timeout)]


async def _switch_once(coordinator: Coordinator, peers: PeerPool, shard: int, to: str, timeout: float) -> SwitchReport:
    start = time.monotonic()
    deadline = start + timeout

    await coordinator.change_shard(shard, freeze)  # None: frozen already (a switch resumed)
    frozen = coordinator.shard_map().shard(shard)
    before = frozen.mode
    try:
        if before == to:  # a resumed switch whose mode change had landed: just lift the freeze
            raise _Abort("already switched")
        await wait_drained(peers, frozen, deadline, current=lambda: coordinator.shard_map().shard(shard))
        drained = time.monotonic()
        if before.startswith("aa") and to.startswith("ms"):
            frozen = await _merge(coordinator, peers, frozen, deadline)

        def switch(s: ShardInfo) -> ShardInfo | None:
            if s != frozen:
                return None
            return dataclasses.replace(s, mode=to, frozen=False, merge=False)

        new = await coordinator.change_shard(shard, switch)
        if new is None:
            raise UnavailableError(
                f"shard {shard} changed while it drained for the mode switch (a failover, or its freeze lifted); "
                f"it stays {before}"
            )
    except BaseException as exc:
        await asyncio.shield(coordinator.change_shard(shard, thaw))
        if isinstance(exc, _Abort):
            return SwitchReport(shard, before, to, frozen.epoch, frozen.epoch, 0.0, time.monotonic() - start)
        raise
    switched = new.shard(shard)
    await _wait_serving(coordinator, peers, switched, deadline)
    return SwitchReport(shard, before, to, frozen.epoch, switched.epoch, drained - start, time.monotonic() - start)


async def _merge(coordinator: Coordinator, peers: PeerPool, drained: ShardInfo, deadline: float) -> ShardInfo:
    """aa -> ms, step 2b: one CAS asks the drained shard's replicas to merge each other's
    values (``merge``); wait until each has (its status's ``merged_epoch``). Returns the
    merging entry, which the switch's CAS must find unchanged."""

    def ask(s: ShardInfo) -> ShardInfo | None:
        return dataclasses.replace(s, merge=True) if s == drained and not s.merge else None

    await coordinator.change_shard(drained.id, ask)  # None: asked already (a switch resumed)
    merging = coordinator.shard_map().shard(drained.id)
    if merging != dataclasses.replace(drained, merge=True, epoch=merging.epoch):
        raise UnavailableError(f"shard {drained.id} changed while it drained for the mode switch; it stays {drained.mode}")
    while True:
        why: list[str] = []
        for node, st in (await _stats(peers, merging.replicas)).items():
            s = st if isinstance(st, str) else _shard_status(st, merging.id)
            if isinstance(s, str):
                why.append(s)
            elif s is None or s.info.get("merged_epoch") != str(merging.epoch):
                why.append(f"{node} has not merged the other replicas' values yet")
        if not why:
            return merging
        if time.monotonic() > deadline:
            raise UnavailableError(f"shard {merging.id} did not merge for the mode switch: {'; '.join(why)}; "
                                   f"it stays {merging.mode}")
        await asyncio.sleep(POLL)


def freeze(s: ShardInfo) -> ShardInfo | None:
    """The shard frozen (a ``change_shard`` function); None if it is already."""
    return None if s.frozen else dataclasses.replace(s, frozen=True)


def thaw(s: ShardInfo) -> ShardInfo | None:
    """The freeze (and a merge it asked for) lifted (a ``change_shard`` function); None if
    there is none."""
    return dataclasses.replace(s, frozen=False, merge=False) if s.frozen else None


def orphaned(s: ShardInfo, switching: set[int]) -> bool:
    """Whether ``s`` is frozen by a switch whose driver is gone: no replica move froze it
    (membership.py clears its own) and no driver holds its switch lease. Its replicas then
    lift the freeze (server.py), so a ``bespokv mode`` killed between the freeze and the
    switch leaves the shard writable in its old mode. A driver that merely lost its lease
    for a while finds the shard changed and fails its switch (step 3's compare)."""
    return s.frozen and s.move is None and s.id not in switching


class _Abort(Exception):
    pass


async def _stats(peers: PeerPool, nodes: tuple[str, ...]) -> dict[str, pb.NodeStatus | str]:
    async def one(node: str) -> pb.NodeStatus | str:
        try:
            return await peers.admin(node).NodeStats(pb.NodeStatsRequest(), timeout=2.0, metadata=peers.metadata)
        except grpc.aio.AioRpcError as exc:
            return f"{node}: {exc.code().name} {exc.details()}"

    return dict(zip(nodes, await asyncio.gather(*(one(n) for n in nodes))))


def _shard_status(st: pb.NodeStatus, shard: int) -> pb.ShardStatus | None:
    return next((s for s in st.shards if s.shard == shard), None)


async def wait_drained(
    peers: PeerPool,
    frozen: ShardInfo,
    deadline: float,
    *,
    current: Callable[[], ShardInfo] | None = None,
    skip: Callable[[], set[str]] = set,
) -> None:
    """Until every replica has the frozen map, runs no write of the shard, and (master-slave)
    holds the head's sequence number. ``current()``: the shard as the map has it now; when
    it is no longer ``frozen`` (a failover dropped a replica, the freeze was lifted), the
    drain fails at once instead of waiting for a dead replica until ``deadline``: the
    compare that follows a drain would fail anyway. ``skip()``: replicas not to wait for
    (an active-active move's donor while it is down)."""
    while True:
        if current is not None and current() != frozen:
            raise UnavailableError(f"shard {frozen.id} changed while it drained (a failover, or its freeze lifted)")
        why: list[str] = []
        seqs: dict[str, int] = {}
        left_out = skip()
        nodes = tuple(r for r in frozen.replicas if r not in left_out)
        for node, st in (await _stats(peers, nodes)).items():
            if isinstance(st, str):
                why.append(st)
                continue
            s = _shard_status(st, frozen.id)
            if st.counters.get("map_epoch", 0) < frozen.epoch or s is None:
                why.append(f"{node} has not installed epoch {frozen.epoch}")
            elif int(s.info.get("writes_in_flight", "0")):
                why.append(f"{node} runs {s.info['writes_in_flight']} writes")
            elif frozen.mode.startswith("ms"):
                if not s.ready:
                    why.append(f"{node} is catching up")
                seqs[node] = s.seq
        if not why and frozen.mode.startswith("ms") and len(set(seqs.values())) > 1:
            why.append(f"replicas at different seqs {seqs}")
        if not why:
            return
        if time.monotonic() > deadline:
            raise UnavailableError(f"shard {frozen.id} did not drain for the mode switch: {'; '.join(why)}; it stays {frozen.mode}")
        await asyncio.sleep(POLL)


async def _wait_serving(coordinator: Coordinator, peers: PeerPool, switched: ShardInfo, deadline: float) -> None:
    """Until every replica of the shard serves it in the new mode: the replicas of the map
    as it is now, since a replica that died after the switch is dropped by the new mode's
    failover and comes back by its rejoin."""
    while True:
        why: list[str] = []
        info = coordinator.shard_map().shards.get(switched.id, switched)
        if info.mode != switched.mode:
            raise UnavailableError(f"shard {info.id} switched to {switched.mode}, then to {info.mode} meanwhile")
        for node, st in (await _stats(peers, info.replicas)).items():
            if isinstance(st, str):
                why.append(st)
                continue
            s = _shard_status(st, info.id)
            if s is None or s.mode != info.mode or not s.ready:
                why.append(f"{node} does not serve it as {info.mode} yet")
        if not why:
            return
        if time.monotonic() > deadline:
            raise UnavailableError(
                f"shard {info.id} switched to {info.mode} (epoch {info.epoch}) but not every replica serves yet: "
                f"{'; '.join(why)}"
            )
        await asyncio.sleep(POLL)
