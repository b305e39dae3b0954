"""Checksummed record framing shared by the WAL and the manifest.

Byte layout of one record (all integers little-endian)::

    +----------------+----------------+-------------------+
    | length: u32    | crc: u32       | payload: length B |
    +----------------+----------------+-------------------+

``crc`` is CRC-32 (zlib's polynomial) over the 4 length bytes followed by the payload,
so a torn or garbled length is caught too. Do not change this layout; see docs/format.md.

Reading tells three endings apart (see docs/format.md, "Torn tails"):

* clean: the data ends exactly after a valid record;
* ``TORN``: the last record is cut short (its length runs past the end of the data), or
  its length is zero (zeros or garbage no append wrote). That is what a crash mid-append
  leaves: the record was never complete on disk, so never acknowledged as synced;
* ``DAMAGED``: the last record is complete but fails its checksum (a flipped bit, or a
  length whose damage the checksum proves). No crash of this process produces that, so
  the caller decides whether dropping it can lose an acknowledged write.

Damage followed by any valid record is data lost in the middle: CorruptionError. The
search for such a record is linear in the size of the data: each candidate offset is
vetted by a cheap ``plausible`` test before its checksum is computed.
"""

from __future__ import annotations

import struct
import zlib
from typing import Callable

from .errors import CorruptionError

__all__ = ["HEADER_SIZE", "CLEAN", "TORN", "DAMAGED", "encode_record", "read_records"]

HEADER_SIZE = 8
_HEADER = struct.Struct("<II")
_LEN = struct.Struct("<I")
MAX_RECORD = 1 << 31


def encode_record(payload: bytes) -> bytes:
    """Frame ``payload`` as one record."""
    n = _LEN.pack(len(payload))
    return n + _LEN.pack(zlib.crc32(payload, zlib.crc32(n))) + payload


#: How a record stream ends (the third item of :func:`read_records`' result).
CLEAN = "clean"
TORN = "torn"
DAMAGED = "damaged"


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


def _true_length(data: memoryview, pos: int, end: int) -> int:
    """The length of the complete record at ``pos`` whose length field has one flipped
    bit, if the checksum proves one (-1 if none does). At most 32 checksums."""
    length, crc = _HEADER.unpack_from(data, pos)
    room = end - pos - HEADER_SIZE
    body = data[pos + HEADER_SIZE:end]
    for bit in range(32):
        n = length ^ (1 << bit)
        if 0 < n <= room and zlib.crc32(body[:n], zlib.crc32(_LEN.pack(n))) == crc:
            return n
    return -1


def read_records(data: bytes, start: int = 0, *, name: str = "log",
                 valid: Callable[[bytes], bool] | None = None
                 ) -> tuple[list[bytes], int, str]:
    """Parse records from ``data[start:]``.

    Returns ``(payloads, good_end, ending)``: the payloads of the valid prefix, the offset
    just past the last valid record, and how the data ends after it: ``CLEAN``, ``TORN``
    or ``DAMAGED`` (see the module docstring; the caller truncates at ``good_end`` or
    refuses). ``valid`` (optional) vets a payload found after a damaged record, so bytes
    that happen to checksum are not mistaken for a record.
    Raises CorruptionError when a damaged record is followed by a valid one: found when
    at most one bit of its length flipped, or when the valid one is small and starts
    within PROBE_WINDOW bytes. Time is linear in ``len(data)``.
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
        return out, pos, CLEAN
    if end - pos < HEADER_SIZE:
        return out, pos, TORN  # a header cut short
    length = _true_length(view, pos, end)
    if length < 0:
        (length,) = _LEN.unpack_from(view, pos)
        if length == 0 or length > end - pos - HEADER_SIZE:
            # Cut short by a crash mid-append (or garbage, such as zeros, that no append
            # wrote), unless the length was damaged in more than one bit and a valid
            # record follows: look for one.
            _refuse_valid_after(view, pos, None, end, name, valid)
            return out, pos, TORN
    # A complete record that fails its checksum. Whatever follows it must not be valid.
    _refuse_valid_after(view, pos, pos + HEADER_SIZE + length, end, name, valid)
    return out, pos, DAMAGED


#: How far past a damaged record a valid one is searched for, byte by byte (records are
#: usually small). Bounds the time of reading a long torn tail.
PROBE_WINDOW = 64 << 10


def _refuse_valid_after(view: memoryview, pos: int, nxt: int | None, end: int, name: str,
                        valid: Callable[[bytes], bool] | None) -> None:
    """Raise CorruptionError if a valid record starts at ``nxt`` (where the damaged record
    at ``pos`` says the next one is), or a valid record of at most PROBE_WINDOW bytes
    starts within PROBE_WINDOW bytes after ``pos``."""
    probes = range(pos + 1, min(end - HEADER_SIZE, pos + PROBE_WINDOW) + 1)
    for probe in ([nxt] if nxt is not None else []) + list(probes):
        if probe != nxt and _LEN.unpack_from(view, probe)[0] > PROBE_WINDOW:
            continue  # only small records are searched for: each costs a checksum
        length = _record_at(view, probe, end)
        if length > 0 and (valid is None or valid(
                bytes(view[probe + HEADER_SIZE:probe + HEADER_SIZE + length]))):
            raise CorruptionError(
                f"{name}: damaged record at offset {pos} followed by a valid record at "
                f"offset {probe}; refusing to drop acknowledged data")
