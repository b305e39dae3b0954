"""PNG plots of a results document (matplotlib, Agg backend: no display needed).

* ``throughput.png``: run-phase ops/s per workload, one bar per system (the median over
  repetitions, whiskers at the lowest and highest), labelled with its ratio to the
  baseline.
* ``latency_cdf_<w>.png``: per workload, the CDF of run-phase latencies per system
  (solid: all operations; dotted: each operation type; all repetitions merged),
  log-scaled microseconds.
* ``timeline_<w>.png``: per workload, ops/s in one-second buckets per system (the
  repetition with the median throughput).
* ``cost_footprint.png`` (with a tiered and an all-local system, :mod:`bench.costs`):
  throughput, local disk (and the tiered system's bucket) and the monthly cost against
  the data size, side by side: tiered per workload at its run's request rates, all-local,
  the break-even marked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.metrics import cdf_from_encoded
from bench.results import comparison_rows, group_trials, merged_latency, representative
from bench.workloads import OP_NAMES

__all__ = ["write_plots", "plot_cost_footprint"]

_LINESTYLES = {"read": ":", "update": "--", "insert": "-.", "scan": (0, (1, 3)), "rmw": (0, (5, 2, 1, 2))}


def _ok_groups(doc: dict[str, Any]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(workload, system) -> its trials, for pairs whose every repetition succeeded."""
    return {k: ts for k, ts in group_trials(doc).items() if all(t.get("status") == "ok" for t in ts)}


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _colors(systems: list[str]) -> dict[str, Any]:
    cmap = plt.get_cmap("tab10")
    return {s: cmap(i % 10) for i, s in enumerate(systems)}


def plot_throughput(doc: dict[str, Any], path: Path, baseline: str | None = None) -> Path:
    rows = comparison_rows(doc, baseline)
    workloads = list(doc.get("workloads", []))
    systems = list(doc.get("systems", []))
    colors = _colors(systems)
    fig, ax = plt.subplots(figsize=(min(14.0, max(6.0, 0.5 * len(workloads) * (len(systems) + 1))), 4.5))
    width = 0.8 / max(1, len(systems))
    for j, s in enumerate(systems):
        xs: list[float] = []
        ys: list[float] = []
        labels: list[str] = []
        err: list[list[float]] = [[], []]
        for i, w in enumerate(workloads):
            r = next((r for r in rows if r["workload"] == w and r["system"] == s), None)
            if r is None or r["tput"] is None:
                continue
            xs.append(i + (j - (len(systems) - 1) / 2) * width)
            ys.append(r["tput"])
            err[0].append(r["tput"] - (r.get("tput_min") or r["tput"]))
            err[1].append((r.get("tput_max") or r["tput"]) - r["tput"])
            labels.append("" if r["tput_ratio"] is None else f"{r['tput_ratio']:.2f}x")
        repeated = any(e > 0 for e in err[0] + err[1])
        bars = ax.bar(xs, ys, width=width, label=s, color=colors[s],
                      yerr=err if repeated else None, capsize=3 if repeated else 0)
        for b, lab in zip(bars, labels):
            ax.annotate(lab, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center",
                        va="bottom", fontsize=7)
    ax.set_xticks(range(len(workloads)), [w.upper() for w in workloads])
    ax.set_xlabel("workload")
    ax.set_ylabel("operations / s (run phase)")
    ax.set_title(f"Throughput (labels: ratio to {baseline or doc.get('baseline')})")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def plot_latency_cdf(doc: dict[str, Any], workload: str, path: Path) -> Path | None:
    groups = _ok_groups(doc)
    systems = [s for s in doc.get("systems", []) if (workload, s) in groups]
    if not systems:
        return None
    colors = _colors(list(doc.get("systems", [])))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for s in systems:
        for op in ("all",) + OP_NAMES:
            enc = (merged_latency(groups[(workload, s)], op) or {}).get("hdr")
            if not enc:
                continue
            x, y = cdf_from_encoded(enc)
            style = "-" if op == "all" else _LINESTYLES[op]
            ax.plot(x, y, linestyle=style, color=colors[s], linewidth=1.6 if op == "all" else 1.0,
                    label=f"{s} {op}")
    ax.set_xscale("log")
    ax.set_xlabel("latency (µs, log scale)")
    ax.set_ylabel("fraction of operations")
    ax.set_title(f"Workload {workload.upper()}: latency CDF")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_timeline(doc: dict[str, Any], workload: str, path: Path) -> Path | None:
    groups = _ok_groups(doc)
    systems = [s for s in doc.get("systems", []) if (workload, s) in groups]
    if not systems:
        return None
    colors = _colors(list(doc.get("systems", [])))
    fig, ax = plt.subplots(figsize=(7, 4))
    for s in systems:
        rep = representative(groups[(workload, s)]) or {}
        tl = (rep.get("run") or {}).get("timeline") or []
        ax.plot(range(1, len(tl) + 1), tl, marker="." if len(tl) < 30 else None, color=colors[s], label=s)
    ax.set_xlabel("second of the run phase")
    ax.set_ylabel("operations / s")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Workload {workload.upper()}: throughput over time")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def _bars(ax: Any, doc: dict[str, Any], values: dict[tuple[str, str], float], colors: dict[str, Any],
          labels: dict[tuple[str, str], str] | None = None) -> None:
    workloads, systems = list(doc.get("workloads", [])), list(doc.get("systems", []))
    width = 0.8 / max(1, len(systems))
    for j, s in enumerate(systems):
        pts = [(i + (j - (len(systems) - 1) / 2) * width, values[(w, s)], (labels or {}).get((w, s), ""))
               for i, w in enumerate(workloads) if (w, s) in values]
        if not pts:
            continue
        bars = ax.bar([p[0] for p in pts], [p[1] for p in pts], width=width, label=s, color=colors[s])
        for b, (_, _, lab) in zip(bars, pts):
            if lab:
                ax.annotate(lab, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center",
                            va="bottom", fontsize=6)
    ax.set_xticks(range(len(workloads)), [w.upper() for w in workloads])
    ax.grid(axis="y", alpha=0.3)


def plot_cost_footprint(doc: dict[str, Any], path: Path) -> Path | None:
    """Throughput, local disk and monthly cost vs data size, side by side (the demo's
    picture); None without a tiered and an all-local system."""
    from bench.costs import GIB, workload_costs

    rows = workload_costs(doc)
    if not rows:
        return None
    tiered, local = rows[0]["tiered"], rows[0]["all_local"]
    colors = _colors(list(doc.get("systems", [])))
    cmp = {(r["workload"], r["system"]): r for r in comparison_rows(doc, local)}
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(15, 4.6))
    tput = {k: r["tput"] for k, r in cmp.items() if r.get("tput")}
    _bars(a1, doc, tput, colors, {k: f"{r['tput_ratio']:.2f}x" for k, r in cmp.items()
                                  if r.get("tput_ratio") is not None})
    a1.set_ylabel("operations / s (run phase)")
    a1.set_title(f"Throughput (labels: x {local})", fontsize=10)
    a1.legend(fontsize=7)
    disk = {k: (r.get("disk") or 0) / (1 << 20) for k, r in cmp.items() if r.get("disk")}
    _bars(a2, doc, disk, colors, {k: f"{r['disk_ratio']:.2f}x" for k, r in cmp.items()
                                  if r.get("disk_ratio") is not None})
    a2.set_ylabel("MiB on local disk after the run")
    a2.set_title(f"Local disk (labels: x {local})\n{tiered}'s bucket: dotted", fontsize=10)
    for r in rows:  # the tiered system's bucket, as a marker above its workload
        i = list(doc.get("workloads", [])).index(r["workload"])
        a2.plot([i - 0.4, i + 0.4], [r["tiered_object_bytes"] / (1 << 20)] * 2, ":",
                color=colors[tiered], linewidth=1.5)
    sizes = [GIB * 2 ** (k / 4) for k in range(0, 4 * 14 + 1)]  # 1 GiB .. 16 TiB
    xs = [x / GIB for x in sizes]
    a3.plot(xs, [rows[0]["now"]["all_local"].total / rows[0]["data_bytes"] * x for x in sizes],
            color=colors[local], linewidth=2, label=f"{local} (all-local SSD)")
    styles = ["-", "--", "-.", ":", (0, (5, 1)), (0, (1, 1))]
    for n, r in enumerate(rows):
        t0, req = r["now"]["tiered"], r["now"]["tiered"].requests
        ys = [t0.storage / r["data_bytes"] * x + req for x in sizes]
        a3.plot(xs, ys, linestyle=styles[n % len(styles)], color=colors[tiered],
                label=f"{tiered} {r['workload'].upper()} (${req:,.2f}/month of requests)")
        be = r["break_even_bytes"]
        if be and sizes[0] <= be <= sizes[-1]:
            y = r["at"]["1 TiB"]["all_local"].total / (1024 * GIB) * be
            a3.plot([be / GIB], [y], "o", color=colors[tiered])
            a3.annotate(f"{be / GIB:,.0f} GiB", (be / GIB, y), fontsize=6, xytext=(3, -9),
                        textcoords="offset points")
    a3.set_xscale("log")
    a3.set_yscale("log")
    a3.set_xlabel("data (GiB, log)")
    a3.set_ylabel("$ per month (log)")
    a3.set_title("Monthly cost vs data size at this run's request rates\n(dots: break-even)",
                 fontsize=10)
    a3.grid(alpha=0.3, which="both")
    a3.legend(fontsize=6)
    return _save(fig, path)


def write_plots(doc: dict[str, Any], out_dir: Path, baseline: str | None = None) -> list[Path]:
    """Write every plot into ``out_dir``; return the paths written."""
    paths: list[Path] = []
    if any(t.get("status") == "ok" for t in doc.get("trials", [])):
        cost = plot_cost_footprint(doc, out_dir / "cost_footprint.png")
        if cost is not None:
            paths.append(cost)
        paths.append(plot_throughput(doc, out_dir / "throughput.png", baseline))
    for w in doc.get("workloads", []):
        for fn, name in ((plot_latency_cdf, f"latency_cdf_{w}.png"), (plot_timeline, f"timeline_{w}.png")):
            p = fn(doc, w, out_dir / name)
            if p is not None:
                paths.append(p)
    return paths
