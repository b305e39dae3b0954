"""Readers of a tiered database from its bucket alone, following the writer.

``rocksmash.open(path, read_only=True, object_store=URL)`` opens a :class:`BucketReader`:
a read-only view built from what the writer publishes in the bucket, with no access to
the writer's machine. ``path`` is the reader's own local directory, for its caches (the
MetaCache and DataCache of the cloud tables); it is created if missing. Any number of
readers, on any number of machines, may follow one writer (SlateDB's ``DbReader``).

The view (decision 0021):

* the newest manifest mirror's tables: the cloud tables and the backups of the writer's
  local tables (a mirror names a whole version; decision 0006), all read from the bucket;
* the writer's shipped WAL objects of segments at or after the mirror's ``log_number``,
  parsed into one memtable: every write shipped so far. In the writer's default
  ``wal_shipping="interval"`` mode, a write is visible to readers within about one
  ``wal_ship_interval`` (100 ms) plus the reader's refresh interval.

Following: every ``reader_refresh_interval`` (default 1 s; 0: only on :meth:`refresh`) a
background thread lists the mirrors and the WAL objects (two LIST requests) and reads
what is new. New WAL records go into the memtable as a writer's writes do. A new mirror
replaces the view (its tables, and a memtable rebuilt from the segments it does not
cover). The swap waits while a snapshot or an iterator is open (an exhausted iterator
holds nothing: iterator.py), because a snapshot's sequence number is only meaningful
against the view it was taken in (the writer's compactions drop versions no reader of its
own needs); new WAL records still arrive then.

A table the writer compacted away and deleted while this view still names it makes a read
fail with UnavailableError (not CorruptionError: nothing is damaged, the view is old). A
``get`` then refreshes and reads again; if the view cannot move on (a snapshot or
iterator is open) it raises UnavailableError saying so. An iterator or snapshot read
that finds its table deleted raises it too: the writer keeps retired tables for
``retired_object_grace`` (60 s), so one that stays open longer than that while the writer
compacts may have to be opened again. A missing table that the newest mirror still names
was not deleted by the writer (it never deletes what its newest mirror names): the bucket
lost it, and every read of it, the open's included, raises CorruptionError saying so.

The writer must ship its WAL (``wal_shipping`` other than ``"off"``): otherwise its mirror
does not name its local tables, and a reader would miss them (InvalidArgumentError).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from cloudtier import NotFoundError, StoreError

from .cloud import (MIRROR_FORMATS, MIRRORS, CloudTier, WalObject, decode_object, mirror_key,
                    store_errors)
from .db import DB, _open_dbs
from .env import POSIX, path_error
from .errors import CorruptionError, Error, InvalidArgumentError, UnavailableError
from .log_format import CLEAN, read_records
from .memtable import Memtable
from .options import Options
from .range_del import RangeEnd
from .read_only import ReadOnlyDB
from .table import Table
from .version import CLOUD, Version
from .wal import HEADER_SIZE
from .write_batch import decode_batch, is_valid_batch

__all__ = ["BucketReader"]

#: Reads of a view whose objects vanished, retried after a refresh.
_READ_ATTEMPTS = 3


class BucketReader(ReadOnlyDB):
    """A read-only view of a tiered database, from its bucket (see the module docstring).

    Thread-safe. Writes raise InvalidArgumentError, as on :class:`ReadOnlyDB`.
    """

    def __init__(self, path: str | os.PathLike[str], options: Options) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.options = options
        self._closed = True
        self._forked = False
        self._env = POSIX
        try:
            POSIX.makedirs(self.path)
        except OSError as e:
            raise path_error(f"creating {self.path}", e) from e
        self._init_state()
        self._rows = None  # no row cache: the view's values change under it
        self._row_cache = None
        self._stats.update({"read_only": True, "reader_refreshes": 0, "reader_swaps": 0,
                            "reader_swaps_deferred": 0, "reader_refresh_errors": 0,
                            "reader_wal_objects": 0})
        assert self._cloud is not None
        self._cloud.db_id = None  # accept the bucket's database, whichever it is
        self._cloud.tables_vanish = self._missing_table
        #: Odd while a view swap is in progress (a seqlock for lock-free gets).
        self._view_gen = 0
        self._generation = 0  # the mirror generation of the view
        self._log_number = 0
        self._tables: dict[str, Table] = {}
        self._wal_objects: dict[int, WalObject] = {}  # data objects read, by number
        #: Data objects dropped as covered by the view's tables, not to be read again
        #: (a writer keeps its last one in the bucket: CloudTier.delete_wal).
        self._covered: set[int] = set()
        self._applied: set[int] = set()  # of those, the ones in the memtable
        self._refresh_lock = threading.Lock()
        self._stop = threading.Event()
        self._version = Version([[] for _ in range(options.num_levels)])
        self._mem = Memtable(0, 0)
        self._imm: list[Memtable] = []
        self._seq = 0
        #: The sequence number the next WAL record applied must start with (None: that of
        #: the first record of the mirror's log_number segment, not read yet).
        self._next_seq: int | None = None
        try:
            self.refresh()
            if not self._generation:
                raise InvalidArgumentError("object_store: the prefix holds no database "
                                           "(no manifest mirror)")
        except BaseException:
            self._release_cloud()
            raise
        self._closed = False
        _open_dbs.add(self)
        self._thread: threading.Thread | None = None
        if options.reader_refresh_interval > 0:
            self._thread = threading.Thread(target=self._follow, daemon=True,
                                            name="rocksmash-reader")
            self._thread.start()

    # ------------------------------------------------------------------ following

    def refresh(self) -> bool:
        """Catch up with the bucket now: read a new mirror and new WAL objects. Return
        True if the view moved to a new mirror (False: at most new WAL records)."""
        with self._refresh_lock:
            return self._refresh()

    def _refresh(self) -> bool:
        cloud = self._cloud
        assert cloud is not None
        try:
            latest = cloud._latest(MIRRORS)
        except StoreError as e:
            raise store_errors("listing the manifest mirrors", e) from e
        mirror = None
        if latest != self._generation:
            mirror = cloud.load_mirror()
        log_number = self._log_number
        if mirror is not None:
            if mirror.get("log_number") is None:
                raise InvalidArgumentError(
                    "object_store: the writer does not ship its WAL (wal_shipping='off'), "
                    "so its mirror does not name its local tables; a reader from the "
                    "bucket would miss them")
            log_number = int(mirror["log_number"])
        self._read_new_wal()
        self._stats["reader_refreshes"] += 1
        moved = False
        if mirror is not None:
            if self._busy() and self._generation:
                self._stats["reader_swaps_deferred"] += 1
            else:
                moved = self._swap(mirror, log_number)
        if not moved:
            self._apply_new_records()
        # WAL objects of segments the view's tables hold are not needed any more.
        for n in [n for n, o in self._wal_objects.items() if o.segment < self._log_number]:
            del self._wal_objects[n]
            self._applied.discard(n)
            self._covered.add(n)
        return moved

    def _read_new_wal(self) -> None:
        """Read the data WAL objects not read yet."""
        cloud = self._cloud
        assert cloud is not None
        numbers = cloud.wal_numbers()
        self._covered.intersection_update(numbers)  # (deleted ones need no memory)
        for n in numbers:
            if n in self._wal_objects or n in self._covered or n in cloud.wal_fences:
                continue
            try:
                obj = cloud.read_wal(n)
            except CorruptionError as e:
                if isinstance(e.__cause__, NotFoundError):
                    continue  # deleted by the writer since the listing: covered
                raise
            if obj.kind == "fence":
                cloud.wal_fences.add(n)
            else:
                self._wal_objects[n] = obj
                self._stats["reader_wal_objects"] += 1

    def _segments(self, log_number: int) -> list[WalObject]:
        """The WAL objects of segments >= ``log_number``, in write order, up to the first
        gap: a writer deletes the objects of segments its newer mirrors cover, so a view
        on an older mirror may find a segment's first objects gone. What follows a gap
        waits for the swap to the newer mirror (a restore, by contrast, refuses a gap:
        restore.group_segments)."""
        out: list[WalObject] = []
        for number in sorted({o.segment for o in self._wal_objects.values()}):
            if number < log_number:
                continue
            if not out and number != log_number:
                # The writer writes into its oldest unflushed segment (the mirror's
                # log_number) before any later one; if that segment's objects are gone,
                # a newer mirror covers them.
                return out
            pos = HEADER_SIZE
            for obj in sorted((o for o in self._wal_objects.values() if o.segment == number),
                              key=lambda o: o.header["offset"]):
                if obj.header["offset"] != pos:
                    return out
                out.append(obj)
                pos = obj.header["end"]
        return out

    def _apply_new_records(self) -> None:
        """New WAL records of the view's segments into the memtable, as writes go in."""
        todo = [o for o in self._segments(self._log_number) if o.number not in self._applied]
        for obj in todo:
            batches = _batches(obj)
            if self._next_seq is None:  # the first records after the view's tables
                self._next_seq = int(obj.header["first_seq"])
            if not _continues(batches, self._next_seq):
                # Records in between are missing: the writer deleted their WAL objects
                # (their tables are in a mirror this view has not moved to). Applying
                # later ones would show a state that never was; wait for the swap.
                self._stats["reader_wal_gaps"] = self._stats.get("reader_wal_gaps", 0) + 1
                break
            with self._lock:
                for seq, ops in batches:
                    if any(isinstance(v, RangeEnd) for _, v in ops):
                        self._ranged = True  # before the new seq is published (see get)
                    self._mem.put_batch(ops, seq, self._keep_upto)
                    self._next_seq = seq + len(ops)
                self._seq = max(self._seq, self._next_seq - 1)  # publish: all or nothing
            self._applied.add(obj.number)

    def _swap(self, mirror: dict[str, Any], log_number: int) -> bool:
        """Make the view ``mirror``'s tables plus a memtable of the segments after it;
        False if a snapshot was taken meanwhile (then nothing changed)."""
        files = CloudTier.mirror_files(mirror)
        levels: list[list[Any]] = [[] for _ in range(self.options.num_levels)]
        tables: dict[str, Table] = {}
        for lvl, f in files:
            if lvl >= len(levels):
                raise InvalidArgumentError(f"num_levels={self.options.num_levels} but the "
                                           f"database has a table at level {lvl}")
            g = f.moved(CLOUD)  # a local table's backup is read like a cloud table
            g.table = tables[g.object_key] = (self._tables.get(g.object_key)
                                              or self._open_table(g))
            levels[lvl].append(g)
        mem = Memtable(0, 0)
        objects = self._segments(log_number)
        # The tables hold every write before the first segment after them. (The tables'
        # own max_seq may be lower: compaction drops tombstones of absent keys.)
        next_seq = int(objects[0].header["first_seq"]) if objects else None
        applied = []
        for obj in objects:
            batches = _batches(obj)
            if next_seq is not None and not _continues(batches, next_seq):
                break  # a gap (see _apply_new_records): the rest comes with a later swap
            for seq, ops in batches:
                mem.put_batch(ops, seq, -1)
                next_seq = seq + len(ops)
            applied.append(obj.number)
        table_seq = max((f.max_seq for _, f in files), default=0)
        last = table_seq if next_seq is None else max(table_seq, next_seq - 1)
        version = Version(levels)
        with self._lock:
            if self._generation and self._live_snapshots():
                self._stats["reader_swaps_deferred"] += 1
                return False  # a snapshot appeared meanwhile: next time
            self._view_gen += 1  # odd: gets in flight will read again
            self._seq = max(self._seq, last)
            self._ranged = True  # (the gets of the swap read the new view's ranges)
            self._version = version
            self._mem = mem
            self._ranged = self._has_ranges()
            self._next_seq = next_seq
            self._view_gen += 1
        self._tables = tables
        self._generation = int(mirror["generation"])
        self._log_number = log_number
        self._applied = set(applied)
        self._stats["reader_swaps"] += 1
        self._stats["reader_generation"] = self._generation
        return True

    def _missing_table(self, key: str) -> Error:
        """The error for a read of table object ``key`` that is not in the bucket (on any
        thread; CloudFile raises it): CorruptionError if the newest mirror names it, as
        the writer never deletes such a table; else UnavailableError, as the writer
        retired and deleted it after its grace while this view still names it. Costs one
        LIST and one GET, on this error path only."""
        cloud = self._cloud
        assert cloud is not None
        newest: dict[str, Any] | None = None
        gen = 0
        try:
            for _ in range(_READ_ATTEMPTS):  # (a newer publish may delete the one listed)
                gen = cloud._latest(MIRRORS)
                try:
                    newest = decode_object(cloud.store.get(mirror_key(gen)), "manifest mirror",
                                           MIRROR_FORMATS) if gen else None
                    break
                except NotFoundError:
                    continue
            named = newest is not None and any(f.object_key == key for _, f in
                                               CloudTier.mirror_files(newest))
        except StoreError as e:
            return UnavailableError(f"{key}: missing from the object store, and reading the "
                                    f"newest manifest mirror to learn why failed ({e})")
        except CorruptionError as e:
            return e
        if named:
            return CorruptionError(
                f"object store: table {key} is missing, and the newest manifest mirror "
                f"(generation {gen}) names it: the bucket lost a table of the database (the "
                f"writer deletes only tables its newest mirror no longer names)")
        return UnavailableError(
            f"{key}: the writer has deleted this table (it left the writer's version more "
            f"than retired_object_grace ago); this reader's view has moved on, so open the "
            f"iterator or snapshot again")

    def _busy(self) -> bool:
        """A snapshot or iterator is open (then the view does not move to a new mirror)."""
        with self._lock:
            return bool(self._live_snapshots())

    def _follow(self) -> None:
        interval = self.options.reader_refresh_interval
        while not self._stop.wait(interval):
            try:
                self.refresh()
            except Error as e:  # the bucket is unreachable or mid-change: next time
                self._stats["reader_refresh_errors"] += 1
                self._stats["last_reader_error"] = repr(e)

    # ------------------------------------------------------------------ reads

    def get(self, key: Any, default: bytes | None = None, *,
            snapshot: Any = None) -> bytes | None:
        if snapshot is not None:
            return DB.get(self, key, default, snapshot=snapshot)
        attempt = 0
        while True:
            gen = self._view_gen
            if gen & 1:  # a swap is in progress; it holds the lock for a moment
                with self._lock:
                    pass
                continue
            generation = self._generation
            try:
                value = DB.get(self, key, default)
            except UnavailableError as e:
                # A table of the view was deleted: the writer has moved on. Read again in
                # the view of its newer mirror.
                attempt += 1
                if not isinstance(e.__cause__, NotFoundError) or attempt >= _READ_ATTEMPTS:
                    raise
                self.refresh()
                if self._generation == generation:  # (the follower may have moved it)
                    if self._busy():
                        raise UnavailableError(
                            "a table this reader's view names was deleted by the writer, "
                            "and the view cannot move to the writer's newer mirror while a "
                            "snapshot or iterator is open; close them and read again") from e
                    raise CorruptionError(  # no newer mirror names what the bucket lost
                        f"object store: a table the newest mirror names is missing "
                        f"({e})") from e.__cause__
                continue
            if self._view_gen == gen:  # no swap meanwhile: one view answered
                return value

    def __repr__(self) -> str:
        return f"<rocksmash.BucketReader {self.path!r}>"

    def close(self) -> None:
        """Stop following and release the caches (nothing in the bucket changes)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        _open_dbs.discard(self)
        self._cache.clear()
        self._release_cloud()



def _batches(obj: WalObject) -> list[tuple[int, list[tuple[bytes, bytes | None]]]]:
    """The write batches of a WAL object's records: (first sequence number, ops)."""
    name = f"WAL object {obj.number}"
    records, _, tail = read_records(obj.records, name=name, valid=is_valid_batch)
    if tail != CLEAN:
        raise CorruptionError(f"object store: {name} holds a damaged record")
    return [decode_batch(p) for p in records]


def _continues(batches: list[tuple[int, list[Any]]], next_seq: int) -> bool:
    """Whether ``batches`` start at ``next_seq`` and follow each other without a gap."""
    for seq, ops in batches:
        if seq != next_seq:
            return False
        next_seq = seq + len(ops)
    return True
