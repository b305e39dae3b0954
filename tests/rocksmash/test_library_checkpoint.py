"""``DB.checkpoint(dest)`` (rocksmash/checkpoint.py): a consistent copy of a local database
that opens as a separate database; hard links, independence of the two afterwards, a
consistent prefix under concurrent writes, and a random-program comparison with a dict."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

import rocksmash
from rocksmash import ClosedError, InvalidArgumentError

SMALL = dict(memtable_size="8KiB", block_size=512, target_file_size="16KiB",
             level_base_size="32KiB", l0_compaction_trigger=2)


@pytest.fixture
def db(tmp_path):
    d = rocksmash.open(tmp_path / "src", background_processes=False, **SMALL)
    yield d
    d.close()


@pytest.fixture
def db_processes(tmp_path):
    """Flush and compaction in the worker processes while the checkpoint links tables."""
    d = rocksmash.open(tmp_path / "src", background_processes=True, **SMALL)
    yield d
    d.close()


def fill(db, n, tag=b""):
    for i in range(n):
        db.put(b"k%05d" % i, tag + b"v%05d" % i * 10)


@pytest.fixture
def db_quiet(tmp_path):
    """No background compaction after the fill (L0 compacts at 16 files; the test makes
    7): one finishing just after the checkpoint would unlink the source's name of a table
    the checkpoint links, and the link count checked below would be 1 (it failed so
    once, at load 5)."""
    d = rocksmash.open(tmp_path / "src", background_processes=False,
                       **dict(SMALL, l0_compaction_trigger=16))
    yield d
    d.close()


def test_checkpoint_opens_with_the_same_data_and_then_goes_its_own_way(db_quiet, tmp_path):
    db = db_quiet
    fill(db, 800)
    db.compact_range()
    for i in range(0, 800, 3):
        db.delete(b"k%05d" % i)
    db.put(b"unflushed", b"in the memtable")  # a checkpoint flushes first
    want = list(db.scan())
    dest = tmp_path / "ckpt"
    db.checkpoint(dest)
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]
    tables = [n for n in os.listdir(dest) if n.endswith(".sst")]
    assert tables and all(os.stat(dest / n).st_nlink >= 2 for n in tables), "not hard links"
    db.put(b"after", b"source only")
    fill(db, 800, b"new")
    db.compact_range()  # unlinks the source's names of the tables the checkpoint shares
    with rocksmash.open(dest, background_processes=False) as ck:
        assert list(ck.scan()) == want
        ck.put(b"checkpoint only", b"x")
        ck.compact_range()
    assert db.get(b"checkpoint only") is None and db.get(b"after") == b"source only"
    with rocksmash.open(dest, background_processes=False) as ck:  # reopens after its writes
        assert ck.get(b"checkpoint only") == b"x" and ck.get(b"after") is None
        assert ck.get(b"unflushed") == b"in the memtable"


def test_checkpoint_during_writes_is_a_prefix_of_them(db_processes, tmp_path):
    db = db_processes
    stop = threading.Event()
    written = []

    def writer():
        i = 0
        while not stop.is_set() and i < 200_000:
            db.put(b"w%07d" % i, b"x" * 50)
            written.append(i)
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        while len(written) < 500:  # let it get going (bounded by the writer's own limit)
            if not t.is_alive():
                break
            threading.Event().wait(0.01)
        acked = len(written)
        db.checkpoint(tmp_path / "ckpt")
    finally:
        stop.set()
        t.join(timeout=120)
    assert not t.is_alive()
    with rocksmash.open(tmp_path / "ckpt", background_processes=False) as ck:
        keys = list(ck.keys())
    n = len(keys)
    assert n >= acked  # everything acknowledged before the call
    assert keys == [b"w%07d" % i for i in range(n)]  # and no gap: a prefix


def test_checkpoint_refusals(db, tmp_path):
    (tmp_path / "taken").mkdir()
    with pytest.raises(InvalidArgumentError, match="already exists"):
        db.checkpoint(tmp_path / "taken")
    with pytest.raises(InvalidArgumentError, match="no such directory"):
        db.checkpoint(tmp_path / "missing" / "ckpt")
    db.close()
    with pytest.raises(ClosedError):
        db.checkpoint(tmp_path / "ckpt")


OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), st.binary(max_size=3), st.binary(max_size=200)),
    st.tuples(st.just("delete"), st.binary(max_size=3)),
    st.tuples(st.just("flush")),
    st.tuples(st.just("compact")),
    st.tuples(st.just("checkpoint")),
), max_size=50)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_every_checkpoint_matches_the_model_at_its_time(ops):
    root = tempfile.mkdtemp(prefix="rocksmash-ckpt-")
    try:
        model: dict[bytes, bytes] = {}
        taken = []
        with rocksmash.open(os.path.join(root, "src"), background_processes=False,
                            memtable_size=1024, block_size=128) as db:
            for op in ops:
                if op[0] == "put":
                    db.put(op[1], op[2])
                    model[op[1]] = op[2]
                elif op[0] == "delete":
                    db.delete(op[1])
                    model.pop(op[1], None)
                elif op[0] == "flush":
                    db.flush()
                elif op[0] == "compact":
                    db.compact_range()
                else:
                    dest = os.path.join(root, f"ckpt{len(taken)}")
                    db.checkpoint(dest)
                    taken.append((dest, sorted(model.items())))
            assert list(db.scan()) == sorted(model.items())
        for dest, want in taken:
            with rocksmash.open(dest, background_processes=False) as ck:
                assert list(ck.scan()) == want
    finally:
        shutil.rmtree(root, ignore_errors=True)
