"""Readers of a tiered database from its bucket alone (bucket_reader.py).

A writer with a small local budget (so it has both local and cloud levels) writes; a
reader opened on another directory, with only the object store in common, must see
exactly what the writer shipped: against a dict model after random writes, flushes and
compactions, and while following a live writer.
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

import rocksmash
from rocksmash.cloud import CloudTier
from rocksmash.errors import CorruptionError, InvalidArgumentError

from .test_wal_shipping import SMALL, wait_for


def _writer(tmp_path, url, **kw):
    return rocksmash.open(str(tmp_path / "writer"), object_store=url, **{**SMALL, **kw})


def _reader(tmp_path, url, name="reader", **kw):
    return rocksmash.open(str(tmp_path / name), read_only=True, object_store=url,
                          **{**SMALL, "reader_refresh_interval": 0, **kw})


def test_a_reader_sees_every_synced_write_local_and_cloud_levels(tmp_path):
    url = f"memory://reader-{uuid.uuid4().hex}"
    model = {}
    # (L0 compacts only at 8 files here, so the flushed tables below stay local)
    with _writer(tmp_path, url, wal_shipping="sync", l0_compaction_trigger=8) as w:
        for i in range(3000):
            k, v = b"k%05d" % (i % 1200), b"v%d" % i * 20
            w.put(k, v, sync=True)
            model[k] = v
            if i % 7 == 0:
                w.delete(b"k%05d" % (i % 300), sync=True)
                model.pop(b"k%05d" % (i % 300), None)
        w.compact_range()  # into the cloud levels
        for i in range(300):  # then a local table (its backup is in the bucket)
            w.put(b"k%05d" % i, b"local", sync=True)
            model[b"k%05d" % i] = b"local"
        w.flush()
        for i in range(50):  # and some only in the WAL objects
            w.put(b"late%02d" % i, b"x", sync=True)
            model[b"late%02d" % i] = b"x"
        cloud = w.stats()["cloud"]
        assert cloud["cloud_tables"] > 0 and cloud["local_table_bytes"] > 0
        with _reader(tmp_path, url) as r:
            assert isinstance(r, rocksmash.BucketReader)
            assert dict(r.scan()) == model
            assert r.get(b"late49") == b"x" and r.get(b"k00007") == model.get(b"k00007")
            with pytest.raises(InvalidArgumentError, match="read-only"):
                r.put(b"a", b"b")


def test_a_reader_follows_the_writer(tmp_path):
    url = f"memory://reader-{uuid.uuid4().hex}"
    with _writer(tmp_path, url, wal_ship_interval="10ms") as w:
        w.put(b"first", b"1", sync=True)
        wait_for(lambda: w.stats()["cloud"]["wal_shipping"]["lag_bytes"] == 0, "shipping")
        with _reader(tmp_path, url, reader_refresh_interval=0.02) as r:
            assert r.get(b"first") == b"1"
            for i in range(400):
                w.put(b"k%04d" % i, b"v" * 100)
            w.compact_range()  # a new mirror: the view is swapped
            w.delete(b"first")
            wait_for(lambda: r.get(b"first") is None and r.get(b"k0399") == b"v" * 100,
                     "the reader to see the writer's last writes")
            assert r.stats()["reader_swaps"] >= 2


def test_a_reader_reads_each_wal_object_once(tmp_path):
    """The writer keeps the last WAL object it shipped even once a mirror covers it
    (CloudTier.delete_wal); a reader that dropped it as covered must not GET it again at
    every refresh."""
    url = f"memory://reader-{uuid.uuid4().hex}"
    with _writer(tmp_path, url, wal_shipping="sync") as w:
        for i in range(5):
            w.put(b"k%d" % i, b"v", sync=True)
        w.flush()
        wait_for(lambda: not w.stats()["cloud"]["publish_pending"], "the publish")
        with _reader(tmp_path, url) as r:
            for _ in range(5):
                r.refresh()
            read = r.stats()["reader_wal_objects"]
            for _ in range(5):
                r.refresh()
            assert r.stats()["reader_wal_objects"] == read
            assert [r.get(b"k%d" % i) for i in range(5)] == [b"v"] * 5


def test_an_open_iterator_holds_the_view_and_new_writes_still_arrive(tmp_path):
    url = f"memory://reader-{uuid.uuid4().hex}"
    with _writer(tmp_path, url, wal_shipping="sync") as w:
        for i in range(200):
            w.put(b"k%04d" % i, b"old", sync=True)
        with _reader(tmp_path, url) as r:
            it = r.scan()
            assert next(it) == (b"k0000", b"old")
            for i in range(200):
                w.put(b"k%04d" % i, b"new", sync=True)
            w.flush()  # a new mirror
            r.refresh()
            assert r.stats()["reader_swaps_deferred"] >= 1
            # Meanwhile the view may lag (the writer deleted WAL objects of flushed
            # segments), but it is always a prefix of the writes: new up to some key.
            values = [r.get(b"k%04d" % i) for i in range(200)]
            cut = values.index(b"old") if b"old" in values else 200
            assert values == [b"new"] * cut + [b"old"] * (200 - cut)
            assert all(v == b"old" for _, v in it)  # the iterator keeps its snapshot
            it.close()
            assert r.refresh() or r.stats()["reader_swaps"] >= 2
            assert dict(r.scan()) == {b"k%04d" % i: b"new" for i in range(200)}


@contextmanager
def _view_of_retired_tables(tmp_path, url, w):
    """A reader with an iterator on ``w``'s 3,000 "old" keys, one key read; then ``w``
    overwrites them all and compacts, so every table the iterator's view names is
    retired. Yields ``(reader, iterator)``."""
    for i in range(3000):
        w.put(b"k%05d" % i, b"old%d" % i * 10)
    w.compact_range()
    # (a tiny DataCache and fetch window: the iterator must fetch as it goes)
    with _reader(tmp_path, url, cache_size="64KiB", cloud_fetch_size="4KiB",
                 block_cache_size="64KiB") as r:
        it = r.scan()
        assert next(it)[0] == b"k00000"
        for i in range(3000):
            w.put(b"k%05d" % i, b"new")
        w.compact_range()
        yield r, it


def test_an_iterator_outliving_the_grace_gets_unavailable_and_gets_read_on(tmp_path):
    url = f"memory://reader-{uuid.uuid4().hex}"
    with _writer(tmp_path, url, wal_shipping="sync", retired_object_grace=0,
                 local_budget=0) as w:
        with _view_of_retired_tables(tmp_path, url, w) as (r, it):  # (deleted at once)
            with pytest.raises(rocksmash.UnavailableError, match="retired_object_grace"):
                for _ in it:
                    pass
            it.close()
            assert r.get(b"k02999") == b"new"  # a get moves the view on and reads again
            assert r.stats()["reader_swaps"] >= 2


def test_a_reader_keeps_the_grace_across_the_writers_reopen(tmp_path):
    """The next writer's open deleted every table object its version does not name at
    once, so the tables the last writer retired just before its close vanished under a
    reader still on its mirror. They now get their grace from the open."""
    url = f"memory://reader-{uuid.uuid4().hex}"
    opts = dict(wal_shipping="sync", retired_object_grace=60, local_budget=0)
    with _writer(tmp_path, url, **opts) as w:
        with _view_of_retired_tables(tmp_path, url, w) as (_, it):  # (in their grace)
            w.close()
            with _writer(tmp_path, url, **opts) as w2:
                assert w2.get(b"k02999") == b"new"
                rest = [k for k, _ in it]  # the reader's old view reads on
                assert len(rest) == 2999 and rest[-1] == b"k02999"
                assert w2.stats()["cloud"]["waiting_deletion"]["grace"] > 0
            it.close()


def test_an_exhausted_iterator_does_not_hold_the_view(tmp_path):
    """Issue 27: ``it = reader.scan(); list(it)`` with ``it`` still referenced held the view:
    the reader kept serving the old value while the writer went on."""
    url = f"memory://reader-{uuid.uuid4().hex}"
    with _writer(tmp_path, url, wal_shipping="sync") as w:
        for i in range(300):
            w.put(b"k%04d" % i, b"old", sync=True)
        with _reader(tmp_path, url) as r:
            it = r.scan()
            assert len(list(it)) == 300  # exhausted; ``it`` stays referenced
            for i in range(300):
                w.put(b"k%04d" % i, b"new", sync=True)
            w.compact_range()  # a new mirror; the WAL objects it covers are deleted
            assert r.refresh()  # the view moved to it
            assert r.get(b"k0000") == b"new" and r.stats()["reader_swaps_deferred"] == 0
            with pytest.raises(rocksmash.ClosedError, match="exhausted"):
                it.seek_to_first()  # its state is gone: refused, not a newer one shown


def test_a_table_the_newest_mirror_names_that_is_missing_is_corruption(tmp_path):
    """Issue 27: a fresh reader raised UnavailableError blaming retired_object_grace for a
    table the newest mirror names; nothing but a loss of the bucket deletes one."""
    url = f"memory://reader-{uuid.uuid4().hex}"
    with _writer(tmp_path, url, wal_shipping="sync", local_budget=0) as w:
        for i in range(2000):
            w.put(b"k%05d" % i, b"v%d" % i * 10)
        w.compact_range()
        with _reader(tmp_path, url) as r:  # its view, opened before the loss
            cloud = CloudTier(url, {}, 0)
            (lost, *_) = sorted(f.object_key for _, f in
                                CloudTier.mirror_files(cloud.load_mirror()))
            cloud.store.delete(lost)
            for read in (lambda: list(r.scan()), lambda: [r.get(b"k%05d" % i)
                                                         for i in range(2000)]):
                with pytest.raises(CorruptionError, match="newest manifest mirror") as e:
                    read()
                assert lost in str(e.value) and "retired_object_grace" not in str(e.value)
        with pytest.raises(CorruptionError, match="newest manifest mirror") as e:
            _reader(tmp_path, url, name="fresh")
        assert lost in str(e.value) and "retired_object_grace" not in str(e.value)


def test_a_reader_refuses_what_it_cannot_read(tmp_path):
    with pytest.raises(InvalidArgumentError, match="no database"):
        _reader(tmp_path, f"memory://reader-{uuid.uuid4().hex}")
    url = f"memory://reader-{uuid.uuid4().hex}"
    with _writer(tmp_path, url, wal_shipping="off") as w:
        w.put(b"a", b"1")
        w.flush()
        with pytest.raises(InvalidArgumentError, match="does not ship its WAL"):
            _reader(tmp_path, url)
    with pytest.raises(InvalidArgumentError, match="env"):
        _reader(tmp_path, url, env=rocksmash.env.POSIX)


_keys = st.sampled_from([b"k%02d" % i for i in range(30)])
_ops = st.lists(st.one_of(
    st.tuples(st.just("put"), _keys, st.binary(min_size=0, max_size=400)),
    st.tuples(st.just("delete"), _keys, st.none()),
    st.tuples(st.just("delete_range"), _keys, _keys),
    st.tuples(st.just("flush"), st.none(), st.none()),
    st.tuples(st.just("compact"), st.none(), st.none()),
    st.tuples(st.just("refresh"), st.none(), st.none()),
    st.tuples(st.just("scan_and_keep"), st.none(), st.none()),
), min_size=1, max_size=60)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops_=_ops)
def test_model_reader_matches_the_writer(tmp_path, ops_):
    """After any sequence of synced writes, flushes and compactions, a refreshed reader
    holds exactly the model."""
    url = f"memory://reader-{uuid.uuid4().hex}"
    path = tmp_path / uuid.uuid4().hex
    model: dict[bytes, bytes] = {}
    kept = []  # exhausted iterators still referenced: they must not hold the view
    with _writer(path, url, wal_shipping="sync") as w:
        w.put(b"start", b"", sync=True)
        model[b"start"] = b""
        with _reader(path, url) as r:
            for op, k, v in ops_:
                if op == "put":
                    w.put(k, v, sync=True)
                    model[k] = v
                elif op == "delete":
                    w.delete(k, sync=True)
                    model.pop(k, None)
                elif op == "delete_range":
                    k, v = min(k, v), max(k, v)
                    w.delete_range(k, v, sync=True)
                    for key in [key for key in model if k <= key < v]:
                        del model[key]
                elif op == "flush":
                    w.flush()
                elif op == "compact":
                    w.compact_range()
                elif op == "scan_and_keep":
                    kept.append(r.scan())
                    list(kept[-1])
                else:
                    r.refresh()
                    assert dict(r.scan()) == model
                    assert all(r.get(k) == model.get(k) for k in (b"k00", b"k07", b"k29"))
            r.refresh()
            assert dict(r.scan()) == model


def test_a_reader_on_seaweedfs(tmp_path, s3_store_options_for):
    opts = s3_store_options_for("seaweedfs")
    url, store_opts = opts["object_store"], opts["object_store_options"]
    model = {}
    with _writer(tmp_path, url, wal_shipping="sync", object_store_options=store_opts) as w:
        for i in range(600):
            w.put(b"k%04d" % (i % 250), b"v%d" % i * 30, sync=True)
            model[b"k%04d" % (i % 250)] = b"v%d" % i * 30
        w.compact_range()
        with _reader(tmp_path, url, object_store_options=store_opts) as r:
            assert dict(r.scan()) == model
