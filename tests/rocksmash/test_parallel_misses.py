"""Cloud misses overlap: readers in many threads, a multi_get and a scan each have
several object-store GETs in flight at once, and threads that miss one fetch window
share one GET.

The object store is cloudtier's FaultInjectingStore with latency injection, whose sleep
is replaced by a gate: a GET entering it counts as in flight and is held until the
expected number of GETs are in flight together (or a deadline passes). The tests assert
the peak count, never a duration, so a loaded machine can only make them slower.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Callable

import pytest

import rocksmash
import rocksmash.table
from cloudtier import FaultConfig, FaultInjectingStore, MemoryStore

#: How long the gate holds GETs waiting for the others: generous for a loaded machine
#: (it ends early once enough are in flight; only a failing run waits it out).
HOLD_S = 20.0

# One cloud table with small blocks, nothing cached after the compaction.
OPTS = dict(local_budget=0, memtable_size="64KiB", block_size=512, target_file_size="4MiB",
            cloud_target_file_size="4MiB", compaction_aware_cache=False, wal_shipping="off",
            fencing_check_interval=3600)  # no request but the reads


class Gate:
    """FaultInjectingStore's ``sleep``: counts the calls in flight (and per thread name),
    and holds each until ``release()`` is true or HOLD_S after the first call."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.release: Callable[[], bool] | None = None  # None: pass straight through
        self.inflight = self.peak = 0
        self.by_thread: dict[str, int] = {}
        self.until = 0.0

    def arm(self, release: Callable[[], bool]) -> None:
        with self.cond:
            self.release, self.peak, self.until = release, 0, 0.0
            self.by_thread.clear()

    def __call__(self, seconds: float) -> None:
        with self.cond:
            if self.release is None:
                return
            name = threading.current_thread().name.rsplit("_", 1)[0]  # pool threads: name_N
            self.by_thread[name] = self.by_thread.get(name, 0) + 1
            self.inflight += 1
            self.peak = max(self.peak, self.inflight)
            if not self.until:
                self.until = time.monotonic() + HOLD_S
            self.cond.notify_all()
            while not self.release() and time.monotonic() < self.until:
                self.cond.wait(0.05)
            self.inflight -= 1


@pytest.fixture
def gated(tmp_path):
    """(open db, gate, keys): 6,000 keys in one cloud table, block and DataCache cold."""
    gate = Gate()
    store = FaultInjectingStore(MemoryStore(uuid.uuid4().hex), FaultConfig(latency_s=0.2),
                                sleep=gate)
    keys = [b"key%06d" % i for i in range(6000)]
    db = rocksmash.open(tmp_path / "db", object_store=store, cloud_fetch_size=0, **OPTS)
    try:
        for i in range(0, len(keys), 500):
            db.update({k: k * 4 for k in keys[i:i + 500]})
        db.compact_range()
        st = db.stats()["cloud"]
        assert st["cloud_tables"] == 1 and st["local_table_bytes"] == 0
        yield db, gate, keys
    finally:
        db.close()


def spread(keys: list[bytes], n: int) -> list[bytes]:
    """``n`` keys far apart (one 512-byte block holds about a dozen)."""
    return [keys[i * (len(keys) // n)] for i in range(n)]


def test_readers_in_eight_threads_have_eight_gets_in_flight(gated):
    db, gate, keys = gated
    wanted = spread(keys, 8)
    gate.arm(lambda: gate.peak >= 8)
    got: dict[bytes, bytes | None] = {}

    def read(k: bytes) -> None:
        got[k] = db.get(k)

    threads = [threading.Thread(target=read, args=(k,)) for k in wanted]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HOLD_S * 3)
    assert got == {k: k * 4 for k in wanted}
    assert gate.peak == 8  # no lock serializes them while a GET is out


def test_multi_get_makes_its_gets_at_once(gated):
    db, gate, keys = gated
    wanted = spread(keys, 8) + [b"absent"]
    gate.arm(lambda: gate.peak >= 8)
    assert db.multi_get(wanted) == [k * 4 for k in wanted[:-1]] + [None]
    assert gate.peak == 8
    assert set(gate.by_thread) == {"rocksmash-fetch"}  # none left for the serial reads


def test_threads_missing_one_block_share_one_get(gated, monkeypatch):
    db, gate, keys = gated
    waiting = []

    class CountingEvent(threading.Event):
        def wait(self, timeout=None):
            waiting.append(1)
            return super().wait(timeout)

    monkeypatch.setattr(rocksmash.table, "Event", CountingEvent)
    hot = keys[3000]
    gate.arm(lambda: len(waiting) >= 5)  # the GET is out until the 5 others wait for it
    results = []
    threads = [threading.Thread(target=lambda: results.append(db.get(hot))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HOLD_S * 3)
    assert results == [hot * 4] * 6
    assert sum(gate.by_thread.values()) == 1 and len(waiting) == 5


def test_a_scan_fetches_its_next_window_ahead(tmp_path):
    gate = Gate()
    store = FaultInjectingStore(MemoryStore(uuid.uuid4().hex), FaultConfig(latency_s=0.2),
                                sleep=gate)
    keys = [b"key%06d" % i for i in range(6000)]
    with rocksmash.open(tmp_path / "db", object_store=store, cloud_fetch_size="8KiB",
                        **OPTS) as db:
        for i in range(0, len(keys), 500):
            db.update({k: k * 4 for k in keys[i:i + 500]})
        db.compact_range()
        assert db.stats()["cloud"]["cloud_tables"] == 1
        gate.arm(lambda: True)  # count, never hold
        assert [k for k, _ in db.scan(keys[1000], keys[4000])] == keys[1000:4000]
        # The scan made the first window's GET; every later window was already being
        # fetched by a background thread when the scan reached it.
        assert gate.by_thread.get("MainThread") == 1
        assert gate.by_thread.get("rocksmash-fetch", 0) >= 2
        assert gate.peak <= 2


def test_no_fetch_threads_still_reads_everything(tmp_path):
    with rocksmash.open(tmp_path / "db", object_store=f"memory://{uuid.uuid4().hex}/db",
                        cloud_fetch_threads=0, cloud_fetch_size="8KiB", **OPTS) as db:
        keys = [b"key%06d" % i for i in range(3000)]
        db.update({k: k for k in keys})
        db.compact_range()
        assert db.multi_get(keys[::100]) == keys[::100]
        assert [k for k, _ in db.scan(keys[10], keys[2000])] == keys[10:2000]


def test_a_prefetch_cancelled_before_it_ran_wakes_its_waiters(gated):
    """(The cloud tier cancels queued fetches when it closes.)"""
    from concurrent.futures import Future

    db, gate, keys = gated
    t = next(f.table for _, f in db._version.files())
    queued: list[Future] = []
    t.prefetch = lambda *args: queued.append(Future()) or queued[-1]  # never runs them
    assert t.prefetch_block(3) is queued[0]
    (done,) = t.loading.values()
    assert not done.is_set()
    queued[0].cancel()
    assert done.is_set() and not t.loading


def test_nothing_waits_behind_one_slow_get(gated):
    """One reader's GET is held; meanwhile a block-cache hit, another cold block and a
    multi_get of more cold blocks are all answered: no lock, pool or queue is held
    across that GET. (If any of them waited for it, the slow GET would be released by the
    gate's deadline first, and ``gate.inflight`` would be 0 when they return.)"""
    db, gate, keys = gated
    warm, slow_key, cold = keys[100], keys[3000], keys[5000]
    assert db.get(warm) == warm * 4  # (the gate is not armed yet: straight through)
    released = threading.Event()

    def release() -> bool:
        return threading.current_thread().name != "slow" or released.is_set()

    gate.arm(release)
    got: list[bytes | None] = []
    slow = threading.Thread(target=lambda: got.append(db.get(slow_key)), name="slow")
    slow.start()
    try:
        deadline = time.monotonic() + HOLD_S
        while gate.inflight < 1:
            assert time.monotonic() < deadline, "the slow GET never started"
            time.sleep(0.01)
        assert db.get(warm) == warm * 4
        assert db.get(cold) == cold * 4
        others = [keys[500], keys[1500], keys[2500], keys[4500]]  # blocks of their own
        assert db.multi_get(others) == [k * 4 for k in others]
        assert gate.inflight == 1 and not got  # the slow GET is still out
    finally:
        released.set()
        slow.join(HOLD_S * 3)
    assert got == [slow_key * 4]
