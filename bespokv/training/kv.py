"""The small KV interface the training apps run on, and its adapters.

Everything in ``bespokv.training`` talks to a :class:`KV`: ``get``, ``put``, ``delete``,
``cas`` (compare-and-set on one key) and ``scan_prefix``. Two real stores satisfy it:

* an open ``rocksmash`` DB (:class:`RocksmashKV`): embedded, one process;
* a ``bespokv`` :class:`~bespokv.client.Client` (:class:`BespokvKV`): a service that every
  rank of a multi-process job can reach. Its ``cas`` is the service's, so the cluster must
  run a master-slave mode (``ms-sc``/``ms-ec``); the active-active modes have no CAS.

and :class:`MemoryKV` for unit tests. :func:`as_kv` wraps whichever it is given.

Contracts: keys and values are ``bytes``; ``cas(key, expected, new)`` atomically sets
``key`` to ``new`` (``None``: delete) if its current value is ``expected`` (``None``:
absent) and returns whether it did. ``durable=False`` on ``put``/``cas`` lets a store
acknowledge before the write reaches stable storage, provided a later durable write makes
every earlier one durable too (rocksmash's WAL: a synced write syncs all before it). The
saver's per-chunk writes use it; the commit and every GC step are durable.

Every atomic step the checkpoint store takes is one
``cas`` on one key, so a sharded service (atomic per shard only) gives the same guarantees
as the embedded engine.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

from bespokv.errors import InvalidArgumentError

__all__ = ["KV", "MemoryKV", "RocksmashKV", "BespokvKV", "as_kv", "prefix_end"]


@runtime_checkable
class KV(Protocol):
    """What the checkpoint store and the tensor table need from a key-value store."""

    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes, *, durable: bool = True) -> None: ...

    def delete(self, key: bytes) -> None: ...

    def cas(self, key: bytes, expected: bytes | None, new: bytes | None, *, durable: bool = True) -> bool: ...

    def scan_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]: ...


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key that starts with ``prefix`` (None: no bound)."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)


class MemoryKV:
    """A dict with a lock: the KV of unit tests (and a model of the contract)."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._lock = threading.Lock()

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def put(self, key: bytes, value: bytes, *, durable: bool = True) -> None:
        with self._lock:
            self._data[bytes(key)] = bytes(value)

    def delete(self, key: bytes) -> None:
        with self._lock:
            self._data.pop(key, None)

    def cas(self, key: bytes, expected: bytes | None, new: bytes | None, *, durable: bool = True) -> bool:
        with self._lock:
            if self._data.get(key) != expected:
                return False
            if new is None:
                self._data.pop(key, None)
            else:
                self._data[bytes(key)] = bytes(new)
            return True

    def scan_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        with self._lock:
            items = sorted((k, v) for k, v in self._data.items() if k.startswith(prefix))
        return iter(items)


class RocksmashKV:
    """An open ``rocksmash`` DB as a :class:`KV`.

    rocksmash has no compare-and-set, and needs none here: a DB is open in one process only
    (a second opener gets ``LockedError``), so a lock held around ``get`` + ``put`` makes
    ``cas`` atomic against every other writer *through this adapter*. Do not write the
    ``prefix`` keys through the DB directly while an adapter is in use. Durable writes are
    synced (with ``sync=True``, the default) so a committed checkpoint survives a machine
    crash; ``durable=False`` writes go to the WAL unsynced and are synced by the next
    durable one.
    """

    def __init__(self, db: Any, *, sync: bool = True) -> None:
        self.db = db
        self._sync = sync
        self._lock = threading.Lock()

    def get(self, key: bytes) -> bytes | None:
        return self.db.get(key)

    def put(self, key: bytes, value: bytes, *, durable: bool = True) -> None:
        with self._lock:
            self.db.put(key, value, sync=self._sync and durable)

    def delete(self, key: bytes) -> None:
        with self._lock:
            self.db.delete(key, sync=self._sync)

    def cas(self, key: bytes, expected: bytes | None, new: bytes | None, *, durable: bool = True) -> bool:
        sync = self._sync and durable
        with self._lock:
            if self.db.get(key) != expected:
                return False
            if new is None:
                self.db.delete(key, sync=sync)
            else:
                self.db.put(key, new, sync=sync)
            return True

    def scan_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        # Materialized: callers write while they walk, and a DB iterator holds a version.
        return iter(list(self.db.scan(prefix, prefix_end(prefix))))


class BespokvKV:
    """A ``bespokv`` :class:`~bespokv.client.Client` as a :class:`KV` (CAS: ms-* modes)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def get(self, key: bytes) -> bytes | None:
        return self.client.get(key)

    def put(self, key: bytes, value: bytes, *, durable: bool = True) -> None:
        self.client.put(key, value)  # acknowledged by the replication mode's rule either way

    def delete(self, key: bytes) -> None:
        self.client.delete(key)

    def cas(self, key: bytes, expected: bytes | None, new: bytes | None, *, durable: bool = True) -> bool:
        return bool(self.client.cas(key, expected, new).succeeded)

    def scan_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return iter(list(self.client.scan(prefix, prefix_end(prefix))))


def as_kv(store: Any) -> KV:
    """Wrap a rocksmash DB or a bespokv Client; return a :class:`KV` unchanged.

    Raises ``InvalidArgumentError`` for anything else.
    """
    if isinstance(store, (MemoryKV, RocksmashKV, BespokvKV)):
        return store
    from bespokv.client import Client
    from rocksmash.db import DB

    if isinstance(store, DB):
        return RocksmashKV(store)
    if isinstance(store, Client):
        return BespokvKV(store)
    if isinstance(store, KV):
        return store
    raise InvalidArgumentError(
        f"expected a rocksmash DB, a bespokv Client or a KV, not {type(store).__name__}"
    )
