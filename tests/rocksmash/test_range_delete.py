"""delete_range: range tombstones through the memtable, flush, tables, compaction, reopen,
cloud tables and a rebuild from the bucket (the dict model in test_model.py runs them in
random programs; here the cases the model cannot see: what is dropped, what is cut, and
RocksDB's argument rules)."""

from __future__ import annotations

import shutil
import uuid

import pytest

import rocksmash
from rocksmash.jobs import _write_tables
from rocksmash.range_del import upper
from rocksmash.table import Table
from rocksmash.env import LocalFile

SMALL = dict(memtable_size="16KiB", target_file_size="4KiB", block_size=512,
             l0_compaction_trigger=2, level_base_size="16KiB", level_multiplier=4,
             num_levels=4)


def key(i: int) -> bytes:
    return b"key%05d" % i


def load(db, n: int, tag: bytes = b"v") -> None:
    for i in range(n):
        db.put(key(i), tag + b"%05d" % i * 8)


def tables(db):
    return [(level, f) for level, f in db._version.files()]


def test_arguments_follow_rocksdb(tmp_path):
    with rocksmash.open(tmp_path / "db", background_processes=False) as db:
        db.put(b"a", b"1")
        seq = db._seq
        db.delete_range(b"a", b"a")  # start == end: a no-op, nothing is written
        assert db._seq == seq and db.get(b"a") == b"1" and not db._ranged
        with pytest.raises(rocksmash.InvalidArgumentError):
            db.delete_range(b"b", b"a")
        with pytest.raises(rocksmash.InvalidTypeError):
            db.delete_range("a", b"b")  # type: ignore[arg-type]
        with pytest.raises(rocksmash.InvalidArgumentError):
            db.delete_range(b"a", b"x" * (db.options.max_key_size + 1))
        db.delete_range(bytearray(b"a"), memoryview(b"b"))  # bytes-like, half-open
        db.put(b"b", b"2")
        assert db.get(b"a") is None and db.get(b"b") == b"2"


def test_snapshots_iterators_and_reopen(tmp_path):
    path = tmp_path / "db"
    with rocksmash.open(path, **SMALL) as db:
        load(db, 250)
        snap = db.snapshot()
        db.delete_range(key(100), key(200))
        db.put(key(150), b"after")
        it = db.scan(reverse=True)
        it.seek(key(199))  # reverse seek lands on the first live key <= target
        assert next(it)[0] == key(150)
        assert next(it)[0] == key(99)
        fwd = db.scan(key(90))
        fwd.seek(key(120))
        assert next(fwd)[0] == key(150) and next(fwd)[0] == key(200)
        assert len(list(snap.scan())) == 250 and snap.get(key(180)) is not None
        db.flush()
        db.compact_range()
        assert len(list(snap.scan())) == 250, "a snapshot's covered data was dropped"
        assert snap.get(key(180)) == b"v" + b"%05d" % 180 * 8
        snap.close()
        it.close()
        fwd.close()
        expected = [key(i) for i in range(250) if not 100 <= i < 200 or i == 150]
        assert list(db.keys()) == expected
    with rocksmash.open(path, **SMALL) as db:
        assert list(db.keys()) == expected
        assert db.get(key(180)) is None and db.get(key(150)) == b"after"


def test_compaction_drops_covered_data_and_then_the_tombstone(tmp_path):
    with rocksmash.open(tmp_path / "db", **SMALL, background_processes=False) as db:
        load(db, 2000)
        db.flush()
        db.delete_range(key(0), key(1500))
        db.flush()  # the tombstone is in an L0 table of its own (no point entries)
        (only,) = [f for level, f in tables(db) if level == 0 and f.table.ranges]
        assert only.table.props["count"] == 0 and only.smallest == key(0)
        assert len(list(db.keys())) == 500
        before = db.approximate_count()
        db.compact_range()
        assert not any(f.table.ranges for _, f in tables(db)), "tombstone kept at the bottom"
        assert not db._ranged  # reads are back on the fast path
        assert db.approximate_count() == 500 < before
        assert list(db.keys()) == [key(i) for i in range(1500, 2000)]


def test_tombstones_are_cut_with_the_tables_of_a_level(tmp_path):
    """A compaction that cuts its output cuts the tombstones too: each table's key range
    covers its part, and the tables stay disjoint."""
    entries = [(key(i), -(10 + i), b"x" * 50) for i in range(0, 600, 2)]
    tombs = [(key(101), key(401), 1000), (key(0), key(5), 5), (b"zz", b"zzz", 7)]
    paths = iter(str(tmp_path / f"{n}.sst") for n in range(100))
    opts = dict(block_size=256, compression="none", bloom_bits_per_key=10)
    infos = _write_tables(iter(entries), paths, opts, [], False, 2048, tombs)
    assert len(infos) > 3
    for a, b in zip(infos, infos[1:]):
        assert a.largest < b.smallest
    seen = []
    for info in infos:
        t = Table(0, LocalFile(info.path), None)
        try:
            for start, end, seq in t.ranges:
                assert info.smallest <= start and upper(end) <= info.largest
                seen.append((start, end, seq))
            kept = [k for k, _, _ in t.entries()]
            assert not [k for k in kept if key(101) <= k < key(401)]  # dropped: covered
        finally:
            t.close()
    # The pieces of [key00101, key00401) add up to it exactly.
    pieces = sorted(t for t in seen if t[2] == 1000)
    assert pieces[0][0] == key(101) and pieces[-1][1] == key(401)
    assert all(x[1] == y[0] for x, y in zip(pieces, pieces[1:]))
    assert (b"zz", b"zzz", 7) in seen and (key(0), key(5), 5) in seen


def test_bottommost_keeps_a_tombstone_only_for_an_older_snapshot(tmp_path):
    entries = [(key(1), -3, b"old"), (key(2), -4, b"old")]
    tombs = [(key(0), key(9), 6)]
    opts = dict(block_size=256, compression="none", bloom_bits_per_key=10)
    # A snapshot at 5 still sees key 1 and 2: they stay, and so does the tombstone.
    (info,) = _write_tables(iter(entries), iter([str(tmp_path / "a.sst")]), opts, [5], True,
                            None, tombs)
    t = Table(0, LocalFile(info.path), None)
    assert len(list(t.entries())) == 2 and t.ranges == tombs
    t.close()
    # No snapshot: both versions and the tombstone go; nothing is left to write.
    assert _write_tables(iter(entries), iter([str(tmp_path / "b.sst")]), opts, [], True,
                         None, tombs) == []
    # Not the bottom: the versions go, the tombstone stays for the levels below.
    (info,) = _write_tables(iter(entries), iter([str(tmp_path / "c.sst")]), opts, [], False,
                            None, tombs)
    t = Table(0, LocalFile(info.path), None)
    assert list(t.entries()) == [] and t.ranges == tombs
    t.close()


def test_cloud_tables_and_rebuild_from_the_bucket(tmp_path):
    """(In-process jobs here; test_model's DBModelCloudFiles runs range deletes with
    worker processes uploading to a file:// bucket, and test_crash's writer uses them.)"""
    processes = False
    store = dict(object_store=f"file://{tmp_path}/bucket", wal_shipping="sync",
                 local_budget=0, cloud_target_file_size="8KiB")
    path = tmp_path / "db"
    with rocksmash.open(path, **SMALL, **store, background_processes=processes) as db:
        load(db, 800)
        db.compact_range()
        snap = db.snapshot()
        db.delete_range(key(200), key(500))
        db.flush()
        db.compact_range()  # a snapshot keeps the tombstone: it reaches the cloud level
        assert any(f.table.ranges and f.tier == 1 for _, f in tables(db))
        snap.close()
        db.delete_range(key(600), key(700), sync=True)  # only in the (shipped) WAL
        expected = list(db.keys())
    assert len(expected) == 800 - 300 - 100
    with rocksmash.open(path, **SMALL, **store, background_processes=processes) as db:
        assert list(db.keys()) == expected  # MetaCache props carry the cloud tombstones
    shutil.rmtree(path)  # the local disk is gone: rebuild from the bucket alone
    with rocksmash.open(path, **SMALL, **store, background_processes=processes) as db:
        assert db.stats()["restored_from_object_store"]
        assert list(db.keys()) == expected
        assert db.get(key(300)) is None and db.get(key(650)) is None
        db.compact_range()
        assert list(db.keys()) == expected


def test_memory_store_worker_free_cloud_compaction(tmp_path):
    """memory:// stores cannot be reopened in a worker: compaction runs in-process."""
    store = dict(object_store=f"memory://{uuid.uuid4().hex}/db", local_budget=0,
                 cloud_target_file_size="8KiB")
    with rocksmash.open(tmp_path / "db", **SMALL, **store) as db:
        load(db, 1000)
        db.delete_range(key(10), key(990))
        db.compact_range()
        assert list(db.keys()) == [key(i) for i in list(range(10)) + list(range(990, 1000))]


def test_read_only_view_applies_tombstones(tmp_path):
    path = tmp_path / "db"
    with rocksmash.open(path, **SMALL) as db:
        load(db, 300)
        db.flush()
        db.delete_range(key(0), key(250))  # in the WAL only
        with rocksmash.open(path, read_only=True, num_levels=4) as ro:
            assert list(ro.keys()) == [key(i) for i in range(250, 300)]
            with pytest.raises(rocksmash.InvalidArgumentError):
                ro.delete_range(b"a", b"b")


def test_row_cache_forgets_deleted_rows(tmp_path):
    with rocksmash.open(tmp_path / "db", row_cache_size="50%",
                        background_processes=False) as db:
        load(db, 50)
        assert db.get(key(10)) is not None  # cached
        b = rocksmash.WriteBatch().delete_range(key(0), key(20)).put(key(15), b"again")
        db.write(b)
        assert db.get(key(10)) is None and db.get(key(15)) == b"again"


def test_a_newer_write_over_an_older_tombstone_is_seen_by_scans(tmp_path):
    """Sources newest first: a tombstone, a put, a tombstone under it, data under that.
    (Each source's
    filter must use the tombstones of the sources newer than *it*: a filter bound late to
    the last source's hid the put.)"""
    with rocksmash.open(tmp_path / "db", background_processes=False,
                        l0_compaction_trigger=8) as db:
        db.put(b"b", b"oldest")
        db.put(b"c", b"oldest")
        db.flush()
        db.delete_range(b"a", b"z")
        db.flush()
        db.put(b"b", b"newer")
        db.flush()
        db.put(b"q", b"memtable")
        db.delete_range(b"x", b"y")  # the memtable has a tombstone too
        assert list(db.scan()) == [(b"b", b"newer"), (b"q", b"memtable")]
        assert list(db.scan(reverse=True)) == [(b"q", b"memtable"), (b"b", b"newer")]
