"""Engine options: one frozen dataclass, parsed from keyword arguments.

Every tunable lives here with a line on why it has its default. Sizes accept an ``int``
(bytes) or a string such as ``"64MiB"``, ``"4KiB"``, ``"1.5GB"`` (SI and IEC units).
An unknown option raises :class:`~rocksmash.errors.InvalidArgumentError` naming it.

This class is the one list of options. The comment above each field is also its help
text for users (``help(rocksmash.open)``); after adding or changing an option, run
``make open-options`` to regenerate rocksmash/open_options.py (the typed keywords of
``rocksmash.open``; decision 0011). A test fails until it is current.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from cloudtier.units import size_parser

from .errors import InvalidArgumentError
from .formats import COMPRESSION_CODES

__all__ = ["Options", "parse_size", "parse_duration", "COMPRESSIONS"]

#: Compression names accepted by ``compression`` (their codes on disk: formats.py).
COMPRESSIONS = tuple(COMPRESSION_CODES)

#: Sizes parse as everywhere in the project (cloudtier.units); bad ones raise
#: InvalidArgumentError.
parse_size = size_parser(InvalidArgumentError)


_DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|min)?\s*$")
_DURATION_UNITS = {None: 1.0, "s": 1.0, "ms": 0.001, "min": 60.0}


def parse_duration(value: float | int | str, name: str = "duration") -> float:
    """Seconds from a number or a string like ``"100ms"``, ``"1.5s"``, ``"2min"``."""
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{name}: expected a duration, got {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise InvalidArgumentError(f"{name}: duration must be >= 0, got {value}")
        return float(value)
    if isinstance(value, str):
        m = _DURATION_RE.match(value)
        if m:
            return float(m.group(1)) * _DURATION_UNITS[m.group(2)]
    raise InvalidArgumentError(f"{name}: cannot parse duration {value!r} (try 1.5 or '100ms')")


def _share_or_size(value: Any, whole: int, name: str) -> int:
    """Bytes from a size, or from a percentage string ("10%") of ``whole``."""
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            pct = float(value.strip()[:-1])
        except ValueError:
            pct = -1.0
        if not 0 <= pct <= 100:
            raise InvalidArgumentError(f"{name}: bad percentage {value!r}")
        return int(whole * pct / 100)
    return parse_size(value, name)


#: The smallest DataCache of a "rest" cache_size: room for a few fetch windows of hot
#: blocks even when the local tables fill the budget.
MIN_REST_CACHE = 256 << 10


#: The smallest key cache (when it is on): room for a few hundred rows.
MIN_KEY_CACHE = 64 << 10
#: What a key cache must leave the DataCache of a fixed ``cache_size``: a few blocks.
MIN_SHARED_DATA_CACHE = 16 << 10


def _size(default: int) -> Any:
    return field(default=default, metadata={"size": True})


def _duration(default: float) -> Any:
    return field(default=default, metadata={"duration": True})


@dataclass(frozen=True)
class Options:
    """All engine options. Construct with :meth:`from_kwargs` to get parsing and checks."""

    # Memory a memtable may use before it is sealed and flushed: keys, values and about
    # 200 bytes of Python objects per entry (memtable.ENTRY_OVERHEAD). Half RocksDB's
    # default, so that with two sealed ones (below) the memtables' memory stays under
    # RocksDB's (two of 64 MiB; decision 0027).
    memtable_size: int = _size(32 << 20)
    # Sealed memtables allowed to wait for flush before writers stall (memory bound). Up
    # to two are flushed at once, in two worker processes, and installed in order.
    max_immutable_memtables: int = 2
    # Uncompressed data-block size. 4 KiB matches RocksDB and keeps a point read cheap.
    block_size: int = _size(4 << 10)
    # Block compression: lz4 is fast enough that decompression is not the bottleneck.
    compression: str = "lz4"
    # Bloom filter bits per key; 10 gives roughly a 1-2% false-positive rate.
    bloom_bits_per_key: int = 10
    # Default for the ``sync`` argument of writes: fsync the WAL before returning.
    sync: bool = False
    # Decoded data blocks kept in memory, each charged its uncompressed bytes and the
    # Python objects around them (block.BLOCK_OVERHEAD), so this is the cache's memory,
    # as RocksDB's block cache size is.
    block_cache_size: int = _size(64 << 20)
    # Part of ``block_cache_size`` given to the row cache (row_cache.py: current values of
    # hot keys for point reads), as a size or a share ("10%"); the block cache gets the
    # rest, so the total stays ``block_cache_size``. Off by default: under YCSB's scrambled
    # zipfian a row cache carved out of the block cache raised block-cache misses as much
    # as it saved (docs/decisions/0007-row-cache-off-by-default.md). It pays when few
    # keys take most reads.
    row_cache_size: Any = 0
    # Size at which compaction cuts output tables. Small enough that one compaction step
    # is a few seconds of Python work.
    target_file_size: int = _size(8 << 20)
    # Target size of the base level (the level L0 compacts into), as in RocksDB's
    # max_bytes_for_level_base; deeper levels grow by ``level_multiplier``.
    level_base_size: int = _size(64 << 20)
    level_multiplier: int = 10
    # Number of levels including L0.
    num_levels: int = 7
    # L0 files that trigger a compaction, and the count at which writes stall.
    l0_compaction_trigger: int = 4
    l0_stop_writes_trigger: int = 20
    # Run flush and compaction in worker processes (one each), keeping the GIL free for
    # the foreground. False runs them on background threads of this process instead.
    background_processes: bool = True
    # Where local files live: None for the real file system, or a ``rocksmash.env.Env``
    # (``rocksmash.mem_env.MemEnv`` keeps them in memory and can simulate a power loss;
    # ``rocksmash.fault_env.FaultEnv`` fails chosen operations). With any env but the
    # default, jobs run on this process's threads (as with ``background_processes=False``)
    # so that every file operation goes through it. An in-memory env: local databases
    # only; read_only=True: the real file system only.
    env: Any = None
    # Limits on what a caller may store; larger keys/values raise InvalidArgumentError.
    max_key_size: int = _size(64 << 10)
    max_value_size: int = _size(64 << 20)
    # Create the database if the path holds none; refuse to open an existing one.
    create_if_missing: bool = True
    error_if_exists: bool = False
    # Open a point-in-time view that only reads: no lock taken, nothing written, so any
    # number may be open beside the writer (rocksmash/read_only.py). Local databases only.
    read_only: bool = False
    # Worker processes replaying WAL segments at open, in parallel (each segment becomes
    # its own table). 0: the number of CPUs, at least 2. Each holds one segment in memory.
    # Ignored with background_processes=False (then segments replay one at a time).
    recovery_processes: int = 0
    # What recovery does with a WAL segment whose last record is complete but fails its
    # checksum. No crash of the writing process leaves that (a crash leaves a record cut
    # short, which is always dropped), so it may be a synced, acknowledged write that was
    # damaged: "strict" refuses to open (CorruptionError); "drop_corrupt_tail" drops it.
    wal_recovery: str = "strict"
    # A write blocked longer than this (memtables and L0 full because flush or compaction
    # cannot keep up or keeps failing) raises UnavailableError instead of waiting on. A
    # healthy engine stalls for well under a second; a minute means something is wrong.
    # It also bounds flush() (no flush or compaction done for this long: UnavailableError)
    # and close() (a job still running after it has its worker process killed).
    stall_timeout: float = _duration(60.0)

    # How long the objects of tables a compaction retired (and the backups of local tables
    # that left the version) stay in the bucket before the writer deletes them, so that
    # readers of the bucket still on an older mirror can finish their reads. Objects still
    # in their grace when the writer closes are deleted at its next open.
    retired_object_grace: float = _duration(60.0)
    # A reader of a tiered database (read_only=True with object_store=; bucket_reader.py)
    # checks the bucket for the writer's new mirror and WAL objects this often (two LIST
    # requests each time). 0: only when its refresh() is called.
    reader_refresh_interval: float = _duration(1.0)

    # --- the cloud tier (all ignored without ``object_store``) ---
    # Where the lower levels live: a cloudtier URL (``s3://bucket/prefix``,
    # ``file:///dir``, ``memory://name``) or an open ``cloudtier.ObjectStore``.
    object_store: Any = None
    # Keyword options for ``cloudtier.open_store`` (endpoint_url, region, credentials...).
    object_store_options: dict = field(default_factory=dict)
    # Attempts after the first for a failed object-store request (with backoff, jitter).
    object_store_retries: int = 5
    # Bytes of tables kept on local disk: a size, or a percentage of all table bytes
    # ("10%"). Levels that do not fit go to the object store, deepest first.
    local_budget: Any = "10%"
    # Local persistent cache of cloud data blocks (the DataCache): a size, or "rest" for
    # one local budget: local_budget then covers the local tables, the MetaCache and the
    # DataCache, which gets what the other two leave (at least 256 KiB), resized as they
    # change. db.stats()["cloud"]["footprint"] shows the split.
    cache_size: Any = field(default=256 << 20, metadata={"size": True, "or": ("rest",)})
    # Cloud tables are larger (fewer objects and requests). Their compression: zstd
    # stores about 10% less than lz4 but decodes in 3.5 us per 4 KiB block against 2.2
    # (measured), and cached cloud blocks are decoded on every block-cache miss, so lz4.
    cloud_target_file_size: int = _size(32 << 20)
    cloud_compression: str = "lz4"
    # Bytes fetched per read that misses the DataCache: the aligned window of blocks
    # around the one asked for. A GET costs about the same latency for 4 KiB or 256 KiB
    # (and several ms of client CPU whatever its size), so cold data warms up 64 blocks
    # per request (0: one block per request). 256 KiB, not 64: after a full compaction
    # it cut GETs per 1,000 reads from 52.6 to 13.4 (decision 0029).
    cloud_fetch_size: int = _size(256 << 10)
    # Threads that fetch cloud blocks in the background: a multi_get's misses all at
    # once, and a scan's next blocks ahead of it. A miss waits a round trip (about
    # 20-30 ms) while the GIL is free, so throughput at a small local footprint comes
    # from many GETs in flight (0: no background fetches; reads still run in parallel
    # in the caller's threads).
    cloud_fetch_threads: int = 16
    # The block cache keeps cloud tables' blocks in two forms under one budget
    # (block_cache.py, decision 0034): decoded, and, for what the decoded ones leave,
    # stored (compressed, about 0.4x a decoded block's charge), so it holds 2.4x as many
    # blocks when the cloud data does not fit decoded; every block it holds is a GET
    # saved. A stored hit costs a decode (about 6 us). Local tables stay decoded only.
    cloud_stored_blocks: bool = True
    # Part of the cloud cache (``cache_size``, or with "rest" what the budget leaves)
    # given to the key cache (key_cache.py: rows of cloud tables read from the object
    # store, on local disk, so a hot key's read needs neither its block nor a GET), as a
    # share ("75%") or a size; the DataCache gets the rest (at least MIN_REST_CACHE).
    # Rows keep heat that blocks cannot: under a scrambled zipfian every block mixes a few
    # hot keys with many cold ones (decisions 0018 and 0024). Off by default until
    # measured at the scale (docs/benchmarks.md, "tiering at a small footprint").
    key_cache_size: Any = 0
    # Compaction writes the hot parts of its cloud output straight into the DataCache
    # (and the hot rows into the key cache; it has the bytes), so hot keys stay cached
    # across compactions.
    compaction_aware_cache: bool = True
    # How often a tiered writer checks that no other writer has claimed its prefix (one
    # GET of the epoch object; also done at every flush). A fenced writer's writes raise
    # FencedError from then on; writes it acknowledged in between may be lost (see
    # docs/cloud.md, "Fencing"). One GET a second costs about $1 a month on S3.
    fencing_check_interval: float = _duration(1.0)
    # The extended WAL: how the WAL reaches the object store, so that a writer whose local
    # disk is lost reopens from the bucket with every write the mode promises (local
    # tables are backed up to the bucket too, except with "off"). "sync": a sync=True
    # write returns once its record is in the bucket (one PUT covers every writer
    # waiting). "interval": new records are shipped every wal_ship_interval (the loss
    # window), one PUT per interval while writes come in. "sealed": a segment is shipped
    # when its memtable fills. "off": nothing but the cloud levels is in the bucket (the
    # local levels and the WAL are lost with the disk). With "sync" and "interval" the
    # shipments also fence (a writer that lost the prefix fails its next one), so the
    # fencing_check_interval check is off. See docs/cloud.md, "WAL shipping".
    wal_shipping: str = "interval"
    # 100 ms: SlateDB's default; one PUT per interval costs about $130 a month on S3.
    wal_ship_interval: float = _duration(0.1)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> "Options":
        """Parse and check keyword options; unknown names raise InvalidArgumentError."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for name, value in kwargs.items():
            f = fields.get(name)
            if f is None:
                raise InvalidArgumentError(
                    f"unknown option {name!r}; known options: {', '.join(sorted(fields))}")
            if f.metadata.get("size") and value not in f.metadata.get("or", ()):
                value = parse_size(value, name)
            elif f.metadata.get("duration"):
                value = parse_duration(value, name)
            elif f.type in ("bool", bool):
                if not isinstance(value, bool):
                    raise InvalidArgumentError(f"{name}: expected True or False, got {value!r}")
            elif f.type in ("int", int):
                if isinstance(value, bool) or not isinstance(value, int):
                    raise InvalidArgumentError(f"{name}: expected an int, got {value!r}")
            values[name] = value
        opts = cls(**values)
        opts._check()
        return opts

    def _check(self) -> None:
        if self.compression not in COMPRESSIONS:
            raise InvalidArgumentError(
                f"compression: expected one of {', '.join(COMPRESSIONS)}, got {self.compression!r}")
        positive = ("memtable_size", "block_size", "target_file_size", "level_base_size",
                    "block_cache_size", "max_key_size", "max_value_size")
        for name in positive:
            if getattr(self, name) <= 0 and name != "block_cache_size":
                raise InvalidArgumentError(f"{name}: must be > 0")
        checks = [
            ("max_immutable_memtables", 1, 64),
            ("bloom_bits_per_key", 0, 64),
            ("level_multiplier", 2, 1000),
            ("num_levels", 2, 20),
            ("l0_compaction_trigger", 1, 1000),
            ("l0_stop_writes_trigger", 1, 10000),
            ("recovery_processes", 0, 256),
            ("cloud_fetch_threads", 0, 1024),
        ]
        for name, lo, hi in checks:
            v = getattr(self, name)
            if not lo <= v <= hi:
                raise InvalidArgumentError(f"{name}: must be between {lo} and {hi}, got {v}")
        if self.l0_stop_writes_trigger < self.l0_compaction_trigger:
            raise InvalidArgumentError("l0_stop_writes_trigger must be >= l0_compaction_trigger")
        if self.max_key_size > 1 << 30 or self.max_value_size > 1 << 30:
            raise InvalidArgumentError("max_key_size and max_value_size are limited to 1GiB")
        if self.cloud_compression not in COMPRESSIONS:
            raise InvalidArgumentError(f"cloud_compression: expected one of "
                                       f"{', '.join(COMPRESSIONS)}, got {self.cloud_compression!r}")
        if self.env is not None:
            from .env import Env

            if not isinstance(self.env, Env):
                raise InvalidArgumentError(f"env: expected a rocksmash.env.Env, got "
                                           f"{type(self.env).__name__}")
            if self.read_only:
                raise InvalidArgumentError("env: read_only=True reads the real file system")
            if not self.env.real and self.object_store is not None:
                raise InvalidArgumentError("env: an in-memory env is for local databases")
        if not isinstance(self.object_store_options, dict):
            raise InvalidArgumentError("object_store_options: expected a dict")
        if not 0 <= self.object_store_retries <= 100:
            raise InvalidArgumentError("object_store_retries: must be between 0 and 100")
        if self.wal_recovery not in ("strict", "drop_corrupt_tail"):
            raise InvalidArgumentError(f"wal_recovery: expected 'strict' or "
                                       f"'drop_corrupt_tail', got {self.wal_recovery!r}")
        if not 0.05 <= self.fencing_check_interval <= 3600:
            raise InvalidArgumentError("fencing_check_interval: must be between 0.05 and "
                                       "3600 seconds")
        if self.wal_shipping not in ("off", "sealed", "interval", "sync"):
            raise InvalidArgumentError(f"wal_shipping: expected 'off', 'sealed', 'interval' "
                                       f"or 'sync', got {self.wal_shipping!r}")
        if not 0.001 <= self.wal_ship_interval <= 3600:
            raise InvalidArgumentError("wal_ship_interval: must be between 1ms and 3600 s")
        if self.stall_timeout <= 0:
            raise InvalidArgumentError("stall_timeout: must be > 0")
        self.budget_for(0)  # validates local_budget
        self.row_cache_bytes()  # validates row_cache_size
        self.cloud_cache_split(self.cache_size if self.cache_size != "rest" else MIN_REST_CACHE)

    def row_cache_bytes(self) -> int:
        """The row cache's share of ``block_cache_size``, in bytes (see the option)."""
        n = _share_or_size(self.row_cache_size, self.block_cache_size, "row_cache_size")
        if n > self.block_cache_size:
            raise InvalidArgumentError(f"row_cache_size ({n} bytes) exceeds block_cache_size "
                                       f"({self.block_cache_size}); it is a part of it")
        return n

    def data_cache_bytes(self, total_table_bytes: int, local_table_bytes: int,
                         meta_bytes: int) -> int:
        """The DataCache's capacity: ``cache_size``, or with ``"rest"`` what the local
        budget leaves after the local tables and the MetaCache (at least MIN_REST_CACHE)."""
        if self.cache_size != "rest":
            return int(self.cache_size)
        rest = self.budget_for(total_table_bytes) - local_table_bytes - meta_bytes
        return max(MIN_REST_CACHE, rest)

    def cloud_cache_split(self, cache_bytes: int) -> tuple[int, int]:
        """``(DataCache, key cache)`` capacities out of ``cache_bytes`` of cloud cache
        (``key_cache_size`` of it for the key cache, 0: none). With a fixed ``cache_size``
        the key cache must leave the DataCache MIN_SHARED_DATA_CACHE; with "rest" it is
        cut to leave MIN_REST_CACHE (and gets at least MIN_KEY_CACHE)."""
        n = _share_or_size(self.key_cache_size, cache_bytes, "key_cache_size")
        if not n:
            return cache_bytes, 0
        if self.cache_size != "rest":
            if n > cache_bytes - MIN_SHARED_DATA_CACHE:
                raise InvalidArgumentError(
                    f"key_cache_size ({n} bytes) must leave the DataCache at least "
                    f"{MIN_SHARED_DATA_CACHE} bytes of cache_size ({cache_bytes}); it is a "
                    f"part of it")
            return cache_bytes - n, n
        n = max(MIN_KEY_CACHE, min(n, cache_bytes - MIN_REST_CACHE))
        return max(MIN_REST_CACHE, cache_bytes - n), n

    def budget_for(self, total_table_bytes: int) -> int:
        """The local byte budget when the database holds ``total_table_bytes``."""
        return _share_or_size(self.local_budget, total_table_bytes, "local_budget")
