"""Read-only opening of a local database: ``rocksmash.open(path, read_only=True)``.

A read-only handle is a point-in-time view: the manifest's tables plus the writes of the
WAL segments not yet flushed, replayed into a memtable in memory, as of the open. It takes
no lock and writes, renames or deletes nothing, so any number of read-only handles may be
open beside one writer (in this process or others) and beside each other. It does not
follow the writer: reopen to see newer writes.

Opening beside a live writer races with its flushes and compactions, which delete WAL
segments and tables once their data is elsewhere. A file that vanishes between reading
the manifest and opening it means the writer moved on: the open starts again from the
new manifest (at most ``_ATTEMPTS`` times, then UnavailableError). Once open, every table
is held by an open descriptor, so the writer's deletions do not disturb the view. A WAL
record the writer is appending at that moment reads as a torn tail and is not part of
the view (it was not acknowledged before the open).

A tiered checkpoint (checkpoint.py) opens here too, with ``object_store=`` its source's:
its cloud tables are read from the bucket, kept there by its pin, with their caches in
the checkpoint's directory (which this open therefore writes).

Every write method (``put``, ``write``, ``delete``, ``delete_range`` and those built on
them, ``flush``, ``compact_range``, ``checkpoint``) raises InvalidArgumentError. A tiered
database is read from its bucket instead (``object_store=`` too: bucket_reader.py).
"""

from __future__ import annotations

import os
from typing import Any, NoReturn

from . import filenames
from .db import DB, _open_dbs
from .checkpoint import check_pin, read_checkpoint
from .env import POSIX
from .errors import CorruptionError, InvalidArgumentError, UnavailableError
from .manifest import load_manifest
from .memtable import Memtable
from .options import Options
from .version import CLOUD, Version
from .wal import read_segment
from .write_batch import decode_batch

__all__ = ["ReadOnlyDB"]

#: Opens tried when the writer keeps deleting the files an open is reading.
_ATTEMPTS = 20


class ReadOnlyDB(DB):
    """A read-only, point-in-time view of a local database (see :mod:`rocksmash.read_only`).

    Reads, scans, iterators and snapshots work as on :class:`DB`; writes raise
    InvalidArgumentError. Thread-safe like :class:`DB`.
    """

    def __init__(self, path: str | os.PathLike[str], options: Options) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.options = options
        self._closed = True
        self._forked = False
        self._env = POSIX  # (a read-only view reads the real file system: options.env is None)
        if not os.path.exists(os.path.join(self.path, filenames.CURRENT)):
            raise InvalidArgumentError(f"{self.path}: no database here (read_only=True "
                                       f"never creates one)")
        checkpoint = read_checkpoint(self.path)
        if options.object_store is not None and checkpoint is None:
            raise InvalidArgumentError(f"{self.path}: read_only=True with object_store= "
                                       f"opens a tiered checkpoint, and this is none")
        self._init_state()
        self._stats["read_only"] = True
        try:
            if self._cloud is not None:
                assert checkpoint is not None
                check_pin(self._cloud, self.path, checkpoint)
            for _ in range(_ATTEMPTS):
                try:
                    self._load()
                    break
                except FileNotFoundError:
                    continue  # the writer flushed or compacted meanwhile: read again
            else:
                raise UnavailableError(f"{self.path}: the writer kept replacing files while "
                                       f"this read-only open read them ({_ATTEMPTS} attempts)")
        except BaseException:
            self._release_cloud()
            raise
        self._closed = False
        _open_dbs.add(self)

    def _load(self) -> None:
        """The view: the manifest's tables, and its unflushed WAL segments in a memtable.
        Raises FileNotFoundError when the writer deleted a file meanwhile."""
        current = _read(os.path.join(self.path, filenames.CURRENT))
        try:
            state = load_manifest(self.path)
        except CorruptionError:
            if _read(os.path.join(self.path, filenames.CURRENT)) != current:
                # The writer rolled its manifest (and deleted the old one) meanwhile.
                raise FileNotFoundError(filenames.CURRENT) from None
            raise
        if state is None:
            raise FileNotFoundError(filenames.CURRENT)  # replaced right now: read again
        if state.version.num_levels != self.options.num_levels:
            raise InvalidArgumentError(f"num_levels={self.options.num_levels} but the "
                                       f"database has {state.version.num_levels} levels")
        files = [f for _, f in state.version.files()]
        if self._cloud is None and any(f.tier == CLOUD for f in files):
            raise InvalidArgumentError(
                f"{self.path} has tables in an object store: a tiered database is read "
                f"with read_only=True and object_store= (from its bucket), and a tiered "
                f"checkpoint also with object_store= (its source's)")
        segments = sorted(p[1] for p in map(filenames.parse_name, os.listdir(self.path))
                          if p and p[0] == "log" and p[1] >= state.log_number)
        if state.log_number not in segments:
            raise FileNotFoundError(filenames.segment_name(state.log_number))
        tables = []
        try:
            for f in files:
                tables.append(self._open_table(f))
            mem = Memtable(0, 0)
            last_seq = state.last_seq
            for number in segments:
                seg = read_segment(os.path.join(self.path, filenames.segment_name(number)),
                                   drop_damaged_tail=self._drop_damaged_tail)
                for payload in seg.records:
                    seq, ops = decode_batch(payload)
                    mem.put_batch(ops, seq, -1)
                    last_seq = max(last_seq, seq + len(ops) - 1)
                if seg.torn:
                    break  # writes after a hole are not part of any acknowledged prefix
        except BaseException:
            for t in tables:
                t.close()
            raise
        for f, t in zip(files, tables):
            f.table = t
        self._version = Version([list(lvl) for lvl in state.version.levels])
        self._mem = mem
        self._imm: list[Memtable] = []
        self._seq = last_seq
        self._ranged = self._has_ranges()

    # ------------------------------------------------------------------ no writes

    def _refuse(self, *_: Any, **__: Any) -> NoReturn:
        if self._closed:
            raise self._closed_error()
        raise InvalidArgumentError(f"{self.path} is open read-only")

    put = write = delete = delete_range = clear = batch = flush = compact_range = checkpoint = _refuse

    def close(self) -> None:
        """Release the view's tables and caches (nothing on disk changes)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        _open_dbs.discard(self)
        self._cache.clear()
        for _, f in self._version.files():  # live iterators on them now raise ClosedError
            f.table.close()
        self._release_cloud()

    def _release_cloud(self) -> None:
        """Close the cloud tables' caches and the object store, if any."""
        if self._cloud is not None:
            self._data_cache.close()
            self._cloud.close()

    def __repr__(self) -> str:
        return f"<rocksmash.ReadOnlyDB {self.path!r}>"


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
