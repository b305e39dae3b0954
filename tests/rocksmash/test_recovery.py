"""Parallel recovery: WAL segments left by a crash are replayed by several worker
processes at once, into the same tables (byte for byte) as a serial replay and as the
flush that never happened."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import rocksmash

WRITER = """
import os, sys, threading, rocksmash
path, n = sys.argv[1], int(sys.argv[2])
db = rocksmash.open(path, memtable_size="256KiB", max_immutable_memtables=64)
db._flush_one = lambda mem, snapshots: threading.Event().wait()  # flushes never finish
for i in range(n):
    db.put(b"k%07d" % (i * 7919 % n), b"v%07d" % i * 8)
    if i % 1000 == 0:
        db.delete(b"k%07d" % (i // 2))
os._exit(0)  # a crash: every sealed memtable is still only in its WAL segment
"""


def crashed_writer(path, n):
    subprocess.run([sys.executable, "-c", WRITER, str(path), str(n)], check=True, timeout=120)
    return sorted(x for x in os.listdir(path) if x.endswith(".log"))


def model(n):
    out = {}
    for i in range(n):
        out[b"k%07d" % (i * 7919 % n)] = b"v%07d" % i * 8
        if i % 1000 == 0:
            out.pop(b"k%07d" % (i // 2), None)
    return out


def tables(path):
    return {name: open(os.path.join(path, name), "rb").read()
            for name in sorted(os.listdir(path)) if name.endswith(".sst")}


@pytest.mark.slow
def test_parallel_recovery_is_serial_recovery(tmp_path):
    n = 12000
    segments = crashed_writer(tmp_path / "a", n)
    assert len(segments) >= 6
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    results = {}
    for name, procs in (("a", 1), ("b", 4)):
        with rocksmash.open(tmp_path / name, recovery_processes=procs,
                            l0_compaction_trigger=1000, l0_stop_writes_trigger=1000) as db:
            s = db.stats()
            assert s["recovered_segments"] == len(segments)
            assert s.get("recovery_processes", 1) == min(procs, len(segments))
            results[name] = (dict(db.scan()), tables(tmp_path / name))
    assert results["a"][0] == results["b"][0] == model(n)
    assert results["a"][1] == results["b"][1]  # the same tables, byte for byte


def test_replayed_table_is_the_flushed_table(tmp_path):
    """A replay regenerates exactly what the flush would have written."""
    opts = dict(background_processes=False)
    with rocksmash.open(tmp_path / "flushed", **opts) as db:
        for i in range(2000):
            db.put(b"k%05d" % i, b"v%05d" % i)
        (seg,) = [x for x in os.listdir(tmp_path / "flushed") if x.endswith(".log")]
        shutil.copytree(tmp_path / "flushed", tmp_path / "crashed")  # before the flush
        db.flush()
    with rocksmash.open(tmp_path / "crashed", **opts, l0_compaction_trigger=100,
                        l0_stop_writes_trigger=100):
        pass
    flushed, replayed = tables(tmp_path / "flushed"), tables(tmp_path / "crashed")
    assert flushed and flushed == replayed
