"""A worker process that stops answering (SIGSTOP here; a hung disk would look the same)
must not hang the database: ``flush()`` fails after ``stall_timeout`` with
UnavailableError, ``close()`` kills the stuck job's process after ``stall_timeout`` and
returns, and every acknowledged write is there at the next open (the WAL has it)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

import rocksmash
from rocksmash import worker


def test_a_stopped_worker_fails_flush_in_stall_timeout_and_close_still_returns(tmp_path):
    pool = worker.shared_pool()
    idle_exit = pool.idle_exit
    pool.idle_exit = 3600.0  # the reaper must not replace the stopped worker meanwhile
    stopped: list[int] = []
    try:
        db = rocksmash.open(tmp_path / "db", stall_timeout=2)
        db.put(b"k1", b"v1")
        db.flush()  # a worker process exists now, idle
        stopped = pool.pids
        assert stopped
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        db.put(b"k2", b"v2")
        with pytest.raises(rocksmash.UnavailableError, match="stall_timeout"):
            db.flush()
        closer = threading.Thread(target=db.close)
        closer.start()
        closer.join(120)
        assert not closer.is_alive(), "close() hung on the stopped worker"
        assert all(_gone(pid) for pid in stopped), "close() left the stuck worker running"
    finally:
        for pid in stopped:  # if it still lives, let it go on
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        pool.idle_exit = idle_exit
        with pool._cv:
            pool._cv.notify_all()  # the reaper waits with the old interval: wake it
    with rocksmash.open(tmp_path / "db") as db:
        assert db.get(b"k1") == b"v1" and db.get(b"k2") == b"v2"
        db.put(b"k3", b"v3")
        db.flush()  # the pool starts a new worker for the next job
        assert db.get(b"k3") == b"v3"


def _gone(pid: int) -> bool:
    """The process has exited (reaped by its Popen or a zombie of it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
