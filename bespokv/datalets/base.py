"""The datalet protocol: what a single-server store must offer to be served by bespokv.

A datalet is one ordered key-value store holding one replica of one shard. The node calls
it one call at a time (never concurrently), so a datalet needs no locking of its own. A
datalet that may block (disk, fsync, network: ``blocking = True``, the default) is called
on its shard replica's own thread (``worker.py``), so a slow call stalls only that shard;
one whose calls are quick and CPU-only (an in-memory map: ``blocking = False``) is called
on the node's event loop, where a thread would only add its hop. Batch methods exist so a
controlet can pay one call per replicated batch, not per key.

Keys and values are ``bytes``. Keys are non-empty. Keys starting with ``b"\\xff\\xff"`` are
reserved for controlet metadata (replication positions); they are stored like any other
key and must be returned by ``scan``/``export`` like any other key.

Required (abstract) methods::

    get(key) -> bytes | None                    # None when absent
    write(ops) -> None                          # ops: sequence of (key, value | None);
                                                # None deletes. Atomic: after a crash,
                                                # all or none of the batch is visible.
                                                # Applied in order (a later op on the same
                                                # key wins).
    scan(start=None, end=None, *, reverse=False, limit=None)
        -> Iterator[tuple[bytes, bytes]]        # keys in [start, end) in byte order
                                                # (descending with reverse=True)

Provided on top of those (override when the store can do better)::

    put(key, value), delete(key)                # one-op write()
    multi_get(keys) -> list[bytes | None]
    export(chunk) -> Iterator[list[pairs]]      # the full contents in key order, in chunks,
                                                # for bootstrapping a replica. Should be a
                                                # consistent snapshot when the store has
                                                # snapshots; controlets do not rely on it
                                                # (they replay their log over the copy).
                                                # Writes may happen between two chunks: the
                                                # iterator must survive them.
    position() -> int | None                    # where the change feed is now, or None
    changes_since(pos) -> Iterator | None       # (pos, ops) for every write() after pos,
                                                # or None when the store cannot (no feed,
                                                # or pos too old)
    stats() -> dict[str, float]
    close()

A class that has the three required methods works with every controlet, subclass or
not: :func:`ensure_datalet` wraps duck-typed objects in :class:`DataletAdapter`.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

__all__ = ["Op", "Datalet", "DataletAdapter", "ensure_datalet", "RESERVED_PREFIX", "check_key"]

#: One write: ``(key, value)`` puts, ``(key, None)`` deletes.
Op = tuple[bytes, bytes | None]

#: Keys with this prefix belong to controlets, never to users.
RESERVED_PREFIX = b"\xff\xff"


def check_key(key: object) -> bytes:
    """Raise TypeError/ValueError unless ``key`` is non-empty bytes; return it."""
    if type(key) is not bytes:
        if isinstance(key, (bytearray, memoryview)):
            return bytes(key)
        raise TypeError(f"keys must be bytes, not {type(key).__name__}")
    if not key:
        raise ValueError("keys must not be empty")
    return key


class Datalet(abc.ABC):
    """Base class of datalets. Subclasses implement ``get``, ``write`` and ``scan``."""

    #: Short name shown in status displays.
    kind: str = "custom"
    #: True when data survives a restart of the node process.
    persistent: bool = False
    #: True when a call may block (disk, fsync, network): the node then runs the calls on
    #: a thread of the shard's own. False only for quick, CPU-only stores.
    blocking: bool = True

    @abc.abstractmethod
    def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, or None."""

    @abc.abstractmethod
    def write(self, ops: Sequence[Op]) -> None:
        """Apply ``ops`` atomically and in order; a ``None`` value deletes."""

    @abc.abstractmethod
    def scan(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Pairs with ``start <= key < end`` in key order (descending when ``reverse``)."""

    def put(self, key: bytes, value: bytes) -> None:
        self.write([(key, value)])

    def delete(self, key: bytes) -> None:
        self.write([(key, None)])

    def multi_get(self, keys: Sequence[bytes]) -> list[bytes | None]:
        get = self.get
        return [get(k) for k in keys]

    def export(self, chunk: int = 512) -> Iterator[list[tuple[bytes, bytes]]]:
        """The whole contents, in key order, ``chunk`` pairs at a time. This default pages
        with a fresh ``scan`` per chunk, so it needs nothing of the store's iterators."""
        lo: bytes | None = None
        while True:
            page = list(self.scan(lo, None, limit=chunk))
            if page:
                yield page
            if len(page) < chunk:
                return
            lo = page[-1][0] + b"\x00"

    def position(self) -> int | None:
        """The change feed's current position, or None when the store keeps no feed."""
        return None

    def changes_since(self, position: int) -> Iterator[tuple[int, list[Op]]] | None:
        """Every write() after ``position`` as ``(position_after, ops)``, or None if unknown."""
        return None

    def clear(self) -> None:
        """Delete every key (used before a full copy is loaded into a replica)."""
        while True:
            keys = [k for k, _ in self.scan(limit=1024)]
            if not keys:
                return
            self.write([(k, None) for k in keys])

    def stats(self) -> dict[str, float]:
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; the datalet is not used afterwards."""


class DataletAdapter(Datalet):
    """Wraps a duck-typed object that has ``get``, ``write`` and ``scan``.

    Optional methods of the wrapped object are used when present, the defaults otherwise.
    """

    def __init__(self, inner: Any) -> None:
        missing = [m for m in ("get", "write", "scan") if not callable(getattr(inner, m, None))]
        if missing:
            raise TypeError(f"{type(inner).__name__} is not a datalet: missing {', '.join(missing)}")
        self.inner = inner
        self.kind = getattr(inner, "kind", type(inner).__name__)
        self.persistent = bool(getattr(inner, "persistent", False))
        self.blocking = bool(getattr(inner, "blocking", True))

    def get(self, key: bytes) -> bytes | None:
        return self.inner.get(key)

    def write(self, ops: Sequence[Op]) -> None:
        self.inner.write(ops)

    def scan(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        return _limited(self.inner.scan(start, end, reverse=reverse, limit=limit), limit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def multi_get(self, keys: Sequence[bytes]) -> list[bytes | None]:
        f = getattr(self.inner, "multi_get", None)
        return list(f(keys)) if f else super().multi_get(keys)

    def export(self, chunk: int = 512) -> Iterator[list[tuple[bytes, bytes]]]:
        f = getattr(self.inner, "export", None)
        return f(chunk) if f else super().export(chunk)

    def position(self) -> int | None:
        f = getattr(self.inner, "position", None)
        return f() if f else None

    def changes_since(self, position: int) -> Iterator[tuple[int, list[Op]]] | None:
        f = getattr(self.inner, "changes_since", None)
        return f(position) if f else None

    def clear(self) -> None:
        f = getattr(self.inner, "clear", None)
        f() if f else super().clear()

    def stats(self) -> dict[str, float]:
        f = getattr(self.inner, "stats", None)
        return dict(f()) if f else {}

    def close(self) -> None:
        f = getattr(self.inner, "close", None)
        if f:
            f()


def _limited(it: Iterable[tuple[bytes, bytes]], limit: int | None) -> Iterator[tuple[bytes, bytes]]:
    if limit is None:
        yield from it
        return
    if limit <= 0:
        return
    for n, kv in enumerate(it, 1):
        yield kv
        if n >= limit:
            return


def ensure_datalet(obj: Any) -> Datalet:
    """Return ``obj`` if it is a :class:`Datalet`, else wrap it (TypeError if it cannot be)."""
    return obj if isinstance(obj, Datalet) else DataletAdapter(obj)
