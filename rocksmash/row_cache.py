"""The row cache: the current value of hot keys, so a repeated point read skips the tables.

Why: under skewed (zipfian) reads a few keys take most reads, but each lives in a 4 KiB
block with ~30 colder neighbours, so the block cache spends most of its bytes on rows
nobody asks for. One cached row costs about 300 bytes against its block's 4 KiB, and a
hit costs one dict lookup instead of a bloom probe, two bisects and a value slice.
The budget comes out of ``block_cache_size`` (the block cache gets the rest), so the
engine's total cache memory is the same with or without it.

What an entry means: ``rows[key]`` is the value of ``key`` as of the newest write
(``None``: absent or deleted), valid for readers *without* a snapshot only. That holds
because (the DB's write lock is the one lock for all three):

- a reader that missed fills the entry with the value it read at sequence ``s`` only
  under the write lock and only if the DB's last sequence is still ``s`` (no write of
  any key came in between): :meth:`fill` with ``current == seen``;
- every writer, under the write lock, after publishing its sequence number, replaces
  the entry of each key it wrote if there is one (:meth:`update`); it does not add
  entries (the memtable already serves recent writes);
- hits take no lock: a dict read is atomic under the GIL, and an entry is only ever
  replaced by a newer value.

Eviction: least recently used, by an ``OrderedDict`` (a hit moves the key to the end, a
fill past the budget drops from the front). Each entry is charged its key and value
bytes plus :data:`ROW_OVERHEAD` for the Python objects around them, so the budget is
memory, not payload.
"""

from __future__ import annotations

from collections import OrderedDict

from .range_del import RangeEnd

__all__ = ["RowCache", "ROW_OVERHEAD"]

#: Bytes per entry on top of key and value: two bytes objects' headers (33 each, rounded
#: up by the allocator), the OrderedDict's hash slot, entry and linked-list node. Measured
#: with tracemalloc at 190-210 for 24-byte keys and 100-byte values (tests/rocksmash/
#: test_row_cache.py checks it stays within bounds).
ROW_OVERHEAD = 200


class RowCache:
    """See the module docstring for the contract. ``capacity`` in bytes (> 0)."""

    __slots__ = ("rows", "capacity", "used", "hits", "misses")

    def __init__(self, capacity: int) -> None:
        self.rows: OrderedDict[bytes, bytes | None] = OrderedDict()
        self.capacity = capacity
        self.used = 0
        self.hits = 0
        self.misses = 0

    def fill(self, key: bytes, value: bytes | None, seen: int, current: int) -> None:
        """After a miss: remember ``value``, read at sequence ``seen``, if the database's
        last sequence ``current`` is still ``seen``. Caller holds the DB write lock."""
        if seen != current:
            return  # a write came in between: the value may be stale already
        rows = self.rows
        old = rows.get(key, rows)
        if old is not rows:  # two readers missed at once: the second one refreshes it
            self.used -= len(old) if old is not None else 0
            rows.move_to_end(key)
        else:
            self.used += len(key) + ROW_OVERHEAD
        rows[key] = value
        self.used += len(value) if value is not None else 0
        while self.used > self.capacity and rows:
            k, v = rows.popitem(last=False)
            self.used -= len(k) + ROW_OVERHEAD + (len(v) if v is not None else 0)

    def update(self, key: bytes, value: bytes | None) -> None:
        """A write of ``key`` was published (caller holds the DB write lock): replace
        its entry, if cached, with ``value`` (None for a deletion)."""
        rows = self.rows
        old = rows.get(key, rows)
        if old is rows:
            return
        rows[key] = value
        self.used += (len(value) if value is not None else 0) - (len(old) if old is not None
                                                                 else 0)
        # A larger value may overrun the budget; the next fill trims it (at most one
        # value's bytes over, never unbounded).

    def update_batch(self, ops: list[tuple[bytes, bytes | None]]) -> None:
        """:meth:`update` for each operation of a published batch, in order."""
        rows = self.rows
        for key, value in ops:
            if type(value) is RangeEnd:  # a range delete: every cached key in it is gone
                end = value.end
                for k in [k for k in rows if key <= k < end]:
                    self.update(k, None)
            elif key in rows:
                self.update(key, value)

    def clear(self) -> None:
        self.rows.clear()
        self.used = 0

    def stats(self) -> dict[str, int]:
        return {"capacity": self.capacity, "used": self.used, "rows": len(self.rows),
                "hits": self.hits, "misses": self.misses}
