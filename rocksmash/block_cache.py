"""The block cache: data blocks in memory, bounded by the bytes they are charged, CLOCK.

Why CLOCK and not an LRU list: on a hit an LRU must move the entry (a dict operation and
a method call, on every read); CLOCK only sets a flag. Decoded blocks live in their own
table's ``blocks`` list (so a hit is one list index, no hashing), and the cache keeps a
ring of ``(table, index)`` slots in insertion order. Eviction walks the ring: a slot
whose ``refs`` flag is set gets a second chance (flag cleared, moved to the back),
otherwise its block is dropped.

Two forms, one budget (decision 0034). A decoded block is charged what it takes
(block.py: about 1.17x its bytes for fixed-width keys, decision 0038; 1.65x with a key
list); its stored form (compressed, with the table format's trailer) about 0.57x as much
as the former (0.4x of the latter). So a table that has a ``stored`` list (cloud tables,
``cloud_stored_blocks``) keeps blocks the decoded ring evicts in stored form in a second
ring, under the same ``capacity``: at 1M records that held 2.4x as many blocks in 64 MiB
when decoded blocks were charged 1.65x, and the model (``python -m bench cache-model
--forms``) predicted half the misses, each a GET for a cloud table. A stored hit pays lz4 and a decode (about 6 us)
and moves the block back to the decoded ring. Which ring gives way when the cache is
full: the decoded one, until decoded blocks hold at most DECODED_FLOOR of the capacity
(the hottest blocks stay decoded, so most hits cost nothing); then the stored one. While
everything fits decoded nothing is demoted, so a cache that holds all its blocks works
as before.

Thread contract: hits take no lock (a list read and a list write are atomic under the
GIL); inserts, promotions, evictions and :meth:`drop_table` take the cache lock. A
reader may hold a block or stored bytes the cache has just dropped: both are immutable.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, MutableSequence, Protocol

from .block import Block, encode_stored

__all__ = ["BlockCache", "BlockSlots", "STORED_OVERHEAD", "DECODED_FLOOR"]

#: Bytes a stored block is charged on top of its length: the bytes object's header
#: (33), its list slot, and its ring entry (a tuple and a deque slot).
STORED_OVERHEAD = 112
#: Share of the capacity below which decoded blocks are not demoted to make room (the
#: stored ring gives way instead). The model at 1M records (decision 0034): 10% decoded
#: misses 21.8% of lookups against 19.1% all stored (49.9% all decoded), and answers
#: 22% of them with no decode.
DECODED_FLOOR = 0.10
#: The stored form's compression when a decoded block is demoted: the fastest codec.
_DEMOTE_CODEC = "lz4"


class BlockSlots(Protocol):
    """What the cache needs of a table: one slot per block for the decoded block, and
    one CLOCK reference flag per block (set by readers on a hit, cleared by the cache).
    The owner allocates both lists; the cache alone writes ``blocks``. ``stored`` (or
    None: no stored form) holds stored blocks, written by the cache alone."""

    @property
    def blocks(self) -> MutableSequence[Block | None]: ...

    @property
    def refs(self) -> MutableSequence[int]: ...

    @property
    def stored(self) -> MutableSequence[bytes | None] | None: ...


class BlockCache:
    """``capacity`` bytes of blocks. ``stored=False`` turns the stored form off for
    every table (each table still says whether it has one)."""

    def __init__(self, capacity: int, *, stored: bool = True) -> None:
        self.capacity = capacity
        #: Whether tables that can keep stored blocks should (read by Table at open).
        self.stored_form = stored
        self.used = 0
        self.used_stored = 0
        self.hits = 0
        self.misses = 0
        #: Hits answered by a stored block (counted in ``hits`` too).
        self.stored_hits = 0
        #: Decoded blocks turned into stored ones to make room.
        self.demoted = 0
        self._ring: deque[tuple[BlockSlots, int]] = deque()
        self._stored_ring: deque[tuple[BlockSlots, int]] = deque()
        self._lock = threading.Lock()

    def insert(self, table: BlockSlots, i: int, blk: Block, *, miss: bool = True) -> Block:
        """Cache ``blk`` as block ``i`` of ``table``; return the cached block (another
        thread may have loaded it first). ``miss=False``: a prefetch, not a lookup that
        missed (not counted)."""
        with self._lock:
            self.misses += miss
            return self._insert(table, i, blk)

    def insert_stored(self, table: BlockSlots, pieces: list[tuple[int, bytes]]) -> None:
        """Cache ``(i, stored bytes)`` of blocks of ``table`` (a fetched window's
        neighbours: decoded only if read), each unless it is cached in either form, and
        nothing if the table keeps no stored form. Not counted as lookups. One call per
        window: the lock is taken once, not once per block (64 threads queued on it)."""
        st = table.stored
        if st is None or not pieces:
            return
        blocks, refs, sring = table.blocks, table.refs, self._stored_ring
        with self._lock:
            for i, data in pieces:
                if blocks[i] is not None or st[i] is not None:
                    continue
                charge = len(data) + STORED_OVERHEAD
                if charge > self.capacity:
                    continue
                st[i] = data
                refs[i] = 0
                sring.append((table, i))
                self._charge_stored(charge)
            if self.used > self.capacity:
                self._make_room()

    def promote(self, table: BlockSlots, i: int, blk: Block) -> Block:
        """A hit on the stored form of block ``i``: ``blk`` is its decode; cache it
        decoded (referenced) and drop the stored copy. Returns the cached block."""
        with self._lock:
            self.hits += 1
            self.stored_hits += 1
            st = table.stored
            data = st[i] if st is not None else None
            if data is not None:
                st[i] = None  # type: ignore[index]
                self._charge_stored(-(len(data) + STORED_OVERHEAD))
            out = self._insert(table, i, blk)
            table.refs[i] = 1
            return out

    def _insert(self, table: BlockSlots, i: int, blk: Block) -> Block:
        cached = table.blocks[i]
        if cached is not None:
            return cached
        if blk.charge > self.capacity:
            return blk
        table.blocks[i] = blk
        table.refs[i] = 0
        self._ring.append((table, i))
        self.used += blk.charge
        if self.used > self.capacity:
            self._make_room()
        return blk

    def _charge_stored(self, n: int) -> None:
        """Add ``n`` bytes (negative: remove) of stored blocks to the charges (lock held)."""
        self.used += n
        self.used_stored += n

    def _make_room(self) -> None:
        """Evict until ``used`` fits (lock held): from the decoded ring (demoting blocks
        of tables with a stored form) while decoded blocks hold more than the floor or
        nothing is stored, else from the stored ring. Terminates: a demotion frees the
        difference of the two charges, a drop frees all, a second chance clears a flag."""
        ring, sring = self._ring, self._stored_ring
        floor = self.capacity * DECODED_FLOOR
        while self.used > self.capacity:
            if sring and (self.used - self.used_stored <= floor or not ring):
                t, j = sring.popleft()
                st = t.stored
                data = st[j] if st is not None else None
                if data is None:
                    continue  # promoted or dropped since
                if t.refs[j]:
                    t.refs[j] = 0
                    sring.append((t, j))
                    continue
                st[j] = None  # type: ignore[index]
                self._charge_stored(-(len(data) + STORED_OVERHEAD))
                continue
            if not ring:
                return
            t, j = ring.popleft()
            if t.refs[j]:
                t.refs[j] = 0
                ring.append((t, j))
                continue
            victim = t.blocks[j]
            if victim is None:
                continue
            t.blocks[j] = None
            self.used -= victim.charge
            st = t.stored
            if st is not None and st[j] is None:
                data = encode_stored(bytes(victim.raw), _DEMOTE_CODEC)
                st[j] = data
                self._charge_stored(len(data) + STORED_OVERHEAD)
                self.demoted += 1
                sring.append((t, j))

    def drop_table(self, table: BlockSlots) -> None:
        """Forget every block of ``table`` (it left the database)."""
        with self._lock:
            for i, blk in enumerate(table.blocks):
                if blk is not None:
                    self.used -= blk.charge
                    table.blocks[i] = None
            st = table.stored
            if st is not None:
                for i, data in enumerate(st):
                    if data is not None:
                        self._charge_stored(-(len(data) + STORED_OVERHEAD))
                        st[i] = None
                self._stored_ring = deque(s for s in self._stored_ring if s[0] is not table)
            self._ring = deque(slot for slot in self._ring if slot[0] is not table)

    def clear(self) -> None:
        with self._lock:
            for t, j in self._ring:
                t.blocks[j] = None
            for t, j in self._stored_ring:
                if t.stored is not None:
                    t.stored[j] = None
            self._ring.clear()
            self._stored_ring.clear()
            self.used = self.used_stored = 0

    def stats(self) -> dict[str, Any]:
        """Counters and the split of ``used`` between the two forms."""
        return {"capacity": self.capacity, "used": self.used,
                "used_decoded": self.used - self.used_stored, "used_stored": self.used_stored,
                "hits": self.hits, "misses": self.misses, "stored_hits": self.stored_hits,
                "demoted": self.demoted}
