"""Writes one table file from entries added in order (see table_format.py for the layout)."""

from __future__ import annotations

import json
from array import array
from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import add
from typing import Sequence, cast

from .block import ENTRY_EXTRA, BlockBuilder, encode_block, encode_stored
from .env import POSIX, BufferedFile, Env
from .bloom import build_filter, key_hash
from .range_del import Tombstone, bounds, to_props
from .table_format import FOOTER, FORMAT_PLAIN, FORMAT_VERSION, HANDLE, TABLE_MAGIC

__all__ = ["TableBuilder", "TableInfo", "shortest_separator"]


@dataclass
class TableInfo:
    """What the manifest needs to know about a finished table."""

    path: str
    size: int
    smallest: bytes
    largest: bytes
    count: int
    min_seq: int
    max_seq: int


def shortest_separator(a: bytes, b: bytes) -> bytes:
    """A short key ``s`` with ``a <= s < b`` (``a < b`` required).

    Cut after the first byte where the keys differ, bumped by one if that stays below
    ``b``; if ``a``'s byte is exactly one below ``b``'s, keep it and bump the first later
    byte of ``a`` that can grow instead (still ``< b``, because of the byte before).
    """
    n = min(len(a), len(b))
    p = 0
    while p < n and a[p] == b[p]:
        p += 1
    if p == n:
        return a  # a is a prefix of b
    if a[p] + 1 < b[p]:
        return a[:p] + bytes((a[p] + 1,))
    for i in range(p + 1, len(a)):
        if a[i] < 0xFF:
            return a[:i] + bytes((a[i] + 1,))
    return a


class TableBuilder:
    """Build a table at ``path``. Contract: ``add`` calls come in (key asc, seq desc) order;
    :meth:`add_ranges` (range tombstones) at any time before :meth:`finish`.

    The file is written to ``path`` directly and fsynced by :meth:`finish`; the caller
    publishes it (manifest edit) only after ``finish`` returns. :meth:`abandon` removes it.
    """

    def __init__(self, path: str, *, block_size: int, compression: str,
                 bloom_bits_per_key: int, env: Env = POSIX) -> None:
        self.path = path
        self._env = env
        self._f = BufferedFile(env.new_writable(path))
        self._offset = 0
        self._block_size = block_size
        self._compression = compression
        self._bloom_bits = bloom_bits_per_key
        self._block = BlockBuilder()
        self._index = BlockBuilder()
        self._pending: tuple[bytes, bytes] | None = None  # (last key, handle) of last block
        # Key hashes for the filter, 8 bytes each in an array (a list of 64-bit ints
        # costs 56: 5 MiB more per 100,000-key table, in the worker's peak).
        self._hashes = array("Q")
        self._last: bytes | None = None
        self._smallest: bytes | None = None
        self.count = 0
        self._deletions = 0
        self._min_seq = 1 << 64
        self._max_seq = 0
        self._raw_keys = 0
        self._raw_values = 0
        self._ranges: list[Tombstone] = []

    @property
    def file_size(self) -> int:
        """Bytes written so far plus the open block (what the table would roughly weigh)."""
        return self._offset + self._block.size

    def add(self, key: bytes, seq: int, value: bytes | None) -> None:
        if key != self._last:
            if self._block.size >= self._block_size:
                self._flush_block()
            if self._pending is not None:
                self._index.add(shortest_separator(self._pending[0], key), 0,
                                self._pending[1])
                self._pending = None
            self._hashes.append(key_hash(key))
            if self._smallest is None:
                self._smallest = key
            self._last = key
        self._block.add(key, seq, value)
        self.count += 1
        if value is None:
            self._deletions += 1
        else:
            self._raw_values += len(value)
        self._raw_keys += len(key)
        if seq < self._min_seq:
            self._min_seq = seq
        if seq > self._max_seq:
            self._max_seq = seq

    def add_unique(self, keys: Sequence[bytes], seqs: Sequence[int],
                   values: Sequence[bytes | None]) -> None:
        """:meth:`add` of each ``(keys[i], seqs[i], values[i])``, where ``keys`` ascend
        strictly and follow every key added before: the same bytes (the same block
        cuts, separators and filter), with a few calls per block instead of per entry
        (a flush of a memtable, whose keys are unique)."""
        n = len(keys)
        if not n:
            return
        if self._last is not None and keys[0] <= self._last:
            raise ValueError("add_unique: keys must follow the keys added before")
        deletions = values.count(None)
        klens = list(map(len, keys))
        puts = cast(Sequence[bytes], values)  # (when there are no deletions)
        vlens = [0 if v is None else len(v) for v in values] if deletions else list(map(len, puts))
        # ends[i]: the encoded size of entries [0, i) (BlockBuilder.add's accounting).
        ends = list(accumulate(map(add, map(add, klens, vlens), repeat(ENTRY_EXTRA, n)),
                               initial=0))
        # One length for every key (values), as in fixed-size records: a block's offsets
        # then come from a cache (block.encode_block).
        kw = klens[0] if klens.count(klens[0]) == n else None
        vw = vlens[0] if not deletions and vlens.count(vlens[0]) == n else None
        block = self._block
        bsize = self._block_size
        i = 0
        while i < n:
            if block.size >= bsize:
                self._flush_block()
            if self._pending is not None:
                self._index.add(shortest_separator(self._pending[0], keys[i]), 0,
                                self._pending[1])
                self._pending = None
            # The block takes entries up to the first that brings it to block_size.
            j = bisect_left(ends, bsize - block.size + ends[i], i + 1)
            if j < n and not len(block):
                # A whole block that the next entry would flush: encoded straight from
                # the columns (the bytes _flush_block would write), no BlockBuilder.
                if deletions:
                    part = values[i:j]
                    kinds = bytes([v is not None for v in part])
                    vals: Sequence[bytes] = [b"" if v is None else v for v in part]
                else:
                    kinds, vals = b"\x01" * (j - i), puts[i:j]
                raw = encode_block(keys[i:j], seqs[i:j], kinds, vals, kw, vw)
                self._pending = (keys[j - 1], self._write(raw, self._compression))
                i = j
                continue
            if j > n:
                j = n
            block.keys += keys[i:j]
            block.seqs += seqs[i:j]
            if deletions:
                part = values[i:j]
                block.kinds += bytes([v is not None for v in part])
                block.values += [b"" if v is None else v for v in part]
            else:
                block.kinds += b"\x01" * (j - i)
                block.values += puts[i:j]
            block.size += ends[j] - ends[i]
            i = j
        self._hashes.extend(map(key_hash, keys))
        if self._smallest is None:
            self._smallest = keys[0]
        self._last = keys[-1]
        self.count += n
        self._deletions += deletions
        self._raw_values += sum(vlens)
        self._raw_keys += sum(klens)
        self._min_seq = min(self._min_seq, min(seqs))
        self._max_seq = max(self._max_seq, max(seqs))

    def add_ranges(self, tombs: list[Tombstone]) -> None:
        """Add range tombstones (a table may hold only these). They widen the table's key
        range (see range_del.py) and make it a format 2 table."""
        self._ranges += tombs
        for _, _, seq in tombs:
            self._min_seq = min(self._min_seq, seq)
            self._max_seq = max(self._max_seq, seq)

    def _write(self, raw: bytes, compression: str) -> bytes:
        stored = encode_stored(raw, compression)
        handle = HANDLE.pack(self._offset, len(stored) - 5)
        self._f.write(stored)
        self._offset += len(stored)
        return handle

    def _flush_block(self) -> None:
        if not len(self._block):
            return
        handle = self._write(self._block.finish(), self._compression)
        self._pending = (self._block.keys[-1], handle)
        self._block.reset()

    def finish(self, sync: bool = True) -> TableInfo:
        """Write filter, index, properties and footer; fsync; return the table's info."""
        if not self.count and not self._ranges:
            raise ValueError("cannot finish an empty table")
        self._flush_block()
        if self._pending is not None:
            self._index.add(self._pending[0], 0, self._pending[1])
        smallest, largest = self._smallest, self._last
        covered = bounds(self._ranges)
        if covered is not None:
            smallest = covered[0] if smallest is None else min(smallest, covered[0])
            largest = covered[1] if largest is None else max(largest, covered[1])
        assert smallest is not None and largest is not None
        version = FORMAT_VERSION if self._ranges else FORMAT_PLAIN
        filter_h = self._write(build_filter(self._hashes, self._bloom_bits), "none")
        index_h = self._write(self._index.finish(), self._compression)
        props = {
            "format_version": version,
            "count": self.count,
            "deletions": self._deletions,
            "distinct_keys": len(self._hashes),
            "data_blocks": len(self._index),
            "raw_key_bytes": self._raw_keys,
            "raw_value_bytes": self._raw_values,
            "smallest": smallest.hex(),
            "largest": largest.hex(),
            "min_seq": self._min_seq,
            "max_seq": self._max_seq,
            "compression": self._compression,
            "bloom_bits_per_key": self._bloom_bits,
        }
        if self._ranges:
            props["range_deletions"] = to_props(self._ranges)
        props_h = self._write(json.dumps(props, separators=(",", ":")).encode(), "none")
        self._f.write(FOOTER.pack(*HANDLE.unpack(filter_h), *HANDLE.unpack(index_h),
                                  *HANDLE.unpack(props_h), version, TABLE_MAGIC))
        self._offset += FOOTER.size
        if sync:
            self._f.sync()
        else:
            self._f.flush()
        self._f.close()
        return TableInfo(self.path, self._offset, smallest, largest, self.count,
                         self._min_seq, self._max_seq)

    def abandon(self) -> None:
        self._f.close()
        self._env.remove_if_exists(self.path)
