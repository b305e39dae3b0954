"""WriteBatch: an atomic group of puts and deletes, and its WAL encoding.

Payload of one WAL record (integers little-endian)::

    seq: u64          sequence number of the first operation; operation i has seq + i
    count: u32        number of operations
    count times:
      kind: u8        1 = put, 0 = delete, 2 = range delete (WAL format 2 on)
      key_len: u32, key bytes   (range delete: the range's start)
      (put only) value_len: u32, value bytes
      (range delete only) end_len: u32, end bytes   (the range's exclusive end)

Do not change this layout; see docs/format.md.
"""

from __future__ import annotations

import struct
from itertools import chain, repeat
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

from .errors import CorruptionError, InvalidArgumentError
from .formats import KIND_DELETE, KIND_PUT, KIND_RANGE_DELETE
from .keys import BytesLike, as_bytes
from .range_del import RangeEnd

if TYPE_CHECKING:
    from .db import DB

__all__ = ["WriteBatch", "KIND_DELETE", "KIND_PUT", "KIND_RANGE_DELETE", "RangeEnd",
           "encode_batch", "encode_put", "decode_batch", "ops_within"]


_HEAD = struct.Struct("<QI")
_PUT1 = struct.Struct("<QIBI")
_U32 = struct.Struct("<I")
_KIND_LEN = struct.Struct("<BI")


class WriteBatch:
    """Puts, deletes and range deletes applied atomically by :meth:`rocksmash.DB.write`.

    Keys and values are bytes-like (``bytes``, ``bytearray``, ``memoryview``; copied to
    ``bytes`` at once, see :mod:`rocksmash.keys`); anything else, ``str`` included, raises
    :class:`~rocksmash.errors.InvalidTypeError` (a ``TypeError``) at once. Later operations
    on the same key win. A batch can be reused after :meth:`clear`.
    """

    __slots__ = ("ops", "_db", "_sync")

    def __init__(self, *, db: "DB | None" = None, sync: bool | None = None) -> None:
        #: (key, value) pairs in order; value ``None`` means delete, and a
        #: :class:`~rocksmash.range_del.RangeEnd` a range delete from ``key``.
        self.ops: list[tuple[bytes, bytes | None]] = []
        #: With ``db``, a ``with`` block writes the batch there at its clean end
        #: (:meth:`rocksmash.DB.batch` makes such a batch).
        self._db = db
        self._sync = sync

    def __enter__(self) -> "WriteBatch":
        if self._db is None:
            raise InvalidArgumentError("a WriteBatch written at the end of a with block comes "
                                       "from db.batch(); a plain WriteBatch() is passed to "
                                       "db.write()")
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        """Write the batch unless the block raised (then it is discarded)."""
        if exc_type is None and self._db is not None:
            self._db.write(self, self._sync)

    def put(self, key: BytesLike, value: BytesLike) -> "WriteBatch":
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        if type(value) is not bytes:
            value = as_bytes(value, "value")
        self.ops.append((key, value))
        return self

    def put_many(self, pairs: Iterable[tuple[BytesLike, BytesLike]]) -> "WriteBatch":
        """:meth:`put` of every ``(key, value)`` pair, in order, with the type check done
        in C for the whole lot when all are ``bytes`` (a load's batch of 1,000 then costs
        a fraction of 1,000 :meth:`put` calls). On a bad pair nothing is added."""
        new = [(k, v) for k, v in pairs]
        if new:
            keys, values = zip(*new)
            if set(map(type, keys)) != _BYTES or set(map(type, values)) != _BYTES:
                new = [(k if type(k) is bytes else as_bytes(k, "key"),
                        v if type(v) is bytes else as_bytes(v, "value")) for k, v in new]
            self.ops += new  # type: ignore[arg-type]
        return self

    def delete(self, key: BytesLike) -> "WriteBatch":
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        self.ops.append((key, None))
        return self

    def delete_range(self, start: BytesLike, end: BytesLike) -> "WriteBatch":
        """Delete every key ``k`` with ``start <= k < end`` (as RocksDB's ``DeleteRange``:
        ``start == end`` deletes nothing and adds nothing; ``start > end`` raises
        :class:`~rocksmash.errors.InvalidArgumentError`). Keys written later in the batch,
        or later at all, are not affected."""
        start = as_bytes(start, "start")
        end = as_bytes(end, "end")
        if start > end:
            raise InvalidArgumentError(f"delete_range: start {start!r} is after end {end!r}")
        if start != end:
            self.ops.append((start, RangeEnd(end)))  # type: ignore[arg-type]
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


_BYTES = {bytes}
_BYTES_OR_NONE = {bytes, type(None)}
#: struct.Struct per batch shape (count, key length, value length), for encode_batch.
_SHAPES: dict[tuple[int, int, int], struct.Struct] = {}


def ops_within(ops: Sequence[tuple[bytes, bytes | None]], max_key: int, max_value: int
               ) -> bool:
    """True if every key is ``bytes`` of at most ``max_key`` bytes and every value is
    ``bytes`` (at most ``max_value``) or None: the whole check in a few C calls. On False
    the caller looks for the offending operation one by one, for its exact error."""
    if not ops:
        return True
    keys, values = zip(*ops)
    return (set(map(type, keys)) == _BYTES and set(map(type, values)) <= _BYTES_OR_NONE
            and max(map(len, keys)) <= max_key
            and max(map(len, filter(None, values)), default=0) <= max_value)


def encode_batch(seq: int, ops: Sequence[tuple[bytes, bytes | None]]) -> bytes:
    """The payload of a batch (layout above).

    Fast path: a batch of puts whose keys all have one length and values another (a
    load's batches, fixed-size records) is packed by one ``struct.Struct`` call for the
    whole batch, several times faster than packing operation by operation."""
    n = len(ops)
    if n > 1:
        keys, values = zip(*ops)
        if (None not in values and set(map(type, values)) == _BYTES
                and len(set(map(len, keys))) == 1
                and len(set(map(len, values))) == 1):
            kl, vl = len(keys[0]), len(values[0] or b"")
            shape = _SHAPES.get((n, kl, vl))
            if shape is None:
                if len(_SHAPES) >= 8:  # bounded: each holds a code per field
                    _SHAPES.clear()
                shape = _SHAPES[(n, kl, vl)] = struct.Struct(
                    "<QI" + f"BI{kl}sI{vl}s" * n)
            return shape.pack(seq, n, *chain.from_iterable(
                zip(repeat(KIND_PUT), repeat(kl), keys, repeat(vl), values)))
    parts = [_HEAD.pack(seq, len(ops))]
    for key, value in ops:
        if value is None:
            parts.append(_KIND_LEN.pack(KIND_DELETE, len(key)))
            parts.append(key)
        elif type(value) is RangeEnd:
            end = value.end
            parts += (_KIND_LEN.pack(KIND_RANGE_DELETE, len(key)), key, _U32.pack(len(end)),
                      end)
        else:
            parts.append(_KIND_LEN.pack(KIND_PUT, len(key)))
            parts.append(key)
            parts.append(_U32.pack(len(value)))
            parts.append(value)
    return b"".join(parts)


def _sized(payload: bytes, pos: int, what: str) -> tuple[bytes, int]:
    """A ``len: u32`` then that many bytes at ``pos``; and the position after them."""
    (n,) = _U32.unpack_from(payload, pos)
    pos += 4
    data = payload[pos:pos + n]
    if len(data) != n:
        raise CorruptionError(f"truncated {what}")
    return data, pos + n


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
                value, pos = _sized(payload, pos, "value")
                ops.append((key, value))
            elif kind == KIND_DELETE:
                ops.append((key, None))
            elif kind == KIND_RANGE_DELETE:
                end, pos = _sized(payload, pos, "range end")
                ops.append((key, RangeEnd(end)))  # type: ignore[arg-type]
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
