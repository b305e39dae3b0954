"""Switching a cluster's mode offline keeps its data readable.

Write with one mode on a persistent datalet, stop the cluster cleanly, start it again on
the same folder with the other family of modes (master-slave <-> active-active), and read
everything back; then write and delete some more in the new mode. Before the stored
representation was converted, ms-sc -> aa-sc failed every read with ``CorruptionError:
versioned value ... shorter than its header``. aa -> ms must also bring back writes that
the replica becoming head had missed (only the other replicas held them)."""

from __future__ import annotations

import pytest

from bespokv.config import Tuning
from bespokv.testing import LocalCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TUNING = Tuning(request_timeout=3.0, recovery_timeout=5.0, anti_entropy_interval=3600.0)
CASES = [("ms-sc", "aa-sc", "rocksmash"), ("aa-sc", "ms-sc", "rocksdb")]


@pytest.mark.parametrize(("before", "after", "datalet"), CASES)
def test_data_written_in_one_mode_reads_back_in_another(before, after, datalet, tmp_path):
    data = {b"k%04d" % i: b"v%d" % i for i in range(300)}
    deleted = [b"k%04d" % i for i in range(0, 300, 7)]
    missed: dict[bytes, bytes] = {}
    with LocalCluster(3, replicas=3, shards=2, mode=before, datalet=datalet, tuning=TUNING, dir=str(tmp_path)) as c1:
        with c1.client(retries=20, timeout=5.0) as client:
            client.put_many(list(data.items()))
            for k in deleted:
                client.delete(k)
            if before == "aa-sc":
                # Writes the coming head of each shard misses: a quorum (the other two) has them.
                smap = client.shard_map()
                heads = {s.id: s.replicas[0] for s in smap.shards.values()}
                victim = "n1"
                c1.kill(victim)
                c1.wait_reported_down(victim)
                for i in range(100):
                    k = b"m%04d" % i
                    if heads[smap.shard_for(k)] == victim:
                        client.put(k, b"missed%d" % i)
                        missed[k] = b"missed%d" % i
                assert missed
    expected = {k: v for k, v in data.items() if k not in deleted} | missed
    with LocalCluster(3, replicas=3, shards=2, mode=after, datalet=datalet, tuning=TUNING, dir=str(tmp_path)) as c2:
        with c2.client(retries=20, timeout=5.0) as client:
            keys = list(data) + list(missed)
            got = dict(zip(keys, client.get_many(keys)))
            wrong = {k: got[k] for k in keys if got[k] != expected.get(k)}
            assert not wrong, (len(wrong), sorted(wrong)[:5])
            assert dict(client.scan()) == expected
            client.put(b"k0001", b"new")
            client.delete(b"k0002")
            assert client.get(b"k0001") == b"new" and client.get(b"k0002") is None
