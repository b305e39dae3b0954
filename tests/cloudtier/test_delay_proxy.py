"""DelayProxy: measurable per-request delay, bandwidth cap, intact bytes, CLI."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import cloudtier
from cloudtier.proxy import PROFILES, DelayProxy, parse_hostport
from cloudtier.testing import ChildServer, free_port

REPO_ROOT = Path(cloudtier.__file__).resolve().parent.parent


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture(scope="module")
def echo_server() -> Iterator[tuple[str, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address  # type: ignore[misc]
    server.shutdown()
    server.server_close()


def exchange(sock: socket.socket, payload: bytes) -> bytes:
    """Send payload (from a thread, so big payloads cannot deadlock) and read it back."""
    sender = threading.Thread(target=sock.sendall, args=(payload,))
    sender.start()
    got = bytearray()
    while len(got) < len(payload):
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        got += chunk
    sender.join()
    return bytes(got)


def test_each_request_is_delayed(echo_server: tuple[str, int]) -> None:
    with DelayProxy(echo_server, delay_ms=50) as proxy:
        with socket.create_connection((proxy.host, proxy.port)) as sock:
            for i in range(3):
                t0 = time.monotonic()
                assert exchange(sock, f"request {i}".encode()) == f"request {i}".encode()
                assert time.monotonic() - t0 >= 0.05
        assert proxy.stats()["requests"] == 3


def test_response_delay(echo_server: tuple[str, int]) -> None:
    with DelayProxy(echo_server, response_delay_ms=40) as proxy:
        with socket.create_connection((proxy.host, proxy.port)) as sock:
            t0 = time.monotonic()
            assert exchange(sock, b"ping") == b"ping"
            assert time.monotonic() - t0 >= 0.04


class _Digest(socketserver.BaseRequestHandler):
    """HTTP-like: read one length-prefixed request, answer with its SHA-256; repeat."""

    def handle(self) -> None:
        f = self.request.makefile("rb")
        while header := f.read(8):
            body = f.read(int.from_bytes(header, "big"))
            self.request.sendall(hashlib.sha256(body).digest())


def test_large_requests_pass_intact_with_one_delay_each() -> None:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Digest)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    payloads = [os.urandom(3 * 2**20), os.urandom(100), os.urandom(2**20)]
    try:
        # A long quiet period: only the turn-taking rule may split these requests, and a
        # stall of a busy CI machine mid-stream cannot.
        with DelayProxy(server.server_address, delay_ms=20, quiet_ms=200) as proxy:  # type: ignore[arg-type]
            with socket.create_connection((proxy.host, proxy.port)) as sock:
                f = sock.makefile("rb")
                for payload in payloads:  # back to back on one connection, no pause
                    t0 = time.monotonic()
                    sock.sendall(len(payload).to_bytes(8, "big") + payload)
                    assert f.read(32) == hashlib.sha256(payload).digest()
                    assert time.monotonic() - t0 >= 0.02
            stats = proxy.stats()
    finally:
        server.shutdown()
        server.server_close()
    assert stats["bytes_up"] == sum(8 + len(p) for p in payloads)
    assert stats["bytes_down"] == 32 * len(payloads)
    # A request streamed in many reads is one burst; each answer starts the next one.
    assert stats["requests"] == len(payloads)


def test_stats_already_count_what_a_client_has_received(echo_server: tuple[str, int]) -> None:
    # The counters are bumped before a chunk is forwarded (issue 9: they were bumped after,
    # so a client could hold a reply that stats() did not count yet). Many tiny round trips:
    # each is a chance for the reader to look in that window.
    with DelayProxy(echo_server) as proxy:
        with socket.create_connection((proxy.host, proxy.port)) as sock:
            for i in range(300):
                msg = b"%06d" % i
                assert exchange(sock, msg) == msg
                stats = proxy.stats()
                assert stats["bytes_up"] == stats["bytes_down"] == 6 * (i + 1), (i, stats)


def test_echoed_bytes_are_intact(echo_server: tuple[str, int]) -> None:
    payload = os.urandom(2**20)
    with DelayProxy(echo_server) as proxy:
        with socket.create_connection((proxy.host, proxy.port)) as sock:
            assert exchange(sock, payload) == payload


def test_bandwidth_cap(echo_server: tuple[str, int]) -> None:
    payload = os.urandom(300_000)
    with DelayProxy(echo_server, bandwidth=1_000_000) as proxy:  # 1 MB/s per direction
        with socket.create_connection((proxy.host, proxy.port)) as sock:
            t0 = time.monotonic()
            assert exchange(sock, payload) == payload
            assert time.monotonic() - t0 >= 0.25  # 300 kB at 1 MB/s is 0.3 s


def test_unreachable_target_closes_the_client_connection() -> None:
    with DelayProxy(("127.0.0.1", free_port())) as proxy:
        with socket.create_connection((proxy.host, proxy.port), timeout=5) as sock:
            try:
                sock.sendall(b"hello")
                assert sock.recv(10) == b""
            except ConnectionResetError:
                pass  # equally fine: the link was dropped


def test_stop_closes_open_connections(echo_server: tuple[str, int]) -> None:
    proxy = DelayProxy(echo_server).start()
    sock = socket.create_connection((proxy.host, proxy.port), timeout=5)
    assert exchange(sock, b"x") == b"x"
    proxy.stop()
    try:
        assert sock.recv(10) == b""
    except ConnectionResetError:
        pass
    sock.close()
    proxy.stop()  # idempotent


def test_a_cut_link_passes_nothing_and_a_healed_one_delivers_what_waited(echo_server: tuple[str, int]) -> None:
    with DelayProxy(echo_server) as proxy:
        old = socket.create_connection((proxy.host, proxy.port), timeout=5)
        assert exchange(old, b"before") == b"before"
        proxy.cut()
        assert proxy.is_cut
        old.sendall(b"during")
        new = socket.create_connection((proxy.host, proxy.port), timeout=5)  # accepted: silence, not a refusal
        new.sendall(b"new one")
        for sock in (old, new):
            sock.settimeout(0.3)
            with pytest.raises(TimeoutError):
                sock.recv(10)  # nothing passes while cut (no reset either)
            sock.settimeout(10)
        proxy.heal()
        for sock, want in ((old, b"during"), (new, b"new one")):
            got = b""
            while len(got) < len(want):
                chunk = sock.recv(10)
                assert chunk, "connection closed"
                got += chunk
            assert got == want
            sock.close()


def test_profiles_and_overrides() -> None:
    assert PROFILES["lan"].delay_ms == 1.0
    assert PROFILES["s3"].delay_ms == 20.0
    assert PROFILES["none"].delay_ms == 0.0
    assert DelayProxy("127.0.0.1:9", profile="s3").delay_ms == 20.0
    assert DelayProxy("127.0.0.1:9", profile="s3", delay_ms=5).delay_ms == 5
    with pytest.raises(ValueError):
        DelayProxy("127.0.0.1:9", profile="wan")


def test_parse_hostport() -> None:
    assert parse_hostport("127.0.0.1:9000") == ("127.0.0.1", 9000)
    assert parse_hostport("http://localhost:9000/") == ("localhost", 9000)
    for bad in ("127.0.0.1", ":80", "host:http", "host:70000"):
        with pytest.raises(ValueError):
            parse_hostport(bad)


def _cli(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen(
        [sys.executable, "-m", "cloudtier.proxy", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kwargs,
    )


def test_cli_help() -> None:
    proc = _cli("--help")
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    for needle in ("--target", "--delay-ms", "--bandwidth", "--profile", "lan", "s3", "100MB"):
        assert needle in out


def test_cli_runs_delays_and_stops_on_sigterm(echo_server: tuple[str, int]) -> None:
    proc = _cli("--target", f"{echo_server[0]}:{echo_server[1]}", "--delay-ms", "30")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on 127.0.0.1:" in line, line + proc.stderr.read()  # type: ignore[union-attr]
        port = int(line.split("listening on 127.0.0.1:")[1].split()[0])
        with socket.create_connection(("127.0.0.1", port)) as sock:
            t0 = time.monotonic()
            assert exchange(sock, b"hello") == b"hello"
            assert time.monotonic() - t0 >= 0.03
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 0
    assert "stopped" in out


@pytest.mark.server
def test_s3_requests_through_the_proxy_are_delayed(
    s3_server: ChildServer, s3_options: dict[str, Any]
) -> None:
    from cloudtier_testutil import BUCKET

    from cloudtier.s3_store import S3Store

    with DelayProxy(s3_server.endpoint_url, profile="s3") as proxy:
        with S3Store(BUCKET, "proxied", **{**s3_options, "endpoint_url": proxy.endpoint_url}) as store:
            store.put("k", b"v" * 1000)
            t0 = time.monotonic()
            for _ in range(3):
                assert store.get("k") == b"v" * 1000
            assert time.monotonic() - t0 >= 3 * 0.020
        stats = proxy.stats()
        assert stats["requests"] >= 4
        # By kind: the requests themselves; the PUT's body went after `100 Continue`
        # (botocore asks for it on every PUT), a burst of its own that is no request.
        assert (stats["http_put"], stats["http_get"], stats["http_continuation"]) == (1, 3, 1)


def test_request_kind_reads_the_request_line() -> None:
    from cloudtier.proxy import request_kind

    assert request_kind(b"GET /bench/p/k HTTP/1.1\r\nHost: x\r\n\r\n") == "get"
    assert request_kind(b"GET /bench?list-type=2&prefix=p%2F HTTP/1.1\r\n") == "list"
    assert request_kind(b"GET /bench/ HTTP/1.1\r\n") == "list"
    assert request_kind(b"PUT /bench/p/k HTTP/1.1\r\nExpect: 100-continue\r\n\r\n") == "put"
    assert request_kind(b"HEAD /bench/p/k HTTP/1.1\r\n") == "head"
    assert request_kind(b"DELETE /bench/p/k HTTP/1.1\r\n") == "delete"
    assert request_kind(b"POST /bench?delete HTTP/1.1\r\n") == "post"
    assert request_kind(b"PATCH /x HTTP/1.1\r\n") == "other"
    assert request_kind(b"\x00\x01 body bytes after 100 Continue") == "continuation"
    assert request_kind(b"GET /half-a-request-line") == "continuation"


def test_bursts_are_counted_by_request_kind(echo_server: tuple[str, int]) -> None:
    with DelayProxy(echo_server) as proxy:
        with socket.create_connection((proxy.host, proxy.port)) as sock:
            for burst in (b"PUT /b/k HTTP/1.1\r\nExpect: 100-continue\r\n\r\n", b"the body",
                          b"GET /b/k HTTP/1.1\r\n\r\n", b"GET /b?prefix=k HTTP/1.1\r\n\r\n"):
                assert exchange(sock, burst) == burst  # the echo turns the conversation
        s = proxy.stats()
    kinds = {k[5:]: n for k, n in s.items() if k.startswith("http_") and n}
    assert kinds == {"put": 1, "continuation": 1, "get": 1, "list": 1}
    assert sum(kinds.values()) == s["requests"] == 4
