"""MotoServer: a throwaway S3-compatible endpoint for tests, the demo and benchmarks.

moto's server mode (``python -m moto.server``, from ``moto[server]``) speaks the S3 REST
API over HTTP, including ranged GETs, ListObjectsV2 and conditional PUTs, and keeps
everything in memory. :class:`MotoServer` runs it as a child process on 127.0.0.1 on a
free port, waits until it answers HTTP, and stops it by its process id::

    with MotoServer() as moto:
        store = open_store("s3://bucket/db", create_bucket=True, **moto.store_options())

moto accepts any credentials; :meth:`MotoServer.store_options` supplies dummy ones so no
real AWS credentials from the environment are ever sent anywhere.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from types import TracebackType
from typing import Any

__all__ = ["MotoServer", "free_port"]

# Credentials moto accepts; deliberately fake.
_FAKE_KEY = "cloudtier-test"
_FAKE_SECRET = "cloudtier-test-secret"


# Servers still running when the interpreter exits (a test run interrupted, a script
# that forgot stop()) are stopped then, so no moto process outlives its parent's exit.
# Strong references: a server nobody holds any more must still be found and stopped.
_running: set[MotoServer] = set()


@atexit.register
def _stop_leftovers() -> None:
    for server in list(_running):
        server.stop()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it; a race is possible)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class MotoServer:
    """moto's S3 server in a child process on ``host`` (127.0.0.1) and a free port.

    ``start()`` (or entering the ``with`` block) returns once the server answers HTTP;
    ``stop()`` sends SIGTERM to the recorded pid, then SIGKILL after ``stop_timeout_s``,
    and reaps it. The server's output goes to a temp file that is quoted if it fails to
    start.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        start_timeout_s: float = 30.0,
        stop_timeout_s: float = 5.0,
    ) -> None:
        self.host = host
        self._requested_port = port
        self.port = 0
        self._start_timeout_s = start_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (None before start / after stop)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def endpoint_url(self) -> str:
        if not self.port:
            raise RuntimeError("MotoServer is not running")
        return f"http://{self.host}:{self.port}"

    def store_options(self) -> dict[str, Any]:
        """``open_store`` options for an ``s3://`` store on this server."""
        return {
            "endpoint_url": self.endpoint_url,
            "region": "us-east-1",
            "access_key": _FAKE_KEY,
            "secret_key": _FAKE_SECRET,
        }

    def start(self) -> MotoServer:
        if self._proc is not None:
            raise RuntimeError("MotoServer already started")
        # A free port can be taken between our probe and moto's bind: try a few.
        tries = 1 if self._requested_port else 3
        for attempt in range(tries):
            self.port = self._requested_port or free_port(self.host)
            self._log = tempfile.TemporaryFile()
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)],
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                # Own process group: a Ctrl-C meant for pytest does not kill it first.
                start_new_session=True,
            )
            _running.add(self)
            try:
                self._wait_until_ready()
                return self
            except Exception:
                output = self._output()
                self.stop()
                if attempt + 1 == tries or "Address already in use" not in output:
                    raise RuntimeError(
                        f"moto server on {self.host}:{self.port} did not start:\n{output}"
                    ) from None
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
        if self._log is not None:
            self._log.close()
            self._log = None
        self.port = 0

    def reset(self) -> None:
        """Drop every bucket and object (moto's ``/moto-api/reset``)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            conn.request("POST", "/moto-api/reset")
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise RuntimeError(f"moto reset failed: HTTP {resp.status}")
        finally:
            conn.close()

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid} at {self.endpoint_url}" if self._proc else "stopped"
        return f"MotoServer({state})"

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self._start_timeout_s
        assert self._proc is not None
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"moto server exited with status {self._proc.returncode}")
            conn = http.client.HTTPConnection(self.host, self.port, timeout=1.0)
            try:
                conn.request("GET", "/moto-api/")
                conn.getresponse().read()
                return  # any HTTP answer means it is serving
            except OSError:
                pass
            finally:
                conn.close()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no HTTP answer within {self._start_timeout_s}s")
            time.sleep(0.05)

    def _output(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        output: bytes = self._log.read()
        return output.decode("utf-8", "replace")[-4000:]
