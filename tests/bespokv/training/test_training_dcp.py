"""KVStorageWriter / KVStorageReader with real PyTorch DCP: round trips, dedup, async, errors."""

from __future__ import annotations

import warnings

import contextlib

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from bespokv.training import (
    CheckpointExistsError,
    CheckpointNotFoundError,
    CheckpointStore,
    ChunkMissingError,
    KVStorageReader,
    KVStorageWriter,
    MemoryKV,
)
from bespokv.training.errors import InvalidArgumentError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # DCP warns that no process group exists


@contextlib.contextmanager
def dcp_raises(cls: type, match: str = ""):
    """DCP wraps every rank's exception in a CheckpointException (a BaseException)."""
    with pytest.raises(CheckpointException) as info:
        yield
    errors = [exc for exc, _tb in info.value.failures.values()]
    assert errors and all(isinstance(e, cls) and match in str(e) for e in errors), errors


def small_training_state(seed: int = 0) -> dict:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(2):
        model(torch.randn(4, 32)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return {
        "model": model.state_dict(),
        "optim": opt.state_dict(),
        "extra": {"bf16": torch.randn(5, 7).to(torch.bfloat16), "ints": torch.arange(10, dtype=torch.int64),
                  "flags": torch.tensor([True, False, True]), "empty": torch.empty(0, 3),
                  "scalar": torch.tensor(3.5), "strided": torch.randn(6, 4).t()},
        "step": 17,
        "note": "hello",
    }


def zeros_like_state(sd: dict) -> dict:
    def z(v):
        if isinstance(v, torch.Tensor):
            return torch.zeros_like(v)
        if isinstance(v, dict):
            return {k: z(x) for k, x in v.items()}
        return None if isinstance(v, (int, str)) else v
    return z(sd)


def assert_same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b


def test_every_tensor_round_trips(store):
    sd = small_training_state()
    dcp.save(sd, storage_writer=KVStorageWriter(store, "run1/step-17"))
    back = zeros_like_state({k: sd[k] for k in ("model", "extra")})
    back["step"] = 0
    back["note"] = ""
    dcp.load(back, storage_reader=KVStorageReader(store, "run1/step-17"))
    assert_same({k: sd[k] for k in ("model", "extra", "step", "note")}, back)


def test_conjugate_and_negative_views_round_trip_as_filesystemwriter_does(store, tmp_path):
    """Issue 27 item 15: ``x.conj()`` (a lazy conjugate view) made ``tensor_bytes`` fail
    (``view`` is not supported for conjugate views); its ``.imag`` is a lazy negative view."""
    x = torch.randn(5, 3, dtype=torch.complex64)
    sd = {"conj": x.conj(), "neg": x.conj().imag, "conj_t": x.t().conj(), "plain": x}
    assert sd["conj"].is_conj() and sd["neg"].is_neg()
    dcp.save(sd, storage_writer=KVStorageWriter(store, "run/step-1"))
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(tmp_path / "fsw")))
    ours = {k: torch.zeros(v.shape, dtype=v.dtype) for k, v in sd.items()}
    theirs = {k: torch.zeros(v.shape, dtype=v.dtype) for k, v in sd.items()}
    dcp.load(ours, storage_reader=KVStorageReader(store, "run/step-1"))
    dcp.load(theirs, storage_reader=dcp.FileSystemReader(str(tmp_path / "fsw")))
    for k, v in sd.items():
        assert torch.equal(ours[k], v.resolve_conj().resolve_neg()) and torch.equal(ours[k], theirs[k]), k


def test_optimizer_state_round_trips(store):
    sd = small_training_state(seed=3)
    dcp.save({"optim": sd["optim"]}, storage_writer=KVStorageWriter(store, "r/step-1"))
    back = {"optim": {"state": {k: {n: torch.zeros_like(t) if isinstance(t, torch.Tensor) else t
                                     for n, t in s.items()} for k, s in sd["optim"]["state"].items()},
                      "param_groups": sd["optim"]["param_groups"]}}
    dcp.load(back, storage_reader=KVStorageReader(store, "r/step-1"))
    assert_same(sd["optim"]["state"], back["optim"]["state"])


def test_async_save_commits_and_loads(store):
    sd = small_training_state()
    fut = dcp.async_save({"model": sd["model"]}, storage_writer=KVStorageWriter(store, "run/step-1"))
    fut.result(timeout=60)
    assert [c.id for c in store.list("run")] == ["run/step-1"]
    back = {"model": zeros_like_state(sd["model"])}
    dcp.load(back, storage_reader=KVStorageReader(store, "run/step-1"))
    assert_same({"model": sd["model"]}, back)


def test_checkpoint_id_may_come_from_dcp_save(store):
    sd = {"w": torch.randn(100)}
    dcp.save(sd, checkpoint_id="run/step-9", storage_writer=KVStorageWriter(store))
    back = {"w": torch.zeros(100)}
    dcp.load(back, checkpoint_id="run/step-9", storage_reader=KVStorageReader(store))
    assert torch.equal(back["w"], sd["w"]) and store.latest("run").step == 9


def test_dedup_uploads_only_changed_tensors(store):
    torch.manual_seed(0)
    tensors = {f"t{i}": torch.randn(2048) for i in range(10)}  # 8 KiB each: 2 chunks of 4 KiB
    dcp.save({"m": tensors}, storage_writer=KVStorageWriter(store, "ft/step-1"))
    first = store.latest("ft")
    assert first.new_bytes == first.bytes >= 10 * 8192 and first.dedup_bytes == 0
    tensors["t3"] = tensors["t3"] + 1  # fine-tuning changes one tensor in ten
    dcp.save({"m": tensors}, storage_writer=KVStorageWriter(store, "ft/step-2"))
    second = store.latest("ft")
    assert second.new_bytes == 8192
    assert second.dedup_bytes == second.bytes - 8192
    uploaded = [i.key for i in store.objects.list("chunks/")]
    assert len(uploaded) == len(set(uploaded)) == first.chunks + 2 - 0  # 2 new chunks of t3


def test_equal_pieces_within_one_save_are_uploaded_once(store):
    sd = {"a": torch.zeros(4096), "b": torch.zeros(4096)}  # 16 KiB each, all pieces equal
    dcp.save(sd, storage_writer=KVStorageWriter(store, "z/step-1"))
    info = store.latest("z")
    assert info.new_bytes == 4096 and len(list(store.objects.list("chunks/"))) == 1
    back = {"a": torch.ones(4096), "b": torch.ones(4096)}
    dcp.load(back, storage_reader=KVStorageReader(store, "z/step-1"))
    assert torch.equal(back["a"], sd["a"]) and torch.equal(back["b"], sd["b"])


def test_saving_an_existing_id_is_refused(store):
    dcp.save({"w": torch.ones(3)}, storage_writer=KVStorageWriter(store, "run/step-1"))
    with dcp_raises(CheckpointExistsError):
        dcp.save({"w": torch.zeros(3)}, storage_writer=KVStorageWriter(store, "run/step-1"))
    back = {"w": torch.zeros(3)}
    dcp.load(back, storage_reader=KVStorageReader(store, "run/step-1"))
    assert torch.equal(back["w"], torch.ones(3))


def test_a_pending_save_is_invisible(store):
    save_id = store.begin("run/step-5")
    assert save_id and store.list("run") == [] and store.latest("run") is None
    with pytest.raises(CheckpointNotFoundError):
        store.metadata("run/step-5")
    # DCP's loader turns read_metadata's CheckpointNotFoundError into an AssertionError.
    with dcp_raises(Exception, "no committed checkpoint 'run/step-5'"):
        dcp.load({"w": torch.zeros(3)}, storage_reader=KVStorageReader(store, "run/step-5"))
    with pytest.raises(CheckpointExistsError):  # the live save holds the id
        store.begin("run/step-5")


def test_missing_or_corrupt_chunk_is_an_error_not_data(store):
    dcp.save({"w": torch.randn(3000)}, storage_writer=KVStorageWriter(store, "run/step-1"))
    keys = [i.key for i in store.objects.list("chunks/")]
    store.objects.put(keys[0], b"x" * store.objects.head(keys[0]).size)
    with dcp_raises(ChunkMissingError, "checksum"):
        dcp.load({"w": torch.zeros(3000)}, storage_reader=KVStorageReader(store, "run/step-1"))
    store.objects.delete(keys[0])
    with dcp_raises(ChunkMissingError, "missing"):
        dcp.load({"w": torch.zeros(3000)}, storage_reader=KVStorageReader(store, "run/step-1"))


@pytest.mark.parametrize("bad", ["", "noslash", "/x", "run/", "a//b/c", "run/\x00", 5])
def test_bad_checkpoint_ids_are_rejected(bad, objects):
    store = CheckpointStore(MemoryKV(), objects)
    with pytest.raises(InvalidArgumentError):
        KVStorageWriter(store, bad)
    with pytest.raises(InvalidArgumentError):
        KVStorageReader(store, bad)


def test_bad_store_arguments_are_rejected(objects):
    with pytest.raises(InvalidArgumentError):
        KVStorageWriter(object(), "run/step-1")
    with pytest.raises(InvalidArgumentError):
        CheckpointStore(object(), objects)
    for kwargs in ({"chunk_size": 0}, {"threads": 0}, {"lease_s": 0}, {"namespace": "str"}):
        with pytest.raises(InvalidArgumentError):
            CheckpointStore(MemoryKV(), objects, **kwargs)
    store = CheckpointStore(MemoryKV(), objects)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with dcp_raises(InvalidArgumentError, "no checkpoint id"):
            dcp.save({"w": torch.ones(1)}, storage_writer=KVStorageWriter(store))
