"""RetryingStore: retry retriable errors with exponential backoff and full jitter.

Backoff: before retry ``n`` (1-based) sleep ``uniform(0, min(max_delay_s, base_delay_s *
2**(n-1)))`` ("full jitter", which spreads a crowd of clients that failed together better
than equal or decorrelated jitter). A call gives up after ``max_attempts`` attempts or
when the next sleep would cross ``deadline_s`` (measured from the call's start), and then
raises the last error, with a note saying how many attempts were made. Non-retriable
errors (``NotFoundError``, ``PreconditionFailedError``, access denied, ...) are raised at
once. Each list page is retried on its own, so a long listing survives a flaky page.

Conditional puts and ambiguity
------------------------------
A retriable error after a put leaves it unknown whether the put happened: the request may
have been applied and only the response lost. Unconditional puts and deletes are
idempotent, so retrying them is harmless. A conditional put is not: if the first attempt
of ``put(k, d, if_none_match=True)`` was applied, the retry finds the object there and
fails with ``PreconditionFailedError``, reporting as lost a write that in fact won (the
same holds for ``if_match``: the first attempt changed the etag the retry tests).

So after an ambiguous attempt, a ``PreconditionFailedError`` on a retry is checked: the
store reads the object back, and if its content is exactly ``d``, the earlier attempt is
taken to have succeeded and its etag is returned. This is sound when no other writer
ever puts the same bytes at that key, so give conditional-put payloads something unique
(a writer id, an epoch, a nonce), which fencing records have anyway. Otherwise the
``PreconditionFailedError`` stands. If the read-back itself fails, that counts as one
more failed attempt of the put (the outcome is still unknown), and when the attempts run
out the caller gets a retriable error, never a wrong verdict.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from cloudtier.errors import NotFoundError, PreconditionFailedError, StoreError
from cloudtier.store import BytesLike, ListPage, ObjectInfo, ObjectStore, StoreWrapper

__all__ = ["RetryPolicy", "RetryingStore"]

_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How hard :class:`RetryingStore` tries.

    The defaults ride out a few seconds of S3 throttling or a restarting local server
    without stalling a caller for long.
    """

    max_attempts: int = 6  #: attempts per call, the first one included
    base_delay_s: float = 0.05  #: cap of the first backoff; doubles per retry
    max_delay_s: float = 2.0  #: no single backoff exceeds this
    deadline_s: float | None = 30.0  #: no retry starts later than this after the call

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ValueError("backoff delays must be >= 0")
        if self.deadline_s is not None and self.deadline_s <= 0:
            raise ValueError(f"deadline_s must be > 0 or None, got {self.deadline_s}")

    def backoff_cap(self, retry: int) -> float:
        """The upper bound of the sleep before retry number ``retry`` (1-based)."""
        return min(self.max_delay_s, self.base_delay_s * 2.0 ** (retry - 1))


class RetryingStore(StoreWrapper):
    """Retries ``inner``'s retriable errors per :class:`RetryPolicy`; see the module docstring.

    ``sleep``, ``clock`` and ``rng`` are injectable so tests run without waiting. The
    random generator is shared by threads under a lock.
    """

    def __init__(
        self,
        inner: ObjectStore,
        policy: RetryPolicy | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(inner)
        self.policy = policy or RetryPolicy()
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()
        self._rng_lock = threading.Lock()

    def put(
        self,
        key: str,
        data: BytesLike,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
    ) -> str:
        if not if_none_match and if_match is None:
            return self._retry(lambda: self.inner.put(key, data))
        ambiguous = False

        def attempt() -> str:
            nonlocal ambiguous
            try:
                return self.inner.put(key, data, if_none_match=if_none_match, if_match=if_match)
            except PreconditionFailedError:
                if ambiguous:
                    etag = self._own_write_etag(key, data)
                    if etag is not None:
                        return etag
                raise
            except StoreError as e:
                if e.retriable:
                    ambiguous = True  # this attempt may have been applied
                raise

        return self._retry(attempt)

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        return self._retry(lambda: self.inner.get(key, start, end))

    def head(self, key: str) -> ObjectInfo:
        return self._retry(lambda: self.inner.head(key))

    def delete(self, key: str) -> None:
        self._retry(lambda: self.inner.delete(key))

    def list_page(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> ListPage:
        return self._retry(
            lambda: self.inner.list_page(prefix, start_after=start_after, limit=limit)
        )

    def _own_write_etag(self, key: str, data: BytesLike) -> str | None:
        """The etag of ``key`` if it holds exactly ``data`` (our earlier attempt), else None."""
        try:
            info = self._retry(lambda: self.inner.head(key))
            if info.size != len(data):
                return None
            if self._retry(lambda: self.inner.get(key)) != data:
                return None
        except NotFoundError:
            return None
        # Content-hash etags make info.etag the etag of `data` even if the object was
        # rewritten with the same bytes between the HEAD and the GET.
        return info.etag

    def _retry(self, call: Callable[[], _T]) -> _T:
        policy = self.policy
        started = self._clock()
        attempt = 1
        while True:
            try:
                return call()
            except StoreError as e:
                if not e.retriable:
                    raise
                if attempt >= policy.max_attempts:
                    e.add_note(f"cloudtier: gave up after {attempt} attempts")
                    raise
                with self._rng_lock:
                    delay = self._rng.uniform(0.0, policy.backoff_cap(attempt))
                elapsed = self._clock() - started
                if policy.deadline_s is not None and elapsed + delay > policy.deadline_s:
                    e.add_note(
                        f"cloudtier: gave up after {attempt} attempts and {elapsed:.3f}s "
                        f"(deadline {policy.deadline_s}s)"
                    )
                    raise
                self._sleep(delay)
                attempt += 1
