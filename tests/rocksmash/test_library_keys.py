"""Bytes-like keys and values (rocksmash/keys.py): accepted by every method that takes a
key, a value or a bound, stored and returned as ``bytes``; ``str`` and other types are a
clear InvalidTypeError. A hypothesis test runs random programs, each key and value wrapped
in a random bytes-like type, against a dict model."""

from __future__ import annotations

import array

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

import rocksmash
from rocksmash import InvalidTypeError, WriteBatch
from rocksmash.keys import as_bytes

#: Ways to hand over the same bytes: every one must behave exactly like ``bytes``.
WRAPPERS = {
    "bytes": bytes,
    "bytearray": bytearray,
    "memoryview": memoryview,
    "memoryview-slice": lambda b: memoryview(b"<" + b + b">")[1:-1],
    "memoryview-of-bytearray": lambda b: memoryview(bytearray(b)),
    "array": lambda b: array.array("B", b),
    "bytes-subclass": type("Sub", (bytes,), {}),
}
BAD = ["str", 1, 1.5, None, [1, 2], object()]


@pytest.fixture
def db(tmp_path):
    d = rocksmash.open(tmp_path / "db", memtable_size="4KiB", background_processes=False)
    yield d
    d.close()


def _is_exact_bytes(x: object) -> bool:
    return type(x) is bytes


@pytest.mark.parametrize("wrap", list(WRAPPERS.values()), ids=list(WRAPPERS))
def test_every_entry_point_takes_bytes_like(db, wrap):
    w = wrap
    db.put(w(b"a"), w(b"1"))
    db[w(b"b")] = w(b"2")
    db.write(WriteBatch().put(w(b"c"), w(b"3")).delete(w(b"zz")))
    db.update([(w(b"d"), w(b"4"))])
    assert db.setdefault(w(b"e"), w(b"5")) == b"5"
    assert db.get(w(b"a")) == b"1" and db[w(b"b")] == b"2" and w(b"c") in db
    assert db.multi_get([w(b"a"), w(b"x")]) == [b"1", None]
    with db.snapshot() as snap:
        assert snap.get(w(b"c")) == b"3"
        assert list(snap.scan(w(b"b"), w(b"d"))) == [(b"b", b"2"), (b"c", b"3")]
    assert list(db.scan(w(b"b"), w(b"d"))) == [(b"b", b"2"), (b"c", b"3")]
    assert list(db.scan(prefix=w(b"e"))) == [(b"e", b"5")]
    assert list(db.keys(w(b"d"))) == [b"d", b"e"]
    assert list(db.values(end=w(b"b"))) == [b"1"]
    assert list(db.items(w(b"a"), w(b"b"), reverse=True)) == [(b"a", b"1")]
    db.flush()
    assert db.approximate_size(w(b"a"), w(b"z")) > 0
    db.compact_range(w(b"a"), w(b"z"))
    assert db.pop(w(b"d")) == b"4"
    del db[w(b"e")]
    db.delete(w(b"c"))
    got = list(db.scan())
    assert got == [(b"a", b"1"), (b"b", b"2")]
    assert all(_is_exact_bytes(k) and _is_exact_bytes(v) for k, v in got)
    assert _is_exact_bytes(db.get(w(b"a")))


def test_values_come_back_as_bytes_after_flush_and_reopen(tmp_path):
    with rocksmash.open(tmp_path, background_processes=False) as db:
        db.put(bytearray(b"k"), memoryview(b"v"))
        assert type(db.get(b"k")) is bytes
        db.flush()
        assert type(db.get(b"k")) is bytes
    with rocksmash.open(tmp_path, background_processes=False) as db:
        assert [(type(k), type(v)) for k, v in db.scan()] == [(bytes, bytes)]


def test_a_mutated_bytearray_does_not_change_what_was_stored(db):
    k, v = bytearray(b"key"), bytearray(b"value")
    db.put(k, v)
    batch = WriteBatch().put(k, v)  # converted when added, not when written
    k[0:1] = b"X"
    v[0:1] = b"X"
    db.write(batch)
    assert db.get(b"key") == b"value" and db.get(b"Xey") is None
    k.extend(b"more")  # not held by a lingering memoryview: it can still be resized


def test_multi_dimensional_and_strided_views_use_their_raw_bytes(db):
    m = memoryview(b"abcdef").cast("B", (2, 3))
    db.put(m, memoryview(b"0123456789")[::2])
    assert db.get(b"abcdef") == b"02468"


@pytest.mark.parametrize("bad", BAD, ids=[type(b).__name__ for b in BAD])
def test_other_types_are_a_clear_invalid_type_error(db, bad):
    calls = [
        lambda: db.put(bad, b"v"), lambda: db.put(b"k", bad), lambda: db.get(bad),
        lambda: db.delete(bad), lambda: WriteBatch().put(bad, b"v"),
        lambda: WriteBatch().put(b"k", bad), lambda: WriteBatch().delete(bad),
        lambda: db.setdefault(b"k", bad), lambda: db.multi_get([bad]),
    ]
    if bad is not None:  # None is "unbounded" for bounds
        calls += [lambda: db.scan(start=bad), lambda: db.scan(end=bad),
                  lambda: db.scan(prefix=bad), lambda: db.compact_range(bad),
                  lambda: db.approximate_size(end=bad)]
    for call in calls:
        with pytest.raises(InvalidTypeError) as e:
            call()
        assert "must be bytes, bytearray or memoryview" in str(e.value)
        assert isinstance(e.value, TypeError)
    assert list(db.scan()) == []  # nothing was written


def test_str_error_says_how_to_fix_it():
    with pytest.raises(InvalidTypeError, match=r"not str \(encode it first"):
        as_bytes("key")


def test_ops_appended_to_a_batch_by_hand_are_converted_or_refused(db):
    b = WriteBatch()
    b.ops.append((bytearray(b"k"), memoryview(b"v")))
    db.write(b)
    assert db.get(b"k") == b"v"
    b.ops[:] = [(b"k2", "str")]
    with pytest.raises(InvalidTypeError, match="value must be"):
        db.write(b)
    assert db.get(b"k2") is None


# --- the dict model -------------------------------------------------------------------

RAW_KEYS = st.one_of(st.sampled_from([b"", b"a", b"ab", b"b", b"\x00", b"\xff"]),
                     st.binary(max_size=3))
WRAP = st.sampled_from(sorted(WRAPPERS))
KEYS = st.tuples(RAW_KEYS, WRAP)
VALUES = st.tuples(st.binary(max_size=300), WRAP)
OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), KEYS, VALUES),
    st.tuples(st.just("delete"), KEYS),
    st.tuples(st.just("batch"), st.lists(st.tuples(KEYS, st.one_of(st.none(), VALUES)),
                                         max_size=5)),
    st.tuples(st.just("get"), KEYS),
    st.tuples(st.just("scan"), st.one_of(st.none(), KEYS), st.one_of(st.none(), KEYS),
              st.booleans()),
    st.tuples(st.just("flush")),
), max_size=40)


def _w(pair):
    raw, name = pair
    return WRAPPERS[name](raw)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_bytes_like_program_matches_a_dict(tmp_path_factory, ops):
    model: dict[bytes, bytes] = {}
    path = tmp_path_factory.mktemp("model")
    with rocksmash.open(path, memtable_size="2KiB", background_processes=False) as db:
        for op in ops:
            if op[0] == "put":
                db.put(_w(op[1]), _w(op[2]))
                model[op[1][0]] = op[2][0]
            elif op[0] == "delete":
                db.delete(_w(op[1]))
                model.pop(op[1][0], None)
            elif op[0] == "batch":
                b = WriteBatch()
                for k, v in op[1]:
                    b.put(_w(k), _w(v)) if v is not None else b.delete(_w(k))
                db.write(b)
                for k, v in op[1]:
                    if v is None:
                        model.pop(k[0], None)
                    else:
                        model[k[0]] = v[0]
            elif op[0] == "get":
                got = db.get(_w(op[1]))
                assert got == model.get(op[1][0]) and (got is None or type(got) is bytes)
            elif op[0] == "scan":
                start, end, reverse = op[1], op[2], op[3]
                lo = None if start is None else start[0]
                hi = None if end is None else end[0]
                want = sorted(((k, v) for k, v in model.items()
                               if (lo is None or k >= lo) and (hi is None or k < hi)),
                              reverse=reverse)
                got = list(db.scan(None if start is None else _w(start),
                                   None if end is None else _w(end), reverse=reverse))
                assert got == want
                assert all(type(k) is bytes and type(v) is bytes for k, v in got)
            else:
                db.flush()
        assert list(db.scan()) == sorted(model.items())
