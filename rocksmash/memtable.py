"""The memtable: recent writes in memory, in a dict plus a sorted key list.

The dict gives O(1) point reads (the hot path); the ``SortedList`` gives ordered scans.
Keys new to the memtable are only appended to ``pending`` by writers and folded into the
sorted list by the first scan that needs them, so workloads without scans never pay for
sorting (a flush sends ``entries``, ``old`` and ``ranges`` to a worker process, which sorts
there; see ``jobs.flush_memtable``).
Each key keeps its newest version in ``entries``; an overwritten version is moved to
``old`` only when someone may still need it (a live snapshot at or after its sequence
number, or a reader racing a multi-key batch), so the common case stores one version.

Thread contract: one writer at a time (the DB write lock) mutates the active memtable;
readers never lock for point reads (dict reads are atomic under the GIL) and take the
write lock briefly per chunk of a scan of the *active* memtable when it has pending keys
to fold (else none). A sealed memtable gets no more writes; its ``fold_lock`` keeps two
scanners from folding ``pending`` at once.
"""

from __future__ import annotations

import threading
from itertools import islice
from typing import Iterator

from sortedcontainers import SortedList

from .range_del import RangeEnd, Tombstone, covering_seq

__all__ = ["Memtable", "MISSING", "ENTRY_OVERHEAD"]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


#: Returned by lookups that found no version of a key (``None`` means "deleted").
MISSING = _Missing()

#: Bytes charged per entry on top of key and value: the Python objects around them (two
#: bytes headers, the (seq, value) tuple, the dict slot, the sorted-list slot). Measured
#: with tracemalloc at about 200 for 24-byte keys, so ``memtable_size`` bounds memory.
ENTRY_OVERHEAD = 200
_CHUNK = 64


class Memtable:
    __slots__ = ("entries", "keys", "pending", "fold_lock", "old", "size", "segment",
                 "table_number", "count", "ranges", "last_seq")

    def __init__(self, segment: int, table_number: int) -> None:
        #: key -> (seq, value); value None is a deletion.
        self.entries: dict[bytes, tuple[int, bytes | None]] = {}
        self.keys = SortedList()
        #: Keys added since the last fold into ``keys``.
        self.pending: list[bytes] = []
        self.fold_lock = threading.Lock()
        #: key -> older versions still needed, oldest first.
        self.old: dict[bytes, list[tuple[int, bytes | None]]] = {}
        self.size = 0
        self.count = 0
        #: Range tombstones (range_del.py), sorted by start; replaced, never mutated.
        self.ranges: list[Tombstone] = []
        #: The WAL segment holding exactly this memtable's writes, and its table number.
        self.segment = segment
        self.table_number = table_number
        #: Set when the memtable is sealed: the last sequence number written to it (or,
        #: if none, the one before its segment's first). None while it takes writes.
        self.last_seq: int | None = None

    def put(self, key: bytes, seq: int, value: bytes | None, keep_upto: int) -> None:
        """Add a version. The replaced version is kept if its seq <= ``keep_upto``."""
        entries = self.entries
        e = entries.get(key)
        if e is None:
            self.pending.append(key)
        elif e[0] <= keep_upto:
            old = self.old.get(key)
            if old is None:
                self.old[key] = [e]
            else:
                old.append(e)
        entries[key] = (seq, value)
        self.count += 1
        self.size += len(key) + (len(value) if value is not None else 0) + ENTRY_OVERHEAD

    def put_batch(self, ops: list[tuple[bytes, bytes | None]], seq: int,
                  keep_upto: int) -> None:
        """:meth:`put` of each operation in order, with sequence numbers from ``seq``
        (a range delete, value :class:`RangeEnd`, becomes a tombstone of its own)."""
        entries, pending, old = self.entries, self.pending, self.old
        values = [v for _, v in ops]
        if keep_upto < 0 and RangeEnd not in set(map(type, values)):
            # No snapshot: no replaced version is kept, so the batch goes in with C-level
            # calls (a load's batch of 1,000 in about a third of the loop's time).
            # ``dict.fromkeys`` dedupes a key written twice; the later write wins in
            # ``update`` as in the loop.
            keys = [k for k, _ in ops]
            pending += [k for k in dict.fromkeys(keys) if k not in entries]
            entries.update(zip(keys, zip(range(seq, seq + len(ops)), values)))
            self.count += len(ops)
            self.size += (sum(map(len, keys)) + sum(map(len, filter(None, values)))
                          + ENTRY_OVERHEAD * len(ops))
            return
        size = 0
        for key, value in ops:
            if type(value) is RangeEnd:
                self.add_range(key, value.end, seq)
                seq += 1
                continue
            e = entries.get(key)
            if e is None:
                pending.append(key)
            elif e[0] <= keep_upto:
                old.setdefault(key, []).append(e)
            entries[key] = (seq, value)
            seq += 1
            size += len(key) + (len(value) if value is not None else 0)
        self.count += len(ops)
        self.size += size + ENTRY_OVERHEAD * len(ops)

    def add_range(self, start: bytes, end: bytes, seq: int) -> None:
        """Add a range tombstone (counted in ``size`` and ``count`` by the caller's batch)."""
        self.ranges = sorted(self.ranges + [(start, end, seq)])
        self.size += len(start) + len(end)

    def visible(self, key: bytes, seq: int) -> tuple[int, bytes | None] | None:
        """The newest version with sequence <= ``seq``, or None if there is none here."""
        e = self.entries.get(key)
        if e is None:
            return None
        if e[0] <= seq:
            return e
        for old in reversed(self.old.get(key, ())):
            if old[0] <= seq:
                return old
        return None

    def scan(self, start: bytes | None, end: bytes | None, reverse: bool, seq: int,
             lock: threading.Lock | None) -> Iterator[tuple[list[bytes], list[bytes | None]]]:
        """Chunks of visible versions in [start, end) for merge.py (ascending chunks, or
        descending chunks when ``reverse``; each chunk ascending inside).

        Reads keys in chunks and re-seeks after each one, so writes in between are safe;
        pass the writers' ``lock`` for the active memtable (None for a sealed one).
        """
        lo, hi = start, end
        lo_incl = True
        hi_incl = False
        size = 4  # a short scan needs few memtable keys: start small, double up to _CHUNK
        while True:
            if lock is not None and self.pending:
                with lock, self.fold_lock:
                    chunk = self._chunk(lo, hi, lo_incl, hi_incl, reverse, size)
            else:
                # Nothing to fold (or a sealed memtable): no writer's lock. A key a writer
                # appends to ``pending`` after this check is from a write newer than
                # ``seq`` (writers publish the sequence number after the memtable), which
                # this scan does not see anyway; it is folded by a later scan.
                with self.fold_lock:
                    chunk = self._chunk(lo, hi, lo_incl, hi_incl, reverse, size,
                                        fold=lock is None)
            if not chunk:
                return
            keys: list[bytes] = []
            values: list[bytes | None] = []
            ranges = self.ranges
            for key in reversed(chunk) if reverse else chunk:
                e = self.visible(key, seq)
                if e is not None:
                    keys.append(key)
                    # Covered by a newer tombstone here: a deletion (it still shadows).
                    values.append(None if ranges and covering_seq(ranges, key, seq) > e[0]
                                  else e[1])
            yield keys, values
            if len(chunk) < size:
                return
            size = min(size * 2, _CHUNK)
            if reverse:
                hi, hi_incl = chunk[-1], False
            else:
                lo, lo_incl = chunk[-1], False

    def _chunk(self, lo: bytes | None, hi: bytes | None, lo_incl: bool, hi_incl: bool,
               reverse: bool, size: int, fold: bool = True) -> list[bytes]:
        """Up to ``size`` sorted keys in the range (caller holds ``fold_lock``, and, to
        ``fold`` the pending keys of the active memtable, the DB write lock)."""
        if fold and self.pending:
            self.keys.update(self.pending)
            self.pending = []
        return list(islice(self.keys.irange(lo, hi, (lo_incl, hi_incl), reverse), size))
