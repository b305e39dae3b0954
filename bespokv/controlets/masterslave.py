"""The part of the two master-slave controlets that does not depend on consistency.

Roles: the first replica of a shard is the head (chain) / master (primary-backup); it
numbers writes and feeds its downstream replicas through :class:`~link.Link` streams.
The others receive a stream (``on_replicate``) and, in a chain, feed the next one.

Start-up:

* A downstream replica is not *synced* until its upstream has connected and it has
  caught up with the upstream's position at that moment; until then it serves no reads
  and feeds nobody (so a replica that lost its data cannot wipe the one below it).
* The head/master first asks every replica for its position (waiting up to
  ``recovery_timeout`` for all to answer). If one is ahead - the head restarted from a
  volatile or older datalet - it pulls what it lacks from the one furthest ahead before
  accepting writes. Writes arriving meanwhile get UNAVAILABLE (not applied).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator

import grpc

from bespokv import representation
from bespokv.controlets.base import Controlet, ShardContext
from bespokv.controlets.catchup import CatchUp, apply_message, feed, pull
from bespokv.controlets.link import Link
from bespokv.controlets.replstore import ReplicatedStore
from bespokv.errors import Error, FencedError, UnavailableError, WrongShardError, from_exception
from bespokv.datalets.base import RESERVED_PREFIX
from bespokv.proto import bespokv_pb2 as pb
from bespokv.shardmap import ShardInfo

__all__ = ["MasterSlaveControlet"]

log = logging.getLogger(__name__)


class MasterSlaveControlet(Controlet):
    """Shared machinery: position, links, the upstream stream handler, recovery."""

    def __init__(self, ctx: ShardContext) -> None:
        super().__init__(ctx)
        self.store = ReplicatedStore(ctx.datalet, ctx.tuning)
        self.is_head = ctx.shard.head == ctx.node_id
        #: versioned values left by an active-active mode (offline switch): not served,
        #: exported to the head, which merges them (representation.py)
        self.stored_versions = ctx.stored_versions
        self.synced = len(ctx.shard.replicas) == 1 and not self.stored_versions
        self._synced_changed = asyncio.Event()
        self.links: dict[str, Link] = {}
        self._session = 0
        self._upstream_from = ""
        self._ack_changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.recovered_from = ""
        self.last_upstream_time = 0.0
        self._upstream_task: asyncio.Task[object] | None = None

    # -- topology (subclasses) --------------------------------------------------------------

    def downstreams(self) -> list[str]:
        """Replicas this node feeds."""
        raise NotImplementedError

    def ack_value(self) -> int:
        """The seq this node acknowledges upstream."""
        return self.store.seq

    def on_link_ack(self, link: Link) -> None:
        """Called for every acknowledgement a link receives."""

    # -- lifecycle --------------------------------------------------------------------------

    def _start_link(self, downstream: str) -> None:
        link = Link(
            store=self.store,
            shard=self.ctx.shard_id,
            me=self.ctx.node_id,
            downstream=downstream,
            peers=self.ctx.peers,
            on_ack=self.on_link_ack,
            can_send=lambda: self.synced,
            gate=self._wait_synced_change,
            epoch=lambda: self.ctx.shard.epoch,
        )
        self.links[downstream] = link
        link.start()

    async def start(self) -> None:
        for d in self.downstreams():
            self._start_link(d)
        if self.is_head and not self.synced:
            self._tasks.append(asyncio.ensure_future(self._recover()))
        elif self.is_head and not self.store.history:
            self.store.adopt_history(os.urandom(16))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for link in self.links.values():
            await link.stop()
        self._session += 1  # ends any upstream stream handler
        task = self._upstream_task
        if task is not None and not task.done():
            task.cancel()  # the handler returns quietly before the server stops
            await asyncio.gather(task, return_exceptions=True)

    # -- failover ---------------------------------------------------------------------------

    def topology_changed(self) -> None:
        """Subclasses: recompute neighbours from ``self.ctx.shard``."""

    async def reconfigure(self, info: ShardInfo) -> None:
        """The coordinator changed this shard (a replica failed and was dropped, a new
        master was promoted): adopt the new order at its epoch.

        Links to replicas no longer fed from here stop, links to new downstreams start (the
        handshake resends whatever the downstream lacks from the log, or a full copy; the
        downstream skips entries it already has, so none is applied twice). A stream from
        an upstream that is no longer ours ends at its next message. A replica promoted to
        head/master numbers new writes after everything it holds: every write the old head
        had acknowledged is among them (chain: acknowledged means held by every replica;
        primary-backup: the promoted replica is the most up-to-date one).
        """
        was_head = self.is_head
        old_upstream = self.expected_upstream()
        self.ctx.shard = info
        self.ctx.epoch = info.epoch
        self.is_head = info.head == self.ctx.node_id
        self.topology_changed()
        wanted = self.downstreams()
        for d in list(self.links):
            if d not in wanted:
                await self.links.pop(d).stop()
        for d in wanted:
            if d not in self.links:
                self._start_link(d)
        if self.expected_upstream() != old_upstream:
            self._session += 1  # the old upstream's stream ends at its next message
        if self.is_head and not was_head:
            if self.stored_versions:
                # Still the values of an active-active mode (an offline switch whose head
                # died): merge the others' and rewrite them before serving, as a head would.
                self._tasks.append(asyncio.ensure_future(self._recover()))
                return
            if not self.store.history:
                self.store.adopt_history(os.urandom(16))
            self._set_synced(True)
            log.info("shard %s: %s promoted at seq %d (epoch %d)", info.id, self.ctx.node_id, self.store.seq, info.epoch)
        self._signal_ack()  # a new tail acknowledges what it holds

    def _set_synced(self, value: bool) -> None:
        if value != self.synced:
            self.synced = value
            self._synced_changed.set()
            self._synced_changed = asyncio.Event()

    async def _wait_synced_change(self) -> None:
        await self._synced_changed.wait()

    def ready(self) -> bool:
        return self.synced

    # -- head/master recovery ------------------------------------------------------------------

    async def _recover(self) -> None:
        if self.stored_versions:
            await self._merge_versions()
        others = self.ctx.others
        while True:
            positions: dict[str, pb.Position] = {}
            deadline = time.monotonic() + self.ctx.tuning.recovery_timeout
            while True:
                pending = [n for n in others if n not in positions]
                results = await asyncio.gather(*(self._position_of(n) for n in pending), return_exceptions=True)
                for n, r in zip(pending, results):
                    if isinstance(r, pb.PositionResponse):
                        positions[n] = r.position
                if len(positions) == len(others) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            best = max(positions.items(), key=lambda kv: kv[1].seq, default=None)
            if best is None or best[1].seq <= self.store.seq:
                break
            try:
                await self._pull(best[0])
                self.recovered_from = best[0]
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # retry the whole recovery
                log.warning("shard %s: pull from %s failed: %r; retrying", self.ctx.shard_id, best[0], exc)
                await asyncio.sleep(0.2)
        if not self.store.history:
            # A fresh history: replicas holding another one get a full copy.
            self.store.adopt_history(os.urandom(16))
        log.info("shard %s: %s ready at seq %d", self.ctx.shard_id, self.ctx.node_id, self.store.seq)
        self._set_synced(True)

    async def _merge_versions(self) -> None:
        """After an offline switch from an active-active mode: merge every other replica's
        versioned values into ours (each replica the map lists must answer; an acknowledged
        write may be on any of them; one the failover dropped is not waited for), then
        rewrite ours plain. Our history is then empty, so ``_recover`` starts a new one and
        every other replica gets a full copy."""
        done: set[str] = set()
        while pending := [n for n in self.ctx.others if n not in done]:  # the replicas now
            for node in pending:
                try:
                    call = self.ctx.peers.peer(node).Export(
                        pb.ExportRequest(shard=self.ctx.shard_id),
                        timeout=max(30.0, self.ctx.tuning.request_timeout), metadata=self.ctx.peers.metadata,
                    )
                    async for chunk in call:
                        pairs = [(kv.key, kv.value) for kv in chunk.pairs]
                        await self.datalet.run(representation.merge_newer, self.datalet.inner, pairs)
                    done.add(node)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # retried until every replica has answered
                    log.info("shard %s: merging versions from %s failed: %r", self.ctx.shard_id, node, exc)
            if any(n not in done for n in self.ctx.others):
                await asyncio.sleep(0.3)
        live = await self.datalet.run(representation.to_plain, self.datalet.inner)
        self.stored_versions = False
        log.warning("shard %s: %s rewrote %d merged values plain (mode switch)", self.ctx.shard_id, self.ctx.node_id, live)

    async def on_export(self, request: pb.ExportRequest) -> AsyncIterator[pb.ExportChunk]:
        """The versioned values left by an active-active mode, for the head's merge."""
        if not self.stored_versions:
            raise UnavailableError(f"shard {self.ctx.shard_id}: {self.ctx.node_id} holds no versioned values")
        async for chunk in self.datalet.export(self.ctx.tuning.export_chunk):
            pairs = [pb.KeyValue(key=k, value=v) for k, v in chunk if not k.startswith(RESERVED_PREFIX)]
            if pairs:
                yield pb.ExportChunk(pairs=pairs)

    async def _position_of(self, node: str) -> pb.PositionResponse:
        return await self.ctx.peers.peer(node).Position(
            pb.PositionRequest(shard=self.ctx.shard_id), timeout=1.0, metadata=self.ctx.peers.metadata
        )

    async def _pull(self, node: str) -> None:
        await pull(self.store, self.ctx.peers, self.ctx.shard_id, node, self.ctx.node_id)

    # -- peer RPCs ----------------------------------------------------------------------------

    def on_position(self) -> pb.PositionResponse:
        return pb.PositionResponse(
            position=self.store.position(), ready=self.synced,
            head_seq_seen=max(self.store.head_seq_seen, self.store.seq),
        )

    async def on_pull(self, request: pb.PullRequest) -> AsyncIterator[pb.ReplMessage]:
        if self.stored_versions:  # a copy of them would be read as plain values
            raise UnavailableError(
                f"shard {self.ctx.shard_id}: {self.ctx.node_id} holds an active-active mode's values, not merged yet"
            )
        messages = feed(
            self.store, self.ctx.shard_id, request.position, follow=False, owner=object(),
            chunk=self.ctx.tuning.export_chunk,
        )
        try:
            async for msg in messages:
                yield msg
        finally:
            await messages.aclose()

    def expected_upstream(self) -> str | None:
        """The node allowed to feed this one."""
        raise NotImplementedError

    async def on_replicate(self, request_iterator: AsyncIterator[pb.ReplMessage], context: grpc.aio.ServicerContext) -> None:
        it = request_iterator.__aiter__()
        first = await it.__anext__()
        if first.WhichOneof("body") != "hello":
            raise WrongShardError("a replication stream must start with hello")
        sender = first.hello.from_node
        epoch = first.hello.epoch or 1
        if epoch < self.ctx.shard.epoch:
            raise FencedError(
                f"shard {self.ctx.shard_id}: replication from {sender!r} under epoch {epoch}, "
                f"which epoch {self.ctx.shard.epoch} replaced"
            )
        if epoch > self.ctx.shard.epoch:
            raise UnavailableError(
                f"shard {self.ctx.shard_id}: {self.ctx.node_id} has not seen epoch {epoch} yet; retry"
            )
        if sender != self.expected_upstream():
            raise WrongShardError(
                f"node {sender!r} is not the upstream of {self.ctx.node_id!r} for shard {self.ctx.shard_id}"
            )
        self._session += 1
        session = self._session
        self._upstream_from = sender
        self._upstream_task = asyncio.current_task()
        self.last_upstream_time = time.monotonic()
        progress = CatchUp(first.hello.position)
        # A replica stays synced across reconnects (its data is exact for what it has
        # applied); only a full copy makes it inexact until the copy is caught up.
        if not self.synced and progress.done(self.store):
            self._set_synced(True)
        await context.write(pb.ReplAck(position=self.store.position(), acked=self.ack_value()))

        acker = asyncio.ensure_future(self._ack_loop(context, session))
        try:
            while True:
                try:
                    msg = await it.__anext__()
                except StopAsyncIteration:
                    break
                if session != self._session:
                    raise UnavailableError("replication stream superseded by a newer one")
                if msg.WhichOneof("body") == "snapshot_begin":
                    self._set_synced(False)
                    self.stored_versions = False  # replaced by the head's (plain) copy
                try:
                    await apply_message(self.store, msg, progress)
                except Error:
                    raise
                except Exception as exc:  # datalet failure
                    raise from_exception(exc) from exc
                self.last_upstream_time = time.monotonic()
                if not self.synced and progress.done(self.store):
                    self._set_synced(True)
                self._signal_ack()
        finally:
            acker.cancel()
            await asyncio.gather(acker, return_exceptions=True)

    def _signal_ack(self) -> None:
        self._ack_changed.set()

    async def _ack_loop(self, context: grpc.aio.ServicerContext, session: int) -> None:
        last: tuple[int, int, bytes] | None = None
        while session == self._session:
            await self._ack_changed.wait()
            self._ack_changed.clear()
            cur = (self.store.seq, self.ack_value(), self.store.history)
            if cur != last:
                last = cur
                await context.write(pb.ReplAck(position=self.store.position(), acked=cur[1]))

    # -- status -------------------------------------------------------------------------------

    def status(self) -> pb.ShardStatus:
        st = super().status()
        st.seq = self.store.seq
        for node, link in self.links.items():
            st.lag[node] = link.lag if link.connected else -1
            if link.last_error and not link.connected:
                st.info[f"link.{node}"] = link.last_error[:200]
            if link.copies:
                st.info[f"copies.{node}"] = str(link.copies)
        st.info["log_entries"] = str(len(self.store.log))
        if self.recovered_from:
            st.info["recovered_from"] = self.recovered_from
        return st
