"""Versions: the immutable set of table files per level, and the edits between them.

A :class:`Version` is never mutated; applying a :class:`VersionEdit` makes a new one, and
the DB swaps its reference atomically. Readers grab the current version once and use
it for the whole lookup or scan, so they never see a half-applied compaction.

Level 0 files may overlap and are ordered newest first (by ``max_seq``); files of every
other level are disjoint and ordered by key, so one bisect finds the only candidate.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any, Iterable

from .errors import CorruptionError
from .formats import TIER_CLOUD, TIER_LOCAL

__all__ = ["FileMeta", "Version", "VersionEdit", "LOCAL", "CLOUD"]


#: Where a table lives: a local file ``<number>.sst``, or an object in the object store.
LOCAL = TIER_LOCAL
CLOUD = TIER_CLOUD


@dataclass(eq=False, slots=True)
class FileMeta:
    """One table file in a version. ``table`` is its open reader (main process only).

    A cloud table's object key is ``tables/<number>-e<epoch>.sst``: the epoch of the
    writer that made it, so two writers (one fenced) can never overwrite each other's
    objects even though both allocate file numbers from the same counter.
    """

    number: int
    size: int
    smallest: bytes
    largest: bytes
    min_seq: int
    max_seq: int
    table: Any = None
    tier: int = LOCAL
    epoch: int = 0

    @property
    def object_key(self) -> str:
        return f"tables/{self.number:06d}-e{self.epoch}.sst"

    def moved(self, tier: int | None = None) -> "FileMeta":
        """A copy for another level (same file), optionally recorded on another tier."""
        return FileMeta(self.number, self.size, self.smallest, self.largest, self.min_seq,
                        self.max_seq, self.table, self.tier if tier is None else tier,
                        self.epoch)

    def overlaps(self, lo: bytes | None, hi: bytes | None) -> bool:
        """True if the file's key range meets [lo, hi] (both inclusive; None = unbounded)."""
        return (hi is None or self.smallest <= hi) and (lo is None or self.largest >= lo)


class Version:
    __slots__ = ("levels", "largest_keys", "l0_search", "level_search")

    def __init__(self, levels: list[list[FileMeta]]) -> None:
        levels = [list(lvl) for lvl in levels]
        levels[0].sort(key=lambda f: (f.max_seq, f.number), reverse=True)
        for lvl in levels[1:]:
            lvl.sort(key=lambda f: f.smallest)
        #: Files per level (see the module docstring for their order).
        self.levels: tuple[tuple[FileMeta, ...], ...] = tuple(tuple(lvl) for lvl in levels)
        #: Per level, the largest key of each file, for bisect (level 0 unused).
        self.largest_keys = tuple([f.largest for f in lvl] for lvl in self.levels)
        # Flattened for the point-read path. Only versions whose files have open tables
        # (the DB's, never the manifest loader's) are read from.
        self.l0_search = [(f.smallest, f.largest, f.table) for f in self.levels[0]]
        self.level_search = [(self.largest_keys[i], [f.smallest for f in lvl],
                              [f.table for f in lvl])
                             for i, lvl in enumerate(self.levels) if i and lvl]

    def tables_for(self, key: bytes) -> list[Any]:
        """The open tables a point read of ``key`` visits, in the order it visits them:
        the L0 tables whose range holds it (newest first), then the one table per level
        whose range holds it (the hot loop in DB._get_below inlines this)."""
        tables = [t for lo, hi, t in self.l0_search if lo <= key <= hi]
        for largest, smallest, level in self.level_search:
            i = bisect_left(largest, key)
            if i < len(largest) and smallest[i] <= key:
                tables.append(level[i])
        return tables

    @property
    def num_levels(self) -> int:
        return len(self.levels)

    def files(self) -> Iterable[tuple[int, FileMeta]]:
        for level, lvl in enumerate(self.levels):
            for f in lvl:
                yield level, f

    def level_bytes(self, level: int) -> int:
        return sum(f.size for f in self.levels[level])

    def overlapping(self, level: int, lo: bytes | None, hi: bytes | None) -> list[FileMeta]:
        """Files of ``level`` whose range meets [lo, hi] (inclusive; None = unbounded)."""
        files = self.levels[level]
        if level == 0:
            return [f for f in files if f.overlaps(lo, hi)]
        i = 0 if lo is None else bisect_left(self.largest_keys[level], lo)
        out = []
        while i < len(files) and (hi is None or files[i].smallest <= hi):
            out.append(files[i])
            i += 1
        return out

    def start_index(self, level: int, key: bytes) -> int:
        """Index of the first file of ``level`` (>= 1) whose largest key is >= ``key``."""
        return bisect_left(self.largest_keys[level], key)

    def end_index(self, level: int, key: bytes) -> int:
        """Index just past the last file of ``level`` (>= 1) whose smallest key is < ``key``."""
        files = self.levels[level]
        lo, hi = 0, len(files)
        while lo < hi:
            mid = (lo + hi) // 2
            if files[mid].smallest < key:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def apply(self, edit: "VersionEdit") -> "Version":
        deleted = {(lvl, n) for lvl, n in edit.deleted}
        levels: list[list[FileMeta]] = [
            [f for f in lvl if (i, f.number) not in deleted] for i, lvl in enumerate(self.levels)]
        for lvl, f in edit.added:
            if lvl >= len(levels):
                raise CorruptionError(f"manifest: file {f.number} on level {lvl}, beyond "
                                      f"{len(levels)} levels")
            levels[lvl].append(f)
        return Version(levels)

    def check(self) -> None:
        """Raise CorruptionError if files of a level >= 1 overlap (a broken invariant)."""
        for level, files in enumerate(self.levels[1:], start=1):
            for a, b in zip(files, files[1:]):
                if a.largest >= b.smallest:
                    raise CorruptionError(
                        f"level {level}: files {a.number} and {b.number} overlap")


@dataclass
class VersionEdit:
    """A change to the version and counters, as logged in the manifest (JSON payload)."""

    added: list[tuple[int, FileMeta]] = field(default_factory=list)
    deleted: list[tuple[int, int]] = field(default_factory=list)
    #: Oldest WAL segment that still holds unflushed writes.
    log_number: int | None = None
    next_file: int | None = None
    last_seq: int | None = None
    #: Set only in the first record of a manifest (the full snapshot).
    format_version: int | None = None
    num_levels: int | None = None
    #: Cloud tier: the writer epoch of the session that wrote this manifest.
    epoch: int | None = None
    #: The database's identity (a UUID made at creation), in the snapshot record.
    db_id: str | None = None
    #: Cloud tier: the generation of the mirror that publishes this edit's cloud files
    #: (logged before the publish), so open can tell a mirror newer than this manifest.
    mirror_gen: int | None = None

    def encode(self) -> bytes:
        import json
        d: dict[str, Any] = {}
        if self.format_version is not None:
            d["format_version"] = self.format_version
        if self.num_levels is not None:
            d["num_levels"] = self.num_levels
        if self.added:
            d["add"] = [[lvl, f.number, f.size, f.smallest.hex(), f.largest.hex(),
                         f.min_seq, f.max_seq] + ([f.tier, f.epoch] if f.tier else [])
                        for lvl, f in self.added]
        if self.deleted:
            d["del"] = [[lvl, n] for lvl, n in self.deleted]
        for key, value in (("log", self.log_number), ("next", self.next_file),
                           ("seq", self.last_seq), ("epoch", self.epoch), ("id", self.db_id),
                           ("mgen", self.mirror_gen)):
            if value is not None:
                d[key] = value
        return json.dumps(d, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, payload: bytes) -> "VersionEdit":
        import json
        try:
            d = json.loads(payload)
            edit = cls(
                added=[(int(a[0]), FileMeta(int(a[1]), int(a[2]), bytes.fromhex(a[3]),
                                            bytes.fromhex(a[4]), int(a[5]), int(a[6]),
                                            None, *map(int, a[7:9])))
                       for a in d.get("add", ())],
                deleted=[(int(x[0]), int(x[1])) for x in d.get("del", ())],
                log_number=d.get("log"), next_file=d.get("next"), last_seq=d.get("seq"),
                format_version=d.get("format_version"), num_levels=d.get("num_levels"),
                epoch=d.get("epoch"), db_id=d.get("id"), mirror_gen=d.get("mgen"))
            for name in ("log_number", "next_file", "last_seq", "epoch", "mirror_gen"):
                if getattr(edit, name) is not None and type(getattr(edit, name)) is not int:
                    raise TypeError(f"{name} is not an integer")
            if edit.db_id is not None and type(edit.db_id) is not str:
                raise TypeError("id is not a string")
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise CorruptionError(f"manifest: malformed version edit ({e})") from None
        return edit
