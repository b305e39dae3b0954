"""Reads a table file through a RandomAccessFile (see table_format.py for the layout).

Opening a table reads its footer, index, filter and properties once; after that a point
lookup costs a bisect over the index, at most one block read (zero when the decoded block
is cached), and a bisect inside the block.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from typing import Iterator

from .block import Block, TRAILER_SIZE, decode_stored
from .block_cache import BlockCache
from .bloom import BloomFilter
from .env import RandomAccessFile
from .errors import CorruptionError
from .memtable import MISSING
from .table_format import FOOTER, FOOTER_SIZE, FORMAT_VERSION, HANDLE, TABLE_MAGIC

__all__ = ["Table"]


class Table:
    """An open table. Thread-safe for reads; ``file`` is owned (closed with the table)."""

    __slots__ = ("number", "file", "cache", "index_keys", "offsets", "sizes", "nblocks",
                 "filter", "fwords", "fnwords", "fmasks", "props", "max_seq", "name",
                 "data_end", "blocks", "refs", "__weakref__")

    def __init__(self, number: int, file: RandomAccessFile, cache: BlockCache | None,
                 name: str = "") -> None:
        self.number = number
        self.file = file
        self.cache = cache
        self.name = name or f"table {number}"
        size = file.size()
        if size < FOOTER_SIZE:
            raise CorruptionError(f"{self.name}: file too short ({size} bytes)")
        (f_off, f_size, i_off, i_size, p_off, p_size, version,
         magic) = FOOTER.unpack(file.read(size - FOOTER_SIZE, FOOTER_SIZE))
        if magic != TABLE_MAGIC:
            raise CorruptionError(f"{self.name}: bad magic (not a table, or truncated)")
        if version > FORMAT_VERSION:
            raise CorruptionError(f"{self.name}: table format {version} is newer than this "
                                  f"rocksmash understands ({FORMAT_VERSION})")
        for off, sz in ((f_off, f_size), (i_off, i_size), (p_off, p_size)):
            if off + sz + TRAILER_SIZE > size - FOOTER_SIZE:
                raise CorruptionError(f"{self.name}: footer points outside the file")
        self.filter = BloomFilter(self._read(f_off, f_size, "filter"))
        # The filter's parts, flattened for the read path (see bloom.py for the probe).
        self.fwords, self.fnwords, self.fmasks = (self.filter.words, self.filter.nwords,
                                                  self.filter.masks)
        index = Block(self._read(i_off, i_size, "index"))
        self.index_keys = index.keys
        self.nblocks = len(index.keys)
        offsets, sizes = [], []
        for i in range(self.nblocks):
            off, sz = HANDLE.unpack(index.value(i) or b"")
            offsets.append(off)
            sizes.append(sz)
        self.offsets = offsets
        self.sizes = sizes
        self.data_end = f_off
        #: Cached decoded blocks and their CLOCK reference flags (owned by ``cache``).
        self.blocks: list[Block | None] = [None] * self.nblocks
        self.refs = bytearray(self.nblocks)
        try:
            self.props = json.loads(self._read(p_off, p_size, "properties"))
            self.max_seq = int(self.props["max_seq"])
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptionError(f"{self.name}: bad properties block ({e})") from None

    def _read(self, off: int, size: int, what: str) -> bytes:
        stored = self.file.read(off, size + TRAILER_SIZE)
        if len(stored) != size + TRAILER_SIZE:
            raise CorruptionError(f"{self.name}: {what} block cut short")
        return decode_stored(memoryview(stored), f"{self.name} {what}")

    def block(self, i: int) -> Block:
        """Data block ``i``, from the cache when it is there."""
        blk = self.blocks[i]
        if blk is not None:
            self.refs[i] = 1
            self.cache.hits += 1  # type: ignore[union-attr]
            return blk
        blk = Block(self._read(self.offsets[i], self.sizes[i], f"block {i}"))
        return blk if self.cache is None else self.cache.insert(self, i, blk)

    def get(self, key: bytes, seq: int) -> object:
        """The value of the newest version of ``key`` with sequence <= ``seq``.

        Returns the value, ``None`` for a deletion, or ``MISSING`` if there is no such
        version in this table. The caller checks the bloom filter first. This is the
        hottest function of the engine: it is written out by hand (no helper calls on a
        cache hit).
        """
        i = bisect_left(self.index_keys, key)
        if i == self.nblocks:
            return MISSING
        blk = self.blocks[i]
        if blk is None:
            blk = self.block(i)
        else:
            self.refs[i] = 1
            self.cache.hits += 1  # type: ignore[union-attr]  # (blocks are cached only with a cache)
        keys = blk.keys
        j = bisect_left(keys, key)
        if j == len(keys) or keys[j] != key:
            return MISSING
        if seq < self.max_seq:
            seqs = blk.seqs
            n = len(keys)
            while seqs[j] > seq:
                j += 1
                if j == n or keys[j] != key:
                    return MISSING
        if not blk.kinds[j]:
            return None
        base = blk.vbase
        voffs = blk.voffs
        return blk.raw[base + voffs[j]:base + voffs[j + 1]]

    def scan(self, start: bytes | None, end: bytes | None, reverse: bool,
             seq: int) -> Iterator[tuple[bytes, int, bytes | None]]:
        """Yield ``(key, -seq, value)`` for versions <= ``seq`` with start <= key < end."""
        index_keys = self.index_keys
        n = self.nblocks
        if not reverse:
            i = 0 if start is None else bisect_left(index_keys, start)
            while i < n:
                blk = self.block(i)
                keys, seqs = blk.keys, blk.seqs
                lo = 0 if start is None else bisect_left(keys, start)
                hi = len(keys) if end is None else bisect_left(keys, end)
                for j in range(lo, hi):
                    s = seqs[j]
                    if s <= seq:
                        yield keys[j], -s, blk.value(j)
                if hi < len(keys):
                    return
                i += 1
        else:
            i = n - 1 if end is None else min(bisect_left(index_keys, end), n - 1)
            while i >= 0:
                blk = self.block(i)
                keys, seqs = blk.keys, blk.seqs
                lo = 0 if start is None else bisect_left(keys, start)
                hi = len(keys) if end is None else bisect_left(keys, end)
                for j in range(hi - 1, lo - 1, -1):
                    s = seqs[j]
                    if s <= seq:
                        yield keys[j], -s, blk.value(j)
                if lo > 0:
                    return
                i -= 1

    def entries(self) -> Iterator[tuple[bytes, int, bytes | None]]:
        """Every entry as ``(key, -seq, value)``, reading the data area in one request.

        Used by compaction, which reads each input once, start to end, uncached.
        """
        data = self.file.read(0, self.data_end)
        if len(data) != self.data_end:
            raise CorruptionError(f"{self.name}: data area cut short")
        view = memoryview(data)
        for i in range(self.nblocks):
            off = self.offsets[i]
            blk = Block(decode_stored(view[off:off + self.sizes[i] + TRAILER_SIZE],
                                      f"{self.name} block {i}"))
            seqs = blk.seqs
            value = blk.value
            for j, key in enumerate(blk.keys):
                yield key, -seqs[j], value(j)

    def close(self) -> None:
        self.file.close()
