"""MetaCache: the index, filter and properties of every cloud table, kept on local disk.

Each cloud table's metadata is stored in its own file in the compact *MashMeta* encoding,
so opening a cloud table costs no object-store request, a point lookup costs at most one
ranged GET, and a lookup of an absent key (bloom filter says no) costs none.

MashMeta byte layout, version 1 (little-endian; see docs/format.md, "MashMeta")::

    version: u8                 1
    flags: u8                   bit 0: offsets stored explicitly (blocks not contiguous)
    n: varint                   data blocks
    restart: varint             restart interval R: key i with i % R == 0 is stored whole
    key_width: u8               bytes per entry of the shared/unshared columns (1, 2, 4)
    size_width: u8              bytes per entry of the sizes column (1, 2, 4)
    first_offset: varint        offsets[0] (0 when n == 0)
    data_end: varint            where the filter block starts
    suffix_len: varint          bytes in the suffix area
    filter_len: varint
    props_len: varint
    shared:   n * key_width     bytes key i shares with key i-1 (0 at restarts)
    unshared: n * key_width     bytes of key i stored in the suffix area
    sizes:    n * size_width    stored size of block i, without its 5-byte trailer
    offsets:  n * u64           only if flags bit 0; else offsets[i+1] = offsets[i] +
                                sizes[i] + 5
    suffixes: suffix_len bytes  the unshared tails of the keys, in order
    filter:   filter_len bytes  the table's filter block, verbatim (bloom.py layout)
    props:    props_len bytes   compact UTF-8 JSON (no spaces)
    crc: u32                    CRC-32 of every byte before it

Columns instead of per-entry varints: each column decodes with one C call
(``memoryview.cast(...).tolist()``) instead of a Python loop per number, and for the
block sizes this engine writes (stored sizes 256 B..64 KiB) a 2-byte column is no bigger
than varints would be. Do not change this layout within a version.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
import threading
import zlib
from array import array
from itertools import accumulate
from operator import add
from typing import Literal

from .env import POSIX
from .errors import CorruptionError, InvalidArgumentError, NewerFormatError
from .formats import META_FLAG_OFFSETS, META_FORMAT_VERSION
from .table import TableMeta

__all__ = ["TableMeta", "encode_table_meta", "decode_table_meta", "MetaCache",
           "META_FORMAT_VERSION"]

#: Keys stored whole every RESTART_INTERVAL keys. Restarts let a lazy reader seek by
#: bisecting over restart keys and decode at most R keys. 16 as in LevelDB: on 24-byte
#: keys it costs 1.1 B per block (10.9 vs 9.8 B/block of index without restarts).
RESTART_INTERVAL = 16
_TRAILER = 5            # the table format's block trailer (compression u8 + crc u32)
_FLAG_OFFSETS = META_FLAG_OFFSETS
_CRC = struct.Struct("<I")
_WIDTH_CODE: dict[int, Literal["B", "H", "I", "Q"]] = {1: "B", 2: "H", 4: "I", 8: "Q"}
_LITTLE = sys.byteorder == "little"
_FILE_SUFFIX = ".mmeta"


# -- varints (header fields only: a handful per table) -------------------------------

def _put_varint(out: bytearray, v: int) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _get_varint(buf: bytes, pos: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, pos
        shift += 7
        if shift > 63:
            raise CorruptionError("MashMeta: varint too long")


def _width(max_value: int) -> int:
    """The narrowest column width (1, 2 or 4 bytes) that holds ``max_value``."""
    if max_value < 1 << 8:
        return 1
    if max_value < 1 << 16:
        return 2
    if max_value < 1 << 32:
        return 4
    raise InvalidArgumentError(f"MashMeta: value {max_value} does not fit 32 bits")


def _column(values: list[int], width: int) -> bytes:
    """``values`` as a little-endian array of ``width``-byte unsigned integers."""
    arr = array(_WIDTH_CODE[width], values)
    if not _LITTLE:
        arr.byteswap()
    return arr.tobytes()


def _read_column(buf: bytes, pos: int, n: int, width: int) -> list[int]:
    end = pos + n * width
    if end > len(buf):
        raise CorruptionError("MashMeta: column runs past the end")
    if width == 1:
        return list(buf[pos:end])
    if _LITTLE:
        return memoryview(buf)[pos:end].cast(_WIDTH_CODE[width]).tolist()
    arr = array(_WIDTH_CODE[width], buf[pos:end])
    arr.byteswap()
    return arr.tolist()


# -- encode / decode ------------------------------------------------------------------

def encode_table_meta(meta: TableMeta) -> bytes:
    """Encode ``meta`` as MashMeta (layout in the module docstring).

    Raises :class:`InvalidArgumentError` if the lists differ in length, the keys are not
    ascending, a number is negative or too large, or ``props`` is not JSON-able.
    """
    keys, sizes, offsets = meta.index_keys, meta.sizes, meta.offsets
    n = len(keys)
    if len(sizes) != n or len(offsets) != n:
        raise InvalidArgumentError(f"MashMeta: {n} keys, {len(sizes)} sizes, "
                                   f"{len(offsets)} offsets")
    if n and (min(sizes) < 0 or min(offsets) < 0) or meta.data_end < 0:
        raise InvalidArgumentError("MashMeta: negative size or offset")
    try:
        props = json.dumps(meta.props, separators=(",", ":")).encode()
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"MashMeta: props are not JSON-able ({e})") from None

    shared: list[int] = []
    suffixes: list[bytes] = []
    prev = b""
    for i, key in enumerate(keys):
        if key < prev:
            raise InvalidArgumentError(f"MashMeta: index key {i} is smaller than key {i - 1}")
        s = 0
        if i % RESTART_INTERVAL:
            m = min(len(prev), len(key))
            while s < m and prev[s] == key[s]:
                s += 1
        shared.append(s)
        suffixes.append(key[s:])
        prev = key
    unshared = [len(x) for x in suffixes]
    suffix_area = b"".join(suffixes)

    contiguous = all(offsets[i + 1] == offsets[i] + sizes[i] + _TRAILER
                     for i in range(n - 1))
    kw = _width(max(max(unshared, default=0), max(shared, default=0)))
    sw = _width(max(sizes, default=0))

    out = bytearray((META_FORMAT_VERSION, 0 if contiguous else _FLAG_OFFSETS))
    for v in (n, RESTART_INTERVAL):
        _put_varint(out, v)
    out += bytes((kw, sw))
    for v in (offsets[0] if n else 0, meta.data_end, len(suffix_area), len(meta.filter),
              len(props)):
        _put_varint(out, v)
    out += _column(shared, kw)
    out += _column(unshared, kw)
    out += _column(sizes, sw)
    if not contiguous:
        if max(offsets) >= 1 << 64:
            raise InvalidArgumentError("MashMeta: offset does not fit 64 bits")
        out += _column(offsets, 8)
    out += suffix_area
    out += meta.filter
    out += props
    out += _CRC.pack(zlib.crc32(out))
    return bytes(out)


def decode_table_meta(data: bytes) -> TableMeta:
    """Decode MashMeta bytes. Raises :class:`CorruptionError` if they fail the checksum,
    are malformed, or were written by a newer format version."""
    if not isinstance(data, bytes):
        data = bytes(data)  # keys are sliced out of it and must be bytes
    if len(data) < 2 + _CRC.size:
        raise CorruptionError(f"MashMeta: too short ({len(data)} bytes)")
    body_end = len(data) - _CRC.size
    if zlib.crc32(memoryview(data)[:body_end]) != _CRC.unpack_from(data, body_end)[0]:
        raise CorruptionError("MashMeta: checksum mismatch")
    if data[0] > META_FORMAT_VERSION:
        raise NewerFormatError(f"MashMeta: format version {data[0]} is newer than this "
                               f"rocksmash understands ({META_FORMAT_VERSION})")
    if data[0] != META_FORMAT_VERSION:
        raise CorruptionError(f"MashMeta: unknown format version {data[0]}")
    try:
        return _decode_body(data, body_end)
    except (IndexError, ValueError, TypeError, KeyError) as e:
        # The checksum passed, so this is a writer bug or a forged file; refuse it anyway.
        raise CorruptionError(f"MashMeta: malformed ({e})") from None


def _decode_body(data: bytes, body_end: int) -> TableMeta:
    flags = data[1]
    n, pos = _get_varint(data, 2)
    restart, pos = _get_varint(data, pos)
    kw, sw = data[pos], data[pos + 1]
    pos += 2
    first, pos = _get_varint(data, pos)
    data_end, pos = _get_varint(data, pos)
    suffix_len, pos = _get_varint(data, pos)
    filter_len, pos = _get_varint(data, pos)
    props_len, pos = _get_varint(data, pos)

    shared = _read_column(data, pos, n, kw)
    pos += n * kw
    unshared = _read_column(data, pos, n, kw)
    pos += n * kw
    sizes = _read_column(data, pos, n, sw)
    pos += n * sw
    if flags & _FLAG_OFFSETS:
        offsets = _read_column(data, pos, n, 8)
        pos += 8 * n
    else:
        # offsets[i] = first + sizes[0..i) + 5 * i, all in C.
        offsets = list(map(add, accumulate(sizes[:-1], initial=first),
                           range(0, _TRAILER * n, _TRAILER)))
    if pos + suffix_len + filter_len + props_len != body_end:
        raise CorruptionError("MashMeta: section lengths do not add up")
    if sum(unshared) != suffix_len:
        raise CorruptionError("MashMeta: key lengths do not add up")

    # Front decoding: the one loop per key. Restart keys (shared == 0) are plain slices.
    keys: list[bytes] = []
    append = keys.append
    prev = b""
    p = pos
    for s, u in zip(shared, unshared):
        q = p + u
        prev = prev[:s] + data[p:q] if s else data[p:q]
        append(prev)
        p = q
    if n and (not restart or any(shared[0:n:restart])):
        raise CorruptionError("MashMeta: restart key is not stored whole")
    pos += suffix_len
    filt = data[pos:pos + filter_len]
    pos += filter_len
    props = json.loads(data[pos:pos + props_len])
    if not isinstance(props, dict):
        raise CorruptionError("MashMeta: props are not an object")
    return TableMeta(keys, offsets, sizes, filt, props, data_end)


# -- the cache directory ----------------------------------------------------------------

class MetaCache:
    """A directory of MashMeta files, ``<number>.mmeta``, one per cloud table.

    Thread-safe: one lock guards the listing; file I/O runs outside it. ``put`` is
    durable (temp file, fsync, rename, fsync of the directory), so after a crash a file
    holds either the old or the new metadata, never a mix. Nothing is kept decoded in
    memory: the engine's table objects hold what :meth:`get` returns.

    Damage policy: a damaged file is a cache miss, not an error. :meth:`get` removes it,
    counts it in :attr:`damaged` and returns ``None``; the caller re-reads the metadata
    from the table object and puts it back. (:func:`decode_table_meta` itself raises.)
    """

    def __init__(self, dirpath: str) -> None:
        self.dirpath = dirpath
        os.makedirs(dirpath, exist_ok=True)
        self._lock = threading.Lock()
        #: number -> file size in bytes, from the listing at open.
        self._sizes: dict[int, int] = {}
        #: Files found damaged (and removed) by :meth:`get` since open.
        self.damaged = 0
        for entry in os.scandir(dirpath):
            name = entry.name
            if name.endswith(".tmp"):
                # A put that crashed before its rename: never visible, so just remove it.
                os.unlink(entry.path)
            elif name.endswith(_FILE_SUFFIX) and name[:-len(_FILE_SUFFIX)].isdigit():
                self._sizes[int(name[:-len(_FILE_SUFFIX)])] = entry.stat().st_size

    def _path(self, number: int) -> str:
        return os.path.join(self.dirpath, f"{number:06d}{_FILE_SUFFIX}")

    def put(self, number: int, meta: TableMeta) -> None:
        """Store ``meta`` as table ``number``'s, durably and atomically (replacing any)."""
        data = encode_table_meta(meta)
        fd, tmp = tempfile.mkstemp(prefix=f"{number:06d}.", suffix=".tmp", dir=self.dirpath)
        try:
            view = memoryview(data)
            while view:  # (os.write may write less)
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        with self._lock:  # rename under the lock so the listing and the files agree
            os.replace(tmp, self._path(number))
            self._sizes[number] = len(data)
        POSIX.sync_dir(self.dirpath)

    def get(self, number: int) -> TableMeta | None:
        """Table ``number``'s metadata, or ``None`` if absent or damaged (then removed)."""
        path = self._path(number)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            with self._lock:
                self._sizes.pop(number, None)
            return None
        try:
            st = os.fstat(fd)
            data = os.pread(fd, st.st_size, 0)
        finally:
            os.close(fd)
        try:
            return decode_table_meta(data)
        except (CorruptionError, NewerFormatError):  # a cache: refetch what it cannot read
            with self._lock:
                # Remove only the file we read: a concurrent put may have replaced it.
                try:
                    if os.stat(path).st_ino == st.st_ino:
                        os.unlink(path)
                        self._sizes.pop(number, None)
                except FileNotFoundError:
                    self._sizes.pop(number, None)
                self.damaged += 1
            return None

    def delete(self, number: int) -> None:
        """Forget table ``number`` (no error if absent).

        Not fsynced: if a crash brings the file back, it describes a table that left the
        database; the engine drops such numbers by comparing :meth:`numbers` with the
        manifest at open (table numbers are never reused, so it is never wrong).
        """
        with self._lock:
            self._sizes.pop(number, None)
            try:
                os.unlink(self._path(number))
            except FileNotFoundError:
                pass

    def numbers(self) -> list[int]:
        """Table numbers with stored metadata, ascending."""
        with self._lock:
            return sorted(self._sizes)

    def total_bytes(self) -> int:
        """Bytes of all stored metadata files."""
        with self._lock:
            return sum(self._sizes.values())
