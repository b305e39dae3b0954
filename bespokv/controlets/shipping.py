"""Log shipping: the machinery the two master-slave controlets share.

Each replica of a master-slave shard keeps a *position* ``(history, seq)``: ``seq`` counts
the write batches applied, ``history`` (16 random bytes, made by the head/master when it
starts a fresh store) names the sequence they belong to. The position is stored in the
datalet under a reserved key, in the same atomic batch as the data it describes, so after
any crash the data and the position agree.

The head/master numbers each write batch, applies it, and appends it to an in-memory
:class:`ReplicationLog`. A :class:`Link` per downstream replica streams the log over one
``Peer.Replicate`` bidi stream: several entries per message, one message in flight after
another without waiting for acknowledgements (pipelined). Acknowledgements flow back on the
same stream.

Catch-up after a reconnect or restart (``feed``): the downstream reports its position.
Same history and the log still holds the entries after it -> send those. Otherwise ->
a full copy: ``SnapshotBegin(position=(H, S0))``, the datalet's contents (possibly fuzzy:
writes keep landing while it streams), ``SnapshotEnd(consistent_at=S1)``, then the entries
from ``S0+1``. Entries are blind puts/deletes, so replaying them over the fuzzy copy gives
exactly the upstream's state once the receiver reaches S1; until then it must not serve
reads (``synced`` stays false).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

import grpc

from bespokv.config import Tuning
from bespokv.datalets.base import RESERVED_PREFIX, Op
from bespokv.datalets.worker import DataletWorker
from bespokv.errors import CorruptionError, UnavailableError, WrongShardError
from bespokv.peers import PeerPool
from bespokv.proto import bespokv_pb2 as pb

__all__ = [
    "POSITION_KEY",
    "decode_position",
    "ReplicationLog",
    "ReplicatedStore",
    "Link",
    "Restart",
    "feed",
    "apply_message",
    "CatchUp",
    "pull",
    "entries_message",
    "ops_from_mutations",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Where a replica's position lives in its datalet (frozen).
POSITION_KEY = RESERVED_PREFIX + b"bespokv/position"
#: The stored form of the replica's values (frozen; see representation.py).
FORMAT_KEY = RESERVED_PREFIX + b"bespokv/format"
_POS = struct.Struct(">Q")


class Restart(Exception):
    """The local store was reset (a full copy arrived); streams fed from it must restart."""


def _encode_position(history: bytes, seq: int) -> bytes:
    return _POS.pack(seq) + history


def decode_position(data: bytes) -> tuple[bytes, int]:
    if len(data) < _POS.size:
        raise CorruptionError("replication position record is truncated")
    return data[_POS.size :], _POS.unpack_from(data)[0]


def ops_from_mutations(muts: Iterable[pb.Mutation]) -> list[Op]:
    return [(m.key, None if m.delete else m.value) for m in muts]


def _mutations(ops: list[Op]) -> list[pb.Mutation]:
    return [pb.Mutation(key=k, delete=True) if v is None else pb.Mutation(key=k, value=v) for k, v in ops]


def _entry_size(ops: list[Op]) -> int:
    return sum(len(k) + (len(v) if v is not None else 0) + 8 for k, v in ops) + 16


class ReplicationLog:
    """Recent write batches ``(seq, ops)`` with consecutive sequence numbers.

    Holds everything after the lowest pin (so streams in flight never lose entries) plus
    ``retain`` entries more, for replicas that reconnect shortly after.
    """

    def __init__(self, retain: int = 50_000) -> None:
        self.retain = retain
        self._seqs: list[int] = []
        self._ops: list[list[Op]] = []
        self._sizes: list[int] = []
        self._off = 0
        self.last = 0
        self._pins: dict[object, int] = {}

    @property
    def first(self) -> int:
        """Seq of the oldest entry held (``last + 1`` when empty)."""
        return self._seqs[self._off] if self._off < len(self._seqs) else self.last + 1

    def __len__(self) -> int:
        return len(self._seqs) - self._off

    def reset(self, seq: int) -> None:
        self._seqs, self._ops, self._sizes, self._off = [], [], [], 0
        self.last = seq

    def append(self, seq: int, ops: list[Op]) -> None:
        if seq != self.last + 1:
            raise AssertionError(f"log append out of order: {seq} after {self.last}")
        self._seqs.append(seq)
        self._ops.append(ops)
        self._sizes.append(_entry_size(ops))
        self.last = seq
        if len(self._seqs) - self._off > self.retain + 1024:
            self.trim()

    def covers(self, after: int) -> bool:
        """True when every entry after ``after`` (up to ``last``) is held."""
        return self.first - 1 <= after <= self.last

    def after(self, after: int, max_bytes: int) -> list[tuple[int, list[Op]]]:
        """Entries with seq > ``after``, up to about ``max_bytes`` (at least one)."""
        if after >= self.last:
            return []
        if not self.covers(after):
            raise Restart(f"log no longer holds entries after {after} (first is {self.first})")
        i = self._off + (after + 1 - self.first)
        out: list[tuple[int, list[Op]]] = []
        size = 0
        n = len(self._seqs)
        while i < n:
            out.append((self._seqs[i], self._ops[i]))
            size += self._sizes[i]
            i += 1
            if size >= max_bytes:
                break
        return out

    def pin(self, owner: object, seq: int) -> None:
        self._pins[owner] = seq

    def unpin(self, owner: object) -> None:
        self._pins.pop(owner, None)

    def trim(self) -> None:
        floor = min(self._pins.values(), default=self.last)
        keep_from = min(floor, self.last) - self.retain + 1
        drop = 0
        n = len(self._seqs)
        while self._off + drop < n and self._seqs[self._off + drop] < keep_from:
            drop += 1
        self._off += drop
        if self._off > 4096 and self._off * 2 > n:
            del self._seqs[: self._off], self._ops[: self._off], self._sizes[: self._off]
            self._off = 0


class ReplicatedStore:
    """A datalet plus its replication position and log (one shard replica).

    Every change of the datalet and the in-memory position/log that describes it happens
    under :attr:`lock`, in a task shielded from cancellation: the datalet call runs on the
    worker thread and cannot be interrupted, so a cancelled caller (a client that gave up)
    must not leave the datalet ahead of ``seq`` and the log. Reads take no lock.
    """

    def __init__(self, datalet: DataletWorker, tuning: Tuning) -> None:
        self.datalet = datalet
        self.tuning = tuning
        self.history = b""
        self.seq = 0
        self.generation = 0
        #: highest seq the upstream said it had reached (Entries.head_seq; in memory only)
        self.head_seq_seen = 0
        self.log = ReplicationLog(tuning.log_retain_entries)
        self.lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self.load()

    # -- position -------------------------------------------------------------------------

    def load(self) -> None:
        """Read the stored position; at construction, before the worker has any call."""
        raw = self.datalet.inner.get(POSITION_KEY)
        if raw is not None:
            self.history, self.seq = decode_position(raw)
        self.log.reset(self.seq)

    def position(self) -> pb.Position:
        return pb.Position(history=self.history, seq=self.seq)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_change(self) -> None:
        await self._changed.wait()

    async def _locked(self, coro: Coroutine[Any, Any, T]) -> T:
        async def run() -> T:
            async with self.lock:
                return await coro

        return await asyncio.shield(asyncio.ensure_future(run()))

    # -- writes ---------------------------------------------------------------------------

    async def append_local(self, ops: list[Op], admit: Callable[[], Awaitable[None]] | None = None) -> int:
        """Head/master: number ``ops``, apply them with the new position, log them.
        ``admit`` runs first, under the lock (so no other write is numbered between its
        check and this one): it may wait, or raise to refuse the write."""

        async def append() -> int:
            if admit is not None:
                await admit()
            return await self._append(ops)

        return await self._locked(append())

    async def cas_local(
        self, key: bytes, expected: bytes | None, value: bytes | None, admit: Callable[[], Awaitable[None]] | None = None
    ) -> tuple[bool, bytes | None, int]:
        """Head/master: compare and set atomically with every other write of the shard;
        returns ``(succeeded, value before, seq to wait for)``. ``admit``: as for
        :meth:`append_local`."""

        async def cas() -> tuple[bool, bytes | None, int]:
            if admit is not None:
                await admit()
            current = await self.datalet.get(key)
            if current != expected:
                return False, current, self.seq
            return True, current, await self._append([(key, value)])

        return await self._locked(cas())

    async def _append(self, ops: list[Op]) -> int:
        if not self.history:
            self.history = os.urandom(16)
        seq = self.seq + 1
        await self.datalet.write([*ops, (POSITION_KEY, _encode_position(self.history, seq))])
        self.seq = seq
        self.log.append(seq, ops)
        self._notify()
        return seq

    async def apply_entries(self, entries: Iterable[pb.ReplEntry]) -> int:
        """Downstream: apply entries after our seq in one datalet batch; returns how many."""
        return await self._locked(self._apply_entries(list(entries)))

    async def _apply_entries(self, entries: list[pb.ReplEntry]) -> int:
        todo: list[tuple[int, list[Op]]] = []
        expect = self.seq + 1
        for e in entries:
            if e.seq < expect:
                continue  # already applied (a resend after reconnect)
            if e.seq != expect:
                raise WrongShardError(f"replication gap: got entry {e.seq}, expected {expect}")
            todo.append((e.seq, ops_from_mutations(e.mutations)))
            expect += 1
        if not todo:
            return 0
        if len(todo) == 1:
            ops = list(todo[0][1])
        else:
            ops = [op for _, batch in todo for op in batch]
        last = todo[-1][0]
        ops.append((POSITION_KEY, _encode_position(self.history, last)))
        await self.datalet.write(ops)
        for seq, batch in todo:
            self.log.append(seq, batch)
        self.seq = last
        self._notify()
        return len(todo)

    async def begin_copy(self) -> None:
        """A full copy starts: forget the position first (a crash now restarts the copy)."""

        async def begin() -> None:
            await self.datalet.write([(POSITION_KEY, None)])
            self.history, self.seq = b"", 0
            self.log.reset(0)
            self.generation += 1
            await self.datalet.clear()
            # Until the copy ends the data has no position: say it is plain (see
            # representation.py, which would otherwise guess from the values).
            await self.datalet.write([(FORMAT_KEY, b"plain")])
            self._notify()

        await self._locked(begin())

    async def copy_chunk(self, pairs: Iterable[pb.KeyValue]) -> None:
        ops: list[Op] = [(kv.key, kv.value) for kv in pairs if not kv.key.startswith(RESERVED_PREFIX)]
        if ops:
            await self._locked(self.datalet.write(ops))

    async def finish_copy(self, position: pb.Position) -> None:
        async def finish() -> None:
            await self.datalet.write([(POSITION_KEY, _encode_position(position.history, position.seq))])
            self.history, self.seq = position.history, position.seq
            self.log.reset(self.seq)
            self.generation += 1
            self._notify()

        await self._locked(finish())

    def adopt_history(self, history: bytes) -> None:
        """Keep the data, take a new history id (a head that found no better replica)."""
        self.history = history


def entries_message(shard: int, entries: list[tuple[int, list[Op]]], head_seq: int = 0) -> pb.ReplMessage:
    return pb.ReplMessage(
        shard=shard,
        entries=pb.Entries(
            entries=[pb.ReplEntry(seq=s, mutations=_mutations(ops)) for s, ops in entries], head_seq=head_seq
        ),
    )


async def feed(
    store: ReplicatedStore,
    shard: int,
    their: pb.Position,
    *,
    follow: bool,
    owner: object,
    chunk: int = 512,
) -> AsyncIterator[pb.ReplMessage]:
    """Messages that bring a replica at position ``their`` up to ``store`` (and beyond,
    forever, when ``follow``). Raises :class:`Restart` if ``store`` is reset meanwhile."""
    gen = store.generation
    log_ = store.log
    max_bytes = store.tuning.repl_batch_bytes
    try:
        if their.history == store.history and their.seq <= store.seq and log_.covers(their.seq) and (
            store.history or their.seq == 0
        ):
            sent = their.seq
        else:
            s0 = store.seq
            sent = s0
            log_.pin(owner, s0)
            yield pb.ReplMessage(
                shard=shard, snapshot_begin=pb.SnapshotBegin(position=pb.Position(history=store.history, seq=s0))
            )
            async for pairs in store.datalet.export(chunk):
                if store.generation != gen:
                    raise Restart("store reset during a copy")
                kvs = [pb.KeyValue(key=k, value=v) for k, v in pairs if not k.startswith(RESERVED_PREFIX)]
                if kvs:
                    yield pb.ReplMessage(shard=shard, snapshot_chunk=pb.ExportChunk(pairs=kvs))
            if store.generation != gen:
                raise Restart("store reset during a copy")
            yield pb.ReplMessage(shard=shard, snapshot_end=pb.SnapshotEnd(consistent_at=store.seq))
        while True:
            if store.generation != gen:
                raise Restart("store reset")
            log_.pin(owner, sent)
            batch = log_.after(sent, max_bytes)
            if batch:
                yield entries_message(shard, batch, store.seq)
                sent = batch[-1][0]
                continue
            if not follow:
                return
            await store.wait_change()
    finally:
        log_.unpin(owner)


class CatchUp:
    """Receiver-side progress of one upstream stream: the position that makes it exact."""

    def __init__(self, target: pb.Position) -> None:
        self.history = target.history
        self.seq = target.seq
        self.copy_position: pb.Position | None = None  # set between begin and end of a copy

    def done(self, store: ReplicatedStore) -> bool:
        return self.copy_position is None and store.history == self.history and store.seq >= self.seq


async def apply_message(store: ReplicatedStore, msg: pb.ReplMessage, progress: CatchUp) -> None:
    """Apply one replication message to ``store`` (downstream side)."""
    kind = msg.WhichOneof("body")
    if kind == "entries":
        store.head_seq_seen = max(store.head_seq_seen, msg.entries.head_seq)
        await store.apply_entries(msg.entries.entries)
    elif kind == "snapshot_begin":
        await store.begin_copy()
        pos = msg.snapshot_begin.position
        progress.copy_position = pos
        progress.history = pos.history
        progress.seq = max(progress.seq, pos.seq)
    elif kind == "snapshot_chunk":
        if progress.copy_position is None:
            raise WrongShardError("snapshot chunk outside a copy")
        await store.copy_chunk(msg.snapshot_chunk.pairs)
    elif kind == "snapshot_end":
        if progress.copy_position is None:
            raise WrongShardError("snapshot_end without snapshot_begin")
        await store.finish_copy(progress.copy_position)
        progress.seq = max(progress.seq, msg.snapshot_end.consistent_at)
        progress.copy_position = None
    else:
        raise WrongShardError(f"unexpected replication message {kind!r}")


async def pull(store: ReplicatedStore, peers: PeerPool, shard: int, source: str, me: str) -> None:
    """Bring ``store`` up to ``source``'s position as of the pull (``Peer.Pull``: the
    entries after ours from its log, or a full copy and the entries after it)."""
    call = peers.peer(source).Pull(
        pb.PullRequest(shard=shard, position=store.position(), from_node=me), metadata=peers.metadata
    )
    progress = CatchUp(store.position())
    async for msg in call:
        await apply_message(store, msg, progress)
    if progress.copy_position is not None:
        raise UnavailableError(f"shard {shard}: the pull from {source} ended in the middle of a copy")


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
