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
from typing import Any, Sequence

import lz4.block
import zstandard

from .errors import CorruptionError
from .options import COMPRESSIONS

__all__ = ["Block", "BlockBuilder", "encode_stored", "decode_stored", "TRAILER_SIZE"]

TRAILER_SIZE = 5
_HEAD = struct.Struct("<II")
_TRAILER = struct.Struct("<BI")
_LITTLE = sys.byteorder == "little"
# zstd contexts are not thread-safe: one pair per thread.
_zstd = threading.local()


def _zstd_contexts() -> tuple[Any, Any]:
    ctx = getattr(_zstd, "ctx", None)
    if ctx is None:
        ctx = _zstd.ctx = (zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor())
    return ctx


def _ints(view: memoryview, fmt: str) -> memoryview | array:
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


def _split_keys(area: bytes, offs: list[int], offs_raw: memoryview) -> Sequence[bytes]:
    """The keys of a block. When every key has the same length (the common case), one
    ``struct.unpack`` cuts them all, several times faster than slicing one by one; the
    offsets are checked against the expected ones in one comparison first."""
    n = len(offs) - 1
    if n > 0:
        width = offs[1]
        if width and offs[-1] == n * width:
            shape = _fixed.get((width, n))
            if shape is None:
                if len(_fixed) > 4096:
                    _fixed.clear()
                shape = _fixed[(width, n)] = (
                    _le(array("I", range(0, (n + 1) * width, width))),
                    struct.Struct(f"{width}s" * n))
            if offs_raw == shape[0]:
                return shape[1].unpack(area)
    return [area[a:b] for a, b in zip(offs, offs[1:])]


class Block:
    """A decoded block. ``keys`` is a sequence (list or tuple) for ``bisect``; values are
    sliced on demand."""

    __slots__ = ("keys", "seqs", "kinds", "raw", "vbase", "voffs", "charge")

    def __init__(self, raw: bytes) -> None:
        try:
            n, _ = _HEAD.unpack_from(raw, 0)
            view = memoryview(raw)
            o = 8
            self.seqs = _ints(view[o:o + 8 * n], "Q")
            o += 8 * n
            koff_start = o
            koffs = _ints(view[o:o + 4 * (n + 1)], "I").tolist()
            o += 4 * (n + 1)
            self.voffs = _ints(view[o:o + 4 * (n + 1)], "I")
            o += 4 * (n + 1)
            self.kinds = raw[o:o + n]
            o += n
            keys_area = raw[o:o + koffs[-1]]
            self.vbase = o + koffs[-1]
            if self.vbase + self.voffs[n] != len(raw) or len(self.kinds) != n:
                raise CorruptionError("block: sizes do not add up")
        except (struct.error, ValueError, IndexError, TypeError) as e:
            raise CorruptionError(f"block: malformed ({e})") from None
        self.keys = _split_keys(keys_area, koffs, view[koff_start:koff_start + 4 * (n + 1)])
        self.raw = raw
        #: Bytes charged to the block cache: the uncompressed size, as RocksDB charges
        #: (the Python objects around it add roughly half again; see options.py).
        self.charge = len(raw)

    def __len__(self) -> int:
        return len(self.keys)

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
        self.size += len(key) + len(value) + 17

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
    ctype = COMPRESSIONS.index(compression)
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


def decode_stored(stored: bytes | memoryview, what: str) -> bytes:
    """Check the trailer of ``stored`` (block + trailer) and return the raw block."""
    if len(stored) < TRAILER_SIZE:
        raise CorruptionError(f"{what}: block truncated")
    data = stored[:-TRAILER_SIZE]
    ctype, crc = _TRAILER.unpack_from(stored, len(stored) - TRAILER_SIZE)
    if zlib.crc32(bytes((ctype,)), zlib.crc32(data)) != crc:
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
