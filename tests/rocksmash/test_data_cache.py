"""DataCache: admission, eviction, capacity, persistence, crash safety, threads, and a
stateful model test (the cache may forget, but must never return wrong bytes)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from rocksmash import ClosedError, InvalidArgumentError, LockedError
from rocksmash.data_cache import RECORD_HEADER_SIZE, DataCache


def blk(table: int, block: int, version: int = 0, size: int | None = None) -> bytes:
    """Deterministic bytes for one block (a version makes a replacement distinguishable)."""
    rng = random.Random(f"{table}/{block}/{version}")
    return rng.randbytes(size if size is not None else rng.randrange(100, 3000))


def disk_usage(d: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)
               if f.endswith(".seg"))


def seg_files(d: str) -> list[str]:
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".seg"))


def fill(c: DataCache, table: int, blocks: range, **kw) -> None:
    for b in blocks:
        assert c.put(table, b, blk(table, b), force=True, **kw)


# -- admission -------------------------------------------------------------------------

def test_admits_freely_while_there_is_room(tmp_path):
    c = DataCache(str(tmp_path), 1 << 20)
    assert c.put(1, 0, blk(1, 0)) is True  # never missed, but nothing must go for it
    assert c.get(1, 0) == blk(1, 0)
    c.close()


def fill_up(c: DataCache, table: int = 99) -> int:
    """Fill ``c`` to capacity with blocks of ``table``; return how many went in."""
    n = 0
    while c.put(table, n, blk(table, n), if_room=True):
        n += 1
    return n


def test_second_hit_admission(tmp_path):
    c = DataCache(str(tmp_path), 1 << 20)
    assert fill_up(c) > 0  # from now on, admitting means evicting: admission applies
    data = blk(1, 0)
    assert c.get(1, 0) is None
    assert c.put(1, 0, data) is False      # first miss: remembered, not admitted
    assert c.get(1, 0) is None
    assert c.put(1, 0, data) is True       # second miss: admitted
    assert c.get(1, 0) == data and c.get(1, 0) == data
    assert c.hotness(1, 0) == 2 and c.hotness(1, 1) == 0
    fill_up(c, 98)  # admitting evicted a segment: full again
    assert c.put(2, 0, blk(2, 0)) is False  # never missed
    assert c.put(2, 0, blk(2, 0), force=True) is True
    assert c.hotness(2, 0) == 0  # hotness counts reads only
    s = c.stats()
    assert (s["hits"], s["misses"], s["hit_ratio"]) == (2, 2, 0.5)
    assert s["capacity"] == 1 << 20 and s["bytes"] <= 1 << 20
    c.close()


def test_always_admission(tmp_path):
    c = DataCache(str(tmp_path), 1 << 20, admission="always")
    assert c.put(3, 9, b"x" * 10) and c.get(3, 9) == b"x" * 10
    assert c.cached_blocks(3) == [9] and c.cached_blocks(4) == []
    c.close()


def test_one_off_scan_does_not_evict_hot_blocks(tmp_path):
    cap = 256 << 10
    c = DataCache(str(tmp_path), cap)
    hot = range(20)
    for b in hot:  # read twice: admitted
        for _ in range(2):
            if c.get(1, b) is None:
                c.put(1, b, blk(1, b, size=2000))
    assert c.cached_blocks(1) == list(hot)
    # A scan over 10x the capacity, each block read once (get miss, fetch, put): it may
    # take the free room, never the hot blocks' place.
    for b in range(1300):
        assert c.get(2, b) is None
        c.put(2, b, blk(2, b, size=2000))
    assert c.cached_blocks(1) == list(hot)
    assert len(c.cached_blocks(2)) < 128  # at most the room that was free
    assert all(c.get(1, b) == blk(1, b, size=2000) for b in hot)
    c.close()


def test_eviction_keeps_frequently_hit_blocks(tmp_path):
    # With admission "always", a stream of one-off blocks flows through the cache, but
    # blocks that keep getting hits survive every reclaim.
    d = str(tmp_path)
    cap = 256 << 10
    c = DataCache(d, cap, admission="always")
    hot = list(range(10))
    fill(c, 1, range(10))
    for b in range(2000):  # ~16x the capacity of 2 KB blocks
        assert c.put(2, b, blk(2, b, size=2000))
        if b % 20 == 0:
            for h in hot:
                assert c.get(1, h) == blk(1, h)
        assert disk_usage(d) <= cap
    assert c.cached_blocks(1) == hot
    s = c.stats()
    assert s["evicted"] > 1500 and s["relocated"] > 0 and s["disk_bytes"] <= cap
    assert len(c.cached_blocks(2)) < 130  # the stream itself did not stay
    c.close()


def test_a_reclaim_moves_many_small_records_at_once(tmp_path):
    # Key-cache-sized records (100 bytes): a reclaimed segment holds dozens, all hit, so
    # its survivors are written back in one batch that spills into a new segment. Every
    # moved record reads back intact, here and after a reopen by INDEX and by scan.
    d = str(tmp_path)
    cap = 8 * 4096  # segments of 4 KiB (capacity / 8)
    c = DataCache(d, cap, admission="always")
    hot = range(40)
    for b in hot:
        assert c.put(1, b, blk(1, b, size=100))
        assert c.get(1, b) == blk(1, b, size=100)  # a credit: it survives a reclaim
    for b in range(300):  # a stream of cold records forces reclaims of the hot ones
        assert c.put(2, b, blk(2, b, size=100))
        if b % 50 == 0:
            for h in hot:
                assert c.get(1, h) == blk(1, h, size=100)
        assert disk_usage(d) <= cap
    s = c.stats()
    assert s["relocated"] >= len(hot) and s["evicted"] > 0
    assert c.cached_blocks(1) == list(hot)
    c.close()
    for scan in (False, True):
        if scan:
            os.unlink(os.path.join(d, "INDEX"))
        c = DataCache(d, cap, admission="always")
        assert c.opened_from == ("scan" if scan else "index")
        assert [c.get(1, h) for h in hot] == [blk(1, h, size=100) for h in hot]
        c.close()


def test_capacity_is_respected(tmp_path):
    d = str(tmp_path)
    cap = 300_000
    c = DataCache(d, cap, admission="always", segment_size=40_000)
    for b in range(600):
        c.put(1, b, blk(1, b))
        assert c.stats()["disk_bytes"] <= cap
        assert disk_usage(d) <= cap
    files_total = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    c.close()
    # INDEX is the only extra file; everything together stays within capacity + a segment.
    assert files_total <= cap + c.segment_size
    c = DataCache(d, 100_000)  # a smaller capacity at reopen is enforced at once
    assert disk_usage(d) <= 100_000
    for b in c.cached_blocks(1):
        assert c.get(1, b) == blk(1, b)
    c.close()


def test_oversized_and_invalid(tmp_path):
    c = DataCache(str(tmp_path), 64 << 10, admission="always")
    assert c.segment_size == 8 << 10
    assert c.put(1, 1, b"x" * (8 << 10)) is False  # bigger than a segment: never cached
    assert c.put(1, 2, b"y" * 100)
    assert c.put(1, 2, b"z" * (9 << 10)) is False  # a too-big replacement drops the old
    assert c.get(1, 2) is None
    with pytest.raises(InvalidArgumentError):
        c.put(1, 0xFFFFFFFF, b"x")
    with pytest.raises(InvalidArgumentError):
        c.put(-1, 0, b"x")
    with pytest.raises(LockedError):
        DataCache(str(tmp_path), 1 << 20)
    c.close()
    c.close()  # idempotent
    with pytest.raises(ClosedError):
        c.get(1, 2)
    with pytest.raises(ClosedError):
        c.put(1, 2, b"x")
    with pytest.raises(InvalidArgumentError):
        DataCache(str(tmp_path), 1 << 20, admission="lru")
    with pytest.raises(InvalidArgumentError):
        DataCache(str(tmp_path), 0)


# -- persistence -----------------------------------------------------------------------

def test_persists_across_close_and_reopen(tmp_path):
    d = str(tmp_path)
    c = DataCache(d, 1 << 20, admission="always")
    fill(c, 5, range(50))
    for _ in range(3):
        c.get(5, 7)
    c.close()
    c = DataCache(d, 1 << 20, admission="always")
    assert c.opened_from == "index"
    assert c.cached_blocks(5) == list(range(50)) and c.hotness(5, 7) == 3
    assert all(c.get(5, b) == blk(5, b) for b in range(50))
    c.put(6, 0, b"new")
    c._abandon()  # killed after a change: INDEX no longer matches, the segments are scanned
    c = DataCache(d, 1 << 20, admission="always")
    assert c.opened_from == "scan"
    assert c.cached_blocks(5) == list(range(50)) and c.get(6, 0) == b"new"
    c.close()


def test_drop_table_survives_reopen_by_index_and_by_scan(tmp_path):
    d = str(tmp_path)
    c = DataCache(d, 1 << 20, admission="always")
    fill(c, 1, range(10))
    fill(c, 2, range(10))
    c.drop_table(1)
    c.drop_table(77)  # unknown: nothing to do
    assert c.cached_blocks(1) == [] and c.get(1, 3) is None
    assert c.stats()["entries"] == 10
    c.close()
    c = DataCache(d, 1 << 20, admission="always")
    assert c.cached_blocks(1) == [] and c.cached_blocks(2) == list(range(10))
    c._abandon()
    os.unlink(os.path.join(d, "INDEX"))
    c = DataCache(d, 1 << 20, admission="always")
    assert c.opened_from == "scan"
    assert c.cached_blocks(1) == [] and c.cached_blocks(2) == list(range(10))
    c.close()


def test_replacement_wins_after_reopen(tmp_path):
    d = str(tmp_path)
    c = DataCache(d, 1 << 20, admission="always")
    c.put(1, 1, blk(1, 1, 0))
    c.put(1, 1, blk(1, 1, 1))
    assert c.get(1, 1) == blk(1, 1, 1)
    c._abandon()
    c = DataCache(d, 1 << 20, admission="always")
    assert c.get(1, 1) == blk(1, 1, 1) and c.stats()["entries"] == 1
    c.close()


# -- crash safety ----------------------------------------------------------------------

def check_never_wrong(c: DataCache, expected: dict[tuple[int, int], bytes]) -> int:
    found = 0
    for (t, b), data in expected.items():
        got = c.get(t, b)
        assert got is None or got == data, (t, b)
        found += got is not None
    return found


def test_torn_segment_tail(tmp_path):
    d = str(tmp_path / "c")
    c = DataCache(d, 1 << 20, admission="always")
    expected = {(1, b): blk(1, b) for b in range(12)}
    for (t, b), data in expected.items():
        c.put(t, b, data)
    c._abandon()
    pristine = open(seg_files(d)[0], "rb").read()
    rng = random.Random(3)
    for cut in sorted(rng.sample(range(len(pristine)), 25)):
        work = str(tmp_path / f"cut{cut}")
        shutil.copytree(d, work)
        os.truncate(seg_files(work)[0], cut)
        c = DataCache(work, 1 << 20, admission="always")
        assert c.opened_from == "scan"
        found = check_never_wrong(c, expected)
        # Every record that ends before the cut is still there.
        assert found == sum(1 for end in record_ends(pristine) if end <= cut)
        c.put(9, 9, b"after")  # the cache keeps working after a torn tail
        assert c.get(9, 9) == b"after"
        c.close()


def record_ends(seg: bytes) -> list[int]:
    ends, pos = [], 0
    while pos < len(seg):
        n = int.from_bytes(seg[pos + 12:pos + 16], "little")
        pos += RECORD_HEADER_SIZE + n
        ends.append(pos)
    return ends


@pytest.mark.parametrize("with_index", [True, False])
def test_flipped_bytes_are_never_served(tmp_path, with_index):
    d = str(tmp_path / "c")
    c = DataCache(d, 1 << 20, admission="always")
    expected = {(2, b): blk(2, b) for b in range(10)}
    for (t, b), data in expected.items():
        c.put(t, b, data)
    c.close()
    pristine = open(seg_files(d)[0], "rb").read()
    starts = [0] + record_ends(pristine)[:-1]
    rng = random.Random(11)
    positions = rng.sample(range(len(pristine)), 20) + [s + 13 for s in starts[:3]]
    for i, pos in enumerate(positions):
        work = str(tmp_path / f"flip{i}")
        shutil.copytree(d, work)
        if not with_index:
            os.unlink(os.path.join(work, "INDEX"))
        with open(seg_files(work)[0], "r+b") as f:
            f.seek(pos)
            f.write(bytes([pristine[pos] ^ 0x10]))
        c = DataCache(work, 1 << 20, admission="always")
        assert c.opened_from == ("index" if with_index else "scan")
        damaged = max(r for r, s in enumerate(starts) if s <= pos)
        in_key_fields = pos - starts[damaged] < 16  # table, block or length
        found = check_never_wrong(c, expected)
        if not with_index:
            # The scan trusts nothing from the damaged record on.
            assert found == damaged and c.stats()["corrupt"] == 1
        elif in_key_fields:
            # The index knows the right name and length; the data is intact and served.
            assert found == len(expected)
        else:
            assert found == len(expected) - 1 and c.stats()["corrupt"] == 1
            assert check_never_wrong(c, expected) == found  # and it stays dropped
        c.close()


_CHILD = r"""
import random, sys
sys.path.insert(0, {root!r})
from rocksmash.data_cache import DataCache
def blk(t, b):
    rng = random.Random(f"{{t}}/{{b}}/0")
    return rng.randbytes(rng.randrange(100, 3000))
c = DataCache({d!r}, 200_000, admission="always", segment_size=30_000)
print("ready", flush=True)
i = 0
while True:
    t, b = i % 7, (i * 13) % 500
    c.put(t, b, blk(t, b))
    c.get(t, (b * 3) % 500)
    if i % 97 == 0:
        c.drop_table((i // 97) % 7)
    i += 1
"""


def test_kill_9_at_random_points(tmp_path):
    d = str(tmp_path / "c")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rng = random.Random(5)
    for _ in range(4):
        p = subprocess.Popen([sys.executable, "-c", _CHILD.format(root=root, d=d)],
                             stdout=subprocess.PIPE)
        assert p.stdout is not None and p.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.05, 0.4))
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
        c = DataCache(d, 200_000, admission="always", segment_size=30_000)
        assert c.opened_from == "scan"
        found = 0
        for t in range(7):
            for b in c.cached_blocks(t):
                assert c.get(t, b) == blk(t, b)
                found += 1
        assert found > 0 and c.stats()["corrupt"] == 0
        assert disk_usage(d) <= 200_000
        c.close()


# -- threads ---------------------------------------------------------------------------

def test_threads_smoke(tmp_path):
    c = DataCache(str(tmp_path), 200_000, admission="always", segment_size=25_000)
    errors: list[BaseException] = []
    stop = time.monotonic() + 1.5

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while time.monotonic() < stop:
                t, b = rng.randrange(4), rng.randrange(60)
                op = rng.random()
                if op < 0.5:
                    got = c.get(t, b)
                    assert got is None or got == blk(t, b)
                elif op < 0.98:
                    c.put(t, b, blk(t, b), wait=op < 0.75)
                else:
                    c.drop_table(t)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    s = c.stats()
    assert s["disk_bytes"] <= 200_000 and s["corrupt"] == 0 and s["hits"] > 0
    assert s["entries"] == sum(len(c.cached_blocks(t)) for t in range(4))
    c.close()


def test_readers_do_not_wait_for_an_admission_in_progress(tmp_path, monkeypatch):
    # An admission's reclaim is stuck in its pwrite (fault-injected: it blocks until
    # released). Meanwhile other threads' hits, misses and best-effort puts must all
    # return, and the hits must serve the right bytes of the very blocks being moved.
    import rocksmash.data_cache as data_cache

    d = str(tmp_path)
    c = DataCache(d, 64 << 10, admission="always")  # segments of 8 KiB: 4 blocks each
    hot = list(range(32))
    for b in hot:  # full, and a credit each: a reclaim re-appends them (its pwrite)
        assert c.put(1, b, blk(1, b, size=2000), if_room=True)
        assert c.get(1, b) == blk(1, b, size=2000)
    assert not c.put(1, 32, blk(1, 32, size=2000), if_room=True)
    entered, release = threading.Event(), threading.Event()
    real = data_cache._pwrite_all

    def stuck_pwrite(fd, data, off):
        entered.set()
        if not release.wait(120):
            raise OSError("never released")
        real(fd, data, off)

    monkeypatch.setattr(data_cache, "_pwrite_all", stuck_pwrite)
    writer = threading.Thread(target=c.put, args=(2, 0, blk(2, 0)))
    writer.start()
    try:
        assert entered.wait(60), "the admission never reached its reclaim's pwrite"
        answers: list[object] = []

        def reader() -> None:
            answers.extend(c.get(1, b) == blk(1, b, size=2000) for b in hot)  # mid-move
            answers.append(c.get(3, 0) is None)                    # a miss
            answers.append(c.put(3, 0, blk(3, 0), wait=False) is False)  # skipped

        r = threading.Thread(target=reader)
        r.start()
        r.join(60)
        stuck = r.is_alive()
        assert not stuck, "a reader waited for the admission in progress"
        assert not release.is_set() and writer.is_alive()  # it really was in progress
        assert all(answers) and len(answers) == len(hot) + 2
        assert c.stats()["skipped"] == 1
    finally:
        release.set()
        writer.join(60)
    assert not writer.is_alive()
    monkeypatch.setattr(data_cache, "_pwrite_all", real)
    s = c.stats()
    assert s["relocated"] > 0 and s["corrupt"] == 0
    for b in c.cached_blocks(1):  # the moved blocks read back from their new place
        assert c.get(1, b) == blk(1, b, size=2000)
    assert c.get(2, 0) == blk(2, 0)
    c.close()
    c = DataCache(d, 64 << 10, admission="always")
    assert c.opened_from == "index" and c.get(2, 0) == blk(2, 0)
    c.close()


# -- the model test --------------------------------------------------------------------

class CacheModel(RuleBasedStateMachine):
    """Random puts/gets/drops/reopens/crashes against a dict of the latest bytes.

    Small enough (about four 2 KB blocks fit) that runs admit, hit, relocate and evict.
    """

    admission = "second-hit"
    capacity = 10_000

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="dcmodel-")
        self.cache = self._open()
        self.model: dict[tuple[int, int], bytes] = {}
        self.version = 0

    def _open(self) -> DataCache:
        return DataCache(self.dir, self.capacity, admission=self.admission,
                         segment_size=4096)

    keys = st.tuples(st.integers(0, 2), st.integers(0, 7))
    sizes = st.one_of(st.integers(0, 40), st.integers(1000, 2500))

    def _new_bytes(self, key: tuple[int, int], size: int) -> bytes:
        self.version += 1
        data = blk(key[0], key[1], self.version, size)
        self.model[key] = data  # the truth the engine holds, admitted or not
        return data

    @rule(key=keys, size=sizes, force=st.booleans())
    def put(self, key, size, force):
        admitted = self.cache.put(key[0], key[1], self._new_bytes(key, size), force=force)
        assert admitted or not force
        if not admitted:
            assert self.cache.get(*key) is None

    @rule(key=keys, size=sizes)
    def read_through(self, key, size):
        # What the engine does: look up, and on a miss fetch and offer the block.
        got = self.cache.get(*key)
        if got is None:
            data = self.model.get(key) or self._new_bytes(key, size)
            self.cache.put(key[0], key[1], data)
        else:
            assert got == self.model.get(key)

    @rule(key=keys)
    def get(self, key):
        got = self.cache.get(*key)
        assert got is None or got == self.model.get(key)

    @rule(table=st.integers(0, 2))
    def drop_table(self, table):
        self.cache.drop_table(table)
        for key in [k for k in self.model if k[0] == table]:
            del self.model[key]
        assert self.cache.cached_blocks(table) == []

    @rule()
    def reopen(self):
        self.cache.close()
        self.cache = self._open()

    @rule()
    def crash(self):
        self.cache._abandon()
        self.cache = self._open()

    @invariant()
    def never_wrong_and_bounded(self):
        s = self.cache.stats()
        assert s["disk_bytes"] <= self.capacity
        assert disk_usage(self.dir) <= self.capacity
        for t in range(3):
            for b in self.cache.cached_blocks(t):
                assert (t, b) in self.model
        assert s["entries"] == sum(len(self.cache.cached_blocks(t)) for t in range(3))

    def teardown(self) -> None:
        self.cache.close()
        # Every cached block still reads back as the latest bytes.
        c = self._open()
        for t in range(3):
            for b in c.cached_blocks(t):
                assert c.get(t, b) == self.model[(t, b)]
        c.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class CacheModelAlways(CacheModel):
    admission = "always"


_MODEL_SETTINGS = settings(max_examples=40, stateful_step_count=40, deadline=None)
TestCacheModel = CacheModel.TestCase
TestCacheModel.settings = _MODEL_SETTINGS
TestCacheModelAlways = CacheModelAlways.TestCase
TestCacheModelAlways.settings = _MODEL_SETTINGS
