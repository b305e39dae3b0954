"""GETs through obstore (cloudtier.s3_reads): failures without an S3 answer, against real
sockets: refused, slow, a 5xx answer, a body cut short, no credentials."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cloudtier_testutil import BUCKET

from cloudtier import RetryingStore, RetryPolicy, StoreError, StoreTimeoutError, TransientError
from cloudtier.proxy import DelayProxy
from cloudtier.s3_store import S3Store
from cloudtier.testing import ChildServer, free_port

pytestmark = pytest.mark.server


def _store(endpoint: str, **options: Any) -> S3Store:
    return S3Store(BUCKET, endpoint_url=endpoint, access_key="x", secret_key="y", **options)


def test_refused_get_is_transient() -> None:
    with _store(f"http://127.0.0.1:{free_port()}", connect_timeout=1) as store:  # nothing listens
        with pytest.raises(TransientError) as info:
            store.get("k", 0, 100)
    assert info.value.retriable
    assert isinstance(info.value.__cause__, Exception)  # obstore's error stays attached


def test_slow_get_raises_store_timeout(s3_server: ChildServer, s3_options: dict[str, Any]) -> None:
    with S3Store(BUCKET, "slow-get", **s3_options) as fast:
        fast.put("k", b"v" * 1000)
    with DelayProxy(s3_server.endpoint_url, response_delay_ms=1500) as slow:
        options = {**s3_options, "endpoint_url": slow.endpoint_url, "read_timeout": 0.3}
        with S3Store(BUCKET, "slow-get", **options) as store:
            t0 = time.monotonic()
            with pytest.raises(StoreTimeoutError):
                store.get("k", 0, 10)
            assert time.monotonic() - t0 < 1.4  # gave up at the timeout, not the answer
            retrying = RetryingStore(store, RetryPolicy(max_attempts=2, base_delay_s=0.01))
            with pytest.raises(StoreTimeoutError) as info:
                retrying.get("k")
            assert "gave up after 2 attempts" in "".join(info.value.__notes__)


class _OneAnswerServer:
    """A socket server on 127.0.0.1 that answers every request with ``answer`` (raw
    bytes) and closes the connection: a 5xx, or a response whose body is cut short."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.sock = socket.create_server(("127.0.0.1", free_port()))
        self.sock.settimeout(0.2)
        self.requests = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(10)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                self.requests += 1
                conn.sendall(self.answer)

    def __enter__(self) -> _OneAnswerServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.sock.close()


@pytest.fixture
def answering() -> Iterator[type[_OneAnswerServer]]:
    yield _OneAnswerServer


_SLOW_DOWN = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\n"
         b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_SLOW_DOWN), _SLOW_DOWN),
         "SlowDown (503)"),
        (b"HTTP/1.1 206 Partial Content\r\nContent-Length: 100\r\nContent-Range: bytes 0-99/1000\r\n"
         b"Connection: close\r\n\r\nonly ten b", "get 'k'"),
    ],
    ids=["5xx-answer", "body-cut-short"],
)
def test_server_side_failures_of_a_get_are_transient(
    answering: type[_OneAnswerServer], answer: bytes, expected: str
) -> None:
    with answering(answer) as server, _store(server.endpoint_url) as store:
        with pytest.raises(TransientError) as info:
            store.get("k", 0, 100)
        assert info.value.retriable and expected in str(info.value)
        assert server.requests == 1  # obstore itself retried nothing


def test_a_get_without_credentials_says_what_to_set(
    s3_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    options = {k: v for k, v in s3_options.items() if k not in ("access_key", "secret_key")}
    with S3Store(BUCKET, **options) as store:
        with pytest.raises(StoreError) as info:
            store.get("k")
    assert not info.value.retriable
    assert "AWS_ACCESS_KEY_ID" in str(info.value)


def test_a_forked_child_reads_and_writes_without_hanging(s3_options: dict[str, Any]) -> None:
    """obstore's runtime does not survive a fork: a child calling into it after the parent
    did hung for ever. The child reads through botocore instead, on connections of its
    own (the parent's pooled ones stay the parent's), through the inherited store and a
    new one; the parent goes on reading through obstore."""
    import os

    with S3Store(BUCKET, "forked", **s3_options) as store:
        store.put("k", b"0123456789" * 100)
        assert store.get("k", 10, 20) == b"0123456789"  # obstore's runtime runs now
        parent_client = store._client
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, then leave without running the parent's cleanup
            try:
                with S3Store(BUCKET, "forked", **s3_options) as fresh:
                    got = [store.get("k", 0, 5), store.get("k", 995), fresh.get("k", 5, 10)]
                    store.put("child", b"hello")
                    got.append(fresh.get("child"))
                ok = got == [b"01234", b"56789", b"56789", b"hello"] and store._client is not parent_client
                os.write(w, b"ok" if ok else repr(got).encode())
            except BaseException as e:  # reported to the parent
                os.write(w, repr(e).encode()[:500])
            finally:
                os._exit(0)
        os.close(w)
        deadline = time.monotonic() + 60
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                pytest.fail("the forked child hung reading the store")
            time.sleep(0.05)
        with os.fdopen(r, "rb") as f:
            assert f.read() == b"ok"
        assert store.get("child") == b"hello" and store._client is parent_client
