"""The keyword options of :func:`rocksmash.open`, typed for editors and type checkers.

GENERATED from rocksmash/options.py by ``python scripts/gen_open_options.py``; do not
edit. tests/rocksmash/test_library_options.py fails when this file is out of date.

``rocksmash.open(path, **options: Unpack[OpenOptions])``: mypy and editors check each
keyword's name and type against :class:`OpenOptions`; at run time an unknown name, or a
value that does not parse, raises :class:`~rocksmash.errors.InvalidArgumentError`.
Sizes take an ``int`` (bytes) or a string such as ``"64MiB"``; durations a number of
seconds or a string such as ``"100ms"``.
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = ["OpenOptions", "HELP"]


class OpenOptions(TypedDict, total=False):
    """Every option of :func:`rocksmash.open`, with what it accepts (see
    :class:`rocksmash.Options` for the parsed values)."""

    memtable_size: int | str
    """Memory a memtable may use before it is sealed and flushed: keys, values and about
    200 bytes of Python objects per entry (memtable.ENTRY_OVERHEAD). Half RocksDB's
    default, so that with two sealed ones (below) the memtables' memory stays under
    RocksDB's (two of 64 MiB; decision 0027). Default: ``'32MiB'``."""

    max_immutable_memtables: int
    """Sealed memtables allowed to wait for flush before writers stall (memory bound). Up
    to two are flushed at once, in two worker processes, and installed in order.
    Default: ``2``."""

    block_size: int | str
    """Uncompressed data-block size. 4 KiB matches RocksDB and keeps a point read cheap.
    Default: ``'4KiB'``."""

    compression: str
    """Block compression: lz4 is fast enough that decompression is not the bottleneck.
    Default: ``'lz4'``."""

    bloom_bits_per_key: int
    """Bloom filter bits per key; 10 gives roughly a 1-2% false-positive rate. Default:
    ``10``."""

    sync: bool
    """Default for the ``sync`` argument of writes: fsync the WAL before returning.
    Default: ``False``."""

    block_cache_size: int | str
    """Decoded data blocks kept in memory, each charged its uncompressed bytes and the
    Python objects around them (block.BLOCK_OVERHEAD), so this is the cache's memory, as
    RocksDB's block cache size is. Default: ``'64MiB'``."""

    row_cache_size: Any
    """Part of ``block_cache_size`` given to the row cache (row_cache.py: current values of
    hot keys for point reads), as a size or a share ("10%"); the block cache gets the
    rest, so the total stays ``block_cache_size``. Off by default: under YCSB's
    scrambled zipfian a row cache carved out of the block cache raised block-cache
    misses as much as it saved (docs/decisions/0007-row-cache-off-by-default.md). It
    pays when few keys take most reads. Default: ``0``."""

    target_file_size: int | str
    """Size at which compaction cuts output tables. Small enough that one compaction step
    is a few seconds of Python work. Default: ``'8MiB'``."""

    level_base_size: int | str
    """Target size of the base level (the level L0 compacts into), as in RocksDB's
    max_bytes_for_level_base; deeper levels grow by ``level_multiplier``. Default:
    ``'64MiB'``."""

    level_multiplier: int
    """Target size of the base level (the level L0 compacts into), as in RocksDB's
    max_bytes_for_level_base; deeper levels grow by ``level_multiplier``. Default:
    ``10``."""

    num_levels: int
    """Number of levels including L0. Default: ``7``."""

    l0_compaction_trigger: int
    """L0 files that trigger a compaction, and the count at which writes stall. Default:
    ``4``."""

    l0_stop_writes_trigger: int
    """L0 files that trigger a compaction, and the count at which writes stall. Default:
    ``20``."""

    background_processes: bool
    """Run flush and compaction in worker processes (one each), keeping the GIL free for
    the foreground. False runs them on background threads of this process instead.
    Default: ``True``."""

    env: Any
    """Where local files live: None for the real file system, or a ``rocksmash.env.Env``
    (``rocksmash.mem_env.MemEnv`` keeps them in memory and can simulate a power loss;
    ``rocksmash.fault_env.FaultEnv`` fails chosen operations). With any env but the
    default, jobs run on this process's threads (as with ``background_processes=False``)
    so that every file operation goes through it. An in-memory env: local databases
    only; read_only=True: the real file system only. Default: ``None``."""

    max_key_size: int | str
    """Limits on what a caller may store; larger keys/values raise InvalidArgumentError.
    Default: ``'64KiB'``."""

    max_value_size: int | str
    """Limits on what a caller may store; larger keys/values raise InvalidArgumentError.
    Default: ``'64MiB'``."""

    create_if_missing: bool
    """Create the database if the path holds none; refuse to open an existing one. Default:
    ``True``."""

    error_if_exists: bool
    """Create the database if the path holds none; refuse to open an existing one. Default:
    ``False``."""

    read_only: bool
    """Open a point-in-time view that only reads: no lock taken, nothing written, so any
    number may be open beside the writer (rocksmash/read_only.py). Local databases only.
    Default: ``False``."""

    recovery_processes: int
    """Worker processes replaying WAL segments at open, in parallel (each segment becomes
    its own table). 0: the number of CPUs, at least 2. Each holds one segment in memory.
    Ignored with background_processes=False (then segments replay one at a time).
    Default: ``0``."""

    wal_recovery: str
    """What recovery does with a WAL segment whose last record is complete but fails its
    checksum. No crash of the writing process leaves that (a crash leaves a record cut
    short, which is always dropped), so it may be a synced, acknowledged write that was
    damaged: "strict" refuses to open (CorruptionError); "drop_corrupt_tail" drops it.
    Default: ``'strict'``."""

    stall_timeout: float | str
    """A write blocked longer than this (memtables and L0 full because flush or compaction
    cannot keep up or keeps failing) raises UnavailableError instead of waiting on. A
    healthy engine stalls for well under a second; a minute means something is wrong. It
    also bounds flush() (no flush or compaction done for this long: UnavailableError)
    and close() (a job still running after it has its worker process killed). Default:
    ``'60s'``."""

    retired_object_grace: float | str
    """How long the objects of tables a compaction retired (and the backups of local tables
    that left the version) stay in the bucket before the writer deletes them, so that
    readers of the bucket still on an older mirror can finish their reads. Objects still
    in their grace when the writer closes are deleted at its next open. Default:
    ``'60s'``."""

    reader_refresh_interval: float | str
    """A reader of a tiered database (read_only=True with object_store=; bucket_reader.py)
    checks the bucket for the writer's new mirror and WAL objects this often (two LIST
    requests each time). 0: only when its refresh() is called. Default: ``'1s'``."""

    object_store: Any
    """Where the lower levels live: a cloudtier URL (``s3://bucket/prefix``,
    ``file:///dir``, ``memory://name``) or an open ``cloudtier.ObjectStore``. Default:
    ``None``."""

    object_store_options: dict[str, Any]
    """Keyword options for ``cloudtier.open_store`` (endpoint_url, region, credentials...).
    Default: ``{}``."""

    object_store_retries: int
    """Attempts after the first for a failed object-store request (with backoff, jitter).
    Default: ``5``."""

    local_budget: Any
    """Bytes of tables kept on local disk: a size, or a percentage of all table bytes
    ("10%"). Levels that do not fit go to the object store, deepest first. Default:
    ``'10%'``."""

    cache_size: int | str
    """Local persistent cache of cloud data blocks (the DataCache): a size, or "rest" for
    one local budget: local_budget then covers the local tables, the MetaCache and the
    DataCache, which gets what the other two leave (at least 256 KiB), resized as they
    change. db.stats()["cloud"]["footprint"] shows the split. Default: ``'256MiB'``."""

    cloud_target_file_size: int | str
    """Cloud tables are larger (fewer objects and requests). Their compression: zstd stores
    about 10% less than lz4 but decodes in 3.5 us per 4 KiB block against 2.2
    (measured), and cached cloud blocks are decoded on every block-cache miss, so lz4.
    Default: ``'32MiB'``."""

    cloud_compression: str
    """Cloud tables are larger (fewer objects and requests). Their compression: zstd stores
    about 10% less than lz4 but decodes in 3.5 us per 4 KiB block against 2.2
    (measured), and cached cloud blocks are decoded on every block-cache miss, so lz4.
    Default: ``'lz4'``."""

    cloud_fetch_size: int | str
    """Bytes fetched per read that misses the DataCache: the aligned window of blocks
    around the one asked for. A GET costs about the same latency for 4 KiB or 256 KiB
    (and several ms of client CPU whatever its size), so cold data warms up 64 blocks
    per request (0: one block per request). 256 KiB, not 64: after a full compaction it
    cut GETs per 1,000 reads from 52.6 to 13.4 (decision 0029). Default: ``'256KiB'``."""

    cloud_fetch_threads: int
    """Threads that fetch cloud blocks in the background: a multi_get's misses all at once,
    and a scan's next blocks ahead of it. A miss waits a round trip (about 20-30 ms)
    while the GIL is free, so throughput at a small local footprint comes from many GETs
    in flight (0: no background fetches; reads still run in parallel in the caller's
    threads). Default: ``16``."""

    cloud_stored_blocks: bool
    """The block cache keeps cloud tables' blocks in two forms under one budget
    (block_cache.py, decision 0034): decoded, and, for what the decoded ones leave,
    stored (compressed, about 0.4x a decoded block's charge), so it holds 2.4x as many
    blocks when the cloud data does not fit decoded; every block it holds is a GET
    saved. A stored hit costs a decode (about 6 us). Local tables stay decoded only.
    Default: ``True``."""

    key_cache_size: Any
    """Part of the cloud cache (``cache_size``, or with "rest" what the budget leaves)
    given to the key cache (key_cache.py: rows of cloud tables read from the object
    store, on local disk, so a hot key's read needs neither its block nor a GET), as a
    share ("75%") or a size; the DataCache gets the rest (at least MIN_REST_CACHE). Rows
    keep heat that blocks cannot: under a scrambled zipfian every block mixes a few hot
    keys with many cold ones (decisions 0018 and 0024). Off by default until measured at
    the issue's scale (docs/benchmarks.md, "tiering at a small footprint"). Default:
    ``0``."""

    compaction_aware_cache: bool
    """Compaction writes the hot parts of its cloud output straight into the DataCache (and
    the hot rows into the key cache; it has the bytes), so hot keys stay cached across
    compactions. Default: ``True``."""

    fencing_check_interval: float | str
    """How often a tiered writer checks that no other writer has claimed its prefix (one
    GET of the epoch object; also done at every flush). A fenced writer's writes raise
    FencedError from then on; writes it acknowledged in between may be lost (see
    docs/cloud.md, "Fencing"). One GET a second costs about $1 a month on S3. Default:
    ``'1s'``."""

    wal_shipping: str
    """The extended WAL: how the WAL reaches the object store, so that a writer whose local
    disk is lost reopens from the bucket with every write the mode promises (local
    tables are backed up to the bucket too, except with "off"). "sync": a sync=True
    write returns once its record is in the bucket (one PUT covers every writer
    waiting). "interval": new records are shipped every wal_ship_interval (the loss
    window), one PUT per interval while writes come in. "sealed": a segment is shipped
    when its memtable fills. "off": nothing but the cloud levels is in the bucket (the
    local levels and the WAL are lost with the disk). With "sync" and "interval" the
    shipments also fence (a writer that lost the prefix fails its next one), so the
    fencing_check_interval check is off. See docs/cloud.md, "WAL shipping". Default:
    ``'interval'``."""

    wal_ship_interval: float | str
    """100 ms: SlateDB's default; one PUT per interval costs about $130 a month on S3.
    Default: ``'0.1s'``."""


#: Each option's default (as shown to users) and meaning, for ``help(rocksmash.open)``.
HELP: dict[str, tuple[str, str]] = {
    'memtable_size': ("'32MiB'", "Memory a memtable may use before it is sealed and flushed: keys, values and about 200 bytes of Python objects per entry (memtable.ENTRY_OVERHEAD). Half RocksDB's default, so that with two sealed ones (below) the memtables' memory stays under RocksDB's (two of 64 MiB; decision 0027)."),
    'max_immutable_memtables': ('2', 'Sealed memtables allowed to wait for flush before writers stall (memory bound). Up to two are flushed at once, in two worker processes, and installed in order.'),
    'block_size': ("'4KiB'", 'Uncompressed data-block size. 4 KiB matches RocksDB and keeps a point read cheap.'),
    'compression': ("'lz4'", 'Block compression: lz4 is fast enough that decompression is not the bottleneck.'),
    'bloom_bits_per_key': ('10', 'Bloom filter bits per key; 10 gives roughly a 1-2% false-positive rate.'),
    'sync': ('False', 'Default for the ``sync`` argument of writes: fsync the WAL before returning.'),
    'block_cache_size': ("'64MiB'", "Decoded data blocks kept in memory, each charged its uncompressed bytes and the Python objects around them (block.BLOCK_OVERHEAD), so this is the cache's memory, as RocksDB's block cache size is."),
    'row_cache_size': ('0', 'Part of ``block_cache_size`` given to the row cache (row_cache.py: current values of hot keys for point reads), as a size or a share ("10%"); the block cache gets the rest, so the total stays ``block_cache_size``. Off by default: under YCSB\'s scrambled zipfian a row cache carved out of the block cache raised block-cache misses as much as it saved (docs/decisions/0007-row-cache-off-by-default.md). It pays when few keys take most reads.'),
    'target_file_size': ("'8MiB'", 'Size at which compaction cuts output tables. Small enough that one compaction step is a few seconds of Python work.'),
    'level_base_size': ("'64MiB'", "Target size of the base level (the level L0 compacts into), as in RocksDB's max_bytes_for_level_base; deeper levels grow by ``level_multiplier``."),
    'level_multiplier': ('10', "Target size of the base level (the level L0 compacts into), as in RocksDB's max_bytes_for_level_base; deeper levels grow by ``level_multiplier``."),
    'num_levels': ('7', 'Number of levels including L0.'),
    'l0_compaction_trigger': ('4', 'L0 files that trigger a compaction, and the count at which writes stall.'),
    'l0_stop_writes_trigger': ('20', 'L0 files that trigger a compaction, and the count at which writes stall.'),
    'background_processes': ('True', 'Run flush and compaction in worker processes (one each), keeping the GIL free for the foreground. False runs them on background threads of this process instead.'),
    'env': ('None', "Where local files live: None for the real file system, or a ``rocksmash.env.Env`` (``rocksmash.mem_env.MemEnv`` keeps them in memory and can simulate a power loss; ``rocksmash.fault_env.FaultEnv`` fails chosen operations). With any env but the default, jobs run on this process's threads (as with ``background_processes=False``) so that every file operation goes through it. An in-memory env: local databases only; read_only=True: the real file system only."),
    'max_key_size': ("'64KiB'", 'Limits on what a caller may store; larger keys/values raise InvalidArgumentError.'),
    'max_value_size': ("'64MiB'", 'Limits on what a caller may store; larger keys/values raise InvalidArgumentError.'),
    'create_if_missing': ('True', 'Create the database if the path holds none; refuse to open an existing one.'),
    'error_if_exists': ('False', 'Create the database if the path holds none; refuse to open an existing one.'),
    'read_only': ('False', 'Open a point-in-time view that only reads: no lock taken, nothing written, so any number may be open beside the writer (rocksmash/read_only.py). Local databases only.'),
    'recovery_processes': ('0', 'Worker processes replaying WAL segments at open, in parallel (each segment becomes its own table). 0: the number of CPUs, at least 2. Each holds one segment in memory. Ignored with background_processes=False (then segments replay one at a time).'),
    'wal_recovery': ("'strict'", 'What recovery does with a WAL segment whose last record is complete but fails its checksum. No crash of the writing process leaves that (a crash leaves a record cut short, which is always dropped), so it may be a synced, acknowledged write that was damaged: "strict" refuses to open (CorruptionError); "drop_corrupt_tail" drops it.'),
    'stall_timeout': ("'60s'", 'A write blocked longer than this (memtables and L0 full because flush or compaction cannot keep up or keeps failing) raises UnavailableError instead of waiting on. A healthy engine stalls for well under a second; a minute means something is wrong. It also bounds flush() (no flush or compaction done for this long: UnavailableError) and close() (a job still running after it has its worker process killed).'),
    'retired_object_grace': ("'60s'", 'How long the objects of tables a compaction retired (and the backups of local tables that left the version) stay in the bucket before the writer deletes them, so that readers of the bucket still on an older mirror can finish their reads. Objects still in their grace when the writer closes are deleted at its next open.'),
    'reader_refresh_interval': ("'1s'", "A reader of a tiered database (read_only=True with object_store=; bucket_reader.py) checks the bucket for the writer's new mirror and WAL objects this often (two LIST requests each time). 0: only when its refresh() is called."),
    'object_store': ('None', 'Where the lower levels live: a cloudtier URL (``s3://bucket/prefix``, ``file:///dir``, ``memory://name``) or an open ``cloudtier.ObjectStore``.'),
    'object_store_options': ('{}', 'Keyword options for ``cloudtier.open_store`` (endpoint_url, region, credentials...).'),
    'object_store_retries': ('5', 'Attempts after the first for a failed object-store request (with backoff, jitter).'),
    'local_budget': ("'10%'", 'Bytes of tables kept on local disk: a size, or a percentage of all table bytes ("10%"). Levels that do not fit go to the object store, deepest first.'),
    'cache_size': ("'256MiB'", 'Local persistent cache of cloud data blocks (the DataCache): a size, or "rest" for one local budget: local_budget then covers the local tables, the MetaCache and the DataCache, which gets what the other two leave (at least 256 KiB), resized as they change. db.stats()["cloud"]["footprint"] shows the split.'),
    'cloud_target_file_size': ("'32MiB'", 'Cloud tables are larger (fewer objects and requests). Their compression: zstd stores about 10% less than lz4 but decodes in 3.5 us per 4 KiB block against 2.2 (measured), and cached cloud blocks are decoded on every block-cache miss, so lz4.'),
    'cloud_compression': ("'lz4'", 'Cloud tables are larger (fewer objects and requests). Their compression: zstd stores about 10% less than lz4 but decodes in 3.5 us per 4 KiB block against 2.2 (measured), and cached cloud blocks are decoded on every block-cache miss, so lz4.'),
    'cloud_fetch_size': ("'256KiB'", 'Bytes fetched per read that misses the DataCache: the aligned window of blocks around the one asked for. A GET costs about the same latency for 4 KiB or 256 KiB (and several ms of client CPU whatever its size), so cold data warms up 64 blocks per request (0: one block per request). 256 KiB, not 64: after a full compaction it cut GETs per 1,000 reads from 52.6 to 13.4 (decision 0029).'),
    'cloud_fetch_threads': ('16', "Threads that fetch cloud blocks in the background: a multi_get's misses all at once, and a scan's next blocks ahead of it. A miss waits a round trip (about 20-30 ms) while the GIL is free, so throughput at a small local footprint comes from many GETs in flight (0: no background fetches; reads still run in parallel in the caller's threads)."),
    'cloud_stored_blocks': ('True', "The block cache keeps cloud tables' blocks in two forms under one budget (block_cache.py, decision 0034): decoded, and, for what the decoded ones leave, stored (compressed, about 0.4x a decoded block's charge), so it holds 2.4x as many blocks when the cloud data does not fit decoded; every block it holds is a GET saved. A stored hit costs a decode (about 6 us). Local tables stay decoded only."),
    'key_cache_size': ('0', 'Part of the cloud cache (``cache_size``, or with "rest" what the budget leaves) given to the key cache (key_cache.py: rows of cloud tables read from the object store, on local disk, so a hot key\'s read needs neither its block nor a GET), as a share ("75%") or a size; the DataCache gets the rest (at least MIN_REST_CACHE). Rows keep heat that blocks cannot: under a scrambled zipfian every block mixes a few hot keys with many cold ones (decisions 0018 and 0024). Off by default until measured at the issue\'s scale (docs/benchmarks.md, "tiering at a small footprint").'),
    'compaction_aware_cache': ('True', 'Compaction writes the hot parts of its cloud output straight into the DataCache (and the hot rows into the key cache; it has the bytes), so hot keys stay cached across compactions.'),
    'fencing_check_interval': ("'1s'", 'How often a tiered writer checks that no other writer has claimed its prefix (one GET of the epoch object; also done at every flush). A fenced writer\'s writes raise FencedError from then on; writes it acknowledged in between may be lost (see docs/cloud.md, "Fencing"). One GET a second costs about $1 a month on S3.'),
    'wal_shipping': ("'interval'", 'The extended WAL: how the WAL reaches the object store, so that a writer whose local disk is lost reopens from the bucket with every write the mode promises (local tables are backed up to the bucket too, except with "off"). "sync": a sync=True write returns once its record is in the bucket (one PUT covers every writer waiting). "interval": new records are shipped every wal_ship_interval (the loss window), one PUT per interval while writes come in. "sealed": a segment is shipped when its memtable fills. "off": nothing but the cloud levels is in the bucket (the local levels and the WAL are lost with the disk). With "sync" and "interval" the shipments also fence (a writer that lost the prefix fails its next one), so the fencing_check_interval check is off. See docs/cloud.md, "WAL shipping".'),
    'wal_ship_interval': ("'0.1s'", "100 ms: SlateDB's default; one PUT per interval costs about $130 a month on S3."),
}
