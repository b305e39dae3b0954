"""``python -m bench compaction-stall``: how long writes wait while ``compact_range`` runs.

Loads ``--records`` records (``--value-size`` random bytes each, batches of 1,000), flushes, then
calls ``compact_range()`` over everything while one writer thread writes batches of
``--batch`` records at ``--rate`` records a second (0: as fast as it can; a rate the
engine sustains alone shows what the compaction adds, an unbounded one mostly shows the
writer's own backpressure). Prints the compaction's duration, the writes made
during it, the writer's batch latencies (median, 99th percentile, longest) and the
database's ``stall_seconds``. A write waits when the memtables are full and their flush
waits for a worker, or when L0 reaches ``l0_stop_writes_trigger``; past
``stall_timeout`` (60 s) it fails with UnavailableError, which is counted too.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    import rocksmash

    p = argparse.ArgumentParser(prog="python -m bench compaction-stall", description=__doc__)
    p.add_argument("--records", type=int, default=1_000_000, help="records loaded first "
                   "(default 1000000)")
    p.add_argument("--value-size", type=int, default=200, help="bytes per value (default 200)")
    p.add_argument("--batch", type=int, default=100, help="records per write of the writer "
                   "during the compaction (default 100)")
    p.add_argument("--rate", type=int, default=25_000, help="records a second the writer "
                   "aims at (default 25000, about 5 MB/s of 200-byte values; 0: no limit)")
    p.add_argument("--dir", default=None, help="where the database goes (default: a "
                   "temporary directory, removed after)")
    args = p.parse_args(argv)
    if args.records < 1000 or args.value_size < 1 or args.batch < 1 or args.rate < 0:
        p.error("--records must be >= 1000, --value-size and --batch >= 1, --rate >= 0")
    rng = random.Random(1)  # incompressible values, so tables are their real size
    values = [rng.randbytes(args.value_size) for _ in range(1024)]
    with tempfile.TemporaryDirectory(prefix="bench-stall-", dir=args.dir) as d:
        with rocksmash.open(f"{d}/db") as db:
            started = time.monotonic()
            for base in range(0, args.records, 1000):
                db.write(rocksmash.WriteBatch().put_many(
                    (b"user%012d" % i, values[i % 1024])
                    for i in range(base, min(base + 1000, args.records))))
            db.flush()
            print(f"loaded {args.records:,} records in {time.monotonic() - started:.1f} s; "
                  f"{db.stats()['table_bytes'] / 2**20:.0f} MiB of tables")
            stop = threading.Event()
            latencies: list[float] = []
            failures: list[str] = []

            def writer() -> None:
                i = args.records
                began = time.monotonic()
                while not stop.is_set():
                    if args.rate:  # keep to the schedule; a stall is made up afterwards
                        ahead = began + (i - args.records) / args.rate - time.monotonic()
                        if ahead > 0:
                            stop.wait(ahead)
                    batch = rocksmash.WriteBatch().put_many(
                        (b"user%012d" % k, values[k % 1024]) for k in range(i, i + args.batch))
                    t = time.monotonic()
                    try:
                        db.write(batch)
                    except rocksmash.UnavailableError as e:
                        failures.append(str(e))
                    latencies.append(time.monotonic() - t)
                    i += args.batch

            stall_before = db.stats()["stall_seconds"]
            compactions_before = db.stats()["compactions"]
            t = threading.Thread(target=writer, daemon=True)
            t.start()
            started = time.monotonic()
            db.compact_range()
            took = time.monotonic() - started
            stop.set()
            t.join(120)
            s = db.stats()
    lat = sorted(latencies)
    print(f"compact_range: {took:.1f} s, {s['compactions'] - compactions_before} compactions; "
          f"the writer made {len(lat):,} writes of {args.batch} records meanwhile "
          f"({len(lat) * args.batch / took:,.0f} records/s; aimed at "
          f"{f'{args.rate:,}' if args.rate else 'no limit'})")
    if lat:
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        print(f"write latency: median {statistics.median(lat) * 1e3:.2f} ms, p99 "
              f"{p99 * 1e3:.1f} ms, longest {lat[-1]:.2f} s; writes that failed: "
              f"{len(failures)}; stall_seconds {s['stall_seconds'] - stall_before:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
