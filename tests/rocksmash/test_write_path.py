"""The batch write path's fast paths against their plain versions: one-struct encoding of
uniform batches, C-level checks of a batch, bulk memtable insertion, WriteBatch.put_many."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

import rocksmash
from rocksmash.memtable import Memtable
from rocksmash.write_batch import (_HEAD, _KIND_LEN, _U32, KIND_DELETE, KIND_PUT, decode_batch,
                                   encode_batch, ops_within)


def plain_encoding(seq, ops):
    """The layout of write_batch.py's docstring, one operation at a time."""
    parts = [_HEAD.pack(seq, len(ops))]
    for key, value in ops:
        if value is None:
            parts += [_KIND_LEN.pack(KIND_DELETE, len(key)), key]
        else:
            parts += [_KIND_LEN.pack(KIND_PUT, len(key)), key, _U32.pack(len(value)), value]
    return b"".join(parts)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**63), st.integers(0, 30), st.integers(0, 60), st.integers(0, 40),
       st.data())
def test_uniform_batches_encode_as_the_plain_layout(seq, klen, vlen, n, data):
    ops = [(data.draw(st.binary(min_size=klen, max_size=klen)),
            data.draw(st.binary(min_size=vlen, max_size=vlen))) for _ in range(n)]
    assert encode_batch(seq, ops) == plain_encoding(seq, ops)
    assert decode_batch(encode_batch(seq, ops)) == (seq, ops)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**63), st.lists(st.tuples(st.binary(max_size=5),
                                                 st.one_of(st.none(), st.binary(max_size=5))),
                                       max_size=20))
def test_any_batch_encodes_as_the_plain_layout(seq, ops):
    assert encode_batch(seq, ops) == plain_encoding(seq, ops)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.binary(max_size=6), st.text(max_size=2)),
                          st.one_of(st.none(), st.binary(max_size=9), st.integers())),
                max_size=6))
def test_ops_within_agrees_with_a_check_of_each_operation(ops):
    def ok(k, v):
        return (type(k) is bytes and len(k) <= 4
                and (v is None or (type(v) is bytes and len(v) <= 7)))
    assert ops_within(ops, 4, 7) == all(ok(k, v) for k, v in ops)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d"]),
                          st.one_of(st.none(), st.binary(max_size=4))), max_size=12),
       st.sampled_from([-1, 0, 3]))
def test_bulk_memtable_insert_matches_one_by_one(ops, keep_upto):
    bulk, single = Memtable(1, 2), Memtable(1, 2)
    for m in (bulk, single):
        m.put(b"b", 1, b"first", -1)
    bulk.put_batch(ops, 2, keep_upto)
    for i, (k, v) in enumerate(ops):
        single.put(k, 2 + i, v, keep_upto)
    assert bulk.entries == single.entries and bulk.old == single.old
    assert (bulk.size, bulk.count) == (single.size, single.count)
    assert sorted(bulk.pending) == sorted(set(bulk.pending)) == sorted(single.pending)


def test_put_many_checks_types_and_adds_nothing_on_a_bad_pair():
    wb = rocksmash.WriteBatch().put_many([(b"a", b"1"), (b"b", b"2")])
    assert wb.ops == [(b"a", b"1"), (b"b", b"2")]
    with pytest.raises(rocksmash.InvalidTypeError, match="value must be bytes"):
        wb.put_many([(b"c", b"3"), (b"d", "text")])
    with pytest.raises(rocksmash.InvalidTypeError, match="key must be bytes"):
        wb.put_many(iter([(1, b"3")]))
    assert len(wb) == 2 and wb.put_many([]) is wb


def test_a_batch_writing_a_key_twice_keeps_the_last_and_scans_it_once(tmp_path):
    with rocksmash.open(tmp_path / "db", background_processes=False) as db:
        db.write(rocksmash.WriteBatch().put(b"k", b"1").put(b"j", b"x").put(b"k", b"2"))
        assert db.get(b"k") == b"2" and list(db.scan()) == [(b"j", b"x"), (b"k", b"2")]
        bad = rocksmash.WriteBatch().put(b"ok", b"v")
        bad.ops.append((b"x" * 70_000, b"v"))  # past max_key_size, slipped in directly
        with pytest.raises(rocksmash.InvalidArgumentError, match="max_key_size"):
            db.write(bad)
        assert db.get(b"ok") is None


class _Recorder:
    def __init__(self) -> None:
        self.prestarts = 0

    def prestart(self) -> bool:
        self.prestarts += 1
        return True


def test_a_memtable_a_quarter_full_starts_the_worker_that_will_flush_it(tmp_path):
    """The flush worker starts while the memtable fills (once per memtable), not when it
    is sealed, so the flush does not begin with the interpreter's start-up."""
    db = rocksmash.open(str(tmp_path / "db"), memtable_size="1MiB")
    try:
        if db._pool is None:
            pytest.skip("no worker processes on this platform")
        rec = _Recorder()
        real, db._pool = db._pool, rec  # type: ignore[assignment]
        try:
            value = b"v" * 1000
            quarter = (1 << 20) // 4
            n = 0
            while db._mem.size + 1200 < quarter:
                db.put(b"k%06d" % n, value)
                n += 1
            assert rec.prestarts == 0
            for _ in range(50):  # past the quarter, still in the first memtable
                db.put(b"k%06d" % n, value)
                n += 1
            assert rec.prestarts == 1
            assert db._imm == [] and db._mem.size < 1 << 20
        finally:
            db._pool = real
    finally:
        db.close()
