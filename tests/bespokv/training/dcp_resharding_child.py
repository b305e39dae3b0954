"""One rank of test_training_dcp_resharding: gloo on 127.0.0.1, DCP saves and resharded loads.

    python dcp_resharding_child.py RANK WORLD PORT BESPOKV_ADDRS STORES_JSON

``STORES_JSON`` is a list of ``[prefix, url, options]``: each scenario runs once per object
store, under checkpoint ids ``prefix/<scenario>``. Every rank builds the same full tensors
(:func:`full_tensors`, fixed seed), saves its shards, loads them back under another
sharding plan and checks its part against the full tensors. Prints ``ok`` when all pass.
"""

from __future__ import annotations

import datetime
import io
import json
import os
import sys
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed._shard import sharded_tensor
from torch.distributed._shard.sharding_spec import ChunkShardingSpec
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

import cloudtier
from bespokv import Client
from bespokv.training import CheckpointStore, KVStorageReader, KVStorageWriter

warnings.simplefilter("ignore")


def full_tensors() -> dict[str, torch.Tensor]:
    """The whole tensors every scenario shards: uneven sizes, and one with fewer rows than ranks."""
    g = torch.Generator().manual_seed(11)
    return {"uneven": torch.randn(7, 5, generator=g), "one_row": torch.randn(1, 4, generator=g),
            "square": torch.randn(6, 6, generator=g), "bf16": torch.randn(5, 3, generator=g).to(torch.bfloat16)}


def objects_of(world: int) -> dict:
    return {"step": 5, "note": f"world {world}", "blob": io.BytesIO(b"\x01\x02" * 50)}


def sharded(full: torch.Tensor, dim: int, world: int) -> sharded_tensor.ShardedTensor:
    """A ShardedTensor of ``full`` chunked along ``dim``, its local shards filled."""
    spec = ChunkShardingSpec(dim=dim, placements=[f"rank:{r}/cpu" for r in range(world)])
    st = sharded_tensor.empty(spec, *full.shape, dtype=full.dtype)
    for shard in st.local_shards():
        index = tuple(slice(o, o + n) for o, n in zip(shard.metadata.shard_offsets, shard.metadata.shard_sizes))
        shard.tensor.copy_(full[index])
    return st


def check_sharded(st: sharded_tensor.ShardedTensor, full: torch.Tensor, what: str) -> None:
    for shard in st.local_shards():
        index = tuple(slice(o, o + n) for o, n in zip(shard.metadata.shard_offsets, shard.metadata.shard_sizes))
        assert torch.equal(shard.tensor, full[index]), what


def check_dtensor(dt, full: torch.Tensor, mesh, placements, what: str) -> None:
    want = distribute_tensor(full, mesh, placements).to_local()
    assert torch.equal(dt.to_local(), want), what


def scenarios(store: CheckpointStore, prefix: str, world: int) -> None:
    full = full_tensors()
    mesh1 = init_device_mesh("cpu", (world,))
    mesh2 = init_device_mesh("cpu", (1, world), mesh_dim_names=("dp", "tp"))

    # ShardedTensor chunked by rows, loaded chunked by columns (uneven: 7 rows on 2 ranks)
    dcp.save({"st": {k: sharded(v, 0, world) for k, v in full.items()}, **objects_of(world)},
             storage_writer=KVStorageWriter(store, f"{prefix}/sharded-rows"))
    back = {"st": {k: sharded(torch.zeros_like(v), 1, world) for k, v in full.items()},
            "step": 0, "note": "", "blob": io.BytesIO()}
    dcp.load(back, storage_reader=KVStorageReader(store, f"{prefix}/sharded-rows"))
    for k, v in full.items():
        check_sharded(back["st"][k], v, f"rows -> columns: {k}")
    assert back["step"] == 5 and back["note"] == f"world {world}" and back["blob"].getvalue() == b"\x01\x02" * 50

    # DTensor on a 1-D mesh, loaded on a 2-D mesh, and the other way round
    dcp.save({"dt": {k: distribute_tensor(v, mesh1, [Shard(0)]) for k, v in full.items()}},
             storage_writer=KVStorageWriter(store, f"{prefix}/dtensor-1d"))
    to2d = [Replicate(), Shard(1)]
    back = {"dt": {k: distribute_tensor(torch.zeros_like(v), mesh2, to2d) for k, v in full.items()}}
    dcp.load(back, storage_reader=KVStorageReader(store, f"{prefix}/dtensor-1d"))
    for k, v in full.items():
        check_dtensor(back["dt"][k], v, mesh2, to2d, f"1-D Shard(0) -> 2-D {to2d}: {k}")
    dcp.save({"dt": {k: distribute_tensor(v, mesh2, [Shard(0), Shard(1)]) for k, v in full.items()}},
             storage_writer=KVStorageWriter(store, f"{prefix}/dtensor-2d"))
    back = {"dt": {k: distribute_tensor(torch.zeros_like(v), mesh1, [Shard(0)]) for k, v in full.items()}}
    dcp.load(back, storage_reader=KVStorageReader(store, f"{prefix}/dtensor-2d"))
    for k, v in full.items():
        check_dtensor(back["dt"][k], v, mesh1, [Shard(0)], f"2-D -> 1-D Shard(0): {k}")

    # an entry switched between sharded and plain: saved sharded, loaded whole on every
    # rank; saved whole (the same on every rank), loaded sharded
    back = {"dt": {k: torch.zeros_like(v) for k, v in full.items()}}
    dcp.load(back, storage_reader=KVStorageReader(store, f"{prefix}/dtensor-1d"))
    for k, v in full.items():
        assert torch.equal(back["dt"][k], v), f"sharded -> plain: {k}"
    dcp.save({"dt": dict(full)}, storage_writer=KVStorageWriter(store, f"{prefix}/plain"))
    back = {"dt": {k: distribute_tensor(torch.zeros_like(v), mesh1, [Shard(1)]) for k, v in full.items()}}
    dcp.load(back, storage_reader=KVStorageReader(store, f"{prefix}/plain"))
    for k, v in full.items():
        check_dtensor(back["dt"][k], v, mesh1, [Shard(1)], f"plain -> Shard(1): {k}")


def main() -> None:
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    addrs, stores = sys.argv[4].split(","), json.loads(sys.argv[5])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        with Client(addrs) as client:
            for prefix, url, options in stores:
                with cloudtier.open_store(url, **options) as objects:
                    scenarios(CheckpointStore(client, objects, chunk_size=64), prefix, world)
                dist.barrier()
        print("ok", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
