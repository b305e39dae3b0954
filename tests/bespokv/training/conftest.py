"""Fixtures for the training apps' tests: every KV kind and every object-store kind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch", reason="the training extra (torch==2.13.0) is not installed")

import cloudtier  # noqa: E402
import rocksmash  # noqa: E402

from bespokv.training import CheckpointStore, MemoryKV, RocksmashKV  # noqa: E402

KV_KINDS = ["memory", "rocksmash"]
OBJECT_KINDS = ["memory", "file"]


@pytest.fixture(params=KV_KINDS)
def kv(request, tmp_path) -> Iterator[object]:
    if request.param == "memory":
        yield MemoryKV()
        return
    db = rocksmash.open(str(tmp_path / "meta"), sync=False)
    try:
        yield RocksmashKV(db, sync=False)
    finally:
        db.close()


@pytest.fixture(params=OBJECT_KINDS)
def objects(request, tmp_path) -> Iterator[cloudtier.ObjectStore]:
    url = "memory://" if request.param == "memory" else (tmp_path / "objects").as_uri()
    with cloudtier.open_store(url) as store:
        yield store


@pytest.fixture
def store(kv, objects) -> CheckpointStore:
    return CheckpointStore(kv, objects, chunk_size=4096, threads=4)
