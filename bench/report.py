"""Reports of a YCSB comparison: terminal table, JSON, Markdown (plots: :mod:`bench.plots`).

Everything here renders one *results document* (the JSON written by the CLI), read
through :mod:`bench.results`::

    {"schema": "bench.ycsb/1", "created": ..., "command": ..., "machine": {...},
     "config": {...}, "environment": {...}, "baseline": "rocksdb",
     "systems": [...], "workloads": [...], "trials": [<bench.trial result>, ...]}

Repetitions and ratios are explained in :mod:`bench.results`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.results import (SCHEMA, comparison_rows, describe_request_check, get_path, group_trials,
                           merge_counts, merged_latency, ratio, representative, request_check,
                           total_requests)
from bench.costs import cost_markdown, latency_line
from bench.units import format_bytes, format_count, format_ratio, format_us
from bench.workloads import CORE_WORKLOADS, OP_NAMES

__all__ = [
    "SCHEMA",
    "ratio",
    "comparison_rows",
    "group_trials",
    "representative",
    "merged_latency",
    "render_table",
    "render_markdown",
    "write_json",
    "load_json",
    "write_reports",
]

_COLUMNS: list[tuple[str, str, Any]] = [
    ("workload", "wl", lambda r: r["workload"].upper()),
    ("system", "system", lambda r: r["system"] + (" *" if r["is_baseline"] else "")),
    ("load", "load rec/s", lambda r: format_count(r["load_tput"])),
    ("load_x", "x base", lambda r: format_ratio(r["load_tput_ratio"])),
    ("tput", "run ops/s", lambda r: format_count(r["tput"])),
    ("tput_x", "x base", lambda r: format_ratio(r["tput_ratio"])),
    ("spread", "spread", lambda r: "-" if r.get("tput_spread") is None else f"+-{r['tput_spread'] * 100:.0f}%"),
    ("p50", "p50 us", lambda r: format_us(r["p50"])),
    ("p99", "p99 us", lambda r: format_us(r["p99"])),
    ("p99_x", "p99 x base", lambda r: format_ratio(r["p99_ratio"])),
    ("rss", "peak RSS", lambda r: format_bytes(r["rss"])),
    ("rss_x", "x base", lambda r: format_ratio(r["rss_ratio"])),
    ("disk", "local disk", lambda r: format_bytes(r["disk"])),
    ("disk_x", "x base", lambda r: format_ratio(r["disk_ratio"])),
    ("stored", "S3 stored", lambda r: format_bytes(r["stored"])),
    ("req", "S3 requests", lambda r: format_count(r["requests"])),
    ("usd", "req $", lambda r: "-" if r["usd"] is None else f"{r['usd']:.4f}"),
]


def _cells(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    has_store = any(r["stored"] is not None or r["requests"] is not None for r in rows)
    repeated = any((r.get("repeats") or 1) > 1 for r in rows)
    cols = [c for c in _COLUMNS if (has_store or c[0] not in ("stored", "req", "usd"))
            and (repeated or c[0] != "spread")]
    header = [c[1] for c in cols]
    body = []
    for r in rows:
        if r["status"] != "ok":
            first = [cols[0][2](r), cols[1][2](r)]
            msg = (r.get("error") or "failed").strip().splitlines()[-1][:80]
            body.append(first + [f"FAILED: {msg}"] + [""] * (len(cols) - 3))
        else:
            body.append([c[2](r) for c in cols])
    return header, body


def render_table(doc: dict[str, Any], baseline: str | None = None) -> str:
    """The comparison as a fixed-width text table (``*`` marks the baseline)."""
    rows = comparison_rows(doc, baseline)
    header, body = _cells(rows)
    widths = [max(len(header[i]), *(len(b[i]) for b in body if i < len(b) and not b[2].startswith("FAILED")), 1)
              if body else len(header[i]) for i in range(len(header))]
    lines = ["  ".join(h.rjust(widths[i]) if i > 1 else h.ljust(widths[i]) for i, h in enumerate(header))]
    lines.append("  ".join("-" * w for w in widths))
    for b in body:
        if b[2].startswith("FAILED"):
            lines.append("  ".join([b[0].ljust(widths[0]), b[1].ljust(widths[1]), b[2]]))
        else:
            lines.append("  ".join(c.rjust(widths[i]) if i > 1 else c.ljust(widths[i]) for i, c in enumerate(b)))
    base = baseline or doc.get("baseline")
    lines.append(f"* baseline: {base}. x base = value / baseline's value "
                 "(throughput: higher is better; latency, memory, disk: lower is better)")
    return "\n".join(lines)


def _md_table(header: list[str], body: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body]
    return "\n".join(out)


def _latency_section(doc: dict[str, Any], baseline: str | None) -> list[str]:
    lines = ["## Latency by operation (run phase, microseconds; all repetitions merged)", ""]
    base = str(baseline or doc.get("baseline"))
    groups = group_trials(doc)
    for w in doc.get("workloads", []):
        body = []
        for s in doc.get("systems", []):
            trials = groups.get((w, s), [])
            if not trials or any(t.get("status") != "ok" for t in trials):
                continue
            for op in OP_NAMES + ("all",):
                lat = merged_latency(trials, op)
                if not lat or not lat.get("count"):
                    continue
                b = (merged_latency(groups.get((w, base), []), op) or {}).get("p99_us")
                body.append([s, op, format_count(lat["count"]), format_us(lat["mean_us"]),
                             format_us(lat["p50_us"]), format_us(lat["p95_us"]),
                             format_us(lat["p99_us"]), format_us(lat["p999_us"]),
                             format_us(lat["max_us"]), format_ratio(ratio(lat["p99_us"], b))])
        if body:
            wl = CORE_WORKLOADS.get(w)
            lines += [f"### Workload {w.upper()}" + (f" ({wl.title}: {wl.mix()})" if wl else ""), "",
                      _md_table(["system", "op", "count", "mean", "p50", "p95", "p99", "p99.9", "max",
                                 "p99 x base"], body), ""]
    return lines


def _label(t: dict[str, Any]) -> str:
    rep = t.get("repeat")
    return t["system"] if rep is None else f"{t['system']} #{rep + 1}"


def _cpu(t: dict[str, Any]) -> str:
    cpu = t.get("cpu_seconds") or {}
    if not cpu:
        return "-"
    return f"{cpu.get('self', 0):.1f} + {cpu.get('children', 0):.1f}"


def _resources_section(doc: dict[str, Any]) -> list[str]:
    body = []
    for t in doc.get("trials", []):
        rss = t.get("rss") or {}
        disk = t.get("disk") or {}
        body.append([
            t["workload"].upper(), _label(t),
            _cpu(t), format_bytes(rss.get("baseline")), format_bytes(rss.get("peak_self")),
            format_bytes(rss.get("tree_peak")), format_bytes(rss.get("tree_peak_pss")),
            format_bytes(get_path(disk, "after_load", "allocated")),
            format_bytes(get_path(disk, "after_run", "allocated")),
            format_bytes(get_path(disk, "after_run", "apparent")),
            format_count(get_path(t, "object_store_usage", "objects")),
            format_bytes(get_path(t, "object_store_usage", "bytes")),
            format_count(get_path(t, "proxy", "requests")),
            json.dumps(get_path(t, "object_store_requests", "run")) if get_path(t, "object_store_requests", "run") else "-",
            "-" if get_path(t, "dollars", "requests_usd") is None else f"{t['dollars']['requests_usd']:.5f}",
            "-" if get_path(t, "dollars", "storage_usd_per_month") is None
            else f"{t['dollars']['storage_usd_per_month']:.5f}",
        ])
    return ["## Resources", "",
            "RSS: *baseline* is the trial process after imports, before opening the system; "
            "*peak (process)* is its exact `ru_maxrss`; *peak (tree)* is the sampled peak of the "
            "process plus its children (worker processes, servers); *peak PSS (tree)* the sampled peak of "
            "their summed proportional set sizes (/proc/PID/smaps_rollup: a page shared by several "
            "processes counts once in all, where the RSS sum counts it once per process). Disk: bytes allocated in the "
            "system's data directory after the load (and settle) and after the run. CPU: user + "
            "system seconds of the trial process and its reaped children (open to close). Object store: "
            "what the trial's prefix held after the run, the HTTP requests that crossed the proxy "
            "during the trial (load + run), the system's own request counts during the run, and "
            "the dollar estimate of the trial's requests and of storing its data for a month.", "",
            _md_table(["wl", "system", "CPU s (process + children)", "RSS baseline", "peak (process)", "peak (tree)",
                       "peak PSS (tree)",
                       "disk after load", "disk after run", "apparent", "objects", "stored",
                       "proxy requests", "system requests (run)", "requests $", "storage $/month"],
                      body), ""]


def _caches_section(doc: dict[str, Any]) -> list[str]:
    body = []
    for t in doc.get("trials", []):
        for name, r in sorted((t.get("caches") or {}).items()):
            body.append([t["workload"].upper(), _label(t), name, "-" if r is None else f"{r * 100:.1f}%"])
    if not body:
        return []
    return ["## Cache hit ratios (run phase)", "", _md_table(["wl", "system", "cache", "hit ratio"], body), ""]


def render_markdown(doc: dict[str, Any], plots: list[str] | None = None,
                    baseline: str | None = None) -> str:
    """The full Markdown report; ``plots`` are image paths relative to the report."""
    cfg = doc.get("config", {})
    rows = comparison_rows(doc, baseline)
    header, body = _cells(rows)
    lines = [
        "# YCSB comparison", "",
        f"- command: `{doc.get('command', '')}`",
        f"- date: {doc.get('created', '')}",
        f"- code: {doc.get('git', {}).get('commit', '?')}" + (" (uncommitted changes)" if doc.get('git', {}).get('dirty') else ""),
        f"- machine: {doc.get('machine', {}).get('summary', '')}",
        f"- baseline: {baseline or doc.get('baseline')}",
        f"- environment: {json.dumps(doc.get('environment', {}))}",
        f"- latency model: {latency_line(doc)}",
        f"- config: {json.dumps(cfg)}", "",
        "## Summary", "",
        "`x base` = value / baseline value. Throughput: higher is better. Latency (all operations of "
        "the run phase merged), memory, disk, requests: lower is better.", "",
        _md_table(header, body), "",
    ]
    lines += _latency_section(doc, baseline)
    lines += _resources_section(doc)
    lines += cost_markdown(doc)
    lines += _caches_section(doc)
    notes = []
    for t in doc.get("trials", []):
        t = {**t, "system": _label(t)}
        if t.get("status") != "ok":
            notes.append(f"- {t['workload'].upper()} / {t['system']}: FAILED\n\n```\n{(t.get('error') or '').strip()[-3000:]}\n```")
        elif get_path(t, "run", "not_found"):
            notes.append(f"- {t['workload'].upper()} / {t['system']}: {t['run']['not_found']} reads found no value")
        if get_path(t, "run", "stopped_early"):
            notes.append(f"- {t['workload'].upper()} / {t['system']}: stopped at the time limit after "
                         f"{t['run']['items']} operations")
        own = total_requests(merge_counts(get_path(t, "object_store_requests", "load"),
                                      get_path(t, "object_store_requests", "run")))
        seen = get_path(t, "proxy", "requests")
        check = request_check(t)
        if check is not None and check["own"]:
            notes.append(f"- {t['workload'].upper()} / {t['system']}: {describe_request_check(check)}")
        elif check is None and own is not None and seen and abs(own - seen) > 0.1 * seen + 5:
            # A document from before the proxy counted requests by kind: bursts only.
            notes.append(f"- {t['workload'].upper()} / {t['system']}: the system counted {own:,} "
                         f"object-store requests, the proxy saw {seen:,} delayed bursts (a PUT is "
                         f"two: headers, then the body after `100 Continue`; the close's requests "
                         f"are in them too)")
        counts = merge_counts(get_path(t, "object_store_requests", "load"), get_path(t, "object_store_requests", "run")) or {}
        up = get_path(t, "proxy", "bytes_up")
        if "bytes_written" in counts and up and seen:
            payload = up - 1000 * seen  # allow ~1 KB of HTTP headers per request
            if payload > 0 and counts["bytes_written"] < 0.5 * payload:
                notes.append(f"- {t['workload'].upper()} / {t['system']}: the system counted "
                             f"{counts['bytes_written']:,} bytes written to the object store, the proxy "
                             f"carried {up:,} bytes up; some uploads are not in its own counters")
        busy = max((v for v in (t.get("load_average") or {}).values() if v is not None), default=None)
        cores = (doc.get("machine") or {}).get("cores") or 0
        if busy is not None and cores and busy > 0.5 * cores + 1:
            notes.append(f"- {t['workload'].upper()} / {t['system']}: the machine was busy (1-minute load "
                         f"average {busy:.1f} on {cores} cores around the trial); treat its numbers with care")
        if t.get("settle"):
            notes.append(f"- {t['workload'].upper()} / {t['system']}: after load: {t['settle']}")
    if notes:
        lines += ["## Notes", ""] + notes + [""]
    if plots:
        lines += ["## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots] + [""]
    return "\n".join(lines)


def write_json(doc: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(doc, indent=1, sort_keys=False))


def load_json(path: Path) -> dict[str, Any]:
    doc = json.loads(Path(path).read_text())
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a bench results document (schema {doc.get('schema')!r})")
    return doc


def write_reports(doc: dict[str, Any], out_dir: Path, plots: bool = True,
                  baseline: str | None = None) -> dict[str, Any]:
    """Write ``results.json``, the PNG plots and ``report.md`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Any] = {"json": out_dir / "results.json"}
    write_json(doc, paths["json"])
    images: list[Path] = []
    if plots:
        from bench.plots import write_plots

        images = write_plots(doc, out_dir, baseline)
    paths["plots"] = images
    paths["markdown"] = out_dir / "report.md"
    paths["markdown"].write_text(render_markdown(doc, [p.name for p in images], baseline))
    return paths
