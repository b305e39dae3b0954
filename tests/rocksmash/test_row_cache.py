"""The row cache: its budget and eviction (against a simple model), and that the DB never
serves a stale row: writes replace cached rows, snapshots bypass them, and a fill that
raced a write is dropped. The model tests (test_model.py, DBModelRowCache) run random
programs with the row cache on."""

from __future__ import annotations

import tracemalloc
from collections import OrderedDict

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

import rocksmash
from rocksmash.row_cache import ROW_OVERHEAD, RowCache

KEY = st.binary(min_size=1, max_size=3)
VALUE = st.one_of(st.none(), st.binary(max_size=40))


def charge(key, value):
    return len(key) + ROW_OVERHEAD + (len(value) if value is not None else 0)


@settings(max_examples=60, deadline=None)
@given(st.integers(ROW_OVERHEAD, 4 * ROW_OVERHEAD),
       st.lists(st.tuples(st.sampled_from(["fill", "update", "hit"]), KEY, VALUE),
                max_size=60))
def test_budget_and_lru_against_a_model(capacity, steps):
    rc = RowCache(capacity)
    model: OrderedDict = OrderedDict()
    for op, k, v in steps:
        if op == "fill":
            rc.fill(k, v, 7, 7)
            model[k] = v
            model.move_to_end(k)
            while sum(charge(a, b) for a, b in model.items()) > capacity:
                model.popitem(last=False)
        elif op == "update":
            rc.update(k, v)
            if k in model:
                model[k] = v
        elif k in rc.rows:  # a hit, as DB.get makes it
            rc.rows.move_to_end(k)
            model.move_to_end(k)
        assert list(rc.rows.items()) == list(model.items())
        assert rc.used == sum(charge(a, b) for a, b in model.items())
        if op == "fill":
            assert rc.used <= capacity


def test_a_fill_after_a_write_is_dropped():
    rc = RowCache(10_000)
    rc.fill(b"k", b"old", 5, 6)  # read at 5, but the DB is at 6 now
    assert b"k" not in rc.rows and rc.used == 0


def test_update_does_not_add_rows():
    rc = RowCache(10_000)
    rc.update_batch([(b"a", b"1"), (b"b", None)])
    assert not rc.rows and rc.used == 0


def test_row_overhead_is_what_python_spends():
    """ROW_OVERHEAD charges the Python objects of a row; check it stays near the truth for
    the benchmark's rows (24-byte keys, 100-byte values)."""
    rc = RowCache(1 << 30)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(20_000):
            rc.fill(b"%024d" % i, bytes(100) + i.to_bytes(4, "little"), 1, 1)
        per_row = (tracemalloc.get_traced_memory()[0] - before) / 20_000
    finally:
        tracemalloc.stop()
    assert 0.6 * (ROW_OVERHEAD + 128) <= per_row <= 1.4 * (ROW_OVERHEAD + 128), per_row


@pytest.fixture
def db(tmp_path):
    d = rocksmash.open(tmp_path / "db", row_cache_size="50%", block_cache_size="1MiB",
                       background_processes=False)
    yield d
    d.close()


def test_writes_replace_cached_rows(db):
    db.put(b"k", b"v1")
    db.put(b"gone", b"x")
    db.flush()
    assert db.get(b"k") == b"v1" and db.get(b"gone") == b"x" and db.get(b"absent") is None
    assert db.stats()["row_cache"]["rows"] == 3
    db.put(b"k", b"v2")
    db.delete(b"gone")
    db.write(rocksmash.WriteBatch().put(b"absent", b"now").put(b"k", b"v3"))
    assert (db.get(b"k"), db.get(b"gone"), db.get(b"absent")) == (b"v3", None, b"now")
    db.flush()
    db.compact_range()
    assert (db.get(b"k"), db.get(b"gone"), db.get(b"absent")) == (b"v3", None, b"now")
    st_ = db.stats()["row_cache"]
    assert st_["hits"] >= 3 and st_["misses"] == 3
    assert db.stats()["block_cache"]["capacity"] + st_["capacity"] == 1 << 20


def test_snapshots_bypass_the_row_cache(db):
    db.put(b"k", b"old")
    db.flush()
    with db.snapshot() as snap:
        db.put(b"k", b"new")
        assert db.get(b"k") == b"new"  # may be cached now
        assert snap.get(b"k") == b"old"
        assert db.multi_get([b"k"], snapshot=snap) == [b"old"]
        assert db.get(b"k") == b"new"


def test_a_read_that_races_a_write_leaves_no_stale_row(db, monkeypatch):
    """A write lands while a read is inside the tables (made to happen there, exactly):
    the read may return the older value, but must not leave it in the row cache."""
    db.put(b"k", b"old")
    db.flush()
    below = db._get_below
    raced = []

    def racing(key, seq):
        value = below(key, seq)
        if not raced:
            raced.append(True)
            db.put(key, b"new")  # published between the read and its fill
        return value

    monkeypatch.setattr(db, "_get_below", racing)
    assert db.get(b"k") == b"old"  # read at the sequence before the write: fine
    monkeypatch.setattr(db, "_get_below", below)
    assert db.get(b"k") == b"new"
    db.flush()
    assert db.get(b"k") == b"new"


def test_bad_row_cache_sizes_are_refused(tmp_path):
    with pytest.raises(rocksmash.InvalidArgumentError, match="row_cache_size"):
        rocksmash.open(tmp_path / "a", row_cache_size="120%")
    with pytest.raises(rocksmash.InvalidArgumentError, match="part of it"):
        rocksmash.open(tmp_path / "b", block_cache_size="1MiB", row_cache_size="2MiB")
