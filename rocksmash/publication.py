"""What a tiered database has published in its bucket, and the objects it must delete.

One :class:`Publication` per open tiered database (the DB calls it with its version lock
held, or during open). It publishes mirrors (cloud.CloudTier.publish_mirror), each naming
one whole version: its cloud tables and, with WAL shipping, a backup of every local table
(uploaded here first where missing) and the WAL segment from which on the WAL objects
hold every later write (decision 0006). It then deletes what only older mirrors named:

- objects of retired cloud tables, once no reader holds their table (an open iterator
  may still read an old version);
- backups of local tables that left the version, after the next publish;

both no sooner than ``retired_object_grace`` after they left the version, so that readers
of the bucket on an older mirror (bucket_reader.py) can finish what they read;
- WAL objects of segments below the published ``log_number``;
- at open, after the first publish, every table object no version names (a crashed
  compaction's uploads, a fenced writer's).

Objects a pin names (a tiered checkpoint's tables: pins.py) are never deleted.
"""

from __future__ import annotations

import os
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
        #: Backups of tables no longer live: (key, number), deleted after the next publish.
        self._retired_backups: list[tuple[str, int]] = []
        #: Objects to delete once nothing reads them and their grace is over: (key, table
        #: number, weakref to the reader, monotonic time from which it may go).
        self.dead: list[tuple[str, int, Callable[[], Any], float]] = []
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
        retired, self._retired_backups = self._retired_backups, []
        after = time.monotonic() + self._grace
        self.dead += [(key, n, _no_reader, after) for key, n in retired]
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
        backup goes after the next publish."""
        if f.tier == CLOUD:
            self._dc.drop_table(f.number)
            self._mc.delete(f.number)  # (a reader holding the table has its metadata)
            self.dead.append((f.object_key, f.number, weakref.ref(f.table),
                              time.monotonic() + self._grace))
            return
        epoch = self.backups.pop(f.number, None)
        if epoch is not None:
            self._retired_backups.append((_key(f.number, epoch), f.number))

    def pin(self, pin: str, keys: list[str], checkpoint: str) -> None:
        """Keep ``keys`` alive for checkpoint ``pin``: from now on in this writer, and in
        every writer once ``pins/<pin>`` is written. Call with the compaction mutex held
        from taking the version the keys come from (then none of them has retired)."""
        self.pinned.update(keys)
        write_pin(self.cloud, pin, keys, checkpoint)

    def collect(self, force: bool = False) -> None:
        """Delete what no mirror names any more: dead objects past their grace that no
        reader holds (with ``force``, held ones too: the database is closing), and WAL
        objects of segments in tables."""
        shipper = self.shipper
        if shipper is not None and self._wal_below:
            old = shipper.covered(self._wal_below)
            if old:
                shipper.forget(self.cloud.delete_wal(old))
        keep = []
        now = time.monotonic()
        for entry in self.dead:
            key, number, ref, after = entry
            if key in self.pinned:
                continue  # a checkpoint's: the open after its release deletes it
            if now >= after and (force or ref() is None):
                try:
                    self.cloud.delete(key)
                except Error:
                    keep.append(entry)  # retry later
                    continue
                self._dc.drop_table(number)
                self._mc.delete(number)
            else:
                keep.append(entry)
        self.dead = keep

    def collect_garbage(self, v: Version) -> None:
        """Delete table objects ``v`` does not name and no pin names. Only after this
        writer's first publish: from then on no older writer can make the mirror name
        them. If a pin cannot be read, nothing is deleted (it may name any of them)."""
        cloud_files = {f.number: f for _, f in v.files() if f.tier == CLOUD}
        try:
            self.pinned |= pinned_keys(self.cloud)
        except Error as e:
            self._stats["pin_read_errors"] = self._stats.get("pin_read_errors", 0) + 1
            self._stats["last_pin_error"] = repr(e)
            return
        live = {f.object_key for f in cloud_files.values()} | {
            _key(n, e) for n, e in self.backups.items()} | self.pinned
        for key in self.cloud.table_keys():
            if key not in live:
                self.cloud.delete(key)
        for n in self._mc.numbers():
            if n not in cloud_files:
                self._mc.delete(n)
