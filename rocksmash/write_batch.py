"""WriteBatch: an atomic group of puts and deletes, and its WAL encoding.

Payload of one WAL record (integers little-endian)::

    seq: u64          sequence number of the first operation; operation i has seq + i
    count: u32        number of operations
    count times:
      kind: u8        1 = put, 0 = delete
      key_len: u32, key bytes
      (put only) value_len: u32, value bytes

Do not change this layout; see docs/format.md.
"""

from __future__ import annotations

import struct
from typing import Iterator

from .errors import CorruptionError
from .formats import KIND_DELETE, KIND_PUT
from .keys import BytesLike, as_bytes

__all__ = ["WriteBatch", "KIND_DELETE", "KIND_PUT", "encode_batch", "encode_put",
           "decode_batch"]


_HEAD = struct.Struct("<QI")
_PUT1 = struct.Struct("<QIBI")
_U32 = struct.Struct("<I")
_KIND_LEN = struct.Struct("<BI")


class WriteBatch:
    """Puts and deletes applied atomically by :meth:`rocksmash.DB.write`.

    Keys and values are bytes-like (``bytes``, ``bytearray``, ``memoryview``; copied to
    ``bytes`` at once, see :mod:`rocksmash.keys`); anything else, ``str`` included, raises
    :class:`~rocksmash.errors.InvalidTypeError` (a ``TypeError``) at once. Later operations
    on the same key win. A batch can be reused after :meth:`clear`.
    """

    __slots__ = ("ops",)

    def __init__(self) -> None:
        #: (key, value) pairs in order; value ``None`` means delete.
        self.ops: list[tuple[bytes, bytes | None]] = []

    def put(self, key: BytesLike, value: BytesLike) -> "WriteBatch":
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        if type(value) is not bytes:
            value = as_bytes(value, "value")
        self.ops.append((key, value))
        return self

    def delete(self, key: BytesLike) -> "WriteBatch":
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        self.ops.append((key, None))
        return self

    def clear(self) -> None:
        self.ops.clear()

    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self) -> Iterator[tuple[bytes, bytes | None]]:
        return iter(self.ops)

    def __repr__(self) -> str:
        return f"WriteBatch({len(self.ops)} ops)"


def encode_put(seq: int, key: bytes, value: bytes) -> bytes:
    """The payload of a one-put batch (the write path's fast case)."""
    return b"".join((_PUT1.pack(seq, 1, KIND_PUT, len(key)), key, _U32.pack(len(value)), value))


def encode_batch(seq: int, ops: list[tuple[bytes, bytes | None]]) -> bytes:
    parts = [_HEAD.pack(seq, len(ops))]
    for key, value in ops:
        if value is None:
            parts.append(_KIND_LEN.pack(KIND_DELETE, len(key)))
            parts.append(key)
        else:
            parts.append(_KIND_LEN.pack(KIND_PUT, len(key)))
            parts.append(key)
            parts.append(_U32.pack(len(value)))
            parts.append(value)
    return b"".join(parts)


def decode_batch(payload: bytes) -> tuple[int, list[tuple[bytes, bytes | None]]]:
    """Return ``(first_seq, ops)``; raise CorruptionError on a malformed payload."""
    try:
        seq, count = _HEAD.unpack_from(payload, 0)
        pos = _HEAD.size
        ops: list[tuple[bytes, bytes | None]] = []
        for _ in range(count):
            kind, klen = _KIND_LEN.unpack_from(payload, pos)
            pos += 5
            key = payload[pos:pos + klen]
            pos += klen
            if kind == KIND_PUT:
                (vlen,) = _U32.unpack_from(payload, pos)
                pos += 4
                value = payload[pos:pos + vlen]
                pos += vlen
                if len(value) != vlen:
                    raise CorruptionError("truncated value")
                ops.append((key, value))
            elif kind == KIND_DELETE:
                ops.append((key, None))
            else:
                raise CorruptionError(f"unknown operation kind {kind}")
            if len(key) != klen:
                raise CorruptionError("truncated key")
        if pos != len(payload):
            raise CorruptionError("trailing bytes")
    except struct.error as e:
        raise CorruptionError(f"malformed write batch: {e}") from None
    except CorruptionError as e:
        raise CorruptionError(f"malformed write batch: {e}") from None
    return seq, ops


def is_valid_batch(payload: bytes) -> bool:
    try:
        decode_batch(payload)
    except CorruptionError:
        return False
    return True
