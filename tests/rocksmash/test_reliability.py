"""Failure paths of the local engine, each found by attacking it (see docs/format.md,
"Torn tails", and the README's "Failures"): damaged last records of the
manifest and the WAL, long torn tails, a full disk, close racing with threads, iterators
closed midway, a fork, and bad input that must raise from the documented hierarchy."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid

import pytest

import rocksmash
from rocksmash import ClosedError, CorruptionError, Error, InvalidArgumentError, InvalidTypeError
from rocksmash.log_format import DAMAGED, TORN, encode_record, read_records

from .test_corruption import files, flip

OPTS = dict(background_processes=False)


def last_record_offset(path, start=0):
    """Offset of the payload of the last record of a log_format file."""
    data = open(path, "rb").read()
    pos, last = start, None
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "little")
        last = pos + 8
        pos += 8 + n
    return last


def load(path, n=1000, **opts):
    with rocksmash.open(path, **OPTS, **opts) as db:
        for i in range(n):
            db.put(b"k%05d" % i, b"v%05d" % i * 5, sync=True)
        db.flush()


# ------------------------------------------------------------------ manifest

def test_flipped_last_manifest_record_is_refused_and_nothing_is_deleted(tmp_path):
    """The last record is the flush of 1,000 synced keys whose WAL segment is gone:
    dropping it would lose all of them. Before the fix: 0 of 1,000 keys, table deleted."""
    load(tmp_path)
    (manifest,) = files(tmp_path, "manifest")
    before = sorted(os.listdir(tmp_path))
    flip(manifest, last_record_offset(manifest) + 5)
    with pytest.raises(CorruptionError, match="missing"):
        rocksmash.open(tmp_path, **OPTS)
    assert sorted(os.listdir(tmp_path)) == before  # the table is still there
    assert files(tmp_path, "sst")


def test_damaged_last_manifest_record_is_dropped_while_its_wal_is_kept(tmp_path):
    """A flush's edit damaged while its segment still exists (a crash between the edit
    and the segment's deletion): the segment is replayed and nothing is lost."""
    path = tmp_path / "db"
    with rocksmash.open(path, **OPTS) as db:
        for i in range(500):
            db.put(b"k%05d" % i, b"v%05d" % i, sync=True)
        (segment,) = files(path, "log")
        saved = open(segment, "rb").read()
        db.flush()
    with open(segment, "wb") as f:  # the state just before the segment was deleted
        f.write(saved)
    (manifest,) = files(path, "manifest")
    flip(manifest, last_record_offset(manifest) + 3)
    with rocksmash.open(path, **OPTS) as db:
        assert dict(db.scan()) == {b"k%05d" % i: b"v%05d" % i for i in range(500)}


def test_damaged_manifest_record_after_a_compaction_is_refused(tmp_path):
    """The last edit is a compaction whose inputs were deleted after it was synced."""
    path = tmp_path / "db"
    with rocksmash.open(path, **OPTS) as db:
        for r in range(3):
            for i in range(300):
                db.put(b"k%05d" % i, b"r%d" % r)
            db.flush()
        db.compact_range()
    (manifest,) = files(path, "manifest")
    flip(manifest, last_record_offset(manifest) + 2)
    with pytest.raises(CorruptionError, match="missing"):
        rocksmash.open(path, **OPTS)


def test_cut_manifest_record_is_a_torn_tail(tmp_path):
    load(tmp_path, n=100)
    (manifest,) = files(tmp_path, "manifest")
    with open(manifest, "ab") as f:
        f.write(encode_record(b'{"next":99}')[:-3])  # a crash mid-append
    with rocksmash.open(tmp_path, **OPTS) as db:
        assert len(list(db.scan())) == 100


# ------------------------------------------------------------------ WAL

def _unflushed(path, n=200):
    with rocksmash.open(path, **OPTS) as db:
        for i in range(n):
            db.put(b"k%05d" % i, b"v%05d" % i, sync=True)
    (segment,) = files(path, "log")
    return segment


def test_flipped_last_wal_record_is_not_dropped_as_torn(tmp_path):
    """A complete last record failing its checksum may be a synced write: refused by
    default; ``wal_recovery="drop_corrupt_tail"`` drops it (and only it)."""
    segment = _unflushed(tmp_path)
    flip(segment, os.path.getsize(segment) - 2)
    with pytest.raises(CorruptionError, match="drop_corrupt_tail"):
        rocksmash.open(tmp_path, **OPTS)
    with rocksmash.open(tmp_path, **OPTS, wal_recovery="drop_corrupt_tail") as db:
        assert len(list(db.scan())) == 199
        assert db.get(b"k00198") == b"v00198"


def test_wal_record_cut_short_is_dropped(tmp_path):
    segment = _unflushed(tmp_path)
    with open(segment, "r+b") as f:
        f.truncate(os.path.getsize(segment) - 3)
    with rocksmash.open(tmp_path, **OPTS) as db:
        assert len(list(db.scan())) == 199
        assert db.stats()["torn_wal_tails"] == 1


def test_one_flipped_length_bit_in_the_middle_is_corruption():
    """A length made larger by one flipped bit hides the records after it; the checksum
    finds the true length, so this is damage in the middle, not a torn tail."""
    recs = [encode_record(b"x" * 100) for _ in range(3)]
    data = bytearray(b"".join(recs))
    data[108 + 2] ^= 0x10  # the second record's length grows by 1 MiB
    with pytest.raises(CorruptionError, match="followed by a valid record"):
        read_records(bytes(data))


@pytest.mark.parametrize("mib", [16, 64])
def test_long_torn_tail_reads_in_linear_time(mib):
    """Before the fix: 62 s for a 16 MiB torn tail, more than 400 s for 64 MiB."""
    big = encode_record(os.urandom(1 << 20) * mib)
    head = encode_record(b"first")
    for data, ending in ((head + big[:-1000], TORN),
                         (head + big[:50] + bytes([big[50] ^ 4]) + big[51:], DAMAGED)):
        started = time.monotonic()
        records, end, tail = read_records(data)
        assert (records, end, tail) == ([b"first"], len(head), ending)
        assert time.monotonic() - started < 20  # a bound on a hang, not a benchmark


@pytest.mark.slow
def test_reopen_after_kill_during_a_huge_put(tmp_path):
    """A real SIGKILL while a 48 MiB value is being written; reopen is quick and the
    acknowledged writes before it are there."""
    path = tmp_path / "db"
    code = f"""
import os, rocksmash, sys
db = rocksmash.open({str(path)!r}, memtable_size="4GiB", max_value_size="1GiB",
                    background_processes=False)
for i in range(100):
    db.put(b"k%03d" % i, b"v", sync=True)
print("ready", flush=True)
db.put(b"huge", os.urandom(48 << 20))
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    segment = files(path, "log")[-1]
    deadline = time.monotonic() + 30
    while os.path.getsize(segment) < 8 << 20 and time.monotonic() < deadline:
        time.sleep(0.001)  # polling the condition: the huge record is under way
    proc.kill()
    proc.wait()
    started = time.monotonic()
    with rocksmash.open(path, background_processes=False) as db:
        assert all(db.get(b"k%03d" % i) == b"v" for i in range(100))
    assert time.monotonic() - started < 60


# ------------------------------------------------------------------ disk full

@pytest.fixture
def small_disk(tmp_path):
    """A 6 MiB tmpfs (needs root; skipped elsewhere), unmounted afterwards."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_fails_writes_cleanly_and_loses_nothing(small_disk):
    """Before the fix: a raw OSError from put, and the failed write was applied anyway."""
    path = small_disk / "db"
    acked = {}
    failed = []
    db = rocksmash.open(path, **OPTS, memtable_size="128KiB", stall_timeout=2)
    try:
        for i in range(2000):
            db.put(b"k%06d" % i, b"%06d" % i * 60)
            acked[b"k%06d" % i] = b"%06d" % i * 60
        filler = small_disk / "filler"  # another program fills the disk
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\1" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        for i in range(2000, 30000):
            k, v = b"k%06d" % i, b"%06d" % i * 60
            try:
                db.put(k, v, sync=i % 10 == 0)
                acked[k] = v
            except rocksmash.UnavailableError as e:
                assert "disk full" in str(e) or "stalled" in str(e), e
                failed.append(k)
                if len(failed) >= 5:
                    break
        assert failed, "the disk never filled"
        for k in failed:  # a failed write is not applied
            assert db.get(k) is None
    finally:
        db.close()
    os.unlink(filler)  # room again: everything acknowledged is there
    with rocksmash.open(path, **OPTS, memtable_size="128KiB") as db:
        got = {k: db.get(k) for k in acked}
        assert all(db.get(k) is None for k in failed)
    assert got == acked


# ------------------------------------------------------------------ close, iterators, fork

@pytest.mark.parametrize("round_", range(4))
def test_close_while_threads_work_raises_closed_error(tmp_path, round_):
    """Before the fix: ValueError (fd -1) from put(sync=True), OSError EBADF from scan."""
    db = rocksmash.open(tmp_path, **OPTS, memtable_size="64KiB")
    for i in range(3000):
        db.put(b"k%05d" % i, b"v" * 50)
    db.flush()
    errors = []
    n = 12
    started = threading.Barrier(n + 1)

    def work(kind):
        started.wait()
        try:
            for i in range(1000000):
                if kind == "put":
                    db.put(b"p%06d" % i, b"x" * 30, sync=True)
                elif kind == "scan":
                    for _ in db.scan(b"k%05d" % (i % 2900)):
                        pass
                else:
                    db.get(b"k%05d" % (i % 3000))
        except ClosedError:
            return
        except BaseException as e:  # anything else is the bug
            errors.append(e)

    kinds = ["put"] * 6 + ["scan"] * 4 + ["get"] * 2
    threads = [threading.Thread(target=work, args=(k,)) for k in kinds]
    for t in threads:
        t.start()
    started.wait()
    goal = 3000 + 200 * (round_ + 1)
    while db.stats()["sequence"] < goal:  # the writers are under way
        pass
    db.close()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    with rocksmash.open(tmp_path, **OPTS) as db:
        assert db.get(b"k02999") == b"v" * 50


def test_closed_iterator_stops(tmp_path):
    with rocksmash.open(tmp_path, **OPTS) as db:
        for i in range(10):
            db.put(b"k%d" % i, b"v")
        it = db.scan()
        assert next(it) == (b"k0", b"v")
        it.close()
        with pytest.raises(StopIteration):
            next(it)
        assert list(it) == []
        it.close()  # twice is harmless


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_child_cannot_use_the_parents_database(tmp_path):
    """Before the fix: the child's write succeeded, the parent never saw it, and two
    records shared a sequence number after a reopen."""
    db = rocksmash.open(tmp_path, **OPTS)
    for i in range(100):
        db.put(b"k%03d" % i, b"parent")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what each call did, then leave without cleanup
        out = []
        for call in (lambda: db.put(b"child", b"x"), lambda: db.get(b"k001"),
                     lambda: list(db.scan())):
            try:
                call()
                out.append("ok")
            except ClosedError as e:
                out.append("closed" if "fork" in str(e) else "other")
            except BaseException as e:
                out.append(type(e).__name__)
        db.close()  # must not release the parent's lock or close its files
        os.write(w, ",".join(out).encode())
        os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    reply = os.read(r, 1000).decode()
    os.close(r)
    assert status == 0 and reply == "closed,closed,closed"
    db.put(b"after", b"fork")
    with pytest.raises(rocksmash.LockedError):  # the parent still holds its lock
        rocksmash.open(tmp_path, **OPTS)
    db.close()
    with rocksmash.open(tmp_path, **OPTS) as db:
        assert db.get(b"child") is None and db.get(b"after") == b"fork"
        assert db.stats()["sequence"] == 101


# ------------------------------------------------------------------ errors in the hierarchy

def test_paths_that_are_not_directories(tmp_path):
    f = tmp_path / "file"
    f.write_bytes(b"x")
    for p in (f, f / "below"):
        with pytest.raises(InvalidArgumentError, match="not a directory"):
            rocksmash.open(p, **OPTS)


def test_non_bytes_in_batch_ops_is_invalid_type(tmp_path):
    with rocksmash.open(tmp_path, **OPTS) as db:
        batch = rocksmash.WriteBatch().put(b"a", b"1")
        batch.ops.append((b"b", 5))
        with pytest.raises(InvalidTypeError):
            db.write(batch)
        batch.ops[-1] = ("c", b"3")
        with pytest.raises(InvalidTypeError):
            db.write(batch)
        assert db.get(b"a") is None  # nothing of a refused batch is applied


def test_failed_open_releases_the_lock(tmp_path):
    with pytest.raises(InvalidArgumentError, match="capacity"):  # refused by the DataCache
        rocksmash.open(tmp_path, **OPTS, object_store=f"memory://{uuid.uuid4().hex}/x",
                       cache_size=1)
    with pytest.raises(InvalidArgumentError):  # num_levels mismatch after creation
        load(tmp_path, n=10)
        rocksmash.open(tmp_path, **OPTS, num_levels=3)
    with rocksmash.open(tmp_path, **OPTS) as db:  # not LockedError
        assert db.get(b"k00001") == b"v00001" * 5


def test_failed_fsync_stops_writes_with_a_clear_error(tmp_path, monkeypatch):
    """After a failed fsync the kernel may have dropped the dirty pages: the write raises
    (not a raw OSError), later writes raise too, and a reopen recovers what was synced."""
    import errno

    db = rocksmash.open(tmp_path, **OPTS)
    try:
        for i in range(100):
            db.put(b"k%03d" % i, b"v", sync=True)
        real = os.fdatasync

        def broken(fd):
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(os, "fdatasync", broken)
        with pytest.raises(Error, match="fsync failed"):
            db.put(b"lost", b"?", sync=True)
        monkeypatch.setattr(os, "fdatasync", real)
        with pytest.raises(Error, match="fsync failed"):
            db.put(b"after", b"x")
    finally:
        db.close()
    with rocksmash.open(tmp_path, **OPTS) as db:
        assert all(db.get(b"k%03d" % i) == b"v" for i in range(100))
        db.put(b"after", b"reopened", sync=True)
