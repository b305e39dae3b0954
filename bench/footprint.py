"""``python -m bench footprint``: what small databases cost a process.

Times open + put + close of a new database, then opens ``--dbs`` databases that each take
``--puts`` writes and a flush, and reports the time and the growth of the whole process
tree's RSS (worker processes included), per database.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Sequence

from bench.metrics import tree_memory


def _tree_rss() -> int:
    return tree_memory(os.getpid())[0]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench footprint", description=__doc__)
    p.add_argument("--dbs", type=int, default=5, help="databases to open (default 5)")
    p.add_argument("--puts", type=int, default=2000, help="writes per database (default 2000)")
    args = p.parse_args(argv)
    if args.dbs < 1 or args.puts < 1:
        p.error("--dbs and --puts must be >= 1")
    import rocksmash

    with tempfile.TemporaryDirectory(prefix="bench-footprint-") as d:
        t = time.perf_counter()
        with rocksmash.open(os.path.join(d, "small")) as db:
            db.put(b"k", b"v")
        print(f"open + put + close of a new database: {time.perf_counter() - t:.3f} s")
        base = _tree_rss()
        dbs = []
        t = time.perf_counter()
        try:
            for i in range(args.dbs):
                db = rocksmash.open(os.path.join(d, f"db{i}"), memtable_size="64KiB")
                dbs.append(db)
                for j in range(args.puts):
                    db.put(b"%08d" % j, b"x" * 100)
                db.flush()
            took = time.perf_counter() - t
            grown = _tree_rss() - base
        finally:
            for db in dbs:
                db.close()
    print(f"{args.dbs} databases, {args.puts} puts and a flush each: {took:.2f} s; "
          f"process tree RSS +{grown / 2**20:.1f} MiB ({grown / args.dbs / 2**20:.1f} MiB "
          f"per database)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
