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

import json
import os
import sys
import time
import traceback
from typing import Any, Callable

from bench import metrics
from bench.driver import Session
from bench.runners import RunnerConfig, RunnerStats, runner_class
from bench.workloads import StreamConfig

__all__ = ["run_trial", "main"]


def _stats_dict(s: RunnerStats) -> dict[str, Any]:
    return {"object_store": s.object_store, "caches": {k: list(v) for k, v in s.caches.items()},
            "raw": s.raw}


def _progress_bar(enabled: bool, total: int, desc: str, unit: str) -> tuple[Callable[[int], None], Callable[[], None]]:
    if not enabled:
        return (lambda n: None), (lambda: None)
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit=unit, unit_scale=True, leave=False,
               file=sys.stderr, mininterval=0.5, dynamic_ncols=True)
    return bar.update, bar.close


def _rss_now() -> int:
    try:
        import psutil
        return int(psutil.Process().memory_info().rss)
    except Exception:
        return 0


def run_trial(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one trial as described by ``spec`` (see the module docstring)."""
    for k, v in (spec.get("env") or {}).items():
        os.environ[k] = str(v)
    stream = StreamConfig.from_dict(spec["stream"])
    rcfg = RunnerConfig.from_dict(spec["runner"])
    system = spec["system"]
    label = f"{system} {stream.workload.name.upper()}"
    progress = bool(spec.get("progress", False))
    result: dict[str, Any] = {
        "system": system, "workload": stream.workload.name, "status": "ok", "error": None,
        "stream": stream.to_dict(), "timing": {}, "disk": {}, "stats": {},
    }
    session: Session | None = None
    try:
        # Baseline: the interpreter, numpy and bench, before the system's library loads,
        # so it is the same for every system.
        result["rss"] = {"baseline": _rss_now()}
        cls = runner_class(system)
        rcfg.data_dir.mkdir(parents=True, exist_ok=True)
        session = Session(cls(rcfg))
        t = time.perf_counter()
        session.open()
        result["timing"]["open_s"] = time.perf_counter() - t
        result["describe"] = metrics_safe(session.runner.describe)

        update, close = _progress_bar(progress, stream.record_count, f"{label} load", "rec")
        try:
            load = session.load(stream, int(spec.get("load_batch", 1000)), update)
        finally:
            close()
        result["load"] = metrics.summarize_phase(load)

        t = time.perf_counter()
        result["settle"] = session.settle(spec.get("settle", "compact"))
        result["timing"]["settle_s"] = time.perf_counter() - t
        before = session.runner.stats()
        result["stats"]["after_load"] = _stats_dict(before)
        result["disk"]["after_load"] = metrics.disk_usage(rcfg.data_dir)
        result["rss"]["after_load"] = _rss_now()

        warmup = int(spec.get("warmup_ops") or 0)
        if warmup:
            update, close = _progress_bar(progress, warmup, f"{label} warm-up", "op")
            try:
                w = session.warm_up(stream, warmup, progress=update)
            finally:
                close()
            result["warmup"] = {"items": w.items, "seconds": w.seconds}
            before = session.runner.stats()

        update, close = _progress_bar(progress, stream.operation_count, f"{label} run", "op")
        try:
            run = session.run(stream, "run", max_seconds=spec.get("max_seconds"), progress=update)
        finally:
            close()
        result["run"] = metrics.summarize_phase(run)
        after = session.runner.stats()
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
        result["rss"]["after_run"] = _rss_now()
    except BaseException as e:  # report, don't crash: other systems still run
        result["status"] = "failed"
        result["error"] = "".join(traceback.format_exception(e)).strip()
    finally:
        if session is not None:
            t = time.perf_counter()
            try:
                session.close()
            except BaseException as e:
                if result["status"] == "ok":
                    result["status"] = "failed"
                    result["error"] = "close failed: " + "".join(traceback.format_exception(e)).strip()
            result["timing"]["close_s"] = time.perf_counter() - t
        if rcfg.data_dir.exists():
            result["disk"]["after_close"] = metrics.disk_usage(rcfg.data_dir)
        result.setdefault("rss", {}).update({f"peak_{k}": v for k, v in metrics.self_peak_rss().items()})
        result["cpu_seconds"] = metrics.cpu_seconds()
    return result


def metrics_safe(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Call a describe()-like function; its failure must not fail the trial."""
    try:
        return fn()
    except Exception as e:
        return {"error": repr(e)}


def main(argv: list[str] | None = None) -> int:
    """Child entry: ``python -m bench.trial SPEC.json RESULT.json``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m bench.trial SPEC.json RESULT.json", file=sys.stderr)
        return 2
    with open(args[0]) as f:
        spec = json.load(f)
    result = run_trial(spec)
    tmp = args[1] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, args[1])
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
