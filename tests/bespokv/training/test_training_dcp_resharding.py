"""What PyTorch's DCP resharding and file-system suites check across ranks, on our writer and reader.

Two gloo ranks (``dcp_resharding_child.py``) save through a bespokv service (the KV every
rank reaches) into ``file://`` and into the real S3 server (SeaweedFS), and load under
another plan: ShardedTensor rows to columns with uneven shards, DTensor from a 1-D mesh to
a 2-D one and back, a tensor with fewer rows than ranks (an empty shard), an entry
switched between sharded and plain both ways, bytes and non-tensor items. Then this
process loads every checkpoint at world size 1, into whole tensors.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
import warnings

import pytest
import torch
import torch.distributed.checkpoint as dcp

import cloudtier
from bespokv.testing import ThreadedCluster, free_port, make_config
from bespokv.training import CheckpointStore, KVStorageReader

CHILD = os.path.join(os.path.dirname(__file__), "dcp_resharding_child.py")
sys.path.insert(0, os.path.dirname(__file__))
from dcp_resharding_child import full_tensors, objects_of  # noqa: E402

pytestmark = [pytest.mark.server, pytest.mark.slow]


def run_ranks(world: int, addrs: str, stores: list) -> None:
    port = free_port()
    procs = [subprocess.Popen([sys.executable, CHILD, str(r), str(world), str(port), addrs, json.dumps(stores)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=240))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "ok" in out, (p.returncode, out, err[-3000:])


def test_two_ranks_save_shards_and_every_plan_loads_them(tmp_path, seaweedfs_server):
    objects_dir = tmp_path / "objects"
    objects_dir.mkdir()
    s3 = seaweedfs_server.store_options()
    s3_url = f"s3://dcp-resharding/{uuid.uuid4().hex}"
    cloudtier.open_store(s3_url, create_bucket=True, **s3).close()
    stores = [["file", objects_dir.as_uri(), {}], ["s3", s3_url, s3]]
    with ThreadedCluster(make_config(3, replicas=2, shards=4, mode="ms-sc")) as cluster:
        run_ranks(2, ",".join(n.address for n in cluster.config.nodes), stores)
        full = full_tensors()
        with cluster.client() as client, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for prefix, url, options in stores:
                with cloudtier.open_store(url, **options) as objects:
                    store = CheckpointStore(client, objects)
                    assert sorted(c.name for c in store.list(prefix)) == ["dtensor-1d", "dtensor-2d", "plain",
                                                                           "sharded-rows"]
                    for name, group in (("sharded-rows", "st"), ("dtensor-1d", "dt"), ("dtensor-2d", "dt"),
                                        ("plain", "dt")):
                        back = {group: {k: torch.zeros_like(v) for k, v in full.items()}}
                        if name == "sharded-rows":
                            back.update(step=0, note="", blob=io.BytesIO())
                        dcp.load(back, storage_reader=KVStorageReader(store, f"{prefix}/{name}"))
                        for k, v in full.items():
                            assert torch.equal(back[group][k], v), (prefix, name, k)
                        if name == "sharded-rows":
                            want = objects_of(2)
                            assert (back["step"], back["note"]) == (want["step"], want["note"])
                            assert back["blob"].getvalue() == want["blob"].getvalue()
