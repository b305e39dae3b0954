"""``python -m bench range-delete``: what a live range tombstone costs reads.

Builds two databases with the same ``--keys`` keys (compacted into one level), one of them
with a single range tombstone that covers none of them (so both hold the same live data
and only the read path differs: while a tombstone exists, reads take the path that applies
them). Then alternates short trials on the two, ``--rounds`` times: random gets, and a
scan of a fifth of the keys. Prints the medians and their ratio (tombstone / none).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from typing import Any, Sequence


def _build(path: str, keys: int, tombstone: bool) -> Any:
    import rocksmash

    db = rocksmash.open(path, background_processes=False)
    batch = rocksmash.WriteBatch()
    for i in range(keys):
        batch.put(b"key%08d" % i, b"v" * 100)
        if len(batch) == 1000:
            db.write(batch)
            batch = rocksmash.WriteBatch()
    db.write(batch)
    db.flush()
    db.compact_range()
    if tombstone:
        db.delete_range(b"zzz0", b"zzz1")  # beyond every key: hides nothing
        db.flush()
    return db


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench range-delete", description=__doc__)
    p.add_argument("--keys", type=int, default=100_000, help="keys (default 100000)")
    p.add_argument("--gets", type=int, default=20_000, help="gets per trial (default 20000)")
    p.add_argument("--rounds", type=int, default=15, help="trials of each (default 15)")
    args = p.parse_args(argv)
    if args.keys < 10 or args.gets < 1 or args.rounds < 1:
        p.error("--keys must be >= 10, --gets and --rounds >= 1")
    with tempfile.TemporaryDirectory(prefix="bench-range-") as d:
        dbs = {name: _build(f"{d}/{name}", args.keys, name == "tombstone")
               for name in ("none", "tombstone")}
        rng = random.Random(1)
        keys = [b"key%08d" % rng.randrange(args.keys) for _ in range(args.gets)]
        lo, hi = b"key%08d" % (args.keys * 2 // 5), b"key%08d" % (args.keys * 3 // 5)
        gets: dict[str, list[float]] = {n: [] for n in dbs}
        scans: dict[str, list[float]] = {n: [] for n in dbs}
        try:
            for db in dbs.values():  # warm the block caches
                for k in keys:
                    db.get(k)
            for _ in range(args.rounds):
                for name, db in dbs.items():
                    t = time.perf_counter()
                    for k in keys:
                        db.get(k)
                    gets[name].append(len(keys) / (time.perf_counter() - t))
                    t = time.perf_counter()
                    n = sum(1 for _ in db.scan(lo, hi))
                    scans[name].append(n / (time.perf_counter() - t))
        finally:
            for db in dbs.values():
                db.close()
    for what, d in (("gets/s", gets), ("scanned keys/s", scans)):
        a, b = statistics.median(d["none"]), statistics.median(d["tombstone"])
        print(f"{what}: no tombstone {a:,.0f}; one live tombstone {b:,.0f}; ratio {b / a:.2f}")
    return 0
