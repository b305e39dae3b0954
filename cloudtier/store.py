"""The object-store interface every backend and wrapper implements.

An :class:`ObjectStore` is a flat map from ``str`` keys to immutable ``bytes`` values, the
common ground of S3, MinIO, Ceph RGW and a local directory. Keys are relative to the
store's own prefix (``s3://bucket/db1`` and key ``wal/000001.log`` name the S3 object
``db1/wal/000001.log``).

Contracts shared by every implementation:

* **Keys** are ``/``-separated paths: non-empty, at most :data:`MAX_KEY_BYTES` bytes of
  UTF-8, no empty, ``.`` or ``..`` segment (so no leading, trailing or doubled ``/``), no
  control characters. A bad key raises :class:`~cloudtier.errors.InvalidKeyError` before
  any request is sent, on every backend, so code tested on ``memory://`` behaves the same
  on S3.
* **Writes are atomic**: a reader sees the whole old object or the whole new one.
* **Read-after-write**: once ``put`` or ``delete`` returns, every later call (from any
  thread, and for ``file://`` and S3 from any process) sees its effect. AWS S3 has been
  strongly consistent since December 2020; MinIO and Ceph RGW are as well.
* **Etags** are opaque strings without quotes that change whenever the content changes.
  For ``memory://``, ``file://`` and single-part S3 uploads without SSE-KMS the etag is the
  hex MD5 of the content, so equal etags there mean equal bytes.
* **Thread safety**: every method may be called from several threads at once.
  ``list`` returns an iterator that belongs to the calling thread.
* **Errors** come only from :mod:`cloudtier.errors`.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
from collections.abc import Iterator
from types import TracebackType
from typing import NamedTuple, TypeVar

from cloudtier.errors import ClosedError, InvalidKeyError

__all__ = [
    "ObjectStore",
    "ObjectInfo",
    "BytesLike",
    "ListPage",
    "StoreWrapper",
    "MAX_KEY_BYTES",
    "DEFAULT_PAGE_SIZE",
    "check_key",
    "check_prefix",
    "check_range",
    "check_put_args",
    "normalize_prefix",
    "content_etag",
]

#: S3's limit for a whole object key. Backends with a prefix check the joined key too.
MAX_KEY_BYTES = 1024

#: Objects per LIST request. 1000 is S3's maximum per ListObjectsV2 call.
DEFAULT_PAGE_SIZE = 1000

_S = TypeVar("_S", bound="ObjectStore")

#: What ``put`` accepts: ``bytes``, or a ``bytearray`` / byte-format ``memoryview``
#: (copied or written out before ``put`` returns, so the caller may reuse its buffer).
BytesLike = bytes | bytearray | memoryview


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What ``head`` and ``list`` say about one object."""

    key: str  #: relative to the store's prefix
    size: int  #: bytes
    etag: str  #: opaque, unquoted; changes whenever the content changes
    mtime: float  #: last modification, seconds since the Unix epoch


class ListPage(NamedTuple):
    """One LIST request's worth of objects, sorted by key."""

    objects: list[ObjectInfo]
    #: True when more objects may follow ``objects[-1].key``.
    truncated: bool


class ObjectStore(abc.ABC):
    """A flat, prefix-scoped map of ``str`` keys to ``bytes``; see the module docstring.

    Implementations are context managers; leaving the ``with`` block calls :meth:`close`.
    """

    @abc.abstractmethod
    def put(
        self,
        key: str,
        data: BytesLike,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
    ) -> str:
        """Store ``data`` under ``key`` atomically, replacing any object there; return its etag.

        Conditional forms (compare-and-swap, for fencing and manifests), checked atomically
        with the write on every backend:

        * ``if_none_match=True``: write only if no object exists at ``key``.
        * ``if_match=etag``: write only if the object exists and its etag is ``etag``.

        Passing both raises ``ValueError``.

        Raises: ``PreconditionFailedError`` if a condition does not hold,
        ``InvalidKeyError``, ``TransientError``/``StoreTimeoutError`` (the write may or
        may not have happened), ``ClosedError``, ``StoreError``.
        """

    @abc.abstractmethod
    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """Return bytes ``[start, end)`` of the object, like ``data[start:end]``.

        ``start`` defaults to 0 and ``end`` to the object's size; an ``end`` past the size
        is clamped and a ``start`` at or past the size gives ``b""``. Negative offsets or
        ``end < start`` raise ``ValueError`` (no suffix ranges).

        Raises: ``NotFoundError`` if the object is absent (even for an empty range),
        ``InvalidKeyError``, ``TransientError``/``StoreTimeoutError``, ``ClosedError``,
        ``StoreError``.
        """

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo:
        """Return the object's metadata without its content.

        Raises: ``NotFoundError``, ``InvalidKeyError``, ``TransientError``,
        ``StoreTimeoutError``, ``ClosedError``, ``StoreError``.
        """

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object. Deleting an absent key succeeds (idempotent, as in S3).

        Raises: ``InvalidKeyError``, ``TransientError``/``StoreTimeoutError``,
        ``ClosedError``, ``StoreError``.
        """

    @abc.abstractmethod
    def list_page(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> ListPage:
        """One LIST request: up to ``limit`` objects whose keys start with ``prefix`` and
        sort after ``start_after``, in ascending key order (code point order, which is
        S3's UTF-8 byte order). ``limit`` defaults to the store's page size.

        Most callers want :meth:`list`; this is the unit wrappers meter, retry and fault.

        Raises: ``TransientError``, ``StoreTimeoutError``, ``ClosedError``, ``StoreError``.
        """

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Yield every object whose key starts with ``prefix``, sorted by key.

        Pages are fetched lazily, one :meth:`list_page` call at a time. The listing is not
        a snapshot: an object put or deleted during the iteration may or may not appear,
        but no key appears twice and the order holds.

        Raises (from the iterator): as :meth:`list_page`.
        """
        check_prefix(prefix)
        start_after: str | None = None
        while True:
            page = self.list_page(prefix, start_after=start_after)
            yield from page.objects
            if not page.truncated or not page.objects:
                return
            start_after = page.objects[-1].key

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections and files. Idempotent. Later calls raise ``ClosedError``."""

    def find(self, kind: type[_S]) -> _S | None:
        """Return the first layer (this store or a store it wraps) that is a ``kind``.

        ``open_store(url, metered=True).find(MeteredStore).snapshot()`` reaches the meter
        under a retry wrapper.
        """
        layer: ObjectStore | None = self
        while layer is not None:
            if isinstance(layer, kind):
                return layer
            layer = getattr(layer, "inner", None)
        return None

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class StoreWrapper(ObjectStore):
    """An :class:`ObjectStore` that forwards every call to ``inner``.

    Subclasses override what they change (SlateDB-style layering: retrying, metered,
    fault-injecting). Closing the wrapper closes ``inner``; the wrapper owns it.
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner

    def put(
        self,
        key: str,
        data: BytesLike,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
    ) -> str:
        return self.inner.put(key, data, if_none_match=if_none_match, if_match=if_match)

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        return self.inner.get(key, start, end)

    def head(self, key: str) -> ObjectInfo:
        return self.inner.head(key)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def list_page(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> ListPage:
        return self.inner.list_page(prefix, start_after=start_after, limit=limit)

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


# --- argument checks shared by the backends -------------------------------------------


def check_key(key: object) -> str:
    """Return ``key`` if it is a valid object key, else raise ``InvalidKeyError``."""
    if not isinstance(key, str):
        raise InvalidKeyError(f"object keys are str, not {type(key).__name__}: {key!r}")
    if not key:
        raise InvalidKeyError("object key is empty")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError as e:  # lone surrogates
        raise InvalidKeyError(f"object key is not valid Unicode: {key!r}") from e
    if size > MAX_KEY_BYTES:
        raise InvalidKeyError(f"object key is {size} bytes of UTF-8; the limit is {MAX_KEY_BYTES}")
    # Control characters cannot travel in S3's XML listings and make file names unreadable.
    if any(c < " " or c == "\x7f" for c in key):
        raise InvalidKeyError(f"object key contains a control character: {key!r}")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidKeyError(
                f"object key {key!r} has an empty, '.' or '..' segment "
                "(no leading, trailing or doubled '/')"
            )
    return key


def check_prefix(prefix: object) -> str:
    """Return ``prefix`` if it can start a key (any str without control characters)."""
    if not isinstance(prefix, str):
        raise InvalidKeyError(f"list prefixes are str, not {type(prefix).__name__}")
    if any(c < " " or c == "\x7f" for c in prefix):
        raise InvalidKeyError(f"list prefix contains a control character: {prefix!r}")
    return prefix


def check_range(start: int | None, end: int | None) -> tuple[int, int | None]:
    """Validate a ``get`` range; return ``(start, end)`` with ``start`` defaulted to 0."""
    lo = 0 if start is None else start
    if lo < 0 or (end is not None and end < 0):
        raise ValueError(f"negative byte offset in range [{start}, {end})")
    if end is not None and end < lo:
        raise ValueError(f"range end {end} is before its start {lo}")
    return lo, end


def check_put_args(data: object, if_none_match: bool, if_match: str | None) -> None:
    """Reject a put whose data is not bytes-like or whose conditions contradict."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"object data is bytes, not {type(data).__name__}")
    if if_none_match and if_match is not None:
        raise ValueError("pass if_none_match or if_match, not both")
    if if_match is not None and (not isinstance(if_match, str) or not if_match):
        raise ValueError(f"if_match takes an etag string, got {if_match!r}")


def normalize_prefix(prefix: str) -> str:
    """Turn a store prefix (``"db1"``, ``"/db1/"``, ``""``) into ``""`` or ``"db1/"``.

    Raises ``InvalidKeyError`` if the prefix is not a valid key path itself.
    """
    stripped = prefix.strip("/")
    if not stripped:
        return ""
    check_key(stripped)
    return stripped + "/"


def content_etag(data: BytesLike) -> str:
    """The etag ``memory://`` and ``file://`` give an object: the hex MD5 of its content.

    MD5 because S3 uses it for single-part uploads, so one payload has one etag on every
    backend; it is a change detector here, not a security measure.
    """
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


class ClosableMixin:
    """A ``closed`` flag and the check every backend call starts with."""

    _closed: bool = False

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self!r} is closed")
