"""Flush and compaction jobs: pure functions from immutable input files to new tables.

They run in a worker process (worker.py) or on a background thread, take and return
only plain data (paths, ints, bytes, TableInfo), and never touch the manifest: the main
process installs their output with a version edit. A job that dies leaves at most
unreferenced files, which the next open deletes.

Version retention (both jobs): with live snapshots s_1 < ... < s_n, the versions of one
key fall into stripes (seq <= s_1, s_1 < seq <= s_2, ...), and each snapshot sees only the
newest version of its stripe, so only that one is kept per stripe. With no snapshots
that is just the newest version. At the bottommost level, deletions that are the oldest
kept version of their key are dropped too (nothing older can reappear).
"""

from __future__ import annotations

import functools
import heapq
import os
from bisect import bisect_left
from itertools import chain
from typing import Any, Callable, Iterable, Iterator

from .env import LocalFile, os_error
from .table import Table
from .table_builder import TableBuilder, TableInfo
from .wal import read_segment
from .write_batch import decode_batch

__all__ = ["flush_segment", "compact", "JOBS"]


def _retained(versions: list[tuple[int, bytes | None]], snapshots: list[int],
              bottommost: bool) -> list[tuple[int, bytes | None]]:
    """Of one key's versions (newest first), those some reader can still see."""
    kept = []
    last_stripe = -1
    for seq, value in versions:
        stripe = bisect_left(snapshots, seq)
        if stripe != last_stripe:
            kept.append((seq, value))
            last_stripe = stripe
    if bottommost:
        while kept and kept[-1][1] is None:
            kept.pop()
    return kept


def _write_tables(entries: Iterable[tuple[bytes, int, bytes | None]], paths: Iterator[str],
                  opts: dict, snapshots: list[int], bottommost: bool,
                  target_size: int | None) -> list[TableInfo]:
    """Write merged ``(key, -seq, value)`` entries, (key, -seq) ascending, to new tables.

    Applies the retention rules; cuts a new table after ``target_size`` bytes, never
    between versions of one key (so tables of a level stay disjoint).
    """
    out: list[TableInfo] = []
    builder: TableBuilder | None = None

    def new_builder() -> TableBuilder:
        return TableBuilder(next(paths), block_size=opts["block_size"],
                            compression=opts["compression"],
                            bloom_bits_per_key=opts["bloom_bits_per_key"])

    def builder_for_next_key() -> TableBuilder:
        """The builder for a new key: a new table once the current one is big enough."""
        nonlocal builder
        if builder is None:
            builder = new_builder()
        elif target_size is not None and builder.file_size >= target_size:
            out.append(builder.finish())
            builder = new_builder()
        return builder

    try:
        if not snapshots:
            # Fast path: the newest version of each key is the only one anyone can see.
            last = None
            for key, nseq, value in entries:
                if key == last:
                    continue
                last = key
                if value is None and bottommost:
                    continue
                builder_for_next_key().add(key, -nseq, value)
        else:
            def groups() -> Iterator[tuple[bytes, list[tuple[int, bytes | None]]]]:
                cur: bytes | None = None
                vs: list[tuple[int, bytes | None]] = []
                for key, nseq, value in entries:
                    if key != cur:
                        if cur is not None:
                            yield cur, vs
                        cur, vs = key, []
                    vs.append((-nseq, value))
                if cur is not None:
                    yield cur, vs

            for key, vs in groups():
                kept = _retained(vs, snapshots, bottommost)
                if kept:
                    b = builder_for_next_key()
                    for seq, value in kept:
                        b.add(key, seq, value)
        if builder is not None:
            out.append(builder.finish())
            builder = None
    finally:
        if builder is not None:
            builder.abandon()
    return out


def flush_segment(*, segment_path: str, table_path: str, opts: dict,
                  snapshots: list[int], drop_damaged_tail: bool = False) -> dict:
    """Replay a sealed WAL segment into the table its header names.

    Returns ``{"table": TableInfo | None, "last_seq": int, "torn": bool}``; ``table`` is
    None when the segment holds no writes. Raises CorruptionError on a damaged segment
    (see ``wal.read_segment`` for ``drop_damaged_tail``).
    """
    seg = read_segment(segment_path, drop_damaged_tail=drop_damaged_tail)
    versions: dict[bytes, list[tuple[int, bytes | None]]] = {}
    last_seq = seg.first_seq - 1
    for payload in seg.records:
        seq, ops = decode_batch(payload)
        for i, (key, value) in enumerate(ops):
            vs = versions.get(key)
            if vs is None:
                versions[key] = [(seq + i, value)]
            else:
                vs.append((seq + i, value))
        if ops:
            last_seq = max(last_seq, seq + len(ops) - 1)
    table = None
    if versions:
        def entries() -> Iterator[tuple[bytes, int, bytes | None]]:
            for key in sorted(versions):
                for seq, value in reversed(versions[key]):
                    yield key, -seq, value

        tables = _write_tables(entries(), iter([table_path]), opts, snapshots, False, None)
        table = tables[0] if tables else None
    return {"table": table, "last_seq": last_seq, "torn": seg.torn,
            "first_seq": seg.first_seq}


_stores: dict[str, Any] = {}


def _store(spec: Any) -> Any:
    """The object store a job talks to: an ObjectStore given in-process, or opened (once
    per worker process) from a ``CloudTier.worker_spec()`` dict."""
    if spec is None or not isinstance(spec, dict):
        return spec
    import json

    import cloudtier

    key = json.dumps(spec, sort_keys=True, default=str)
    store = _stores.get(key)
    if store is None:
        from .cloud import store_errors

        try:
            store = cloudtier.MeteredStore(cloudtier.open_store(spec["url"], **spec["options"]))
        except cloudtier.StoreError as e:  # e.g. the endpoint is down: retriable
            raise store_errors(f"opening {spec['url']}", e) from e
        if spec["retries"]:
            store = cloudtier.RetryingStore(
                store, cloudtier.RetryPolicy(max_attempts=spec["retries"] + 1))
        _stores[key] = store
    return store


def _traffic(store: Any) -> dict | None:
    """Request and byte counts of a worker's own store handle (None in-process, where
    the caller's store already counts them)."""
    import cloudtier

    meter = store.find(cloudtier.MeteredStore) if store is not None else None
    if meter is None:
        return None
    snap = meter.snapshot()
    return {"requests": dict(snap["requests"]), "bytes_in": snap["bytes_in"],
            "bytes_out": snap["bytes_out"]}


def _delta(after: dict | None, before: dict | None) -> dict | None:
    if after is None or before is None:
        return None
    return {"requests": {k: v - before["requests"].get(k, 0)
                         for k, v in after["requests"].items()},
            "bytes_in": after["bytes_in"] - before["bytes_in"],
            "bytes_out": after["bytes_out"] - before["bytes_out"]}


def _open_input(src: dict, store: Any) -> Table:
    """A table to read: ``{"path": local path}`` or ``{"key": object key, "size": bytes}``."""
    if "path" in src:
        return Table(0, LocalFile(src["path"]), None, os.path.basename(src["path"]))
    from .cloud import CloudFile

    return Table(0, CloudFile(store, src["key"], src["size"]), None, src["key"])


def compact(*, runs: list[list[dict]], out_paths: list[str], opts: dict,
            snapshots: list[int], bottommost: bool, target_file_size: int,
            store: Any = None, upload_keys: list[str] | None = None) -> dict:
    """Merge sorted runs of tables into new tables at ``out_paths`` (in order).

    Each run is a list of table sources in key order whose ranges do not overlap (one
    level-0 file, or consecutive files of one level); a source is a local path or an
    object in ``store``. With ``upload_keys``, output i is also uploaded to
    ``upload_keys[i]`` once finished (the local file stays for the caller). The caller
    allocated more output paths than the job can need; running out raises.

    Returns ``{"tables": [TableInfo], "traffic": object-store counts or None}``.
    """
    st = _store(store)
    before = _traffic(st) if isinstance(store, dict) else None
    tables: list[list[Table]] = []
    try:
        for run in runs:
            tables.append([_open_input(src, st) for src in run])
        sources = [chain.from_iterable(t.entries() for t in run) for run in tables]
        merged = sources[0] if len(sources) == 1 else heapq.merge(*sources)

        def paths() -> Iterator[str]:
            yield from out_paths
            raise RuntimeError("compaction produced more tables than file numbers allocated")

        infos = _write_tables(merged, paths(), opts, snapshots, bottommost, target_file_size)
        if upload_keys is not None:
            from cloudtier import StoreError

            from .cloud import store_errors

            for info, key in zip(infos, upload_keys):
                with open(info.path, "rb") as f:
                    data = f.read()
                try:
                    st.put(key, data)
                except StoreError as e:
                    raise store_errors(f"uploading {key}", e) from e
        return {"tables": infos, "traffic": _delta(_traffic(st), before)}
    finally:
        for opened in tables:
            for t in opened:
                t.close()


def _in_hierarchy(job: Callable[..., dict]) -> Callable[..., dict]:
    """``job`` raising only rocksmash errors: a full disk is UnavailableError (retried by
    the caller), an object-store failure its mapped kind (see ``cloud.store_errors``)."""
    @functools.wraps(job)
    def run(**kwargs: Any) -> dict:
        from cloudtier import StoreError

        from .cloud import store_errors

        try:
            return job(**kwargs)
        except OSError as e:
            raise os_error(f"{job.__name__}", e) from e
        except StoreError as e:
            raise store_errors(f"{job.__name__}", e) from e
    return run


#: Jobs by name, for the worker protocol.
JOBS = {"flush_segment": _in_hierarchy(flush_segment), "compact": _in_hierarchy(compact)}
