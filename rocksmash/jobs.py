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

Range tombstones (range_del.py): a version covered by a tombstone of the same stripe
(no snapshot sees the version but not the tombstone) is dropped, at any level, since
the tombstone goes on to the output. Tombstones are kept, except at the bottommost
level, where one is kept only while a kept version in its range is older than it (for
an older snapshot); with nothing below, it hides nothing else. Where the output is cut
into tables, tombstones are cut too, at the successor of the last key of the table
(``key + b"\0"``), so each table's key range covers its part and the tables of a level
stay disjoint.
"""

from __future__ import annotations

import functools
import heapq
import marshal
import os
import sys
from bisect import bisect_left, bisect_right
from itertools import chain
from operator import itemgetter
from typing import Any, Callable, Iterable, Iterator

from .env import POSIX, Env, os_error
from .memtable import Memtable
from .range_del import Tombstone, clip, union
from .table import Table
from .table_builder import TableBuilder, TableInfo
from .wal import read_segment
from .worker import Handoff
from .write_batch import decode_batch

__all__ = ["flush_segment", "flush_memtable", "flush_marshalled", "compact", "loaded_modules",
           "JOBS"]


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


class _Ranges:
    """The tombstones of one job's output, and which of them the current output table
    needs (see the module doc)."""

    def __init__(self, tombs: list[Tombstone], snapshots: list[int], bottommost: bool):
        self.tombs = sorted(tombs)
        self.starts, self.ends = union(self.tombs)
        self.snapshots = snapshots
        self.bottommost = bottommost
        self.lo: bytes | None = None  # where the current table's part of them starts
        self.needed: set[int] = set()  # bottommost: those that hide a kept version

    def _covering(self, key: bytes) -> list[tuple[int, int]]:
        """``(index, seq)`` of the tombstones covering ``key``."""
        i = bisect_right(self.starts, key)
        if not i or key >= self.ends[i - 1]:
            return []  # outside the union of every tombstone: the common case
        return [(n, t[2]) for n, t in enumerate(self.tombs) if t[0] <= key < t[1]]

    def keep(self, key: bytes, versions: list[tuple[int, bytes | None]]
             ) -> tuple[list[tuple[int, bytes | None]], set[int]]:
        """Of one key's retained versions (newest first), those no tombstone drops; and
        the tombstones that hide some of those (to go into ``needed`` once the version
        is in a table)."""
        cover = self._covering(key)
        if not cover:
            return versions, set()
        snaps = self.snapshots
        kept = []
        needs: set[int] = set()
        for seq, value in versions:
            stripe = bisect_left(snaps, seq)
            hiding = [(n, t) for n, t in cover if t > seq]
            if any(bisect_left(snaps, t) == stripe for _, t in hiding):
                continue  # no snapshot sees this version without the tombstone
            kept.append((seq, value))
            needs.update(n for n, _ in hiding)
        return kept, needs

    def cut(self, last_key: bytes | None) -> list[Tombstone]:
        """The part of the tombstones for the table that ends at ``last_key`` (None: the
        last table, which takes all that is left)."""
        hi = None if last_key is None else last_key + b"\x00"
        tombs = self.tombs if not self.bottommost else [
            t for n, t in enumerate(self.tombs) if n in self.needed]
        part = clip(tombs, self.lo, hi)
        self.lo, self.needed = hi, set()
        return part


def _write_tables(entries: Iterable[tuple[bytes, int, bytes | None]], paths: Iterator[str],
                  opts: dict, snapshots: list[int], bottommost: bool,
                  target_size: int | None, tombs: list[Tombstone] | None = None,
                  env: Env = POSIX) -> list[TableInfo]:
    """Write merged ``(key, -seq, value)`` entries, (key, -seq) ascending, and range
    tombstones ``tombs`` to new tables.

    Applies the retention rules; cuts a new table after ``target_size`` bytes, never
    between versions of one key (so tables of a level stay disjoint).
    """
    out: list[TableInfo] = []
    builder: TableBuilder | None = None
    ranges = _Ranges(tombs, snapshots, bottommost) if tombs else None
    last_added: list[bytes | None] = [None]  # the last key given to ``builder``

    def new_builder() -> TableBuilder:
        return TableBuilder(next(paths), block_size=opts["block_size"],
                            compression=opts["compression"],
                            bloom_bits_per_key=opts["bloom_bits_per_key"], env=env)

    def builder_for_next_key() -> TableBuilder:
        """The builder for a new key: a new table once the current one is big enough."""
        nonlocal builder
        if builder is None:
            builder = new_builder()
        elif target_size is not None and builder.file_size >= target_size:
            if ranges is not None:
                builder.add_ranges(ranges.cut(last_added[0]))
            out.append(builder.finish())
            builder = new_builder()
        return builder

    try:
        if ranges is not None:
            _write_ranged(entries, ranges, bottommost, builder_for_next_key, last_added)
            part = ranges.cut(None)
            if part:
                if builder is None:
                    builder = new_builder()
                builder.add_ranges(part)
        elif not snapshots:
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
            for key, vs in _key_groups(entries):
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


def _key_groups(entries: Iterable[tuple[bytes, int, bytes | None]]
                ) -> Iterator[tuple[bytes, list[tuple[int, bytes | None]]]]:
    """``(key, [(seq, value), ...] newest first)`` per key of merged entries."""
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


def _write_ranged(entries: Iterable[tuple[bytes, int, bytes | None]], ranges: _Ranges,
                  bottommost: bool, builder_for_next_key: Callable[[], TableBuilder],
                  last_added: list[bytes | None]) -> None:
    """The point entries of :func:`_write_tables` beside range tombstones."""
    for key, vs in _key_groups(entries):
        kept, needs = ranges.keep(key, _retained(vs, ranges.snapshots, False))
        if bottommost:
            while kept and kept[-1][1] is None:
                kept.pop()
        if kept:
            b = builder_for_next_key()  # (may cut the table before: then ``needed`` resets)
            ranges.needed |= needs
            for seq, value in kept:
                b.add(key, seq, value)
            last_added[0] = key


def flush_segment(*, segment_path: str, table_path: str, opts: dict,
                  snapshots: list[int], drop_damaged_tail: bool = False,
                  env: Env = POSIX) -> dict:
    """Replay a sealed WAL segment into the table its header names.

    The replay builds the memtable the writes made (keeping a replaced version only if
    some snapshot in ``snapshots`` may see it, as the live memtable did) and writes it
    with :func:`flush_memtable`, so a flush and a replay of the same writes with the
    same snapshots produce the same bytes (decision 0026).

    Returns ``{"table": TableInfo | None, "last_seq": int, "torn": bool}``; ``table`` is
    None when the segment holds no writes. Raises CorruptionError on a damaged segment
    (see ``wal.read_segment`` for ``drop_damaged_tail``). Files are read and written
    through ``env`` (the default in a worker process: the real file system).
    """
    seg = read_segment(segment_path, drop_damaged_tail=drop_damaged_tail, env=env)
    mem = Memtable(0, 0)
    keep_upto = snapshots[-1] if snapshots else -1
    last_seq = seg.first_seq - 1
    for payload in seg.records:
        seq, ops = decode_batch(payload)
        if ops:
            mem.put_batch(ops, seq, keep_upto)
            last_seq = max(last_seq, seq + len(ops) - 1)
    result = flush_memtable(entries=mem.entries, old=mem.old, ranges=mem.ranges,
                            table_path=table_path, opts=opts, snapshots=snapshots, env=env)
    return {"table": result["table"], "last_seq": last_seq, "torn": seg.torn,
            "first_seq": seg.first_seq}


def flush_memtable(*, entries: dict[bytes, tuple[int, bytes | None]],
                   old: dict[bytes, list[tuple[int, bytes | None]]], ranges: list[Tombstone],
                   table_path: str, opts: dict, snapshots: list[int],
                   env: Env = POSIX) -> dict:
    """Write a sealed memtable's contents (``Memtable.entries``, ``.old`` and ``.ranges``)
    to the table at ``table_path``, keeping the versions some snapshot in ``snapshots``
    can see. Returns ``{"table": TableInfo | None}`` (None: nothing to write).

    The DB's flush runs this in a worker process through :func:`flush_marshalled`;
    recovery reaches it through :func:`flush_segment`.
    """
    if not entries and not ranges:
        return {"table": None}
    keys = sorted(entries)
    if not old and not ranges:
        # One version per key, no tombstones: nothing to retain or drop (a flush is never
        # bottommost), and the builder takes the sorted columns a block at a time.
        builder = TableBuilder(table_path, block_size=opts["block_size"],
                               compression=opts["compression"],
                               bloom_bits_per_key=opts["bloom_bits_per_key"], env=env)
        try:
            newest = list(map(entries.__getitem__, keys))
            seqs = list(map(itemgetter(0), newest))
            values = list(map(itemgetter(1), newest))
            builder.add_unique(keys, seqs, values)
            return {"table": builder.finish()}
        except BaseException:
            builder.abandon()
            raise

    def versions() -> Iterator[tuple[bytes, int, bytes | None]]:
        for key in keys:
            seq, value = entries[key]
            yield key, -seq, value
            for seq, value in reversed(old.get(key, ())):
                yield key, -seq, value

    tables = _write_tables(versions(), iter([table_path]), opts, snapshots, False, None,
                           list(ranges), env)
    return {"table": tables[0] if tables else None}


def flush_marshalled(*, contents: Handoff | bytes, table_path: str, opts: dict,
                     snapshots: list[int], env: Env = POSIX) -> dict:
    """:func:`flush_memtable` of ``marshal.dumps((entries, old, ranges))``: how a sealed
    memtable reaches a worker process. marshal (the worker is the same interpreter)
    encodes a memtable of 200,000 entries in about 20 ms of the foreground's time, where
    pickle takes about 250 ms (decision 0026). A :class:`Handoff` is taken, so the
    marshalled bytes are freed once unpacked, before the table is written."""
    data = contents.take() if isinstance(contents, Handoff) else contents
    del contents
    entries, old, ranges = marshal.loads(data)
    del data
    return flush_memtable(entries=entries, old=old, ranges=ranges, table_path=table_path,
                          opts=opts, snapshots=snapshots, env=env)


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
    if store is None:
        return None
    import cloudtier

    meter = store.find(cloudtier.MeteredStore)
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


#: Bytes of one compaction input read per request: a local table's in 256 KiB preads, so a
#: merge of five runs holds about 1.3 MiB of input (with 4 MiB windows, 20 MiB of the
#: worker's peak); a cloud table's in 4 MiB ranged GETs, since a request costs tens of
#: milliseconds there.
_LOCAL_WINDOW = 256 << 10
_CLOUD_WINDOW = 4 << 20


def _window(src: dict) -> int:
    return _LOCAL_WINDOW if "path" in src else _CLOUD_WINDOW


def _open_input(src: dict, store: Any, env: Env) -> Table:
    """A table to read: ``{"path": local path}`` or ``{"key": object key, "size": bytes}``."""
    if "path" in src:
        return Table(0, env.open_random(src["path"]), None, os.path.basename(src["path"]))
    from .cloud import CloudFile

    return Table(0, CloudFile(store, src["key"], src["size"]), None, src["key"])


def compact(*, runs: list[list[dict]], out_paths: list[str], opts: dict,
            snapshots: list[int], bottommost: bool, target_file_size: int,
            store: Any = None, upload_keys: list[str] | None = None,
            env: Env = POSIX) -> dict:
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
            tables.append([_open_input(src, st, env) for src in run])
        sources = [chain.from_iterable(t.entries(_window(src)) for t, src in zip(opened, run))
                   for opened, run in zip(tables, runs)]
        merged = sources[0] if len(sources) == 1 else heapq.merge(*sources)

        def paths() -> Iterator[str]:
            yield from out_paths
            raise RuntimeError("compaction produced more tables than file numbers allocated")

        tombs = [t for run in tables for table in run for t in table.ranges]
        infos = _write_tables(merged, paths(), opts, snapshots, bottommost, target_file_size,
                              tombs, env)
        if upload_keys is not None:
            from cloudtier import StoreError

            from .cloud import store_errors

            for info, key in zip(infos, upload_keys):
                data = env.read_file(info.path)
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
        try:
            return job(**kwargs)
        except OSError as e:
            raise os_error(f"{job.__name__}", e) from e
        except Exception as e:
            # Only a job that used a store can raise StoreError, and then cloudtier is
            # loaded: a local job's worker never imports it (decision 0031).
            cloudtier = sys.modules.get("cloudtier")
            if cloudtier is not None and isinstance(e, cloudtier.StoreError):
                from .cloud import store_errors

                raise store_errors(f"{job.__name__}", e) from e
            raise
    return run


def loaded_modules(*, names: list[str]) -> list[str]:
    """Those of ``names`` this process has imported (a worker's diagnostic: it is meant
    to import only what jobs need, see worker.py)."""
    return [n for n in names if n in sys.modules]


#: Jobs by name, for the worker protocol.
JOBS: dict[str, Callable[..., Any]] = {"flush_segment": _in_hierarchy(flush_segment),
        "flush_memtable": _in_hierarchy(flush_memtable),
        "flush_marshalled": _in_hierarchy(flush_marshalled), "compact": _in_hierarchy(compact),
        "loaded_modules": loaded_modules}
