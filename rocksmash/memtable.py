"""The memtable: recent writes in memory, in a dict plus a sorted key list.

The dict gives O(1) point reads (the hot path); the ``SortedList`` gives ordered scans.
Each key keeps its newest version in ``entries``; an overwritten version is moved to
``old`` only when someone may still need it (a live snapshot at or after its sequence
number, or a reader racing a multi-key batch), so the common case stores one version.

Thread contract: one writer at a time (the DB write lock) mutates the active memtable;
readers never lock for point reads (dict reads are atomic under the GIL) and take the
write lock briefly per chunk of a scan of the *active* memtable. A sealed memtable is
never mutated again.
"""

from __future__ import annotations

import threading
from itertools import islice
from typing import Iterator

from sortedcontainers import SortedList

__all__ = ["Memtable", "MISSING", "ENTRY_OVERHEAD"]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


#: Returned by lookups that found no version of a key (``None`` means "deleted").
MISSING = _Missing()

#: Bytes charged per entry on top of key and value (as RocksDB charges for its arena).
ENTRY_OVERHEAD = 16
_CHUNK = 64


class Memtable:
    __slots__ = ("entries", "keys", "old", "size", "segment", "table_number", "count")

    def __init__(self, segment: int, table_number: int) -> None:
        #: key -> (seq, value); value None is a deletion.
        self.entries: dict[bytes, tuple[int, bytes | None]] = {}
        self.keys = SortedList()
        #: key -> older versions still needed, oldest first.
        self.old: dict[bytes, list[tuple[int, bytes | None]]] = {}
        self.size = 0
        self.count = 0
        #: The WAL segment holding exactly this memtable's writes, and its table number.
        self.segment = segment
        self.table_number = table_number

    def put(self, key: bytes, seq: int, value: bytes | None, keep_upto: int) -> None:
        """Add a version. The replaced version is kept if its seq <= ``keep_upto``."""
        entries = self.entries
        e = entries.get(key)
        if e is None:
            self.keys.add(key)
        elif e[0] <= keep_upto:
            old = self.old.get(key)
            if old is None:
                self.old[key] = [e]
            else:
                old.append(e)
        entries[key] = (seq, value)
        self.count += 1
        self.size += len(key) + (len(value) if value is not None else 0) + ENTRY_OVERHEAD

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
             lock: threading.Lock | None) -> Iterator[tuple[bytes, int, bytes | None]]:
        """Yield ``(key, -seq, value)`` of visible versions in [start, end), in key order.

        Reads in chunks and re-seeks after each one, so writes in between are safe; pass
        the writers' ``lock`` for the active memtable (None for a sealed one).
        """
        keys = self.keys
        lo, hi = start, end
        lo_incl = True
        hi_incl = False
        while True:
            if lock is not None:
                with lock:
                    chunk = list(islice(keys.irange(lo, hi, (lo_incl, hi_incl), reverse), _CHUNK))
            else:
                chunk = list(islice(keys.irange(lo, hi, (lo_incl, hi_incl), reverse), _CHUNK))
            for key in chunk:
                e = self.visible(key, seq)
                if e is not None:
                    yield key, -e[0], e[1]
            if len(chunk) < _CHUNK:
                return
            if reverse:
                hi, hi_incl = chunk[-1], False
            else:
                lo, lo_incl = chunk[-1], False
