"""One trial: one system x one workload, from an empty directory to a result dict.

A trial opens the system, loads ``record_count`` records, settles (flush/compact),
optionally warms up, runs the workload, and closes, recording phase summaries, the
system's statistics between phases, bytes on disk and peak RSS. It runs in-process
(:func:`run_trial`) or, as the CLI does, in a fresh interpreter so that memory is
attributable to the system (``python -m bench.trial SPEC.json RESULT.json``; see
:mod:`bench.isolation`).

The spec is a JSON-safe dict::

    {"system": "rocksdb", "stream": StreamConfig.to_dict(), "runner": RunnerConfig.to_dict(),
     "settle": "compact", "load_batch": 1000, "warmup_ops": 0, "max_seconds": null,
     "progress": true, "env": {"AWS_ACCESS_KEY_ID": "..."}}

The result never raises out of :func:`run_trial`: a failing system yields
``{"status": "failed", "error": "<traceback>"}`` alongside whatever was measured.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from bench import metrics
from bench.child import apply_env, child_main, progress, rss_now, run_session
from bench.driver import Session
from bench.proxy_probe import Probe, pipe_probe
from bench.runners import RunnerConfig, RunnerStats
from bench.workloads import StreamConfig

__all__ = ["run_trial", "main"]


def _stats_dict(s: RunnerStats) -> dict[str, Any]:
    return {"object_store": s.object_store, "caches": {k: list(v) for k, v in s.caches.items()},
            "raw": s.raw}


def run_trial(spec: dict[str, Any], probe: Probe | None = None) -> dict[str, Any]:
    """Run one trial as described by ``spec`` (see the module docstring).

    ``probe`` returns the delay proxy's cumulative counters (None: no proxy); the trial
    records them in ``proxy_at`` at ``start`` (before the open), ``before_run`` (after
    load, settle and warm-up) and ``after_run``, so each phase's requests can be set
    against the system's own counts over the same window (the close's are what the
    parent sees after ``after_run``)."""
    apply_env(spec)
    probe = probe or (lambda: None)
    stream = StreamConfig.from_dict(spec["stream"])
    rcfg = RunnerConfig.from_dict(spec["runner"])
    system = spec["system"]
    label = f"{system} {stream.workload.name.upper()}"
    show = bool(spec.get("progress", False))
    result: dict[str, Any] = {
        "system": system, "workload": stream.workload.name, "status": "ok", "error": None,
        "stream": stream.to_dict(), "timing": {}, "disk": {}, "stats": {},
        "proxy_at": {"start": probe()},
    }

    def measure(session: Session) -> None:
        with progress(show, stream.record_count, f"{label} load", "rec") as update:
            load = session.load(stream, int(spec.get("load_batch", 1000)), update)
        result["load"] = metrics.summarize_phase(load)

        t = time.perf_counter()
        result["settle"] = session.settle(spec.get("settle", "compact"))
        result["timing"]["settle_s"] = time.perf_counter() - t
        before = session.runner.stats()
        result["stats"]["after_load"] = _stats_dict(before)
        result["disk"]["after_load"] = metrics.disk_usage(rcfg.data_dir)
        result["rss"]["after_load"] = rss_now()

        warmup = int(spec.get("warmup_ops") or 0)
        if warmup:
            with progress(show, warmup, f"{label} warm-up", "op") as update:
                w = session.warm_up(stream, warmup, progress=update)
            result["warmup"] = {"items": w.items, "seconds": w.seconds}
            before = session.runner.stats()

        result["proxy_at"]["before_run"] = probe()
        with progress(show, stream.operation_count, f"{label} run", "op") as update:
            run = session.run(stream, "run", max_seconds=spec.get("max_seconds"), progress=update)
        result["run"] = metrics.summarize_phase(run)
        after = session.runner.stats()
        result["proxy_at"]["after_run"] = probe()
        result["stats"]["after_run"] = _stats_dict(after)
        result["caches"] = metrics.hit_ratios(
            {k: tuple(v) for k, v in (metrics.counter_delta(
                {k: list(v) for k, v in after.caches.items()},
                {k: list(v) for k, v in before.caches.items()}) or {}).items()})
        result["object_store_requests"] = {
            "load": before.object_store,  # cumulative at the end of load (+ warm-up)
            "run": metrics.counter_delta(after.object_store, before.object_store),
        }
        result["disk"]["after_run"] = metrics.disk_usage(rcfg.data_dir)
        result["rss"]["after_run"] = rss_now()

    run_session(system, rcfg, result, measure)
    if rcfg.data_dir.exists():
        result["disk"]["after_close"] = metrics.disk_usage(rcfg.data_dir)
    return result


def _run_child(spec: dict[str, Any]) -> dict[str, Any]:
    fds = spec.get("probe_fds")
    return run_trial(spec, pipe_probe(fds) if fds else None)


def main(argv: list[str] | None = None) -> int:
    """Child entry: ``python -m bench.trial SPEC.json RESULT.json``."""
    return child_main(argv, "bench.trial", _run_child)


if __name__ == "__main__":
    sys.exit(main())
