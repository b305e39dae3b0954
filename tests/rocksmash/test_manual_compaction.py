"""compact_range runs in bounded steps, so flushes and writes go on beside it.

Before, one job merged the whole range while holding the one worker a flush needs (one
worker per CPU but one: a single worker on a 2-core machine) and the compaction mutex
that L0's compactions need, so writers stalled for as long as the compaction ran (about
20 s at 3M records), and a larger database reached ``stall_timeout``.
"""

from __future__ import annotations

import threading
import time

import rocksmash
from rocksmash.compaction import MANUAL_STEP_FILES

TARGET = 16 << 10
OPTS = dict(memtable_size=64 << 10, target_file_size=TARGET, block_size=1024,
            l0_compaction_trigger=2, compression="none")


def fill(db, n, start=0, tag=b"v"):
    for base in range(start, start + n, 500):
        db.write(rocksmash.WriteBatch().put_many(
            (b"k%07d" % i, tag + b"%07d" % i + b"x" * 90)
            for i in range(base, min(base + 500, start + n))))


def wait_for(cond, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_a_flush_during_compact_range_waits_for_one_step_not_the_whole_job(tmp_path):
    with rocksmash.open(tmp_path / "db", **OPTS) as db:
        fill(db, 20_000)  # about 2 MB: many steps of MANUAL_STEP_FILES * TARGET
        db.flush()
        before = db.stats()["compactions"]
        done = threading.Event()
        errors: list[BaseException] = []
        reports: list[tuple[int, int]] = []

        def compact() -> None:
            try:
                db.compact_range(progress=lambda read, left: reports.append((read, left)))
            except BaseException as e:  # (reported below)
                errors.append(e)
            finally:
                done.set()

        t = threading.Thread(target=compact)
        t.start()
        try:
            wait_for(lambda: db.stats()["compactions"] > before, "the first step")
            fill(db, 1_000, start=50_000, tag=b"n")
            db.flush()  # needs the worker that the compaction's steps use
            steps_at_flush = db.stats()["compactions"] - before
            still_running = not done.is_set()
        finally:
            t.join(300)
        assert not errors, errors
        total = db.stats()["compactions"] - before
        table_bytes = db.stats()["table_bytes"]
        # Many steps, and the flush finished before most of them had run.
        assert total >= table_bytes // (MANUAL_STEP_FILES * TARGET) > 3
        assert still_running and steps_at_flush < total
        # Progress after each step: bytes read grow, and the files left end at none.
        reads = [r for r, _ in reports]
        assert len(reports) > 3 and reads == sorted(reads) and reports[0][1] > 0
        assert reports[-1][1] == 0
        for i in (0, 7_777, 19_999):
            assert db.get(b"k%07d" % i) == b"v%07d" % i + b"x" * 90
        assert db.get(b"k%07d" % 50_500) == b"n%07d" % 50_500 + b"x" * 90


def test_writes_during_compact_range_are_kept_and_the_old_data_ends_in_the_last_level(
        tmp_path):
    with rocksmash.open(tmp_path / "db", **OPTS) as db:
        fill(db, 10_000)
        for i in range(0, 10_000, 3):
            db.delete(b"k%07d" % i)
        stop = threading.Event()
        written: list[int] = []

        def writer() -> None:
            i = 100_000
            while not stop.is_set() and i < 105_000:  # (its own flushes and compactions
                # are work for the one worker too: keep the test short)
                fill(db, 100, start=i, tag=b"w")
                written.append(i)
                i += 100

        t = threading.Thread(target=writer)
        t.start()
        try:
            wait_for(lambda: written, "the writer's first batch")
            seq_before = db.stats()["sequence"]
            db.compact_range()
            # Nothing written before the call is left above the last level (white box:
            # the files of the version); what the writer wrote since may be.
            version = db._version
            above = [f for level in version.levels[:-1] for f in level]
            assert all(f.min_seq > seq_before for f in above), above
            assert version.levels[-1]
        finally:
            stop.set()
            t.join(120)
        assert len(written) > 1, "the writer made no progress during compact_range"
        for i in range(0, 10_000, 997):
            expect = None if i % 3 == 0 else b"v%07d" % i + b"x" * 90
            assert db.get(b"k%07d" % i) == expect
        for start in written:
            assert db.get(b"k%07d" % (start + 99)) == b"w%07d" % (start + 99) + b"x" * 90
