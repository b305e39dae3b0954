"""Reports of the tiering experiment: terminal tables, Markdown, JSON.

Everything here reads one results document written by :func:`bench.tiering.run_tiering`
(schema ``bench.tiering/1``): ``config``, ``environment``, ``configurations``,
``workloads`` and ``results`` (one per configuration, each with ``phases``: one entry
per workload x {before, after} with its derived numbers, ``compactions``, ``shape``).

Ratios are computed here, from the measured numbers in the document, never stored by the
run: ``x all-local`` = a configuration's throughput / the all-local configuration's in
the same workload and phase; ``x slatedb`` likewise against SlateDB. The goals of the
cloud-tier issue: tiered / all-local >= 0.9, tiered / SlateDB >= 3 (read-heavy
workloads), and a compaction-aware cache that keeps its hit ratio after a full compaction
(shown against the same engine with the feature off).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.bucket import bucket_kept_bytes
from bench.costs import latency_line
from bench.results import ratio
from bench.units import format_bytes, format_count, format_ratio, format_us

__all__ = ["GOALS", "phase_rows", "goal_rows", "format_small_ratio", "render_tables", "render_markdown",
           "write_reports", "load_json"]

#: (name, numerator configuration, denominator configuration, minimum ratio).
GOALS = (
    ("tiered / all-local throughput", "tiered", "all-local", 0.9),
    ("tiered / SlateDB throughput", "tiered", "slatedb", 3.0),
)

_PHASES = ("before", "after")


def _by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in doc.get("results", [])}


def _phase(result: dict[str, Any] | None, workload: str, phase: str) -> dict[str, Any] | None:
    if not result or result.get("status") != "ok":
        return None
    return next((p for p in result.get("phases", [])
                 if p["workload"] == workload and p["phase"] == phase), None)


def _tput(result: dict[str, Any] | None, workload: str, phase: str) -> float | None:
    p = _phase(result, workload, phase)
    return p.get("throughput") if p else None


def phase_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (workload, phase, configuration) with ``x_local`` and ``x_slatedb``."""
    by = _by_name(doc)
    rows = []
    for w in doc.get("workloads", []):
        for phase in _PHASES:
            for name in doc.get("configurations", []):
                r = by.get(name)
                p = _phase(r, w, phase)
                row: dict[str, Any] = {"workload": w, "phase": phase, "configuration": name,
                                       "ok": p is not None,
                                       "error": None if p else (r or {}).get("error") or "not run"}
                if p:
                    row.update({k: p.get(k) for k in (
                        "throughput", "p50_us", "p99_us", "ops", "reads", "gets", "gets_per_1k_reads",
                        "proxy_requests", "proxy_requests_per_1k_ops", "data_cache_hit_ratio",
                        "key_cache_hit_ratio", "block_cache_hit_ratio", "stored_hit_ratio", "local_hit_ratio",
                        "not_found", "stopped_early")})
                    row["x_local"] = ratio(p.get("throughput"), _tput(by.get("all-local"), w, phase))
                    row["x_slatedb"] = ratio(p.get("throughput"), _tput(by.get("slatedb"), w, phase))
                rows.append(row)
    return rows


def goal_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's goals per workload and phase, from the measured numbers.

    Throughput goals (``kind == "throughput"``): ``value`` is the ratio of the two
    configurations' throughputs, ``met`` whether it reaches ``target``. Cache rows
    (``kind == "cache"``, one per tiered configuration and workload): the local hit ratio
    (block reads served without a GET) and the DataCache hit ratio in the phase before
    and the phase after the full compaction; the issue sets no number here, so ``met``
    is None and the report shows the aware cache next to the unaware one.
    """
    by = _by_name(doc)
    out: list[dict[str, Any]] = []
    for w in doc.get("workloads", []):
        for phase in _PHASES:
            for label, num, den, target in GOALS:
                if num in by and den in by:
                    v = ratio(_tput(by[num], w, phase), _tput(by[den], w, phase))
                    out.append({"kind": "throughput", "goal": label, "workload": w, "phase": phase,
                                "value": v, "target": target, "met": None if v is None else v >= target})
        for name in ("tiered", "tiered-unaware"):
            b, a = _phase(by.get(name), w, "before"), _phase(by.get(name), w, "after")
            if b and a:
                row = {"kind": "cache", "goal": f"{name}: hit ratios across a full compaction",
                       "configuration": name, "workload": w, "phase": "after", "met": None}
                for key in ("local_hit_ratio", "data_cache_hit_ratio", "gets_per_1k_reads"):
                    row[f"{key}_before"], row[f"{key}_after"] = b.get(key), a.get(key)
                out.append(row)
    return out


def _pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x * 100:.{digits}f}%"


def format_small_ratio(r: float | None) -> str:
    """Like ``format_ratio``, with two significant digits below 0.1 (0.0031x, not 0.00x)."""
    if r is None or r >= 0.1 or r == 0:
        return format_ratio(r)
    return f"{r:.2g}x"


def _num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


_PHASE_COLUMNS = [
    ("wl", lambda r: r["workload"].upper()),
    ("phase", lambda r: r["phase"]),
    ("configuration", lambda r: r["configuration"]),
    ("ops/s", lambda r: format_count(r.get("throughput"))),
    ("x all-local", lambda r: format_small_ratio(r.get("x_local"))),
    ("x slatedb", lambda r: format_small_ratio(r.get("x_slatedb"))),
    ("p50 us", lambda r: format_us(r.get("p50_us"))),
    ("p99 us", lambda r: format_us(r.get("p99_us"))),
    ("GET/1k reads", lambda r: _num(r.get("gets_per_1k_reads"))),
    ("proxy req/1k ops", lambda r: _num(r.get("proxy_requests_per_1k_ops"))),
    ("local hit", lambda r: _pct(r.get("local_hit_ratio"), 2)),
    ("disk cache hit", lambda r: _pct(r.get("data_cache_hit_ratio"))),
    ("key cache hit", lambda r: _pct(r.get("key_cache_hit_ratio"))),
    ("block cache hit", lambda r: _pct(r.get("block_cache_hit_ratio"))),
    ("of which stored", lambda r: _pct(r.get("stored_hit_ratio"))),
]


def _phase_table(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    body = []
    for r in phase_rows(doc):
        if r["ok"]:
            cells = [f(r) for _, f in _PHASE_COLUMNS]
            if r.get("stopped_early"):
                cells[3] += " (cut)"
        else:
            msg = (r["error"] or "failed").strip().splitlines()[-1][:70]
            cells = [f(r) for _, f in _PHASE_COLUMNS[:3]] + [f"FAILED: {msg}"] + [""] * (len(_PHASE_COLUMNS) - 4)
        body.append(cells)
    return [h for h, _ in _PHASE_COLUMNS], body


def _shape_table(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["configuration", "load rec/s", "settle s", "local tables", "cloud tables",
              "MetaCache", "meta % of cloud", "DataCache at the end", "local disk at the end",
              "local disk", "S3 at close", "S3 kept", "peak RSS"]
    body = []
    for r in doc.get("results", []):
        s = (r.get("shape") or {}).get("after_load") or {}
        end = (r.get("shape") or {}).get("end") or {}
        rss = r.get("rss") or {}
        peak = max(rss.get("tree_peak") or 0, rss.get("peak_self") or 0) or None
        pct = s.get("meta_bytes_pct_of_cloud")
        body.append([
            r["name"], format_count((r.get("load") or {}).get("throughput")),
            _num((r.get("timing") or {}).get("settle_s"), 2),
            format_bytes(s.get("local_table_bytes")), format_bytes(s.get("cloud_table_bytes")),
            format_bytes(s.get("meta_cache_bytes")), "-" if pct is None else f"{pct:.2f}%",
            format_bytes(end.get("data_cache_bytes")), format_bytes(end.get("local_disk")),
            format_bytes(s.get("local_disk")),
            format_bytes((r.get("object_store_usage") or {}).get("bytes")),
            format_bytes(bucket_kept_bytes(r)), format_bytes(peak),
        ])
    return header, body


def _bucket_table(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """rocksmash's bucket at the close by kind (rocksmash.bucket_usage): bytes (objects)."""
    rows = [(r["name"], r["bucket_kinds"]) for r in doc.get("results", [])
            if (r.get("bucket_kinds") or {}).get("kinds")]
    kinds = [k for k in next(iter(rows), ("", {"kinds": {}}))[1]["kinds"]
             if any(u["kinds"][k]["objects"] for _, u in rows)]
    body = [[name] + [f"{format_bytes(u['kinds'][k]['bytes'])} ({u['kinds'][k]['objects']})"
                      for k in kinds] + [format_bytes(u["bytes"])] for name, u in rows]
    return ["configuration"] + kinds + ["total"], body


def cost_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Monthly cost per (workload, phase, configuration), by cloudtier's cost model: the
    configuration's local disk at the end (provisioned SSD, ``--ssd-price``), the bucket
    bytes it keeps (:func:`bucket_kept_bytes`), and the phase's object-store requests
    continued at the phase's rates for a month; ``x_local`` against all-local in the same
    phase, and for a tiered configuration ``break_even_bytes``: the data size (records x
    (key + value)) from which it is cheaper than all-local at the phase's request rates
    (bench.costs). GETs are priced as GETs, every other request of a read phase as a PUT
    (an upper bound: they are HEADs and LISTs if any)."""
    from bench.costs import price_table
    from cloudtier.cost_model import TieringCosts, monthly_cost, request_rates

    cfg = doc.get("config", {})
    prices = price_table(cfg.get("ssd_usd_gb_month"))
    data = float(cfg.get("records") or 0) * float((cfg.get("key_size") or 0) + (cfg.get("value_size") or 0))
    by = _by_name(doc)
    rows = []
    for w in doc.get("workloads", []):
        for phase in _PHASES:
            phase_rows_: list[dict[str, Any]] = []
            for name in doc.get("configurations", []):
                r = by.get(name)
                p = _phase(r, w, phase)
                seconds = (p or {}).get("summary", {}).get("seconds")
                if not p or not seconds:
                    continue
                end = (r.get("shape") or {}).get("end") or {}  # type: ignore[union-attr]
                obj = bucket_kept_bytes(r)  # type: ignore[arg-type]
                c = p.get("counters") or {}
                gets = int(c.get("gets") or 0)
                other = max(0, int(c.get("requests") or 0) - gets)
                rates = request_rates({"get": gets, "put": other}, seconds)
                cost = monthly_cost(float(end.get("local_disk") or 0), float(obj or 0), rates, prices)
                phase_rows_.append({"workload": w, "phase": phase, "configuration": name,
                                    "throughput": p.get("throughput"), "rates": rates,
                                    "local_bytes": end.get("local_disk"), "object_bytes": obj,
                                    "local_usd": cost.local_ssd,
                                    "object_usd": None if obj is None else cost.object_storage,
                                    "requests_usd": cost.requests, "total_usd": cost.total,
                                    "break_even_bytes": None})
            base = next((x for x in phase_rows_ if x["configuration"] == "all-local"), None)
            for x in phase_rows_:
                x["x_local"] = ratio(x["total_usd"], base["total_usd"] if base else None)
                if base and data > 0 and x["object_bytes"] is not None and x is not base:
                    x["break_even_bytes"] = TieringCosts(
                        data_bytes=data, tiered_local_bytes=float(x["local_bytes"] or 0),
                        tiered_object_bytes=float(x["object_bytes"]),
                        all_local_bytes=float(base["local_bytes"] or 0), rates=x["rates"],
                        prices=prices).break_even_bytes()
            rows += phase_rows_
    return rows


def _cost_table(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    from bench.costs import format_size, usd

    header = ["wl", "phase", "configuration", "ops/s", "local SSD", "object storage (kept)",
              "requests", "total / month", "x all-local", "break-even"]
    body = [[r["workload"].upper(), r["phase"], r["configuration"],
             format_count(r["throughput"]),
             f"{usd(r['local_usd'])} ({format_bytes(r['local_bytes'])})",
             "-" if r["object_bytes"] is None else
             f"{usd(r['object_usd'])} ({format_bytes(r['object_bytes'])})",
             usd(r["requests_usd"]), usd(r["total_usd"]), format_small_ratio(r["x_local"]),
             "-" if r["object_bytes"] is None or r["configuration"] == "all-local"
             else format_size(r["break_even_bytes"])]
            for r in cost_rows(doc)]
    return header, body


def _compaction_table(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["wl", "configuration", "rewritten", "rewrite s", "compaction s",
              "object-store requests", "proxy requests", "cache fills", "what"]
    body = []
    for r in doc.get("results", []):
        for c in r.get("compactions", []):
            body.append([c["workload"].upper(), r["name"], format_count(c.get("rewritten")),
                         _num(c.get("rewrite_s"), 2), _num(c.get("compact_s"), 2),
                         format_count(c.get("object_store_requests")),
                         format_count(c.get("proxy_requests")), format_count(c.get("cache_fills")),
                         c.get("what") or ""])
    return header, body


def _goal_lines(doc: dict[str, Any]) -> list[str]:
    lines = []
    for g in goal_rows(doc):
        where = f"{g['workload'].upper()} {g['phase']}"
        if g["kind"] == "throughput":
            met = {True: "met", False: "NOT met", None: "not measured"}[g["met"]]
            lines.append(f"{where}: {g['goal']} = {format_small_ratio(g['value'])} (goal >= {g['target']:g}: {met})")
        else:
            lines.append(
                f"{g['workload'].upper()}, {g['configuration']}, before -> after the full compaction: "
                f"local hit {_pct(g['local_hit_ratio_before'], 2)} -> {_pct(g['local_hit_ratio_after'], 2)}, "
                f"DataCache hit {_pct(g['data_cache_hit_ratio_before'])} -> {_pct(g['data_cache_hit_ratio_after'])}, "
                f"GET/1k reads {_num(g['gets_per_1k_reads_before'])} -> {_num(g['gets_per_1k_reads_after'])}")
    return lines


def _text_table(header: list[str], body: list[list[str]], left: int) -> str:
    widths = [max([len(header[i])] + [len(b[i]) for b in body if not b[3].startswith("FAILED")
                                       or i < 3]) for i in range(len(header))]
    def line(cells: list[str]) -> str:
        if len(cells) > 3 and cells[3].startswith("FAILED"):
            return "  ".join(c.ljust(widths[i]) for i, c in enumerate(cells[:3])) + "  " + cells[3]
        return "  ".join(c.ljust(widths[i]) if i < left else c.rjust(widths[i]) for i, c in enumerate(cells))
    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(b) for b in body])


def render_tables(doc: dict[str, Any]) -> str:
    """The terminal report: phases with ratios, where the bytes are, compactions, goals."""
    out = [f"latency model: {latency_line(doc)}", "", _text_table(*_phase_table(doc), left=3), ""]
    header, body = _shape_table(doc)
    out += [_text_table(header, body, left=1), ""]
    header, body = _bucket_table(doc)
    if body:
        out += ["rocksmash's bucket at the close, by kind:", _text_table(header, body, left=1), ""]
    header, body = _compaction_table(doc)
    if body:
        out += [_text_table(header[:-1], [b[:-1] for b in body], left=2), ""]
    out += _goal_lines(doc)
    return "\n".join(out)


def _md(header: list[str], body: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body]
    return "\n".join(out)


def render_markdown(doc: dict[str, Any]) -> str:
    cfg = doc.get("config", {})
    lines = [
        "# Tiering experiment", "",
        f"- command: `{doc.get('command', '')}`",
        f"- date: {doc.get('created', '')}",
        f"- code: {(doc.get('git') or {}).get('commit', '?')}"
        + (" (uncommitted changes)" if (doc.get("git") or {}).get("dirty") else ""),
        f"- machine: {(doc.get('machine') or {}).get('summary', '')}",
        f"- environment: {json.dumps(doc.get('environment', {}))}",
        f"- latency model: {latency_line(doc)}",
        f"- records {format_count(cfg.get('records'))}, {format_count(cfg.get('ops'))} operations "
        f"per phase, warm-up {format_count(cfg.get('warmup_ops'))}, "
        f"after each compaction {format_count(cfg.get('after_warmup_ops') or 0)} unmeasured, "
        f"{cfg.get('threads', 1)} client thread(s), {cfg.get('distribution')}, "
        f"rewrite {cfg.get('rewrite', 0) * 100:g}% before each compaction; local budget "
        f"{cfg.get('local_budget')}; DataCache {format_bytes(cfg.get('cache_bytes'))}; block "
        f"cache {format_bytes(cfg.get('block_cache_bytes'))} (rocksmash's default, and "
        f"SlateDB's in-memory cache); SlateDB's on-disk cache "
        f"{format_bytes((cfg.get('budget_bytes') or 0) + (cfg.get('cache_bytes') or 0))}", "",
        "Configurations:", "",
    ]
    lines += [f"- `{k}`: {v}" for k, v in (doc.get("about") or {}).items()] + [""]
    lines += ["## Phases", "",
              "`x all-local`, `x slatedb`: this throughput / that configuration's in the same "
              "workload and phase. `GET/1k reads`: the system's own object-store GETs per 1,000 "
              "reads. `proxy req/1k ops`: every request the proxy carried per 1,000 operations. "
              "`local hit`: share of data-block reads served without an object-store GET "
              "(1 - GETs / block-cache lookups). `disk cache hit`: rocksmash's DataCache (SlateDB: its on-disk object-store cache "
              "parts). `key cache hit`: rocksmash's key cache (rows of cloud tables; `-` when off), of "
              "the reads that asked it. `block cache hit`: the in-memory block cache (SlateDB: data blocks). "
              "`(cut)`: stopped at --max-time.", "",
              _md(*_phase_table(doc)), "", "## Goals", ""]
    lines += [f"- {g}" for g in _goal_lines(doc)] + [""]
    lines += ["## Where the bytes are (after load and settle)", "",
              "Local and cloud table bytes and the MetaCache are rocksmash's own `stats()`; local "
              "disk is everything in the data directory (caches included); the DataCache and "
              "local disk are also shown at the end of the run (the local footprint); S3 at "
              "close is the configuration's bucket prefix after it closed, listed directly; S3 "
              "kept is that minus rocksmash's retired tables still in their "
              "`retired_object_grace` (60 s), which leave by themselves (SlateDB: the prefix at "
              "close, not classified).", "",
              _md(*_shape_table(doc)), ""]
    header, body = _bucket_table(doc)
    if body:
        lines += ["## rocksmash's bucket at the close, by kind", "",
                  "Every object of the prefix classified against the newest mirror "
                  "(`rocksmash du`, docs/cloud.md): bytes (objects). `retired_tables` and "
                  "`unnamed_tables` are in their grace (or wait for the next open) and are not "
                  "in S3 kept.", "", _md(header, body), ""]
    header, body = _compaction_table(doc)
    if body:
        lines += ["## Rewrite and full compaction", "", _md(header, body), ""]
    header, body = _cost_table(doc)
    if body:
        from bench.costs import price_table
        prices = price_table(cfg.get("ssd_usd_gb_month"))
        lines += ["## Monthly cost", "",
                  f"Local disk at the end as provisioned SSD ({prices.ssd_name}, "
                  f"${prices.ssd_gb_month:g}/GiB-month, `--ssd-price`), the bucket "
                  f"it keeps (S3 kept above) at ${prices.storage_gb_month:g}/GiB-month, and the phase's object-store "
                  f"requests ({prices.name}: ${prices.get_per_1000:g} per 1,000 GETs, "
                  f"${prices.put_per_1000:g} per 1,000 others) continued at the phase's "
                  "rates for a 730-hour month. `x all-local`: against the same data "
                  "all on local SSD (all-local rocksmash's disk; the demo measures RocksDB's "
                  "beside it) in the same phase. `break-even`: the data size (records x "
                  "(key + value)) from which the configuration is cheaper than all-local at "
                  "the phase's request rates, bytes on both sides growing with the data "
                  "(cloudtier.cost_model).", "", _md(header, body), ""]
    notes = []
    for r in doc.get("results", []):
        if r.get("status") != "ok":
            notes.append(f"- {r['name']}: FAILED\n\n```\n{(r.get('error') or '').strip()[-3000:]}\n```")
        for p in r.get("phases", []):
            if p.get("not_found"):
                notes.append(f"- {r['name']} {p['workload'].upper()} {p['phase']}: "
                             f"{p['not_found']} reads found no value")
        busy = max((v for v in (r.get("load_average") or {}).values() if v is not None), default=None)
        cores = (doc.get("machine") or {}).get("cores") or 0
        if busy is not None and cores and busy > 0.5 * cores + 1:
            notes.append(f"- {r['name']}: the machine was busy (1-minute load average {busy:.1f} "
                         f"on {cores} cores); treat its numbers with care")
    if notes:
        lines += ["## Notes", ""] + notes + [""]
    return "\n".join(lines)


def write_reports(doc: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Write ``results.json`` and ``report.md`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "results.json", "markdown": out_dir / "report.md"}
    paths["json"].write_text(json.dumps(doc, indent=1))
    paths["markdown"].write_text(render_markdown(doc))
    return paths


def load_json(path: Path) -> dict[str, Any]:
    doc = json.loads(Path(path).read_text())
    if doc.get("schema") != "bench.tiering/1":
        raise ValueError(f"{path}: not a tiering results document (schema {doc.get('schema')!r})")
    return doc
