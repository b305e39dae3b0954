"""Fixtures for the cloudtier tests.

``store`` runs a test against every backend: ``memory://``, ``file://`` (in a temp dir),
``s3://`` on a real SeaweedFS server (``weed mini``, data on disk) and on a moto server,
both over HTTP, and ``s3://`` through a DelayProxy in front of SeaweedFS (of moto where
SeaweedFS is not installed). The server-backed variants carry the ``server`` mark. Each
server and the proxy start once per session; each test gets its own key prefix.

``conditional_puts`` says how the backend under test evaluates conditional PUTs, and
``list_order`` in which order it lists, as declared by its server class (measured, see
docs/cloudtier.md): race tests run only where the property they race for holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cloudtier_testutil import BUCKET, PAGE_SIZE, PROXY_DELAY_MS, StoreFactory

from cloudtier import FileStore, MemoryStore, ObjectStore
from cloudtier.memory_store import drop_memory_bucket
from cloudtier.proxy import DelayProxy
from cloudtier.testing import ChildServer, ConditionalPuts, MotoServer, SeaweedServer, seaweed_binary

# seaweedfs_server and moto_server: tests/conftest.py (one of each per session).

#: The real servers, each run once per session.
S3_SERVERS = [pytest.param("seaweedfs", marks=pytest.mark.server),
              pytest.param("moto", marks=pytest.mark.server)]
#: The proxied variant runs on the default server (SeaweedFS where installed).
PROXIED = "seaweedfs" if seaweed_binary() else "moto"
BACKENDS = [
    "memory",
    "file",
    *S3_SERVERS,
    pytest.param("s3-proxy", marks=pytest.mark.server),
]
#: In-process backends make check and write one step under their locks.
_LOCAL_CONDITIONALS = ConditionalPuts(if_none_match_atomic=True, if_match_atomic=True)


def _server(request: pytest.FixtureRequest, name: str) -> ChildServer:
    server: ChildServer = request.getfixturevalue(f"{name}_server")
    return server


@pytest.fixture(scope="session", params=S3_SERVERS)
def s3_server(request: pytest.FixtureRequest) -> ChildServer:
    """Each real S3 server in turn."""
    return _server(request, request.param)


def _options_with_bucket(server: ChildServer) -> dict[str, Any]:
    """Options for an ``S3Store`` on ``server``; the shared test bucket exists."""
    from cloudtier.s3_store import S3Store

    options = server.store_options()
    S3Store(BUCKET, create_bucket=True, **options).close()
    return options


@pytest.fixture(scope="session")
def s3_options(s3_server: ChildServer) -> dict[str, Any]:
    """Options for an ``S3Store`` on each real server; the bucket exists."""
    return _options_with_bucket(s3_server)


@pytest.fixture(scope="session")
def delay_proxy(request: pytest.FixtureRequest) -> Iterator[DelayProxy]:
    """A session proxy in front of the default server (:data:`PROXIED`)."""
    with DelayProxy(_server(request, PROXIED).endpoint_url, delay_ms=PROXY_DELAY_MS) as proxy:
        yield proxy


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend under test: memory, file, seaweedfs, moto or s3-proxy."""
    name: str = request.param
    return name


def _server_class(backend: str) -> type[ChildServer]:
    kind = PROXIED if backend == "s3-proxy" else backend
    return SeaweedServer if kind == "seaweedfs" else MotoServer


@pytest.fixture
def conditional_puts(backend: str) -> ConditionalPuts:
    """How the backend under test evaluates conditional PUTs."""
    if backend in ("memory", "file"):
        return _LOCAL_CONDITIONALS
    return _server_class(backend).conditional_puts


@pytest.fixture
def list_order(backend: str) -> str:
    """``bytes`` or ``segments`` (see ``ChildServer.list_order``)."""
    return "bytes" if backend in ("memory", "file") else _server_class(backend).list_order


@pytest.fixture
def make_store(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """A factory of stores that all share one fresh, empty storage location.

    Calling it twice gives two independent store objects on the same data (like two
    processes opening one bucket prefix). All are closed after the test.
    """
    opened: list[ObjectStore] = []
    tag = uuid.uuid4().hex[:12]

    if backend == "memory":

        def factory(**options: Any) -> ObjectStore:
            return MemoryStore(f"test-{tag}", "data", **{"page_size": PAGE_SIZE, **options})

    elif backend == "file":

        def factory(**options: Any) -> ObjectStore:
            return FileStore(tmp_path / "store", **{"page_size": PAGE_SIZE, "fsync": False, **options})

    else:
        from cloudtier.s3_store import S3Store

        server = _server(request, PROXIED if backend == "s3-proxy" else backend)
        s3_options = _options_with_bucket(server)
        if backend == "s3-proxy":
            s3_options["endpoint_url"] = request.getfixturevalue("delay_proxy").endpoint_url

        def factory(**options: Any) -> ObjectStore:
            return S3Store(BUCKET, f"t-{tag}", **{"page_size": PAGE_SIZE, **s3_options, **options})

    def tracked(**options: Any) -> ObjectStore:
        store = factory(**options)
        opened.append(store)
        return store

    yield tracked
    for store in opened:
        store.close()
    drop_memory_bucket(f"test-{tag}")


@pytest.fixture
def store(make_store: StoreFactory) -> ObjectStore:
    """A fresh, empty store on each backend."""
    return make_store()
