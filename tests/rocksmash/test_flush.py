"""Flush from the memtable (decision 0026): a flushed table must be byte for byte the
table a replay of its WAL segment makes with the same live snapshots (recovery and the
extended WAL's rebuild rely on it), and the builder's block-at-a-time path must write
exactly what its entry-at-a-time path writes."""

from __future__ import annotations

import os
import shutil

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

import rocksmash
from rocksmash import filenames
from rocksmash.jobs import flush_segment
from rocksmash.table import Table
from rocksmash.env import LocalFile
from rocksmash.table_builder import TableBuilder

KEYS = st.one_of(st.sampled_from([b"", b"a", b"ab", b"b", b"k1", b"k2", b"\xff"]),
                 st.binary(max_size=6))
VALUES = st.one_of(st.none(), st.binary(max_size=12), st.binary(min_size=60, max_size=300))

# One step of a script: a put or delete, a range delete, a batch, or taking or
# releasing a snapshot (index into the list of snapshots taken so far).
STEPS = st.lists(st.one_of(
    st.tuples(st.just("put"), KEYS, VALUES),
    st.tuples(st.just("range"), KEYS, KEYS),
    st.tuples(st.just("batch"), st.lists(st.tuples(KEYS, VALUES), max_size=8)),
    st.tuples(st.just("snap")),
    st.tuples(st.just("release"), st.integers(0, 7)),
), max_size=60)


def _run(db, steps):
    snaps = []
    for step in steps:
        kind = step[0]
        if kind == "put":
            _, key, value = step
            db.put(key, value) if value is not None else db.delete(key)
        elif kind == "range":
            lo, hi = sorted(step[1:])
            if lo < hi:
                db.delete_range(lo, hi)
        elif kind == "batch":
            batch = rocksmash.WriteBatch()
            for key, value in step[1]:
                batch.put(key, value) if value is not None else batch.delete(key)
            db.write(batch)
        elif kind == "snap":
            snaps.append(db.snapshot())
        elif snaps:
            s = snaps[step[1] % len(snaps)]
            s.close()
    return snaps


def _flush_and_compare(db, path, snaps):
    """Flush the active memtable; check its table against a replay of a copy of its
    segment with the snapshots live at the flush."""
    mem = db._mem
    segment = os.path.join(path, filenames.segment_name(mem.segment))
    copy = segment + ".copy"
    shutil.copyfile(segment, copy)
    live = sorted(s.seq for s in snaps if not s._closed)
    db.flush()
    table = os.path.join(path, filenames.table_name(mem.table_number))
    replayed = os.path.join(path, "replayed.sst")
    result = flush_segment(segment_path=copy, table_path=replayed, opts=db._job_opts,
                           snapshots=live)
    if result["table"] is None:
        assert not os.path.exists(table)
    else:
        with open(table, "rb") as a, open(replayed, "rb") as b:
            assert a.read() == b.read()
        os.remove(replayed)
    os.remove(copy)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(rounds=st.lists(STEPS, min_size=1, max_size=3), workers=st.booleans())
def test_flush_makes_the_bytes_a_replay_makes(tmp_path_factory, rounds, workers):
    path = str(tmp_path_factory.mktemp("db"))
    db = rocksmash.open(path, background_processes=workers, memtable_size="64MiB")
    snaps: list = []
    try:
        for steps in rounds:
            snaps += _run(db, steps)
            _flush_and_compare(db, path, snaps)
    finally:
        for s in snaps:
            s.close()
        db.close()


def _build(path, entries, block_size, unique_from):
    b = TableBuilder(path, block_size=block_size, compression="lz4", bloom_bits_per_key=10)
    for key, seq, value in entries[:unique_from]:
        b.add(key, seq, value)
    rest = entries[unique_from:]
    if rest:
        b.add_unique([k for k, _, _ in rest], [s for _, s, _ in rest], [v for _, _, v in rest])
    return b.finish(sync=False)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.dictionaries(st.binary(min_size=1, max_size=20),
                            st.tuples(st.integers(1, 1 << 40), VALUES), min_size=1, max_size=300),
       block_size=st.sampled_from([1, 64, 256, 4096]), split=st.floats(0, 1))
def test_add_unique_writes_what_add_writes(tmp_path, data, block_size, split):
    entries = [(k, s, v) for k, (s, v) in sorted(data.items())]
    cut = int(split * len(entries))
    one = _build(str(tmp_path / "one.sst"), entries, block_size, len(entries))
    bulk = _build(str(tmp_path / "bulk.sst"), entries, block_size, cut)
    with open(one.path, "rb") as a, open(bulk.path, "rb") as b:
        assert a.read() == b.read()
    assert (one.count, one.min_seq, one.max_seq) == (bulk.count, bulk.min_seq, bulk.max_seq)
    t = Table(0, LocalFile(bulk.path), None, "bulk.sst")
    try:
        assert [(k, v) for k, _, v in t.entries()] == [(k, v) for k, _, v in entries]
    finally:
        t.close()


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), klen=st.integers(1, 24), vlen=st.integers(0, 120),
       count=st.integers(1, 400), deletes=st.booleans(), block_size=st.sampled_from([64, 512, 4096]),
       split=st.floats(0, 1))
def test_add_unique_of_fixed_size_records_writes_what_add_writes(tmp_path, data, klen, vlen, count,
                                                                 deletes, block_size, split):
    """Keys of one length and values of another (a load's records) take add_unique's
    path that encodes whole blocks from the columns, with cached offsets."""
    keys = sorted(data.draw(st.sets(st.binary(min_size=klen, max_size=klen), min_size=1,
                                    max_size=count)))
    value = st.binary(min_size=vlen, max_size=vlen)
    values = data.draw(st.lists(st.one_of(st.none(), value) if deletes else value,
                                min_size=len(keys), max_size=len(keys)))
    entries = [(k, i + 1, v) for i, (k, v) in enumerate(zip(keys, values))]
    cut = int(split * len(entries))
    one = _build(str(tmp_path / "one.sst"), entries, block_size, len(entries))
    bulk = _build(str(tmp_path / "bulk.sst"), entries, block_size, cut)
    with open(one.path, "rb") as a, open(bulk.path, "rb") as b:
        assert a.read() == b.read()


def test_add_unique_refuses_keys_out_of_order(tmp_path):
    b = TableBuilder(str(tmp_path / "t.sst"), block_size=64, compression="none",
                     bloom_bits_per_key=10)
    b.add(b"m", 1, b"v")
    try:
        b.add_unique([b"a"], [2], [b"v"])
    except ValueError:
        pass
    else:
        raise AssertionError("add_unique took a key before the last one added")
    finally:
        b.abandon()


@pytest.mark.parametrize("workers", [True, False])
def test_parallel_flushes_install_in_memtable_order(tmp_path, workers):
    """Two sealed memtables flush at once (decision 0027); the newer one's small table is
    done first, but must not enter L0 before the older memtable's table, or a read would
    find the older memtable's version of ``k`` above it (nor may the older memtable be
    dropped before its own table is in)."""
    db = rocksmash.open(tmp_path, background_processes=workers, memtable_size="1MiB",
                        max_immutable_memtables=2)
    try:
        old = rocksmash.WriteBatch()
        old.put_many((b"f%07d" % i, b"x" * 100) for i in range(20_000))
        old.put(b"k", b"old")
        db.write(old)
        new = rocksmash.WriteBatch()
        new.put(b"k", b"new")
        new.put(b"big", os.urandom(1 << 20))  # fills the second memtable too
        db.write(new)
        db.put(b"z", b"1")  # seals the second: both sealed memtables are flushing now
        seen = set()
        while db.stats()["immutable_memtables"]:
            seen.add((db.get(b"k"), db.get(b"f0019999")))
        db.flush()
        seen.add((db.get(b"k"), db.get(b"f0019999")))
        assert seen == {(b"new", b"x" * 100)}
        assert db.stats()["flushes"] >= 2
    finally:
        db.close()
