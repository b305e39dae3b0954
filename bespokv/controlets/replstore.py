"""A master-slave shard replica's datalet with its replication position and log.

The position ``(history, seq)`` is stored under ``POSITION_KEY`` (frozen layout: uint64
big-endian ``seq``, then the 16-byte ``history`` id), in the same atomic batch as the data
it describes, so after any crash the data and the position agree.
"""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

from bespokv.config import Tuning
from bespokv.controlets.replog import ReplicationLog
from bespokv.datalets.base import RESERVED_PREFIX, Op
from bespokv.datalets.worker import DataletWorker
from bespokv.errors import CorruptionError, WrongShardError
from bespokv.proto import bespokv_pb2 as pb

__all__ = [
    "POSITION_KEY", "FORMAT_KEY", "MERGED_KEY", "ReplicatedStore", "encode_position", "decode_position",
    "ops_from_mutations",
]

T = TypeVar("T")

#: Where a replica's position lives in its datalet (frozen).
POSITION_KEY = RESERVED_PREFIX + b"bespokv/position"
#: The stored form of the replica's values (frozen; see representation.py).
FORMAT_KEY = RESERVED_PREFIX + b"bespokv/format"
#: Present only in an active-active replica that has merged every other replica's values
#: for a live switch to a master-slave mode: the 16-byte history id its plain form will
#: start (frozen; see representation.py).
MERGED_KEY = RESERVED_PREFIX + b"bespokv/merged"
_POS = struct.Struct(">Q")


def encode_position(history: bytes, seq: int) -> bytes:
    return _POS.pack(seq) + history


def decode_position(data: bytes) -> tuple[bytes, int]:
    if len(data) < _POS.size:
        raise CorruptionError("replication position record is truncated")
    return data[_POS.size :], _POS.unpack_from(data)[0]


def ops_from_mutations(muts: Iterable[pb.Mutation]) -> list[Op]:
    return [(m.key, None if m.delete else m.value) for m in muts]


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
        await self.datalet.write([*ops, (POSITION_KEY, encode_position(self.history, seq))])
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
        ops.append((POSITION_KEY, encode_position(self.history, last)))
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
            await self.datalet.write([(POSITION_KEY, encode_position(position.history, position.seq))])
            self.history, self.seq = position.history, position.seq
            self.log.reset(self.seq)
            self.generation += 1
            self._notify()

        await self._locked(finish())

    def adopt_history(self, history: bytes) -> None:
        """Keep the data, take a new history id (a head that found no better replica)."""
        self.history = history
