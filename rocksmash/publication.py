"""What a tiered database has published in its bucket, and the objects it must delete.

One :class:`Publication` per open tiered database (the DB calls it with its version lock
held, or during open). It publishes mirrors (cloud.CloudTier.publish_mirror), each naming
one whole version: its cloud tables and, with WAL shipping, a backup of every local table
(uploaded here first where missing) and the WAL segment from which on the WAL objects
hold every later write (decision 0006). It then deletes what only older mirrors named:

- objects of retired cloud tables, once no reader holds their table (an open iterator
  may still read an old version);
- backups of local tables that left the version, once a mirror without them is published
  (a compaction that touches the cloud publishes before it retires its inputs; the others
  wait for the next publish);

both no sooner than ``retired_object_grace`` after they left the version, so that readers
of the bucket on an older mirror (bucket_reader.py) can finish what they read, and no
later than about a second after that and after their last reader let go: a collector
thread deletes them then, so an idle database does not keep paying for them (issue 16:
before, they waited for the next compaction or the close, and a read-only database held
its last compaction's inputs, about the whole data set, for as long as it ran);
- WAL objects of segments below the published ``log_number``;
- at open, after the first publish, every table object no version names (a crashed
  compaction's uploads, a fenced writer's, those the last writer retired and left at
  its close), after the grace too: a reader may still be on the last writer's mirror.

Objects a pin names (a tiered checkpoint's tables: pins.py) are never deleted.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable

from . import filenames
from .cloud import CloudTier
from .errors import Error
from .pins import pinned_keys, write_pin
from .version import CLOUD, LOCAL, FileMeta, Version

if TYPE_CHECKING:
    from .data_cache import DataCache
    from .meta_cache import MetaCache
    from .wal_shipping import WalShipper

__all__ = ["Publication"]


#: How often the collector looks again at a dead object that is past its grace but still
#: held by a reader (a local check, no request).
_HELD_POLL = 1.0
#: How long after a failed delete the collector tries it again.
_RETRY_AFTER = 5.0
#: The longest a close waits for the collector's round of deletes (each one is bounded
#: by the store's retries already).
_STOP_TIMEOUT = 30.0


def _no_reader() -> None:
    """The weak reference of an object no reader holds (a retired backup)."""
    return None


def _key(number: int, epoch: int) -> str:
    return FileMeta(number, 0, b"", b"", 0, 0, None, LOCAL, epoch).object_key


class Publication:
    def __init__(self, cloud: CloudTier, path: str, data_cache: "DataCache",
                 meta_cache: "MetaCache", stats: dict[str, Any], backups: bool,
                 grace: float = 0.0) -> None:
        self.cloud = cloud
        self.path = path
        self.backups_on = backups
        self._dc = data_cache
        self._mc = meta_cache
        self._stats = stats
        self._grace = grace
        #: The WAL shipper, once there is one (its objects are retired here).
        self.shipper: WalShipper | None = None
        #: Local tables with a backup object: number -> the epoch in its key.
        self.backups: dict[int, int] = {}
        #: Backups of tables no longer live that the newest mirror still names: (key,
        #: number), dead after the next publish.
        self._retired_backups: list[tuple[str, int]] = []
        #: Numbers of the local tables whose backups the newest mirror names.
        self._named_backups: set[int] = set()
        #: Objects to delete once nothing reads them and their grace is over: (key, table
        #: number whose cached blocks go with it or None, weakref to the reader,
        #: monotonic time from which it may go). Guarded by ``_cv``: the collector thread
        #: takes entries out while compactions add some.
        self.dead: list[tuple[str, int | None, Callable[[], Any], float]] = []
        self._cv = threading.Condition()
        #: Deletes ``dead`` entries when they are due (started with the first one).
        self._collector: threading.Thread | None = None
        self._stopped = False
        #: WAL objects of segments below this are named by no mirror any more.
        self._wal_below = 0
        #: Object keys that pins name, as of this open plus this writer's own pins: kept
        #: whatever the version says (a release elsewhere is seen at the next open).
        self.pinned: set[str] = set()

    def publish(self, v: Version, *, log_number: int, last_seq: int, next_file: int) -> None:
        """Publish ``v`` (FencedError if another writer took over). ``log_number``: the
        oldest segment whose writes are in no table the mirror names."""
        files = [(lvl, f) for lvl, f in v.files() if f.tier == CLOUD]
        if self.backups_on:
            files += [(lvl, self.backup(f)) for lvl, f in v.files() if f.tier == LOCAL]
        self.cloud.publish_mirror(files, num_levels=v.num_levels, last_seq=last_seq,
                                  next_file=next_file,
                                  log_number=log_number if self.backups_on else None)
        self._named_backups = {f.number for _, f in files if f.tier == LOCAL}
        retired, self._retired_backups = self._retired_backups, []
        after = time.monotonic() + self._grace
        self._bury([(key, n, _no_reader, after) for key, n in retired])
        if self.backups_on:
            self._wal_below = log_number

    def upload_missing(self, v: Version) -> None:
        """Upload the backups ``v``'s local tables lack, before taking the version lock
        to publish (so flushes are not held up by uploads). A table compacted away
        meanwhile is skipped (its file is gone)."""
        if not self.backups_on:
            return
        for _, f in v.files():
            if f.tier == LOCAL and f.number not in self.backups:
                try:
                    self.backup(f)
                except FileNotFoundError:
                    pass

    def backup(self, f: FileMeta) -> FileMeta:
        """The backup of local table ``f`` (uploaded now if it has none yet)."""
        epoch = self.backups.get(f.number)
        if epoch is None:
            epoch = self.cloud.epoch
            self.cloud.upload(os.path.join(self.path, filenames.table_name(f.number)),
                              _key(f.number, epoch))
            self.backups[f.number] = epoch
            self._stats["backup_uploads"] = self._stats.get("backup_uploads", 0) + 1
            self._stats["backup_bytes"] = self._stats.get("backup_bytes", 0) + f.size
        return FileMeta(f.number, f.size, f.smallest, f.largest, f.min_seq, f.max_seq,
                        None, LOCAL, epoch)

    def cloud_copy(self, f: FileMeta) -> FileMeta:
        """A cloud-tier FileMeta for local table ``f`` moved into a cloud level: its
        backup is that object already, else it is uploaded now."""
        backup = self.backups.pop(f.number, None)
        cf = FileMeta(f.number, f.size, f.smallest, f.largest, f.min_seq, f.max_seq, None,
                      CLOUD, self.cloud.epoch if backup is None else backup)
        if backup is None:
            self.cloud.upload(os.path.join(self.path, filenames.table_name(f.number)),
                              cf.object_key)
        return cf

    def retire(self, f: FileMeta) -> None:
        """``f`` left the version. A cloud table's object goes once no reader holds it (its
        cached blocks go now: a straggling reader can fetch again); a local table's
        backup goes after the next publish if the newest mirror names it, else like a
        cloud table's object (after the grace)."""
        if f.tier == CLOUD:
            self._dc.drop_table(f.number)
            self._mc.delete(f.number)  # (a reader holding the table has its metadata)
            self._bury([(f.object_key, f.number, weakref.ref(f.table),
                         time.monotonic() + self._grace)])
            return
        epoch = self.backups.pop(f.number, None)
        if epoch is None:
            return
        if f.number in self._named_backups:
            self._retired_backups.append((_key(f.number, epoch), f.number))
        else:  # the newest mirror does not name it (published without it already, as a
            # compaction that touches the cloud does before it retires its inputs): it
            # must not wait for a publish that may never come (issue 16)
            self._bury([(_key(f.number, epoch), f.number, _no_reader,
                         time.monotonic() + self._grace)])

    def pin(self, pin: str, keys: list[str], checkpoint: str) -> None:
        """Keep ``keys`` alive for checkpoint ``pin``: from now on in this writer, and in
        every writer once ``pins/<pin>`` is written. Call with the compaction mutex held
        from taking the version the keys come from (then none of them has retired)."""
        self.pinned.update(keys)
        write_pin(self.cloud, pin, keys, checkpoint)

    def collect(self, force: bool = False) -> None:
        """Delete what no mirror names any more: dead objects past their grace that no
        reader holds, and WAL objects of segments in tables. ``force``: the database is
        closing: the collector thread stops, and held objects go too."""
        if force:
            self._stop_collector()
        shipper = self.shipper
        if shipper is not None and self._wal_below:
            old = shipper.covered(self._wal_below)
            if old:
                shipper.forget(self.cloud.delete_wal(old))
        self._collect_dead(force)

    def _bury(self, entries: list[tuple[str, int | None, Callable[[], Any], float]]) -> None:
        """Add ``entries`` to :attr:`dead`, and have the collector delete them when due."""
        if not entries:
            return
        with self._cv:
            self.dead += entries
            if self._collector is None and not self._stopped:
                self._collector = threading.Thread(target=self._collect_loop, daemon=True,
                                                   name="rocksmash-collector")
                self._collector.start()
            self._cv.notify_all()

    def _collect_dead(self, force: bool) -> None:
        """Delete the dead objects that are due (see :meth:`collect`). Entries are taken
        out under the lock and deleted outside it; a failed delete is tried again
        ``_RETRY_AFTER`` later."""
        now = time.monotonic()
        with self._cv:
            due = [e for e in self.dead
                   if e[0] not in self.pinned and now >= e[3] and (force or e[2]() is None)]
            if not due:
                return
            taken = set(map(id, due))
            self.dead = [e for e in self.dead if id(e) not in taken]
        failed = []
        for key, number, ref, _ in due:
            try:
                self.cloud.delete(key)
            except Error:
                failed.append((key, number, ref, time.monotonic() + _RETRY_AFTER))
                continue
            if number is not None:
                self._dc.drop_table(number)
                self._mc.delete(number)
        with self._cv:
            self.dead += failed

    def waiting(self) -> dict[str, int]:
        """The dead objects not deleted yet, by why: ``grace`` (in their
        ``retired_object_grace``), ``held`` (past it, a reader still holds the table),
        ``pinned`` (a checkpoint's), ``due`` (about to go, or a failed delete to retry),
        ``publish`` (backups the newest mirror still names: dead after the next publish)."""
        now = time.monotonic()
        out = {"grace": 0, "held": 0, "pinned": 0, "due": 0,
               "publish": len(self._retired_backups)}
        with self._cv:
            for key, _, ref, after in self.dead:
                why = ("pinned" if key in self.pinned else "grace" if now < after
                       else "held" if ref() is not None else "due")
                out[why] += 1
        return out

    def _next_due(self) -> float | None:
        """Seconds until the collector should look again (None: not until woken). A
        pinned object waits for the open after its release, not for the collector."""
        now = time.monotonic()
        waits = [max(after - now, 0.0 if ref() is None else _HELD_POLL)
                 for key, _, ref, after in self.dead if key not in self.pinned]
        return min(waits) if waits else None

    def _collect_loop(self) -> None:
        while True:
            with self._cv:
                if not self._stopped:
                    self._cv.wait(self._next_due())
                if self._stopped:
                    return
            try:
                self._collect_dead(False)
            except Exception as e:  # (a delete's own failure is retried in _collect_dead)
                self._stats["collector_errors"] = self._stats.get("collector_errors", 0) + 1
                self._stats["last_collector_error"] = repr(e)
                with self._cv:  # do not spin on an error that repeats
                    self._cv.wait(_RETRY_AFTER)

    def _stop_collector(self) -> None:
        """Stop the collector thread (bounded: at most one round of deletes)."""
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
            t = self._collector
        if t is not None and t is not threading.current_thread():
            t.join(_STOP_TIMEOUT)

    def collect_garbage(self, v: Version) -> None:
        """Delete table objects ``v`` does not name and no pin names, after the grace
        (the collector does). Only after this writer's first publish: from then on no
        older writer can make the mirror name them. If a pin cannot be read, nothing is
        deleted (it may name any of them)."""
        cloud_files = {f.number: f for _, f in v.files() if f.tier == CLOUD}
        try:
            self.pinned |= pinned_keys(self.cloud)
        except Error as e:
            self._stats["pin_read_errors"] = self._stats.get("pin_read_errors", 0) + 1
            self._stats["last_pin_error"] = repr(e)
            return
        live = {f.object_key for f in cloud_files.values()} | {
            _key(n, e) for n, e in self.backups.items()} | self.pinned
        # Not at once: a bucket reader may still read them on an older mirror (the last
        # writer retired them less than the grace ago, or crashed before it could), and
        # readers are promised the grace. No table number: such an object's number may
        # be this writer's next table, whose cached blocks must stay.
        due = time.monotonic() + self._grace
        self._bury([(key, None, _no_reader, due)
                    for key in self.cloud.table_keys() if key not in live])
        for n in self._mc.numbers():
            if n not in cloud_files:
                self._mc.delete(n)
