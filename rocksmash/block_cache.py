"""The block cache: decoded data blocks, bounded by the bytes they are charged, CLOCK.

Why CLOCK and not an LRU list: on a hit an LRU must move the entry (a dict operation and
a method call, on every read); CLOCK only sets a flag. Decoded blocks live in their own
table's ``blocks`` list (so a hit is one list index, no hashing), and the cache keeps a
ring of ``(table, index)`` slots in insertion order. Eviction walks the ring: a slot
whose ``refs`` flag is set gets a second chance (flag cleared, moved to the back),
otherwise its block is dropped.

Thread contract: hits take no lock (a list read and a list write are atomic under the
GIL); inserts, evictions and :meth:`drop_table` take the cache lock.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import MutableSequence, Protocol

from .block import Block

__all__ = ["BlockCache", "BlockSlots"]


class BlockSlots(Protocol):
    """What the cache needs of a table: one slot per block for the decoded block, and
    one CLOCK reference flag per block (set by readers on a hit, cleared by the cache).
    The owner allocates both lists; the cache alone writes ``blocks``."""

    @property
    def blocks(self) -> MutableSequence[Block | None]: ...

    @property
    def refs(self) -> MutableSequence[int]: ...


class BlockCache:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.hits = 0
        self.misses = 0
        self._ring: deque[tuple[BlockSlots, int]] = deque()
        self._lock = threading.Lock()

    def insert(self, table: BlockSlots, i: int, blk: Block, *, miss: bool = True) -> Block:
        """Cache ``blk`` as block ``i`` of ``table``; return the cached block (another
        thread may have loaded it first). ``miss=False``: a prefetch, not a lookup that
        missed (not counted)."""
        with self._lock:
            self.misses += miss
            cached = table.blocks[i]
            if cached is not None:
                return cached
            if blk.charge > self.capacity:
                return blk
            table.blocks[i] = blk
            table.refs[i] = 0
            self._ring.append((table, i))
            self.used += blk.charge
            ring = self._ring
            while self.used > self.capacity:
                t, j = ring.popleft()
                if t.refs[j]:
                    t.refs[j] = 0
                    ring.append((t, j))
                    continue
                victim = t.blocks[j]
                if victim is not None:
                    t.blocks[j] = None
                    self.used -= victim.charge
            return blk

    def drop_table(self, table: BlockSlots) -> None:
        """Forget every block of ``table`` (it left the database)."""
        with self._lock:
            for i, blk in enumerate(table.blocks):
                if blk is not None:
                    self.used -= blk.charge
                    table.blocks[i] = None
            self._ring = deque(slot for slot in self._ring if slot[0] is not table)

    def clear(self) -> None:
        with self._lock:
            for t, j in self._ring:
                t.blocks[j] = None
            self._ring.clear()
            self.used = 0
