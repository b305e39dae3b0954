"""The engine against a dict model: random puts, deletes, range deletes, batches,
snapshots, scans in both directions with bounds, flushes, compactions, close and reopen. Every answer must
match the model's. Small memtables and level sizes force flushes and multi-level
compactions every few operations; background work runs concurrently with the test."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (Bundle, RuleBasedStateMachine, consumes, invariant,
                                 rule)

import rocksmash

KEYS = st.one_of(st.sampled_from([b"", b"a", b"ab", b"b", b"ba", b"c", b"k1", b"k2", b"k3",
                                  b"\x00", b"\xff", b"zz"]),
                 st.binary(min_size=0, max_size=4))
VALUES = st.one_of(st.binary(max_size=12), st.binary(min_size=100, max_size=400))
BOUNDS = st.one_of(st.none(), KEYS)

SMALL = dict(memtable_size=1024, block_size=256, target_file_size=2048,
             level_base_size=4096, level_multiplier=2, l0_compaction_trigger=2,
             num_levels=4, block_cache_size="64KiB")


def model_scan(model: dict, start, end, reverse):
    keys = sorted(k for k in model if (start is None or k >= start) and (end is None or k < end))
    if reverse:
        keys.reverse()
    return [(k, model[k]) for k in keys]


class DBModel(RuleBasedStateMachine):
    snapshots = Bundle("snapshots")
    options: dict = dict(SMALL, background_processes=False)

    def __init__(self) -> None:
        super().__init__()
        self.path = tempfile.mkdtemp(prefix="rocksmash-model-")
        self.options = self.fresh_options(self.path)
        self.db = rocksmash.open(self.path, **self.options)
        self.model: dict[bytes, bytes] = {}
        self.live_snaps: list = []

    def fresh_options(self, path: str) -> dict:
        return dict(self.options)

    def teardown(self) -> None:
        self.db.close()
        shutil.rmtree(self.path, ignore_errors=True)

    @rule(k=KEYS, v=VALUES)
    def put(self, k, v):
        self.db.put(k, v)
        self.model[k] = v

    @rule(k=KEYS)
    def delete(self, k):
        self.db.delete(k)
        self.model.pop(k, None)

    @rule(ops=st.lists(st.tuples(KEYS, st.one_of(st.none(), VALUES)), max_size=8))
    def batch(self, ops):
        b = rocksmash.WriteBatch()
        for k, v in ops:
            b.put(k, v) if v is not None else b.delete(k)
        self.db.write(b)
        for k, v in ops:
            if v is None:
                self.model.pop(k, None)
            else:
                self.model[k] = v

    @rule(start=KEYS, end=KEYS)
    def delete_range(self, start, end):
        if start > end:
            with pytest.raises(rocksmash.InvalidArgumentError):
                self.db.delete_range(start, end)
            return
        self.db.delete_range(start, end)  # start == end: nothing
        for k in [k for k in self.model if start <= k < end]:
            del self.model[k]

    @rule(ops=st.lists(st.tuples(KEYS, st.one_of(st.none(), VALUES, st.tuples(KEYS))),
                       max_size=6))
    def batch_with_ranges(self, ops):
        """Puts, deletes and range deletes (value ``(end,)``) in one batch, in order."""
        b = rocksmash.WriteBatch()
        for k, v in ops:
            if isinstance(v, tuple):
                start, end = min(k, v[0]), max(k, v[0])
                b.delete_range(start, end)
            else:
                b.put(k, v) if v is not None else b.delete(k)
        self.db.write(b)
        for k, v in ops:
            if isinstance(v, tuple):
                start, end = min(k, v[0]), max(k, v[0])
                for key in [key for key in self.model if start <= key < end]:
                    del self.model[key]
            elif v is None:
                self.model.pop(k, None)
            else:
                self.model[k] = v

    @rule(k=KEYS)
    def get(self, k):
        assert self.db.get(k) == self.model.get(k)

    @rule(ks=st.lists(KEYS, max_size=5))
    def multi_get(self, ks):
        assert self.db.multi_get(ks) == [self.model.get(k) for k in ks]

    @rule(start=BOUNDS, end=BOUNDS, reverse=st.booleans())
    def scan(self, start, end, reverse):
        assert list(self.db.scan(start, end, reverse=reverse)) == model_scan(
            self.model, start, end, reverse)

    @rule(target=snapshots)
    def take_snapshot(self):
        snap = (self.db.snapshot(), dict(self.model))
        self.live_snaps.append(snap)
        return snap

    @rule(snap=snapshots, k=KEYS)
    def snapshot_get(self, snap, k):
        s, m = snap
        if s in [x for x, _ in self.live_snaps]:
            assert s.get(k) == m.get(k)

    @rule(snap=snapshots, start=BOUNDS, end=BOUNDS, reverse=st.booleans())
    def snapshot_scan(self, snap, start, end, reverse):
        s, m = snap
        if s in [x for x, _ in self.live_snaps]:
            assert list(self.db.scan(start, end, reverse=reverse, snapshot=s)) == model_scan(
                m, start, end, reverse)

    @rule(snap=consumes(snapshots))
    def release(self, snap):
        s, _ = snap
        s.close()
        self.live_snaps = [x for x in self.live_snaps if x[0] is not s]

    @rule()
    def flush(self):
        self.db.flush()

    @rule(start=BOUNDS, end=BOUNDS)
    def compact(self, start, end):
        self.db.compact_range(start, end)

    @rule()
    def reopen(self):
        for s, _ in self.live_snaps:
            s.close()
        self.live_snaps = []
        self.db.close()
        self.db = rocksmash.open(self.path, **self.options)

    @invariant()
    def no_background_error(self):
        assert self.db.stats()["background_error"] is None


# ROCKSMASH_EXAMPLES raises the number of random programs for soak runs.
EXAMPLES = int(os.environ.get("ROCKSMASH_EXAMPLES", "60"))
SETTINGS = settings(max_examples=EXAMPLES, stateful_step_count=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestModelThreads = DBModel.TestCase
TestModelThreads.settings = SETTINGS


class DBModelProcesses(DBModel):
    """Same machine, with flush and compaction in worker processes (the default)."""

    options = dict(SMALL, background_processes=True)


TestModelProcesses = DBModelProcesses.TestCase
TestModelProcesses.settings = settings(SETTINGS, max_examples=max(1, EXAMPLES // 4))


class DBModelRowCache(DBModel):
    """With a row cache (half of the 64 KiB cache budget, so it evicts): a cached row that
    a put, delete or batch failed to replace would be read back stale, and ``get`` after a
    write is the commonest step of these programs."""

    options = dict(SMALL, background_processes=False, row_cache_size="50%")

    @rule(k=KEYS, v=VALUES)
    def read_write_read(self, k, v):
        assert self.db.get(k) == self.model.get(k)  # fills the row
        self.db.put(k, v)
        self.model[k] = v
        assert self.db.get(k) == v


TestModelRowCache = DBModelRowCache.TestCase
TestModelRowCache.settings = settings(SETTINGS, max_examples=max(1, EXAMPLES // 4))


class DBModelLargeMemtable(DBModel):
    """A memtable that holds a whole program (the others hold a few entries): versions,
    deletions and range tombstones meet inside one memtable, and only the flush and
    reopen rules move them to tables."""

    options = dict(SMALL, background_processes=False, memtable_size="1MiB")


TestModelLargeMemtable = DBModelLargeMemtable.TestCase
TestModelLargeMemtable.settings = settings(SETTINGS, max_examples=max(1, EXAMPLES // 4))


class DBModelCloud(DBModel):
    """With a cloud tier and no local budget: every level below L0 is in the object store."""

    options = dict(SMALL, background_processes=False, local_budget=0,
                   cloud_target_file_size=4096, cache_size="64KiB")

    def fresh_options(self, path: str) -> dict:
        return dict(self.options, object_store=f"memory://{uuid.uuid4().hex}/db")


TestModelCloud = DBModelCloud.TestCase
TestModelCloud.settings = settings(SETTINGS, max_examples=max(1, EXAMPLES // 2))


class DBModelCloudOneBudget(DBModelCloud):
    """The tiered read path at its smallest: one local budget (the DataCache gets what the
    tables leave), no block cache (every read of a cloud block goes through the shared
    fetch, whose waiters then load the block themselves), two-block fetch windows, so
    scans read ahead and multi_get reads ahead across windows."""

    options = dict(SMALL, background_processes=False, local_budget="8KiB", cache_size="rest",
                   cloud_target_file_size=4096, block_cache_size=0, cloud_fetch_size=512,
                   cloud_fetch_threads=4)


TestModelCloudOneBudget = DBModelCloudOneBudget.TestCase
TestModelCloudOneBudget.settings = settings(SETTINGS, max_examples=max(1, EXAMPLES // 8))


class DBModelCloudKeys(DBModelCloud):
    """With the key cache (key_cache.py) and a block cache of a few blocks, so reads of
    cloud tables ask the key cache, or are sampled into it from the block cache; small
    enough (8 KiB, 4 KiB segments) to evict. A row served for the wrong table, across a
    write, a delete, a range delete, a flush or a compaction, fails the model."""

    options = dict(SMALL, background_processes=False, local_budget=0,
                   cloud_target_file_size=4096, cache_size="32KiB", key_cache_size="8KiB",
                   block_cache_size="2KiB")

    @rule(k=KEYS)
    def get_twice(self, k):
        """A second read of a row: from the key cache if the first one filled it."""
        assert self.db.get(k) == self.model.get(k)
        assert self.db.get(k) == self.model.get(k)

    @rule()
    def read_everything(self):
        """Every key read: the key cache then holds rows of every table, so any later
        write that lands in a cloud table above them must not be answered by them."""
        for k in list(self.model) + [b"absent"]:
            assert self.db.get(k) == self.model.get(k)


TestModelCloudKeys = DBModelCloudKeys.TestCase
TestModelCloudKeys.settings = settings(SETTINGS, max_examples=max(1, EXAMPLES // 12))


class DBModelCloudFiles(DBModel):
    """A file:// object store, uploads done by worker processes, a 10% local budget."""

    options = dict(SMALL, background_processes=True, local_budget="10%",
                   cloud_target_file_size=4096, cache_size="64KiB")

    def fresh_options(self, path: str) -> dict:
        return dict(self.options, object_store=f"file://{path}-bucket")

    def teardown(self) -> None:
        super().teardown()
        shutil.rmtree(self.path + "-bucket", ignore_errors=True)


TestModelCloudFiles = DBModelCloudFiles.TestCase
TestModelCloudFiles.settings = settings(SETTINGS, max_examples=max(1, EXAMPLES // 4))


class DBModelCloudS3(DBModel):
    """A real S3 server over HTTP (the session's SeaweedFS, tests/conftest.py) with no
    local budget: every level below L0 is in the bucket; each example its own prefix."""

    options = dict(SMALL, background_processes=False, local_budget=0,
                   cloud_target_file_size=4096, cache_size="64KiB")
    #: open_store options of the server; set by the ``_model_s3_server`` fixture.
    server_options: dict = {}
    bucket = "rm-model"

    def fresh_options(self, path: str) -> dict:
        return dict(self.options, object_store=f"s3://{self.bucket}/{uuid.uuid4().hex[:12]}",
                    object_store_options=dict(self.server_options))


@pytest.fixture
def _model_s3_server(seaweedfs_server):
    from cloudtier.s3_store import S3Store

    DBModelCloudS3.server_options = seaweedfs_server.store_options()
    S3Store(DBModelCloudS3.bucket, create_bucket=True, **DBModelCloudS3.server_options).close()


TestModelCloudS3 = pytest.mark.server(pytest.mark.usefixtures("_model_s3_server")(DBModelCloudS3.TestCase))
TestModelCloudS3.settings = settings(SETTINGS, max_examples=max(1, EXAMPLES // 6))
