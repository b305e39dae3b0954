"""The proxy's counters, asked for by a measured child process at its phase boundaries.

The delay proxy runs in the parent (:class:`bench.environment.Environment`); a trial or
tiering configuration runs in a child (:mod:`bench.isolation`). The child writes a line
on one pipe and reads the parent's answer, the proxy's cumulative counters as JSON, on
another: :func:`pipe_probe` is the child's side, :class:`ProbeServer` the parent's.
In-process runs call ``Environment.proxy_counters`` directly instead.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Callable

from bench.environment import Environment

__all__ = ["Probe", "ProbeServer", "pipe_probe"]

#: Returns the proxy's cumulative counters, or None when there is no proxy.
Probe = Callable[[], "dict[str, int] | None"]


def pipe_probe(fds: list[int]) -> Probe:
    """The child's side of the proxy-counter pipes: ask, then read the parent's answer."""
    ask = os.fdopen(fds[0], "w", buffering=1)
    answer = os.fdopen(fds[1], "r")

    def probe() -> dict[str, int] | None:
        ask.write("?\n")
        ask.flush()
        return json.loads(answer.readline() or "null")
    return probe


class ProbeServer:
    """The parent's side: answers each line from the child with the proxy's counters."""

    def __init__(self, env: Environment) -> None:
        self._env = env
        self._ask_r, self.ask_w = os.pipe()
        self.answer_r, self._answer_w = os.pipe()
        self._thread = threading.Thread(target=self._serve, name="proxy-probe", daemon=True)
        self._thread.start()

    @property
    def child_fds(self) -> tuple[int, int]:
        return (self.ask_w, self.answer_r)

    def _serve(self) -> None:
        with os.fdopen(self._ask_r, "r") as ask, os.fdopen(self._answer_w, "w", buffering=1) as answer:
            for _ in ask:
                answer.write(json.dumps(self._env.proxy_counters()) + "\n")
                answer.flush()

    def close(self) -> None:
        """After the child exited: close our copies of its ends, so the server sees EOF."""
        for fd in self.child_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._thread.join(timeout=5)
