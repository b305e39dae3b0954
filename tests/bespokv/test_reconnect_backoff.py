"""The reconnect backoff of gRPC channels to nodes is a setting (Tuning, the client).

gRPC's own default backs a broken channel's reconnects off to two minutes, so a node that
was down for a while could stay unreachable through an old channel long after it restarted.
bespokv's channels start at ``reconnect_backoff_ms`` and grow to ``max_reconnect_backoff_ms``
(50 ms and 1 s by default). ``python -m bench reconnect`` measures the difference."""

from __future__ import annotations

import asyncio

import pytest

from bench.reconnect import reconnect_delay
from bespokv.client import AsyncClient
from bespokv.config import Tuning, load
from bespokv.errors import InvalidArgumentError
from bespokv.peers import PeerPool
from bespokv.security import channel_options
from bespokv.shardmap import ShardMap
from bespokv.testing import make_config


def _backoff(opts) -> dict[str, int]:
    return {k: v for k, v in opts if "reconnect_backoff" in k}


def test_channels_reconnect_after_50_ms_backing_off_to_one_second_by_default():
    assert _backoff(channel_options()) == {
        "grpc.initial_reconnect_backoff_ms": 50,
        "grpc.min_reconnect_backoff_ms": 50,
        "grpc.max_reconnect_backoff_ms": 1000,
    }
    assert _backoff(channel_options(reconnect_backoff_ms=20, max_reconnect_backoff_ms=300)) == {
        "grpc.initial_reconnect_backoff_ms": 20,
        "grpc.min_reconnect_backoff_ms": 20,
        "grpc.max_reconnect_backoff_ms": 300,
    }


def test_the_setting_comes_from_the_config_file_for_nodes_and_clients(tmp_path):
    cfg = make_config(3, tuning=Tuning(reconnect_backoff_ms=20, max_reconnect_backoff_ms=400))
    path = tmp_path / "cluster.toml"
    cfg.write(path)
    loaded = load(str(path))
    assert (loaded.tuning.reconnect_backoff_ms, loaded.tuning.max_reconnect_backoff_ms) == (20, 400)
    client = AsyncClient.from_config(loaded)
    assert (client.reconnect_backoff_ms, client.max_reconnect_backoff_ms) == (20, 400)
    peers = PeerPool(ShardMap.from_config(loaded), tuning=loaded.tuning)
    assert peers._tuning.max_reconnect_backoff_ms == 400
    asyncio.run(peers.close())


@pytest.mark.parametrize(("initial", "most"), [(0, 1000), (-5, 1000), (2000, 1000)])
def test_a_bad_backoff_is_refused(initial, most):
    with pytest.raises(InvalidArgumentError, match="reconnect backoff"):
        Tuning(reconnect_backoff_ms=initial, max_reconnect_backoff_ms=most)
    with pytest.raises(InvalidArgumentError, match="reconnect backoff"):
        AsyncClient("127.0.0.1:1", reconnect_backoff_ms=initial, max_reconnect_backoff_ms=most)


def test_a_channel_that_saw_the_server_down_reaches_it_once_it_listens():
    opts = [o for o in channel_options(reconnect_backoff_ms=20, max_reconnect_backoff_ms=100) if "reconnect" in o[0]]
    delay = asyncio.run(reconnect_delay(opts, down=0.5))
    assert delay >= 0
