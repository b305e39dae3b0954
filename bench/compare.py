"""Running a side-by-side comparison: every (workload, system) trial, then one document.

:func:`run_comparison` checks the plan up front (known and importable systems, unique
keys), starts the object-store environment once, runs each trial in its own process
(or in-process with ``isolate=False``) in a fresh data directory, attaches what only the
parent can see (sampled tree RSS, proxy request counts, bucket usage, dollar estimate),
and returns the results document described in :mod:`bench.report`.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from bench import metrics
from bench.bucket import bucket_kinds
from bench.environment import Environment
from bench.isolation import PROJECT_ROOT, run_isolated
from bench.proxy_probe import ProbeServer
from bench.results import SCHEMA
from bench.runners import REGISTRY, RunnerConfig, availability, runner_class
from bench.units import format_bytes, format_count, format_us, parse_bytes
from bench.workloads import CORE_WORKLOADS, StreamConfig

__all__ = ["Plan", "run_comparison", "machine_info", "git_info", "resolve_budget"]

_UNIQUE_CHECK_LIMIT = 20_000_000


@dataclass
class Plan:
    """Everything a comparison needs; the CLI fills it from flags and presets."""

    systems: list[str]
    workloads: list[str]
    baseline: str
    records: int = 100_000
    ops: int = 100_000
    threads: int = 1
    distribution: str | None = None
    theta: float = 0.99
    key_size: int = 24
    value_size: int = 100
    compression_ratio: float = 0.5
    insert_order: str = "hashed"
    seed: int = 1
    load_batch: int = 1000
    settle: str = "compact"
    warmup_ops: int = 0
    max_seconds: float | None = None
    network: str = "local"
    delay_ms: float | None = None
    bandwidth: float | None = None
    s3_endpoint: str | None = None
    s3_server: str = "auto"
    #: Where the per-request delay is added: "proxy" or "store" (bench.environment).
    latency_model: str = "proxy"
    keep_objects: bool = False
    local_budget: str | None = None
    cache_size: int | None = 64 << 20
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    data_dir: Path | None = None
    keep_data: bool = False
    isolate: bool = True
    progress: bool = True
    trial_timeout: float | None = None
    repeat: int = 1
    #: Local SSD price for the monthly-cost view (bench.costs), $/GiB-month.
    ssd_usd_gb_month: float = 0.08

    def check(self) -> None:
        """Raise ValueError for anything that would fail later (before running anything)."""
        for s in self.systems:
            if s not in REGISTRY:
                raise ValueError(f"unknown system {s!r}; known: {', '.join(REGISTRY)}")
            ok, why = availability(s)
            if not ok:
                raise ValueError(f"system {s!r} is not usable here: {why}")
        if len(set(self.systems)) != len(self.systems):
            raise ValueError("a system is listed twice")
        if self.baseline not in self.systems:
            raise ValueError(f"baseline {self.baseline!r} is not among the systems {self.systems}")
        for w in self.workloads:
            if w not in CORE_WORKLOADS:
                raise ValueError(f"unknown workload {w!r}; choose from {', '.join(CORE_WORKLOADS)}")
        for s in self.options:
            if s not in self.systems:
                raise ValueError(f"--opt for {s!r}, which is not being run")
        if self.records < 1 or self.ops < 0 or self.threads < 1 or self.repeat < 1:
            raise ValueError("need records >= 1, ops >= 0, threads >= 1, repeat >= 1")

    def stream(self, workload: str) -> StreamConfig:
        return StreamConfig(CORE_WORKLOADS[workload], self.records, self.ops, self.threads,
                            self.distribution, self.key_size, self.value_size,
                            self.compression_ratio, self.theta, self.insert_order, self.seed)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["data_dir"] = str(self.data_dir) if self.data_dir else None
        return d


def resolve_budget(budget: str | None, records: int, key_size: int, value_size: int) -> int | None:
    """``10%`` of the raw data size (records x (key + value)), or a byte size, in bytes."""
    if not budget:
        return None
    if budget.strip().endswith("%"):
        return int(float(budget.strip()[:-1]) / 100.0 * records * (key_size + value_size))
    return parse_bytes(budget)


def git_info() -> dict[str, Any]:
    """The commit of the project tree and whether it has uncommitted changes."""
    try:
        commit = subprocess.run(["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(PROJECT_ROOT), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return {"commit": commit or None, "dirty": bool(dirty)}
    except Exception:
        return {"commit": None, "dirty": None}


def machine_info() -> dict[str, Any]:
    """CPU, memory, OS and Python of this machine, for the report header."""
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import psutil
        mem = psutil.virtual_memory().total
    except Exception:
        mem = None
    cores = os.cpu_count()
    info = {"cpu": cpu, "cores": cores, "memory_bytes": mem, "os": platform.platform(),
            "python": platform.python_version()}
    info["summary"] = f"{cores} cores ({cpu}), {format_bytes(mem)} RAM, {info['os']}, Python {info['python']}"
    return info


def _check_keys(plan: Plan, log: Callable[[str], None]) -> None:
    most = plan.records + max(plan.stream(w).expected_inserts for w in plan.workloads)
    if most > _UNIQUE_CHECK_LIMIT:
        log(f"note: key uniqueness not checked for {most:,} keys (limit {_UNIQUE_CHECK_LIMIT:,})")
        return
    plan.stream(plan.workloads[0]).key_space().check_unique(most)


def run_comparison(plan: Plan, command: str = "", log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run every trial of ``plan`` and return the results document."""
    plan.check()
    _check_keys(plan, log)
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "machine": machine_info(),
        "git": git_info(),
        "config": plan.to_dict(),
        "baseline": plan.baseline,
        "systems": list(plan.systems),
        "workloads": list(plan.workloads),
        "trials": [],
    }
    budget_bytes = resolve_budget(plan.local_budget, plan.records, plan.key_size, plan.value_size)
    data_root = Path(plan.data_dir or tempfile.gettempdir()) / "bench-data"
    data_root.mkdir(parents=True, exist_ok=True)
    total = len(plan.workloads) * len(plan.systems) * plan.repeat
    schedule = []
    for rep in range(plan.repeat):
        # Rotate the system order each repetition so no system always runs first.
        k = rep % len(plan.systems)
        order = plan.systems[k:] + plan.systems[:k]
        schedule += [(rep, w, s) for w in plan.workloads for s in order]
    with Environment(plan.network, delay_ms=plan.delay_ms, bandwidth=plan.bandwidth,
                     endpoint=plan.s3_endpoint, keep_objects=plan.keep_objects,
                     server=plan.s3_server, latency_model=plan.latency_model) as env:
        doc["environment"] = env.describe()
        if env.has_object_store:
            log(env.one_line())
        for n, (rep, w, s) in enumerate(schedule, 1):
            again = f" (repetition {rep + 1}/{plan.repeat})" if plan.repeat > 1 else ""
            log(f"[{n}/{total}] workload {w.upper()} ({CORE_WORKLOADS[w].mix()}, "
                f"{plan.stream(w).resolved_distribution}) on {s}{again}: "
                f"{format_count(plan.records)} records, {format_count(plan.ops)} operations, "
                f"{plan.threads} client(s)")
            result = _run_one(plan, env, rep, w, s, budget_bytes, data_root)
            doc["trials"].append(result)
            log("    " + _one_line(result))
    return doc


def _run_one(plan: Plan, env: Environment, rep: int, w: str, s: str, budget_bytes: int | None,
             data_root: Path) -> dict[str, Any]:
    """One trial in a fresh data directory (deleted afterwards unless ``keep_data``),
    with what only the parent can measure attached."""
    data_dir = Path(tempfile.mkdtemp(prefix=f"{s}-{w}-", dir=data_root))
    target = env.target(f"{s}-{w}-{rep}", store_latency=runner_class(s).takes_store_latency)
    rcfg = RunnerConfig(data_dir=data_dir, object_store=target,
                        local_budget=plan.local_budget if target else None,
                        local_budget_bytes=budget_bytes if target else None,
                        cache_size=plan.cache_size, options=plan.options.get(s, {}))
    spec = {"system": s, "stream": plan.stream(w).to_dict(), "runner": rcfg.to_dict(),
            "settle": plan.settle, "load_batch": plan.load_batch,
            "warmup_ops": plan.warmup_ops, "max_seconds": plan.max_seconds,
            "progress": plan.progress, "env": env.child_env()}
    before = env.proxy_counters()
    load_before = metrics.load_average()
    try:
        if plan.isolate:
            server = ProbeServer(env) if before is not None and not (target and target.latency_ms) else None
            try:
                if server is not None:
                    spec["probe_fds"] = list(server.child_fds)
                result = run_isolated(spec, plan.trial_timeout,
                                      pass_fds=server.child_fds if server else ())
            finally:
                if server is not None:
                    server.close()
        else:
            from bench.trial import run_trial
            result = run_trial(spec, env.proxy_counters)
            result["rss"]["note"] = "in-process: RSS includes earlier trials"
        result["load_average"] = {"before": load_before, "after": metrics.load_average()}
        after = env.proxy_counters()
        proxied = target is None or not target.latency_ms  # the store model skips the proxy
        if before is not None and after is not None and proxied:
            result["proxy"] = {k: after[k] - before[k] for k in after}
            result.setdefault("proxy_at", {})["end"] = after
        if target is not None:
            result["object_store_usage"] = env.usage(target)
            if s == "rocksmash" and result["object_store_usage"]["objects"]:
                result["bucket_kinds"] = bucket_kinds(target)  # what a month pays for
            env.clear(target)
            req = result.get("object_store_requests") or {}
            counts: dict[str, int] = {}
            for part in (req.get("load") or {}, req.get("run") or {}):
                for k, v in part.items():
                    counts[k] = counts.get(k, 0) + int(v)
            result["dollars"] = metrics.dollar_estimate(counts or None,
                                                        result["object_store_usage"]["bytes"])
    finally:
        if not plan.keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)
    result["data_dir"] = str(data_dir) if plan.keep_data else None
    if plan.repeat > 1:
        result["repeat"] = rep
    return result


def _one_line(r: dict[str, Any]) -> str:
    if r.get("status") != "ok":
        last = (r.get("error") or "").strip().splitlines()[-1:] or ["?"]
        return f"FAILED: {last[0]}"
    run, load = r.get("run", {}), r.get("load", {})
    rss = max(v for v in ((r.get("rss") or {}).get("tree_peak") or 0, (r.get("rss") or {}).get("peak_self") or 0))
    return (f"load {format_count(load.get('throughput'))} rec/s; run {format_count(run.get('throughput'))} ops/s, "
            f"p50 {format_us(run['latency']['all'].get('p50_us'))} us, p99 {format_us(run['latency']['all'].get('p99_us'))} us; "
            f"peak RSS {format_bytes(rss)}; not found {run.get('not_found', 0)}")
