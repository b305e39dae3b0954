"""The tiering experiment (``python -m bench tiering``): the cloud tier's own benchmark.

Question: with only a small share of the data on local disk and every object-store
request costing ``--delay-ms`` (20 ms: S3's first-byte latency), how close does tiered
rocksmash come to the same engine with everything local, how many object-store GETs do
its reads cost, how much local metadata does it keep, does its compaction-aware cache
keep the hit ratio across a full compaction, and how does it compare with SlateDB on the
same endpoint?

One invocation starts the environment once (a local S3 server, SeaweedFS where
installed, else moto, behind cloudtier's
DelayProxy, :class:`bench.environment.Environment`) and runs each *configuration*
(:data:`CONFIGURATIONS`) in turn, each in a fresh process (``python -m bench.tiering
SPEC RESULT``, started by :func:`bench.isolation.run_isolated`) with a fresh data
directory and bucket prefix, so its peak RSS and disk belong to it alone. A
configuration:

1. opens the system and loads ``--records`` records (write batches of 1000);
2. settles: flush + full compaction (SlateDB: memtable flush; it has no manual
   compaction) and records the *shape*: local and cloud table bytes, MetaCache bytes;
3. warms up: ``--warmup-ops`` operations of the first workload, not measured;
4. for each ``--workload`` (B, C): phase **before** (``--ops`` operations), then
   **compaction**: overwrite ``--rewrite`` of the records (chosen uniformly, new values)
   so that the compaction really rewrites the tables, and compact everything; then
   ``--after-warmup-ops`` operations, not measured (0 by default: "after" then includes
   the cold start of the emptied block cache); then phase **after** (``--ops``
   operations).

Every configuration issues exactly the same operations: the streams are seeded from
``--seed``, the workload and the phase (the *before* and *after* phases draw fresh keys
from the same zipfian, so the hot set is the same but the operations are not a replay).

Per phase it records throughput, latency percentiles, the system's own object-store
GETs (rocksmash's cloudtier meter, SlateDB's metrics) per 1,000 reads, the requests the
proxy carried (a system-independent count: the child asks the parent for the proxy's
counters at each phase boundary over a pair of pipes), the hit ratio of the local disk
cache (rocksmash's DataCache; SlateDB's object-store cache parts) and of the in-memory
block cache. :mod:`bench.tiering_report` turns the document into tables and ratios.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from bench import metrics
from bench.child import apply_env, child_main, progress, rss_now, run_session
from bench.compare import git_info, machine_info, resolve_budget
from bench.driver import Session
from bench.bucket import bucket_kinds
from bench.environment import Environment
from bench.proxy_probe import Probe, ProbeServer, pipe_probe
from bench.records import ValuePool
from bench.runners import RunnerConfig
from bench.runners.base import ObjectStoreTarget
from bench.units import format_bytes, format_count, format_us
from bench.workloads import CORE_WORKLOADS, StreamConfig

__all__ = ["SCHEMA", "CONFIGURATIONS", "TieringPlan", "run_tiering", "run_configuration", "main"]

SCHEMA = "bench.tiering/1"

#: name -> (system, rocksmash options, one line for --help and the report). The DataCache
#: size (``cache_size``) is added to the tiered ones from ``--cache-size``.
CONFIGURATIONS: dict[str, tuple[str, dict[str, Any], str]] = {
    "tiered": ("rocksmash", {"compaction_aware_cache": True},
               "rocksmash, cold levels in S3, compaction-aware DataCache (the default)"),
    "tiered-unaware": ("rocksmash", {"compaction_aware_cache": False},
                       "the same with compaction_aware_cache=False"),
    "tiered-one-budget": ("rocksmash", {"compaction_aware_cache": True, "cache_size": "rest"},
                          "tiered with one local budget (cache_size=\"rest\"): local_budget is "
                          "--local-budget plus --cache-size, shared by tables and caches"),
    "tiered-keys": ("rocksmash", {"compaction_aware_cache": True, "key_cache_size": "75%"},
                    "tiered with the key cache: 75% of --cache-size holds rows of cloud "
                    "tables (key_cache_size), the DataCache the rest"),
    "tiered-keys25": ("rocksmash", {"compaction_aware_cache": True, "key_cache_size": "25%"},
                      "tiered-keys with 25% of --cache-size to rows (the key_cache_size sweep)"),
    "tiered-keys50": ("rocksmash", {"compaction_aware_cache": True, "key_cache_size": "50%"},
                      "tiered-keys with 50% of --cache-size to rows (the key_cache_size sweep)"),
    "all-local": ("rocksmash-local", {},
                  "rocksmash with everything on local disk (the reference)"),
    "slatedb": ("slatedb", {},
                "SlateDB on the same endpoint and proxy, on-disk cache of the same local bytes"),
}

#: What runs without --config: all but tiered-one-budget and the tiered-keys ones (asked
#: for by name).
DEFAULT_CONFIGURATIONS = [c for c in CONFIGURATIONS if c != "tiered-one-budget"
                          and not c.startswith("tiered-keys")]

#: Records per write batch when loading and rewriting.
_BATCH = 1000


@dataclass
class TieringPlan:
    """Everything one run of the experiment needs; the CLI fills it from flags."""

    records: int = 1_000_000
    ops: int = 100_000
    warmup_ops: int = 100_000
    #: Operations after each full compaction, before the "after" phase, not measured: the
    #: cold start (the block cache emptied, every hot window fetched once) is left out, so
    #: "after" shows the steady state.
    after_warmup_ops: int = 0
    #: Client threads of the warm-up and measured phases (the load is one thread).
    threads: int = 1
    #: Local SSD price for the report's monthly cost, $/GiB-month.
    ssd_usd_gb_month: float = 0.08
    workloads: list[str] = field(default_factory=lambda: ["b", "c"])
    configurations: list[str] = field(default_factory=lambda: list(DEFAULT_CONFIGURATIONS))
    distribution: str = "zipfian"
    rewrite: float = 0.2
    local_budget: str = "10%"
    cache_size: str = "10%"
    delay_ms: float = 20.0
    #: Where the delay is added: "proxy" or "store" (bench.environment.LATENCY_MODELS).
    latency_model: str = "proxy"
    bandwidth: float | None = None
    s3_endpoint: str | None = None
    s3_server: str = "auto"
    max_seconds: float | None = 120.0
    timeout: float | None = None
    key_size: int = 24
    value_size: int = 100
    seed: int = 1
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    data_dir: Path | None = None
    keep_data: bool = False
    isolate: bool = True
    progress: bool = True

    def check(self) -> None:
        """Raise ValueError for anything that would fail later."""
        for w in self.workloads:
            if w not in CORE_WORKLOADS:
                raise ValueError(f"unknown workload {w!r}; choose from {', '.join(CORE_WORKLOADS)}")
        for c in self.configurations:
            if c not in CONFIGURATIONS:
                raise ValueError(f"unknown configuration {c!r}; choose from {', '.join(CONFIGURATIONS)}")
        if len(set(self.configurations)) != len(self.configurations) or not self.configurations:
            raise ValueError("list each configuration once")
        systems = {CONFIGURATIONS[c][0] for c in self.configurations}
        for s in self.options:
            if s not in systems:
                raise ValueError(f"--opt for {s!r}, which no configuration runs "
                                 f"(systems: {', '.join(sorted(systems))})")
        if (self.records < 1 or self.ops < 1 or self.warmup_ops < 0 or self.threads < 1
                or self.after_warmup_ops < 0):
            raise ValueError("need records >= 1, ops >= 1, warmup-ops >= 0, "
                             "after-warmup-ops >= 0, threads >= 1")
        if not 0 <= self.rewrite <= 1:
            raise ValueError(f"rewrite must be a share in [0, 1], got {self.rewrite}")

    def cache_bytes(self) -> int:
        """The DataCache size in bytes (``10%`` is of the raw data)."""
        return int(resolve_budget(self.cache_size, self.records, self.key_size, self.value_size) or 0)

    def budget_bytes(self) -> int:
        return int(resolve_budget(self.local_budget, self.records, self.key_size, self.value_size) or 0)

    def stream(self, workload: str, seed: int, ops: int) -> StreamConfig:
        return StreamConfig(CORE_WORKLOADS[workload], self.records, ops, self.threads, self.distribution,
                            self.key_size, self.value_size, seed=seed)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["data_dir"] = str(self.data_dir) if self.data_dir else None
        d["cache_bytes"] = self.cache_bytes()
        d["budget_bytes"] = self.budget_bytes()
        return d


def phase_seed(seed: int, workload_index: int, phase: str) -> int:
    """The stream seed of a phase, the same in every configuration."""
    if phase == "warmup":
        return seed
    if phase == "after-warmup":  # its own stream, apart from every measured phase's
        return seed + 1_000_003 + workload_index
    return seed + 1 + 2 * workload_index + (phase == "after")


# --- the child: one configuration ----------------------------------------------------



def _counters(runner: Any, probe: Probe) -> dict[str, int | None]:
    """The cumulative counters a phase is measured by (None: the system has no such thing):
    the runner's own read-path counters (``Runner.tier_counters``), all its object-store
    requests, and the requests the proxy carried."""
    st = runner.stats()
    store = st.object_store or {}
    out: dict[str, int | None] = {
        "requests": sum(v for k, v in store.items() if k in ("get", "put", "list", "head", "delete", "other")),
        **runner.tier_counters(st),
    }
    proxy = probe()
    out["proxy_requests"] = proxy["requests"] if proxy else None
    return out


def _delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if after.get(k) is None or before.get(k) is None else after[k] - before[k])
            for k in after}


def _ratio(hits: int | None, misses: int | None) -> float | None:
    if hits is None or misses is None or hits + misses == 0:
        return None
    return hits / (hits + misses)


def _local_hit_ratio(d: dict[str, Any]) -> float | None:
    """Share of data-block reads served without an object-store GET: every block read
    is a block-cache hit, or a miss answered locally (DataCache, a local table, SlateDB's
    disk cache), or a GET."""
    lookups = None if d.get("bc_hits") is None or d.get("bc_misses") is None else d["bc_hits"] + d["bc_misses"]
    if not lookups or d.get("gets") is None:
        return None
    return min(1.0, max(0.0, 1.0 - d["gets"] / lookups))


def _stored_hit_ratio(d: dict[str, Any]) -> float | None:
    """Share of block lookups answered by a block the cache held in stored form (decision
    0034; those hits are counted in the block cache's hits too)."""
    stored = d.get("bc_stored_hits")
    if stored is None or d.get("bc_hits") is None or d.get("bc_misses") is None:
        return None
    return _ratio(stored, d["bc_hits"] + d["bc_misses"] - stored)


def derived(summary: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
    """The per-phase numbers the report shows, from a phase summary and counter deltas."""
    reads = (summary.get("mix") or {}).get("read", 0)
    ops = summary.get("items", 0)
    lat = (summary.get("latency") or {}).get("all", {})

    def per_k(n: int | None, of: int) -> float | None:
        return None if n is None or not of else 1000.0 * n / of

    return {
        "throughput": summary.get("throughput"), "p50_us": lat.get("p50_us"),
        "p99_us": lat.get("p99_us"), "ops": ops, "reads": reads,
        "gets": d.get("gets"), "gets_per_1k_reads": per_k(d.get("gets"), reads),
        "proxy_requests": d.get("proxy_requests"),
        "proxy_requests_per_1k_ops": per_k(d.get("proxy_requests"), ops),
        "data_cache_hit_ratio": _ratio(d.get("dc_hits"), d.get("dc_misses")),
        "key_cache_hit_ratio": _ratio(d.get("kc_hits"), d.get("kc_misses")),
        "block_cache_hit_ratio": _ratio(d.get("bc_hits"), d.get("bc_misses")),
        "stored_hit_ratio": _stored_hit_ratio(d),
        "local_hit_ratio": _local_hit_ratio(d),
        "not_found": summary.get("not_found"), "stopped_early": summary.get("stopped_early"),
    }


def _shape(runner: Any, data_dir: Path) -> dict[str, Any]:
    """Where the bytes are: the data directory, and what the runner reports
    (``Runner.tier_shape``: local vs cloud tables, MetaCache, caches)."""
    return {"local_disk": metrics.disk_usage(data_dir)["allocated"], **runner.tier_shape(runner.stats())}


def run_configuration(spec: dict[str, Any], probe: Probe) -> dict[str, Any]:
    """Run one configuration (see the module docstring); never raises.

    ``spec``: ``{"name", "system", "runner": RunnerConfig dict, "plan": TieringPlan dict,
    "env": {...}}``. ``probe()`` returns the proxy's cumulative counters (or None).
    """
    apply_env(spec)
    plan = spec["plan"]
    name, system = spec["name"], spec["system"]
    rcfg = RunnerConfig.from_dict(spec["runner"])
    workloads = list(plan["workloads"])
    records, ops, seed = int(plan["records"]), int(plan["ops"]), int(plan["seed"])
    max_s = plan.get("max_seconds")
    show = bool(plan.get("progress"))

    def stream(workload: str, stream_seed: int, count: int, threads: int = 0) -> StreamConfig:
        return StreamConfig(CORE_WORKLOADS[workload], records, count,
                            threads or int(plan.get("threads", 1)), plan["distribution"],
                            plan["key_size"], plan["value_size"], seed=stream_seed)

    res: dict[str, Any] = {"name": name, "system": system, "status": "ok", "error": None,
                           "phases": [], "compactions": [], "shape": {}, "timing": {},
                           "stream": {"workload": workloads[0]}}

    def measure(session: Session) -> None:
        base = stream(workloads[0], seed, ops, threads=1)
        with progress(show, records, f"{name} load", "rec") as update:
            load = session.load(base, _BATCH, update)
        res["load"] = {"items": load.items, "seconds": load.seconds, "throughput": load.items / load.seconds}
        t = time.perf_counter()
        res["settle"] = session.settle("compact")
        res["timing"]["settle_s"] = time.perf_counter() - t
        res["shape"]["after_load"] = _shape(session.runner, rcfg.data_dir)

        warm = int(plan["warmup_ops"])
        if warm:
            before = _counters(session.runner, probe)
            with progress(show, warm, f"{name} warm-up", "op") as update:
                w = session.run(stream(workloads[0], phase_seed(seed, 0, "warmup"), warm), "warmup",
                                max_seconds=max_s, progress=update)
            summary = metrics.summarize_phase(w)
            res["warmup"] = derived(summary, _delta(_counters(session.runner, probe), before))

        for i, wl in enumerate(workloads):
            for phase in ("before", "after"):
                if phase == "after":
                    res["compactions"].append(_rewrite_and_compact(session, plan, i, wl, probe))
                    res["shape"][f"after_compaction_{wl}"] = _shape(session.runner, rcfg.data_dir)
                    settle = int(plan.get("after_warmup_ops") or 0)
                    if settle:
                        before = _counters(session.runner, probe)
                        with progress(show, settle, f"{name} {wl.upper()} after warm-up",
                                      "op") as update:
                            w = session.run(stream(wl, phase_seed(seed, i, "after-warmup"), settle),
                                            "after-warmup", max_seconds=max_s, progress=update)
                        res.setdefault("after_warmups", []).append(
                            {"workload": wl, **derived(metrics.summarize_phase(w),
                                                      _delta(_counters(session.runner, probe),
                                                             before))})
                cfg = stream(wl, phase_seed(seed, i, phase), ops)
                before = _counters(session.runner, probe)
                with progress(show, ops, f"{name} {wl.upper()} {phase}", "op") as update:
                    rec = session.run(cfg, phase, max_seconds=max_s, progress=update)
                summary = metrics.summarize_phase(rec)
                d = _delta(_counters(session.runner, probe), before)
                res["phases"].append({"workload": wl, "phase": phase, "summary": summary,
                                      "counters": d, **derived(summary, d)})
        res["shape"]["end"] = _shape(session.runner, rcfg.data_dir)
        # Why retired objects are still in the bucket at the close (rocksmash: grace, held
        # by a reader, pinned; Publication.waiting).
        raw = session.runner.stats().raw or {}
        res["waiting_deletion"] = (raw.get("cloud") or {}).get("waiting_deletion")
        res["rss"]["before_close"] = rss_now()

    return run_session(system, rcfg, res, measure)


def _rewrite_and_compact(session: Any, plan: dict[str, Any], index: int, workload: str,
                         probe: Probe) -> dict[str, Any]:
    """Overwrite ``rewrite`` of the records (uniform, no repeats, new values), then
    compact everything, so the full compaction really rewrites the tables."""
    records = int(plan["records"])
    n = int(round(float(plan["rewrite"]) * records))
    rng = np.random.default_rng([int(plan["seed"]), 7, index])
    keynums = np.sort(rng.choice(records, size=n, replace=False)) if n else np.zeros(0, np.int64)
    cfg = StreamConfig(CORE_WORKLOADS[workload], records, 1, 1, None, plan["key_size"],
                       plan["value_size"])
    keys = cfg.key_space()
    values = ValuePool(plan["value_size"], cfg.compression_ratio, seed=int(plan["seed"]) * 1009 + 31 + index)
    before = _counters(session.runner, probe)
    t0 = time.perf_counter()
    for lo in range(0, n, _BATCH):
        chunk = keynums[lo:lo + _BATCH]
        session.write(keys.keys(chunk), values.take(len(chunk)))
    t1 = time.perf_counter()
    what = session.settle("compact")
    t2 = time.perf_counter()
    d = _delta(_counters(session.runner, probe), before)
    return {"workload": workload, "rewritten": n, "rewrite_s": t1 - t0, "compact_s": t2 - t1,
            "what": what, "object_store_requests": d.get("requests"), "gets": d.get("gets"),
            "proxy_requests": d.get("proxy_requests"), "cache_fills": d.get("fills")}


# --- the parent: the whole experiment -------------------------------------------------

def _target_config(plan: TieringPlan, name: str, target: ObjectStoreTarget, data_dir: Path,
                   block_cache: int) -> RunnerConfig:
    system, extra, _ = CONFIGURATIONS[name]
    opts = dict(extra)
    cache = plan.cache_bytes()
    budget = plan.local_budget
    if system == "rocksmash" and extra.get("cache_size") == "rest":
        budget = str(plan.budget_bytes() + cache)  # the same local bytes as tables + cache
    elif system == "rocksmash":
        opts["cache_size"] = cache
    opts.update(plan.options.get(system, {}))
    # SlateDB: in-memory cache = rocksmash's block cache; on-disk cache = everything
    # rocksmash may keep on local disk (its table budget plus its DataCache).
    return RunnerConfig(data_dir=data_dir, object_store=target, local_budget=budget,
                        local_budget_bytes=plan.budget_bytes() + cache,
                        cache_size=block_cache if system == "slatedb" else None, options=opts)


def _block_cache_default() -> int:
    try:
        from rocksmash.options import Options
        return int(Options().block_cache_size)
    except Exception:
        return 64 << 20


def run_tiering(plan: TieringPlan, command: str = "", log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run every configuration of ``plan``; return the results document (schema
    :data:`SCHEMA`, rendered by :mod:`bench.tiering_report`)."""
    plan.check()
    if plan.records <= 20_000_000:
        plan.stream(plan.workloads[0], plan.seed, 1).key_space().check_unique(plan.records)
    block_cache = _block_cache_default()
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command, "machine": machine_info(), "git": git_info(),
        "config": {**plan.to_dict(), "block_cache_bytes": block_cache},
        "configurations": list(plan.configurations), "workloads": list(plan.workloads),
        "about": {c: CONFIGURATIONS[c][2] for c in plan.configurations},
        "results": [],
    }
    data_root = Path(plan.data_dir or tempfile.gettempdir()) / "bench-data"
    data_root.mkdir(parents=True, exist_ok=True)
    with Environment("s3", delay_ms=plan.delay_ms, bandwidth=plan.bandwidth,
                     endpoint=plan.s3_endpoint, server=plan.s3_server,
                     latency_model=plan.latency_model) as env:
        doc["environment"] = env.describe()
        log(env.one_line())
        for n, name in enumerate(plan.configurations, 1):
            log(f"[{n}/{len(plan.configurations)}] {name}: {CONFIGURATIONS[name][2]}; "
                f"{format_count(plan.records)} records, {format_count(plan.ops)} operations per phase")
            result = _run_one(plan, env, name, data_root, block_cache)
            doc["results"].append(result)
            log("    " + _one_line(result))
    return doc


def _run_one(plan: TieringPlan, env: Environment, name: str, data_root: Path,
             block_cache: int) -> dict[str, Any]:
    data_dir = Path(tempfile.mkdtemp(prefix=f"tiering-{name}-", dir=data_root))
    target = env.target(f"tiering-{name}", store_latency=CONFIGURATIONS[name][0] == "rocksmash")
    assert target is not None
    rcfg = _target_config(plan, name, target, data_dir, block_cache)
    spec: dict[str, Any] = {"name": name, "system": CONFIGURATIONS[name][0], "runner": rcfg.to_dict(),
                            "plan": plan.to_dict(), "env": env.child_env(),
                            "stream": {"workload": plan.workloads[0]}}
    before = env.proxy_counters()
    load_before = metrics.load_average()
    started = time.perf_counter()
    try:
        if plan.isolate:
            from bench.isolation import run_isolated

            server = ProbeServer(env)
            try:
                spec["probe_fds"] = list(server.child_fds)
                result = run_isolated(spec, plan.timeout, module="bench.tiering",
                                      pass_fds=server.child_fds)
            finally:
                server.close()
            result.setdefault("name", name)
        else:
            result = run_configuration(spec, env.proxy_counters)
            result["rss"]["note"] = "in-process: RSS includes earlier configurations"
        result.setdefault("timing", {})["wall_s"] = time.perf_counter() - started
        after = env.proxy_counters()
        if before is not None and after is not None:
            result["proxy"] = {k: after[k] - before[k] for k in after}
        result["object_store_usage"] = env.usage(target)
        if CONFIGURATIONS[name][0] == "rocksmash":
            result["bucket_kinds"] = bucket_kinds(target)
        env.clear(target)
        result["load_average"] = {"before": load_before, "after": metrics.load_average()}
        result["runner"] = {k: v for k, v in rcfg.to_dict().items() if k != "data_dir"}
    finally:
        if not plan.keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)
    result["data_dir"] = str(data_dir) if plan.keep_data else None
    return result


def _one_line(r: dict[str, Any]) -> str:
    if r.get("status") != "ok":
        last = (r.get("error") or "").strip().splitlines()[-1:] or ["?"]
        return f"FAILED: {last[0]}"
    parts = [f"{p['workload'].upper()} {p['phase']} {format_count(p['throughput'])} ops/s "
             f"(p99 {format_us(p['p99_us'])} us)" for p in r["phases"]]
    rss = max((r.get("rss") or {}).get("tree_peak") or 0, (r.get("rss") or {}).get("peak_self") or 0)
    return "; ".join(parts) + f"; peak RSS {format_bytes(rss)}"


def _run_child(spec: dict[str, Any]) -> dict[str, Any]:
    fds = spec.get("probe_fds")
    return run_configuration(spec, pipe_probe(fds) if fds else (lambda: None))


def main(argv: list[str] | None = None) -> int:
    """Child entry: ``python -m bench.tiering SPEC.json RESULT.json`` (the CLI is
    ``python -m bench tiering``)."""
    return child_main(argv, "bench.tiering", _run_child)


if __name__ == "__main__":
    sys.exit(main())
