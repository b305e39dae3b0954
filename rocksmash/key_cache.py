"""The key cache: a persistent cache on local disk of rows of cloud tables (decision 0024).

Why rows: YCSB's scrambled zipfian spreads the hot keys over every block, so a cache of
whole blocks spends most of its bytes on cold rows; a row is the one unit in which the
local disk holds heat that the in-memory block cache does not (decision 0018 measured
it). A hot key's read answered here needs neither its block nor a GET.

What an entry is: for one cloud table (by number) and one key, the *newest* version of
the key in that table, ``(seq, value)``, value ``None`` for a deletion. Cloud tables are
immutable and their numbers are never reused, so an entry can never be stale: a write of
the key lands in a newer table, which the read path visits first, and a compaction's
output is a new table with its own entries (filled by cache_fill.py from the old ones'
keys). Entries of a table that leaves the database are dropped with it
(:meth:`drop_table`, through :meth:`DataCache.drop_table`). Range tombstones are not
rows: the read path applies a table's tombstones (``Table.ranges``) on top of the row,
as it does on top of a block. A reader at an older snapshot than the entry's ``seq``
reads the block, as without the cache.

Storage: the DataCache's log-structured segments, unchanged (crash safety, the CRC per
record, ``INDEX``, FIFO eviction with credits, capacity), with a row as the record's
data and the key's 32-bit slot (xxh3 of the key, never 0xFFFFFFFF) in place of the block
number. Row payload (little-endian; docs/format.md, "Key cache rows")::

    seq: u64 | kind: u8 (1 put, 0 delete) | key_len: u32 | key | value (put only)

Two keys of one table with the same slot share it (the later put replaces the earlier);
every hit compares the stored key with the one asked for, so a collision is a miss,
never another key's value. Every hit checks the record's CRC (the row has no checksum of
its own), so a torn or damaged record is a miss, dropped from the index.

Heat: admission is ``always``: every row read from a cloud block because the block cache
did not have it, and one in SAMPLE_EVERY point reads that the block cache answered
(:func:`sample`; without it the key cache would never learn the keys whose blocks stay in
memory, and a compaction, which empties the block cache of its inputs, would leave them
to a GET each). A sampled read of a cached row counts a hit on it. The DataCache's
credits keep the rows that are hit again, and an entry's hit count is its heat for the
compaction-aware fill.
"""

from __future__ import annotations

import os
import shutil
import struct
import time
from threading import BoundedSemaphore, Lock
from typing import TYPE_CHECKING, Any

from xxhash import xxh3_64_intdigest

from .data_cache import DROP_BLOCK, RECORD_HEADER_SIZE, DataCache
from .errors import ClosedError
from .memtable import MISSING

if TYPE_CHECKING:
    from .block import Block
    from .table import Table

__all__ = ["KeyCache", "lookup", "lookup_entry", "sample", "newest_version", "slot", "encode_row",
           "decode_row", "row_bytes", "attach", "fit", "ROW_HEADER_SIZE", "MAX_SEQ"]

# -- frozen layout ---------------------------------------------------------------------

#: One in this many point reads answered by the block cache from a cloud table offers its
#: row (or, cached, counts a hit on it): a key read k times is seen with probability
#: 1 - (3/4)^k, so hot keys are found within a few reads, while the block-cache hit path
#: pays a countdown on three reads of four (about 0.1 us) and a hash and a dict lookup
#: on the fourth.
SAMPLE_EVERY = 4
#: Sampled rows queued for the fetch threads at most; more samples are skipped. They wait
#: in one list written by one task (:meth:`KeyCache.write_pending`), not a task each, so
#: the bound is on memory (rows are about 160 bytes: about 640 KiB at most) and is large
#: enough that a reader outrunning the one writer does not lose its samples.
MAX_QUEUED_WRITES = 4096
#: Segment file size. Rows are small (about 160 bytes) and a reclaim frees one segment,
#: so segments are smaller than the DataCache's: a 16 MiB key cache is 64 files, and a
#: reclaim relocates or evicts about 1,600 rows at a time (the DataCache caps it at an
#: eighth of the capacity for smaller caches).
DEFAULT_SEGMENT_SIZE = 256 << 10

_ROW = struct.Struct("<QBI")            # seq, kind, key length
ROW_HEADER_SIZE = _ROW.size             # 13
#: Higher than any sequence number: "the newest version".
MAX_SEQ = (1 << 64) - 1


def slot(key: bytes) -> int:
    """The 32-bit slot of ``key`` within its table (the DataCache's block field)."""
    h = xxh3_64_intdigest(key) & 0xFFFFFFFF
    return h if h != DROP_BLOCK else 0


def encode_row(key: bytes, seq: int, value: bytes | None) -> bytes:
    if value is None:
        return _ROW.pack(seq, 0, len(key)) + key
    return b"".join((_ROW.pack(seq, 1, len(key)), key, value))


def row_bytes(key: bytes, value: bytes | None) -> int:
    """Bytes a row takes in a segment (the record header included)."""
    return RECORD_HEADER_SIZE + ROW_HEADER_SIZE + len(key) + (len(value) if value else 0)


def decode_row(data: bytes) -> tuple[bytes, int, bytes | None] | None:
    """``(key, seq, value)`` of a row payload, or None if it is malformed."""
    if len(data) < ROW_HEADER_SIZE:
        return None
    seq, kind, n = _ROW.unpack_from(data)
    end = ROW_HEADER_SIZE + n
    if end > len(data) or kind > 1 or (kind == 0 and end != len(data)):
        return None
    return data[ROW_HEADER_SIZE:end], seq, (data[end:] if kind else None)


class KeyCache:
    """Rows of cloud tables on local disk, in ``dirpath``, within ``capacity`` bytes of
    segment files. Thread-safe (the DataCache's lock). Raises as :class:`DataCache`."""

    def __init__(self, dirpath: str, capacity: int, *,
                 segment_size: int = DEFAULT_SEGMENT_SIZE) -> None:
        self.store = DataCache(dirpath, capacity, admission="always", ghost_entries=0,
                               segment_size=segment_size)
        self._collisions = 0
        #: Countdown to the next sampled block-cache hit (racy across threads on purpose:
        #: a sample more or less does not matter; see :func:`sample`).
        self.tick = SAMPLE_EVERY
        self.sampled = 0
        #: Sampled rows being written by the fetch threads, at most MAX_QUEUED_WRITES.
        self.writes = BoundedSemaphore(MAX_QUEUED_WRITES)
        #: Sampled rows waiting for the one queued writer task (see :func:`sample`):
        #: ``(table, slot, row)``; guarded by ``_pending_lock``.
        self._pending: list[tuple[int, int, bytes]] = []
        self._pending_lock = Lock()

    @property
    def capacity(self) -> int:
        return self.store.capacity

    def get(self, table: int, key: bytes) -> tuple[int, bytes | None] | None:
        """``(seq, value)`` of the newest version of ``key`` in ``table`` if cached."""
        data = self.store.get(table, slot(key))  # checks the CRC: the row has none
        if data is None:
            return None
        row = decode_row(data)
        if row is None or row[0] != key:
            self._collisions += 1  # (another key of this slot; a count, not exact)
            return None
        return row[1], row[2]

    def contains(self, table: int, key: bytes) -> bool:
        """Whether ``key`` has a slot in ``table``'s entries (no counting; a collision
        answers True, as it only guides read-ahead)."""
        return self.store.contains(table, slot(key))

    def put(self, table: int, key: bytes, seq: int, value: bytes | None, *,
            force: bool = False, if_room: bool = False, wait: bool = True) -> bool:
        """Cache the newest version of ``key`` in ``table``; see :meth:`DataCache.put`
        for ``force`` (known hot: one eviction credit), ``if_room`` and ``wait``."""
        return self.store.put(table, slot(key), encode_row(key, seq, value), force=force,
                              if_room=if_room, wait=wait)

    def rows(self, table: int) -> list[tuple[bytes, int]]:
        """``(key, heat)`` of every intact entry of ``table``, heat being its hits since
        it came in (plus one if it holds an eviction credit: put hot by a compaction,
        or hit, and not yet through a reclaim without a read)."""
        out = []
        store = self.store
        for s in store.cached_blocks(table):
            data = store.peek(table, s)
            row = decode_row(data) if data is not None else None
            if row is not None:
                out.append((row[0], store.hotness(table, s) + store.credit(table, s)))
        return out

    def put_sampled(self, table: int, s: int, row: bytes) -> None:
        """Write a sampled row (on a fetch thread; see :func:`sample`)."""
        try:
            self.store.put(table, s, row)
        except ClosedError:
            pass  # closed meanwhile: the sample is lost, as a cache may lose anything
        finally:
            self.writes.release()

    def queue_sampled(self, table: int, s: int, row: bytes) -> bool:
        """Add a sampled row to the pending batch (a ``writes`` permit held); return
        whether the batch was empty, so the caller must start :meth:`write_pending`."""
        with self._pending_lock:
            self._pending.append((table, s, row))
            return len(self._pending) == 1

    def write_pending(self) -> None:
        """Write every pending sampled row (on a fetch thread): one task per batch, not
        per row, so the readers wake a fetch thread once per batch."""
        while True:
            with self._pending_lock:
                batch, self._pending = self._pending, []
            if not batch:
                return
            for table, s, row in batch:
                self.put_sampled(table, s, row)

    def drop_pending(self) -> None:
        """The writer task could not be started (closing): give back the permits."""
        with self._pending_lock:
            batch, self._pending = self._pending, []
        for _ in batch:
            self.writes.release()

    def wait_for_writes(self, timeout: float) -> bool:
        """Wait until no sampled row is queued (at most ``timeout`` seconds); return
        whether none is."""
        deadline = time.monotonic() + timeout
        taken = 0
        try:
            while taken < MAX_QUEUED_WRITES:
                if not self.writes.acquire(timeout=max(0.0, deadline - time.monotonic())):
                    return False
                taken += 1
            return True
        finally:
            for _ in range(taken):
                self.writes.release()

    def drop_table(self, table: int) -> None:
        self.store.drop_table(table)

    def set_capacity(self, capacity: int) -> None:
        self.store.set_capacity(capacity)

    def stats(self) -> dict[str, Any]:
        """The DataCache's counters of the rows (``entries`` are rows), and
        ``collisions``."""
        return dict(self.store.stats(), collisions=self._collisions, sampled=self.sampled)

    def close(self) -> None:
        self.store.close()


def newest_version(blk: "Block", key: bytes, seq: int) -> tuple[int, bytes | None] | None:
    """The newest version of ``key`` in ``blk`` with sequence <= ``seq``."""
    j = blk.find(key)
    if j < 0:
        return None
    seqs, n = blk.seqs, blk.n
    while True:
        if seqs[j] <= seq:
            return seqs[j], blk.value(j)
        j += 1
        if j == n or not blk.key_is(j, key):
            return None


def lookup_entry(t: "Table", key: bytes, seq: int, i: int) -> tuple[int, bytes | None] | None:
    """``Table.get_entry`` for a cloud table with a key cache whose block ``i`` (the one
    that may hold ``key``) is not in the block cache: the row if it is cached and visible
    at ``seq``, else the block's answer (and the block's newest version of the key goes
    into the key cache)."""
    kc: KeyCache = t.rows  # type: ignore[assignment]  # (callers check it is set)
    hit = kc.get(t.number, key)
    if hit is not None and hit[0] <= seq:
        return hit
    blk = t.block(i)
    newest = newest_version(blk, key, MAX_SEQ)
    if newest is None:
        return None  # not in this table (a bloom false positive): nothing to cache
    if hit is None:
        kc.put(t.number, key, newest[0], newest[1], wait=False)  # a reader: best-effort
    return newest if newest[0] <= seq else newest_version(blk, key, seq)


def sample(t: "Table", key: bytes, blk: "Block") -> None:
    """``Table.get`` found ``key``'s block ``blk`` of cloud table ``t`` in the block cache:
    one call in SAMPLE_EVERY counts a hit on the key's row, or puts the row in."""
    kc: KeyCache = t.rows  # type: ignore[assignment]  # (the caller checks it is set)
    kc.tick -= 1
    if kc.tick > 0:
        return
    kc.tick = SAMPLE_EVERY
    kc.sampled += 1
    s = slot(key)
    if kc.store.touch(t.number, s):
        return
    e = newest_version(blk, key, MAX_SEQ)
    if e is None:
        return
    row = encode_row(key, e[0], e[1])
    if t.prefetch is None:
        kc.store.put(t.number, s, row, wait=False)  # a reader: best-effort
    elif kc.writes.acquire(False):  # else too many are queued: skip this sample
        # The write goes to the fetch threads: a pwrite took 450 us on the loaded
        # development machine, ten times the rest of a read, and the row is final (the
        # block is immutable) whenever it lands. Rows queue in one batch with one
        # writer task: a task per row woke a fetch thread per sample.
        if kc.queue_sampled(t.number, s, row):
            try:
                t.prefetch(kc.write_pending)
            except RuntimeError:  # the executor was shut down: the database is closing
                kc.drop_pending()


def lookup(t: "Table", key: bytes, seq: int, i: int) -> object:
    """``Table.get`` past its bloom filter, as :func:`lookup_entry`: the value, None for
    a deletion, MISSING if the table has no version of ``key`` visible at ``seq``."""
    e = lookup_entry(t, key, seq, i)
    return MISSING if e is None else e[1]


def fit(dc: DataCache, cache_bytes: int, options: Any) -> None:
    """Split ``cache_bytes`` between ``dc`` and its key cache (``dc.rows``), per
    ``options.cloud_cache_split`` (after every flush and compaction with one budget)."""
    data, rows = options.cloud_cache_split(cache_bytes)
    dc.set_capacity(data)
    if dc.rows is not None and rows:
        dc.rows.set_capacity(rows)


def attach(dc: DataCache, dirpath: str, cache_bytes: int, options: Any) -> None:
    """Give ``dc`` its key cache in ``dirpath`` if ``options.key_cache_size`` asks for
    one, and split ``cache_bytes`` between them."""
    data, rows = options.cloud_cache_split(cache_bytes)
    if rows:
        dc.rows = KeyCache(dirpath, rows)
        dc.set_capacity(data)
    elif os.path.isdir(dirpath):
        shutil.rmtree(dirpath, ignore_errors=True)  # a key cache of an earlier open
