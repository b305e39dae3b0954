"""ChildServer: a local S3 endpoint run as a child process, found on loopback ports that
were free, ready within a deadline, and stopped by its pid.

Subclasses say how to start their server (:meth:`ChildServer._command`) and what "ready"
means (:meth:`ChildServer._probe`); this class owns the process: it picks the ports
through the subclass, retries a start whose port was taken meanwhile, waits for the
probe with a deadline, and on :meth:`stop` (also from ``__exit__`` when a test fails,
and at interpreter exit for a server nobody stopped) sends SIGTERM to the recorded pid,
then SIGKILL after ``stop_timeout_s``, and reaps it.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import signal
import subprocess
import tempfile
import time
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["ChildServer", "ConditionalPuts"]

# Credentials the local servers accept; deliberately fake, so real AWS credentials from
# the environment are never sent anywhere.
FAKE_KEY = "cloudtier-test"
FAKE_SECRET = "cloudtier-test-secret"

S = TypeVar("S", bound="ChildServer")


@dataclasses.dataclass(frozen=True)
class ConditionalPuts:
    """How a server evaluates conditional PUTs, as measured (see docs/cloudtier.md).

    ``*_atomic`` is True when the check and the write are one step, so of many racing
    writers with the same condition exactly one wins. False means check-then-act: a
    lone writer sees the condition honoured, racing writers may all win.
    """

    if_none_match_atomic: bool
    if_match_atomic: bool


# Servers still running when the interpreter exits (a test run interrupted, a script
# that forgot stop()) are stopped then, so no server outlives its parent's exit.
# Strong references: a server nobody holds any more must still be found and stopped.
_running: set[ChildServer] = set()


@atexit.register
def _stop_leftovers() -> None:
    for server in list(_running):
        server.stop()


class ChildServer:
    """Base of the local S3 servers (see the module docstring).

    ``endpoint_url`` is the S3 endpoint; :meth:`store_options` gives ``open_store``
    options for it (endpoint, region, the fake credentials the server was started with).
    """

    #: Shown in errors and reprs.
    kind = "server"
    #: Measured conditional-PUT behaviour; subclasses declare theirs.
    conditional_puts = ConditionalPuts(if_none_match_atomic=False, if_match_atomic=False)
    #: Order of a listing: ``"bytes"`` (S3's UTF-8 byte order) or ``"segments"`` (a
    #: directory walk: keys sorted by their ``/``-separated segments, so ``a/b`` comes
    #: before ``a-b``).
    list_order = "bytes"

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0,
                 start_timeout_s: float = 30.0, stop_timeout_s: float = 5.0) -> None:
        self.host = host
        self._requested_port = port
        self.port = 0
        self._start_timeout_s = start_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    # --- what subclasses provide ------------------------------------------------------

    def _command(self) -> tuple[list[str], dict[str, str] | None]:
        """Pick the ports (set ``self.port``, the S3 port) and return argv and the
        environment (None: inherit ours)."""
        raise NotImplementedError

    def _probe(self) -> bool:
        """One readiness check; True once the server answers S3 requests."""
        raise NotImplementedError

    def _after_stop(self) -> None:
        """Clean up what the dead process left behind (called by :meth:`stop`)."""

    # --- the process ------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (None before start / after stop)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def endpoint_url(self) -> str:
        if not self.port:
            raise RuntimeError(f"{type(self).__name__} is not running")
        return f"http://{self.host}:{self.port}"

    def store_options(self) -> dict[str, Any]:
        """``open_store`` options for an ``s3://`` store on this server."""
        return {
            "endpoint_url": self.endpoint_url,
            "region": "us-east-1",
            "access_key": FAKE_KEY,
            "secret_key": FAKE_SECRET,
        }

    def start(self: S) -> S:
        """Start the server; return once it answers, or raise RuntimeError quoting its
        output (the server is stopped then)."""
        if self._proc is not None:
            raise RuntimeError(f"{type(self).__name__} already started")
        # A free port can be taken between our probe and the server's bind: try a few.
        tries = 1 if self._requested_port else 3
        for attempt in range(tries):
            argv, env = self._command()
            self._log = tempfile.TemporaryFile()
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=env,
                # Own process group: a Ctrl-C meant for pytest does not kill it first.
                start_new_session=True,
            )
            _running.add(self)
            try:
                self._wait_until_ready()
                return self
            except Exception as e:
                output = self._output()
                where = f"{self.host}:{self.port}"
                self.stop()
                if attempt + 1 == tries or "address already in use" not in output.lower():
                    raise RuntimeError(f"{self.kind} on {where} did not start ({e}):\n{output}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self) -> None:
        """Terminate the server by pid (SIGTERM, then SIGKILL) and reap it. Idempotent."""
        proc, self._proc = self._proc, None
        _running.discard(self)
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(self._stop_timeout_s)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()
            self._after_stop()
        if self._log is not None:
            self._log.close()
            self._log = None
        self.port = 0

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid} at {self.endpoint_url}" if self._proc else "stopped"
        return f"{type(self).__name__}({state})"

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self._start_timeout_s
        assert self._proc is not None
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"exited with status {self._proc.returncode}")
            try:
                if self._probe():
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"no S3 answer within {self._start_timeout_s}s")
            time.sleep(0.05)

    def _output(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        output: bytes = self._log.read()
        return output.decode("utf-8", "replace")[-4000:]
