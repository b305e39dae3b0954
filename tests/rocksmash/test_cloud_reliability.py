"""Failure paths of the cloud tier, each found by attacking it: a fenced writer that
keeps acknowledging, a bucket lost for good, an outage while a worker opens its store,
failed opens, a tampered mirror or epoch object, a truncated table object, and another
database's prefix."""

from __future__ import annotations

import shutil
import time
import uuid

import pytest

import cloudtier
import rocksmash
from rocksmash import (CorruptionError, FencedError, InvalidArgumentError, ObjectStoreError,
                       UnavailableError)
from rocksmash.cloud import EPOCHS, MIRROR_FORMATS, MIRRORS, decode_object, encode_object, wal_key

CLOUDY = dict(local_budget=0, memtable_size="16KiB", target_file_size="16KiB",
              cloud_target_file_size="32KiB", block_size=512, l0_compaction_trigger=2,
              level_base_size="64KiB", level_multiplier=4, num_levels=4)


def load(db, n, tag=b""):
    for i in range(n):
        db.put(b"key%06d" % i, tag + b"value%06d" % i)


def until(cond, seconds=20.0, what="condition"):
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def newest(store, prefix):
    """The key of the newest numbered object under ``prefix``."""
    return max(info.key for info in store.list(prefix))


@pytest.fixture
def file_store(tmp_path):
    return f"file://{tmp_path}/bucket/db"


# ------------------------------------------------------------------ fencing

def test_fenced_writer_learns_at_its_next_flush(tmp_path, file_store):
    a = rocksmash.open(tmp_path / "a", **dict(CLOUDY, memtable_size="1MiB"),
                       object_store=file_store, fencing_check_interval=3600)
    try:
        load(a, 100)
        a.compact_range()
        a.put(b"late", b"1", sync=True)
        with rocksmash.open(tmp_path / "b", **CLOUDY, object_store=file_store) as b:
            assert b.get(b"key000001") == b"value000001"
            with pytest.raises(FencedError):
                a.flush()
            with pytest.raises(FencedError):
                a.put(b"after", b"x", sync=True)
    finally:
        a.close()


@pytest.mark.parametrize("shipping", ["off", "sealed"])
def test_fenced_writer_stops_within_the_check_interval(tmp_path, file_store, shipping):
    """Before the fix: 14,620 sync puts and a flush acknowledged for over 20 s after the
    takeover, all lost. Now writes raise FencedError within about one interval (without
    shipping every interval, the periodic epoch check fences)."""
    a = rocksmash.open(tmp_path / "a", object_store=file_store, fencing_check_interval=0.2,
                       background_processes=False, wal_shipping=shipping)
    try:
        load(a, 50)
        b = rocksmash.open(tmp_path / "b", object_store=file_store, background_processes=False)
        taken = time.monotonic()
        acked_after = 0
        with pytest.raises(FencedError):
            for i in range(10_000_000):
                a.put(b"a%08d" % i, b"x", sync=True)
                acked_after += 1
                if time.monotonic() - taken > 30:
                    break
        assert time.monotonic() - taken < 10
        assert a.stats()["epoch_checks"] >= 1
        b.close()
    finally:
        a.close()


# ------------------------------------------------------------------ store failures

class Switch(cloudtier.StoreWrapper):
    """A store that starts failing every call with ``error`` once ``broken`` is set."""

    def __init__(self, inner, error):
        super().__init__(inner)
        self.error = error
        self.broken = False

    def _check(self):
        if self.broken:
            raise self.error

    def put(self, key, data, **kw):
        self._check()
        return self.inner.put(key, data, **kw)

    def get(self, key, start=None, end=None):
        self._check()
        return self.inner.get(key, start, end)

    def head(self, key):
        self._check()
        return self.inner.head(key)

    def delete(self, key):
        self._check()
        return self.inner.delete(key)

    def list_page(self, *a, **kw):
        self._check()
        return self.inner.list_page(*a, **kw)


def test_lost_bucket_fails_writes_fast_instead_of_hanging(tmp_path):
    """Before the fix: NoSuchBucket was retried forever and put blocked with no error."""
    store = Switch(cloudtier.open_store(f"memory://{uuid.uuid4().hex}/db"),
                   cloudtier.StoreError("get 'x': NoSuchBucket (404)"))
    db = rocksmash.open(tmp_path, **CLOUDY, object_store=store, stall_timeout=5,
                        fencing_check_interval=0.1)
    try:
        load(db, 500)
        db.compact_range()
        store.broken = True
        started = time.monotonic()
        with pytest.raises(ObjectStoreError, match="NoSuchBucket"):
            for i in range(1_000_000):
                db.put(b"new%07d" % i, b"v" * 100)
        assert time.monotonic() - started < 15
    finally:
        db.close()


def test_stalled_writes_end_in_a_clear_error(tmp_path):
    """Compaction keeps failing with a retriable error: writes stall, then raise
    UnavailableError after stall_timeout instead of blocking for ever."""
    store = Switch(cloudtier.open_store(f"memory://{uuid.uuid4().hex}/db"),
                   cloudtier.TransientError("503 SlowDown"))
    with rocksmash.open(tmp_path, **CLOUDY, object_store=store) as db:
        load(db, 200)
        db.compact_range()
    db = rocksmash.open(tmp_path, **CLOUDY, object_store=store, object_store_retries=0,
                        stall_timeout=1, l0_stop_writes_trigger=3)
    try:
        store.broken = True
        with pytest.raises(UnavailableError, match="stalled"):
            for i in range(1_000_000):
                db.put(b"new%07d" % i, b"v" * 100)
        store.broken = False  # the outage ends: the database carries on by itself
        until(lambda: db.stats()["levels"][0]["files"] < 3, seconds=90,
              what="compaction to catch up")
        db.put(b"after", b"outage")
        assert db.get(b"after") == b"outage"
    finally:
        db.close()


def test_worker_store_open_failure_is_retriable(tmp_path):
    """Before the fix: cloudtier's TransientError escaped (not a rocksmash.Error) and
    made the database read-only for good."""
    from rocksmash.jobs import JOBS

    with pytest.raises(UnavailableError):
        JOBS["compact"](runs=[[]], out_paths=[], opts={}, snapshots=[], bottommost=True,
                        target_file_size=1, store={
                            "url": "s3://nobucket/x", "retries": 0,
                            "options": {"endpoint_url": "http://127.0.0.1:9",
                                        "create_bucket": True, "connect_timeout": 0.5,
                                        "access_key": "a", "secret_key": "b"}})


# ------------------------------------------------------------------ failed opens

def test_unreachable_endpoint_raises_the_real_error_and_unlocks(tmp_path):
    """Before the fix: AttributeError from the cleanup, then LockedError on the retry."""
    opts = dict(object_store="s3://bucket/db", object_store_retries=0,
                object_store_options={"endpoint_url": "http://127.0.0.1:9",
                                      "access_key": "a", "secret_key": "b",
                                      "connect_timeout": 0.5})
    for _ in range(2):
        with pytest.raises(UnavailableError):
            rocksmash.open(tmp_path, **opts)
    with rocksmash.open(tmp_path) as db:  # not locked
        db.put(b"k", b"v")


def test_corrupt_epoch_object_is_corruption_and_unlocks(tmp_path, file_store):
    with rocksmash.open(tmp_path / "a", **CLOUDY, object_store=file_store) as db:
        load(db, 10)
    store = cloudtier.open_store(file_store)
    key = newest(store, EPOCHS)
    data = bytearray(store.get(key))
    data[-3] ^= 1
    store.put(key, bytes(data))
    for _ in range(2):
        with pytest.raises(CorruptionError, match="epoch"):
            rocksmash.open(tmp_path / "a", **CLOUDY, object_store=file_store)


# ------------------------------------------------------------------ integrity in the bucket

def test_tampered_mirror_is_detected(tmp_path, file_store):
    """Before the fix: one hex digit of a key range changed, the reopen from the bucket
    succeeded and 20 of 3,000 keys were silently missing from get."""
    with rocksmash.open(tmp_path / "a", **CLOUDY, object_store=file_store) as db:
        load(db, 3000)
        db.compact_range()
    store = cloudtier.open_store(file_store)
    key = newest(store, MIRRORS)
    data = store.get(key)
    doc = decode_object(data, "mirror", MIRROR_FORMATS)
    i = data.index(doc["files"][0][4].encode()) + 10  # inside a largest key's hex
    tampered = data[:i] + (b"0" if data[i:i + 1] != b"0" else b"1") + data[i + 1:]
    store.put(key, tampered)
    with pytest.raises(CorruptionError, match="checksum"):
        rocksmash.open(tmp_path / "b", **CLOUDY, object_store=file_store)
    # A mirror re-checksummed after the change still disagrees with the table itself.
    doc["files"][0][4] = doc["files"][0][4][:-2] + "00"
    store.put(key, encode_object(doc))
    with pytest.raises(CorruptionError, match="key range"):
        rocksmash.open(tmp_path / "c", **CLOUDY, object_store=file_store)


def test_truncated_table_object_is_corruption(tmp_path, file_store):
    """Before the fix: struct.error from the footer of a table cut short by 30 bytes."""
    with rocksmash.open(tmp_path / "a", **CLOUDY, object_store=file_store) as db:
        load(db, 3000)
        db.compact_range()
    store = cloudtier.open_store(file_store)
    mirror = decode_object(store.get(newest(store, MIRRORS)), "mirror", MIRROR_FORMATS)
    f = mirror["files"][0]
    key = f"tables/{f[1]:06d}-e{f[7]}.sst"  # a table the mirror names
    store.put(key, store.get(key)[:-30])
    with pytest.raises(CorruptionError):
        db = rocksmash.open(tmp_path / "b", **CLOUDY, object_store=file_store)
        try:
            for _ in db.scan():
                pass
        finally:
            db.close()


def test_directory_refuses_another_databases_prefix(tmp_path):
    """Before the fix: the open succeeded, fenced the other writer, and served
    CorruptionError; now it is refused before anything is written."""
    x_store, y_store = f"file://{tmp_path}/bx/db", f"file://{tmp_path}/by/db"
    with rocksmash.open(tmp_path / "x", **CLOUDY, object_store=x_store) as db:
        load(db, 100)
    with rocksmash.open(tmp_path / "y", **CLOUDY, object_store=y_store) as db:
        load(db, 3000, tag=b"y")
        db.compact_range()
        y_id = db.db_id
    epochs_before = [i.key for i in cloudtier.open_store(y_store).list(EPOCHS)]
    with pytest.raises(InvalidArgumentError, match="another database"):
        rocksmash.open(tmp_path / "x", **CLOUDY, object_store=y_store)
    assert [i.key for i in cloudtier.open_store(y_store).list(EPOCHS)] == epochs_before
    with rocksmash.open(tmp_path / "y", **CLOUDY, object_store=y_store) as db:
        assert db.get(b"key000001") == b"yvalue000001"
    shutil.rmtree(tmp_path / "y")  # Y's disk is lost: it comes back with its identity
    with rocksmash.open(tmp_path / "y", **CLOUDY, object_store=y_store) as db:
        assert db.db_id == y_id and db.get(b"key000001") == b"yvalue000001"


class ShipsAhead(cloudtier.StoreWrapper):
    """Before each of the first ``times`` conditional creates of a ``wal/`` object, an old
    writer ships that very number (it wins every race, as a fast sync writer can)."""

    def __init__(self, inner, times):
        super().__init__(inner)
        self.times = times

    def put(self, key, data, **kw):
        if key.startswith("wal/") and kw.get("if_none_match") and self.times > 0:
            self.times -= 1
            self.inner.put(key, self.old)  # (a copy of the old writer's fence object)
        return self.inner.put(key, data, **kw)


def test_a_new_writer_claims_its_wal_fence_past_a_writer_that_wins_every_race(tmp_path):
    """An old writer that ships each number just before the new writer's fence create:
    the open climbs past 50 such misses (it gave up after 8, listing again each time; CI
    saw it lose to a sync writer) and its fence is above every shipped number."""
    store = ShipsAhead(cloudtier.open_store(f"memory://{uuid.uuid4().hex}/db"), 0)
    rocksmash.open(tmp_path / "a", **CLOUDY, object_store=store).close()
    store.old = store.get(wal_key(max(int(i.key[len("wal/"):]) for i in store.list("wal/"))))
    store.times = 50
    db = rocksmash.open(tmp_path / "b", **CLOUDY, object_store=store)
    try:
        assert store.times == 0
        fence = max(db._cloud.wal_fences)
        shipped = [int(i.key[len("wal/"):]) for i in store.list("wal/")]
        assert fence == max(shipped)
    finally:
        db.close()
