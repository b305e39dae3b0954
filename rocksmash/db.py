"""The database: write path, read path, background flush and compaction, recovery.

Locks (always taken in this order, never the reverse):

* ``_version_lock``: serializes version changes (manifest appends). Held by the
  background threads and ``compact_range`` while they compute and log an edit.
* ``_lock`` (the write lock): serializes writers and guards ``_mem``, ``_imm``,
  ``_seq``, snapshots and the flags below. Held briefly; never across I/O other than
  the WAL append and the rare segment switch.
* ``_sync_lock``: group commit. A ``sync=True`` writer appends under ``_lock``, then
  fsyncs under ``_sync_lock``; one fsync covers every writer waiting behind it.

Readers take no lock for point reads. They read ``_mem``, then ``_imm``, then ``_version``,
and writers publish in the reverse order (a sealed memtable joins ``_imm`` before
``_mem`` is replaced; a flushed table joins ``_version`` before its memtable leaves
``_imm``), so a reader always finds every write at least once.
"""

from __future__ import annotations

import collections.abc
import marshal
import os
import threading
import time
import weakref
from bisect import bisect_left
from typing import Any, Callable, Iterator

from . import cache_fill, filenames, key_cache
from .block_cache import BlockCache
from .checkpoint import make_checkpoint
from .bloom import key_hash, split_hash
from .cloud import CloudTier
from .compaction import (MANUAL_STEP_FILES, Compaction, first_cloud_level, level_targets,
                         manual_left, manual_step, pick_compaction)
from .env import POSIX, PosixEnv, os_error, path_error
from .errors import (ClosedError, CorruptionError, Error, FencedError, InvalidArgumentError,
                     InvalidTypeError, UnavailableError)
from .iterator import KEY, VALUE, DBIterator
from .jobs import JOBS
from .keys import BytesLike, as_bound, as_bytes
from .manifest import Manifest
from .memtable import MISSING, Memtable
from .merge import Chunk, merge_forward, merge_reverse
from .options import Options
from .publication import Publication
from .range_del import RangeEnd, covering_seq, filter_chunk, union, visible
from .read_ahead import fetch_for_keys
from .recovery import recover, remove_unreferenced
from .restore import Progress
from .row_cache import RowCache
from .table import Table, scan_tables
from .table_builder import TableInfo
from .version import CLOUD, LOCAL, FileMeta, Version, VersionEdit
from .wal import WalWriter
from .wal_shipping import WalShipper
from .worker import Handoff, WorkerPool, shared_pool
from .write_batch import WriteBatch, encode_batch, ops_within

__all__ = ["DB", "Snapshot", "DBIterator"]

#: A manifest larger than this is rewritten as a fresh snapshot.
_MANIFEST_ROLL_SIZE = 16 << 20
#: How long close waits for the last WAL shipment (the local WAL keeps it anyway).
_SHIP_AT_CLOSE_TIMEOUT = 10.0
#: A sealed memtable up to this charged size is flushed from its contents, sent to the
#: worker as one marshalled frame (whose length is a u32); a larger one by replaying its
#: WAL segment, as recovery does (the same bytes either way; decision 0026).
_FLUSH_BY_VALUE_LIMIT = 1 << 30
#: Flush threads at most (each runs its memtable's job in its own worker process).
_FLUSH_THREADS = 2


def _hide_covered(sources: list[Iterator[Chunk]], tombs: list[list], seq: int
                  ) -> list[Iterator[Chunk]]:
    """Each source without the keys that a tombstone (visible at ``seq``) of a newer
    source covers: such a tombstone hides every version in older sources (range_del.py).
    Inside its own source, a tombstone is applied by the source's scan."""
    out: list[Iterator[Chunk]] = []
    newer: list = []
    for src, own in zip(sources, tombs):
        out.append(_without(src, *union(newer)) if newer else src)
        newer = newer + visible(own, seq)
    return out


def _without(src: Iterator[Chunk], starts: list[bytes], ends: list[bytes]
             ) -> Iterator[Chunk]:
    for keys, values in src:
        yield filter_chunk(keys, values, starts, ends)


def _prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: none)."""
    p = prefix.rstrip(b"\xff")
    return p[:-1] + bytes((p[-1] + 1,)) if p else None


#: Every open database of this process, so a ``fork`` child can disable them all.
_open_dbs: "weakref.WeakSet[DB]" = weakref.WeakSet()


def _disable_in_child() -> None:
    for db in list(_open_dbs):
        db._after_fork_in_child()
    _open_dbs.clear()


os.register_at_fork(after_in_child=_disable_in_child)


class Snapshot:
    """A consistent, read-only view of the database as of one sequence number.

    Use as a context manager or call :meth:`close`; an open snapshot keeps the versions
    it can see from being compacted away. Raises ClosedError once closed.
    """

    __slots__ = ("_db", "seq", "_closed", "__weakref__")

    def __init__(self, db: "DB", seq: int) -> None:
        self._db = db
        self.seq = seq
        self._closed = False

    def get(self, key: BytesLike) -> bytes | None:
        if self._closed:
            raise ClosedError("snapshot is closed")
        return self._db.get(key, snapshot=self)

    def scan(self, start: BytesLike | None = None, end: BytesLike | None = None, *,
             reverse: bool = False, prefix: BytesLike | None = None,
             limit: int | None = None, keys_only: bool = False) -> DBIterator:
        """:meth:`DB.scan` as of this snapshot."""
        return self._db.scan(start, end, reverse=reverse, snapshot=self, prefix=prefix,
                             limit=limit, keys_only=keys_only)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._db._release_snapshot(self.seq)

    def __enter__(self) -> "Snapshot":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _release_later(self) -> None:
        """Release without taking the database lock (safe from finalizers): the release
        is applied at the next snapshot, flush or compaction."""
        if not self._closed:
            self._closed = True
            self._db._deferred_releases.append(self.seq)  # list.append takes no lock

    __del__ = _release_later


class DB:
    """An open rocksmash database. Create with :func:`rocksmash.open`.

    Thread-safe: any number of threads may read and write concurrently. Keys and values
    are bytes-like (``bytes``, ``bytearray``, ``memoryview``: copied to ``bytes`` on the
    way in, see :mod:`rocksmash.keys`) and always come back as ``bytes``; other types,
    ``str`` included, raise :class:`InvalidTypeError` (a ``TypeError``).
    Errors are documented in :mod:`rocksmash.errors`.
    """

    def __init__(self, path: str | os.PathLike[str], options: Options, *,
                 progress: Progress | None = None) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.options = options
        self._progress = progress  # reports a rebuild from the bucket (the CLI's restore)
        self._closed = True
        self._forked = False
        env = self._env = options.env or POSIX
        if env.exists(os.path.join(self.path, filenames.CURRENT)):
            if options.error_if_exists:
                raise InvalidArgumentError(f"{self.path}: database exists (error_if_exists)")
        elif not options.create_if_missing:
            raise InvalidArgumentError(f"{self.path}: no database here (create_if_missing "
                                       f"is False)")
        try:
            env.makedirs(self.path)
        except (FileExistsError, NotADirectoryError) as e:
            raise InvalidArgumentError(f"{self.path}: not a directory ({e.strerror})") from None
        except OSError as e:
            raise path_error(f"creating {self.path}", e) from e
        self._file_lock = env.lock(os.path.join(self.path, filenames.LOCK))
        try:
            self._init_state()
            self._recover()
            self._fit_data_cache()
        except BaseException:
            self._abandon()
            raise
        self._closed = False
        _open_dbs.add(self)
        # One flush thread per sealed memtable allowed, up to _FLUSH_THREADS: their jobs
        # run in parallel worker processes (decision 0027).
        flushers = min(self.options.max_immutable_memtables, _FLUSH_THREADS)
        loops = [("flush", self._flush_loop)] * flushers + [("compaction",
                                                              self._compaction_loop)]
        if self._cloud is not None and self._shipping in ("off", "sealed"):
            # (with "interval" and "sync", every shipment is a fencing check)
            loops.append(("fencing", self._fencing_loop))
        for name, target in loops:
            t = threading.Thread(target=target, name=f"rocksmash-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    # ----------------------------------------------------------------- setup

    def _init_state(self) -> None:
        opts = self.options
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._version_lock = threading.Lock()
        self._sync_lock = threading.Lock()
        #: Held by whoever runs a compaction (the compaction thread or compact_range).
        self._compaction_mutex = threading.Lock()
        # One cache budget, split: the row cache's share, and the block cache the rest.
        row_bytes = opts.row_cache_bytes()
        self._cache = BlockCache(opts.block_cache_size - row_bytes, stored=opts.cloud_stored_blocks)
        self._row_cache = RowCache(row_bytes) if row_bytes else None
        #: The row cache's dict (None without one), read on every get without a lock.
        self._rows = self._row_cache.rows if self._row_cache is not None else None
        #: Live snapshots: sequence number -> how many snapshots hold it.
        self._snapshots: dict[int, int] = {}
        #: Snapshots released by the garbage collector, applied under the lock later
        #: (a finalizer must never take the lock: it may run while this thread holds it).
        self._deferred_releases: list[int] = []
        #: Replaced memtable versions with seq <= this are kept (max live snapshot).
        self._keep_upto = -1
        self._closing = False
        self._bg_error: BaseException | None = None
        self._stall = False
        #: id() of the sealed memtables a flush thread has taken (lock held).
        self._flushing: set[int] = set()
        self._compaction_wanted = True
        self._threads: list[threading.Thread] = []
        self._old_wals: list[WalWriter] = []
        self._pointers: dict[int, bytes] = {}
        self._memtable_size = opts.memtable_size
        self._max_key = opts.max_key_size
        self._max_value = opts.max_value_size
        self._default_sync = opts.sync
        self._job_opts = {"block_size": opts.block_size, "compression": opts.compression,
                          "bloom_bits_per_key": opts.bloom_bits_per_key}
        self._drop_damaged_tail = opts.wal_recovery == "drop_corrupt_tail"
        # The process's shared worker pools (None: jobs run on this process's threads).
        # (Worker processes use the real file system, without an env's faults.)
        workers = opts.background_processes and type(self._env) is PosixEnv
        # One pool for flushes and compactions; flushes go first in it (decision 0031).
        self._pool = shared_pool() if workers else None
        #: Writes call _make_room once the memtable reaches this many bytes: a quarter
        #: of memtable_size (it then starts the worker that will flush the memtable),
        #: then memtable_size (it seals the memtable). Reset for each new memtable.
        self._room_at = self._first_room_at()
        self._stats: dict[str, Any] = {
            "flushes": 0, "compactions": 0, "trivial_moves": 0, "flush_bytes": 0,
            "compaction_bytes_read": 0, "compaction_bytes_written": 0, "stall_seconds": 0.0,
            "recovered_segments": 0, "torn_wal_tails": 0, "cache_fills_by_compaction": 0,
            "background_retries": 0, "restored_from_object_store": False,
            "segments_dropped_after_torn": 0, "epoch_checks": 0,
        }
        self._cloud_job_opts = dict(self._job_opts, compression=opts.cloud_compression)
        self._shipping = opts.wal_shipping if opts.object_store is not None else "off"
        self._ship_sync = self._shipping == "sync"
        self._shipper: WalShipper | None = None
        #: Local tables changed since the last publish (the compaction thread publishes).
        self._backup_wanted = False
        self._cloud: CloudTier | None = None
        self._pub: Publication | None = None
        if opts.object_store is not None:
            from .data_cache import DataCache
            from .meta_cache import MetaCache

            self._cloud = CloudTier(opts.object_store, opts.object_store_options,
                                    opts.object_store_retries, opts.cloud_fetch_threads)
            self._meta_cache = MetaCache(os.path.join(self.path, filenames.META_CACHE))
            # With one budget ("rest") the capacity is set once the tables are known
            # (_fit_data_cache); until then nothing is evicted.
            self._data_cache = (DataCache(os.path.join(self.path, filenames.DATA_CACHE),
                                          opts.cache_size) if opts.cache_size != "rest" else
                                DataCache(os.path.join(self.path, filenames.DATA_CACHE), 1 << 62,
                                          segment_size=4 << 20))
            key_cache.attach(self._data_cache, os.path.join(self.path, filenames.KEY_CACHE),
                             opts.cache_size if opts.cache_size != "rest" else 1 << 62, opts)
            self._pub = Publication(self._cloud, self.path, self._data_cache,
                                    self._meta_cache, self._stats, self._shipping != "off",
                                    opts.retired_object_grace)

    def _recover(self) -> None:
        """Recover (recovery.py), then open the tables, start a new WAL segment and a
        new manifest snapshot (CURRENT swapped), publish, and delete what nothing
        references any more."""
        cloud = self._cloud
        found = recover(self._env, self.path, self.options, cloud, self._pub, self._stats,
                        self._job_opts, self._pool, self._progress,
                        self._open_table)
        self._fresh = found.fresh
        self.db_id = found.db_id
        levels, restored, last_seq = found.levels, found.restored, found.last_seq
        for f in (f for lvl in levels for f in lvl):
            if f.table is None:  # (recover opened the replayed ones already)
                f.table = self._open_table(f)
        version = Version(levels)
        self._version = version
        self._seq = last_seq
        self._next_file = found.next_file
        self._mem = Memtable(*self._new_numbers(2))
        self._imm: list[Memtable] = restored[::-1]  # newest first, as sealed ones are
        #: Whether range tombstones may exist: reads take the slower paths that apply them.
        self._ranged = self._has_ranges()
        self._wal = WalWriter(self.path, self._mem.segment, self._mem.table_number,
                              last_seq + 1, self._env)
        oldest_unflushed = restored[0].segment if restored else self._mem.segment
        self._manifest = Manifest.create(self.path, self._take_number(), version,
                                         log_number=oldest_unflushed,
                                         next_file=self._next_file, last_seq=last_seq,
                                         epoch=cloud.epoch if cloud else 0, db_id=self.db_id,
                                         mirror_gen=cloud.generation + 1 if cloud else 0,
                                         env=self._env)
        self._log_number = oldest_unflushed
        if cloud is not None:
            wal_objects = found.wal_objects
            if self._shipping != "off":
                self._shipper = WalShipper(cloud, self._shipping, self.options.wal_ship_interval,
                                           self._fail, {o.number: o.segment for o in wal_objects})
                self._shipper.add_segment(self._wal)
                assert self._pub is not None
                self._pub.shipper = self._shipper
            # From here on, any older writer is fenced. After a crash, the replayed
            # segments may hold records never shipped: their tables are uploaded before
            # the publish. A rebuild's restored segments stay memtables (their WAL
            # objects stay too, until a mirror has their flushed tables).
            self._publish_mirror()
            if self._shipper is None:  # nothing in the bucket refers to WAL objects now
                cloud.delete_wal([o.number for o in wal_objects])
            assert self._pub is not None
            self._pub.collect_garbage(self._version)
            self._collect_dead_objects()
        keep = {filenames.manifest_name(self._manifest.number),
                filenames.segment_name(self._mem.segment)}
        keep |= {filenames.table_name(f.number) for lvl in levels for f in lvl}
        keep |= {filenames.segment_name(m.segment) for m in restored}
        remove_unreferenced(self._env, self.path, found.names, keep)
        self._env.sync_dir(self.path)
        self._update_stall()

    def _open_table(self, f: FileMeta) -> Table:
        """Open the reader of ``f``: a local file, or a cloud object whose metadata comes
        from the MetaCache (fetched from the object once, if missing)."""
        if f.tier == LOCAL:
            name = filenames.table_name(f.number)
            return Table(f.number, self._env.open_random(os.path.join(self.path, name)),
                         self._cache, name)
        cloud = self._cloud
        if cloud is None:
            raise InvalidArgumentError("this database has tables in an object store; "
                                       "open it with object_store=")
        meta = self._meta_cache.get(f.number)
        t = Table(f.number, cloud.file(f), self._cache, f.object_key, meta, self._data_cache,
                  self.options.cloud_fetch_size, cloud.prefetch)
        props = t.props
        if (props.get("smallest") not in (None, f.smallest.hex())
                or props.get("largest") not in (None, f.largest.hex())):
            raise CorruptionError(f"{f.object_key}: the manifest's key range of the table "
                                  f"disagrees with the table's own")
        if meta is None:
            self._meta_cache.put(f.number, t.meta())
        return t

    def _take_number(self) -> int:
        n = self._next_file
        self._next_file += 1
        return n

    def _new_numbers(self, count: int) -> list[int]:
        return [self._take_number() for _ in range(count)]

    def _run_job(self, pool: WorkerPool | None, job: str, urgent: bool = False,
                 **kwargs: Any) -> Any:
        """Run a job in a worker of ``pool`` (or inline, on this thread); an ``urgent``
        one (a flush) before the compactions waiting for a worker."""
        if pool is None:
            return JOBS[job](env=self._env, **kwargs)
        return pool.call(job, urgent, self, **kwargs)

    # ----------------------------------------------------------------- writes

    def put(self, key: BytesLike, value: BytesLike, sync: bool | None = None) -> None:
        """Set ``key`` to ``value``. With ``sync=True`` the WAL is fsynced before return.

        The hottest write path: :meth:`write` of a one-put batch, written out."""
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        if type(value) is not bytes:
            value = as_bytes(value, "value")
        if len(key) > self._max_key or len(value) > self._max_value:
            self._check_sizes(key, value)
        with self._lock:
            if self._stall or self._closed or self._mem.size >= self._room_at:
                self._make_room()
            seq = self._seq + 1
            wal = self._wal
            try:
                end = wal.add_put(seq, key, value)
            except OSError as e:
                raise self._wal_failed(wal, e) from e
            self._mem.put(key, seq, value, self._keep_upto)
            self._seq = seq
            rows = self._rows
            if rows and key in rows:
                self._row_cache.update(key, value)  # type: ignore[union-attr]
        if sync or (sync is None and self._default_sync):
            self._sync_wal(wal, end)
            if self._ship_sync:
                self._shipper.wait(wal.number, end, self.options.stall_timeout)  # type: ignore[union-attr]

    def delete(self, key: BytesLike, sync: bool | None = None) -> None:
        """Remove ``key`` (no error if it is absent)."""
        self.write(WriteBatch().delete(key), sync)

    def delete_range(self, start: BytesLike, end: BytesLike, sync: bool | None = None
                     ) -> None:
        """Remove every key ``k`` with ``start <= k < end``, as one range tombstone (no
        scan: the cost does not depend on how many keys the range holds; compaction drops
        the covered data later). As RocksDB's ``DeleteRange``: ``start == end`` is a
        no-op, ``start > end`` raises InvalidArgumentError. Snapshots taken before it
        still see the keys. See :meth:`WriteBatch.delete_range` to combine it with other
        writes atomically."""
        self.write(WriteBatch().delete_range(start, end), sync)

    def write(self, batch: WriteBatch, sync: bool | None = None) -> None:
        """Apply every operation of ``batch`` atomically: all of them survive a crash or
        none does, and no reader sees some without the others."""
        if not isinstance(batch, WriteBatch):
            raise InvalidTypeError(f"expected a WriteBatch, not {type(batch).__name__}")
        ops = list(batch.ops)
        if not ops:
            return
        ranged = False
        if not ops_within(ops, self._max_key, self._max_value):
            for i, (key, value) in enumerate(ops):  # convert, or find the offending one
                if type(value) is RangeEnd:  # a range delete (made by WriteBatch: bytes)
                    ranged = True
                    self._check_sizes(key, b"")
                    self._check_sizes(value.end, b"")
                    continue
                if type(key) is not bytes or (value is not None and type(value) is not bytes):
                    # ``ops`` is a public list: whatever a caller appended is converted here.
                    key = as_bytes(key, "key")
                    value = None if value is None else as_bytes(value, "value")
                    ops[i] = (key, value)
                if len(key) > self._max_key or (value is not None
                                                and len(value) > self._max_value):
                    self._check_sizes(key, value or b"")
        with self._lock:
            if self._stall or self._closed or self._mem.size >= self._room_at:
                self._make_room()
            seq = self._seq + 1
            wal = self._wal
            try:
                end = wal.add(encode_batch(seq, ops))
            except OSError as e:
                raise self._wal_failed(wal, e) from e
            if ranged:
                self._ranged = True  # before the new seq is published (see get)
            self._mem.put_batch(ops, seq, self._keep_upto)
            self._seq = seq + len(ops) - 1
            if self._rows:
                self._row_cache.update_batch(ops)  # type: ignore[union-attr]
        if sync or (sync is None and self._default_sync):
            self._sync_wal(wal, end)
            if self._ship_sync:
                self._shipper.wait(wal.number, end, self.options.stall_timeout)  # type: ignore[union-attr]

    def __setitem__(self, key: BytesLike, value: BytesLike) -> None:
        self.put(key, value)

    def __delitem__(self, key: BytesLike) -> None:
        if self.get(key) is None:
            raise KeyError(key)
        self.delete(key)

    def _check_sizes(self, key: bytes, value: bytes) -> None:
        if len(key) > self._max_key:
            raise InvalidArgumentError(
                f"key of {len(key)} bytes exceeds max_key_size ({self._max_key})")
        if len(value) > self._max_value:
            raise InvalidArgumentError(
                f"value of {len(value)} bytes exceeds max_value_size ({self._max_value})")

    def _wal_failed(self, wal: WalWriter, e: OSError) -> Error:
        """A failed append (write lock held): the write is not applied. Cut off whatever
        part of the record reached the file, so the next write follows a valid record; if
        even that fails, writes stop until a reopen (recovery drops the torn record)."""
        if self._closed or self._closing:
            return ClosedError("database is closed")
        try:
            wal.truncate()
        except OSError:
            err = os_error("WAL write failed, and so did cutting off the partial record; "
                           "reopen the database to recover", e)
            self._bg_error = err
            self._update_stall()
            return err
        return os_error(f"WAL write failed (the write was not applied): {wal.path}", e)

    def _make_room(self) -> None:
        """Before a write (write lock held): wait while memtables or L0 are full, and seal
        a full memtable. Raises ClosedError, the background error, or UnavailableError
        after ``stall_timeout``; then the write is not applied."""
        started = time.monotonic()
        deadline = started + self.options.stall_timeout
        while True:
            if self._closed or self._closing:
                raise self._closed_error()
            if self._bg_error is not None:
                raise self._background_failure() from self._bg_error
            if not self._stall:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                self._stats["stall_seconds"] += time.monotonic() - started
                last = self._stats.get("last_background_error")
                raise UnavailableError(
                    f"writes stalled for {self.options.stall_timeout:g} s: "
                    f"{len(self._imm)} sealed memtables and "
                    f"{len(self._version.levels[0])} L0 tables wait for flush and "
                    f"compaction" + (f" (last background error: {last})" if last else ""))
            self._cv.wait(min(left, 1.0))
        self._stats["stall_seconds"] += time.monotonic() - started
        if self._mem.size >= self._memtable_size:
            self._switch_memtable()
        elif self._mem.size >= self._room_at:
            # A quarter full: start the worker that will flush it now, so the flush does
            # not begin with the worker's start-up while writes fill the next memtables.
            self._room_at = self._memtable_size
            if self._pool is not None:
                self._pool.prestart()

    def _first_room_at(self) -> int:
        """A new memtable's first _make_room point (see ``_room_at``)."""
        return self._memtable_size // 4 if self._pool is not None else self._memtable_size

    def _closed_error(self) -> ClosedError:
        if self._forked:
            return ClosedError("this database was opened by the parent process; a child "
                               "made by fork must open it again (after the parent closes it)")
        return ClosedError("database is closed")

    def _background_failure(self) -> Error:
        """The error writes raise after background work failed for good: of the same
        kind as the failure (FencedError, ObjectStoreError, CorruptionError...)."""
        e = self._bg_error
        if isinstance(e, FencedError):
            return FencedError(str(e))
        kind = type(e) if isinstance(e, Error) and type(e) is not UnavailableError else Error
        return kind(f"database is read-only after a background error: {e}; reopen it to "
                    f"recover")

    def _update_stall(self) -> None:
        opts = self.options
        self._stall = (len(self._imm) >= opts.max_immutable_memtables
                       or len(self._version.levels[0]) >= opts.l0_stop_writes_trigger
                       or self._bg_error is not None)

    def _switch_memtable(self) -> None:
        """Seal the memtable and cut a new WAL segment (write lock held). If the segment
        cannot be created (disk full), nothing changes and the error is raised."""
        seg, table = self._new_numbers(2)
        try:
            wal = WalWriter(self.path, seg, table, self._seq + 1, self._env)
        except OSError as e:
            raise os_error("creating a WAL segment", e) from e
        if self._shipper is not None:
            try:
                self._shipper.add_segment(wal)
            except OSError as e:
                wal.close()
                self._env.remove(wal.path)
                raise os_error("opening a WAL segment for shipping", e) from e
            self._shipper.seal(self._wal)
        with self._sync_lock:
            self._old_wals.append(self._wal)
            self._wal = wal
        self._mem.last_seq = self._seq
        self._imm = [self._mem] + self._imm  # publish the sealed one before replacing it
        self._mem = Memtable(seg, table)
        self._room_at = self._first_room_at()
        self._update_stall()
        self._cv.notify_all()

    def _sync_wal(self, wal: WalWriter, end: int) -> None:
        """Group commit: make the WAL durable up to ``end`` of ``wal``."""
        with self._sync_lock:
            if wal.synced >= end:
                return  # (close() syncs every segment before it closes one)
            try:
                for old in self._old_wals:  # earlier segments first: no holes after a crash
                    old.sync()
                wal.sync()
            except OSError as e:
                # After a failed fsync the kernel may have dropped the dirty pages: nothing
                # after this point can be trusted to reach the disk. Stop writes.
                err = os_error("WAL fsync failed; reopen the database to recover", e)
                with self._lock:
                    if self._bg_error is None:
                        self._bg_error = err
                    self._update_stall()
                raise err from e

    # ----------------------------------------------------------------- reads

    def get(self, key: BytesLike, default: bytes | None = None, *,
            snapshot: Snapshot | None = None) -> bytes | None:
        """The value of ``key``, or ``default`` (None) if it is absent."""
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        if self._closed:
            raise self._closed_error()
        rows = self._rows
        if snapshot is None:
            if rows is not None:
                # The row cache holds current values only: snapshot reads bypass it.
                value = rows.get(key, MISSING)
                if value is not MISSING:
                    try:
                        rows.move_to_end(key)
                    except KeyError:
                        pass  # evicted meanwhile; the value read is still current
                    self._row_cache.hits += 1  # type: ignore[union-attr]
                    return default if value is None else value  # type: ignore[return-value]
            seq = self._seq
        else:
            if snapshot._closed or snapshot._db is not self:
                raise ClosedError("snapshot is closed or belongs to another database")
            seq = snapshot.seq
            rows = None
        if self._ranged:  # read after seq: a delete_range sets it before publishing
            return self._get_ranged(key, default, seq, snapshot is None)
        e = self._mem.entries.get(key)
        if e is None:
            value = self._get_below(key, seq)
            if rows is not None:
                self._fill_row(key, value, seq)
        elif e[0] <= seq:
            value = e[1]
        elif snapshot is None:
            # A write to this key is in flight (in the memtable, not yet published; the
            # version it replaced is not kept for readers without a snapshot). Wait for
            # the writer to publish it, then read again: it is at most one write long.
            with self._lock:
                seq = self._seq
            e = self._mem.visible(key, seq)
            value = self._get_below(key, seq) if e is None else e[1]
        else:
            e = self._mem.visible(key, seq)
            value = self._get_below(key, seq) if e is None else e[1]
        return default if value is None else value

    def _get_ranged(self, key: bytes, default: bytes | None, seq: int, current: bool
                    ) -> bytes | None:
        """:meth:`get` while range tombstones exist: sources newest first, each giving the
        newest covering tombstone and the newest version with their sequence numbers. A
        tombstone hides every version in older sources (range_del.py), so the first
        source holding either decides."""
        mem = self._mem
        e = mem.entries.get(key)
        if current and e is not None and e[0] > seq:
            with self._lock:  # a write to the key is in flight: see get
                seq = self._seq
        cover = 0
        for m in [mem, *self._imm]:
            if m.ranges:
                cover = max(cover, covering_seq(m.ranges, key, seq))
            e = m.visible(key, seq)
            if e is not None or cover:
                return default if e is None or e[0] < cover or e[1] is None else e[1]
        v = self._version
        word, mi = split_hash(key)
        for t in v.tables_for(key):
            if t.ranges:
                cover = max(cover, covering_seq(t.ranges, key, seq))
            e = t.get_entry(key, seq) if t.may_contain(word, mi) else None
            if e is not None or cover:
                return default if e is None or e[0] < cover or e[1] is None else e[1]
        return default

    def _fill_row(self, key: bytes, value: bytes | None, seq: int) -> None:
        """Remember a value read at ``seq`` in the row cache (see row_cache.py for why
        under the write lock). Skipped when a writer holds the lock: never wait for one."""
        rc = self._row_cache
        rc.misses += 1  # type: ignore[union-attr]
        lock = self._lock
        if lock.acquire(blocking=False):
            try:
                rc.fill(key, value, seq, self._seq)  # type: ignore[union-attr]
            finally:
                lock.release()

    def _get_below(self, key: bytes, seq: int) -> bytes | None:
        """Look ``key`` up below the active memtable: sealed memtables, then tables.

        Hot path, written out by hand: one hash per lookup serves every table's filter
        (split once into the word index and the mask index; see Table.get).
        """
        for mem in self._imm:
            e = mem.entries.get(key)
            if e is not None:
                if e[0] <= seq:
                    return e[1]
                e = mem.visible(key, seq)
                if e is not None:
                    return e[1]
        v = self._version
        h = key_hash(key)
        word = h & 0xFFFFFFFF
        mi = (h >> 32) & 0x3FFF
        for lo, hi, t in v.l0_search:
            if lo <= key <= hi:
                r = t.get(key, seq, word, mi)
                if r is not MISSING:
                    return r
        for largest, smallest, tables in v.level_search:
            i = bisect_left(largest, key)
            if i < len(largest) and smallest[i] <= key:
                r = tables[i].get(key, seq, word, mi)
                if r is not MISSING:
                    return r
        return None

    def multi_get(self, keys: list[BytesLike], *, snapshot: Snapshot | None = None
                  ) -> list[bytes | None]:
        """Values of ``keys`` (None where absent), all read at one sequence number.
        With a cloud tier, the object-store GETs the keys need are made all at once
        (read_ahead.py), not one after another."""
        if snapshot is None:
            with self.snapshot() as snap:
                return self.multi_get(keys, snapshot=snap)
        if self._cloud is not None and self._cloud.prefetch is not None and len(keys) > 1:
            fetch_for_keys([as_bytes(k, "key") for k in keys], [self._mem, *self._imm],
                           self._version, snapshot.seq)
        return [self.get(k, snapshot=snapshot) for k in keys]

    def __getitem__(self, key: BytesLike) -> bytes:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[bytes]:
        """The keys in order (a scan: ``for key in db``, ``list(db)``)."""
        return self.keys()

    def __reversed__(self) -> Iterator[bytes]:
        """The keys in descending order (``reversed(db)``: a reverse scan)."""
        return self.keys(reverse=True)

    def __len__(self) -> int:
        """The exact number of keys: a keys-only scan of the whole database, so it reads
        everything (of a tiered database, from the object store too). For an estimate
        without I/O use :meth:`approximate_count`."""
        return sum(1 for _ in self.keys())

    def __bool__(self) -> bool:
        """Whether any key exists (one step of a scan, not :meth:`__len__`): an empty
        database is false, as an empty dict is."""
        return next(iter(self.keys()), None) is not None

    def clear(self, sync: bool | None = None) -> None:
        """Delete every key, atomically: one range tombstone from the first key to the
        last plus a delete of the last (two short scans find them; no full scan)."""
        first = next(iter(self.keys()), None)
        if first is None:
            return
        last = next(iter(self.keys(reverse=True)))
        self.write(WriteBatch().delete_range(first, last).delete(last), sync)

    def batch(self, sync: bool | None = None) -> WriteBatch:
        """A :class:`WriteBatch` to fill in a ``with`` block; the block's clean end writes
        it with :meth:`write` (atomically, ``sync`` as there), an exception discards it::

            with db.batch() as b:
                b.put(b"a", b"1").delete(b"b")
        """
        return WriteBatch(db=self, sync=sync)

    def keys(self, start: BytesLike | None = None, end: BytesLike | None = None, *,
             reverse: bool = False) -> DBIterator:
        """Keys with ``start <= key < end``, in order: ``scan(..., keys_only=True)``."""
        return self.scan(start, end, reverse=reverse, keys_only=True)

    def values(self, start: BytesLike | None = None, end: BytesLike | None = None, *,
               reverse: bool = False) -> DBIterator:
        """Values of the keys with ``start <= key < end``, in key order (a scan)."""
        return self._iterator(start, end, reverse, None, None, None, VALUE)

    def items(self, start: BytesLike | None = None, end: BytesLike | None = None, *,
              reverse: bool = False) -> DBIterator:
        """``(key, value)`` with ``start <= key < end``: the same as :meth:`scan`."""
        return self.scan(start, end, reverse=reverse)

    def update(self, other: Any = (), /, *, sync: bool | None = None) -> None:
        """Put every ``(key, value)`` of a mapping or an iterable of pairs, atomically
        (one write batch)."""
        pairs = other.items() if hasattr(other, "items") else other
        self.write(WriteBatch().put_many(pairs), sync)

    def pop(self, key: BytesLike, *default: bytes | None) -> bytes | None:
        """Delete ``key`` and return its value; ``default`` if absent (KeyError without
        one). Like ``dict.pop``; not atomic against another thread writing the key."""
        value = self.get(key)
        if value is None:
            if default:
                return default[0]
            raise KeyError(key)
        self.delete(key)
        return value

    def setdefault(self, key: BytesLike, default: BytesLike) -> bytes:
        """The value of ``key``, first setting it to ``default`` if absent. Not atomic
        against another thread writing the key."""
        value = self.get(key)
        if value is None:
            default = as_bytes(default, "value")
            self.put(key, default)
            return default
        return value

    def approximate_count(self) -> int:
        """Entries in memtables and tables, from their counters: overwritten versions
        and deletions not yet compacted away are counted too (no scan, no I/O)."""
        with self._lock:
            mems = [self._mem, *self._imm]
            v = self._version
        return sum(m.count for m in mems) + sum(int(f.table.props.get("count", 0))
                                                 for _, f in v.files())

    def approximate_size(self, start: BytesLike | None = None,
                         end: BytesLike | None = None) -> int:
        """Bytes of the tables whose key range meets ``[start, end)`` (whole tables, so an
        upper bound for the range; memtables not counted)."""
        start, end = as_bound(start, "start"), as_bound(end, "end")
        v = self._version
        return sum(f.size for _, f in v.files()
                   if (end is None or f.smallest < end) and (start is None or f.largest >= start))

    def __contains__(self, key: object) -> bool:
        return self.get(key) is not None  # type: ignore[arg-type]

    def snapshot(self) -> Snapshot:
        """A consistent view of the current state; close it when done."""
        with self._lock:
            if self._closed:
                raise self._closed_error()
            if self._deferred_releases:
                self._live_snapshots()
            seq = self._seq
            self._snapshots[seq] = self._snapshots.get(seq, 0) + 1
            self._keep_upto = seq  # sequence numbers only grow: this is the newest
        return Snapshot(self, seq)

    def _resume_snapshot(self, seq: int) -> Snapshot | None:
        """A snapshot at ``seq`` again (an exhausted iterator that seeks: iterator.py), if
        nothing was written since ``seq``: then every version visible at ``seq`` is the
        newest of its key, which nothing drops. None otherwise (or closed)."""
        with self._lock:
            if self._closed or self._seq != seq:
                return None
            self._snapshots[seq] = self._snapshots.get(seq, 0) + 1
            self._keep_upto = seq
        return Snapshot(self, seq)

    def _release_snapshot(self, seq: int | None) -> None:
        with self._lock:
            if seq is not None:
                self._drop_snapshot(seq)
            if self._deferred_releases:
                self._live_snapshots()

    def _drop_snapshot(self, seq: int) -> None:
        n = self._snapshots.get(seq, 0)
        if n > 1:
            self._snapshots[seq] = n - 1
        elif n:
            del self._snapshots[seq]
            if seq == self._keep_upto:
                self._keep_upto = max(self._snapshots, default=-1)

    def _live_snapshots(self) -> list[int]:
        """Apply deferred releases; return the live snapshot seqs, sorted (lock held)."""
        deferred = self._deferred_releases
        while deferred:
            self._drop_snapshot(deferred.pop())
        return sorted(self._snapshots)

    def scan(self, start: BytesLike | None = None, end: BytesLike | None = None, *,
             reverse: bool = False, snapshot: Snapshot | None = None,
             prefix: BytesLike | None = None, limit: int | None = None,
             keys_only: bool = False) -> DBIterator:
        """Iterate ``(key, value)`` with ``start <= key < end`` in key order (descending
        with ``reverse=True``), as of ``snapshot`` or of the call.

        ``prefix``: only keys that start with it (combined with ``start``/``end``).
        ``limit``: at most that many items (0 or more).
        ``keys_only``: yield keys alone.

        The iterator can :meth:`~DBIterator.seek`, :meth:`~DBIterator.seek_to_first` and
        :meth:`~DBIterator.seek_to_last` within the range (see :mod:`rocksmash.iterator`).
        """
        if type(keys_only) is not bool:
            raise InvalidArgumentError(f"keys_only must be True or False, not {keys_only!r}")
        return self._iterator(start, end, reverse, snapshot, prefix, limit,
                              KEY if keys_only else None)

    def _iterator(self, start: BytesLike | None, end: BytesLike | None, reverse: bool,
                  snapshot: Snapshot | None, prefix: BytesLike | None, limit: int | None,
                  project: Callable[[tuple[bytes, bytes]], Any] | None) -> DBIterator:
        if start is not None and type(start) is not bytes:
            start = as_bytes(start, "start")
        if end is not None and type(end) is not bytes:
            end = as_bytes(end, "end")
        if limit is not None and (type(limit) is not int or limit < 0):
            raise InvalidArgumentError(f"limit must be an int >= 0, not {limit!r}")
        if prefix is not None:
            prefix = as_bytes(prefix, "prefix")
            start = prefix if start is None else max(start, prefix)
            after = _prefix_end(prefix)
            end = after if end is None or (after is not None and after < end) else end
        if snapshot is None:
            # An implicit snapshot, owned by the iterator (and held by its merges): freed
            # with the last of them (deferred: that may happen in the garbage collector,
            # which must not take locks), or at once by DBIterator.close().
            return DBIterator(self, self.snapshot(), True, start, end, reverse, limit, project)
        if snapshot._closed or snapshot._db is not self:
            raise ClosedError("snapshot is closed or belongs to another database")
        return DBIterator(self, snapshot, False, start, end, reverse, limit, project)

    def _scan(self, start: bytes | None, end: bytes | None, reverse: bool, seq: int,
              release: Callable[[], None] | None
              ) -> tuple[Iterator[tuple[bytes, bytes]], Callable[[], None]]:
        """Merge one source per memtable, per L0 file and per level, newest first.

        Only what can hold a key of the range gets a source: an empty memtable none (a
        write it takes later is newer than ``seq``: writers publish ``_seq`` after the
        memtable), a table or a level whose files all miss ``[start, end)`` none."""
        ranged = self._ranged  # (read after ``seq`` was taken: see get)
        mem, imm, v = self._mem, self._imm, self._version
        sources: list[Iterator[Chunk]] = []
        tombs: list[list] = []  # each source's range tombstones, in step with ``sources``
        for m in (mem, *imm):
            if m.entries or m.ranges:
                sources.append(m.scan(start, end, reverse, seq, self._lock if m is mem else None))
                tombs.append(m.ranges)
        for f in v.levels[0]:
            if f.overlaps(start, end) and (end is None or f.smallest < end):
                sources.append(f.table.scan(start, end, reverse, seq))
                tombs.append(f.table.ranges)
        for largest, smallest, tables in v.level_search:  # the levels below 0 with files
            lo = 0 if start is None else bisect_left(largest, start)
            hi = len(tables) if end is None else bisect_left(smallest, end)
            if lo >= hi:
                continue
            order = range(hi - 1, lo - 1, -1) if reverse else range(lo, hi)
            sources.append(scan_tables(map(tables.__getitem__, order), start, end, reverse,
                                       seq))
            if ranged:
                tombs.append([r for i in order for r in tables[i].ranges])
        if ranged:
            sources = _hide_covered(sources, tombs, seq)
        return (merge_reverse if reverse else merge_forward)(sources, release)

    def _has_ranges(self) -> bool:
        """Whether any memtable or table holds a range tombstone (write lock held)."""
        return bool(self._mem.ranges or any(m.ranges for m in self._imm)
                    or any(f.table.ranges for _, f in self._version.files()))

    # ----------------------------------------------------------------- background

    def _flush_loop(self) -> None:
        """One flush thread: take the oldest sealed memtable no other flush thread has
        taken, write its table (in a worker process, in parallel with the other flush
        threads' tables), and install it once every older sealed memtable is installed
        (see _flush_one)."""
        delay = 0.1
        while True:
            with self._lock:
                while True:
                    if self._closing:
                        return
                    mem = self._unclaimed() if self._bg_error is None else None
                    if mem is not None:
                        break
                    self._cv.wait()
                self._flushing.add(id(mem))
                snapshots = self._live_snapshots()
            try:
                self._flush_one(mem, snapshots)
                delay = 0.1
            except Error as e:
                if not e.retriable:
                    self._fail(e)  # stop writes; reads and reopen still work
                    return
                # A full disk (or a worker that died twice): writes go on until the
                # memtables fill and stall (bounded by stall_timeout); try again later.
                self._stats["background_retries"] += 1
                self._stats["last_background_error"] = repr(e)
                with self._lock:
                    self._cv.wait(delay)
                delay = min(delay * 2, 5.0)
            except BaseException as e:
                self._fail(e)
                return
            finally:
                with self._lock:
                    self._flushing.discard(id(mem))
                    self._cv.notify_all()

    def _unclaimed(self) -> Memtable | None:
        """The oldest sealed memtable no flush thread has taken (lock held)."""
        for m in reversed(self._imm):
            if id(m) not in self._flushing:
                return m
        return None

    def _wait_to_install(self, mem: Memtable) -> bool:
        """Wait until ``mem`` is the oldest sealed memtable, so tables enter L0 in the
        order of their memtables (a newer table installed first would let a read find the
        older memtable's version above it). False if the database is closing or failed;
        then the table written is not installed, and the next open deletes it."""
        with self._lock:
            while self._imm[-1] is not mem:
                if self._closing or self._bg_error is not None:
                    return False
                self._cv.wait()
            return True

    def _flush_one(self, mem: Memtable, snapshots: list[int]) -> None:
        seg_path = os.path.join(self.path, filenames.segment_name(mem.segment))
        table_path = os.path.join(self.path, filenames.table_name(mem.table_number))
        contents = self._flush_contents(mem)
        if contents is not None:
            job, args = contents
            del contents
            result = self._run_job(self._pool, job, True, **args,
                                   table_path=table_path, opts=self._job_opts,
                                   snapshots=snapshots)
            del args
            last_seq = mem.last_seq
        else:
            result = self._run_job(self._pool, "flush_segment", True,
                                   segment_path=seg_path, table_path=table_path,
                                   opts=self._job_opts, snapshots=snapshots)
            last_seq = result["last_seq"]
        info: TableInfo | None = result["table"]
        if not self._wait_to_install(mem):
            return
        if self._cloud is not None:
            self._check_epoch()
        with self._version_lock:
            edit = VersionEdit(next_file=self._next_file, last_seq=last_seq)
            with self._lock:
                # Writes before the next sealed memtable's segment are all in tables now.
                edit.log_number = (self._imm[-2].segment if len(self._imm) > 1
                                   else self._mem.segment)
            if info is not None:
                f = FileMeta(mem.table_number, info.size, info.smallest, info.largest,
                             info.min_seq, info.max_seq)
                f.table = self._open_table(f)
                edit.added.append((0, f))
                self._env.sync_dir(self.path)  # the table's entry, before the edit
            self._log_edit(edit)
            with self._lock:
                self._version = self._version.apply(edit)  # the table first, then
                self._imm = self._imm[:-1]                   # drop its memtable
                self._stats["flushes"] += 1
                self._stats["flush_bytes"] += info.size if info else 0
                self._compaction_wanted = True
                self._backup_wanted = True
                self._update_stall()
                self._cv.notify_all()
        self._fit_data_cache()
        with self._sync_lock:
            for w in [w for w in self._old_wals if w.number == mem.segment]:
                w.close()
                self._old_wals.remove(w)
        self._env.remove_if_exists(seg_path)

    def _flush_contents(self, mem: Memtable) -> tuple[str, dict] | None:
        """The job and arguments that flush sealed memtable ``mem`` from its contents
        (it gets no more writes, so they are read without a lock), or None to replay
        its WAL segment instead: too large for one worker frame, or not encodable. Both
        make the same bytes (decision 0026)."""
        if mem.last_seq is None or mem.size >= _FLUSH_BY_VALUE_LIMIT:
            return None
        if self._pool is None:
            return "flush_memtable", {"entries": mem.entries, "old": mem.old,
                                      "ranges": mem.ranges}
        try:
            contents = marshal.dumps((mem.entries, mem.old, mem.ranges))
        except ValueError:  # (keys and values are always bytes; this is a safety net)
            return None
        # Out of band: the pipe takes these bytes as they are, no copy into the pickle;
        # a Handoff, so they are freed once written, not held for the whole job.
        return "flush_marshalled", {"contents": Handoff(contents)}

    def _log_edit(self, edit: VersionEdit) -> None:
        """Make ``edit`` durable (``_version_lock`` held), rolling the manifest if large.
        A failure raises a rocksmash Error and the edit has not taken effect (a full disk
        is retriable; after a failed fsync every later edit fails until a reopen)."""
        try:
            self._log_edit_to_file(edit)
        except OSError as e:
            raise os_error("writing the manifest", e) from e

    def _log_edit_to_file(self, edit: VersionEdit) -> None:
        if edit.log_number is not None:
            self._log_number = edit.log_number
        if self._manifest.size > _MANIFEST_ROLL_SIZE:
            old = self._manifest
            v = self._version.apply(edit)
            self._manifest = Manifest.create(
                self.path, self._take_number(), v, log_number=self._log_number,
                next_file=self._next_file, last_seq=max(edit.last_seq or 0, self._seq),
                epoch=self._cloud.epoch if self._cloud else 0, db_id=self.db_id,
                mirror_gen=max(edit.mirror_gen or 0, self._cloud.generation + 1)
                if self._cloud else 0, env=self._env)
            old.close()
            self._env.remove(os.path.join(self.path, filenames.manifest_name(old.number)))
            return
        self._manifest.log(edit)

    def _compaction_loop(self) -> None:
        delay = 0.1
        while True:
            with self._lock:
                while not self._closing and not (self._compaction_wanted
                                                 and self._bg_error is None):
                    self._cv.wait()
                if self._closing:
                    return
                self._compaction_wanted = False
            try:
                while not self._closing:
                    with self._compaction_mutex:  # pick and run with no one in between
                        with self._version_lock:
                            c = pick_compaction(self._version, self.options, self._pointers)
                        if c is None:
                            break
                        self._run_compaction(c)
                        del c  # let the inputs' readers go, so their objects can
                        self._collect_dead_objects()  # be deleted now
                if self._backup_wanted and self._shipping != "off" and not self._closing:
                    self._publish_backups()
                    self._collect_dead_objects()
                delay = 0.1
            except Error as e:
                if not e.retriable:
                    self._fail(e)
                    return
                # The object store (or a worker) failed after retries. Writes go on into
                # L0 until it stalls; try again later, backing off up to 30 s.
                self._stats["background_retries"] += 1
                self._stats["last_background_error"] = repr(e)
                with self._lock:
                    self._compaction_wanted = True
                    self._cv.wait(delay)
                delay = min(delay * 2, 30.0)
            except BaseException as e:
                self._fail(e)
                return

    def _publish_backups(self) -> None:
        """Publish a mirror with the local tables that flushes and local compactions made
        since the last one (uploading their backups), so WAL objects can go."""
        assert self._cloud is not None and self._pub is not None
        with self._compaction_mutex:  # no compaction changes the backups meanwhile
            self._pub.upload_missing(self._version)  # flushes go on during the uploads
            with self._version_lock:
                self._log_edit(VersionEdit(mirror_gen=self._cloud.generation + 1))
                self._publish_mirror()

    def _check_epoch(self) -> None:
        """FencedError if another writer has claimed the prefix. An unreachable store
        cannot tell; that is counted and left to the next check (see docs/cloud.md)."""
        assert self._cloud is not None
        self._stats["epoch_checks"] += 1
        try:
            self._cloud.check_epoch()
        except UnavailableError as e:
            self._stats["last_epoch_check_error"] = repr(e)

    def _fencing_loop(self) -> None:
        """Check the writer epoch every ``fencing_check_interval``; fenced: stop writes."""
        interval = self.options.fencing_check_interval
        while True:
            with self._lock:
                self._cv.wait_for(lambda: self._closing or self._bg_error is not None,
                                  interval)
                if self._closing or self._bg_error is not None:
                    return
            try:
                self._check_epoch()
            except BaseException as e:
                self._fail(e)
                return

    def _run_compaction(self, c: Compaction) -> None:
        """Execute ``c`` and install its result (``_compaction_mutex`` held: one
        compaction at a time, from the compaction thread or compact_range).

        Output goes to the object store when the output level is a cloud level. The old
        files are deleted after the edit is durable (and, for cloud objects, after the
        mirror no longer names them and no reader holds them). Then the data cache is
        warmed from the local copies of the new cloud tables (compaction-aware caching):
        after the old tables' blocks are dropped, so the new ones have their room.
        """
        cloud = self._cloud
        to_cloud = (cloud is not None
                    and c.output_level >= first_cloud_level(self._version, self.options))
        hot = (cache_fill.collect((f for _, f in c.inputs), self._data_cache)
               if to_cloud and self.options.compaction_aware_cache else None)
        edit = VersionEdit(deleted=[(lvl, f.number) for lvl, f in c.inputs])
        outputs: list[FileMeta] = []
        # (table number, a readable local copy, its temporary path or None)
        fills: list[tuple[int, Table, str | None]] = []
        try:
            if c.trivial_move:
                (_, f), = c.inputs
                if to_cloud and f.tier == LOCAL:
                    outputs.append(self._upload_table(f))
                    fills.append((f.number, f.table, None))
                else:
                    outputs.append(f.moved())
            else:
                outputs = self._merge(c, to_cloud, fills)
            edit.added = [(c.output_level, f) for f in outputs]
            self._install(c, edit, outputs)
            if hot is not None and fills:
                self._stats["cache_fills_by_compaction"] += cache_fill.fill(
                    self._data_cache, {n: t for n, t, _ in fills}, hot)
        finally:
            for _, t, tmp in fills:
                if tmp is not None:
                    t.close()
                    self._env.remove(tmp)

    def _footprint(self) -> dict[str, int]:
        """Local bytes of the tiered database: the local tables, the MetaCache and the
        DataCache's segment files, against the local budget at today's table bytes."""
        files = [f for _, f in self._version.files()]
        total = sum(f.size for f in files)
        local = sum(f.size for f in files if f.tier == LOCAL)
        meta = self._meta_cache.total_bytes()
        dc = self._data_cache.stats()
        rows = self._data_cache.rows.stats()["disk_bytes"] if self._data_cache.rows else 0
        return {"budget": self.options.budget_for(total), "local_tables": local,
                "meta_cache": meta, "data_cache": dc["disk_bytes"],
                "data_cache_capacity": dc["capacity"], "key_cache": rows,
                "total": local + meta + dc["disk_bytes"] + rows, "table_bytes": total}

    def _fit_data_cache(self) -> None:
        """With one local budget (``cache_size="rest"``), give the DataCache what the
        local tables and the MetaCache leave of it (after every flush and compaction)."""
        if self._cloud is None or self.options.cache_size != "rest":
            return
        f = self._footprint()
        key_cache.fit(self._data_cache, self.options.data_cache_bytes(
            f["table_bytes"], f["local_tables"], f["meta_cache"]), self.options)

    def _install(self, c: Compaction, edit: VersionEdit, outputs: list[FileMeta]) -> None:
        """Log ``edit``, swap in the new version, publish the mirror, retire the inputs."""
        touches_cloud = any(f.tier == CLOUD for f in outputs) or any(
            f.tier == CLOUD for _, f in c.inputs)
        with self._version_lock:
            edit.next_file = self._next_file
            if touches_cloud:
                assert self._cloud is not None
                edit.mirror_gen = self._cloud.generation + 1  # the publish below
            self._log_edit(edit)
            with self._lock:
                self._version = self._version.apply(edit)
                if self._ranged:  # compaction may have dropped the last tombstones
                    self._ranged = self._has_ranges()
                self._stats["compactions"] += 1
                if c.trivial_move:
                    self._stats["trivial_moves"] += 1
                else:
                    self._stats["compaction_bytes_read"] += c.input_bytes
                    self._stats["compaction_bytes_written"] += sum(f.size for f in outputs)
                self._update_stall()
                self._cv.notify_all()
            if touches_cloud:
                self._publish_mirror()
        kept = {f.number: f for f in outputs}
        for _, f in c.inputs:
            out = kept.get(f.number)
            if out is not None and out.tier == f.tier:
                continue  # moved, same file
            self._cache.drop_table(f.table)
            if self._pub is not None:
                self._pub.retire(f)
            if f.tier == LOCAL:  # open readers keep reading it (POSIX, and MemEnv)
                self._env.remove_if_exists(os.path.join(self.path,
                                                        filenames.table_name(f.number)))
        if any(f.tier == LOCAL for f in outputs):
            self._backup_wanted = True
        self._fit_data_cache()

    def _merge(self, c: Compaction, to_cloud: bool,
               fills: list[tuple[int, Table, str | None]]) -> list[FileMeta]:
        """Run the merge job of ``c``; return the new files with open readers. Cloud
        outputs' local copies are appended to ``fills`` (the caller deletes them)."""
        cloud = self._cloud
        with self._lock:
            snapshots = self._live_snapshots()
        opts = self.options
        target = opts.cloud_target_file_size if to_cloud else opts.target_file_size
        with self._version_lock:  # more numbers than the job can use; gaps are harmless
            numbers = self._new_numbers(2 * (c.input_bytes // target + 2) + len(c.inputs))
        paths = [os.path.join(self.path, filenames.table_name(n) + (".tmp" if to_cloud
                                                                     else ""))
                 for n in numbers]
        runs = [[{"key": f.object_key, "size": f.size} if f.tier == CLOUD else
                 {"path": os.path.join(self.path, filenames.table_name(f.number))}
                 for f in run] for run in c.runs]
        job: dict[str, Any] = dict(
            runs=runs, out_paths=paths, snapshots=snapshots, bottommost=c.bottommost,
            target_file_size=target, opts=self._cloud_job_opts if to_cloud else self._job_opts)
        worker = self._pool
        if cloud is not None and (to_cloud or any(f.tier == CLOUD for _, f in c.inputs)):
            if to_cloud:
                job["upload_keys"] = [FileMeta(n, 0, b"", b"", 0, 0, None, CLOUD,
                                               cloud.epoch).object_key for n in numbers]
            if worker is not None and cloud.shareable:
                job["store"] = cloud.worker_spec()
            else:  # the store cannot be reopened in a worker (memory://, a given object)
                job["store"] = cloud.store
                worker = None
        result = self._run_job(worker, "compact", **job)
        infos: list[TableInfo] = result["tables"]
        if result["traffic"] is not None and cloud is not None:
            cloud.add_worker_traffic(result["traffic"])
        outputs = []
        for n, info in zip(numbers, infos):
            f = FileMeta(n, info.size, info.smallest, info.largest, info.min_seq,
                         info.max_seq, None, CLOUD if to_cloud else LOCAL,
                         cloud.epoch if to_cloud and cloud else 0)
            if to_cloud:  # keep its metadata locally; the local copy warms the cache later
                local = Table(n, self._env.open_random(info.path), None, info.path)
                fills.append((n, local, info.path))
                self._meta_cache.put(n, local.meta())
            f.table = self._open_table(f)
            outputs.append(f)
        if not to_cloud:
            self._env.sync_dir(self.path)
        return outputs

    # ----------------------------------------------------------------- cloud tier

    def _publish_mirror(self) -> None:
        """Publish the current version (``_version_lock`` held, or during open): a mirror
        naming its cloud tables and, with WAL shipping, its local tables' backups (see
        publication.py). Raises FencedError if another writer took over."""
        assert self._pub is not None
        self._pub.publish(self._version, log_number=self._log_number, last_seq=self._seq,
                          next_file=self._next_file)
        self._backup_wanted = False

    def _upload_table(self, f: FileMeta) -> FileMeta:
        """Copy the local table ``f`` to the object store (a trivial move into a cloud
        level); return its cloud FileMeta with an open reader."""
        assert self._pub is not None
        cf = self._pub.cloud_copy(f)
        self._meta_cache.put(f.number, f.table.meta())
        cf.table = self._open_table(cf)
        return cf

    def _collect_dead_objects(self, force: bool = False) -> None:
        """Delete the objects no mirror names any more (publication.py)."""
        if self._pub is not None:
            self._pub.collect(force)

    def _fail(self, e: BaseException) -> None:
        if self._closing:
            return
        with self._lock:
            if self._bg_error is None:
                self._bg_error = e
            self._update_stall()
            self._cv.notify_all()


    # ----------------------------------------------------------------- maintenance

    def flush(self) -> None:
        """Write the memtable to a table and wait until every sealed memtable is flushed.
        Raises UnavailableError if no flush or compaction finishes for ``stall_timeout``
        (a full disk, a stuck worker): the writes stay in the memtable and the WAL."""
        with self._lock:
            if self._closed:
                raise self._closed_error()
            if self._mem.count:
                self._wait_for_flushes(lambda: self._stall)
                self._switch_memtable()
            self._wait_for_flushes(lambda: bool(self._imm))
            if self._bg_error is not None:
                raise self._background_failure() from self._bg_error

    def _wait_for_flushes(self, waiting: Callable[[], bool]) -> None:
        """Wait (lock held) while ``waiting()``, unless background work failed or the
        database closes; UnavailableError after ``stall_timeout`` in which no flush or
        compaction was installed."""
        timeout = self.options.stall_timeout
        stats = self._stats
        deadline, done = time.monotonic() + timeout, stats["flushes"] + stats["compactions"]
        while waiting() and self._bg_error is None and not self._closing:
            if stats["flushes"] + stats["compactions"] != done:  # progress: a new deadline
                deadline, done = time.monotonic() + timeout, stats["flushes"] + stats["compactions"]
            now = time.monotonic()
            if now >= deadline:
                raise UnavailableError(
                    f"flush: no background flush or compaction finished in {timeout:g} s "
                    f"(stall_timeout; last background error: "
                    f"{stats.get('last_background_error')}); the writes are in the memtable "
                    "and the WAL")
            self._cv.wait(min(deadline - now, 1.0))

    def compact_range(self, start: BytesLike | None = None, end: BytesLike | None = None,
                      progress: Callable[[int, int], None] | None = None) -> None:
        """Flush, then merge everything with ``start <= key <= end`` into the last level,
        dropping overwritten versions and deletions. Blocks until done.

        It runs as a series of bounded steps (compaction.manual_step), each at most
        MANUAL_STEP_FILES target files of input, with the compaction the tree needs most
        between two steps: so a flush never waits behind the whole job for the worker,
        L0 keeps draining, and writes go on while a large database is compacted. Writes
        made during the call are not part of it. ``progress(read, left)``, if given, is
        called after each step with the bytes the steps have read so far and the bytes
        of files still to take (compaction.manual_left)."""
        start, end = as_bound(start, "start"), as_bound(end, "end")
        with self._lock:
            old_seq = self._seq
        self.flush()
        with self._version_lock:
            old_number = self._next_file
        limit = MANUAL_STEP_FILES * self.options.target_file_size
        read = 0
        while True:
            with self._compaction_mutex:
                with self._lock:
                    if self._closed or self._closing:
                        raise self._closed_error()
                    if self._bg_error is not None:
                        raise self._background_failure() from self._bg_error
                try:
                    with self._version_lock:
                        c = manual_step(self._version, start, end, old_seq, old_number,
                                        limit)
                    if c is None:
                        break
                    self._run_compaction(c)
                    read += c.input_bytes
                    # The background thread seldom gets the mutex between two steps (a
                    # lock is not fair): do its most urgent compaction here.
                    with self._version_lock:
                        c = pick_compaction(self._version, self.options, self._pointers)
                    if c is not None:
                        self._run_compaction(c)
                except OSError as e:
                    raise os_error("compact_range", e) from e
                del c
                self._collect_dead_objects()
            if self._backup_wanted and self._shipping != "off":
                self._publish_backups()  # as the background thread would: WAL objects go
                self._collect_dead_objects()
            if progress is not None:
                with self._version_lock:
                    left = manual_left(self._version, start, end, old_seq, old_number)
                progress(read, left)
        with self._lock:
            self._compaction_wanted = True
            self._cv.notify_all()

    def checkpoint(self, dest: str | os.PathLike[str]) -> None:
        """Write a consistent copy of this database to the new directory ``dest``, which
        opens as a database of its own: every write acknowledged before the call is in
        it. Tables are hard-linked (copied across file systems), so it is quick and takes
        little space. A tiered database's cloud tables are shared and kept by a pin in the
        bucket: that checkpoint opens read-only with ``object_store=`` until
        :func:`rocksmash.detach_checkpoint` makes it local. See :mod:`rocksmash.checkpoint`."""
        make_checkpoint(self, os.fspath(dest))

    def stats(self) -> dict[str, Any]:
        """Counters and the shape of the tree, as plain data."""
        with self._lock:
            v = self._version
            base, targets = level_targets(v, self.options)
            out = dict(self._stats)
            out.update({
                "sequence": self._seq,
                "memtable_bytes": self._mem.size,
                "memtable_entries": self._mem.count,
                "immutable_memtables": len(self._imm),
                "snapshots": len(self._snapshots),
                "levels": [{"level": i, "files": len(lvl), "bytes": sum(f.size for f in lvl),
                            "target_bytes": int(targets[i])}
                           for i, lvl in enumerate(v.levels)],
                "base_level": base,
                "table_bytes": sum(f.size for _, f in v.files()),
                "block_cache": self._cache.stats(),
                "row_cache": (self._row_cache.stats() if self._row_cache is not None else
                              {"capacity": 0, "used": 0, "rows": 0, "hits": 0, "misses": 0}),
                "background_error": repr(self._bg_error) if self._bg_error else None,
            })
            if self._cloud is not None:
                cloud_files = [f for _, f in v.files() if f.tier == CLOUD]
                cloud_bytes = sum(f.size for f in cloud_files)
                meta_bytes = self._meta_cache.total_bytes()
                out["cloud"] = {
                    "epoch": self._cloud.epoch,
                    "first_cloud_level": first_cloud_level(v, self.options),
                    "local_table_bytes": out["table_bytes"] - cloud_bytes,
                    "cloud_table_bytes": cloud_bytes,
                    "cloud_tables": len(cloud_files),
                    "meta_cache_bytes": meta_bytes,
                    "meta_bytes_pct_of_cloud": (100.0 * meta_bytes / cloud_bytes
                                                if cloud_bytes else 0.0),
                    "data_cache": self._data_cache.stats(),
                    "key_cache": (self._data_cache.rows.stats() if self._data_cache.rows
                                  else None),
                    "footprint": self._footprint(),
                    "object_store": self._cloud.traffic(),
                    "objects_waiting_deletion": len(self._pub.dead),  # type: ignore[union-attr]
                    "waiting_deletion": self._pub.waiting(),  # type: ignore[union-attr]
                    "backed_up_tables": len(self._pub.backups),  # type: ignore[union-attr]
                    # local tables made since the last publish (WAL shipping on)
                    "publish_pending": self._backup_wanted and self._shipping != "off",
                    "wal_shipping": (self._shipper.stats() if self._shipper is not None
                                     else {"mode": "off"}),
                }
        return out

    def close(self) -> None:
        """Stop background work and release the database. A running job may finish
        first, for up to ``stall_timeout``; then its worker process is killed.

        Unflushed memtables need no flush: their WAL segments are replayed at next open.
        Every WAL segment is synced first, so a ``sync=True`` write racing with close
        either completes durably or raises ClosedError. In a child made by ``fork``, close
        only lets go of this handle: the parent's lock, files and workers stay its own.
        """
        if self._forked:
            self._closed = True
            return
        with self._lock:
            if self._closed:
                return
            self._closing = True
            self._cv.notify_all()
        deadline = time.monotonic() + self.options.stall_timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self._threads) and self._pool is not None:
            # A job still running after stall_timeout (a stopped or hung worker): stop
            # its process. What it was making is made again from what it read (the WAL
            # segment, the input tables), so nothing is lost; its thread then sees the
            # close and ends.
            self._pool.kill_jobs_of(self)
        for t in self._threads:
            t.join()
        if self._shipper is not None:
            self._shipper.stop(_SHIP_AT_CLOSE_TIMEOUT)  # what is left of the WAL
        with self._lock:
            self._closed = True
        _open_dbs.discard(self)
        with self._sync_lock:
            for w in self._old_wals + [self._wal]:
                try:
                    w.sync()
                except OSError:
                    pass  # unsynced writes were acknowledged as not synced; a crash test
                w.close()
            self._old_wals = []
        self._manifest.close()
        self._cache.clear()
        for _, f in self._version.files():  # live iterators on them now raise ClosedError
            f.table.close()
        if self._cloud is not None:
            try:
                self._collect_dead_objects(force=True)
            except Error:
                pass  # left for the garbage collection at the next open
        self._release()

    def _release(self) -> None:
        """Close the caches and the store and drop the lock."""
        if self._cloud is not None:
            self._data_cache.close()
            self._cloud.close()
        self._file_lock.release()

    def _abandon(self) -> None:
        """After a failed open: release everything that was acquired, never raising (the
        open's own error is the one to see), so the next open can succeed."""
        if getattr(self, "_fresh", False):
            # A new database whose open failed: leave no half-made one behind (a retry
            # starts again from the bucket). Other files go at the next open.
            try:
                self._env.remove(os.path.join(self.path, filenames.CURRENT))
            except OSError:
                pass
        shipper = getattr(self, "_shipper", None)
        if shipper is not None:
            shipper.stop(1.0)
        held = [*getattr(self, "_old_wals", []), getattr(self, "_wal", None),
                getattr(self, "_manifest", None), getattr(self, "_data_cache", None),
                getattr(self, "_cloud", None), self._file_lock]
        for thing in held:
            try:
                if thing is self._file_lock:
                    thing.release()
                elif thing is not None:
                    thing.close()
            except Exception:
                pass

    def _after_fork_in_child(self) -> None:
        """This process is a ``fork`` child: the handle belongs to the parent. Every call
        here raises ClosedError (writing would put a second writer on the same WAL)."""
        self._forked = True
        self._closed = True
        self._stall = True

    def __enter__(self) -> "DB":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<rocksmash.DB {self.path!r}{' closed' if self._closed else ''}>"


# A DB is a mapping of bytes to bytes (``len`` is exact but scans: see __len__).
collections.abc.MutableMapping.register(DB)
