"""Recovery at open: what a database directory (and its bucket) holds, made consistent.

:func:`recover` reads the manifest (or, for an empty directory of a tiered database, the
bucket's mirror), claims the bucket for this writer, and replays the WAL segments that
never reached a table. It returns a :class:`Recovered`; :class:`~rocksmash.db.DB` then
opens the tables, starts a new WAL segment and manifest, publishes, and calls
:func:`remove_unreferenced`. Nothing is deleted before every check here has passed.

Replay runs in parallel: every segment names the table it flushes to, so segments are
independent. Each is replayed by ``jobs.flush_segment`` into its own table, up to
``recovery_processes`` of them at once, one per worker process (threads here only wait on
the workers' pipes, so they hold no GIL while a replay runs). Results come back in segment
order, and :func:`recover` applies the ordering rule (a torn segment hides every later
one).

Memory: each worker holds one segment (at most one memtable's worth of writes) and the
table it builds, so a crash recovery needs about ``recovery_processes`` x
``memtable_size`` of memory at most, however large the WAL is. A rebuild from the bucket
loads its restored segments into memtables instead (readable at once; flushed after the
open): at most as many as the writer had unflushed.
"""

from __future__ import annotations

import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from . import filenames
from .cloud import CloudTier, WalObject
from .env import Env, os_error
from .errors import CorruptionError, FencedError, InvalidArgumentError
from .jobs import JOBS
from .log_format import CLEAN
from .manifest import ManifestState, load_manifest
from .memtable import Memtable
from .options import Options
from .publication import Publication
from .restore import Progress, download_backups, scan_wal, write_segments
from .table_builder import TableInfo
from .version import CLOUD, LOCAL, FileMeta
from .wal import read_segment, read_segment_header
from .worker import WorkerPool
from .write_batch import decode_batch

__all__ = ["Recovered", "recover", "replay_segments", "remove_unreferenced"]


@dataclass
class Recovered:
    """The state an open starts from."""

    db_id: str
    #: No manifest was found: a new database, or a rebuild from the bucket.
    fresh: bool
    levels: list[list[FileMeta]]
    next_file: int
    last_seq: int
    #: A rebuild's restored WAL segments as sealed memtables, oldest first.
    restored: list[Memtable] = field(default_factory=list)
    #: The bucket's WAL objects below this writer's fence (data objects, not fences).
    wal_objects: list[WalObject] = field(default_factory=list)
    #: The directory's entries as recovery found them (what cleanup may delete).
    names: list[str] = field(default_factory=list)


def recover(env: Env, path: str, options: Options, cloud: CloudTier | None, pub: Publication | None,
            stats: dict[str, Any], job_opts: dict[str, Any], flush_worker: WorkerPool | None,
            progress: Progress | None = None,
            open_table: Callable[[FileMeta], Any] | None = None) -> Recovered:
    """Load the manifest, replay leftover WAL segments into L0 tables, and return the
    state to open with (``stats`` is updated with what was done).

    Every segment at or after the manifest's log number holds writes that never reached a
    table; each is replayed into the table its header names (the same replay as a flush,
    in ``flush_worker``'s kind of process). A manifest whose last record was dropped (torn
    or damaged) is used only if nothing that record described is lost (see
    :func:`check_recoverable`). With ``cloud``, older writers are fenced from here on.
    """
    if env.exists(os.path.join(path, filenames.CHECKPOINT)):
        raise InvalidArgumentError(
            f"{path} is a checkpoint of a tiered database: open it with read_only=True and "
            f"its source's object_store=, or make it a local database with "
            f"rocksmash.detach_checkpoint (checkpoint.py)")
    state = load_manifest(path, env)
    db_id = state.db_id if state is not None else None
    mirror = None
    wal_objects: list[WalObject] = []
    if cloud is not None:
        db_id, mirror, wal_objects = _claim_bucket(path, state, cloud, progress)
    db_id = db_id or uuid.uuid4().hex
    levels: list[list[FileMeta]] = [[] for _ in range(options.num_levels)]
    log_number, next_file, last_seq = 0, 2, 0
    rebuilt = False
    if state is not None:
        if state.version.num_levels != options.num_levels:
            raise InvalidArgumentError(f"num_levels={options.num_levels} but the database "
                                       f"has {state.version.num_levels} levels")
        levels = [list(lvl) for lvl in state.version.levels]
        log_number, next_file, last_seq = state.log_number, state.next_file, state.last_seq
        if cloud is None and any(f.tier == CLOUD for lvl in levels for f in lvl):
            raise InvalidArgumentError(
                f"{path} has tables in an object store; open it with object_store=")
        check_recoverable(env, path, state, mirror)
        if mirror is not None and pub is not None:  # which local tables have backups
            local = {f.number: f for lvl in levels for f in lvl if f.tier == LOCAL}
            for _, f in CloudTier.mirror_files(mirror):
                if f.tier == LOCAL and f.number in local and local[f.number].size == f.size:
                    pub.backups[f.number] = f.epoch
    elif mirror is not None:
        # The local directory is gone: rebuild from the bucket (restore.py): the cloud
        # tables, the local tables' backups, and the WAL objects after them.
        assert cloud is not None and pub is not None
        started = time.monotonic()
        files = CloudTier.mirror_files(mirror)
        stats["restored_table_bytes"] = download_backups(cloud, path, files, progress)
        for lvl, f in files:
            levels[lvl].append(f)
            if f.tier == LOCAL:
                pub.backups[f.number] = f.epoch
        next_file, last_seq = int(mirror["next_file"]), int(mirror["last_seq"])
        if mirror.get("log_number") is not None:
            log_number = int(mirror["log_number"])
            rebuilt = True
            segs, nbytes = write_segments(env, path, wal_objects, log_number)
            stats["restored_wal_segments"] = segs
            stats["restored_wal_bytes"] = nbytes
        stats["restore_download_seconds"] = time.monotonic() - started
        stats["restored_from_object_store"] = True
    try:
        names = env.listdir(path)
    except OSError as e:
        raise os_error(f"listing {path}", e) from e
    for name in names:
        parsed = filenames.parse_name(name)
        if parsed:
            next_file = max(next_file, parsed[1] + 1)
    headers = []
    for number in sorted(p[1] for p in map(filenames.parse_name, names)
                         if p and p[0] == "log" and p[1] >= log_number):
        header = read_segment_header(os.path.join(path, filenames.segment_name(number)), env)
        if header is not None:  # None: cut short while being created, holds no writes
            headers.append(header)
            next_file = max(next_file, header.table_number + 1)
    found = Recovered(db_id, state is None, levels, next_file, last_seq,
                      wal_objects=wal_objects, names=names)
    started = time.monotonic()
    if rebuilt:
        # Segments just written back from the bucket (complete, synced): loaded into
        # memtables, as a writer's own unflushed ones, so the database is readable as
        # soon as they are parsed; the flush thread turns them into tables after the open
        # (the same replay of the same segment files, so the same tables).
        for h in headers:
            mem, seg_last = load_segment(env, path, h.number, h.table_number)
            found.restored.append(mem)
            found.last_seq = max(found.last_seq, seg_last)
        stats["restored_memtables"] = len(found.restored)
    else:
        _replay_into(found, env, path, headers, options, stats, job_opts, flush_worker,
                     open_table)
    stats["recovery_seconds"] = time.monotonic() - started
    return found


def _claim_bucket(path: str, state: ManifestState | None, cloud: CloudTier,
                  progress: Progress | None) -> tuple[str | None, dict[str, Any] | None,
                                                      list[WalObject]]:
    """Check the bucket belongs to this directory, claim the next epoch and the WAL fence
    (older writers are fenced from here on), and read the WAL objects below the fence.
    Return (db_id or None, the newest mirror or None, the WAL data objects)."""
    db_id = state.db_id if state is not None else None
    cloud.db_id = db_id
    mirror = cloud.load_mirror()  # refuses another database's mirror
    if state is not None and mirror is not None and (
            mirror["epoch"] > state.epoch or (
                mirror["epoch"] != state.epoch
                and int(mirror["generation"]) >= state.mirror_gen > 0)):
        # The newest mirror was published by another writer, at or after what this
        # directory last published: the bucket moved on without it.
        raise FencedError(
            f"{path} is stale: a writer with epoch {mirror['epoch']} has written the object "
            f"store since this directory's last session (epoch {state.epoch}); move the "
            f"directory away to reopen from the object store")
    bucket_id = cloud.claim_epoch(db_id)
    db_id = db_id or bucket_id or (mirror or {}).get("db_id") or uuid.uuid4().hex
    cloud.db_id = db_id
    # The WAL fence: an older writer's next shipment fails from here on, and the WAL
    # objects below the fence are final (CloudTier.claim_wal_fence).
    fence = cloud.claim_wal_fence()
    return db_id, mirror, scan_wal(cloud, fence, cloud.wal_fences, progress)


def _replay_into(found: Recovered, env: Env, path: str, headers: list[Any], options: Options,
                 stats: dict[str, Any], job_opts: dict[str, Any],
                 flush_worker: WorkerPool | None,
                 open_table: Callable[[FileMeta], Any] | None) -> None:
    """Replay the segments of ``headers`` into L0 tables of ``found``. Each new table is
    opened with ``open_table`` (if given) as soon as its replay ends, while the other
    replays still run, so the open does not read them all one after another at the end."""
    tasks = [{"segment_path": os.path.join(path, filenames.segment_name(h.number)),
              "table_path": os.path.join(path, filenames.table_name(h.table_number)),
              "opts": job_opts, "snapshots": [],
              "drop_damaged_tail": options.wal_recovery == "drop_corrupt_tail"}
             for h in headers]
    numbers = {t["table_path"]: h.table_number for t, h in zip(tasks, headers)}

    def opened(t: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        info: TableInfo | None = result["table"]
        if info is not None:
            result["file"] = f = FileMeta(numbers[t["table_path"]], info.size, info.smallest,
                                          info.largest, info.min_seq, info.max_seq)
            if open_table is not None:
                f.table = open_table(f)
        return result

    if flush_worker is None or len(tasks) <= 1:
        def run(t: dict[str, Any]) -> Any:
            if flush_worker is None:
                return opened(t, JOBS["flush_segment"](env=env, **t))
            return opened(t, flush_worker.call("flush_segment", **t))
        results = replay_segments(tasks, run, 1)
    else:
        n = min(len(tasks), options.recovery_processes or max(2, os.cpu_count() or 1))
        pool = WorkerPool(n)  # its own processes, so the option holds whatever else runs
        stats["recovery_processes"] = n
        try:
            results = replay_segments(
                tasks, lambda t: opened(t, pool.call("flush_segment", **t)), n)
        finally:
            pool.stop()
    torn_before: int | None = None  # a segment that lost its tail, then writes after it
    for header, result in zip(headers, results):
        stats["recovered_segments"] += 1
        stats["torn_wal_tails"] += int(result["torn"])
        info: TableInfo | None = result["table"]
        if torn_before is not None and info is not None:
            # Writes after a hole: this segment was never synced (a sync syncs every
            # earlier segment first), and applying it would resurrect writes that came
            # after lost ones. Drop it like the torn tail before it.
            stats["segments_dropped_after_torn"] += 1
            if result["file"].table is not None:
                result["file"].table.close()
            continue
        if result["torn"]:
            torn_before = header.number
        found.last_seq = max(found.last_seq, result["last_seq"])
        if info is not None:
            found.levels[0].append(result["file"])


def replay_segments(tasks: list[dict[str, Any]], run: Callable[[dict[str, Any]], Any],
                    parallel: int) -> list[dict[str, Any]]:
    """Run ``run(task)`` (one ``flush_segment`` job) for each task, up to ``parallel`` at
    once; return the results in task order. The first failure, in task order, is raised
    after every task has finished (no replay is abandoned halfway)."""
    if parallel <= 1 or len(tasks) <= 1:
        return [run(t) for t in tasks]
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="rocksmash-recovery") as ex:
        futures = [ex.submit(run, t) for t in tasks]
    return [f.result() for f in futures]


def check_recoverable(env: Env, path: str, state: ManifestState, mirror: dict[str, Any] | None) -> None:
    """Raise CorruptionError unless every write the manifest describes is still
    somewhere: the WAL segment it names as the oldest unflushed one, every local table,
    and no cloud mirror newer than it. These hold for any manifest a crash leaves; they
    fail when a record that took effect was lost (its WAL segment or input tables were
    deleted after it was synced), so a damaged last record can be dropped exactly when
    dropping it loses nothing."""
    why = (f" (the manifest's last record was {state.tail} and dropped: it held an edit "
           f"that had taken effect)" if state.tail != CLEAN else "")
    seg = filenames.segment_name(state.log_number)
    if not env.exists(os.path.join(path, seg)):
        raise CorruptionError(f"{path}: WAL segment {seg}, which the manifest names as "
                              f"holding unflushed writes, is missing{why}; refusing to "
                              f"open, nothing was deleted")
    for f in (f for _, f in state.version.files() if f.tier == LOCAL):
        name = filenames.table_name(f.number)
        if not env.exists(os.path.join(path, name)):
            raise CorruptionError(f"table {name} is missing{why}")
    if (mirror is not None and state.mirror_gen and mirror["epoch"] == state.epoch
            and int(mirror["generation"]) > state.mirror_gen):
        raise CorruptionError(
            f"{path}: the object store's manifest mirror (generation {mirror['generation']}) "
            f"is newer than the local manifest (generation {state.mirror_gen}){why}; move "
            f"the directory away to reopen from the object store")


def load_segment(env: Env, path: str, number: int, table_number: int) -> tuple[Memtable, int]:
    """A memtable holding the records of WAL segment ``number``, and the last sequence
    number in it (0 if none)."""
    seg = read_segment(os.path.join(path, filenames.segment_name(number)), env=env)
    mem = Memtable(number, table_number)
    last = 0
    for payload in seg.records:
        seq, ops = decode_batch(payload)
        mem.put_batch(ops, seq, -1)
        last = seq + len(ops) - 1
    mem.last_seq = max(last, seg.first_seq - 1)  # (sealed: it takes no writes)
    return mem, last


def remove_unreferenced(env: Env, path: str, names: list[str], keep: set[str]) -> None:
    """Delete the engine's files among ``names`` that are not in ``keep`` (dead tables,
    replayed segments, old manifests, leftover temporary files). Called once the new
    manifest is durable."""
    for name in names:
        if name in keep or name in (filenames.CURRENT, filenames.LOCK):
            continue
        if filenames.parse_name(name) or name.endswith(".tmp"):
            env.remove_if_exists(os.path.join(path, name))
