"""``rocksmash.open(path, read_only=True)`` (rocksmash/read_only.py): a point-in-time view
of a local database that takes no lock and changes nothing, beside a live writer in this
process and in another one, refusing every write."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import uuid

import pytest

import rocksmash
from rocksmash import ClosedError, InvalidArgumentError, ReadOnlyDB

SMALL = dict(memtable_size="8KiB", block_size=512, target_file_size="16KiB",
             level_base_size="32KiB", l0_compaction_trigger=2, background_processes=False)


def tree(path):
    """Names and contents of every file: what a read-only open must leave alone."""
    out = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def test_a_view_beside_the_writer_sees_the_state_at_its_open(tmp_path):
    with rocksmash.open(tmp_path, **SMALL) as db:
        for i in range(1500):
            db.put(b"k%05d" % i, b"v%05d" % i)
        db.compact_range()
        db.delete(b"k00007")
        db.put(b"unflushed", b"only in the WAL")  # the view replays unflushed segments
        with rocksmash.open(tmp_path, read_only=True) as ro, \
                rocksmash.open(tmp_path, read_only=True) as ro2:
            assert isinstance(ro, ReadOnlyDB)
            want = list(db.scan())
            assert list(ro.scan()) == want and list(ro2.keys()) == [k for k, _ in want]
            assert ro.get(b"unflushed") == b"only in the WAL" and ro.get(b"k00007") is None
            db.put(b"later", b"x")  # the writer goes on: the view does not change
            db.compact_range()
            assert ro.get(b"later") is None and list(ro.scan()) == want
            with ro.snapshot() as snap:
                it = ro.scan(reverse=True, keys_only=True)
                it.seek(b"k00010")
                assert next(it) == b"k00010" and snap.get(b"k00001") == b"v00001"
            assert ro.multi_get([b"k00001", b"nope"]) == [b"v00001", None]
        with rocksmash.open(tmp_path, read_only=True) as ro:  # a new view sees it
            assert ro.get(b"later") == b"x"


def test_read_only_writes_nothing_and_refuses_writes(tmp_path):
    with rocksmash.open(tmp_path, **SMALL) as db:
        for i in range(500):
            db.put(b"k%05d" % i, b"v" * 20)
    before = tree(tmp_path)
    with rocksmash.open(tmp_path, read_only=True) as ro:
        for call in (lambda: ro.put(b"a", b"1"), lambda: ro.delete(b"a"),
                     lambda: ro.write(rocksmash.WriteBatch().put(b"a", b"1")),
                     lambda: ro.update({b"a": b"1"}), lambda: ro.setdefault(b"a", b"1"),
                     lambda: ro.pop(b"k00001"), ro.flush, ro.compact_range,
                     lambda: ro.checkpoint(tmp_path / "ck")):
            with pytest.raises(InvalidArgumentError, match="read-only"):
                call()
        assert len(list(ro.scan())) == 500
    assert tree(tmp_path) == before  # not even the lock file was touched
    with pytest.raises(ClosedError):
        ro.get(b"k00001")


def test_read_only_needs_an_existing_local_database(tmp_path):
    with pytest.raises(InvalidArgumentError, match="no database here"):
        rocksmash.open(tmp_path / "none", read_only=True)
    assert not (tmp_path / "none").exists()
    with pytest.raises(InvalidArgumentError, match="object_store"):
        rocksmash.open(tmp_path, read_only=True, object_store=f"memory://{uuid.uuid4().hex}/x")


WRITER = """
import sys, rocksmash
db = rocksmash.open(sys.argv[1], memtable_size="8KiB", block_size=512,
                    target_file_size="16KiB", level_base_size="32KiB",
                    l0_compaction_trigger=2)
i = 0
print("ready", flush=True)
while sys.stdin.readline().strip() == "more":
    for _ in range(400):
        db.put(b"w%07d" % i, b"x" * 40)
        i += 1
    print(i, flush=True)
db.close()
"""


def test_views_opened_while_another_process_writes_and_compacts(tmp_path):
    """Each view, opened while a writer process flushes and compacts (deleting segments
    and tables), is a prefix of the writes: everything acknowledged before the open."""
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        errors = []
        acked = 0
        for _ in range(8):
            child.stdin.write("more\n")
            child.stdin.flush()
            acked = int(child.stdout.readline())
            # opening while the writer is idle, then while it writes the next round
            child.stdin.write("more\n")
            child.stdin.flush()
            with rocksmash.open(tmp_path, read_only=True, background_processes=False) as ro:
                keys = list(ro.keys())
            if len(keys) < acked or keys != [b"w%07d" % i for i in range(len(keys))]:
                errors.append((acked, len(keys)))
            acked = int(child.stdout.readline())
        assert not errors
        child.stdin.write("stop\n")
        child.stdin.flush()
        assert child.wait(timeout=120) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=60)
    with rocksmash.open(tmp_path, read_only=True) as ro:
        assert len(list(ro.keys())) == acked


def test_threads_read_a_view_while_the_writer_compacts(tmp_path):
    with rocksmash.open(tmp_path, **SMALL) as db:
        for i in range(1000):
            db.put(b"k%05d" % i, b"v%05d" % i)
        ro = rocksmash.open(tmp_path, read_only=True)
        want = list(ro.scan())
        bad = []

        def reader():
            for _ in range(5):
                if list(ro.scan()) != want:
                    bad.append(1)

        ts = [threading.Thread(target=reader) for _ in range(3)]
        for t in ts:
            t.start()
        for i in range(1000):
            db.put(b"k%05d" % i, b"new")
        db.compact_range()  # unlinks every table the view holds
        for t in ts:
            t.join(timeout=120)
        assert not bad and list(ro.scan()) == want
        ro.close()
