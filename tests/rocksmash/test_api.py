"""The public API: types, dict protocol, options, errors, lifecycle."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import rocksmash
from rocksmash import (ClosedError, Error, InvalidArgumentError, InvalidTypeError,
                       LockedError, WriteBatch)


@pytest.fixture(params=[True, False], ids=["processes", "threads"])
def db(tmp_path, request):
    d = rocksmash.open(tmp_path / "db", memtable_size="16KiB",
                       background_processes=request.param)
    yield d
    d.close()


def test_put_get_delete(db):
    db.put(b"k", b"v")
    assert db.get(b"k") == b"v"
    db.delete(b"k")
    assert db.get(b"k") is None
    assert db.get(b"k", b"dflt") == b"dflt"
    db.delete(b"never-there")  # deleting an absent key is not an error


def test_dict_protocol(db):
    db[b"a"] = b"1"
    assert db[b"a"] == b"1"
    assert b"a" in db and b"b" not in db
    del db[b"a"]
    with pytest.raises(KeyError):
        db[b"a"]
    with pytest.raises(KeyError):
        del db[b"a"]


# bytearray and memoryview are accepted (test_library_keys.py)
@pytest.mark.parametrize("bad", ["str", 1, None])
def test_non_bytes_rejected(db, bad):
    with pytest.raises(TypeError):
        db.put(bad, b"v")
    with pytest.raises(InvalidTypeError):
        db.put(b"k", bad)
    with pytest.raises(TypeError):
        db.get(bad)
    with pytest.raises(TypeError):
        db.delete(bad)
    with pytest.raises(TypeError):
        WriteBatch().put(bad, b"v")
    with pytest.raises(TypeError):
        db.scan(start=bad) if bad is not None else db.scan(end=1)
    assert list(db.scan()) == []  # nothing was written


def test_oversized_rejected(tmp_path):
    with rocksmash.open(tmp_path, max_key_size=8, max_value_size=16) as db:
        with pytest.raises(InvalidArgumentError, match="max_key_size"):
            db.put(b"k" * 9, b"v")
        with pytest.raises(InvalidArgumentError, match="max_value_size"):
            db.put(b"k", b"v" * 17)
        b = WriteBatch().put(b"ok", b"fine").put(b"k", b"v" * 17)
        with pytest.raises(InvalidArgumentError):
            db.write(b)
        assert db.get(b"ok") is None  # the batch was refused as a whole
        db.put(b"k" * 8, b"v" * 16)


def test_batch_is_atomic_and_ordered(db):
    b = WriteBatch()
    b.put(b"x", b"1").put(b"y", b"2").delete(b"x").put(b"z", b"3")
    assert len(b) == 4
    db.write(b)
    assert list(db.scan()) == [(b"y", b"2"), (b"z", b"3")]
    with pytest.raises(TypeError):
        db.write([(b"a", b"b")])


def test_multi_get(db):
    db.put(b"a", b"1")
    db.put(b"c", b"3")
    assert db.multi_get([b"a", b"b", b"c"]) == [b"1", None, b"3"]


def test_scan_bounds_and_reverse(db):
    for i in range(200):
        db.put(b"%03d" % i, b"v%d" % i)
    db.flush()
    for i in range(0, 200, 3):
        db.delete(b"%03d" % i)
    expected = [(b"%03d" % i, b"v%d" % i) for i in range(200) if i % 3]
    assert list(db.scan()) == expected
    assert list(db.scan(reverse=True)) == expected[::-1]
    sub = [kv for kv in expected if b"050" <= kv[0] < b"100"]
    assert list(db.scan(b"050", b"100")) == sub
    assert list(db.scan(b"050", b"100", reverse=True)) == sub[::-1]
    assert list(db.scan(b"100", b"050")) == []


def test_snapshot_isolation(db):
    db.put(b"a", b"old")
    with db.snapshot() as snap:
        db.put(b"a", b"new")
        db.put(b"b", b"added")
        db.flush()
        db.compact_range()
        assert snap.get(b"a") == b"old"
        assert snap.get(b"b") is None
        assert list(db.scan(snapshot=snap)) == [(b"a", b"old")]
        assert list(snap.scan()) == [(b"a", b"old")]
    with pytest.raises(ClosedError):
        snap.get(b"a")
    assert db.get(b"a") == b"new"


def test_iterator_sees_state_at_creation(db):
    for i in range(50):
        db.put(b"%02d" % i, b"a")
    it = db.scan()
    first = next(it)
    for i in range(50):
        db.put(b"%02d" % i, b"b")
    db.put(b"99", b"late")
    rest = list(it)
    assert [first] + rest == [(b"%02d" % i, b"a") for i in range(50)]


def test_unknown_and_bad_options(tmp_path):
    with pytest.raises(InvalidArgumentError, match="memtable_sise"):
        rocksmash.open(tmp_path, memtable_sise="1MiB")
    with pytest.raises(InvalidArgumentError, match="compression"):
        rocksmash.open(tmp_path, compression="snappy")
    with pytest.raises(InvalidArgumentError, match="block_size"):
        rocksmash.open(tmp_path, block_size="lots")
    with pytest.raises(InvalidArgumentError):
        rocksmash.open(tmp_path, sync="yes")
    assert rocksmash.parse_size("64MiB") == 64 << 20
    assert rocksmash.parse_size("1.5KB") == 1500
    assert rocksmash.parse_size(7) == 7


def test_create_flags(tmp_path):
    with pytest.raises(InvalidArgumentError, match="no database"):
        rocksmash.open(tmp_path / "none", create_if_missing=False)
    rocksmash.open(tmp_path / "db").close()
    with pytest.raises(InvalidArgumentError, match="exists"):
        rocksmash.open(tmp_path / "db", error_if_exists=True)


def test_closed_database_raises(tmp_path):
    db = rocksmash.open(tmp_path)
    db.put(b"a", b"1")
    it = db.scan()
    db.close()
    db.close()  # idempotent
    for call in (lambda: db.get(b"a"), lambda: db.put(b"a", b"2"), lambda: db.delete(b"a"),
                 lambda: db.write(WriteBatch().put(b"a", b"b")), db.flush, db.snapshot,
                 lambda: next(it)):
        with pytest.raises(ClosedError):
            call()
    assert issubclass(ClosedError, Error)


def test_second_open_is_locked(tmp_path):
    with rocksmash.open(tmp_path):
        with pytest.raises(LockedError):
            rocksmash.open(tmp_path)
        code = ("import rocksmash, sys\n"
                "try:\n rocksmash.open(sys.argv[1])\nexcept rocksmash.LockedError:\n"
                " sys.exit(42)\n")
        r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], timeout=60)
        assert r.returncode == 42
    rocksmash.open(tmp_path).close()  # released on close


def test_reopen_keeps_everything(tmp_path):
    with rocksmash.open(tmp_path, memtable_size="8KiB") as db:
        for i in range(2000):
            db.put(b"key%05d" % i, os.urandom(20))
        expected = list(db.scan())
        db.delete(b"key00007")
        expected = [kv for kv in expected if kv[0] != b"key00007"]
    with rocksmash.open(tmp_path) as db:
        assert list(db.scan()) == expected
        assert db.stats()["recovered_segments"] >= 1


def test_stats_shape(db):
    for i in range(1000):
        db.put(b"%05d" % i, b"x" * 50)
    db.flush()
    s = db.stats()
    assert s["flushes"] >= 1 and s["sequence"] == 1000
    assert sum(lvl["files"] for lvl in s["levels"]) >= 1
    assert s["table_bytes"] > 0


def test_databases_share_the_processes_worker_pool(tmp_path, monkeypatch):
    """Five databases that all flush and compact use the process's one shared pool (one
    worker per CPU but one, at least 1), not workers of their own."""
    psutil = pytest.importorskip("psutil")
    from rocksmash.worker import shared_pool

    pool = shared_pool()
    monkeypatch.setattr(pool, "idle_exit", 3600.0)  # no worker exits while it is checked
    dbs = [rocksmash.open(tmp_path / f"db{i}", memtable_size="4KiB") for i in range(5)]
    try:
        for db in dbs:
            for i in range(500):
                db.put(b"%05d" % i, b"x" * 50)
            db.flush()
            db.compact_range()
        pids = set(pool.pids)
        assert 1 <= len(pids) <= pool.size
        assert all(psutil.pid_exists(p) for p in pids)
    finally:
        for db in dbs:
            db.close()
    with rocksmash.open(tmp_path / "db0") as db:  # reopened: the same workers serve it
        db.put(b"more", b"x")
        db.flush()
        assert set(pool.pids) <= pids | set(pool.pids)
        assert len(pool.pids) <= pool.size


def test_a_worker_imports_only_what_jobs_need(tmp_path):
    """A worker process runs jobs without the package's __init__ (which imports the whole
    engine and the cloud tier): after a flush and a compaction in it, neither rocksmash.db
    nor cloudtier is loaded there."""
    from rocksmash.worker import WorkerProcess

    opts = {"block_size": 4096, "compression": "none", "bloom_bits_per_key": 10}
    entries = {b"%05d" % i: (i + 1, b"x" * 50) for i in range(200)}
    w = WorkerProcess()
    try:
        flushed = w.call("flush_memtable", entries=entries, old={}, ranges=[],
                         table_path=str(tmp_path / "1.sst"), opts=opts, snapshots=[])
        assert flushed["table"].smallest == b"00000"
        out = w.call("compact", runs=[[{"path": str(tmp_path / "1.sst")}]],
                     out_paths=[str(tmp_path / "2.sst")], opts=opts, snapshots=[],
                     bottommost=True, target_file_size=1 << 20)
        assert [t.largest for t in out["tables"]] == [b"00199"]
        names = ["rocksmash.db", "cloudtier", "rocksmash.jobs"]
        assert w.call("loaded_modules", names=names) == ["rocksmash.jobs"]
    finally:
        w.stop()


def test_concurrent_writers_and_readers(tmp_path):
    import threading

    with rocksmash.open(tmp_path, memtable_size="32KiB") as db:
        errors = []

        def writer(t):
            try:
                for i in range(1500):
                    db.put(b"t%d-%05d" % (t, i), b"%d" % i, sync=(i % 500 == 0))
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        def reader():
            try:
                for _ in range(30):
                    keys = [k for k, _ in db.scan(b"t0-", b"t0-~")]
                    assert keys == sorted(keys)
            except Exception as e:  # pragma: no cover
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(3)]
        threads.append(threading.Thread(target=reader))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        for t in range(3):
            assert len(list(db.scan(b"t%d-" % t, b"t%d-~" % t))) == 1500


def test_readers_never_see_a_write_half_done(tmp_path, monkeypatch):
    """A writer that pauses right after touching the memtable (before publishing its
    sequence number): a reader must never miss a key that is being overwritten, nor see
    half of a batch."""
    import sys
    import threading
    import time

    from rocksmash.memtable import Memtable

    put = Memtable.put

    def slow_put(self, *args):
        put(self, *args)
        time.sleep(0.0002)  # let the reader run inside the write

    monkeypatch.setattr(Memtable, "put", slow_put)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        with rocksmash.open(tmp_path, background_processes=False) as db:
            db.put(b"k", b"0")
            db.write(WriteBatch().put(b"x", b"0").put(b"y", b"0"))
            done = threading.Event()
            errors = []

            def writer():
                for i in range(300):
                    db.put(b"k", b"%d" % i)
                    db.write(WriteBatch().put(b"x", b"%d" % i).put(b"y", b"%d" % i))
                done.set()

            def reader():
                while not done.is_set():
                    if db.get(b"k") is None:
                        errors.append("k vanished")
                    x, y = db.multi_get([b"x", b"y"])
                    if x != y:
                        errors.append(f"half a batch: {x!r} {y!r}")
                    with db.snapshot() as s:
                        if s.get(b"x") != s.get(b"y"):
                            errors.append("half a batch in a snapshot")

            threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors, errors[:5]
    finally:
        sys.setswitchinterval(old)


def test_iterating_a_database_gives_its_keys(tmp_path):
    """Before: list(db) raised InvalidTypeError (Python fell back to db[0], db[1], ...)."""
    with rocksmash.open(tmp_path, background_processes=False) as db:
        for k in (b"b", b"a", b"c"):
            db.put(k, k.upper())
        db.delete(b"c")
        assert list(db) == [b"a", b"b"] and [k for k in db] == [b"a", b"b"]
        assert list(db.keys(b"b")) == [b"b"] and list(db.keys(reverse=True)) == [b"b", b"a"]
        assert list(db.values()) == [b"A", b"B"]
        assert dict(db.items()) == {b"a": b"A", b"b": b"B"}
        assert len(db) == 2  # exact (a keys-only scan); see test_mapping_api.py


def test_scan_prefix_and_limit(tmp_path):
    with rocksmash.open(tmp_path, background_processes=False) as db:
        for k in (b"a", b"ab", b"abc", b"ab\xff", b"ab\xff\xff", b"ac", b"b", b"\xff\xff"):
            db.put(k, b"v")
        keys = lambda **kw: [k for k, _ in db.scan(**kw)]  # noqa: E731
        assert keys(prefix=b"ab") == [b"ab", b"abc", b"ab\xff", b"ab\xff\xff"]
        assert keys(prefix=b"ab", reverse=True) == [b"ab\xff\xff", b"ab\xff", b"abc", b"ab"]
        assert keys(prefix=b"ab\xff") == [b"ab\xff", b"ab\xff\xff"]
        assert keys(prefix=b"\xff") == [b"\xff\xff"]
        assert keys(prefix=b"ab", start=b"ab\x00", end=b"ab\xff") == [b"abc"]
        assert keys(limit=3) == [b"a", b"ab", b"abc"] and keys(limit=0) == []
        assert keys(prefix=b"a", limit=2, reverse=True) == [b"ac", b"ab\xff\xff"]
        with pytest.raises(rocksmash.InvalidArgumentError):
            db.scan(limit=-1)
        with pytest.raises(rocksmash.InvalidTypeError):
            db.scan(prefix="ab")


def test_dict_methods_and_approximations(tmp_path):
    with rocksmash.open(tmp_path, background_processes=False, memtable_size="64KiB") as db:
        db.update({b"a": b"1", b"b": b"2"})
        db.update([(b"c", b"3")], sync=True)
        assert dict(db.items()) == {b"a": b"1", b"b": b"2", b"c": b"3"}
        assert db.pop(b"a") == b"1" and db.get(b"a") is None
        assert db.pop(b"a", b"gone") == b"gone" and db.pop(b"a", None) is None
        with pytest.raises(KeyError):
            db.pop(b"a")
        assert db.setdefault(b"b", b"x") == b"2" and db.setdefault(b"d", b"4") == b"4"
        with pytest.raises(rocksmash.InvalidTypeError):
            db.update({b"e": 5})
        assert db.get(b"e") is None
        for i in range(5000):
            db.put(b"k%05d" % i, b"v" * 50)
        db.flush()
        assert 5000 <= db.approximate_count() <= 5000 + 10
        total = db.approximate_size()
        assert total == db.stats()["table_bytes"] > 0
        assert db.approximate_size(b"zzz") == 0 and 0 < db.approximate_size(b"k0", b"k1") <= total
