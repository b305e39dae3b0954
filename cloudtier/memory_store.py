"""``memory://``: a process-local object store for tests.

``memory://`` (no name) is a fresh, private store. ``memory://name/prefix`` opens a view on
the process-wide bucket ``name``, so two stores opened with the same name see the same
objects (a test can "reopen" a database). Nothing is ever written to disk.
"""

from __future__ import annotations

import threading
import time

from sortedcontainers import SortedDict

from cloudtier.errors import NotFoundError, PreconditionFailedError
from cloudtier.store import (
    DEFAULT_PAGE_SIZE,
    BytesLike,
    ClosableMixin,
    ListPage,
    ObjectInfo,
    ObjectStore,
    check_key,
    check_prefix,
    check_put_args,
    check_range,
    content_etag,
    normalize_prefix,
)

__all__ = ["MemoryStore", "drop_memory_bucket"]


class _Bucket:
    """The objects of one memory bucket: full key -> (data, etag, mtime), under ``lock``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: SortedDict = SortedDict()


# Named buckets live as long as the process (or until drop_memory_bucket).
_NAMED: dict[str, _Bucket] = {}
_NAMED_LOCK = threading.Lock()


def drop_memory_bucket(name: str) -> None:
    """Forget the named bucket ``memory://name`` (stores still open on it keep their view)."""
    with _NAMED_LOCK:
        _NAMED.pop(name, None)


class MemoryStore(ClosableMixin, ObjectStore):
    """An in-memory :class:`ObjectStore`; thread-safe, one lock per bucket.

    ``name=""`` makes a private bucket; any other name shares the process-wide bucket of
    that name. ``prefix`` scopes keys as in S3. ``page_size`` bounds each list page.
    """

    def __init__(self, name: str = "", prefix: str = "", *, page_size: int = DEFAULT_PAGE_SIZE):
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self._name = name
        self._prefix = normalize_prefix(prefix)
        self._page_size = page_size
        if name:
            with _NAMED_LOCK:
                self._bucket = _NAMED.setdefault(name, _Bucket())
        else:
            self._bucket = _Bucket()

    def __repr__(self) -> str:
        return f"MemoryStore('memory://{self._name}/{self._prefix}')"

    def put(
        self,
        key: str,
        data: BytesLike,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
    ) -> str:
        self._check_open()
        full = self._prefix + check_key(key)
        check_put_args(data, if_none_match, if_match)
        value = bytes(data)  # own an immutable copy; the caller may reuse a bytearray
        etag = content_etag(value)
        with self._bucket.lock:
            current = self._bucket.objects.get(full)
            if if_none_match and current is not None:
                raise PreconditionFailedError(f"{key!r} exists (if_none_match)")
            if if_match is not None and (current is None or current[1] != if_match):
                raise PreconditionFailedError(f"{key!r} does not have etag {if_match!r}")
            self._bucket.objects[full] = (value, etag, time.time())
        return etag

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        self._check_open()
        full = self._prefix + check_key(key)
        lo, hi = check_range(start, end)
        with self._bucket.lock:
            entry = self._bucket.objects.get(full)
        if entry is None:
            raise NotFoundError(key)
        data: bytes = entry[0]
        if lo == 0 and hi is None:
            return data
        return data[lo:hi]

    def head(self, key: str) -> ObjectInfo:
        self._check_open()
        full = self._prefix + check_key(key)
        with self._bucket.lock:
            entry = self._bucket.objects.get(full)
        if entry is None:
            raise NotFoundError(key)
        return ObjectInfo(key, len(entry[0]), entry[1], entry[2])

    def delete(self, key: str) -> None:
        self._check_open()
        full = self._prefix + check_key(key)
        with self._bucket.lock:
            self._bucket.objects.pop(full, None)

    def list_page(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> ListPage:
        self._check_open()
        want = self._prefix + check_prefix(prefix)
        limit = self._page_size if limit is None else limit
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        # Keys sharing a prefix are contiguous in sorted order: start at the later of the
        # prefix and start_after, stop at the first key without the prefix.
        after = None if start_after is None else self._prefix + start_after
        if after is not None and after >= want:
            lo, inclusive = after, False
        else:
            lo, inclusive = want, True
        out: list[ObjectInfo] = []
        cut = len(self._prefix)
        with self._bucket.lock:
            for full in self._bucket.objects.irange(minimum=lo, inclusive=(inclusive, True)):
                if not full.startswith(want):
                    break
                if len(out) == limit:
                    return ListPage(out, True)
                data, etag, mtime = self._bucket.objects[full]
                out.append(ObjectInfo(full[cut:], len(data), etag, mtime))
        return ListPage(out, False)

    def close(self) -> None:
        self._closed = True
