"""The cloud tier: lower levels in an object store (memory://, file://, and s3:// against
real SeaweedFS and moto servers over HTTP), the MetaCache and DataCache, reopen from the bucket, fencing
of a second writer, and failing object stores."""

from __future__ import annotations

import os
import threading
import shutil
import uuid

import pytest

import rocksmash
from rocksmash import FencedError, UnavailableError

# Everything but L0 goes to the object store; small tables so there are many.
CLOUDY = dict(local_budget=0, memtable_size="16KiB", target_file_size="16KiB",
              cloud_target_file_size="32KiB", block_size=512, l0_compaction_trigger=2,
              level_base_size="64KiB", level_multiplier=4, num_levels=4)


@pytest.fixture(params=["memory", "file", pytest.param("seaweedfs", marks=pytest.mark.server),
                        pytest.param("moto", marks=pytest.mark.server)])
def store_options(request, tmp_path):
    if request.param == "memory":
        return dict(object_store=f"memory://{uuid.uuid4().hex}/db")
    if request.param == "file":
        return dict(object_store=f"file://{tmp_path}/bucket")
    return request.getfixturevalue("s3_store_options_for")(request.param)


def load(db, n, tag=b""):
    for i in range(n):
        db.put(b"key%06d" % i, tag + b"value%06d" % i * 4)


def gets(db):
    return db.stats()["cloud"]["object_store"]["requests"].get("get", 0)


def test_tables_go_to_the_cloud_and_read_back(tmp_path, store_options):
    with rocksmash.open(tmp_path / "db", **CLOUDY, **store_options) as db:
        load(db, 3000)
        db.compact_range()
        s = db.stats()["cloud"]
        assert s["cloud_tables"] >= 2 and s["cloud_table_bytes"] > 0
        assert s["local_table_bytes"] == 0
        # uploads count, whether a worker process or this one made them
        assert s["object_store"]["requests"]["put"] >= s["cloud_tables"]
        assert s["object_store"]["bytes_in"] >= s["cloud_table_bytes"]
        for i in range(0, 3000, 97):
            assert db.get(b"key%06d" % i) == b"value%06d" % i * 4
        assert [k for k, _ in db.scan(b"key000100", b"key000110")] == [
            b"key%06d" % i for i in range(100, 110)]


def test_absent_key_costs_no_request_present_key_at_most_one(tmp_path, store_options):
    with rocksmash.open(tmp_path / "db", **CLOUDY, **store_options,
                        block_cache_size=0) as db:
        load(db, 3000)
        db.compact_range()
        before = gets(db)
        for i in range(200):
            assert db.get(b"absent%06d" % i) is None
        absent_gets = gets(db) - before
        before = gets(db)
        for i in range(0, 3000, 150):
            assert db.get(b"key%06d" % i) is not None
        present = len(range(0, 3000, 150))
        assert absent_gets <= 200 * 0.03 + 1  # only bloom false positives fetch
        assert gets(db) - before <= present


def test_reopen_from_bucket_after_local_disk_loss(tmp_path, store_options):
    path = tmp_path / "db"
    with rocksmash.open(path, **CLOUDY, **store_options) as db:
        load(db, 2000)
        db.compact_range()
        expected = list(db.scan())
    shutil.rmtree(path)  # the local disk is gone
    with rocksmash.open(path, **CLOUDY, **store_options) as db:
        assert db.stats()["restored_from_object_store"]
        assert list(db.scan()) == expected
        db.put(b"new", b"write")  # and it is writable again
        assert db.get(b"key000042") == b"value000042" * 4


def test_second_writer_is_fenced(tmp_path, store_options):
    a = rocksmash.open(tmp_path / "a", **CLOUDY, **store_options)
    try:
        load(a, 1500)
        a.compact_range()
        b = rocksmash.open(tmp_path / "b", **CLOUDY, **store_options)  # takes the prefix
        try:
            assert b.get(b"key000007") == b"value000007" * 4
            with pytest.raises(FencedError):  # A notices at its next publish...
                load(a, 1500, tag=b"a2")
                a.compact_range()
            with pytest.raises(FencedError):  # ...and refuses writes from then on
                a.put(b"more", b"x")
            b.put(b"b", b"writes fine")
            b.compact_range()
        finally:
            b.close()
    finally:
        a.close()
    with pytest.raises(FencedError, match="stale"):  # A's directory is behind the bucket
        rocksmash.open(tmp_path / "a", **CLOUDY, **store_options)


def test_data_cache_survives_reopen(tmp_path, store_options):
    path = tmp_path / "db"
    hot = [b"key%06d" % i for i in range(0, 2000, 200)]
    with rocksmash.open(path, **CLOUDY, **store_options, block_cache_size=0) as db:
        load(db, 2000)
        db.compact_range()
        for _ in range(3):  # read more than once: admitted to the data cache
            for k in hot:
                db.get(k)
    with rocksmash.open(path, **CLOUDY, **store_options, block_cache_size=0) as db:
        before = gets(db)
        for k in hot:
            assert db.get(k) is not None
        assert gets(db) == before, "hot blocks should come from the local data cache"
        assert db.stats()["cloud"]["data_cache"]["hits"] >= len(hot)


@pytest.mark.parametrize("aware", [True, False])
def test_compaction_keeps_hot_blocks_cached(tmp_path, aware):
    # The data cache holds a fraction of the data: only the hot blocks can stay.
    opts = dict(CLOUDY, object_store=f"memory://{uuid.uuid4().hex}/db",
                compaction_aware_cache=aware, cache_size="48KiB")
    hot = [b"key%06d" % i for i in range(0, 3000, 150)]
    with rocksmash.open(tmp_path / "db", **opts) as db:
        load(db, 3000)
        db.compact_range()
        for _ in range(3):
            for k in hot:
                db.get(k)
        for part in range(6):  # rewrite everything, reading the hot keys all along
            for i in range(part * 500, part * 500 + 500):
                db.put(b"key%06d" % i, b"v2" + b"value%06d" % i * 4)
            for k in hot:
                db.get(k)
        db.flush()  # (a read from the memtable leaves no trace of hotness)
        for k in hot:
            db.get(k)
        db.compact_range()  # the old tables go away
        before = gets(db)
        for k in hot:
            assert db.get(k) == b"v2" + b"value%s" % k[3:] * 4 or db.get(k) is not None
        after = gets(db) - before
        fills = db.stats()["cache_fills_by_compaction"]
    if aware:
        assert fills > 0 and after == 0
    else:
        assert fills == 0 and after > 0


def test_metadata_is_compact(tmp_path):
    opts = dict(CLOUDY, object_store=f"memory://{uuid.uuid4().hex}/db", block_size=4096,
                cloud_target_file_size="1MiB", target_file_size="1MiB",
                memtable_size="1MiB")
    with rocksmash.open(tmp_path / "db", **opts) as db:
        for i in range(60000):
            db.put(b"user%020d" % (i * 7919 % 1000003), os.urandom(100))
        db.compact_range()
        s = db.stats()["cloud"]
    assert s["cloud_table_bytes"] > 5_000_000
    assert s["meta_bytes_pct_of_cloud"] < 2.0, s


@pytest.mark.parametrize("kind", ["errors", "hangs"])
def test_failing_object_store_loses_no_acknowledged_write(tmp_path, kind):
    faults = ({"seed": 7, "error_rate": 0.15} if kind == "errors"
              else {"seed": 7, "hang_rate": 0.05, "timeout_s": 0.01})
    name = uuid.uuid4().hex
    opts = dict(CLOUDY, object_store=f"memory://{name}/db",
                object_store_options={"faults": faults}, object_store_retries=2)
    model = {}
    path = tmp_path / "db"
    unavailable = 0
    with rocksmash.open(path, **CLOUDY, object_store=f"memory://{name}/db"):
        pass  # create it on a healthy store first
    for _ in range(20):  # opening talks to the store too, and may find it down
        try:
            db = rocksmash.open(path, **opts)
            break
        except UnavailableError:
            unavailable += 1
    try:
        for round_ in range(6):
            for i in range(800):
                k = b"key%04d" % ((i * 31 + round_) % 1200)
                v = b"r%d-%d" % (round_, i)
                db.put(k, v)
                model[k] = v
            try:
                db.compact_range()
            except UnavailableError:
                unavailable += 1
            for k in list(model)[::37]:
                try:
                    assert db.get(k) == model[k]
                except UnavailableError:
                    unavailable += 1
    finally:
        db.close()
    with rocksmash.open(path, **CLOUDY, object_store=f"memory://{name}/db") as db:
        assert dict(db.scan()) == model
        assert db.stats()["background_error"] is None


@pytest.mark.parametrize("fetch", [0, 16384])
def test_a_miss_fetches_a_window_of_blocks(tmp_path, fetch):
    opts = dict(CLOUDY, object_store=f"memory://{uuid.uuid4().hex}/db", block_cache_size=0,
                cloud_fetch_size=fetch, compaction_aware_cache=False)  # a cold cache
    with rocksmash.open(tmp_path / "db", **opts) as db:
        load(db, 3000)
        db.compact_range()
        before = gets(db)
        for i in range(1000, 1100):  # neighbouring keys: a few blocks of one table
            assert db.get(b"key%06d" % i) == b"value%06d" % i * 4
        fetched = gets(db) - before
    if fetch:
        assert fetched <= 2  # one window, two if the range straddles a window edge
    else:
        assert fetched >= 5  # one request per block


def test_racing_openers_leave_one_writer(tmp_path, store_options, request):
    """Four processes' worth of openers race on one prefix: whatever the interleaving, at
    most one of them can still write afterwards, and its writes are the database's. Runs
    where creating an object is atomic (not on moto: it evaluates If-None-Match
    check-then-act); fencing never rests on If-Match (SeaweedFS's is not atomic)."""
    param = request.node.callspec.params["store_options"]
    if param in ("seaweedfs", "moto"):
        server = request.getfixturevalue(f"{param}_server")
        if not server.conditional_puts.if_none_match_atomic:
            pytest.skip(f"{param} evaluates If-None-Match check-then-act, not atomically")
    with rocksmash.open(tmp_path / "first", **CLOUDY, **store_options) as db:
        load(db, 500)
        db.compact_range()
    for round_ in range(3):
        opened, barrier = [], threading.Barrier(4)

        def opener(i):
            barrier.wait()
            try:
                opened.append(rocksmash.open(tmp_path / f"r{round_}-{i}", **CLOUDY,
                                             **store_options, background_processes=False))
            except FencedError:
                pass  # lost the race to claim the epoch: retry would be the answer

        threads = [threading.Thread(target=opener, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert opened, "no opener won"
        alive = []
        for db in opened:
            try:
                db.put(b"round", b"%d" % round_)
                db.flush()  # checks the epoch
                alive.append(db)
            except FencedError:
                pass
        assert len(alive) == 1, f"{len(alive)} writers are alive after the race"
        alive[0].compact_range()  # publish: the survivor's writes are the database's
        for db in opened:
            db.close()
    with rocksmash.open(tmp_path / "last", **CLOUDY, **store_options) as db:
        assert db.get(b"round") == b"2" and db.get(b"key000001") == b"value000001" * 4
