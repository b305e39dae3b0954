"""What PyTorch's own DCP suites check of a writer and reader, checked on ours at world size 1.

Our own tests of the behaviours that ``test/distributed/checkpoint/``'s file-system and
fsspec suites exercise (no code from them): every kind of item round-trips, and loads
back equal to what DCP's own FileSystemWriter/Reader give for the same state; loading
converts to the destination's dtype; partial loads; an existing id is refused with DCP's
"Checkpoint already exists" wording, and ``overwrite=True`` replaces it; async saves. Each
runs on ``file://`` and on the real S3 server (SeaweedFS). The sharded and resharding
behaviours need several ranks: ``test_training_dcp_resharding.py``.
"""

from __future__ import annotations

import io
import uuid
import warnings

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

import cloudtier
import rocksmash
from bespokv.training import CheckpointExistsError, CheckpointStore, KVStorageReader, KVStorageWriter

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # DCP warns that no process group exists

BUCKET = "dcp-behaviours"


@pytest.fixture(params=["file", pytest.param("seaweedfs", marks=pytest.mark.server)])
def dcp_store(request, tmp_path):
    """A CheckpointStore on rocksmash, with its chunks on file:// or on SeaweedFS."""
    if request.param == "file":
        objects = cloudtier.open_store((tmp_path / "objects").as_uri())
    else:
        server = request.getfixturevalue("seaweedfs_server")
        objects = cloudtier.open_store(f"s3://{BUCKET}/{uuid.uuid4().hex}", create_bucket=True,
                                       **server.store_options())
    db = rocksmash.open(str(tmp_path / "meta"), sync=False)
    try:
        yield CheckpointStore(db, objects, chunk_size=4096, threads=4)
    finally:
        db.close()
        objects.close()


def every_kind_of_item() -> dict:
    torch.manual_seed(7)
    base = torch.randn(6, 8)
    return {
        "float32": torch.randn(4, 5), "float64": torch.randn(3, dtype=torch.float64),
        "float16": torch.randn(7).half(), "bfloat16": torch.randn(2, 3).bfloat16(),
        "int8": torch.randint(-128, 127, (9,), dtype=torch.int8), "uint8": torch.arange(200, 256, dtype=torch.uint8),
        "int64": torch.arange(-5, 5), "bool": torch.tensor([True, False, False]),
        "complex": torch.randn(3, 2, dtype=torch.complex64), "scalar": torch.tensor(2.5), "empty": torch.empty(0, 4),
        "transposed": base.t(), "strided": base[::2, 1::3], "view": base[1],  # views of one storage
        "bigger_than_a_chunk": torch.randn(3000),
        "nested": {"a": {"b": torch.ones(2, 2)}, "n": 3},
        "step": 17, "lr": 1e-4, "name": "run-7", "flags": [1, 2, 3], "cfg": {"layers": 2, "act": "gelu"},
        "blob": io.BytesIO(b"\x00raw bytes\xff" * 100),
    }


def destination_like(sd):
    if isinstance(sd, torch.Tensor):
        return torch.zeros_like(sd)
    if isinstance(sd, dict):
        return {k: destination_like(v) for k, v in sd.items()}
    if isinstance(sd, io.BytesIO):
        return io.BytesIO()
    return sd.__class__() if isinstance(sd, (str, list)) else 0


def plain(x):
    """Comparable form: tensors as (dtype, shape, list), BytesIO as bytes."""
    if isinstance(x, torch.Tensor):
        return (str(x.dtype), tuple(x.shape), x.resolve_conj().tolist())
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, io.BytesIO):
        return x.getvalue()
    return x


def load_both(dcp_store, cid, fsw_dir, dest_of):
    ours, theirs = dest_of(), dest_of()
    dcp.load(ours, storage_reader=KVStorageReader(dcp_store, cid))
    dcp.load(theirs, storage_reader=dcp.FileSystemReader(fsw_dir))
    return ours, theirs


def test_every_kind_of_item_loads_back_as_filesystemwriter_gives_it(dcp_store, tmp_path):
    sd = every_kind_of_item()
    dcp.save(sd, storage_writer=KVStorageWriter(dcp_store, "run/step-1"))
    dcp.save(every_kind_of_item(), storage_writer=dcp.FileSystemWriter(str(tmp_path / "fsw")))
    ours, theirs = load_both(dcp_store, "run/step-1", str(tmp_path / "fsw"), lambda: destination_like(every_kind_of_item()))
    assert plain(ours) == plain(theirs) == plain(every_kind_of_item())


@pytest.mark.parametrize("saved,loaded", [(torch.float32, torch.float64), (torch.float32, torch.bfloat16),
                                          (torch.float64, torch.float16), (torch.int32, torch.int64)])
def test_loading_into_another_dtype_converts_as_dcp_does(dcp_store, tmp_path, saved, loaded):
    torch.manual_seed(1)
    src = (torch.randn(40, 3) * 100).to(saved)
    dcp.save({"w": src}, storage_writer=KVStorageWriter(dcp_store, "run/step-1"))
    dcp.save({"w": src}, storage_writer=dcp.FileSystemWriter(str(tmp_path / "fsw")))
    ours, theirs = load_both(dcp_store, "run/step-1", str(tmp_path / "fsw"),
                             lambda: {"w": torch.zeros(40, 3, dtype=loaded)})
    assert ours["w"].dtype == loaded and torch.equal(ours["w"], src.to(loaded)) and torch.equal(ours["w"], theirs["w"])


def test_a_load_may_ask_for_part_of_a_checkpoint_but_not_for_more(dcp_store):
    sd = {"a": torch.randn(5), "b": torch.randn(6), "c": {"d": torch.randn(2)}}
    dcp.save(sd, storage_writer=KVStorageWriter(dcp_store, "run/step-1"))
    part = {"b": torch.zeros(6)}
    dcp.load(part, storage_reader=KVStorageReader(dcp_store, "run/step-1"))
    assert torch.equal(part["b"], sd["b"])
    more = {"a": torch.zeros(5), "missing": torch.zeros(3)}
    with pytest.raises(CheckpointException, match="missing"):
        dcp.load(more, storage_reader=KVStorageReader(dcp_store, "run/step-1"))
    planner = dcp.DefaultLoadPlanner(allow_partial_load=True)
    dcp.load(more, storage_reader=KVStorageReader(dcp_store, "run/step-1"), planner=planner)
    assert torch.equal(more["a"], sd["a"]) and torch.equal(more["missing"], torch.zeros(3))


def test_an_existing_checkpoint_is_refused_in_dcps_words_unless_overwrite(dcp_store):
    dcp.save({"w": torch.ones(3)}, storage_writer=KVStorageWriter(dcp_store, "run/step-1"))
    with pytest.raises(CheckpointException) as info:
        dcp.save({"w": torch.zeros(3)}, storage_writer=KVStorageWriter(dcp_store, "run/step-1", overwrite=False))
    (error, _tb), = info.value.failures.values()
    assert isinstance(error, CheckpointExistsError)
    assert "Checkpoint already exists" in str(error)  # what tools written for DCP match
    dcp.save({"w": torch.full((3,), 2.0)}, storage_writer=KVStorageWriter(dcp_store, "run/step-1", overwrite=True))
    back = {"w": torch.zeros(3)}
    dcp.load(back, storage_reader=KVStorageReader(dcp_store, "run/step-1"))
    assert torch.equal(back["w"], torch.full((3,), 2.0))
    assert [c.id for c in dcp_store.list("run")] == ["run/step-1"]
    report = dcp_store.gc()
    assert report.chunks_deleted == 1 and report.chunks_kept >= 1  # the replaced tensor's chunk
    with pytest.raises(CheckpointExistsError, match="Checkpoint already exists"):
        dcp_store.begin("run/step-1")


def test_async_saves_commit_when_their_future_completes(dcp_store):
    torch.manual_seed(3)
    states = [{"w": torch.randn(50, 20), "step": i} for i in range(3)]
    futures = []
    for i, sd in enumerate(states):
        futures.append(dcp.async_save(sd, storage_writer=KVStorageWriter(dcp_store, f"run/step-{i}")))
        if i:  # one in flight at a time, as a trainer waits for the previous one
            futures[i - 1].result(timeout=60)
    futures[-1].result(timeout=60)
    assert [c.id for c in dcp_store.list("run")] == ["run/step-0", "run/step-1", "run/step-2"]
    for i, sd in enumerate(states):
        back = {"w": torch.zeros(50, 20), "step": 0}
        dcp.load(back, storage_reader=KVStorageReader(dcp_store, f"run/step-{i}"))
        assert torch.equal(back["w"], sd["w"]) and back["step"] == i


def test_an_async_save_of_a_taken_id_fails_through_its_future(dcp_store):
    dcp.save({"w": torch.ones(3)}, storage_writer=KVStorageWriter(dcp_store, "run/step-1"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(BaseException, match="Checkpoint already exists"):
            dcp.async_save({"w": torch.zeros(3)}, storage_writer=KVStorageWriter(dcp_store, "run/step-1")).result(60)
