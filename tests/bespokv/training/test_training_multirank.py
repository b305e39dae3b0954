"""Two gloo ranks save their shards through a bespokv service; loads reshard (DCP)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.distributed.checkpoint as dcp

import cloudtier
from bespokv.testing import ThreadedCluster, free_port, make_config
from bespokv.training import CheckpointStore, KVStorageReader

CHILD = os.path.join(os.path.dirname(__file__), "multirank_child.py")
sys.path.insert(0, os.path.dirname(__file__))
from multirank_child import full_state  # noqa: E402

pytestmark = [pytest.mark.server, pytest.mark.slow]


def run_ranks(world: int, addrs: str, objects_dir: str) -> None:
    port = free_port()
    procs = [subprocess.Popen([sys.executable, CHILD, str(r), str(world), str(port), addrs, objects_dir],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=150))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "ok" in out, (p.returncode, out, err[-3000:])


def test_two_ranks_save_shards_and_loads_reshard(tmp_path):
    """Two ranks save Shard(0) and reload as Shard(1); then world size 1 loads whole tensors."""
    objects_dir = str(tmp_path / "objects")
    os.makedirs(objects_dir)
    with ThreadedCluster(make_config(3, replicas=2, shards=4, mode="ms-sc")) as cluster:
        addrs = ",".join(n.address for n in cluster.config.nodes)
        run_ranks(2, addrs, objects_dir)
        with cluster.client() as client:
            store = CheckpointStore(client, cloudtier.open_store("file://" + objects_dir))
            info = store.latest("run")
            assert info.id == "run/step-1" and info.bytes == sum(
                v.numel() * v.element_size() for v in full_state().values())
            # world size 1: the whole tensors out of two ranks' shards
            back = {"model": {k: torch.zeros_like(v) for k, v in full_state().items()}}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dcp.load(back, storage_reader=KVStorageReader(store, "run/step-1"))
            for k, v in full_state().items():
                assert torch.equal(back["model"][k], v), k
