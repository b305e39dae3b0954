"""Data blocks: the unit of table I/O, compression, checksums and caching.

Uncompressed block layout (integers little-endian), chosen so Python decodes it with a
few C calls (``memoryview.cast`` and one list comprehension) instead of a loop per byte::

    count: u32                       entries in the block
    reserved: u32                    0 (keeps ``seqs`` 8-byte aligned)
    seqs: u64 * count                sequence number of each entry
    key_offsets: u32 * (count + 1)   start of key i in the keys area; last = its length
    value_offsets: u32 * (count + 1) start of value i in the values area; last = its length
    kinds: u8 * count                1 = put, 0 = delete (value empty)
    keys area, values area

Entries are sorted by key ascending, then sequence descending (newest version first).

On disk each block is followed by a 5-byte trailer::

    compression: u8   0 none, 1 lz4 (lz4.block with stored size), 2 zlib, 3 zstd (frame)
    crc: u32          CRC-32 of the stored (compressed) bytes followed by the type byte

Do not change these layouts; see docs/format.md.
"""

from __future__ import annotations

import struct
import sys
import threading
import zlib
from array import array
from itertools import accumulate
from typing import Any, Literal, Sequence

import lz4.block
import zstandard

from .errors import CorruptionError
from .formats import COMPRESSION_CODES

__all__ = ["Block", "BlockBuilder", "encode_stored", "decode_stored", "TRAILER_SIZE",
           "BLOCK_OVERHEAD", "KEY_OVERHEAD"]

TRAILER_SIZE = 5
#: Bytes a BlockBuilder counts per entry besides its key and value (the block cut
#: depends on it, so tables are the same bytes only while it stays).
ENTRY_EXTRA = 17
_HEAD = struct.Struct("<II")
_COUNT = struct.Struct("<I")
_TRAILER = struct.Struct("<BI")
_LITTLE = sys.byteorder == "little"
# zstd contexts are not thread-safe: one pair per thread.
_zstd = threading.local()


def _zstd_contexts() -> tuple[Any, Any]:
    ctx = getattr(_zstd, "ctx", None)
    if ctx is None:
        ctx = _zstd.ctx = (zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor())
    return ctx


def _ints(view: memoryview, fmt: Literal["I", "Q"]) -> memoryview | array:
    if _LITTLE:
        return view.cast(fmt)
    arr = array(fmt, view)
    arr.byteswap()
    return arr


def _le(arr: array) -> bytes:
    if not _LITTLE:
        arr = array(arr.typecode, arr)
        arr.byteswap()
    return arr.tobytes()


_fixed: dict[tuple[int, int], tuple[bytes, struct.Struct]] = {}


def _split(buf: bytes, base: int, offs_raw: memoryview, n: int,
           offs: memoryview | array | None = None) -> Sequence[bytes]:
    """The ``n`` byte strings stored at ``buf[base:]`` with ``n + 1`` u32 start offsets
    ``offs_raw`` (``offs``: the same decoded, if the caller has them). When all have the
    same length (the common case for keys, and often for values), one
    ``struct.unpack_from`` cuts them all, several times faster than slicing one by one;
    the offsets are checked against the expected ones in one comparison."""
    if offs is None:
        offs = _ints(offs_raw, "I")
    if n > 0:
        width = offs[1]
        if width and offs[n] == n * width:
            shape = _fixed.get((width, n))
            if shape is None:
                if len(_fixed) > 4096:
                    _fixed.clear()
                shape = _fixed[(width, n)] = (
                    _le(array("I", range(0, (n + 1) * width, width))),
                    struct.Struct(f"{width}s" * n))
            if offs_raw == shape[0]:
                return shape[1].unpack_from(buf, base)
    starts = offs.tolist()
    return [buf[base + a:base + b] for a, b in zip(starts, starts[1:])]


#: Bytes a cached block takes on top of its uncompressed bytes, charged with them: per
#: block the Block object, the headers of ``raw``, ``kinds`` and the key list, two
#: memoryviews and the cache's ring entry; per key a list slot and a bytes object's
#: header, rounded up by the allocator (the key's bytes themselves are a copy, charged
#: too). Measured with tracemalloc at about 2,670 bytes per 4 KiB block of 29 entries
#: with 24-byte keys, 1.65x the block's bytes (tests/rocksmash/test_block_cache.py
#: checks the charge stays near the truth).
BLOCK_OVERHEAD = 600
KEY_OVERHEAD = 48


class Block:
    """A decoded block. ``keys`` is a sequence (list or tuple) for ``bisect``; values are
    sliced on demand; ``seqs`` is decoded on first use (a point read of a table with one
    version per key never needs it).

    Decoding is on every block-cache miss, so it is written for few C calls: each array
    is one slice and one ``cast`` of a single memoryview, the key offsets are decoded
    once, and no helper is called on little-endian machines.
    """

    __slots__ = ("keys", "_seqs", "kinds", "raw", "vbase", "voffs", "voffs_raw", "charge")

    def __init__(self, raw: bytes) -> None:
        try:
            n = _COUNT.unpack_from(raw, 0)[0]
            view = memoryview(raw)
            o = 8 + 8 * n
            m = 4 * (n + 1)
            koffs_raw = view[o:o + m]
            voffs_raw = self.voffs_raw = view[o + m:o + 2 * m]
            koffs: memoryview | array
            voffs: memoryview | array
            if _LITTLE:
                koffs = koffs_raw.cast("I")
                voffs = voffs_raw.cast("I")
            else:
                koffs = _ints(koffs_raw, "I")
                voffs = _ints(voffs_raw, "I")
            self.voffs = voffs
            o += 2 * m
            kinds = self.kinds = raw[o:o + n]
            o += n
            klen = koffs[n]
            vbase = self.vbase = o + klen
            if vbase + voffs[n] != len(raw) or len(kinds) != n:
                raise CorruptionError("block: sizes do not add up")
            # _split's fixed-width case inline (a miss decodes keys on every read): keys
            # of one width, their offsets the expected ones, cut by one unpack_from.
            shape = _fixed.get((klen // n, n)) if n else None
            self.keys: Sequence[bytes]
            if shape is not None and koffs_raw == shape[0]:
                self.keys = shape[1].unpack_from(raw, o)
            else:
                self.keys = _split(raw, o, koffs_raw, n, koffs)
        except (struct.error, ValueError, IndexError, TypeError) as e:
            raise CorruptionError(f"block: malformed ({e})") from None
        self._seqs: memoryview | array | None = None
        self.raw = raw
        #: Bytes charged to the block cache: what the decoded block really takes, its
        #: uncompressed bytes plus the Python objects around them (see BLOCK_OVERHEAD), so
        #: the cache's budget is memory, as RocksDB's is.
        self.charge = len(raw) + BLOCK_OVERHEAD + KEY_OVERHEAD * n + klen

    @property
    def seqs(self) -> memoryview | array:
        """Sequence number of each entry (decoded on first use; the size checks of
        ``__init__`` guarantee the area is there)."""
        seqs = self._seqs
        if seqs is None:
            n = len(self.keys)
            seqs = self._seqs = _ints(memoryview(self.raw)[8:8 + 8 * n], "Q")
        return seqs

    def __len__(self) -> int:
        return len(self.keys)

    def values(self, lo: int, hi: int) -> Sequence[bytes | None]:
        """Values of entries ``lo:hi`` (None for deletions), for scans: a sequence the
        caller must not change (a tuple when no entry is a deletion)."""
        n = len(self.keys)
        out: Sequence[bytes | None]
        if lo == 0 and hi == n or hi - lo > 8:  # split all of them at C speed
            out = _split(self.raw, self.vbase, self.voffs_raw, n, self.voffs)[lo:hi]
        else:
            raw, base = self.raw, self.vbase
            offs = self.voffs[lo:hi + 1].tolist()
            out = [raw[base + a:base + b] for a, b in zip(offs, offs[1:])]
        kinds = self.kinds[lo:hi]
        if 0 in kinds:
            out = [None if not kind else v for v, kind in zip(out, kinds)]
        return out

    def value(self, i: int) -> bytes | None:
        """The value of entry ``i``, or None if the entry is a deletion."""
        if not self.kinds[i]:
            return None
        base = self.vbase
        voffs = self.voffs
        return self.raw[base + voffs[i]:base + voffs[i + 1]]


class BlockBuilder:
    """Accumulates sorted entries and encodes them in the layout above."""

    __slots__ = ("keys", "seqs", "kinds", "values", "size")

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.seqs: list[int] = []
        self.kinds = bytearray()
        self.values: list[bytes] = []
        #: Approximate encoded size so far.
        self.size = 8

    def add(self, key: bytes, seq: int, value: bytes | None) -> None:
        self.keys.append(key)
        self.seqs.append(seq)
        if value is None:
            self.kinds.append(0)
            value = b""
        else:
            self.kinds.append(1)
        self.values.append(value)
        self.size += len(key) + len(value) + ENTRY_EXTRA

    def __len__(self) -> int:
        return len(self.keys)

    def finish(self) -> bytes:
        keys, values = self.keys, self.values
        return b"".join((
            _HEAD.pack(len(keys), 0),
            _le(array("Q", self.seqs)),
            _le(array("I", accumulate(map(len, keys), initial=0))),
            _le(array("I", accumulate(map(len, values), initial=0))),
            bytes(self.kinds),
            b"".join(keys),
            b"".join(values),
        ))

    def reset(self) -> None:
        self.keys = []
        self.seqs = []
        self.kinds = bytearray()
        self.values = []
        self.size = 8


def encode_stored(raw: bytes, compression: str) -> bytes:
    """Compress ``raw`` (keeping it raw if that saves under 1/8) and append the trailer."""
    ctype = COMPRESSION_CODES[compression]
    data = raw
    if ctype == 1:
        data = lz4.block.compress(raw, store_size=True)
    elif ctype == 2:
        data = zlib.compress(raw, 6)
    elif ctype == 3:
        data = _zstd_contexts()[0].compress(raw)
    if ctype and len(data) > len(raw) - len(raw) // 8:
        data, ctype = raw, 0
    crc = zlib.crc32(bytes((ctype,)), zlib.crc32(data))
    return data + _TRAILER.pack(ctype, crc)


def decode_stored(stored: bytes | memoryview, what: Any) -> bytes:
    """Check the trailer of ``stored`` (block + trailer) and return the raw block.

    ``what`` names the block in an error; it may be any object whose ``str`` does (a
    table formats its name only when something is wrong, not on every read)."""
    if len(stored) < TRAILER_SIZE:
        raise CorruptionError(f"{what}: block truncated")
    if type(stored) is not memoryview:
        stored = memoryview(stored)
    data = stored[:-TRAILER_SIZE]
    ctype, crc = _TRAILER.unpack_from(stored, len(stored) - TRAILER_SIZE)
    # The CRC covers the data followed by the type byte: exactly stored[:-4], one call.
    if zlib.crc32(stored[:-4]) != crc:
        raise CorruptionError(f"{what}: block checksum mismatch")
    try:
        if ctype == 0:
            return bytes(data)
        if ctype == 1:
            return lz4.block.decompress(data)
        if ctype == 2:
            return zlib.decompress(data)
        if ctype == 3:
            return _zstd_contexts()[1].decompress(data)
    except Exception as e:  # a checksummed block that fails to decompress is corrupt
        raise CorruptionError(f"{what}: cannot decompress block: {e}") from None
    raise CorruptionError(f"{what}: unknown compression type {ctype}")
