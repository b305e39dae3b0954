"""The upstream end of one replication stream (``Peer.Replicate``) to a downstream replica."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc

from bespokv.controlets.catchup import feed
from bespokv.controlets.replog import Restart
from bespokv.controlets.replstore import ReplicatedStore
from bespokv.peers import PeerPool
from bespokv.proto import bespokv_pb2 as pb

__all__ = ["Link"]

log = logging.getLogger(__name__)


class Link:
    """The upstream end of the replication stream to one downstream replica.

    Runs until stopped: connects, handshakes, streams ``feed(...)``, and on any failure
    backs off (50 ms doubling to 1 s) and starts over. ``on_ack`` is called with each
    acknowledgement; ``can_send`` gates (re)connection (a middle node waits until it is
    itself caught up).
    """

    def __init__(
        self,
        *,
        store: ReplicatedStore,
        shard: int,
        me: str,
        downstream: str,
        peers: PeerPool,
        on_ack: Callable[[Link], None],
        can_send: Callable[[], bool],
        gate: Callable[[], Any],
        epoch: Callable[[], int] = lambda: 1,
    ) -> None:
        self.store = store
        self.shard = shard
        self.me = me
        self.downstream = downstream
        self.peers = peers
        self.on_ack = on_ack
        self.can_send = can_send
        self.gate = gate
        self.epoch = epoch  # the shard epoch this upstream works under (sent in Hello)
        self.connected = False
        self.copying = False  # a full copy is streaming to the downstream
        self.applied = 0  # downstream's applied seq (in our history)
        self.acked = 0  # seq acknowledged by the end of the chain below
        self.last_error = ""
        self.last_ack_time = time.monotonic()
        self.copies = 0
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # shutting down
                pass

    async def _run(self) -> None:
        backoff = 0.05
        while not self._stopped:
            while not self.can_send():
                await self.gate()
            try:
                await self._session()
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except Restart as exc:
                self.last_error = f"restart: {exc}"
                backoff = 0.0
            except grpc.aio.AioRpcError as exc:
                self.last_error = f"{exc.code().name}: {exc.details()}"
            except Exception as exc:  # keep the link alive
                self.last_error = repr(exc)
                log.warning("shard %s link %s->%s failed: %r", self.shard, self.me, self.downstream, exc)
            self.connected = False
            if backoff:
                await asyncio.sleep(backoff)
            backoff = min(max(backoff * 2, 0.05), 1.0)

    async def _session(self) -> None:
        call = self.peers.peer(self.downstream).Replicate(metadata=self.peers.metadata)
        try:
            await call.write(
                pb.ReplMessage(
                    shard=self.shard,
                    hello=pb.Hello(from_node=self.me, position=self.store.position(), epoch=self.epoch()),
                )
            )
            first = await call.read()
            if first is grpc.aio.EOF:
                raise Restart("downstream closed the stream during the handshake")
            their = first.position
            self.connected = True
            self.last_error = ""
            self._record(first)
            writer = asyncio.ensure_future(self._write(call, their))
            reader = asyncio.ensure_future(self._read(call))
            try:
                done, _ = await asyncio.wait({writer, reader}, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    t.result()
                raise Restart("replication stream ended")
            finally:
                writer.cancel()
                reader.cancel()
                await asyncio.gather(writer, reader, return_exceptions=True)
        finally:
            call.cancel()

    async def _write(self, call: Any, their: pb.Position) -> None:
        messages = feed(self.store, self.shard, their, follow=True, owner=self)
        try:
            async for msg in messages:
                body = msg.WhichOneof("body")
                if body == "snapshot_begin":
                    self.copies += 1
                    self.copying = True
                await call.write(msg)
                if body == "snapshot_end":
                    self.copying = False
        finally:
            self.copying = False
            # Close now (not whenever the generator is collected): a copy in progress holds
            # a datalet iterator that must be gone before the datalet is closed.
            await messages.aclose()

    async def _read(self, call: Any) -> None:
        while True:
            ack = await call.read()
            if ack is grpc.aio.EOF:
                return
            self._record(ack)

    def _record(self, ack: pb.ReplAck) -> None:
        if ack.position.history == self.store.history:
            self.applied = ack.position.seq
            self.acked = ack.acked
        self.last_ack_time = time.monotonic()
        self.on_ack(self)

    @property
    def lag(self) -> int:
        return max(0, self.store.seq - self.applied)
