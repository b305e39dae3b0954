"""Checksummed record framing shared by the WAL and the manifest.

Byte layout of one record (all integers little-endian)::

    +----------------+----------------+-------------------+
    | length: u32    | crc: u32       | payload: length B |
    +----------------+----------------+-------------------+

``crc`` is CRC-32 (zlib's polynomial) over the 4 length bytes followed by the payload,
so a torn or garbled length is caught too. Do not change this layout; see docs/format.md.

Reading tells a *torn tail* from *corruption*: when a record fails (short, bad length or
bad checksum), the reader looks for any valid record after it. None found: the tail was
torn by a crash mid-write and is reported so the caller can drop it. One found: data in
the middle was damaged, which would silently lose acknowledged writes, so it raises
:class:`~rocksmash.errors.CorruptionError`.
"""

from __future__ import annotations

import struct
import zlib
from typing import Callable

from .errors import CorruptionError

__all__ = ["HEADER_SIZE", "encode_record", "read_records"]

HEADER_SIZE = 8
_HEADER = struct.Struct("<II")
_LEN = struct.Struct("<I")
MAX_RECORD = 1 << 31


def encode_record(payload: bytes) -> bytes:
    """Frame ``payload`` as one record."""
    n = _LEN.pack(len(payload))
    return n + _LEN.pack(zlib.crc32(payload, zlib.crc32(n))) + payload


def _record_at(data: bytes | memoryview, pos: int, end: int) -> int:
    """Return the payload length of a valid record at ``pos``, or -1."""
    if end - pos < HEADER_SIZE:
        return -1
    length, crc = _HEADER.unpack_from(data, pos)
    if length == 0 or length > end - pos - HEADER_SIZE:
        return -1
    if zlib.crc32(data[pos + HEADER_SIZE:pos + HEADER_SIZE + length],
                  zlib.crc32(data[pos:pos + 4])) != crc:
        return -1
    return length


def read_records(data: bytes, start: int = 0, *, name: str = "log",
                 valid: Callable[[bytes], bool] | None = None
                 ) -> tuple[list[bytes], int, bool]:
    """Parse records from ``data[start:]``.

    Returns ``(payloads, good_end, torn)``: the payloads of the valid prefix, the offset
    just past the last valid record, and whether bytes after it were a torn tail (to be
    truncated). ``valid`` (optional) vets a payload found while deciding torn-vs-corrupt,
    so random bytes that happen to checksum are not mistaken for a record.
    Raises CorruptionError when a damaged record is followed by a valid one.
    """
    view = memoryview(data)
    end = len(data)
    pos = start
    out: list[bytes] = []
    while pos < end:
        length = _record_at(view, pos, end)
        if length < 0:
            break
        out.append(bytes(view[pos + HEADER_SIZE:pos + HEADER_SIZE + length]))
        pos += HEADER_SIZE + length
    if pos >= end:
        return out, pos, False
    # A bad record at ``pos``: is anything valid after it?
    for probe in range(pos + 1, end - HEADER_SIZE + 1):
        length = _record_at(view, probe, end)
        if length > 0:
            payload = bytes(view[probe + HEADER_SIZE:probe + HEADER_SIZE + length])
            if valid is None or valid(payload):
                raise CorruptionError(
                    f"{name}: damaged record at offset {pos} followed by a valid record at "
                    f"offset {probe}; refusing to drop acknowledged data")
    return out, pos, True
