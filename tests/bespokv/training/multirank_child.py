"""One rank of test_training_multirank: gloo on 127.0.0.1, DTensor shards, DCP save/load.

    python multirank_child.py RANK WORLD PORT BESPOKV_ADDRS OBJECTS_DIR

Each rank holds its Shard(0) of every tensor and saves "run/step-1"; then each loads it
into a Shard(1) layout (DCP reshards) and checks its part. Prints ``ok`` when it passes.
"""

from __future__ import annotations

import datetime
import os
import sys
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

import cloudtier
from bespokv import Client
from bespokv.training import CheckpointStore, KVStorageReader, KVStorageWriter

warnings.simplefilter("ignore")


def full_state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(42)
    return {"w": torch.randn(8, 6, generator=g), "b": torch.randn(10, 4, generator=g),
            "emb": torch.randn(12, 4, generator=g).to(torch.bfloat16)}


def main() -> None:
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    addrs, objects_dir = sys.argv[4].split(","), sys.argv[5]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        mesh = init_device_mesh("cpu", (world,))
        with Client(addrs) as client:
            store = CheckpointStore(client, cloudtier.open_store("file://" + objects_dir), chunk_size=64)
            full = full_state()
            sd = {k: distribute_tensor(v, mesh, [Shard(0)]) for k, v in full.items()}
            dcp.save({"model": sd}, storage_writer=KVStorageWriter(store, "run/step-1"))
            dist.barrier()
            sd = {k: distribute_tensor(torch.zeros_like(v), mesh, [Shard(1)]) for k, v in full.items()}
            dcp.load({"model": sd}, storage_reader=KVStorageReader(store, "run/step-1"))
            for k, v in full.items():
                want = distribute_tensor(v, mesh, [Shard(1)]).to_local()
                assert torch.equal(sd[k].to_local(), want), k
        dist.barrier()
        print("ok", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
