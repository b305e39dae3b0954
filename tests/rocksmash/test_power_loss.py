"""Power loss: the machine dies, and every byte not yet fsynced is gone.

A child process runs a seeded random workload (puts, deletes, batches, some with
``sync=True``) and logs every fsync it makes (powerloss_child.py); it is killed with
SIGKILL at a random point. Then "the power fails": every file is cut back to the length
its last fsync made durable, and every directory entry that no directory fsync covered is
removed. Reopening must give the state after some prefix of the acknowledged writes
that includes every write acknowledged with ``sync=True`` (and everything before it):
nothing synced lost, nothing corrupt, nothing from the future.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import pytest

import rocksmash

from .powerloss_child import ops

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "powerloss_child.py")
ROUNDS = int(os.environ.get("ROCKSMASH_POWERLOSS_ROUNDS", "6"))


def lose_power(db_dir: str, log: str) -> None:
    """Cut files to their durable length; drop entries no directory fsync covered."""
    synced: dict[int, int] = {}  # inode -> durable length
    listed: dict[str, set[str]] = {}
    with open(log) as f:
        for line in f:
            kind, where, what = json.loads(line)
            if kind == "F":
                synced[where] = what
            else:
                listed[where] = set(what)
    root = os.path.realpath(db_dir)
    for name in os.listdir(root):
        p = os.path.join(root, name)
        if not os.path.isfile(p):
            continue
        if name not in listed.get(root, set()):
            os.unlink(p)  # its creation (or rename) never reached the disk
            continue
        with open(p, "r+b") as fh:
            fh.truncate(min(synced.get(os.stat(p).st_ino, 0), os.path.getsize(p)))


def apply(state: dict, op) -> None:
    kind, key, value, _ = op
    if kind == "put":
        state[key] = value
    elif kind == "delete":
        state.pop(key, None)
    elif kind == "range":
        for k in [k for k in state if key <= k < value]:
            del state[k]
    else:
        state[key] = value
        state[key + b"x"] = value


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(ROUNDS))
def test_power_loss_keeps_every_synced_write(tmp_path, round_):
    seed = 1000 + round_
    db_dir, log = str(tmp_path / "db"), str(tmp_path / "sync.log")
    proc = subprocess.Popen([sys.executable, CHILD, db_dir, log, str(seed)],
                            stdout=subprocess.PIPE, text=True)
    goal = random.Random(seed).randrange(200, 3000)
    acked = -1
    deadline = time.monotonic() + 60
    while acked < goal and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        acked = int(line)
    proc.kill()
    rest = proc.stdout.read().split()  # acknowledged before the kill landed
    proc.wait()
    if rest:
        acked = int(rest[-1])
    assert acked >= 200, "the child acknowledged too little before the deadline"
    lose_power(db_dir, log)

    workload = ops(seed)
    issued = [next(workload) for _ in range(acked + 2)]  # one more may have been applied
    last_sync = max((i for i, op in enumerate(issued[:acked + 1]) if op[3]), default=-1)
    with rocksmash.open(db_dir, background_processes=False) as db:
        got = dict(db.scan())
    state: dict = {}
    for op in issued[:last_sync + 1]:
        apply(state, op)
    # The recovered state is the state after some prefix that ends at or after the last
    # synced acknowledgement (and no later than one write past the last acknowledgement).
    for i in range(last_sync + 1, len(issued) + 1):
        if got == state:
            return
        if i < len(issued):
            apply(state, issued[i])
    raise AssertionError(f"recovered state is no prefix >= the last synced write "
                         f"(#{last_sync}) of the {acked + 1} acknowledged writes")
