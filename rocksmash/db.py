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

import heapq
import os
import threading
import time
import uuid
from bisect import bisect_left
from typing import Any, Iterator

from sortedcontainers import SortedList

from . import filenames
from .block_cache import BlockCache
from .bloom import key_hash
from .compaction import Compaction, level_targets, pick_compaction, range_compaction
from .env import FileLock, LocalFile, fsync_dir
from .errors import ClosedError, CorruptionError, Error, InvalidArgumentError, InvalidTypeError
from .jobs import JOBS
from .manifest import Manifest, load_manifest
from .memtable import MISSING, Memtable
from .options import Options
from .table import Table
from .table_builder import TableInfo
from .version import FileMeta, Version, VersionEdit
from .wal import WalWriter, read_segment_header
from .worker import WorkerDied, WorkerProcess
from .write_batch import WriteBatch, encode_batch, encode_delete, encode_put

__all__ = ["DB", "Snapshot", "DBIterator"]

#: A manifest larger than this is rewritten as a fresh snapshot.
_MANIFEST_ROLL_SIZE = 16 << 20


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

    def get(self, key: bytes) -> bytes | None:
        if self._closed:
            raise ClosedError("snapshot is closed")
        return self._db.get(key, snapshot=self)

    def scan(self, start: bytes | None = None, end: bytes | None = None, *,
             reverse: bool = False) -> "DBIterator":
        return self._db.scan(start, end, reverse=reverse, snapshot=self)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._db._release_snapshot(self.seq)

    def __enter__(self) -> "Snapshot":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not self._closed:
            self._closed = True
            self._db._deferred_releases.append(self.seq)  # list.append takes no lock


class DBIterator:
    """Iterator of ``(key, value)`` from :meth:`DB.scan`. Close it (or exhaust it, or use
    it as a context manager) to release the implicit snapshot it holds."""

    __slots__ = ("_db", "_gen", "_snap", "__weakref__")

    def __init__(self, db: "DB", gen: Iterator[tuple[bytes, bytes]],
                 snap: Snapshot | None) -> None:
        self._db = db
        self._gen = gen
        self._snap = snap

    def __iter__(self) -> "DBIterator":
        return self

    def __next__(self) -> tuple[bytes, bytes]:
        if self._db._closed:
            raise ClosedError("database is closed")
        try:
            return next(self._gen)
        except StopIteration:
            self.close()
            raise

    def close(self) -> None:
        if self._snap is not None:
            self._snap.close()
            self._snap = None

    def __enter__(self) -> "DBIterator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        snap, self._snap = self._snap, None
        if snap is not None:
            snap.__del__()


def _dedupe_forward(merged: Iterator[tuple[bytes, int, bytes | None]]
                    ) -> Iterator[tuple[bytes, bytes]]:
    """From (key, -seq) ascending entries, the newest version of each live key."""
    last = None
    for key, _, value in merged:
        if key == last:
            continue
        last = key
        if value is not None:
            yield key, value


def _dedupe_reverse(merged: Iterator[tuple[bytes, int, bytes | None]]
                    ) -> Iterator[tuple[bytes, bytes]]:
    """From (key, -seq) descending entries (oldest version of a key first), the newest."""
    cur: bytes | None = None
    cur_value: bytes | None = None
    for key, _, value in merged:
        if key != cur:
            if cur is not None and cur_value is not None:
                yield cur, cur_value
            cur = key
        cur_value = value
    if cur is not None and cur_value is not None:
        yield cur, cur_value


class DB:
    """An open rocksmash database. Create with :func:`rocksmash.open`.

    Thread-safe: any number of threads may read and write concurrently. Keys and values
    are ``bytes``; other types raise :class:`InvalidTypeError` (a ``TypeError``).
    Errors are documented in :mod:`rocksmash.errors`.
    """

    def __init__(self, path: str | os.PathLike[str], options: Options) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.options = options
        self._closed = True
        if os.path.exists(os.path.join(self.path, filenames.CURRENT)):
            if options.error_if_exists:
                raise InvalidArgumentError(f"{self.path}: database exists (error_if_exists)")
        elif not options.create_if_missing:
            raise InvalidArgumentError(f"{self.path}: no database here (create_if_missing "
                                       f"is False)")
        os.makedirs(self.path, exist_ok=True)
        self._file_lock = FileLock(os.path.join(self.path, filenames.LOCK))
        try:
            self._init_state()
            self._recover()
        except BaseException:
            self._shutdown_workers()
            self._file_lock.release()
            raise
        self._closed = False
        for name, target in (("flush", self._flush_loop), ("compaction", self._compaction_loop)):
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
        self._cache = BlockCache(opts.block_cache_size)
        self._snapshots: SortedList = SortedList()
        #: Snapshots released by the garbage collector, applied under the lock later
        #: (a finalizer must never take the lock: it may run while this thread holds it).
        self._deferred_releases: list[int] = []
        #: Replaced memtable versions with seq <= this are kept (max live snapshot).
        self._keep_upto = -1
        self._closing = False
        self._bg_error: BaseException | None = None
        self._stall = False
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
        lock_fd = self._file_lock.fileno()
        self._flush_worker = WorkerProcess(lock_fd) if opts.background_processes else None
        self._compaction_worker = (WorkerProcess(lock_fd) if opts.background_processes
                                   else None)
        self._stats: dict[str, Any] = {
            "flushes": 0, "compactions": 0, "trivial_moves": 0, "flush_bytes": 0,
            "compaction_bytes_read": 0, "compaction_bytes_written": 0, "stall_seconds": 0.0,
            "recovered_segments": 0, "torn_wal_tails": 0,
        }

    def _recover(self) -> None:
        """Load the manifest, replay leftover WAL segments into L0 tables, start afresh.

        Every segment at or after the manifest's log number holds writes that never
        reached a table; each is replayed into the table its header names (the same
        replay as a flush). Then a new manifest snapshot is written and CURRENT swapped,
        and everything unreferenced is deleted.
        """
        state = load_manifest(self.path)
        levels: list[list[FileMeta]]
        if state is None:
            levels = [[] for _ in range(self.options.num_levels)]
            log_number, next_file, last_seq = 0, 2, 0
        else:
            levels = [list(lvl) for lvl in state.version.levels]
            if len(levels) != self.options.num_levels:
                raise InvalidArgumentError(
                    f"num_levels={self.options.num_levels} but the database has "
                    f"{len(levels)} levels")
            log_number, next_file, last_seq = state.log_number, state.next_file, state.last_seq
        names = os.listdir(self.path)
        for name in names:
            parsed = filenames.parse_name(name)
            if parsed:
                next_file = max(next_file, parsed[1] + 1)
        live = {f.number for lvl in levels for f in lvl}
        for f in (f for lvl in levels for f in lvl):
            path = os.path.join(self.path, filenames.table_name(f.number))
            if not os.path.exists(path):
                raise CorruptionError(f"table {filenames.table_name(f.number)} is missing")
        segments = sorted(p[1] for p in map(filenames.parse_name, names)
                          if p and p[0] == "log" and p[1] >= log_number)
        for number in segments:
            path = os.path.join(self.path, filenames.segment_name(number))
            header = read_segment_header(path)
            if header is None:  # cut short while being created: holds no writes
                continue
            next_file = max(next_file, header.table_number + 1)
            result = self._run_job(self._flush_worker, "flush_segment", segment_path=path,
                                   table_path=os.path.join(
                                       self.path, filenames.table_name(header.table_number)),
                                   opts=self._job_opts, snapshots=[])
            last_seq = max(last_seq, result["last_seq"])
            self._stats["recovered_segments"] += 1
            self._stats["torn_wal_tails"] += int(result["torn"])
            info: TableInfo | None = result["table"]
            if info is not None:
                f = FileMeta(header.table_number, info.size, info.smallest, info.largest,
                             info.min_seq, info.max_seq)
                levels[0].append(f)
                live.add(f.number)
        for f in (f for lvl in levels for f in lvl):
            f.table = self._open_table(f.number)
        version = Version(levels)
        self._version = version
        self._seq = last_seq
        self._next_file = next_file
        self._mem = Memtable(*self._new_numbers(2))
        self._imm: list[Memtable] = []
        self._wal = WalWriter(self.path, self._mem.segment, self._mem.table_number,
                              last_seq + 1)
        self._manifest = Manifest.create(self.path, self._take_number(), version,
                                         log_number=self._mem.segment,
                                         next_file=self._next_file, last_seq=last_seq)
        self._log_number = self._mem.segment
        keep = {filenames.manifest_name(self._manifest.number), filenames.segment_name(
            self._mem.segment)} | {filenames.table_name(n) for n in live}
        for name in names:
            if name in keep or name in (filenames.CURRENT, filenames.LOCK):
                continue
            if filenames.parse_name(name) or name.endswith(".tmp"):
                try:
                    os.unlink(os.path.join(self.path, name))
                except FileNotFoundError:
                    pass
        fsync_dir(self.path)
        self._update_stall()

    def _open_table(self, number: int) -> Table:
        path = os.path.join(self.path, filenames.table_name(number))
        return Table(number, LocalFile(path), self._cache, filenames.table_name(number))

    def _take_number(self) -> int:
        n = self._next_file
        self._next_file += 1
        return n

    def _new_numbers(self, count: int) -> list[int]:
        return [self._take_number() for _ in range(count)]

    def _run_job(self, worker: WorkerProcess | None, job: str, **kwargs: Any) -> Any:
        """Run a job in ``worker`` (or inline); a worker that died is restarted once."""
        if worker is None:
            return JOBS[job](**kwargs)
        try:
            return worker.call(job, **kwargs)
        except WorkerDied:
            return worker.call(job, **kwargs)

    # ----------------------------------------------------------------- writes

    def put(self, key: bytes, value: bytes, sync: bool | None = None) -> None:
        """Set ``key`` to ``value``. With ``sync=True`` the WAL is fsynced before return."""
        if type(key) is not bytes or type(value) is not bytes:
            WriteBatch().put(key, value)  # raises the right InvalidTypeError
        if len(key) > self._max_key or len(value) > self._max_value:
            self._check_sizes(key, value)
        with self._lock:
            if self._stall or self._closed:
                self._wait_for_room()
            seq = self._seq + 1
            wal = self._wal
            end = self._wal_add(encode_put(seq, key, value))
            mem = self._mem
            mem.put(key, seq, value, self._keep_upto)
            self._seq = seq
            if mem.size >= self._memtable_size:
                self._switch_memtable()
        if sync or (sync is None and self._default_sync):
            self._sync_wal(wal, end)

    def delete(self, key: bytes, sync: bool | None = None) -> None:
        """Remove ``key`` (no error if it is absent)."""
        if type(key) is not bytes:
            WriteBatch().delete(key)
        if len(key) > self._max_key:
            self._check_sizes(key, b"")
        with self._lock:
            if self._stall or self._closed:
                self._wait_for_room()
            seq = self._seq + 1
            wal = self._wal
            end = self._wal_add(encode_delete(seq, key))
            mem = self._mem
            mem.put(key, seq, None, self._keep_upto)
            self._seq = seq
            if mem.size >= self._memtable_size:
                self._switch_memtable()
        if sync or (sync is None and self._default_sync):
            self._sync_wal(wal, end)

    def write(self, batch: WriteBatch, sync: bool | None = None) -> None:
        """Apply every operation of ``batch`` atomically: all of them survive a crash or
        none does, and no reader sees some without the others."""
        if not isinstance(batch, WriteBatch):
            raise InvalidTypeError(f"expected a WriteBatch, not {type(batch).__name__}")
        ops = list(batch.ops)
        if not ops:
            return
        for key, value in ops:
            if len(key) > self._max_key or (value is not None and len(value) > self._max_value):
                self._check_sizes(key, value or b"")
        with self._lock:
            if self._stall or self._closed:
                self._wait_for_room()
            seq = self._seq + 1
            wal = self._wal
            end = self._wal_add(encode_batch(seq, ops))
            mem = self._mem
            # Keep every replaced version until ``_seq`` is published: a reader may
            # look up a key this batch already overwrote while the rest is applied.
            keep = self._seq if len(ops) > 1 else self._keep_upto
            for i, (key, value) in enumerate(ops):
                mem.put(key, seq + i, value, keep)
            self._seq = seq + len(ops) - 1
            if mem.size >= self._memtable_size:
                self._switch_memtable()
        if sync or (sync is None and self._default_sync):
            self._sync_wal(wal, end)

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.put(key, value)

    def __delitem__(self, key: bytes) -> None:
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

    def _wal_add(self, payload: bytes) -> int:
        """Append to the WAL (write lock held). A failed append poisons the database for
        writes: a partial record may be on disk, and nothing may follow it."""
        try:
            return self._wal.add(payload)
        except OSError as e:
            err = Error(f"WAL write failed: {e}; reopen the database to recover")
            self._bg_error = err
            raise err from e

    def _wait_for_room(self) -> None:
        """Block (write lock held) while memtables or L0 are full; raise if closed/failed."""
        started = time.monotonic()
        while True:
            if self._closed or self._closing:
                raise ClosedError("database is closed")
            if self._bg_error is not None:
                raise Error(f"database is read-only after a background error: "
                            f"{self._bg_error}") from self._bg_error
            if not self._stall:
                break
            self._cv.wait(1.0)
        self._stats["stall_seconds"] += time.monotonic() - started

    def _update_stall(self) -> None:
        opts = self.options
        self._stall = (len(self._imm) >= opts.max_immutable_memtables
                       or len(self._version.levels[0]) >= opts.l0_stop_writes_trigger
                       or self._bg_error is not None)

    def _switch_memtable(self) -> None:
        """Seal the memtable and cut a new WAL segment (write lock held)."""
        seg, table = self._new_numbers(2)
        wal = WalWriter(self.path, seg, table, self._seq + 1)
        with self._sync_lock:
            self._old_wals.append(self._wal)
            self._wal = wal
        self._imm = [self._mem] + self._imm  # publish the sealed one before replacing it
        self._mem = Memtable(seg, table)
        self._update_stall()
        self._cv.notify_all()

    def _sync_wal(self, wal: WalWriter, end: int) -> None:
        """Group commit: make the WAL durable up to ``end`` of ``wal``."""
        with self._sync_lock:
            if wal.synced >= end:
                return
            for old in self._old_wals:  # earlier segments first: no holes after a crash
                old.sync()
            wal.sync()

    # ----------------------------------------------------------------- reads

    def get(self, key: bytes, default: bytes | None = None, *,
            snapshot: Snapshot | None = None) -> bytes | None:
        """The value of ``key``, or ``default`` (None) if it is absent."""
        if type(key) is not bytes:
            raise InvalidTypeError(f"key must be bytes, not {type(key).__name__}")
        if self._closed:
            raise ClosedError("database is closed")
        if snapshot is None:
            seq = self._seq
        else:
            if snapshot._closed or snapshot._db is not self:
                raise ClosedError("snapshot is closed or belongs to another database")
            seq = snapshot.seq
        e = self._mem.entries.get(key)
        if e is None:
            value = self._get_below(key, seq)
        elif e[0] <= seq:
            value = e[1]
        else:
            e = self._mem.visible(key, seq)
            value = self._get_below(key, seq) if e is None else e[1]
        return default if value is None else value

    def _get_below(self, key: bytes, seq: int) -> bytes | None:
        """Look ``key`` up below the active memtable: sealed memtables, then tables.

        Hot path, written out by hand: one hash per lookup serves every table's filter
        (word index from its low 32 bits, in-word mask from the next 14; see bloom.py).
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
                n = t.fnwords
                if n:
                    m = t.fmasks[mi]
                    if t.fwords[word % n] & m != m:
                        continue
                r = t.get(key, seq)
                if r is not MISSING:
                    return r  # type: ignore[return-value]
        for largest, smallest, tables in v.level_search:
            i = bisect_left(largest, key)
            if i < len(largest) and smallest[i] <= key:
                t = tables[i]
                n = t.fnwords
                if n:
                    m = t.fmasks[mi]
                    if t.fwords[word % n] & m != m:
                        continue
                r = t.get(key, seq)
                if r is not MISSING:
                    return r  # type: ignore[return-value]
        return None

    def multi_get(self, keys: list[bytes], *, snapshot: Snapshot | None = None
                  ) -> list[bytes | None]:
        """Values of ``keys`` (None where absent), all read at one sequence number."""
        if snapshot is None:
            with self.snapshot() as snap:
                return [self.get(k, snapshot=snap) for k in keys]
        return [self.get(k, snapshot=snapshot) for k in keys]

    def __getitem__(self, key: bytes) -> bytes:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return self.get(key) is not None  # type: ignore[arg-type]

    def snapshot(self) -> Snapshot:
        """A consistent view of the current state; close it when done."""
        with self._lock:
            if self._closed:
                raise ClosedError("database is closed")
            seq = self._seq
            self._snapshots.add(seq)
            self._live_snapshots()
        return Snapshot(self, seq)

    def _release_snapshot(self, seq: int | None) -> None:
        with self._lock:
            if seq is not None:
                self._snapshots.discard(seq)
            self._live_snapshots()

    def _live_snapshots(self) -> list[int]:
        """Apply deferred releases and return the live snapshot seqs (write lock held)."""
        deferred = self._deferred_releases
        while deferred:
            self._snapshots.discard(deferred.pop())
        self._keep_upto = self._snapshots[-1] if self._snapshots else -1
        return list(self._snapshots)

    def scan(self, start: bytes | None = None, end: bytes | None = None, *,
             reverse: bool = False, snapshot: Snapshot | None = None) -> DBIterator:
        """Iterate ``(key, value)`` with ``start <= key < end`` in key order (descending
        with ``reverse=True``), as of ``snapshot`` or of the call."""
        for name, bound in (("start", start), ("end", end)):
            if bound is not None and type(bound) is not bytes:
                raise InvalidTypeError(f"{name} must be bytes or None, not "
                                       f"{type(bound).__name__}")
        own: Snapshot | None = None
        if snapshot is None:
            own = snapshot = self.snapshot()
        elif snapshot._closed or snapshot._db is not self:
            raise ClosedError("snapshot is closed or belongs to another database")
        if start is not None and end is not None and start >= end:
            gen: Iterator[tuple[bytes, bytes]] = iter(())
        else:
            gen = self._scan(start, end, reverse, snapshot.seq)
        return DBIterator(self, gen, own)

    def _scan(self, start: bytes | None, end: bytes | None, reverse: bool,
              seq: int) -> Iterator[tuple[bytes, bytes]]:
        mem, imm, v = self._mem, self._imm, self._version
        sources: list[Iterator[tuple[bytes, int, bytes | None]]] = [
            mem.scan(start, end, reverse, seq, self._lock)]
        sources += [m.scan(start, end, reverse, seq, None) for m in imm]
        last_key = None
        if end is not None:
            # [start, end) as an inclusive upper bound for file overlap tests.
            last_key = end
        for f in v.levels[0]:
            if f.overlaps(start, last_key):
                sources.append(f.table.scan(start, end, reverse, seq))
        for level in range(1, v.num_levels):
            if v.levels[level]:
                sources.append(self._level_scan(v, level, start, end, reverse, seq))
        merged = heapq.merge(*sources, reverse=reverse) if len(sources) > 1 else sources[0]
        return _dedupe_reverse(merged) if reverse else _dedupe_forward(merged)

    @staticmethod
    def _level_scan(v: Version, level: int, start: bytes | None, end: bytes | None,
                    reverse: bool, seq: int) -> Iterator[tuple[bytes, int, bytes | None]]:
        files = v.levels[level]
        lo = 0 if start is None else v.start_index(level, start)
        hi = len(files) if end is None else v.end_index(level, end)
        order = range(hi - 1, lo - 1, -1) if reverse else range(lo, hi)
        for i in order:
            yield from files[i].table.scan(start, end, reverse, seq)

    # ----------------------------------------------------------------- background

    def _flush_loop(self) -> None:
        while True:
            with self._lock:
                while not self._closing and not (self._imm and self._bg_error is None):
                    self._cv.wait()
                if self._closing:
                    return
                mem = self._imm[-1]  # the oldest sealed memtable
                snapshots = self._live_snapshots()
            try:
                self._flush_one(mem, snapshots)
            except BaseException as e:  # stop writes; reads and reopen still work
                self._fail(e)
                return

    def _flush_one(self, mem: Memtable, snapshots: list[int]) -> None:
        seg_path = os.path.join(self.path, filenames.segment_name(mem.segment))
        table_path = os.path.join(self.path, filenames.table_name(mem.table_number))
        result = self._run_job(self._flush_worker, "flush_segment", segment_path=seg_path,
                               table_path=table_path, opts=self._job_opts,
                               snapshots=snapshots)
        info: TableInfo | None = result["table"]
        with self._version_lock:
            edit = VersionEdit(next_file=self._next_file, last_seq=result["last_seq"])
            with self._lock:
                # Writes before the next sealed memtable's segment are all in tables now.
                edit.log_number = (self._imm[-2].segment if len(self._imm) > 1
                                   else self._mem.segment)
            if info is not None:
                f = FileMeta(mem.table_number, info.size, info.smallest, info.largest,
                             info.min_seq, info.max_seq)
                f.table = self._open_table(f.number)
                edit.added.append((0, f))
                fsync_dir(self.path)  # the table's directory entry, before the edit
            self._log_edit(edit)
            with self._lock:
                self._version = self._version.apply(edit)  # the table first, then
                self._imm = self._imm[:-1]                   # drop its memtable
                self._stats["flushes"] += 1
                self._stats["flush_bytes"] += info.size if info else 0
                self._compaction_wanted = True
                self._update_stall()
                self._cv.notify_all()
        with self._sync_lock:
            for w in [w for w in self._old_wals if w.number == mem.segment]:
                w.close()
                self._old_wals.remove(w)
        try:
            os.unlink(seg_path)
        except FileNotFoundError:
            pass

    def _log_edit(self, edit: VersionEdit) -> None:
        """Make ``edit`` durable (``_version_lock`` held), rolling the manifest if large."""
        if edit.log_number is not None:
            self._log_number = edit.log_number
        if self._manifest.size > _MANIFEST_ROLL_SIZE:
            old = self._manifest
            v = self._version.apply(edit)
            self._manifest = Manifest.create(
                self.path, self._take_number(), v, log_number=self._log_number,
                next_file=self._next_file, last_seq=max(edit.last_seq or 0, self._seq))
            old.close()
            os.unlink(os.path.join(self.path, filenames.manifest_name(old.number)))
            return
        self._manifest.log(edit)

    def _compaction_loop(self) -> None:
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
            except BaseException as e:
                self._fail(e)
                return

    def _run_compaction(self, c: Compaction) -> None:
        """Execute ``c`` and install its result (``_compaction_mutex`` held: one
        compaction at a time, from the compaction thread or compact_range)."""
        edit = VersionEdit(deleted=[(lvl, f.number) for lvl, f in c.inputs])
        outputs: list[FileMeta] = []
        if c.trivial_move:
            (lvl, f), = c.inputs
            moved = FileMeta(f.number, f.size, f.smallest, f.largest, f.min_seq, f.max_seq,
                             f.table)
            edit.added.append((c.output_level, moved))
        else:
            with self._lock:
                snapshots = self._live_snapshots()
            prefix = f"tmp-{uuid.uuid4().hex[:12]}"
            runs = [[os.path.join(self.path, filenames.table_name(f.number)) for f in run]
                    for run in c.runs]
            infos: list[TableInfo] = self._run_job(
                self._compaction_worker, "compact", runs=runs, out_dir=self.path,
                out_prefix=prefix, opts=self._job_opts, snapshots=snapshots,
                bottommost=c.bottommost, target_file_size=self.options.target_file_size)
            with self._version_lock:
                numbers = self._new_numbers(len(infos))
            for n, info in zip(numbers, infos):
                os.rename(info.path, os.path.join(self.path, filenames.table_name(n)))
                f = FileMeta(n, info.size, info.smallest, info.largest, info.min_seq,
                             info.max_seq)
                f.table = self._open_table(n)
                outputs.append(f)
                edit.added.append((c.output_level, f))
            fsync_dir(self.path)
        with self._version_lock:
            edit.next_file = self._next_file
            self._log_edit(edit)
            with self._lock:
                self._version = self._version.apply(edit)
                self._stats["compactions"] += 1
                if c.trivial_move:
                    self._stats["trivial_moves"] += 1
                else:
                    self._stats["compaction_bytes_read"] += c.input_bytes
                    self._stats["compaction_bytes_written"] += sum(f.size for f in outputs)
                self._update_stall()
                self._cv.notify_all()
        if not c.trivial_move:
            for _, f in c.inputs:  # open readers keep their descriptors (POSIX)
                self._cache.drop_table(f.table)
                try:
                    os.unlink(os.path.join(self.path, filenames.table_name(f.number)))
                except FileNotFoundError:
                    pass

    def _fail(self, e: BaseException) -> None:
        if self._closing:
            return
        with self._lock:
            if self._bg_error is None:
                self._bg_error = e
            self._update_stall()
            self._cv.notify_all()

    def _shutdown_workers(self) -> None:
        for w in (getattr(self, "_flush_worker", None), getattr(self, "_compaction_worker", None)):
            if w is not None:
                w.stop()

    # ----------------------------------------------------------------- maintenance

    def flush(self) -> None:
        """Write the memtable to a table and wait until every sealed memtable is flushed."""
        with self._lock:
            if self._closed:
                raise ClosedError("database is closed")
            if self._mem.count:
                while self._stall and self._bg_error is None and not self._closing:
                    self._cv.wait(1.0)
                self._switch_memtable()
            while self._imm and self._bg_error is None and not self._closing:
                self._cv.wait(1.0)
            if self._bg_error is not None:
                raise Error(f"flush failed: {self._bg_error}") from self._bg_error

    def compact_range(self, start: bytes | None = None, end: bytes | None = None) -> None:
        """Flush, then merge everything with ``start <= key <= end`` into the last level,
        dropping overwritten versions and deletions. Blocks until done."""
        for name, bound in (("start", start), ("end", end)):
            if bound is not None and type(bound) is not bytes:
                raise InvalidTypeError(f"{name} must be bytes or None")
        self.flush()
        with self._compaction_mutex:
            with self._version_lock:
                c = range_compaction(self._version, start, end)
            if c is not None:
                self._run_compaction(c)
        with self._lock:
            self._compaction_wanted = True
            self._cv.notify_all()

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
                "block_cache": {"capacity": self._cache.capacity, "used": self._cache.used,
                                "hits": self._cache.hits, "misses": self._cache.misses},
                "background_error": repr(self._bg_error) if self._bg_error else None,
            })
        return out

    def close(self) -> None:
        """Stop background work (a running job finishes first) and release the database.

        Unflushed memtables need no flush: their WAL segments are replayed at next open.
        """
        with self._lock:
            if self._closed:
                return
            self._closing = True
            self._cv.notify_all()
        for t in self._threads:
            t.join()
        with self._lock:
            self._closed = True
        self._shutdown_workers()
        with self._sync_lock:
            for w in self._old_wals + [self._wal]:
                w.close()
            self._old_wals = []
        self._manifest.close()
        self._cache.clear()
        self._file_lock.release()

    def __enter__(self) -> "DB":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<rocksmash.DB {self.path!r}{' closed' if self._closed else ''}>"
