"""Fixtures for the bespokv tests: every built-in datalet plus a plug-in one, Redis."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from plugin_datalet import PlainDictDatalet

from bespokv.datalets.base import Datalet, ensure_datalet
from bespokv.datalets.memory import MemoryDatalet
from bespokv.testing import RedisServer, redis_available

#: Every built-in datalet and the plug-in one from this directory.
DATALET_KINDS = ["memory", "rocksdb", "rocksmash", "redis", "plugin"]

REDIS_MISSING = "redis-server is not installed (scripts/install-system-deps.sh installs it in CI)"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    if not redis_available():
        pytest.skip(REDIS_MISSING)
    with RedisServer() as r:
        yield r


DataletFactory = Callable[[str, int], Datalet]


def make_factory(kind: str, tmp_path, request) -> DataletFactory:
    """``factory(node, shard)``: the same (node, shard) reopens the same data for the
    persistent kinds, so a restarted node finds what it had."""
    if kind == "memory":
        return lambda node, shard: MemoryDatalet()
    if kind == "plugin":
        return lambda node, shard: ensure_datalet(PlainDictDatalet())
    if kind == "rocksdb":
        from bespokv.datalets.rocksdb import RocksDBDatalet

        return lambda node, shard: RocksDBDatalet(str(tmp_path / "rocksdb" / node / f"shard-{shard}"))
    if kind == "rocksmash":
        from bespokv.datalets.rocksmash import RocksmashDatalet

        return lambda node, shard: RocksmashDatalet(str(tmp_path / "rocksmash" / node / f"shard-{shard}"))
    if kind == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        from bespokv.datalets.redis import RedisDatalet

        ns = uuid.uuid4().hex[:8]
        return lambda node, shard: RedisDatalet(server.url, namespace=f"{ns}/{node}/{shard}")
    raise ValueError(kind)


@pytest.fixture(params=DATALET_KINDS)
def datalet_kind(request) -> str:
    return request.param


@pytest.fixture
def new_datalet(datalet_kind, tmp_path, request) -> Iterator[Callable[[], Datalet]]:
    """Make fresh datalets of the parametrized kind; closes them afterwards."""
    factory = make_factory(datalet_kind, tmp_path, request)
    made: list[Datalet] = []
    counter = iter(range(1_000_000))

    def new() -> Datalet:
        d = ensure_datalet(factory("t", next(counter)))
        made.append(d)
        return d

    yield new
    for d in made:
        d.close()
