"""A bespokv node: one process serving its shard replicas over gRPC (``grpc.aio``).

The node builds one datalet and one controlet per shard replica it hosts (from the
coordinator's shard map), and serves four services on one port: ``bespokv.v1.KV``
(clients), ``bespokv.v1.Admin``, ``bespokv.v1.Peer`` (replication) and the standard
``grpc.health.v1.Health``.

Any node accepts any KV request: it validates it, finds the key's shard, and either runs
it (it hosts the replica that must serve it) or forwards it to the node that must
(forwarding.py: batched, with a hop limit).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from bespokv import opcodec, representation
from bespokv.config import ClusterConfig, Limits, TlsConfig
from bespokv.controlets import ShardContext, make_controlet
from bespokv.controlets.base import Controlet
from bespokv.controlets.registers import VersionedControlet
from bespokv.coordinator import Coordinator, make_coordinator
from bespokv.datalets import DataletFactory, make_datalet
from bespokv.datalets.base import RESERVED_PREFIX, Datalet, Op
from bespokv.datalets.worker import DataletWorker
from bespokv.errors import (
    InvalidArgumentError,
    OverloadedError,
    UnavailableError,
    WrongShardError,
    from_exception,
)
from bespokv.forwarding import HOPS_HEADER, Forwarder, check_hops, hops_of
from bespokv.hlc import HybridClock
from bespokv.merge import merge_chunks
from bespokv.peers import PeerPool, rpc_error
from bespokv.proto import bespokv_pb2 as pb
from bespokv.membership import take_over
from bespokv.modeswitch import orphaned, thaw
from bespokv.reconcile import moves_to_take, rejoins, switch_merge_asked
from bespokv.rejoin import rejoin
from bespokv.repair import ask_move, replacement, shortfalls
from bespokv.routing import read_node, write_node
from bespokv.security import TokenAuthInterceptor, certificate_name, server_credentials
from bespokv.service import check_stream, generic_handler
from bespokv.shardmap import ShardInfo, ShardMap, node_number, writer_id

__all__ = ["Node"]

log = logging.getLogger(__name__)

#: Seconds a node with an older map than a request's waits for its watch to catch up.
EPOCH_WAIT = 1.0

#: The epoch of the request being served (0: the sender did not say); read by shard_of.
_REQUEST_EPOCH: contextvars.ContextVar[int] = contextvars.ContextVar("bespokv_request_epoch", default=0)


def _hops(context: grpc.aio.ServicerContext) -> int:
    hops, epoch = hops_of(context.invocation_metadata())
    _REQUEST_EPOCH.set(epoch)
    return hops


class Node:
    """One node of a cluster. ``await start()``, serve, ``await stop()``."""

    def __init__(
        self,
        config: ClusterConfig,
        node_id: str,
        *,
        coordinator: Coordinator | None = None,
        datalet_factory: DataletFactory | None = None,
    ) -> None:
        self.config = config
        self.node_id = node_id
        self.node_config = config.node(node_id)
        self.coordinator = coordinator or make_coordinator(config, node_id)
        self._datalet_factory = datalet_factory
        self.limits: Limits = config.limits
        self.clock = HybridClock()
        #: Tie-breaker in the versions this process writes (aa modes): the node id mixed
        #: with a random incarnation, so versions stay unique across restarts even if a
        #: restarted node picks a timestamp it used before the crash.
        self.writer_id = writer_id(node_id, os.urandom(8))
        self.controlets: dict[int, Controlet] = {}
        self.datalets: dict[int, Datalet] = {}
        #: each shard replica's datalet behind its own thread (see datalets/worker.py)
        self.workers: dict[int, DataletWorker] = {}
        self.counters: Counter[str] = Counter()
        self.started = time.monotonic()
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self.health = health.aio.HealthServicer()
        self._stopping = False
        self._map_lock = asyncio.Lock()
        #: set (and replaced) whenever the coordinator installs a new map (WatchShardMap)
        self.map_changed = asyncio.Event()
        self._alive: set[str] | None = None  # last liveness set seen (etcd coordinator)
        self._background: set[asyncio.Task[None]] = set()
        #: the shards the config gives this node (a dropped replica rejoins these)
        self._home = ShardMap.from_config(config)
        self._rejoining: set[int] = set()
        self._thawing: set[int] = set()
        self._moving: set[int] = set()
        #: when this node first saw each shard short of a replica (repair.py)
        self._short_since: dict[int, float] = {}
        #: replicas whose controlet is being replaced for a new mode (a live mode switch):
        #: out of ``controlets`` from the moment the map changes the mode, so no request
        #: reaches the old controlet after that; calls get OVERLOADED (not applied, retried)
        self._switching: dict[int, Controlet] = {}
        #: writes of each shard executing here (a live mode switch waits for none)
        self._writes_in_flight: Counter[int] = Counter()
        self.peers: PeerPool
        self.forwarder: Forwarder
        #: the RESP front end serving this node (bespokv/resp), if one was started
        self.resp: Any = None
        self._handlers: opcodec.Handlers = {
            "get": self.do_get, "put": self.do_put, "delete": self.do_delete, "batch": self.do_batch, "cas": self.do_cas,
        }

    @property
    def shard_map(self) -> ShardMap:
        return self.coordinator.shard_map()

    @property
    def tls(self) -> TlsConfig | None:
        """What this node serves and calls other nodes with (its own certificate, if any)."""
        return self.config.tls_for(self.node_id)

    @property
    def address(self) -> str:
        if self.node_config.listen:  # reached through something that forwards to us
            return self.node_config.address
        host = self.node_config.address.rsplit(":", 1)[0]
        return f"{host}:{self.port}"

    # -- lifecycle --------------------------------------------------------------------------

    def _make_datalet(self, shard: int) -> Datalet:
        if self._datalet_factory is not None:
            from bespokv.datalets.base import ensure_datalet

            return ensure_datalet(self._datalet_factory(self.node_id, shard))
        spec = self.config.datalet_for(self.node_id)
        return make_datalet(spec, node=self.node_id, shard=shard, base_dir=self.config.base_dir)

    def _worker(self, shard: int) -> DataletWorker:
        """The shard replica's datalet behind its thread, opened on first use."""
        worker = self.workers.get(shard)
        if worker is None:
            datalet = self._make_datalet(shard)
            self.datalets[shard] = datalet
            worker = self.workers[shard] = DataletWorker(
                datalet, f"datalet-{self.node_id}-{shard}", thread=self.config.tuning.datalet_thread and getattr(datalet, "blocking", True)
            )
        return worker

    def _open_replica(self, info: ShardInfo, stored_versions: bool | None = None) -> Controlet:
        """The controlet of ``info`` on the replica's datalet. ``stored_versions`` None:
        convert the stored form here, on the loop (only before any call reached the
        worker; a live switch converts on the worker and passes the result)."""
        worker = self._worker(info.id)
        if stored_versions is None:
            # The stored form follows the mode (an offline mode switch; representation.py).
            stored_versions = representation.open_for(worker.inner, info.mode)
        ctx = ShardContext(
            node_id=self.node_id,
            node_number=node_number(self.node_id),
            writer_id=self.writer_id,
            shard=info,
            datalet=worker,
            peers=self.peers,
            clock=self.clock,
            tuning=self.config.tuning,
            limits=self.limits,
            epoch=info.epoch,
            can_serve=self.coordinator.can_serve,
            stored_versions=stored_versions,
        )
        c = self.controlets[info.id] = make_controlet(ctx)
        return c

    async def start(self) -> None:
        await self.coordinator.start()
        smap = self.shard_map
        # Nodes call each other with the peer token when there is one (see security.py).
        peer_token = self.config.peer_token or self.config.token
        self.peers = PeerPool(smap, token=peer_token, tls=self.tls, limits=self.limits, tuning=self.config.tuning)
        self.forwarder = Forwarder(
            self.peers, timeout=self.config.tuning.request_timeout * 2, epoch=lambda: self.shard_map.epoch
        )
        for info in smap.shards_of(self.node_id):
            self._open_replica(info)

        interceptors = (
            [TokenAuthInterceptor(self.config.token, self.config.peer_token)]
            if self.config.token or self.config.peer_token
            else []
        )
        opts = [
            ("grpc.max_receive_message_length", self.limits.max_request_bytes),
            ("grpc.max_send_message_length", self.limits.max_request_bytes),
            ("grpc.so_reuseport", 0),
            # Both limits: the hard one alone does not lift the soft one's cancellations.
            ("grpc.server.max_pending_requests", self.config.tuning.max_pending_calls),
            ("grpc.server.max_pending_requests_hard_limit", self.config.tuning.max_pending_calls),
        ]
        server = grpc.aio.server(interceptors=interceptors, options=opts)
        server.add_generic_rpc_handlers(
            (
                generic_handler("KV", _KV(self)),
                generic_handler("Admin", _Admin(self)),
                generic_handler("Peer", _Peer(self)),
            )
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        addr = self.node_config.listen or self.node_config.address
        if self.tls is not None:
            self.port = server.add_secure_port(addr, server_credentials(self.tls))
        else:
            self.port = server.add_insecure_port(addr)
        if self.port == 0:
            raise UnavailableError(f"cannot bind {addr}")
        await server.start()
        self.server = server
        for c in self.controlets.values():
            await c.start()
        await self._merge_for_switches(smap)
        self.coordinator.subscribe(self._on_map)
        self.coordinator.subscribe_alive(self._on_alive)
        self._lift_orphaned_freezes(self.shard_map)  # a driver that died while this node was down
        self._rejoin_missing()
        self._start_moves()
        if self.coordinator.dynamic and self.config.tuning.replace_after > 0:
            self._spawn(self._repair_loop())
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        for svc in ("bespokv.v1.KV", "bespokv.v1.Admin", "bespokv.v1.Peer"):
            await self.health.set(svc, health_pb2.HealthCheckResponse.SERVING)
        log.info("node %s serving %d shard replicas on %s", self.node_id, len(self.controlets), self.address)

    async def stop(self, grace: float = 1.0, drain: float = 3.0) -> None:
        """Stop serving: new calls are refused, replication backlogs are handed over for
        up to ``drain`` seconds, calls in flight get ``grace`` seconds, datalets close."""
        if self._stopping:
            return
        self._stopping = True
        self.map_changed.set()  # ends WatchShardMap streams
        try:
            await self.health.enter_graceful_shutdown()
        except Exception:  # best effort
            pass
        for t in list(self._background):
            t.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if drain > 0:
            await asyncio.gather(*(c.drain(drain) for c in self.controlets.values()), return_exceptions=True)
        for c in [*self.controlets.values(), *self._switching.values()]:
            try:
                await c.stop()
            except Exception as exc:  # keep stopping the rest
                log.warning("stopping controlet of shard %s: %r", c.ctx.shard_id, exc)
        if self.server is not None:
            await self.server.stop(grace)
        self.forwarder.close()
        await self.peers.close()
        for w in self.workers.values():
            try:
                await w.close()
            except Exception as exc:  # best effort
                log.warning("closing datalet: %r", exc)
        await self.coordinator.stop()

    async def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until every local replica reports ready (recovered / caught up)."""
        deadline = time.monotonic() + timeout
        while not all(c.ready() for c in self.controlets.values()):
            if time.monotonic() > deadline:
                raise UnavailableError(f"node {self.node_id} not ready after {timeout}s")
            await asyncio.sleep(0.02)

    # -- map changes and failover (etcd coordinator) ---------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _on_map(self, smap: ShardMap) -> None:
        changed, self.map_changed = self.map_changed, asyncio.Event()
        changed.set()
        # A shard whose mode changed leaves ``controlets`` in the same step as the map is
        # installed: no request routed with the new map may reach the old controlet.
        self._take_switching(smap)
        self.peers.shard_map = smap  # addresses of nodes added meanwhile
        if not self._stopping:
            self._spawn(self._apply_map(smap))
        self._lift_orphaned_freezes(smap)

    def _take_switching(self, smap: ShardMap) -> None:
        for sid, c in list(self.controlets.items()):
            info = smap.shards.get(sid)
            if info is not None and self.node_id in info.replicas and info.mode != c.mode:
                self._switching[sid] = self.controlets.pop(sid)

    async def _switch_replicas(self, smap: ShardMap) -> None:
        """Replace each switching replica's controlet by one of the map's mode: stop the
        old one (its writes were drained before the map changed), convert the stored form
        on the replica's worker thread (after every call already queued there), start the
        new one (representation.py: an aa -> ms head merges the others' values first)."""
        for sid, old in list(self._switching.items()):
            info = smap.shards.get(sid)
            try:
                await old.stop()
            except Exception as exc:  # the new controlet is opened anyway
                log.warning("stopping the %s controlet of shard %s: %r", old.mode, sid, exc)
            if info is None or self.node_id not in info.replicas or self._stopping:
                self._switching.pop(sid)
                continue
            worker = self._worker(sid)
            stored = await worker.run(representation.open_for, worker.inner, info.mode)
            c = self._open_replica(info, stored_versions=stored)
            self._switching.pop(sid)
            log.warning("node %s: shard %s switched from %s to %s (epoch %d)", self.node_id, sid, old.mode, info.mode, info.epoch)
            await c.start()

    async def _apply_map(self, smap: ShardMap) -> None:
        """Bring the local controlets in line with a new map (in epoch order)."""
        async with self._map_lock:
            if smap.epoch < self.shard_map.epoch:
                return  # a newer map arrived meanwhile; its own task applies it
            self._take_switching(smap)  # a controlet opened for a mode the map changed since
            await self._switch_replicas(smap)
            for sid, c in list(self.controlets.items()):
                info = smap.shards.get(sid)
                if info is None or self.node_id not in info.replicas:
                    # Dropped from the shard (declared dead while it was paused or cut
                    # off): stop serving it; it rejoins below (see rejoin.py).
                    log.warning("node %s: no longer a replica of shard %s (epoch %d)", self.node_id, sid, smap.epoch)
                    self.controlets.pop(sid)
                    await c.stop()
                    continue
                if info == c.ctx.shard:
                    continue
                reconfigure = getattr(c, "reconfigure", None)
                if reconfigure is not None:
                    await reconfigure(info)
                else:  # active-active: replica sets are not changed by failover; adopt the epoch
                    c.ctx.shard = info
                    c.ctx.epoch = info.epoch
            for info in smap.shards_of(self.node_id):
                if info.id not in self.controlets and not self._stopping:
                    # Put back (or added) by the map: serve once the upstream has fed us
                    # what it held when it connected under this epoch.
                    log.warning("node %s: replica of shard %s again (epoch %d)", self.node_id, info.id, smap.epoch)
                    await self._open_replica(info).start()
            await self._merge_for_switches(smap)
        self._rejoin_missing()
        self._start_moves()

    async def _merge_for_switches(self, smap: ShardMap) -> None:
        """Start the merge a switch to a master-slave mode asks each local active-active
        replica for (``merge``: registers.py), and end it, with its marker, where the map
        no longer asks."""
        for sid, c in list(self.controlets.items()):
            if isinstance(c, VersionedControlet):
                info = smap.shards.get(sid)
                if info is not None and switch_merge_asked(info, self.node_id):
                    c.merge_for_switch(info)
                else:
                    await c.end_switch_merge()

    def _start_moves(self) -> None:
        """Run every move of a replica to this node that the map asks for (membership.py)."""
        if not self.coordinator.dynamic or self._stopping:
            return
        for sid in moves_to_take(self.shard_map, self.node_id):
            if sid not in self._moving:
                self._moving.add(sid)
                self._spawn(self._take_over(sid))

    async def _take_over(self, shard: int) -> None:
        try:
            while not self._stopping:
                try:
                    await take_over(
                        coordinator=self.coordinator, peers=self.peers, me=self.node_id, shard=shard,
                        worker=lambda: self._worker(shard), tuning=self.config.tuning, observe=self.clock.observe,
                    )
                    return
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # retried while the map asks for the move
                    log.warning("node %s: moving shard %s here failed: %r; retrying", self.node_id, shard, exc)
                await asyncio.sleep(0.5)
        finally:
            self._moving.discard(shard)

    def _rejoin_missing(self) -> None:
        """Start a rejoin (rejoin.py) for every master-slave shard the config gives this
        node that the map has dropped it from and that runs short of replicas, with no
        move or freeze under way (reconcile.rejoins)."""
        if not self.coordinator.dynamic or self._stopping:
            return
        for sid, count in rejoins(self._home, self.shard_map, self.node_id).items():
            if sid not in self._rejoining:
                self._rejoining.add(sid)
                self._spawn(self._rejoin(sid, count))

    async def _rejoin(self, shard: int, replicas: int) -> None:
        try:
            await rejoin(
                coordinator=self.coordinator, peers=self.peers, me=self.node_id, shard=shard,
                replicas=replicas, worker=lambda: self._worker(shard), tuning=self.config.tuning,
            )
        finally:
            self._rejoining.discard(shard)

    async def _repair_loop(self) -> None:
        """Give every shard that has run short of a replica for ``replace_after`` seconds a
        new one (repair.py), checking a few times per ``replace_after`` (at most every 5 s)."""
        after = self.config.tuning.replace_after
        while not self._stopping:
            try:
                self._replace_missing(after)
            except Exception as exc:  # the next round retries; the loop must not die
                log.warning("node %s: re-replication check failed: %r", self.node_id, exc)
            await asyncio.sleep(min(5.0, max(0.05, after / 4)))

    def _replace_missing(self, after: float) -> None:
        smap, down, now = self.shard_map, self.coordinator.down(), time.monotonic()
        counts = {s.id: len(s.replicas) for s in self._home.shards.values()}
        short = shortfalls(smap, counts, down)
        self._short_since = {f.shard: self._short_since.get(f.shard, now) for f in short}
        if not self.coordinator.can_serve() or self.node_id in down:
            return
        for f in short:
            info = smap.shard(f.shard)
            if now - self._short_since[f.shard] < after or replacement(smap, info, down) != self.node_id:
                continue
            if f.dead is None:
                if f.shard not in self._rejoining:
                    log.warning("node %s: shard %s ran short of a replica for %g s; copying it here",
                                self.node_id, f.shard, after)
                    self._rejoining.add(f.shard)
                    self._spawn(self._rejoin(f.shard, counts[f.shard]))
            elif f.shard not in self._moving:
                log.warning("node %s: shard %s's replica on %s was down for %g s; moving it here",
                            self.node_id, f.shard, f.dead, after)
                self._spawn(self._ask_replacement(f.shard, f.dead))

    async def _ask_replacement(self, shard: int, dead: str) -> None:
        """Ask by CAS for the move of ``dead``'s replica here; the map change starts it
        (_start_moves)."""
        try:
            await self.coordinator.change_shard(shard, ask_move(self.node_id, dead, self.coordinator.down))
        except Exception as exc:  # the next round retries
            log.warning("node %s: asking to replace %s in shard %s failed: %r", self.node_id, dead, shard, exc)

    def _on_alive(self, alive: set[str]) -> None:
        changed, self.map_changed = self.map_changed, asyncio.Event()
        changed.set()  # watchers learn who is down
        before, self._alive = self._alive, set(alive)
        self._lift_orphaned_freezes(self.shard_map)
        if before is None or self._stopping:
            return
        for node in before - alive:
            if node != self.node_id:
                self._spawn(self._fail_over(node))

    async def _fail_over(self, dead: str) -> None:
        """``dead``'s lease expired: take it out of every master-slave shard this node
        shares with it. Every surviving replica tries; the coordinator's compare-and-swap
        makes all but the first a no-op. Active-active shards keep their replicas (a
        quorum, or any replica, still serves; clients move off the dead one)."""
        smap = self.shard_map
        for info in smap.shards.values():
            if info.move is not None and info.move[0] == dead and self.node_id in info.replicas:
                await self._cancel_move(info.id, dead)
        for info in smap.shards.values():
            if dead not in info.replicas or self.node_id not in info.replicas or len(info.replicas) < 2:
                continue
            if info.mode not in ("ms-sc", "ms-ec"):
                continue
            order = [r for r in info.replicas if r != dead]
            if info.mode == "ms-ec" and info.head == dead:
                order = await self._most_up_to_date_first(info.id, order)

            def change(s: ShardInfo, order: list[str] = order) -> ShardInfo | None:
                # Decided on the shard as it is now (``info`` may be old: a node may have
                # rejoined since), never emptying it.
                if dead not in s.replicas or dead not in self.coordinator.down():
                    return None  # done by another replica, or it is back with a new lease
                rest = [r for r in s.replicas if r != dead]
                if not rest:
                    return None
                if s.mode == "ms-ec" and s.head == dead:  # the most up-to-date first
                    rest = [r for r in order if r in rest] + [r for r in rest if r not in order]
                return dataclasses.replace(s, replicas=tuple(rest))

            try:
                new = await self.coordinator.change_shard(info.id, change)
            except Exception as exc:  # the next liveness change retries
                log.warning("node %s: failover of shard %s failed: %r", self.node_id, info.id, exc)
                continue
            if new is not None:
                log.warning(
                    "node %s: shard %s failed over without %s: %s (epoch %d)",
                    self.node_id, info.id, dead, ",".join(new.shard(info.id).replicas), new.epoch,
                )

    def _lift_orphaned_freezes(self, smap: ShardMap) -> None:
        """Lift the freeze of each of this node's shards whose mode-switch driver is gone
        (modeswitch.orphaned); every replica tries, the compare-and-swap makes one win."""
        if self._stopping:
            return
        switching = self.coordinator.switching()
        for info in smap.shards.values():
            if self.node_id in info.replicas and info.id not in self._thawing and orphaned(info, switching):
                self._thawing.add(info.id)
                self._spawn(self._lift_freeze(info.id))

    async def _lift_freeze(self, shard: int) -> None:
        def lift(s: ShardInfo) -> ShardInfo | None:
            return thaw(s) if orphaned(s, self.coordinator.switching()) else None

        try:
            if await self.coordinator.change_shard(shard, lift) is not None:
                log.warning("node %s: lifted the freeze of shard %s (its mode switch's driver is gone)", self.node_id, shard)
        except Exception as exc:  # the next map or lease change retries
            log.warning("node %s: lifting the freeze of shard %s failed: %r", self.node_id, shard, exc)
        finally:
            self._thawing.discard(shard)

    async def _cancel_move(self, shard: int, target: str) -> None:
        """The target of a move of ``shard`` died: clear the move, and the freeze it may
        have left (membership.py), so the shard takes writes again. ``node add/remove``
        reports the move as not done."""

        def cancel(s: ShardInfo) -> ShardInfo | None:
            if s.move is None or s.move[0] != target or target not in self.coordinator.down():
                return None
            return dataclasses.replace(s, move=None, frozen=False)

        try:
            if await self.coordinator.change_shard(shard, cancel) is not None:
                log.warning("node %s: cancelled the move of shard %s to %s (it is down)", self.node_id, shard, target)
        except Exception as exc:  # the next liveness change retries
            log.warning("node %s: cancelling the move of shard %s failed: %r", self.node_id, shard, exc)

    async def _most_up_to_date_first(self, shard: int, order: list[str]) -> list[str]:
        """ms-ec: the replica that applied the most of the master's log leads the order."""

        async def seq_of(node: str) -> int:
            if node == self.node_id:
                c = self.controlets.get(shard)
                return c.on_position().position.seq if c is not None else -1
            try:
                resp = await self.peers.peer(node).Position(
                    pb.PositionRequest(shard=shard), timeout=1.0, metadata=self.peers.metadata
                )
                return int(resp.position.seq)
            except Exception:  # unreachable: never promoted
                return -1

        seqs = await asyncio.gather(*(seq_of(n) for n in order))
        best = max(range(len(order)), key=lambda i: (seqs[i], -i))
        return [order[best]] + [n for i, n in enumerate(order) if i != best]

    # -- validation and routing ---------------------------------------------------------------

    def check_key(self, key: bytes) -> None:
        if not key:
            raise InvalidArgumentError("key is empty (a key is required)")
        if len(key) > self.limits.max_key_bytes:
            raise InvalidArgumentError(f"key of {len(key)} bytes exceeds max_key_bytes={self.limits.max_key_bytes}")
        if key.startswith(RESERVED_PREFIX):
            raise InvalidArgumentError("keys starting with 0xFFFF are reserved for bespokv metadata")

    def check_value(self, value: bytes) -> None:
        if len(value) > self.limits.max_value_bytes:
            raise InvalidArgumentError(
                f"value of {len(value)} bytes exceeds max_value_bytes={self.limits.max_value_bytes}"
            )

    def shard_of(self, key: bytes, shard: int | None) -> ShardInfo:
        smap = self.shard_map
        sid = smap.shard_for(key)
        if shard is not None:
            smap.shard(shard)  # UnknownShardError
            if shard != sid:
                raise WrongShardError(f"key belongs to shard {sid}, not {shard} (shard map epoch {smap.epoch})")
        info = smap.shard(sid)
        self.check_epoch(info, smap)
        return info

    def check_epoch(self, info: ShardInfo, smap: ShardMap) -> None:
        """Fencing: refuse a request routed with a map older than the shard's last change
        (the client refreshes its map and retries), or newer than this node's map (the
        node's watch is behind: UNAVAILABLE, retried)."""
        epoch = _REQUEST_EPOCH.get()
        if not epoch:
            return
        if epoch < info.epoch:
            raise WrongShardError(
                f"shard {info.id} changed at epoch {info.epoch}; the request was routed with epoch {epoch}"
            )
        if epoch > smap.epoch:
            raise UnavailableError(f"node {self.node_id} has shard map epoch {smap.epoch}, the request {epoch}")

    def _write_target(self, info: ShardInfo) -> str:
        c = self.controlets.get(info.id)
        return c.write_target() if c is not None else write_node(info)

    def _read_target(self, info: ShardInfo) -> str:
        c = self.controlets.get(info.id)
        return c.read_target() if c is not None else read_node(info)

    def _local(self, info: ShardInfo, what: str) -> Controlet:
        c = self.controlets.get(info.id)
        if c is None:
            self._check_switching(info.id)
            raise WrongShardError(f"node {self.node_id} has no replica of shard {info.id} ({what})")
        return c

    def _check_switching(self, shard: int) -> None:
        if shard in self._switching:
            raise OverloadedError(
                f"shard {shard} is switching to mode {self.shard_map.shard(shard).mode} on {self.node_id}: "
                "not applied, retry"
            )

    @contextlib.contextmanager
    def _writing(self, info: ShardInfo) -> Iterator[None]:
        """Around every write this node executes: refused while a live mode switch drains
        the shard, and counted while it runs (the switch waits until none runs)."""
        # The map as it is now (``info`` may come from before an await in Multi).
        current = self.shard_map.shards.get(info.id, info)
        if current.frozen:
            raise OverloadedError(f"shard {info.id} is draining for a mode switch: not applied, retry")
        self._writes_in_flight[info.id] += 1
        try:
            yield
        finally:
            self._writes_in_flight[info.id] -= 1

    async def _forward(self, node: str, op: pb.Op, hops: int) -> pb.OpResult:
        self.counters["forwarded"] += 1
        return await self.forwarder.forward(node, op, hops)

    # -- operations (shared by the unary RPCs and Multi) ----------------------------------------

    async def do_get(self, req: pb.GetRequest, hops: int) -> pb.GetResponse:
        self.check_key(req.key)
        info = self.shard_of(req.key, req.shard if req.HasField("shard") else None)
        if req.local:
            v = await self._local(info, "local read").get_local(req.key)
        else:
            target = self._read_target(info)
            if target != self.node_id:
                fwd = pb.GetRequest(key=req.key, shard=info.id)
                return (await self._forward(target, pb.Op(get=fwd), hops)).get
            v = await self._local(info, "read").get(req.key)
        self.counters["get"] += 1
        return pb.GetResponse(found=v is not None, value=v or b"")

    def prepare_write(self, op: pb.Op) -> tuple[ShardInfo, list[Op], pb.Op]:
        """Validate a put/delete/batch: its shard, its datalet ops, and the request to
        forward (with the shard filled in). Raises for bad requests."""
        kind = opcodec.kind_of(op)
        if kind == "put":
            req = op.put
            self.check_key(req.key)
            self.check_value(req.value)
            info = self.shard_of(req.key, req.shard if req.HasField("shard") else None)
            return info, [(req.key, req.value)], pb.Op(put=pb.PutRequest(key=req.key, value=req.value, shard=info.id))
        if kind == "delete":
            req_d = op.delete
            self.check_key(req_d.key)
            info = self.shard_of(req_d.key, req_d.shard if req_d.HasField("shard") else None)
            return info, [(req_d.key, None)], pb.Op(delete=pb.DeleteRequest(key=req_d.key, shard=info.id))
        if kind == "batch":
            req_b = op.batch
            muts = req_b.mutations
            if not muts:
                raise InvalidArgumentError("empty batch")
            if len(muts) > self.limits.max_batch_ops:
                raise InvalidArgumentError(
                    f"batch of {len(muts)} ops exceeds max_batch_ops={self.limits.max_batch_ops}"
                )
            ops: list[Op] = []
            sid: int | None = None
            smap = self.shard_map
            for m in muts:
                self.check_key(m.key)
                if not m.delete:
                    self.check_value(m.value)
                s_ = smap.shard_for(m.key)
                if sid is None:
                    sid = s_
                elif s_ != sid:
                    raise InvalidArgumentError(
                        f"batch spans shards {sid} and {s_}; an atomic batch must stay in one shard "
                        "(the client library splits batches per shard)"
                    )
                ops.append((m.key, None if m.delete else m.value))
            info = self.shard_of(muts[0].key, req_b.shard if req_b.HasField("shard") else None)
            return info, ops, pb.Op(batch=pb.BatchRequest(mutations=muts, shard=info.id))
        raise InvalidArgumentError(f"{kind or 'empty'} is not a write")

    async def _write(self, op: pb.Op, hops: int) -> None:
        info, ops, fwd = self.prepare_write(op)
        target = self._write_target(info)
        if target != self.node_id:
            await self._forward(target, fwd, hops)
        else:
            c = self._local(info, "write")
            with self._writing(info):
                await c.write(ops)
        self.counters[opcodec.kind_of(op)] += 1

    async def do_put(self, req: pb.PutRequest, hops: int) -> pb.PutResponse:
        await self._write(pb.Op(put=req), hops)
        return pb.PutResponse()

    async def do_delete(self, req: pb.DeleteRequest, hops: int) -> pb.DeleteResponse:
        await self._write(pb.Op(delete=req), hops)
        return pb.DeleteResponse()

    async def do_batch(self, req: pb.BatchRequest, hops: int) -> pb.BatchResponse:
        if not req.mutations:
            return pb.BatchResponse()
        await self._write(pb.Op(batch=req), hops)
        return pb.BatchResponse()

    async def do_cas(self, req: pb.CasRequest, hops: int) -> pb.CasResponse:
        self.check_key(req.key)
        if req.HasField("value"):
            self.check_value(req.value)
        info = self.shard_of(req.key, req.shard if req.HasField("shard") else None)
        target = self._write_target(info)
        if target != self.node_id:
            fwd = pb.CasRequest()
            fwd.CopyFrom(req)
            fwd.shard = info.id
            return (await self._forward(target, pb.Op(cas=fwd), hops)).cas
        expected = req.expected if req.HasField("expected") else None
        value = req.value if req.HasField("value") else None
        c = self._local(info, "compare-and-set")
        with self._writing(info):
            ok, cur = await c.cas(req.key, expected, value)
        self.counters["cas"] += 1
        return pb.CasResponse(succeeded=ok, found=cur is not None, current=cur or b"")

    async def do_op(self, op: pb.Op, hops: int) -> pb.OpResult:
        try:
            return await opcodec.dispatch(self._handlers, op, hops)
        except Exception as exc:  # reported per op
            return self._error_result(exc)

    def _error_result(self, exc: BaseException) -> pb.OpResult:
        err = from_exception(exc)
        self.counters[f"error.{err.code.name}"] += 1
        return pb.OpResult(status=pb.OpStatus(code=err.code.value[0], message=str(err)))

    async def do_multi(self, req: pb.MultiRequest, hops: int) -> pb.MultiResponse:
        """Run independent operations. Writes and reads this node serves itself are
        grouped per shard: one controlet call (one replicated entry, one quorum round)
        per group instead of one per operation; the rest run one by one, concurrently."""
        n = len(req.ops)
        if n > self.limits.max_batch_ops:
            raise InvalidArgumentError(f"{n} ops exceed max_batch_ops={self.limits.max_batch_ops}")
        self.counters["multi"] += 1
        results: list[pb.OpResult | None] = [None] * n
        writes: dict[int, list[tuple[int, list[Op]]]] = {}
        infos: dict[int, ShardInfo] = {}
        reads: dict[int, list[tuple[int, bytes]]] = {}
        rest: list[int] = []
        for i, op in enumerate(req.ops):
            kind = op.WhichOneof("op")
            try:
                if kind in ("put", "delete", "batch"):
                    info, ops, _ = self.prepare_write(op)
                    if self._write_target(info) == self.node_id:
                        writes.setdefault(info.id, []).append((i, ops))
                        infos[info.id] = info
                        self.counters[kind] += 1
                        continue
                elif kind == "get" and not op.get.local:
                    g = op.get
                    self.check_key(g.key)
                    info = self.shard_of(g.key, g.shard if g.HasField("shard") else None)
                    if self._read_target(info) == self.node_id:
                        reads.setdefault(info.id, []).append((i, g.key))
                        self.counters["get"] += 1
                        continue
            except Exception as exc:  # reported per op
                results[i] = self._error_result(exc)
                continue
            rest.append(i)

        async def group_write(sid: int, items: list[tuple[int, list[Op]]]) -> None:
            ops = [o for _, batch in items for o in batch]
            try:
                c = self._local(infos[sid], "write")
                with self._writing(infos[sid]):
                    await c.write(ops)
                res = pb.OpResult(status=pb.OpStatus(code=0))
            except Exception as exc:  # the group shares its fate
                res = self._error_result(exc)
            for i, _ in items:
                results[i] = res

        async def group_read(sid: int, items: list[tuple[int, bytes]]) -> None:
            try:
                values = await self._local(self.shard_map.shard(sid), "read").get_many([k for _, k in items])
            except Exception as exc:  # the group shares its fate
                err = self._error_result(exc)
                for i, _ in items:
                    results[i] = err
                return
            for (i, _), v in zip(items, values):
                results[i] = pb.OpResult(
                    status=pb.OpStatus(code=0), get=pb.GetResponse(found=v is not None, value=v or b"")
                )

        async def single(i: int) -> None:
            results[i] = await self.do_op(req.ops[i], hops)

        jobs = [group_write(s_, items) for s_, items in writes.items()]
        jobs += [group_read(s_, items) for s_, items in reads.items()]
        jobs += [single(i) for i in rest]
        if len(jobs) == 1:
            await jobs[0]
        elif jobs:
            await asyncio.gather(*jobs)
        return pb.MultiResponse(results=results)

    # -- scans --------------------------------------------------------------------------------

    async def _shard_scan(
        self, info: ShardInfo, req: pb.ScanRequest, hops: int
    ) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        start = req.start or None
        end = req.end or None
        limit = req.limit or None
        if req.local:
            yield await self._local(info, "local scan").scan_local(start, end, reverse=req.reverse, limit=limit)
            return
        target = self._read_target(info)
        if target == self.node_id:
            async for chunk in self._local(info, "scan").scan(start, end, reverse=req.reverse, limit=limit):
                yield chunk
            return
        check_hops(hops, "scan")
        md = tuple(self.peers.metadata or ()) + ((HOPS_HEADER, str(hops + 1)),)
        fwd = pb.ScanRequest()
        fwd.CopyFrom(req)
        fwd.shard = info.id
        try:
            async for resp in self.peers.kv(target).Scan(fwd, metadata=md, timeout=300):
                yield [(kv.key, kv.value) for kv in resp.pairs]
        except grpc.aio.AioRpcError as exc:
            raise rpc_error(exc, f"scan at {target}") from exc

    async def do_scan(self, req: pb.ScanRequest, hops: int) -> AsyncIterator[pb.ScanResponse]:
        if len(req.start) > self.limits.max_key_bytes or len(req.end) > self.limits.max_key_bytes:
            raise InvalidArgumentError("scan bounds exceed max_key_bytes")
        self.counters["scan"] += 1
        smap = self.shard_map
        if req.HasField("shard"):
            sources = [self._shard_scan(smap.shard(req.shard), req, hops)]
        else:
            sources = [self._shard_scan(info, req, hops) for info in smap.shards.values()]
        limit = req.limit or None
        sent = 0
        async for chunk in merge_chunks(sources, reverse=req.reverse):
            if limit is not None and sent + len(chunk) > limit:
                chunk = chunk[: limit - sent]
            if chunk:
                sent += len(chunk)
                yield pb.ScanResponse(pairs=[pb.KeyValue(key=k, value=v) for k, v in chunk])
            if limit is not None and sent >= limit:
                return

    # -- admin --------------------------------------------------------------------------------

    def shard_map_proto(self) -> pb.ShardMapResponse:
        smap = self.shard_map
        return pb.ShardMapResponse(
            epoch=smap.epoch,
            cluster=smap.cluster,
            vnodes=smap.vnodes,
            nodes=[pb.NodeEntry(id=n.id, address=n.address) for n in smap.nodes.values()],
            shards=[
                pb.ShardEntry(id=s.id, mode=s.mode, replicas=list(s.replicas), epoch=s.epoch)
                for s in smap.shards.values()
            ],
            down=sorted(self.coordinator.down()),
        )

    async def node_status(self) -> pb.NodeStatus:
        kinds = sorted({getattr(d, "kind", type(d).__name__) for d in self.datalets.values()})
        st = pb.NodeStatus(
            id=self.node_id,
            address=self.address,
            up=True,
            uptime_s=time.monotonic() - self.started,
            pid=os.getpid(),
            datalet=",".join(kinds),
        )
        if self.resp is not None:
            st.redis, st.redis_cluster = self.resp.address, self.resp.cluster_address
        for k, v in self.counters.items():
            st.counters[k] = float(v)
        st.counters["map_epoch"] = float(self.shard_map.epoch)
        st.counters.update(self.coordinator.lease_stats())
        for sid, c in sorted(self.controlets.items()):
            s = c.status()
            s.info["epoch"] = str(c.ctx.epoch)
            s.info["writes_in_flight"] = str(self._writes_in_flight[sid])
            for k, v in c.extra_stats().items():
                st.counters[f"shard{sid}.{k}"] = float(v)
            try:
                for k, v in (await self.workers[sid].stats()).items():
                    st.counters[f"shard{sid}.datalet.{k}"] = float(v)
            except Exception:  # stats are best effort
                pass
            st.shards.append(s)
        return st

    async def cluster_status(self) -> pb.ClusterStatusResponse:
        smap = self.shard_map

        async def one(node_id: str) -> pb.NodeStatus:
            if node_id == self.node_id:
                return await self.node_status()
            try:
                return await self.peers.admin(node_id).NodeStats(
                    pb.NodeStatsRequest(), timeout=1.5, metadata=self.peers.metadata
                )
            except grpc.aio.AioRpcError as exc:
                return pb.NodeStatus(
                    id=node_id, address=smap.address(node_id), up=False, error=f"{exc.code().name}: {exc.details()}"
                )

        nodes = await asyncio.gather(*(one(n) for n in smap.nodes))
        return pb.ClusterStatusResponse(cluster=smap.cluster, epoch=smap.epoch, nodes=nodes)

    def controlet(self, shard: int) -> Controlet:
        self.shard_map.shard(shard)  # UnknownShardError for a shard that does not exist
        c = self.controlets.get(shard)
        if c is None:
            self._check_switching(shard)
            raise WrongShardError(f"node {self.node_id} has no replica of shard {shard}")
        return c


# -- servicers ----------------------------------------------------------------------------------


class _KV:
    def __init__(self, node: Node) -> None:
        self.n = node

    async def Get(self, request: pb.GetRequest, context: grpc.aio.ServicerContext) -> pb.GetResponse:
        return await self.n.do_get(request, _hops(context))

    async def Put(self, request: pb.PutRequest, context: grpc.aio.ServicerContext) -> pb.PutResponse:
        return await self.n.do_put(request, _hops(context))

    async def Delete(self, request: pb.DeleteRequest, context: grpc.aio.ServicerContext) -> pb.DeleteResponse:
        return await self.n.do_delete(request, _hops(context))

    async def Batch(self, request: pb.BatchRequest, context: grpc.aio.ServicerContext) -> pb.BatchResponse:
        return await self.n.do_batch(request, _hops(context))

    async def Multi(self, request: pb.MultiRequest, context: grpc.aio.ServicerContext) -> pb.MultiResponse:
        return await self.n.do_multi(request, _hops(context))

    async def CompareAndSet(self, request: pb.CasRequest, context: grpc.aio.ServicerContext) -> pb.CasResponse:
        return await self.n.do_cas(request, _hops(context))

    async def Scan(self, request: pb.ScanRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ScanResponse]:
        async for resp in self.n.do_scan(request, _hops(context)):
            yield resp


class _Admin:
    def __init__(self, node: Node) -> None:
        self.n = node

    async def ShardMap(self, request: pb.ShardMapRequest, context: grpc.aio.ServicerContext) -> pb.ShardMapResponse:
        return self.n.shard_map_proto()

    async def NodeStats(self, request: pb.NodeStatsRequest, context: grpc.aio.ServicerContext) -> pb.NodeStatus:
        return await self.n.node_status()

    async def ClusterStatus(
        self, request: pb.ClusterStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.ClusterStatusResponse:
        return await self.n.cluster_status()

    async def WatchShardMap(
        self, request: pb.ShardMapRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ShardMapResponse]:
        sent: tuple[int, frozenset[str]] = (0, frozenset())
        while not self.n._stopping:
            changed = self.n.map_changed
            now = (self.n.shard_map.epoch, frozenset(self.n.coordinator.down()))
            if now != sent:
                sent = now
                yield self.n.shard_map_proto()
            await changed.wait()


class _Peer:
    def __init__(self, node: Node) -> None:
        self.n = node
        tls = node.config.tls
        self._identities = tls is not None and tls.node_identities

    async def _from_node(self, context: grpc.aio.ServicerContext, claimed: str | None = None) -> None:
        """With node identities: serve only a caller whose certificate names a node of the
        map (and, given ``claimed``, that node); others get PERMISSION_DENIED."""
        if not self._identities:
            return
        name = certificate_name(context)
        if name is None or name not in self.n.shard_map.nodes:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"the caller's certificate ({name}) names no node of the map")
        if claimed is not None and claimed != name:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"node {name} cannot send as node {claimed}")

    async def Replicate(self, request_iterator: AsyncIterator[pb.ReplMessage], context: grpc.aio.ServicerContext) -> None:
        await self._from_node(context)
        it = check_stream(request_iterator)
        first = await it.__anext__()
        if first.WhichOneof("body") == "hello":
            await self._from_node(context, first.hello.from_node)

        async def chained() -> AsyncIterator[pb.ReplMessage]:
            yield first
            async for m in it:
                yield m

        await self.n.controlet(first.shard).on_replicate(chained(), context)

    async def Position(self, request: pb.PositionRequest, context: grpc.aio.ServicerContext) -> pb.PositionResponse:
        await self._from_node(context)
        return self.n.controlet(request.shard).on_position()

    async def Pull(self, request: pb.PullRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ReplMessage]:
        await self._from_node(context)
        async for m in self.n.controlet(request.shard).on_pull(request):
            yield m

    async def VersionedRead(
        self, request: pb.VersionedReadRequest, context: grpc.aio.ServicerContext
    ) -> pb.VersionedReadResponse:
        await self._from_node(context)
        return await self.n.controlet(request.shard).on_versioned_read(request)

    async def VersionedWrite(
        self, request: pb.VersionedWriteRequest, context: grpc.aio.ServicerContext
    ) -> pb.VersionedWriteResponse:
        await self._from_node(context)
        return await self.n.controlet(request.shard).on_versioned_write(request)

    async def VersionedScan(
        self, request: pb.VersionedScanRequest, context: grpc.aio.ServicerContext
    ) -> pb.VersionedScanResponse:
        await self._from_node(context)
        return await self.n.controlet(request.shard).on_versioned_scan(request)

    async def Digest(self, request: pb.DigestRequest, context: grpc.aio.ServicerContext) -> pb.DigestResponse:
        await self._from_node(context)
        return await self.n.controlet(request.shard).on_digest(request)

    async def Export(self, request: pb.ExportRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ExportChunk]:
        await self._from_node(context)
        async for chunk in self.n.controlet(request.shard).on_export(request):
            yield chunk
