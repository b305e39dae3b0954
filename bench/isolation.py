"""Running a trial in a fresh interpreter, so its memory belongs to one system.

The parent writes the spec to a file, starts ``python -m bench.trial SPEC RESULT`` with
the project on ``PYTHONPATH``, samples the RSS of the child and all its descendants
(engine worker processes, a server the runner started) every 50 ms from the parent, and
reads the result file back. The child's stderr is passed through (progress bars).

A child that dies without writing a result (a crash in a C extension, a kill, a
timeout) yields a ``failed`` result with the exit status, never an exception.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.metrics import RssSampler

__all__ = ["run_isolated", "PROJECT_ROOT"]

#: The directory that holds the ``bench`` package (and its sibling packages).
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def run_isolated(spec: dict[str, Any], timeout: float | None = None, *,
                 module: str = "bench.trial", pass_fds: tuple[int, ...] = ()) -> dict[str, Any]:
    """Run :func:`bench.trial.run_trial` on ``spec`` in a child process; return its result
    with ``rss.tree_peak`` and ``rss.tree_peak_pss`` (sampled, bytes) and ``exit_code`` added.

    ``module`` is the child's entry (``python -m MODULE SPEC RESULT``; the tiering
    experiment uses ``bench.tiering``); ``pass_fds`` are descriptors the child inherits.
    """
    with tempfile.TemporaryDirectory(prefix="bench-trial-") as tmp:
        spec_path = Path(tmp) / "spec.json"
        result_path = Path(tmp) / "result.json"
        spec_path.write_text(json.dumps(spec))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        proc = subprocess.Popen(
            [sys.executable, "-m", module, str(spec_path), str(result_path)],
            cwd=str(PROJECT_ROOT), env=env, stdin=subprocess.DEVNULL, pass_fds=pass_fds,
        )
        timed_out = False
        with RssSampler(proc.pid) as sampler:
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.kill(proc.pid, signal.SIGKILL)
                code = proc.wait()
        if result_path.exists():
            result = json.loads(result_path.read_text())
        else:
            why = f"timed out after {timeout:g} s" if timed_out else f"exited with status {code} without a result"
            result = {"system": spec.get("system"), "workload": (spec.get("stream") or {}).get("workload"),
                      "status": "failed", "error": f"trial process {why}"}
        result.setdefault("rss", {})["tree_peak"] = sampler.peak
        result["rss"]["tree_peak_pss"] = sampler.peak_pss
        result["rss"]["samples"] = sampler.samples
        result["exit_code"] = code
        return result
