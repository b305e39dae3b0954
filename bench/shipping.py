"""``python -m bench shipping``: what WAL shipping costs, and the rebuild after a lost disk.

Everything runs against a local S3 server (SeaweedFS, else moto) behind cloudtier's delay
proxy (``--delay-ms``, default 20: S3's first-byte latency in-region).

``writes``: for each of ``--modes``, a fresh database (its default options but the mode)
takes ``--writes`` puts of ``--value-size`` bytes from one thread (``sync=False``), paced
at ``--rate`` writes a second (0: as fast as it goes), then, once everything written is
shipped, ``--idle`` seconds of no writes, then ``--sync-writes`` puts with ``sync=True``
spread over ``--threads`` threads. Reported: writes/s and the ratio to ``off`` in the
same run; the object-store PUTs a second while writing (WAL shipments and every other
PUT: table backups, mirrors) with their monthly cost at S3 prices; the PUTs during the
idle seconds; and the PUTs a second of the sync writes.

``rebuild``: a child process loads ``--records`` records (``interval`` shipping, 10%
local budget), waits until everything is shipped, and dies (``os._exit``). Its directory
is deleted, and ``rocksmash.open`` of an empty directory on the same bucket is timed.
The database is readable when open returns, so that is both the time to the first read
and to full recovery; the first get is timed too. The peer: SlateDB (if installed) with
the same records on the same endpoint, its reopen and first get timed the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from bench.environment import Environment

__all__ = ["main"]

MODES = ("off", "sealed", "interval", "sync")


def _store_opts(env: Environment, name: str) -> dict[str, Any]:
    t = env.target(name)
    assert t is not None
    return {"object_store": t.url, "object_store_options": t.store_options()}


def _puts(stats: dict[str, Any]) -> int:
    return int(stats["cloud"]["object_store"]["requests"].get("put", 0))


def _sync_puts(db: Any, tid: int, n: int, value: bytes) -> None:
    for i in range(n):
        db.put(b"sync%04d%08d" % (tid, i), value, sync=True)


def _paced_puts(db: Any, writes: int, rate: float, value: bytes) -> float:
    """``writes`` puts, the i-th not before ``i / rate`` s from the start (as fast as they
    go with ``rate`` 0); returns the seconds taken."""
    t0 = time.perf_counter()
    for i in range(writes):
        if rate:
            due = t0 + i / rate
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
        db.put(b"user%012d" % i, value)
    return time.perf_counter() - t0


def _wait_shipped(db: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while db.stats()["cloud"]["wal_shipping"].get("lag_bytes"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"WAL shipping lag did not reach 0 within {timeout:g} s")
        time.sleep(0.05)


def measure_writes(env: Environment, modes: Sequence[str], writes: int, sync_writes: int,
                   threads: int, value_size: int, rate: float = 0.0,
                   idle: float = 0.0, options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    import rocksmash

    value = os.urandom(value_size // 2) * 2
    rows = []
    for mode in modes:
        with tempfile.TemporaryDirectory() as d:
            db = rocksmash.open(f"{d}/db", wal_shipping=mode, **dict(options or {}),
                                **_store_opts(env, f"writes-{mode}"))
            try:
                puts0 = _puts(db.stats())
                plain = _paced_puts(db, writes, rate, value)
                idle_puts = None
                if idle:
                    if mode != "off":
                        _wait_shipped(db)  # the last shipment is the writes' own
                    writing_puts = _puts(db.stats()) - puts0
                    time.sleep(idle)  # the measurement: no writes for this long
                    idle_puts = _puts(db.stats()) - puts0 - writing_puts
                else:
                    writing_puts = _puts(db.stats()) - puts0
                puts1 = _puts(db.stats())
                per = max(1, sync_writes // threads)
                workers = [threading.Thread(target=_sync_puts, args=(db, i, per, value))
                           for i in range(threads)]
                t = time.perf_counter()
                for w in workers:
                    w.start()
                for w in workers:
                    w.join()
                synced = time.perf_counter() - t
                puts2 = _puts(db.stats())
                ship = db.stats()["cloud"]["wal_shipping"]
            finally:
                db.close()
        from rocksmash.wal_shipping import monthly_put_cost
        rows.append({
            "mode": mode, "writes_per_s": writes / plain, "rate": rate or None,
            "idle_s": idle or None, "idle_puts": idle_puts,
            "write_puts_per_s": writing_puts / plain,
            "sync_writes_per_s": per * threads / synced,
            "sync_puts_per_s": (puts2 - puts1) / synced,
            "monthly_put_cost_usd_while_writing": monthly_put_cost(writing_puts / plain),
            "objects_shipped": ship.get("objects_shipped", 0),
        })
        r = rows[-1]
        idle_text = "" if r["idle_puts"] is None else f", {r['idle_puts']} PUTs in {idle:g} s idle"
        print(f"  {mode}: {r['writes_per_s']:.0f} writes/s, {r['write_puts_per_s']:.2f} PUT/s "
              f"(${r['monthly_put_cost_usd_while_writing']:.2f}/month){idle_text}; "
              f"{r['sync_writes_per_s']:.0f} sync writes/s ({threads} threads), "
              f"{r['sync_puts_per_s']:.1f} PUT/s", flush=True)
    base = next((r for r in rows if r["mode"] == "off"), None)
    for r in rows:
        if base:
            r["writes_vs_off"] = r["writes_per_s"] / base["writes_per_s"]
            r["sync_writes_vs_off"] = r["sync_writes_per_s"] / base["sync_writes_per_s"]
    return rows


_LOADER = """
import json, os, sys, time, rocksmash
path, n, size, opts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
db = rocksmash.open(path, wal_shipping="interval", local_budget="10%", **opts)
value = os.urandom(size // 2) * 2
batch = rocksmash.WriteBatch()
for i in range(n):
    batch.put(b"user%012d" % (i * 7919 % n), value)
    if len(batch) == 1000:
        db.write(batch)
        batch = rocksmash.WriteBatch()
db.write(batch)
deadline = time.monotonic() + 600
while db.stats()["cloud"]["wal_shipping"]["lag_bytes"]:
    if time.monotonic() > deadline:
        raise SystemExit("shipping lag did not reach 0")
    time.sleep(0.01)
s = db.stats()
print(json.dumps({"local_table_bytes": s["cloud"]["local_table_bytes"],
                  "cloud_table_bytes": s["cloud"]["cloud_table_bytes"],
                  "memtable_bytes": s["memtable_bytes"]}))
sys.stdout.flush()
os._exit(0)
"""


def measure_rebuild(env: Environment, records: int, value_size: int) -> dict[str, Any]:
    import rocksmash

    opts = _store_opts(env, "rebuild")
    out: dict[str, Any] = {"records": records, "value_size": value_size}
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/db"
        r = subprocess.run([sys.executable, "-c", _LOADER, path, str(records), str(value_size),
                            json.dumps(opts)], capture_output=True, text=True, timeout=7200,
                           env=dict(os.environ, **env.child_env()))
        if r.returncode:
            raise SystemExit(f"loader failed: {r.stderr[-2000:]}")
        out["at_loss"] = json.loads(r.stdout.strip().splitlines()[-1])
        shutil.rmtree(path)
        t = time.perf_counter()
        db = rocksmash.open(path, **opts)
        out["rocksmash_open_s"] = time.perf_counter() - t
        t = time.perf_counter()
        assert db.get(b"user%012d" % 0) is not None
        out["rocksmash_first_get_s"] = time.perf_counter() - t
        s = db.stats()
        out["rocksmash_restore"] = {k: v for k, v in s.items() if k.startswith("restore")}
        out["rocksmash_restore"]["recovered_segments"] = s["recovered_segments"]
        db.close()
    try:
        out["slatedb"] = _slatedb_rebuild(env, records, value_size)
    except ImportError:
        out["slatedb"] = None
    return out


def _slatedb_rebuild(env: Environment, records: int, value_size: int) -> dict[str, Any]:
    import slatedb  # noqa: F401  (ImportError: no peer)
    from bench.runners.base import RunnerConfig
    from bench.runners.slatedb import SlateDBRunner

    value = os.urandom(value_size // 2) * 2
    target = env.target("rebuild-slatedb")

    async def go() -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as d:
            cfg = RunnerConfig(data_dir=Path(d) / "a", object_store=target)
            cfg.data_dir.mkdir()
            w = SlateDBRunner(cfg)
            await w.open()
            for i in range(0, records, 1000):
                keys = [b"user%012d" % (j * 7919 % records)
                        for j in range(i, min(records, i + 1000))]
                await w.load_batch(keys, [value] * len(keys))
            await w.settle("flush")
            await w.close()
            cfg2 = RunnerConfig(data_dir=Path(d) / "b", object_store=target)
            cfg2.data_dir.mkdir()
            r = SlateDBRunner(cfg2)
            t = time.perf_counter()
            await r.open()
            opened = time.perf_counter() - t
            t = time.perf_counter()
            assert await r.read(b"user%012d" % 0) is not None
            first = time.perf_counter() - t
            await r.close()
            return {"open_s": opened, "first_get_s": first}

    return asyncio.run(go())


def _options(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--opt wants KEY=VALUE, got {pair!r}")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench shipping", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--part", choices=("writes", "rebuild", "both"), default="both")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated (default: all)")
    p.add_argument("--writes", type=int, default=20_000, help="plain puts per mode")
    p.add_argument("--rate", type=float, default=0.0,
                   help="pace the plain puts at this many a second (default 0: as fast as "
                        "they go); the issue-26 goal is measured at --rate 1000")
    p.add_argument("--idle", type=float, default=0.0,
                   help="after the plain puts are shipped, count PUTs over this many seconds "
                        "without writes (default 0: skip)")
    p.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                   help="a rocksmash option of the writes' databases, repeatable; VALUE is "
                        "JSON if it parses (e.g. --opt wal_ship_interval=1)")
    p.add_argument("--sync-writes", type=int, default=800, help="sync=True puts per mode")
    p.add_argument("--threads", type=int, default=8, help="threads for the sync=True puts")
    p.add_argument("--records", type=int, default=200_000, help="records for the rebuild")
    p.add_argument("--value-size", type=int, default=100)
    p.add_argument("--delay-ms", type=float, default=20.0)
    p.add_argument("--s3-server", default="auto", choices=("auto", "seaweedfs", "moto"))
    p.add_argument("--out", default=None, help="write the results as JSON here")
    a = p.parse_args(argv)
    results: dict[str, Any] = {"delay_ms": a.delay_ms}
    with Environment("s3", delay_ms=a.delay_ms, server=a.s3_server) as env:
        results["server"] = env.server_description()
        print(f"object store: {results['server']}, {a.delay_ms:g} ms added per request")
        if a.part in ("writes", "both"):
            print("writes per shipping mode:")
            results["writes"] = measure_writes(env, a.modes.split(","), a.writes,
                                               a.sync_writes, a.threads, a.value_size,
                                               a.rate, a.idle, _options(a.opt))
        if a.part in ("rebuild", "both"):
            print(f"rebuild after losing the local disk ({a.records} records):")
            results["rebuild"] = measure_rebuild(env, a.records, a.value_size)
            rb = results["rebuild"]
            print(f"  rocksmash: open {rb['rocksmash_open_s']:.2f} s, first get "
                  f"{rb['rocksmash_first_get_s'] * 1000:.1f} ms ({rb['rocksmash_restore']})")
            if rb["slatedb"]:
                print(f"  slatedb: open {rb['slatedb']['open_s']:.2f} s, first get "
                      f"{rb['slatedb']['first_get_s'] * 1000:.1f} ms")
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
