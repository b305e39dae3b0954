"""The worker pool's order (flushes before compactions) and the Handoff's one-shot bytes."""

from __future__ import annotations

import pickle
import threading
import time

import pytest

from rocksmash.worker import Handoff, WorkerPool

_DEADLINE = 30.0


def _wait_for(cond, what: str) -> None:
    end = time.monotonic() + _DEADLINE
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_an_urgent_call_takes_the_next_free_worker_before_earlier_waiters():
    """With every worker busy, a flush (urgent) that arrives after a compaction gets the
    next free worker first: flushes never queue behind compactions."""
    pool = WorkerPool(1)
    order: list[str] = []
    with pool._cv:
        busy = pool._take(False)  # (no process starts: WorkerProcess is lazy)

    def waiter(name: str, urgent: bool) -> None:
        with pool._cv:
            w = pool._take(urgent)
            order.append(name)
            pool._idle.append(w)
            pool._cv.notify_all()

    compaction = threading.Thread(target=waiter, args=("compaction", False))
    compaction.start()
    _wait_for(lambda: pool._waiting == 1, "the compaction to wait")
    flush = threading.Thread(target=waiter, args=("flush", True))
    flush.start()
    _wait_for(lambda: pool._waiting == 2, "the flush to wait")
    with pool._cv:
        pool._idle.append(busy)
        pool._cv.notify_all()
    flush.join(_DEADLINE)
    compaction.join(_DEADLINE)
    assert order == ["flush", "compaction"]


def test_a_handoff_gives_its_bytes_once_and_lets_go_when_pickled():
    data = b"m" * 1000
    h = Handoff(data)
    buffers: list[pickle.PickleBuffer] = []
    wire = pickle.dumps(h, protocol=5, buffer_callback=buffers.append)
    with pytest.raises(ValueError):
        h.take()  # the sender keeps nothing once pickled
    got = pickle.loads(wire, buffers=[b.raw() for b in buffers])
    assert bytes(got.take()) == data
    with pytest.raises(ValueError):
        got.take()


def test_an_idle_worker_exits_and_the_next_job_starts_another():
    pool = WorkerPool(1, idle_exit=0.2)
    try:
        assert pool.call("loaded_modules", names=["rocksmash.jobs"]) == ["rocksmash.jobs"]
        (first,) = pool.pids
        _wait_for(lambda: pool.pids == [], "the idle worker's process to be stopped")
        assert pool.call("loaded_modules", names=["rocksmash.jobs"]) == ["rocksmash.jobs"]
        assert pool.pids and pool.pids != [first]
    finally:
        pool.idle_exit = 3600.0
        pool.stop()


def test_a_prestarted_worker_runs_the_next_job_and_a_second_prestart_does_nothing():
    pool = WorkerPool(1)
    try:
        assert pool.prestart() is True
        (pid,) = pool.pids  # a process is up before any job asked for one
        assert pool.prestart() is False  # an idle worker has a process already
        assert pool.call("loaded_modules", names=["rocksmash.jobs"]) == ["rocksmash.jobs"]
        assert pool.pids == [pid]  # the job ran on it
    finally:
        pool.stop()


def test_a_prestart_with_every_worker_busy_does_nothing():
    pool = WorkerPool(1)
    with pool._cv:
        busy = pool._take(False)  # (no process starts: WorkerProcess is lazy)
    try:
        assert pool.prestart() is False
        assert pool.pids == []
    finally:
        with pool._cv:
            pool._idle.append(busy)
        pool.stop()


def test_a_prestart_that_cannot_start_a_process_returns_false_and_the_pool_still_works(
        monkeypatch):
    from rocksmash import worker

    pool = WorkerPool(1)
    real = worker.WorkerProcess._start

    def fail(self):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(worker.WorkerProcess, "_start", fail)
    try:
        assert pool.prestart() is False
        assert pool.pids == []
        monkeypatch.setattr(worker.WorkerProcess, "_start", real)
        assert pool.call("loaded_modules", names=["rocksmash.jobs"]) == ["rocksmash.jobs"]
    finally:
        pool.stop()
