"""Crash test in the spirit of RocksDB's db_crashtest: a child writes and reports each
acknowledged write; we SIGKILL it at random moments (mid-flush, mid-compaction, mid-
write), reopen, and demand every acknowledged write and nothing corrupt. Acknowledged
writes must survive whether or not they were synced: a process crash loses nothing the
kernel accepted. Bounded: ROUNDS rounds or DEADLINE seconds, whichever comes first."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time

import pytest

import rocksmash

from .crash_child import OPTIONS, ops

ROUNDS = int(os.environ.get("ROCKSMASH_CRASH_ROUNDS", "30"))
DEADLINE = float(os.environ.get("ROCKSMASH_CRASH_SECONDS", "75"))
HERE = os.path.dirname(os.path.abspath(__file__))


def apply(model: dict, op) -> set[bytes]:
    """Apply ``op`` to the model; return the keys it touches."""
    if op[0] == "put":
        model[op[1]] = op[2]
        return {op[1]}
    if op[0] == "del":
        model.pop(op[1], None)
        return {op[1]}
    if op[0] == "range":
        gone = {k for k in model if op[1] <= k < op[2]}
        for k in gone:
            del model[k]
        return gone
    for k, v in op[1]:
        if v is None:
            model.pop(k, None)
        else:
            model[k] = v
    return {k for k, _ in op[1]}


def run_child(path: str, seed: int, kill_after: float) -> int:
    """Run the writer for ``kill_after`` seconds of writing, SIGKILL it; return the count
    of acknowledged operations."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(HERE)))
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "crash_child.py"), path,
                             str(seed)], stdout=subprocess.PIPE, env=env)
    acked = -1
    buf = b""
    started = None
    try:
        while True:
            if started is not None and time.monotonic() - started >= kill_after:
                break
            ready, _, _ = select.select([proc.stdout], [], [], 0.05)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    raise AssertionError(f"writer exited early with {proc.wait()}")
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if line == b"ready":
                        started = time.monotonic()
                    else:
                        acked = int(line)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # Lines written before the kill but not yet read are acknowledged writes too.
    rest = buf + proc.stdout.read()
    for line in rest.split(b"\n"):
        if line.strip().isdigit():
            acked = int(line)
    proc.stdout.close()
    return acked + 1


def open_retrying(path: str) -> rocksmash.DB:
    # A worker of the killed child holds the lock for an instant until the kernel kills it.
    for _ in range(100):
        try:
            return rocksmash.open(path, **OPTIONS)
        except rocksmash.LockedError:
            time.sleep(0.05)
    return rocksmash.open(path, **OPTIONS)


@pytest.mark.slow
def test_kill9_loses_no_acknowledged_write(tmp_path):
    path = str(tmp_path / "db")
    rng = random.Random(1234)
    model: dict[bytes, bytes] = {}
    start = time.monotonic()
    rounds = 0
    while rounds < ROUNDS and time.monotonic() - start < DEADLINE:
        seed = rounds + 1
        n = run_child(path, seed, kill_after=rng.uniform(0.05, 1.5))
        stream = ops(seed)
        for _ in range(n):
            apply(model, next(stream))
        # The op after the last acknowledged one may or may not have been applied.
        maybe = dict(model)
        uncertain = apply(maybe, next(stream))
        db = open_retrying(path)
        try:
            got = dict(db.scan())
            for key in set(model) | set(got) | uncertain:
                if key in uncertain:
                    assert got.get(key) in (model.get(key), maybe.get(key)), key
                else:
                    assert got.get(key) == model.get(key), (rounds, key)
                    assert db.get(key) == model.get(key)
            model = {k: v for k, v in got.items()}  # adopt the outcome of the in-flight op
        finally:
            db.close()
        rounds += 1
    assert rounds >= 5, "too few crash rounds ran to mean anything"
