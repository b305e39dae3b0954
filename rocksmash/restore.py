"""Rebuilding a database's local files from the object store (after the local disk is lost).

The mirror names every table: the cloud levels' tables stay where they are; with WAL
shipping on, the local levels' tables have backups there, downloaded here. The WAL
objects of the segments from the mirror's ``log_number`` on hold every write in none of
those tables; they are written back as local WAL segments, which the open then replays as
after a crash (in parallel, into the same tables a flush would have made). See
docs/cloud.md, "Rebuild from the bucket".

Objects are fetched several at a time (a GET costs a round trip; the bytes are small).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from . import filenames
from .cloud import CloudTier, WalObject
from .env import POSIX, Env, os_error
from .errors import CorruptionError
from .version import LOCAL, FileMeta
from .wal import HEADER_SIZE, WalWriter

__all__ = ["Progress", "download_backups", "scan_wal", "write_segments"]

#: ``progress(what, done, total)``: called as objects arrive (what: "tables" or "wal").
Progress = Callable[[str, int, int], None]

#: Objects in flight at once.
FETCHERS = 8


def _noop(what: str, done: int, total: int) -> None:
    pass


def download_backups(cloud: CloudTier, path: str, files: list[tuple[int, FileMeta]],
                     progress: Progress | None = None) -> int:
    """Download the backups of the local tables among ``files`` into ``path`` (as
    ``<number>.sst``); return the bytes fetched."""
    report = progress or _noop
    todo = [f for _, f in files if f.tier == LOCAL]
    report("tables", 0, len(todo))
    total = 0

    def fetch(f: FileMeta) -> int:
        size = cloud.download(f.object_key, os.path.join(path, filenames.table_name(f.number)))
        if size != f.size:
            raise CorruptionError(f"object store: backup {f.object_key} holds {size} bytes, "
                                  f"the mirror says {f.size}")
        return size

    with ThreadPoolExecutor(FETCHERS, thread_name_prefix="rocksmash-restore") as ex:
        for i, size in enumerate(ex.map(fetch, todo), 1):
            total += size
            report("tables", i, len(todo))
    if todo:
        POSIX.sync_dir(path)
    return total


def scan_wal(cloud: CloudTier, fence: int, known_fences: set[int],
             progress: Progress | None = None) -> list[WalObject]:
    """Read every ``wal/`` object below this writer's ``fence`` that is not a known fence;
    return the data objects in number order. Fences found are added to ``known_fences``
    (they must never be deleted: see CloudTier.claim_wal_fence)."""
    report = progress or _noop
    numbers = [n for n in cloud.wal_numbers() if n < fence and n not in known_fences]
    report("wal", 0, len(numbers))
    out = []
    with ThreadPoolExecutor(FETCHERS, thread_name_prefix="rocksmash-restore") as ex:
        for i, obj in enumerate(ex.map(cloud.read_wal, numbers), 1):
            report("wal", i, len(numbers))
            if obj.header.get("db_id") not in (None, cloud.db_id):
                raise CorruptionError(f"object store: WAL object {obj.number} belongs to "
                                      f"another database ({obj.header.get('db_id')})")
            if obj.kind == "fence":
                known_fences.add(obj.number)
            else:
                out.append(obj)
    return out


def group_segments(objects: list[WalObject], log_number: int) -> dict[int, list[WalObject]]:
    """The objects of segments >= ``log_number``, by segment number. Each segment's
    objects must cover it from its start without a gap (they are shipped in order);
    anything else is CorruptionError."""
    by_segment: dict[int, list[WalObject]] = {}
    for obj in objects:
        if obj.segment >= log_number:
            by_segment.setdefault(obj.segment, []).append(obj)
    for number, objs in by_segment.items():
        h = objs[0].header
        pos = HEADER_SIZE
        for obj in objs:
            if (obj.header["offset"], obj.header["table"], obj.header["first_seq"]) != (
                    pos, h["table"], h["first_seq"]):
                raise CorruptionError(
                    f"object store: WAL object {obj.number} of segment {number} starts at "
                    f"byte {obj.header['offset']}, not {pos} where the segment's shipped "
                    f"records end (a WAL object is missing)")
            pos = obj.header["end"]
    return by_segment


def write_segments(env: Env, path: str, objects: list[WalObject],
                   log_number: int) -> tuple[int, int]:
    """Write the records of ``objects`` of segments >= ``log_number`` back as local WAL
    segments (see :func:`group_segments`); return (segments, record bytes)."""
    by_segment = group_segments(objects, log_number)
    written = 0
    for number, objs in sorted(by_segment.items()):
        h = objs[0].header
        pos = objs[-1].header["end"]
        target = os.path.join(path, filenames.segment_name(number))
        try:
            env.remove_if_exists(target)
            w = WalWriter(path, number, h["table"], h["first_seq"], env)
            try:
                for obj in objs:
                    w.add_raw(obj.records)
                w.sync()
            finally:
                w.close()
        except OSError as e:
            raise os_error(f"writing restored WAL segment {number}", e) from e
        written += pos - HEADER_SIZE
    return len(by_segment), written
