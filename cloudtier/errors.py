"""The one exception hierarchy of cloudtier.

Every error a store raises on purpose is a :class:`StoreError`. The classes are coarse and
tell the caller what to do, not which library failed underneath; the original exception
(botocore's, an ``OSError``) is kept as ``__cause__`` for debugging.

============================  =========  ================================================
class                         retriable  meaning / what to do
============================  =========  ================================================
``StoreError``                no         root; also raised as-is for failures that will
                                         not go away by retrying (access denied, missing
                                         bucket, bad credentials)
``NotFoundError``             no         the object does not exist
``PreconditionFailedError``   no         a conditional put lost: the object exists
                                         (``if_none_match``) or has another etag
                                         (``if_match``); re-read and decide again
``TransientError``            yes        5xx, throttling, a dropped or refused
                                         connection; retry with backoff
``StoreTimeoutError``         yes        connect or read timeout; retry with backoff. The
                                         request may or may not have taken effect
``InvalidURLError``           no         a bad store URL or an unknown open option; also
                                         a ``ValueError``
``InvalidKeyError``           no         a malformed key (see ``cloudtier.store``); also
                                         a ``ValueError``
``ClosedError``               no         the store was closed
============================  =========  ================================================

A retriable error after a *mutation* (put, delete) is ambiguous: the request may have been
applied before the connection broke. Puts and deletes are idempotent, so retrying them is
safe; conditional puts are not, see :class:`cloudtier.retrying.RetryingStore`.
"""

from __future__ import annotations

__all__ = [
    "StoreError",
    "NotFoundError",
    "PreconditionFailedError",
    "TransientError",
    "StoreTimeoutError",
    "InvalidURLError",
    "InvalidKeyError",
    "ClosedError",
]


class StoreError(Exception):
    """Root of every error cloudtier raises on purpose."""

    #: True when the same call may succeed if retried later.
    retriable: bool = False


class NotFoundError(StoreError):
    """The object (key) does not exist."""


class PreconditionFailedError(StoreError):
    """A conditional put's condition did not hold (``if_none_match`` / ``if_match``)."""


class TransientError(StoreError):
    """A failure that usually goes away: HTTP 5xx, throttling, connection refused/reset."""

    retriable = True


class StoreTimeoutError(TransientError):
    """The store did not answer in time (connect or read timeout)."""


class InvalidURLError(StoreError, ValueError):
    """The store URL is malformed, names an unknown scheme, or comes with an unknown option."""


class InvalidKeyError(StoreError, ValueError):
    """A key is not a well-formed object key (empty, ``..``, control characters, too long)."""


class ClosedError(StoreError):
    """The store (or a wrapper around it) was closed."""
