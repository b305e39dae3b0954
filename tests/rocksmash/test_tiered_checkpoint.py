"""Checkpoints of a tiered database (checkpoint.py, pins.py): local tables linked, cloud
tables shared and kept alive by a pin in the bucket.

The source writer keeps compacting (its cloud tables retire, with no grace) and reopening
(its garbage collection lists every table object): a checkpoint must still read exactly
what the source held at its time, until it is released or detached; then the objects
only it named go at the source's next open.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

import rocksmash
from rocksmash import filenames, pins
from rocksmash.checkpoint import read_checkpoint
from rocksmash.cloud import CloudTier
from rocksmash.errors import CorruptionError, InvalidArgumentError

from .test_wal_shipping import SMALL

#: Retired objects go at the first collection: only pins keep them.
OPTS = dict(SMALL, retired_object_grace=0)


def _table_keys(url, **store):
    cloud = CloudTier(url, store, 0)
    try:
        return set(cloud.table_keys())
    finally:
        cloud.close()


def _fill(db, n, tag, model):
    for i in range(n):
        k, v = b"k%05d" % (i * 7 % 1500), b"%s%d" % (tag, i) * 20
        db.put(k, v)
        model[k] = v


def test_a_checkpoint_keeps_its_cloud_tables_until_released(tmp_path):
    url = f"memory://ckpt-{uuid.uuid4().hex}"
    src, ck = str(tmp_path / "src"), str(tmp_path / "ck")
    model = {}
    with rocksmash.open(src, object_store=url, **OPTS) as db:
        _fill(db, 3000, b"a", model)
        db.compact_range()  # into the cloud levels
        _fill(db, 200, b"b", model)
        db.flush()  # and a local table
        s = db.stats()["cloud"]
        assert s["cloud_tables"] > 0 and s["local_table_bytes"] > 0
        db.checkpoint(ck)
        pinned = set(pins.read_pin(db._cloud, read_checkpoint(ck)["pin"])["keys"])
        assert pinned and pinned <= _table_keys(url)
        at_checkpoint = dict(model)
        db.delete_range(b"k00000", b"k01000")
        _fill(db, 3000, b"c", model)
        db.compact_range()  # every pinned table retires; with no grace, unpinned ones go
    with rocksmash.open(src, object_store=url, **OPTS) as db:  # garbage collection
        db.compact_range()
    assert pinned <= _table_keys(url)
    with rocksmash.open(ck, read_only=True, object_store=url, **OPTS) as c:
        assert isinstance(c, rocksmash.ReadOnlyDB)
        assert dict(c.scan()) == at_checkpoint
        with pytest.raises(InvalidArgumentError, match="read-only"):
            c.put(b"x", b"y")
    rocksmash.release_checkpoint(ck, url)
    assert not os.path.exists(ck)
    with rocksmash.open(src, object_store=url, **OPTS) as db:  # sees the release
        assert not pinned & _table_keys(url)
        assert {k: v for k, v in db.scan()} == {k: v for k, v in model.items()
                                                 if not b"k00000" <= k < b"k01000"
                                                 or v.startswith(b"c")}


def test_a_detached_checkpoint_is_a_local_database_and_a_rerun_finishes(tmp_path, monkeypatch):
    url = f"memory://ckpt-{uuid.uuid4().hex}"
    src, ck = str(tmp_path / "src"), str(tmp_path / "ck")
    model = {}
    with rocksmash.open(src, object_store=url, **OPTS) as db:
        _fill(db, 2000, b"a", model)
        db.compact_range()
        db.checkpoint(ck)
        pin = read_checkpoint(ck)["pin"]

    real = pins.delete_pin
    calls = []

    def fail_once(cloud, p):
        calls.append(p)
        if len(calls) == 1:
            raise rocksmash.UnavailableError("injected: the store went away")
        real(cloud, p)

    monkeypatch.setattr("rocksmash.checkpoint.delete_pin", fail_once)
    with pytest.raises(rocksmash.UnavailableError, match="injected"):
        rocksmash.detach_checkpoint(ck, url)
    assert rocksmash.detach_checkpoint(ck, url) == 0  # the tables came the first time
    assert calls == [pin, pin] and read_checkpoint(ck) is None
    assert not any(os.path.exists(os.path.join(ck, d)) for d in filenames.CLOUD_CACHES)
    with pytest.raises(InvalidArgumentError, match="not in this object store"):
        pins.read_pin(CloudTier(url, {}, 0), pin)
    with rocksmash.open(ck, background_processes=False, num_levels=4) as c:  # no store
        assert dict(c.scan()) == model
        c.put(b"new", b"1")
        assert c.get(b"new") == b"1"


def test_tiered_checkpoint_refusals(tmp_path):
    url = f"memory://ckpt-{uuid.uuid4().hex}"
    src, ck = str(tmp_path / "src"), str(tmp_path / "ck")
    with rocksmash.open(src, object_store=url, **OPTS) as db:
        _fill(db, 1500, b"a", {})
        db.compact_range()
        db.checkpoint(ck)
        db.put(b"after", b"1")
    with pytest.raises(InvalidArgumentError, match="checkpoint of a tiered database"):
        rocksmash.open(ck, object_store=url, **OPTS)  # a writer would fence the source
    with pytest.raises(InvalidArgumentError, match="tables in an object store"):
        rocksmash.open(ck, read_only=True, num_levels=4)
    other = f"memory://ckpt-{uuid.uuid4().hex}"
    with pytest.raises(InvalidArgumentError, match="not in this object store"):
        rocksmash.open(ck, read_only=True, object_store=other)
    with pytest.raises(InvalidArgumentError, match="not in this object store"):
        rocksmash.release_checkpoint(ck, other)
    with pytest.raises(InvalidArgumentError, match="not a checkpoint"):
        rocksmash.release_checkpoint(src, url)
    assert os.path.exists(ck) and os.path.exists(src)
    with rocksmash.open(ck, read_only=True, object_store=url, **OPTS) as c:
        with pytest.raises(rocksmash.LockedError):  # its caches are in its directory
            rocksmash.open(ck, read_only=True, object_store=url, **OPTS)
        assert c.get(b"after") is None
    # A damaged CHECKPOINT file is corruption, not "no checkpoint"; a writer is refused
    # by its presence alone.
    with open(os.path.join(ck, "CHECKPOINT"), "r+b") as f:
        f.seek(12)
        f.write(b"X")
    with pytest.raises(CorruptionError, match="CHECKPOINT"):
        rocksmash.open(ck, read_only=True, object_store=url, **OPTS)
    with pytest.raises(InvalidArgumentError, match="checkpoint of a tiered database"):
        rocksmash.open(ck, object_store=url, **OPTS)


def test_an_unreadable_pin_stops_garbage_collection(tmp_path):
    url = f"memory://ckpt-{uuid.uuid4().hex}"
    src = str(tmp_path / "src")
    with rocksmash.open(src, object_store=url, **OPTS) as db:
        _fill(db, 1500, b"a", {})
        db.compact_range()
        db._cloud.store.put("pins/" + "0" * 32, b"garbage")
        _fill(db, 1500, b"b", {})
        db.compact_range()
    before = _table_keys(url)
    with rocksmash.open(src, object_store=url, **OPTS) as db:
        assert db.stats()["pin_read_errors"] == 1
        assert "pin " + "0" * 32 in db.stats()["last_pin_error"]
    assert _table_keys(url) >= before  # nothing deleted at this open


OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, 400), st.integers(1, 300)),
    st.tuples(st.just("delete"), st.integers(0, 400)),
    st.tuples(st.just("delete_range"), st.integers(0, 400), st.integers(1, 100)),
    st.tuples(st.just("compact")),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("checkpoint")),
    st.tuples(st.just("release")),
), min_size=1, max_size=25)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_model_every_checkpoint_reads_its_time_until_released(ops):
    root = tempfile.mkdtemp(prefix="rocksmash-tckpt-")
    url = f"memory://ckpt-{uuid.uuid4().hex}"
    src = os.path.join(root, "src")
    model: dict[bytes, bytes] = {}
    taken: list[tuple[str, dict[bytes, bytes]]] = []
    db = rocksmash.open(src, object_store=url, **OPTS)
    try:
        for i, op in enumerate(ops):
            if op[0] == "put":
                for j in range(op[2]):  # enough data to reach the cloud levels
                    k, v = b"k%04d" % ((op[1] + j * 13) % 400), b"%d.%d" % (i, j) * 15
                    db.put(k, v)
                    model[k] = v
            elif op[0] == "delete":
                db.delete(b"k%04d" % op[1])
                model.pop(b"k%04d" % op[1], None)
            elif op[0] == "delete_range":
                lo, hi = b"k%04d" % op[1], b"k%04d" % (op[1] + op[2])
                db.delete_range(lo, hi)
                for k in [k for k in model if lo <= k < hi]:
                    del model[k]
            elif op[0] == "compact":
                db.compact_range()
            elif op[0] == "reopen":  # garbage collection of every unnamed table object
                db.close()
                db = rocksmash.open(src, object_store=url, **OPTS)
            elif op[0] == "checkpoint":
                path = os.path.join(root, f"ck{i}")
                db.checkpoint(path)
                taken.append((path, dict(model)))
            elif taken:  # release the oldest
                rocksmash.release_checkpoint(taken.pop(0)[0], url)
        db.close()
        db = rocksmash.open(src, object_store=url, **OPTS)
        db.compact_range()
        assert dict(db.scan()) == model
        for path, want in taken:
            with rocksmash.open(path, read_only=True, object_store=url, **OPTS) as c:
                assert dict(c.scan()) == want, path
    finally:
        db.close()
        shutil.rmtree(root, ignore_errors=True)


def test_a_tiered_checkpoint_on_seaweedfs(tmp_path, s3_store_options_for):
    opts = s3_store_options_for("seaweedfs")
    url, store = opts["object_store"], opts["object_store_options"]
    src, ck = str(tmp_path / "src"), str(tmp_path / "ck")
    model = {}
    with rocksmash.open(src, object_store=url, object_store_options=store, **OPTS) as db:
        _fill(db, 1500, b"a", model)
        db.compact_range()
        db.checkpoint(ck)
        _fill(db, 1500, b"b", {})
        db.compact_range()
    with rocksmash.open(ck, read_only=True, object_store=url, object_store_options=store,
                        **OPTS) as c:
        assert dict(c.scan()) == model
    assert rocksmash.detach_checkpoint(ck, url, object_store_options=store) > 0
    with rocksmash.open(ck, background_processes=False, num_levels=4) as c:
        assert dict(c.scan()) == model
