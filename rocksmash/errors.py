"""The one exception hierarchy of rocksmash.

Every error the engine raises on purpose is a subclass of :class:`Error`. The classes are
coarse on purpose (as in SlateDB): each tells the caller what to do, not where it broke.

==========================  =========  ==================================================
class                       retriable  meaning / what to do
==========================  =========  ==================================================
``Error``                   no         root; catch this to catch everything below
``InvalidArgumentError``    no         your input is wrong (bad option, oversized key);
                                       also a ``ValueError``
``InvalidTypeError``        no         a key or value is not bytes-like (``str``
                                       included); also a ``TypeError`` (and an
                                       ``InvalidArgumentError``)
``CorruptionError``         no         stored data failed a checksum or is malformed;
                                       the engine refuses to serve it
``LockedError``             no         another process has this database open
``ClosedError``             no         the database (or snapshot) was closed
``UnavailableError``        yes        a dependency (the object store) failed after
                                       retries; local data stays usable, retry later
``FencedError``             no         another writer took over this database prefix
``ObjectStoreError``        no         the object store refused for good (no such
                                       bucket, access denied, a bad request): fix the
                                       configuration; local data stays readable
``NewerFormatError``        no         a file or object was written by a newer rocksmash
                                       (its format version is unknown here): upgrade
``WorkerDied``              yes        a flush, compaction or recovery worker process
                                       exited before answering (killed, out of
                                       memory); the engine still has the data: retry
==========================  =========  ==================================================

Missing keys are not errors: ``get`` returns ``None``; ``db[key]`` raises ``KeyError``
like a dict. bespokv maps these classes to gRPC status codes (see ``bespokv``).
"""

from __future__ import annotations

__all__ = [
    "Error",
    "InvalidArgumentError",
    "InvalidTypeError",
    "CorruptionError",
    "LockedError",
    "ClosedError",
    "UnavailableError",
    "FencedError",
    "ObjectStoreError",
    "NewerFormatError",
    "WorkerDied",
]


class Error(Exception):
    """Root of every error rocksmash raises on purpose."""

    #: True when the same call may succeed if retried later.
    retriable: bool = False


class InvalidArgumentError(Error, ValueError):
    """The caller passed something invalid: an unknown option, a bad size, an oversized key."""


class InvalidTypeError(InvalidArgumentError, TypeError):
    """A key or value was not bytes-like (``bytes``, ``bytearray``, ``memoryview``)."""


class CorruptionError(Error):
    """Stored data (table, WAL, manifest, cache) failed its checksum or is malformed."""


class LockedError(Error):
    """Another process holds the database's lock file."""


class ClosedError(Error):
    """The database, snapshot or iterator was already closed."""


class UnavailableError(Error):
    """A dependency (such as the object store) failed after retries. Retry later."""

    retriable = True


class FencedError(Error):
    """Another writer claimed this database's object-store prefix with a newer epoch."""


class ObjectStoreError(Error):
    """The object store refused a request for a reason retrying will not fix (no such
    bucket, access denied, an invalid bucket name, a malformed request)."""


class NewerFormatError(Error):
    """A file or object carries a format version newer than this rocksmash understands."""


class WorkerDied(Error):
    """A worker process (flush, compaction, recovery) exited before answering: killed or
    out of memory. Its job's inputs are untouched, so the same call may be retried."""

    retriable = True
