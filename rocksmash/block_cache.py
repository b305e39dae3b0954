"""An LRU cache of decoded blocks, bounded by the bytes they were charged.

Keys are ints (``table_number << 32 | block_index``) because int hashing is cheapest.
Lookups take no lock (single OrderedDict operations are atomic under the GIL); inserts
and evictions take one.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from .block import Block

__all__ = ["BlockCache"]


class BlockCache:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.hits = 0
        self.misses = 0
        self._d: OrderedDict[int, Block] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: int) -> Block | None:
        d = self._d
        blk = d.get(key)
        if blk is None:
            self.misses += 1
            return None
        self.hits += 1
        try:
            d.move_to_end(key)
        except KeyError:  # evicted by another thread meanwhile; the block is still good
            pass
        return blk

    def put(self, key: int, blk: Block) -> None:
        if blk.charge > self.capacity:
            return
        with self._lock:
            d = self._d
            old = d.pop(key, None)
            if old is not None:
                self.used -= old.charge
            d[key] = blk
            self.used += blk.charge
            while self.used > self.capacity:
                _, victim = d.popitem(last=False)
                self.used -= victim.charge

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
            self.used = 0
