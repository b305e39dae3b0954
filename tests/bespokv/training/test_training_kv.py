"""The small KV interface: the same contract on MemoryKV, rocksmash and a bespokv service."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import rocksmash
from bespokv.testing import ThreadedCluster, make_config
from bespokv.training import BespokvKV, MemoryKV, RocksmashKV, as_kv
from bespokv.training.errors import InvalidArgumentError
from bespokv.training.kv import prefix_end


@pytest.fixture(params=["memory", "rocksmash", pytest.param("bespokv", marks=pytest.mark.server)])
def any_kv(request, tmp_path) -> Iterator[object]:
    if request.param == "memory":
        yield MemoryKV()
    elif request.param == "rocksmash":
        with rocksmash.open(str(tmp_path / "db")) as db:
            kv = as_kv(db)
            assert isinstance(kv, RocksmashKV)
            yield kv
    else:
        with ThreadedCluster(make_config(2, replicas=2, shards=3, mode="ms-sc")) as cluster, cluster.client() as c:
            kv = as_kv(c)
            assert isinstance(kv, BespokvKV)
            yield kv


def test_kv_contract(any_kv):
    kv = any_kv
    assert kv.get(b"p/a") is None
    assert kv.cas(b"p/a", None, b"1")
    assert not kv.cas(b"p/a", None, b"2")
    assert not kv.cas(b"p/a", b"0", b"2")
    assert kv.cas(b"p/a", b"1", b"2") and kv.get(b"p/a") == b"2"
    kv.put(b"p/b", b"x")
    kv.put(b"p\xff", b"outside")
    kv.put(b"q/a", b"outside")
    assert list(kv.scan_prefix(b"p/")) == [(b"p/a", b"2"), (b"p/b", b"x")]
    assert kv.cas(b"p/a", b"2", None) and kv.get(b"p/a") is None
    kv.delete(b"p/b")
    assert list(kv.scan_prefix(b"p/")) == []


def test_prefix_end_and_bad_stores():
    assert prefix_end(b"ab") == b"ac" and prefix_end(b"a\xff") == b"b" and prefix_end(b"\xff") is None
    with pytest.raises(InvalidArgumentError):
        as_kv(42)
