"""MotoServer: starts on 127.0.0.1, serves S3, and stops its process by pid."""

from __future__ import annotations

import os
import socket

import pytest

from cloudtier import open_store
from cloudtier.testing import MotoServer

pytestmark = pytest.mark.server


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_start_serve_stop() -> None:
    server = MotoServer().start()
    try:
        pid, port = server.pid, server.port
        assert pid is not None and _pid_alive(pid)
        assert server.endpoint_url == f"http://127.0.0.1:{port}"
        with open_store("s3://moto-test/p", create_bucket=True, **server.store_options()) as store:
            store.put("k", b"v")
            assert store.get("k") == b"v"
        server.reset()  # drops buckets
        with open_store("s3://moto-test/p", **server.store_options()) as store:
            with pytest.raises(Exception, match="NoSuchBucket"):
                store.get("k")
    finally:
        server.stop()
    assert not _pid_alive(pid)  # reaped: the pid is gone
    assert server.pid is None
    with socket.socket() as s:  # and nothing listens on its port any more
        assert s.connect_ex(("127.0.0.1", port)) != 0
    server.stop()  # idempotent


def test_context_manager_stops_even_on_error() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with MotoServer() as server:
            pid = server.pid
            raise RuntimeError("boom")
    assert pid is not None and not _pid_alive(pid)


def test_session_server_binds_loopback_only(moto_server: MotoServer) -> None:
    assert moto_server.host == "127.0.0.1"
    assert moto_server.endpoint_url.startswith("http://127.0.0.1:")


def test_server_left_running_is_stopped_when_its_parent_exits() -> None:
    import subprocess
    import sys
    from pathlib import Path

    import cloudtier

    repo = Path(cloudtier.__file__).resolve().parent.parent
    script = "from cloudtier.testing import MotoServer\nprint(MotoServer().start().pid)\n"
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(repo)},
        check=True,
    ).stdout
    pid = int(out.strip())
    assert not _pid_alive(pid)
