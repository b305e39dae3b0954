"""The datalet protocol, checked against every built-in datalet and a plug-in one."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bespokv.datalets.base import DataletAdapter, ensure_datalet
from bespokv.datalets.memory import MemoryDatalet


def test_get_put_delete(new_datalet):
    d = new_datalet()
    assert d.get(b"a") is None
    d.put(b"a", b"1")
    assert d.get(b"a") == b"1"
    d.put(b"a", b"2")
    assert d.get(b"a") == b"2"
    d.delete(b"a")
    assert d.get(b"a") is None
    d.delete(b"never")  # deleting an absent key is fine
    d.put(b"empty", b"")
    assert d.get(b"empty") == b""


def test_write_batch_in_order(new_datalet):
    d = new_datalet()
    d.write([(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"b", None), (b"c", b"4")])
    assert (d.get(b"a"), d.get(b"b"), d.get(b"c")) == (b"3", None, b"4")
    assert d.multi_get([b"a", b"b", b"c", b"zz"]) == [b"3", None, b"4", None]


def test_scan_ranges(new_datalet):
    d = new_datalet()
    keys = [b"a", b"ab", b"b", b"ba", b"c", b"\x00", b"\xff\x00"]
    d.write([(k, k.upper()) for k in keys])
    s = sorted(keys)
    assert [k for k, _ in d.scan()] == s
    assert [k for k, _ in d.scan(b"ab", b"ba")] == [b"ab", b"b"]
    assert [k for k, _ in d.scan(b"ab", b"ba", reverse=True)] == [b"b", b"ab"]
    assert [k for k, _ in d.scan(reverse=True, limit=2)] == s[::-1][:2]
    assert [k for k, _ in d.scan(b"b", limit=2)] == [b"b", b"ba"]
    assert [k for k, _ in d.scan(None, b"b")] == [b"\x00", b"a", b"ab"]
    assert list(d.scan(b"x", b"y")) == []
    assert list(d.scan(limit=0)) == []
    assert dict(d.scan())[b"ab"] == b"AB"


def test_export_and_clear(new_datalet):
    d = new_datalet()
    d.write([(b"%04d" % i, b"v%d" % i) for i in range(1000)])
    chunks = list(d.export(128))
    assert all(1 <= len(c) <= 128 for c in chunks)
    flat = [kv for c in chunks for kv in c]
    assert flat == [(b"%04d" % i, b"v%d" % i) for i in range(1000)]
    d.clear()
    assert list(d.scan()) == []


def test_rejects_non_bytes(new_datalet):
    d = new_datalet()
    with pytest.raises(TypeError):
        d.write([("text", b"v")])
    with pytest.raises(TypeError):
        d.write([(b"k", "text")])
    assert d.get(b"k") is None  # nothing of a rejected batch is applied


OPS = st.lists(
    st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]), st.one_of(st.none(), st.binary(max_size=4))),
    max_size=8,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(OPS, max_size=6), lo=st.sampled_from([None, b"b", b"c"]), hi=st.sampled_from([None, b"c", b"e"]),
       rev=st.booleans(), limit=st.one_of(st.none(), st.integers(0, 4)))
def test_matches_a_dict(new_datalet, batches, lo, hi, rev, limit):
    d = new_datalet()
    model: dict[bytes, bytes] = {}
    for ops in batches:
        d.write(ops)
        for k, v in ops:
            if v is None:
                model.pop(k, None)
            else:
                model[k] = v
    want = sorted((k, v) for k, v in model.items() if (lo is None or k >= lo) and (hi is None or k < hi))
    if rev:
        want.reverse()
    if limit is not None:
        want = want[:limit]
    assert list(d.scan(lo, hi, reverse=rev, limit=limit)) == want


def test_memory_change_feed():
    d = MemoryDatalet(feed_entries=3)
    p0 = d.position()
    d.put(b"a", b"1")
    d.write([(b"b", b"2"), (b"a", None)])
    assert list(d.changes_since(p0)) == [(p0 + 1, [(b"a", b"1")]), (p0 + 2, [(b"b", b"2"), (b"a", None)])]
    assert list(d.changes_since(d.position())) == []
    for i in range(5):
        d.put(b"x", b"%d" % i)
    assert d.changes_since(p0) is None  # fell out of the bounded feed


def test_adapter_requires_the_three_methods():
    class NotADatalet:
        def get(self, key):
            return None

    with pytest.raises(TypeError, match="write, scan"):
        ensure_datalet(NotADatalet())
    assert isinstance(ensure_datalet(MemoryDatalet()), MemoryDatalet)


def test_adapter_fills_in_optional_methods():
    from plugin_datalet import PlainDictDatalet

    d = ensure_datalet(PlainDictDatalet())
    assert isinstance(d, DataletAdapter)
    d.write([(b"k%d" % i, b"v") for i in range(10)])
    assert d.multi_get([b"k1", b"zz"]) == [b"v", None]
    assert sum(len(c) for c in d.export(3)) == 10
    assert d.position() is None and d.changes_since(0) is None
    d.clear()
    assert list(d.scan()) == []
