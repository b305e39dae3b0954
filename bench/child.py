"""The life of a measured child process, shared by :mod:`bench.trial` (one system x one
workload) and :mod:`bench.tiering` (one configuration of the tiering experiment).

A child is started as ``python -m MODULE SPEC.json RESULT.json`` (:mod:`bench.isolation`)
and :func:`child_main` reads the spec, runs the module's function on it and writes the
result atomically. Inside, :func:`run_session` owns the system: it applies the spec's
environment variables, opens the runner (timed), hands the open session to the caller's
measurement, and closes it (timed) whatever happened; a failure anywhere becomes
``status: failed`` with the traceback, never an exception, and peak RSS and CPU seconds
are recorded at the end. :func:`progress` is the progress bar both show.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import metrics
from bench.driver import Session
from bench.runners import RunnerConfig, runner_class

__all__ = ["apply_env", "child_main", "describe_safely", "progress", "rss_now", "run_session"]


@contextlib.contextmanager
def progress(enabled: bool, total: int, desc: str, unit: str) -> Iterator[Callable[[int], None]]:
    """A tqdm bar on stderr (``update(n)`` inside the block), or a no-op when disabled."""
    if not enabled:
        yield lambda n: None
        return
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit=unit, unit_scale=True, leave=False,
               file=sys.stderr, mininterval=0.5, dynamic_ncols=True)
    try:
        yield bar.update
    finally:
        bar.close()


def rss_now() -> int:
    """This process's resident set size in bytes (0 if psutil is missing)."""
    try:
        import psutil
        return int(psutil.Process().memory_info().rss)
    except Exception:
        return 0


def describe_safely(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Call a describe()-like function; its failure must not fail the measurement."""
    try:
        return fn()
    except Exception as e:
        return {"error": repr(e)}


def apply_env(spec: dict[str, Any]) -> None:
    """Set the spec's environment variables (object-store credentials) in this process."""
    for k, v in (spec.get("env") or {}).items():
        os.environ[k] = str(v)


def _failed(result: dict[str, Any], e: BaseException, prefix: str = "") -> None:
    result["status"] = "failed"
    result["error"] = prefix + "".join(traceback.format_exception(e)).strip()


def run_session(system: str, rcfg: RunnerConfig, result: dict[str, Any],
                measure: Callable[[Session], None]) -> dict[str, Any]:
    """Open ``system`` on ``rcfg``, call ``measure(session)``, close it; fill ``result``
    (``status``/``error``, ``timing.open_s``/``close_s``, ``describe``, ``rss``,
    ``cpu_seconds``) and return it. Never raises: a failure is reported in ``result``."""
    result.setdefault("status", "ok")
    result.setdefault("error", None)
    timing = result.setdefault("timing", {})
    session: Session | None = None
    try:
        # Baseline: the interpreter, numpy and bench, before the system's library loads,
        # so it is the same for every system.
        result["rss"] = {"baseline": rss_now()}
        rcfg.data_dir.mkdir(parents=True, exist_ok=True)
        session = Session(runner_class(system)(rcfg))
        t = time.perf_counter()
        session.open()
        timing["open_s"] = time.perf_counter() - t
        result["describe"] = describe_safely(session.runner.describe)
        measure(session)
    except BaseException as e:  # report, don't crash: the other systems still run
        _failed(result, e)
    finally:
        if session is not None:
            t = time.perf_counter()
            try:
                session.close()
            except BaseException as e:
                if result["status"] == "ok":
                    _failed(result, e, "close failed: ")
            timing["close_s"] = time.perf_counter() - t
        result.setdefault("rss", {}).update({f"peak_{k}": v for k, v in metrics.self_peak_rss().items()})
        result["cpu_seconds"] = metrics.cpu_seconds()
    return result


def child_main(argv: list[str] | None, module: str, run: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
    """``python -m MODULE SPEC.json RESULT.json``: run ``run(spec)`` and write its result
    (to a temp file, then renamed, so the parent never reads half a result). Exit status
    0 when the result says ``ok``, 1 when it failed, 2 for a bad command line."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(f"usage: python -m {module} SPEC.json RESULT.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(args[0]).read_text())
    result = run(spec)
    tmp = args[1] + ".tmp"
    Path(tmp).write_text(json.dumps(result))
    os.replace(tmp, args[1])
    return 0 if result.get("status") == "ok" else 1
