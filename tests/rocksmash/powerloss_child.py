"""Child of test_power_loss: runs a seeded workload and records what the disk promised.

Every fsync/fdatasync is wrapped: after the real call, one line is appended to the sync
log (``os.write`` on an O_APPEND descriptor, so the log survives the SIGKILL that ends
this process): ``F <inode> <size>`` for a file (its first ``size`` bytes are durable) and
``D <path> <names...>`` for a directory (those entries are durable). After each write
call returns, ``<index>`` is printed on stdout: the write was acknowledged.

Usage: python powerloss_child.py DB_DIR SYNC_LOG SEED
"""

from __future__ import annotations

import json
import os
import random
import stat
import sys

_real_fsync, _real_fdatasync = os.fsync, os.fdatasync
_log_fd = -1


def _record(fd: int) -> None:
    path = os.readlink(f"/proc/self/fd/{fd}")
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        line = json.dumps(["D", path, sorted(os.listdir(path))])
    else:
        st = os.fstat(fd)
        line = json.dumps(["F", st.st_ino, st.st_size])  # by inode: renames keep it
    os.write(_log_fd, line.encode() + b"\n")


def _fsync(fd: int) -> None:
    _real_fsync(fd)
    _record(fd)


def _fdatasync(fd: int) -> None:
    _real_fdatasync(fd)
    _record(fd)


def ops(seed: int):
    """The workload: (kind, key, value, sync) tuples, the same for a seed every time
    (kind "range": a delete_range from ``key`` to ``value``)."""
    rng = random.Random(seed)
    for i in range(1_000_000):
        key = b"k%04d" % rng.randrange(300)
        r = rng.random()
        sync = rng.random() < 0.2
        if r < 0.75:
            yield ("put", key, b"%d-" % i + bytes([65 + i % 26]) * rng.randrange(1, 200), sync)
        elif r < 0.87:
            yield ("delete", key, None, sync)
        elif r < 0.9:  # delete_range of up to 20 keys; value: the range's end
            yield ("range", key, b"k%04d" % (int(key[1:]) + rng.randrange(1, 20)), sync)
        else:
            yield ("batch", key, b"b%d" % i, sync)


def run(db, op) -> None:
    """Apply one op of :func:`ops` to ``db`` (test_power_loss.apply is the model's)."""
    import rocksmash

    kind, key, value, sync = op
    if kind == "put":
        db.put(key, value, sync=sync)
    elif kind == "delete":
        db.delete(key, sync=sync)
    elif kind == "range":
        db.delete_range(key, value, sync=sync)
    else:
        db.write(rocksmash.WriteBatch().put(key, value).put(key + b"x", value), sync=sync)


def main() -> None:
    global _log_fd
    path, log, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    _log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.fsync, os.fdatasync = _fsync, _fdatasync
    import rocksmash

    db = rocksmash.open(path, background_processes=False, memtable_size="32KiB",
                        l0_compaction_trigger=3, target_file_size="64KiB",
                        level_base_size="256KiB")
    out = os.fdopen(1, "w", buffering=1)
    for i, op in enumerate(ops(seed)):
        run(db, op)
        out.write(f"{i}\n")


if __name__ == "__main__":
    main()
