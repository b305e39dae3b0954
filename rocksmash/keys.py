"""Keys and values at the API boundary: any bytes-like object in, ``bytes`` inside.

Every public method that takes a key, a value or a key bound converts it here, once, and
the engine below works on ``bytes`` only (memtables, WAL records, tables and every answer
are ``bytes``). A bytes-like object is anything with the buffer protocol (``bytes``,
``bytearray``, ``memoryview``, ``array.array``, a NumPy array...); it is copied as
``bytes(memoryview(x))`` would (its raw bytes in C order), so changing a ``bytearray``
after ``put`` does not change what is stored.

``str`` is refused (an :class:`~rocksmash.errors.InvalidTypeError`): the engine will not
guess an encoding. So are ``int`` (``bytes(3)`` would silently be three zero bytes),
``None`` and every other type.

Contract for callers: check ``type(x) is bytes`` first and call these only when it is not,
so the common case costs one type comparison on the hot paths.
"""

from __future__ import annotations

from .errors import InvalidTypeError

__all__ = ["BytesLike", "as_bytes", "as_bound"]

#: What the API's annotations accept as a key or value (at run time, any object with the
#: buffer protocol is accepted; these are the types an editor and mypy are told of).
BytesLike = bytes | bytearray | memoryview

_ACCEPTED = "bytes, bytearray or memoryview"


def as_bytes(x: object, what: str = "key") -> bytes:
    """``x`` as ``bytes``; InvalidTypeError naming ``what`` if it is not bytes-like."""
    if type(x) is bytes:
        return x
    if isinstance(x, str):
        raise InvalidTypeError(f"{what} must be {_ACCEPTED}, not str (encode it first, "
                               f"for example with .encode())")
    try:
        view = memoryview(x)  # type: ignore[arg-type]
    except TypeError:
        raise InvalidTypeError(f"{what} must be {_ACCEPTED}, not {type(x).__name__}") from None
    with view:  # release at once: a viewed bytearray cannot be resized
        return view.tobytes()


def as_bound(x: object, what: str) -> bytes | None:
    """A scan or range bound: None (unbounded) or :func:`as_bytes`."""
    return None if x is None else as_bytes(x, what)
