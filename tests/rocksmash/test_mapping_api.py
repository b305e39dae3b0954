"""A DB is a MutableMapping of bytes to bytes: ``len``, ``bool``, ``reversed``, ``clear``,
a batch written at the end of a ``with`` block; and the package's surface (``dir``,
``python -m rocksmash``, the error for a path that cannot be created)."""

from __future__ import annotations

import collections.abc
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rocksmash

KEYS = st.binary(min_size=0, max_size=3)
OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), KEYS, st.binary(max_size=4)),
    st.tuples(st.just("delete"), KEYS, st.none()),
    st.tuples(st.just("clear"), st.none(), st.none()),
    st.tuples(st.just("flush"), st.none(), st.none()),
), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_mapping_methods_match_a_dict(tmp_path_factory, ops):
    model: dict[bytes, bytes] = {}
    with rocksmash.open(tmp_path_factory.mktemp("db"), background_processes=False) as db:
        for op, key, value in ops:
            if op == "put":
                db[key] = value
                model[key] = value
            elif op == "delete":
                db.pop(key, None)
                model.pop(key, None)
            elif op == "clear":
                db.clear()
                model.clear()
            else:
                db.flush()
            assert len(db) == len(model)
            assert bool(db) == bool(model)
        assert list(reversed(db)) == sorted(model, reverse=True)
        assert dict(db.items()) == model


def test_a_db_is_a_mutable_mapping(tmp_path):
    with rocksmash.open(tmp_path / "db") as db:
        assert isinstance(db, collections.abc.MutableMapping)
        assert not db and len(db) == 0
        db.update({b"a": b"1", b"b": b"2", b"c": b"3"})
        assert db and len(db) == 3
        assert list(reversed(db)) == [b"c", b"b", b"a"]


def test_clear_is_one_atomic_write_that_snapshots_do_not_see(tmp_path):
    with rocksmash.open(tmp_path / "db") as db:
        db.update({b"a": b"1", b"m": b"2", b"\xff\xff": b"3"})
        with db.snapshot() as snap:
            db.clear()
            assert list(db) == [] and db.get(b"\xff\xff") is None
            assert list(db.scan(snapshot=snap)) == [(b"a", b"1"), (b"m", b"2"), (b"\xff\xff", b"3")]
        db.clear()  # empty: nothing to write
        db[b"z"] = b"after"
        assert dict(db.items()) == {b"z": b"after"}


def test_batch_writes_at_the_end_of_the_block_and_discards_on_error(tmp_path):
    with rocksmash.open(tmp_path / "db") as db:
        with db.batch(sync=True) as b:
            b.put(b"a", b"1").put(b"b", b"2")
            assert db.get(b"a") is None  # nothing before the block ends
        assert db.get(b"a") == b"1" and db.get(b"b") == b"2"
        with pytest.raises(RuntimeError):
            with db.batch() as b:
                b.delete(b"a")
                raise RuntimeError("discard")
        assert db.get(b"a") == b"1"
        with pytest.raises(rocksmash.InvalidArgumentError, match=r"db\.batch\(\)"):
            with rocksmash.WriteBatch():
                pass


def test_read_only_views_refuse_clear_and_batch(tmp_path):
    with rocksmash.open(tmp_path / "db") as db:
        db[b"a"] = b"1"
    with rocksmash.open(tmp_path / "db", read_only=True) as view:
        assert len(view) == 1
        with pytest.raises(rocksmash.InvalidArgumentError, match="read-only"):
            view.clear()
        with pytest.raises(rocksmash.InvalidArgumentError, match="read-only"):
            view.batch()


def test_dir_lists_the_public_names_only():
    names = dir(rocksmash)
    assert "open" in names and "WorkerDied" in names and "__version__" in names
    for helper in ("os", "inspect", "textwrap", "typing", "dataclasses", "db", "Unpack"):
        assert helper not in names
    assert set(rocksmash.__all__) <= set(names)


def test_worker_died_is_in_the_hierarchy_and_retriable():
    assert issubclass(rocksmash.WorkerDied, rocksmash.Error)
    assert rocksmash.WorkerDied.retriable
    assert "WorkerDied" in rocksmash.errors.__doc__


def test_a_path_that_cannot_be_created_is_the_callers_to_fix(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    for bad in ("/proc/nope", blocker / "below"):
        with pytest.raises(rocksmash.InvalidArgumentError, match=str(bad)):
            rocksmash.open(bad)


def test_python_dash_m_rocksmash_is_the_cli():
    r = subprocess.run([sys.executable, "-m", "rocksmash", "--help"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "checkpoint" in r.stdout and "restore" in r.stdout
