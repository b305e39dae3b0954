"""The results document of a YCSB comparison, read: trials grouped per (workload,
system), repetitions merged, and the comparison rows with their ratios to the baseline.

:mod:`bench.report` renders these rows (table, Markdown) and :mod:`bench.plots` draws
them; both import from here, neither from the other. The document::

    {"schema": "bench.ycsb/1", "created": ..., "command": ..., "machine": {...},
     "config": {...}, "environment": {...}, "baseline": "rocksdb",
     "systems": [...], "workloads": [...], "trials": [<bench.trial result>, ...]}

Repetitions (``--repeat``): a (workload, system) pair may have several trials. A row then
shows the median of each metric over the repetitions, latency percentiles from all of
their histograms added together, and the throughput spread; a pair with any failed
repetition is reported as failed.

Ratios: every row is compared with the baseline system's row of the same workload.
``x base`` = this system's value / the baseline's. For throughput higher is better; for
latency, memory, disk, requests and dollars lower is better. A ratio is ``-`` when
either side is missing, failed, or zero.
"""

from __future__ import annotations

import math
from statistics import median
from typing import Any

from bench.metrics import merge_encoded

__all__ = ["SCHEMA", "ratio", "comparison_rows", "group_trials", "representative", "merged_latency",
           "get_path", "merge_counts", "total_requests", "request_check", "describe_request_check"]

SCHEMA = "bench.ycsb/1"


def ratio(value: float | None, base: float | None) -> float | None:
    """``value / base``, or None when either is missing/NaN or ``base`` is zero."""
    if value is None or base is None:
        return None
    if isinstance(value, float) and math.isnan(value) or isinstance(base, float) and math.isnan(base):
        return None
    if base == 0:
        return None
    return value / base


def get_path(d: Any, *path: str) -> Any:
    """``d[path[0]][path[1]]...``, or None where a step is missing."""
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def _peak_rss(trial: dict[str, Any]) -> int | None:
    rss = trial.get("rss") or {}
    candidates = [rss.get("tree_peak"), rss.get("peak_self")]
    vals = [v for v in candidates if isinstance(v, int) and v > 0]
    return max(vals) if vals else None


def total_requests(counts: dict[str, int] | None) -> int | None:
    """All object-store requests in a per-kind count (bytes entries left out); None if none."""
    if not counts:
        return None
    return sum(v for k, v in counts.items() if k in ("get", "put", "list", "head", "delete", "other"))


#: Request kinds the delay proxy tells apart (cloudtier.proxy.REQUEST_KINDS less
#: ``continuation``, which is a request body, not a request).
_PROXY_KINDS = ("get", "put", "head", "delete", "list", "post", "other")


def _proxy_delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after.get(f"http_{k}", 0) - before.get(f"http_{k}", 0) for k in _PROXY_KINDS}


def request_check(trial: dict[str, Any]) -> dict[str, Any] | None:
    """The system's own object-store requests against the HTTP requests the delay proxy
    carried over the same window (the trial's open to the end of its run), by kind; and
    what the proxy saw besides: the close's requests, and the bursts that were no
    request. None without the proxy's counters at the trial's boundaries (``proxy_at``).

    Keys: ``own`` and ``proxy`` (totals over the window), ``by_kind`` ({kind: (own,
    proxy)} for kinds either side counted), ``agree``, ``close`` (requests after the run:
    the close), ``close_by_kind``, ``continuations`` (bursts without a request line: a
    PUT's body sent after ``100 Continue``, which botocore asks for on every PUT, or a
    body resumed after a pause), ``bursts`` (every delayed burst of the trial, the
    proxy's ``requests`` counter)."""
    at = trial.get("proxy_at") or {}
    if not all(at.get(k) for k in ("start", "after_run", "end")):
        return None
    own_counts = merge_counts(get_path(trial, "object_store_requests", "load"),
                              get_path(trial, "object_store_requests", "run")) or {}
    seen = _proxy_delta(at["after_run"], at["start"])
    close = _proxy_delta(at["end"], at["after_run"])
    kinds = [k for k in _PROXY_KINDS if seen.get(k) or own_counts.get(k)]
    by_kind = {k: (int(own_counts.get(k, 0)), seen[k]) for k in kinds}
    own = sum(o for o, _ in by_kind.values())
    ahead = [p - o for o, p in by_kind.values()]
    return {"own": own, "proxy": sum(seen.values()), "by_kind": by_kind,
            "agree": all(d == 0 for d in ahead),
            # The proxy counts a request when its first bytes pass, the system's meter when
            # the call returns (a worker's when its job ends): requests still in flight when
            # the run ended are the proxy's alone at that moment.
            "in_flight": sum(ahead) if ahead and min(ahead) >= 0 else None,
            "close": sum(close.values()), "close_by_kind": {k: n for k, n in close.items() if n},
            "continuations": at["end"].get("http_continuation", 0) - at["start"].get("http_continuation", 0),
            "bursts": at["end"].get("requests", 0) - at["start"].get("requests", 0)}


def describe_request_check(c: dict[str, Any]) -> str:
    """:func:`request_check` in one sentence."""
    def kinds(d: dict[str, int]) -> str:
        return ", ".join(f"{n:,} {k.upper()}" for k, n in d.items() if n) or "none"

    if c["agree"]:
        head = (f"the system counted {c['own']:,} object-store requests from its open to the end "
                f"of the run, and the proxy carried the same {c['proxy']:,} HTTP requests "
                f"({kinds({k: p for k, (_, p) in c['by_kind'].items()})})")
    elif c.get("in_flight"):
        diff = kinds({k: p - o for k, (o, p) in c["by_kind"].items()})
        head = (f"the system counted {c['own']:,} object-store requests from its open to the end "
                f"of the run, and the proxy carried the same but for {diff} still in flight "
                f"when the run ended (the proxy counts a request when it starts, the system "
                f"when it returns, a worker's when its job ends)")
    else:
        diff = "; ".join(f"{k.upper()} {o:,} vs {p:,}" for k, (o, p) in c["by_kind"].items() if o != p)
        head = (f"the system counted {c['own']:,} object-store requests from its open to the end "
                f"of the run, the proxy carried {c['proxy']:,} HTTP requests (system vs proxy: {diff})")
    return (f"{head}; the close made {c['close']:,} more ({kinds(c['close_by_kind'])}); the proxy's "
            f"{c['bursts']:,} delayed bursts also include {c['continuations']:,} request bodies sent "
            f"after `100 Continue` (botocore asks for it on every PUT) or after a pause, which "
            f"are not requests")


def merge_counts(*parts: dict[str, int] | None) -> dict[str, int] | None:
    """Per-key sums of several counts (None when all are empty)."""
    out: dict[str, int] = {}
    for part in parts:
        for k, v in (part or {}).items():
            out[k] = out.get(k, 0) + int(v)
    return out or None


def _metrics(trial: dict[str, Any]) -> dict[str, Any]:
    """The comparable numbers of one trial (None where not measured)."""
    ok = trial.get("status") == "ok"
    run_counts = get_path(trial, "object_store_requests", "run")
    total_counts = merge_counts(get_path(trial, "object_store_requests", "load"), run_counts)
    return {
        "ok": ok,
        "load_tput": get_path(trial, "load", "throughput") if ok else None,
        "tput": get_path(trial, "run", "throughput") if ok else None,
        "p50": get_path(trial, "run", "latency", "all", "p50_us") if ok else None,
        "p99": get_path(trial, "run", "latency", "all", "p99_us") if ok else None,
        "p999": get_path(trial, "run", "latency", "all", "p999_us") if ok else None,
        "rss": _peak_rss(trial),
        "disk": get_path(trial, "disk", "after_run", "allocated"),
        "stored": get_path(trial, "object_store_usage", "bytes"),
        "requests": get_path(trial, "proxy", "requests") if trial.get("proxy") else total_requests(total_counts),
        "run_requests": total_requests(run_counts),
        "usd": get_path(trial, "dollars", "requests_usd"),
        "not_found": get_path(trial, "run", "not_found"),
    }


def group_trials(doc: dict[str, Any]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(workload, system) -> its trials (one per repetition), in run order."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for t in doc.get("trials", []):
        out.setdefault((t["workload"], t["system"]), []).append(t)
    return out


def representative(trials: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The successful trial with the median run throughput (None if none succeeded)."""
    ok = sorted((t for t in trials if t.get("status") == "ok"),
                key=lambda t: get_path(t, "run", "throughput") or 0.0)
    return ok[(len(ok) - 1) // 2] if ok else None


def merged_latency(trials: list[dict[str, Any]], op: str = "all") -> dict[str, Any] | None:
    """Run-phase latency of one operation type over every successful trial given."""
    enc = [e for t in trials if t.get("status") == "ok"
           for e in [get_path(t, "run", "latency", op, "hdr")] if e]
    if not enc:
        return None
    if len(enc) == 1:
        return get_path(next(t for t in trials if get_path(t, "run", "latency", op, "hdr") == enc[0]),
                    "run", "latency", op)
    return merge_encoded(enc)


def _group_metrics(trials: list[dict[str, Any]]) -> dict[str, Any]:
    per = [_metrics(t) for t in trials]
    out: dict[str, Any]
    if not all(m["ok"] for m in per):
        failed = next(t for t in trials if t.get("status") != "ok")
        out = {k: None for k in per[0]}
        out.update(ok=False, repeats=len(trials), status=failed.get("status") or "failed",
                   error=failed.get("error"))
        return out
    out = {}
    for key in per[0]:
        vals = [m[key] for m in per if isinstance(m[key], (int, float)) and not isinstance(m[key], bool)]
        out[key] = median(vals) if vals else None
    out["ok"] = True
    lat = merged_latency(trials) or {}
    out["p50"], out["p99"], out["p999"] = lat.get("p50_us"), lat.get("p99_us"), lat.get("p999_us")
    tputs = [m["tput"] for m in per if m["tput"] is not None]
    out["repeats"] = len(trials)
    out["tput_min"] = min(tputs) if tputs else None
    out["tput_max"] = max(tputs) if tputs else None
    out["tput_spread"] = ((max(tputs) - min(tputs)) / 2 / median(tputs)
                          if len(tputs) > 1 and median(tputs) else None)
    out["status"], out["error"] = "ok", None
    return out


def comparison_rows(doc: dict[str, Any], baseline: str | None = None) -> list[dict[str, Any]]:
    """One row per (workload, system), in the document's order, with ratio columns.

    Each row has the metrics of :func:`_metrics` (medians over repetitions), ``repeats``,
    ``tput_min``/``tput_max``/``tput_spread`` (half the range over the median), and
    ``<metric>_ratio`` for ``load_tput``, ``tput``, ``p50``, ``p99``, ``rss``, ``disk``,
    ``stored``, ``requests``, ``usd``, and ``is_baseline``.
    """
    base_name = str(baseline or doc.get("baseline"))
    groups = group_trials(doc)
    workloads = doc.get("workloads") or sorted({w for w, _ in groups})
    systems = doc.get("systems") or sorted({s for _, s in groups})
    rows = []
    for w in workloads:
        base = _group_metrics(groups[(w, base_name)]) if (w, base_name) in groups else {}
        for s in systems:
            if (w, s) not in groups:
                continue
            m = _group_metrics(groups[(w, s)])
            row: dict[str, Any] = {"workload": w, "system": s, "is_baseline": s == base_name, **m}
            for key in ("load_tput", "tput", "p50", "p99", "rss", "disk", "stored", "requests", "usd"):
                row[f"{key}_ratio"] = ratio(m.get(key), base.get(key))
            rows.append(row)
    return rows
