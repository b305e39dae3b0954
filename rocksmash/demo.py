"""A short tour of the engine: write, read, scan, snapshot, reopen. ``python -m rocksmash.demo``."""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

import rocksmash


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--path", help="database directory (default: a temporary one, removed after)")
    ap.add_argument("--records", type=int, default=200_000, help="records to write (default 200000)")
    args = ap.parse_args(argv)
    path = args.path or tempfile.mkdtemp(prefix="rocksmash-demo-")
    n = args.records
    try:
        t0 = time.perf_counter()
        with rocksmash.open(path, memtable_size="8MiB") as db:
            batch = rocksmash.WriteBatch()
            for i in range(n):
                batch.put(b"user%08d" % i, b"value-%d-" % i + b"x" * 90)
                if len(batch) == 1000:
                    db.write(batch)
                    batch = rocksmash.WriteBatch()
            db.write(batch)
            t1 = time.perf_counter()
            print(f"wrote {n:,} records in {t1 - t0:.2f}s ({n / (t1 - t0):,.0f}/s), in {path}")
            assert db.get(b"user%08d" % 42) == b"value-42-" + b"x" * 90
            hits = sum(db.get(b"user%08d" % (i * 7919 % n)) is not None for i in range(20_000))
            t2 = time.perf_counter()
            print(f"read 20,000 random keys in {t2 - t1:.2f}s ({20_000 / (t2 - t1):,.0f}/s), "
                  f"{hits:,} found")
            first = list(db.scan(b"user00000100", b"user00000105"))
            print("scan [user00000100, user00000105):", [k.decode() for k, _ in first])
            with db.snapshot() as snap:
                db.delete(b"user00000100")
                print("after delete: get ->", db.get(b"user00000100"),
                      "| snapshot still sees ->", (snap.get(b"user00000100") or b"")[:12])
            db.flush()
            s = db.stats()
            shape = ", ".join(f"L{lv['level']}:{lv['files']}" for lv in s["levels"] if lv["files"])
            print(f"flushes {s['flushes']}, compactions {s['compactions']}, tables {shape}, "
                  f"{s['table_bytes'] / 2**20:.1f} MiB on disk")
            db.put(b"unflushed", b"survives reopen via the WAL")
        with rocksmash.open(path) as db:
            print("reopened: get(unflushed) ->", db.get(b"unflushed"))
            print(f"reopened: {sum(1 for _ in db.scan()):,} live records, "
                  f"user00000100 deleted: {db.get(b'user00000100') is None}")
    finally:
        if not args.path:
            shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
