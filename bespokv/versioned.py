"""Versioned values: what the active-active controlets store in their datalets.

Byte layout (big-endian; frozen - changing it breaks every stored aa-mode replica)::

    +--------+----------------+----------------+-------------------+
    | flags  | timestamp      | writer         | value             |
    | 1 byte | uint64         | uint32         | rest; for a       |
    |        |                |                | tombstone: empty  |
    |        |                |                | or its deletion   |
    |        |                |                | time (uint64 ms)  |
    +--------+----------------+----------------+-------------------+

    flags: 0x01 live value, 0x02 tombstone; other values are rejected as corrupt.
    timestamp: aa-sc: a per-node counter above every version it has seen (ABD);
               aa-ec: a hybrid logical clock reading (48-bit ms << 16 | 16-bit logical).
    writer: the tie-breaker: a hash of the writing node's id and of its process
            incarnation (``shardmap.writer_id``), so two writes never share a version,
            even when a restarted node reuses a timestamp.

A version is ``(timestamp, writer)``; the higher one wins, compared as a tuple. Because the
header is fixed-width and big-endian, comparing the 12 header bytes after the flag byte
compares versions.
"""

from __future__ import annotations

import struct

from bespokv.errors import CorruptionError

__all__ = ["HEADER", "LIVE", "TOMBSTONE", "encode", "decode", "version_of", "newer", "deleted_at", "ZERO"]

LIVE = 0x01
TOMBSTONE = 0x02
HEADER = 13
_H = struct.Struct(">BQI")

Version = tuple[int, int]
ZERO: Version = (0, 0)


_MS = struct.Struct(">Q")


def encode(ts: int, writer: int, value: bytes | None, *, deleted_at_ms: int | None = None) -> bytes:
    """Encode a value (or a tombstone when ``value`` is None) with its version. A
    tombstone may record its deletion time, for timestamps that are not clock readings."""
    if value is None:
        tail = b"" if deleted_at_ms is None else _MS.pack(deleted_at_ms)
        return _H.pack(TOMBSTONE, ts, writer) + tail
    return _H.pack(LIVE, ts, writer) + value


def deleted_at(data: bytes) -> int | None:
    """A tombstone's recorded deletion time in ms (None: not a tombstone, or none kept)."""
    if data[0] != TOMBSTONE or len(data) < HEADER + _MS.size:
        return None
    return _MS.unpack_from(data, HEADER)[0]


def decode(data: bytes) -> tuple[Version, bytes | None]:
    """``((ts, writer), value)``; value is None for a tombstone. CorruptionError if malformed."""
    if len(data) < HEADER:
        raise CorruptionError(f"versioned value of {len(data)} bytes is shorter than its header")
    flags, ts, writer = _H.unpack_from(data)
    if flags == LIVE:
        return (ts, writer), data[HEADER:]
    if flags == TOMBSTONE:
        return (ts, writer), None
    raise CorruptionError(f"versioned value has unknown flags {flags:#x}")


def version_of(data: bytes | None) -> Version:
    """The version of an encoded value, ZERO for None (absent)."""
    if data is None:
        return ZERO
    if len(data) < HEADER:
        raise CorruptionError("versioned value shorter than its header")
    _, ts, writer = _H.unpack_from(data)
    return ts, writer


def newer(candidate: bytes, current: bytes | None) -> bool:
    """True when ``candidate`` carries a higher version than ``current``."""
    if current is None:
        return True
    return candidate[1:HEADER] > current[1:HEADER]
