"""Fixtures for the cloudtier tests.

``store`` runs a test against every backend: ``memory://``, ``file://`` (in a temp dir),
``s3://`` on a real moto server over HTTP, and ``s3://`` through a DelayProxy in front of
that server. The server-backed variants carry the ``server`` mark. One moto server and
one proxy serve the whole session; each test gets its own key prefix.
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
from cloudtier.testing import MotoServer

BACKENDS = [
    "memory",
    "file",
    pytest.param("s3", marks=pytest.mark.server),
    pytest.param("s3-proxy", marks=pytest.mark.server),
]

@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


@pytest.fixture(scope="session")
def s3_options(moto_server: MotoServer) -> dict[str, Any]:
    """Options for an ``S3Store`` on the session's moto server; the bucket exists."""
    from cloudtier.s3_store import S3Store

    options = moto_server.store_options()
    S3Store(BUCKET, create_bucket=True, **options).close()
    return options


@pytest.fixture(scope="session")
def delay_proxy(moto_server: MotoServer) -> Iterator[DelayProxy]:
    with DelayProxy(moto_server.endpoint_url, delay_ms=PROXY_DELAY_MS) as proxy:
        yield proxy


@pytest.fixture(params=BACKENDS)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """A factory of stores that all share one fresh, empty storage location.

    Calling it twice gives two independent store objects on the same data (like two
    processes opening one bucket prefix). All are closed after the test.
    """
    backend: str = request.param
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

        s3_options = dict(request.getfixturevalue("s3_options"))
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
