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
from bisect import bisect_left
from itertools import accumulate
from typing import Any, Literal, Sequence

import lz4.block
import zstandard

from .errors import CorruptionError
from .formats import COMPRESSION_CODES

__all__ = ["Block", "BlockBuilder", "encode_block", "encode_stored", "decode_stored", "TRAILER_SIZE",
           "BLOCK_OVERHEAD", "KEY_OVERHEAD", "HEADS_OVERHEAD", "HEAD_BYTES", "head_of",
           "value_offsets"]

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


def _fixed_shape(width: int, n: int) -> tuple[bytes, struct.Struct]:
    """For ``n`` strings of ``width`` bytes laid end to end: their ``n + 1`` u32 start
    offsets as stored, and a Struct that cuts them all in one ``unpack_from``."""
    shape = _fixed.get((width, n))
    if shape is None:
        if len(_fixed) > 4096:
            _fixed.clear()
        shape = _fixed[(width, n)] = (
            _le(array("I", range(0, (n + 1) * width, width))),
            struct.Struct(f"{width}s" * n))
    return shape


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
            shape = _fixed_shape(width, n)
            if offs_raw == shape[0]:
                return shape[1].unpack_from(buf, base)
    starts = offs.tolist()
    return [buf[base + a:base + b] for a, b in zip(starts, starts[1:])]


#: Bytes a cached block of fixed-width keys (the common case: the *heads* form) takes on
#: top of its uncompressed bytes, charged with them: the header of ``raw``, the Block
#: object and its int attributes, the ``heads`` array's header, the cache's ring entry.
#: Per entry it costs ``HEAD_BYTES`` more (its head in the array). Measured with
#: tracemalloc at about 4,790 bytes per 4 KiB block of 29 entries with 24-byte keys,
#: 1.17x the block's bytes (tests/rocksmash/test_block_cache.py checks the charge stays
#: near the truth for both forms).
HEADS_OVERHEAD = 450
HEAD_BYTES = 8
#: The same for a block of keys of different widths, or narrower than 8 bytes (the
#: *list* form, as before round 6): per key a list slot and a bytes object's header,
#: rounded up by the allocator, and the key's bytes (a copy, charged too). About 1.5x
#: the block's bytes for 8-byte keys and 100-byte values, 1.65x with 24-byte keys.
BLOCK_OVERHEAD = 200
KEY_OVERHEAD = 48
#: Keys narrower than this keep the list form (a head is 8 bytes of the key).
_MIN_HEAD_WIDTH = 8
_BEQ = struct.Struct(">Q")
_VOFF2 = struct.Struct("<II")
#: ``head_of(key, hs)[0]``: the head of ``key`` (its 8 bytes at ``hs``, big-endian).
head_of = _BEQ.unpack_from
#: ``value_offsets(raw, voffs + 4 * j)``: entry ``j``'s value start and end in the area.
value_offsets = _VOFF2.unpack_from
_heads_shapes: dict[tuple[int, int, int], struct.Struct] = {}


def _heads_shape(width: int, hs: int, n: int) -> struct.Struct:
    """A Struct that cuts, from ``n`` keys of ``width`` bytes laid end to end, the 8
    bytes at ``hs`` of each as a big-endian u64: one ``unpack_from`` for a block."""
    shape = _heads_shapes.get((width, hs, n))
    if shape is None:
        if len(_heads_shapes) > 4096:
            _heads_shapes.clear()
        tail = width - hs - 8
        one = f"{hs}xQ{tail}x" if tail else f"{hs}xQ"
        shape = _heads_shapes[(width, hs, n)] = struct.Struct(">" + one * n)
    return shape


class Block:
    """A decoded block, in one of two forms (decision 0038).

    *Heads* (keys of one width ``width`` >= 8, the common case): no key objects. The keys
    stay in ``raw``; ``heads`` is an ``array('Q')`` of, per entry, the 8 key bytes at
    ``hs`` as a big-endian u64, where ``hs`` is where the keys of the block start to
    differ (capped at ``width - 8``). All keys share their first ``hs`` bytes, so the
    heads ascend with the keys (big-endian u64 order is byte order for 8 bytes), and a
    lookup is one ``bisect`` over the heads plus one ``startswith`` on ``raw``: about
    the cost of a ``bisect`` over a key list, at 8 bytes an entry instead of about 72.
    Entries whose heads tie are told apart by comparing their keys (:meth:`find`).

    *List* (keys of different widths, or narrower than 8 bytes): ``klist`` holds the keys
    as ``bytes`` for ``bisect``; ``heads`` is None.

    Both: values are sliced on demand (their offsets read by ``unpack_from``); kinds and
    sequence numbers are read from ``raw``, where ``kinds``, ``voffs`` and ``kbase`` /
    ``vbase`` are the offsets of the kinds, the value offsets and the key / value areas.
    ``keys`` gives the keys as a sequence (a new tuple each time in the heads form: for
    scans, which yield them anyway).

    Decoding is on every block-cache miss, so it is a few C calls: one ``unpack_from``
    for the heads (or the keys), one comparison of the key offsets with the expected ones.
    """

    __slots__ = ("raw", "n", "width", "hs", "heads", "klist", "kinds", "voffs", "kbase",
                 "vbase", "charge")

    def __init__(self, raw: bytes) -> None:
        try:
            n = _COUNT.unpack_from(raw, 0)[0]
            o = 8 + 8 * n
            m = 4 * (n + 1)
            klen = _COUNT.unpack_from(raw, o + m - 4)[0]  # the last key offset: their length
            self.voffs = o + m
            vend = _COUNT.unpack_from(raw, o + 2 * m - 4)[0]
            kbase = self.kbase = o + 2 * m + n
            self.kinds = kbase - n
            vbase = self.vbase = kbase + klen
            if vbase + vend != len(raw):
                raise CorruptionError("block: sizes do not add up")
            width = klen // n if n else 0
            self.hs = 0
            self.heads: array | None = None
            if (width >= _MIN_HEAD_WIDTH and width * n == klen
                    and raw.startswith(_fixed_shape(width, n)[0], o)):
                # Heads form (its heads are built by the first find: see _build_heads).
                self.width = width
                self.klist: Sequence[bytes] | None = None
                self.charge = len(raw) + HEADS_OVERHEAD + HEAD_BYTES * n
            else:
                self.width = 0
                self.klist = _split(raw, kbase, memoryview(raw)[o:o + m], n)
                self.charge = len(raw) + BLOCK_OVERHEAD + KEY_OVERHEAD * n + klen
        except (struct.error, ValueError, IndexError, TypeError) as e:
            raise CorruptionError(f"block: malformed ({e})") from None
        self.n = n
        self.raw = raw

    def _build_heads(self) -> array:
        """Build the heads of a heads-form block (on its first :meth:`find`, not in
        ``__init__``: a block loaded by a miss is often never read again, and the miss
        pays for one ``unpack_from`` of its keys anyway, see :meth:`find_once`). ``hs``
        is where the keys start to differ: sorted, they share the prefix of the first
        and the last. Readers may race here: each builds the same heads."""
        raw, w, n, o = self.raw, self.width, self.n, self.kbase
        first = int.from_bytes(raw[o:o + w], "big")
        last = int.from_bytes(raw[self.vbase - w:self.vbase], "big")
        hs = self.hs = min((8 * w - (first ^ last).bit_length()) // 8, w - 8)
        heads = self.heads = array("Q", _heads_shape(w, hs, n).unpack_from(raw, o))
        return heads

    @property
    def keys(self) -> Sequence[bytes]:
        """The keys, ascending (in the heads form a new tuple, one ``unpack_from``)."""
        klist = self.klist
        if klist is not None:
            return klist
        return _fixed_shape(self.width, self.n)[1].unpack_from(self.raw, self.kbase)

    def find_once(self, key: bytes) -> int:
        """:meth:`find` for a block just loaded (a miss), which may never be read again:
        a heads-form block without heads is searched by a ``bisect`` over its keys cut
        for this call instead of building its heads."""
        if self.heads is not None or self.klist is not None:
            return self.find(key)
        keys = self.keys
        j = bisect_left(keys, key)
        return j if j < self.n and keys[j] == key else -1

    def find(self, key: bytes) -> int:
        """The index of the first (newest) entry of ``key``, or -1 if there is none."""
        heads = self.heads
        if heads is None:
            klist = self.klist
            if klist is None:
                heads = self._build_heads()
            else:
                j = bisect_left(klist, key)
                return j if j < self.n and klist[j] == key else -1
        w = self.width
        if len(key) != w:
            return -1
        h = _BEQ.unpack_from(key, self.hs)[0]
        j = bisect_left(heads, h)
        raw, p, n = self.raw, self.kbase + j * w, self.n
        while j < n and heads[j] == h:  # ties of heads: compare the keys
            k = raw[p:p + w]
            if k == key:
                return j
            if k > key:
                return -1
            j += 1
            p += w
        return -1

    def key_is(self, j: int, key: bytes) -> bool:
        """Whether entry ``j`` has key ``key``."""
        klist = self.klist
        if klist is not None:
            return klist[j] == key
        w = self.width
        return len(key) == w and self.raw.startswith(key, self.kbase + j * w)

    @property
    def seqs(self) -> memoryview | array:
        """Sequence number of each entry (a new view each time: callers hold it for a
        loop; the size checks of ``__init__`` guarantee the area is there)."""
        return _ints(memoryview(self.raw)[8:8 + 8 * self.n], "Q")

    def __len__(self) -> int:
        return self.n

    def values(self, lo: int, hi: int) -> Sequence[bytes | None]:
        """Values of entries ``lo:hi`` (None for deletions), for scans: a sequence the
        caller must not change (a tuple when no entry is a deletion)."""
        n, raw, base, vo = self.n, self.raw, self.vbase, self.voffs
        out: Sequence[bytes | None]
        if lo == 0 and hi == n or hi - lo > 8:  # split all of them at C speed
            out = _split(raw, base, memoryview(raw)[vo:vo + 4 * (n + 1)], n)[lo:hi]
        else:
            offs = _ints(memoryview(raw)[vo + 4 * lo:vo + 4 * (hi + 1)], "I").tolist()
            out = [raw[base + a:base + b] for a, b in zip(offs, offs[1:])]
        kinds = raw[self.kinds + lo:self.kinds + hi]
        if 0 in kinds:
            out = [None if not kind else v for v, kind in zip(out, kinds)]
        return out

    def value(self, i: int) -> bytes | None:
        """The value of entry ``i``, or None if the entry is a deletion."""
        raw = self.raw
        if not raw[self.kinds + i]:
            return None
        a, b = _VOFF2.unpack_from(raw, self.voffs + 4 * i)
        base = self.vbase
        return raw[base + a:base + b]


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
        return encode_block(self.keys, self.seqs, bytes(self.kinds), self.values)

    def reset(self) -> None:
        self.keys = []
        self.seqs = []
        self.kinds = bytearray()
        self.values = []
        self.size = 8


def _starts(parts: Sequence[bytes], width: int | None) -> bytes:
    """The ``len(parts) + 1`` u32 start offsets of ``parts`` laid end to end; ``width``:
    every part has that length (the offsets come from a cache instead of a sum)."""
    if width is None:
        return _le(array("I", accumulate(map(len, parts), initial=0)))
    if not width:  # (all empty: every offset is 0)
        return bytes(4 * (len(parts) + 1))
    return _fixed_shape(width, len(parts))[0]


def encode_block(keys: Sequence[bytes], seqs: Sequence[int], kinds: bytes,
                 values: Sequence[bytes], key_width: int | None = None,
                 value_width: int | None = None) -> bytes:
    """The uncompressed block of these entries (the layout above; a deletion's value is
    ``b""``). ``key_width`` / ``value_width``: the caller knows every key / value has
    that length (a table builder's bulk path), so the offsets are not summed."""
    return b"".join((
        _HEAD.pack(len(keys), 0),
        _le(array("Q", seqs)),
        _starts(keys, key_width),
        _starts(values, value_width),
        kinds,
        b"".join(keys),
        b"".join(values),
    ))


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
