"""The one interface every benchmarked system implements.

A runner adapts one system (an embedded engine, a server reached over the network) to
the operations of YCSB. The driver owns the calling pattern:

1. ``open()`` once, from the main thread.
2. ``load_batch(keys, values)`` repeatedly (load phase), then ``settle(mode)``.
3. ``read``/``update``/``insert``/``scan``/``rmw`` from N client threads at once (sync
   runners must be thread-safe) or from N asyncio tasks on one event loop (async
   runners), while the driver times each call.
4. ``stats()`` between phases, ``close()`` once at the end.

Keys and values are ``bytes``. ``read`` returns None for a missing key; the driver counts
those. ``scan(start, count)`` reads up to ``count`` records in key order from the first
key ``>= start`` and returns how many it read (it must touch every value, so a lazy
iterator cannot make it look free).

To add a system (bespokv over gRPC, Redis over RESP, ...): subclass :class:`Runner` or
:class:`AsyncRunner` in ``bench/runners/<system>.py`` and add one line to
``bench.runners.REGISTRY``. A server it needs is started in ``open()`` (as a child
process, so its memory counts toward the trial) and stopped in ``close()``.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

__all__ = [
    "ObjectStoreTarget",
    "RunnerConfig",
    "RunnerStats",
    "Runner",
    "AsyncRunner",
    "SETTLE_MODES",
]

#: What ``settle`` may be asked to do after the load: nothing, flush memtables to
#: tables, or flush and compact everything (the steadiest state to measure reads in).
SETTLE_MODES = ("none", "flush", "compact")


@dataclass(frozen=True)
class ObjectStoreTarget:
    """Where a tiered system keeps its cold data: an S3 bucket and key prefix.

    ``endpoint_url`` is None for AWS itself; for moto or MinIO it is ``http://host:port``
    (through the delay proxy when the benchmark emulates a network). ``latency_ms`` is a
    delay the system's own object-store client adds to every request (the ``store``
    latency model, :data:`bench.environment.LATENCY_MODELS`; 0 with the proxy's).
    """

    bucket: str
    prefix: str
    endpoint_url: str | None = None
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: str | None = None
    latency_ms: float = 0.0

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    @property
    def allow_http(self) -> bool:
        return bool(self.endpoint_url and self.endpoint_url.startswith("http://"))

    def store_options(self, latency: bool = True) -> dict[str, Any]:
        """cloudtier's S3 options for this target (``cloudtier.open_store(url, **these)``);
        with ``latency`` and a ``latency_ms``, the per-request delay as cloudtier's fault
        injector (``faults={"latency_s": ...}``: a sleep with the GIL free, so concurrent
        requests overlap)."""
        opts: dict[str, Any] = {"region": self.region}
        if self.endpoint_url:
            opts["endpoint_url"] = self.endpoint_url
        if self.access_key_id:
            opts["access_key"] = self.access_key_id
            opts["secret_key"] = self.secret_access_key or ""
        if latency and self.latency_ms:
            opts["faults"] = {"latency_s": self.latency_ms / 1000.0}
        return opts


@dataclass(frozen=True)
class RunnerConfig:
    """What a runner is told when it is created.

    ``data_dir`` is an empty directory the runner owns for the trial (the driver measures
    its size as "local bytes on disk"). ``cache_size`` (bytes) and ``local_budget`` apply
    to every system that has such a knob; ``local_budget_bytes`` is the budget resolved
    against the raw data size (records x (key + value)) for systems that only take
    bytes. ``options`` are system-specific extras from ``--opt SYSTEM.KEY=VALUE``,
    passed through as given.
    """

    data_dir: Path
    object_store: ObjectStoreTarget | None = None
    local_budget: str | None = None
    local_budget_bytes: int | None = None
    cache_size: int | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["data_dir"] = str(self.data_dir)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunnerConfig":
        store = d.get("object_store")
        return cls(
            data_dir=Path(d["data_dir"]),
            object_store=ObjectStoreTarget(**store) if store else None,
            local_budget=d.get("local_budget"),
            local_budget_bytes=d.get("local_budget_bytes"),
            cache_size=d.get("cache_size"),
            options=dict(d.get("options") or {}),
        )


@dataclass
class RunnerStats:
    """A runner's view of itself at one moment; every field is optional.

    ``object_store`` counts requests and bytes the system sent to its object store,
    with keys from ``get``, ``put``, ``list``, ``head``, ``delete``, ``other``,
    ``bytes_read``, ``bytes_written`` (cumulative since open). ``caches`` maps a cache
    name to cumulative ``(hits, misses)``. ``raw`` is the system's own statistics,
    JSON-safe, kept in the results for whoever needs more.
    """

    object_store: dict[str, int] | None = None
    caches: dict[str, tuple[int, int]] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)


class _Common:
    #: Name used on the command line and in reports.
    name: ClassVar[str] = "?"
    #: True for runners whose operations are coroutines (driven by asyncio tasks).
    is_async: ClassVar[bool] = False
    #: True if the system can keep data in an object store (``--network s3``).
    uses_object_store: ClassVar[bool] = False
    #: True if the system talks to its object store through cloudtier, so the ``store``
    #: latency model can add its delay there (``ObjectStoreTarget.latency_ms``); other
    #: systems go through the delay proxy whatever the model.
    takes_store_latency: ClassVar[bool] = False

    def __init__(self, config: RunnerConfig) -> None:
        self.config = config

    def stats(self) -> RunnerStats:
        """Current statistics (cheap; called between phases only)."""
        return RunnerStats()

    def describe(self) -> dict[str, Any]:
        """The effective configuration and version, for the report (JSON-safe)."""
        return {}

    # What the tiering experiment (bench.tiering) reads from a system's statistics. Each
    # runner knows its own system's keys; the experiment never guesses from them.

    def tier_counters(self, stats: RunnerStats) -> dict[str, int | None]:
        """Cumulative read-path counters from ``stats``: ``gets`` (object-store GETs that
        reached the network), ``bc_hits``/``bc_misses`` (in-memory block cache),
        ``dc_hits``/``dc_misses`` (on-disk cache of object-store data) and ``fills``
        (blocks a compaction wrote into that cache); None where the system has no such
        thing."""
        return {"gets": (stats.object_store or {}).get("get", 0), "dc_hits": None,
                "dc_misses": None, "bc_hits": None, "bc_misses": None, "fills": None}

    def tier_shape(self, stats: RunnerStats) -> dict[str, Any]:
        """Where the system keeps its bytes (tables local and in the object store, its
        metadata and caches), from ``stats``; JSON-safe, empty if it cannot tell."""
        return {}


class Runner(_Common, ABC):
    """A system driven by client threads. Operations must be thread-safe."""

    @abstractmethod
    def open(self) -> None:
        """Create or open the database in ``config.data_dir`` (and the object store)."""

    @abstractmethod
    def load_batch(self, keys: list[bytes], values: list[bytes]) -> None:
        """Insert many records at once (a write batch where the system has one)."""

    @abstractmethod
    def read(self, key: bytes) -> bytes | None:
        """The value of ``key``, or None."""

    @abstractmethod
    def update(self, key: bytes, value: bytes) -> None:
        """Overwrite the value of an existing key."""

    def insert(self, key: bytes, value: bytes) -> None:
        """Add a new key (defaults to :meth:`update`: a put)."""
        self.update(key, value)

    @abstractmethod
    def scan(self, start: bytes, count: int) -> int:
        """Read up to ``count`` records from the first key >= ``start``; return how many."""

    def rmw(self, key: bytes, value: bytes) -> None:
        """Read ``key`` then write ``value`` to it (YCSB's read-modify-write)."""
        self.read(key)
        self.update(key, value)

    def settle(self, mode: str) -> str:
        """Bring the store to a steady state after the load; return what was done."""
        return "nothing (not supported)"

    @abstractmethod
    def close(self) -> None:
        """Release everything; after this the data directory may be measured or deleted."""


class AsyncRunner(_Common, ABC):
    """A system with an asyncio API, driven by N tasks on one event loop."""

    is_async: ClassVar[bool] = True

    @abstractmethod
    async def open(self) -> None: ...

    @abstractmethod
    async def load_batch(self, keys: list[bytes], values: list[bytes]) -> None: ...

    @abstractmethod
    async def read(self, key: bytes) -> bytes | None: ...

    @abstractmethod
    async def update(self, key: bytes, value: bytes) -> None: ...

    async def insert(self, key: bytes, value: bytes) -> None:
        await self.update(key, value)

    @abstractmethod
    async def scan(self, start: bytes, count: int) -> int: ...

    async def rmw(self, key: bytes, value: bytes) -> None:
        await self.read(key)
        await self.update(key, value)

    async def settle(self, mode: str) -> str:
        return "nothing (not supported)"

    @abstractmethod
    async def close(self) -> None: ...
