"""``python -m bench recovery``: open time after a crash that left a large unflushed WAL.

A child process writes ``--wal-size`` of data into rocksmash with flushes held back (the
memtables are sealed, so the WAL is cut into one segment per memtable), then dies with
``os._exit``: every write is only in the WAL. Each trial copies that directory and times
``rocksmash.open`` with ``recovery_processes`` = each of ``--processes`` (serial replay is
1). The same writes go into RocksDB (rocksdict) with a write buffer larger than the data,
so its WAL holds everything too; the child dies the same way and RocksDB's reopen is
timed. The page cache is warm for both (the files were just written or copied).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Sequence

from cloudtier.units import parse_size

_ROCKSMASH_WRITER = """
import os, sys, threading, rocksmash
path, n, size, memtable = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
db = rocksmash.open(path, memtable_size=memtable, max_immutable_memtables=64,
                    stall_timeout=3600)
db._flush_one = lambda mem, snapshots: threading.Event().wait()  # hold every flush back
value = os.urandom(size // 2) * 2
for i in range(n):
    db.put(b"user%012d" % (i * 7919 % n), value)
os._exit(0)
"""

_ROCKSDB_WRITER = """
import os, sys
from rocksdict import Options, Rdict
path, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
opts = Options()
opts.create_if_missing(True)
opts.set_write_buffer_size(n * (size + 64) * 2)  # nothing is flushed: all in the WAL
opts.set_max_write_buffer_number(2)
db = Rdict(path, opts)
value = os.urandom(size // 2) * 2
for i in range(n):
    db[b"user%012d" % (i * 7919 % n)] = value
os._exit(0)
"""

_ROCKSDB_OPEN = """
import sys, time
from rocksdict import Options, Rdict
path, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
opts = Options()
opts.set_write_buffer_size(n * (size + 64) * 2)
opts.set_max_write_buffer_number(2)
t = time.perf_counter()
db = Rdict(path, opts)
print(time.perf_counter() - t)
db.close()
"""

_ROCKSMASH_OPEN = """
import sys, time, rocksmash
path, procs = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
db = rocksmash.open(path, recovery_processes=procs, l0_compaction_trigger=1000,
                    l0_stop_writes_trigger=1000)
took = time.perf_counter() - t
s = db.stats()
db.close()
print(took, s["recovered_segments"], s.get("recovery_processes", 1))
"""


def _run(code: str, *args: Any, timeout: float = 3600) -> str:
    r = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                       text=True, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(f"bench recovery: a child failed:\n{r.stderr[-2000:]}")
    return r.stdout



def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench recovery", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wal-size", default="1GiB", help="unflushed data to recover (default 1GiB)")
    p.add_argument("--value-size", default="1000", help="bytes per value (default 1000)")
    p.add_argument("--memtable-size", default="64MiB",
                   help="rocksmash memtable (one WAL segment each; default 64MiB)")
    p.add_argument("--processes", default="1,2",
                   help="recovery_processes values to time, comma-separated (default 1,2)")
    p.add_argument("--repeat", type=int, default=1, help="trials per setting; the median counts")
    p.add_argument("--no-rocksdb", action="store_true", help="skip the RocksDB peer")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    args = p.parse_args(argv)
    try:
        wal, size = parse_size(args.wal_size, "--wal-size"), parse_size(args.value_size,
                                                                          "--value-size")
        procs = [int(x) for x in args.processes.split(",")]
    except ValueError as e:
        p.error(str(e))
    if size < 16 or wal < size or args.repeat < 1 or any(x < 1 for x in procs):
        p.error("--value-size >= 16, --wal-size >= --value-size, --repeat and --processes >= 1")
    n = wal // size
    results: dict[str, Any] = {"wal_bytes": wal, "value_size": size, "records": n,
                               "cpus": os.cpu_count(), "rocksmash": {}, "rocksdb": None}
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as tmp:
        src = os.path.join(tmp, "crashed")
        print(f"writing {n:,} records ({wal / 2**20:.0f} MiB) into rocksmash, then crashing ...",
              flush=True)
        _run(_ROCKSMASH_WRITER, src, n, size, args.memtable_size)
        segments = sum(1 for f in os.listdir(src) if f.endswith(".log"))
        results["segments"] = segments
        for pr in procs:
            times = []
            for r in range(args.repeat):
                trial = os.path.join(tmp, f"trial-{pr}-{r}")
                shutil.copytree(src, trial)
                took, recovered, used = _run(_ROCKSMASH_OPEN, trial, pr).split()
                times.append(float(took))
                shutil.rmtree(trial)
                print(f"  rocksmash recovery_processes={pr}: {float(took):.2f} s "
                      f"({recovered} segments, {used} processes)", flush=True)
            results["rocksmash"][pr] = sorted(times)[len(times) // 2]
        if not args.no_rocksdb:
            rpath = os.path.join(tmp, "rocksdb")
            print("writing the same records into RocksDB, then crashing ...", flush=True)
            _run(_ROCKSDB_WRITER, rpath, n, size)
            wal_bytes = sum(os.path.getsize(os.path.join(rpath, f)) for f in os.listdir(rpath)
                            if f.endswith(".log"))
            took = float(_run(_ROCKSDB_OPEN, rpath, n, size))
            results["rocksdb"] = {"open_seconds": took, "wal_bytes": wal_bytes}
            print(f"  RocksDB reopen: {took:.2f} s ({wal_bytes / 2**20:.0f} MiB of WAL)")
    serial = results["rocksmash"].get(1)
    print(f"\nrecovery of {wal / 2**20:.0f} MiB of WAL in {results['segments']} segments "
          f"({os.cpu_count()} CPUs):")
    for pr, t in results["rocksmash"].items():
        ratio = f"  {serial / t:.2f}x serial" if serial and pr != 1 else ""
        vs = (f"  {results['rocksdb']['open_seconds'] / t:.2f}x RocksDB's speed"
              if results["rocksdb"] else "")
        print(f"  rocksmash, {pr} process(es): {t:7.2f} s{ratio}{vs}")
    if results["rocksdb"]:
        print(f"  RocksDB (rocksdict):       {results['rocksdb']['open_seconds']:7.2f} s")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
