"""KVStorageWriter: a ``torch.distributed.checkpoint`` StorageWriter over a CheckpointStore.

Unchanged DCP code works::

    dcp.save(state_dict, storage_writer=KVStorageWriter(store, "run1/step-100"))
    fut = dcp.async_save(state_dict, storage_writer=KVStorageWriter(store, "run1/step-200"))

What each DCP step does here (torch 2.13's StorageWriter sequence):

* ``prepare_global_plan`` (coordinator): ``store.begin`` registers the pending record and
  its save id, which travels to every rank in ``SavePlan.storage_data``.
* ``write_data`` (every rank): each tensor's bytes (the projection DCP asks for: views are
  made contiguous) are cut into ``chunk_size`` pieces; each piece is hashed (BLAKE3),
  pinned and uploaded only if the store does not have it (:mod:`~bespokv.training.chunks`),
  ``threads`` at a time. Equal pieces within one save are uploaded once. Each item's
  WriteResult carries its locator: dtype, shape and the list of
  ``[blake3, token, size, xxh3]`` (the XXH3-64 is what a load verifies).
* ``finish`` (coordinator): the DCP metadata, with every locator, is pickled and committed
  by ``store.commit``: one CAS, the commit point.

Every rank needs the KV (to pin) and the object store: with several processes, use a
bespokv Client as the KV; an embedded rocksmash DB serves one process.
"""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import threading
from concurrent.futures import Future as CFuture
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItem, WriteItemType
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.futures import Future

from bespokv.training.chunks import check_of, digest_of, pin_and_upload
from bespokv.training.errors import InvalidArgumentError
from bespokv.training.records import checkpoint_id_of
from bespokv.training.store import CheckpointStore, SaveStats

__all__ = ["KVStorageWriter", "tensor_bytes"]


def tensor_bytes(t: torch.Tensor) -> tuple[torch.Tensor, memoryview]:
    """A CPU, contiguous version of ``t`` and a byte view of its data (no copy if possible).

    Lazy conjugate and negative views (``x.conj()``, its ``.imag``) are materialized: their
    memory holds the unconjugated values, and ``view`` refuses them. The tensor is returned
    too: the view is only valid while it is alive.
    """
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.resolve_conj().resolve_neg().contiguous()
    if t.numel() == 0:
        return t, memoryview(b"")
    return t, memoryview(t.reshape(-1).view(torch.uint8).numpy())


class _SaveRun:
    """One rank's ``write_data``: a thread pool and the in-save dedup table."""

    def __init__(self, store: CheckpointStore, save_id: str) -> None:
        self.store = store
        self.save_id = save_id
        self._lock = threading.Lock()
        self._first: dict[str, CFuture[str]] = {}  # digest -> token, for equal pieces in one save

    def piece(self, data: memoryview) -> tuple[str, str, int, str, bool]:
        """Hash, pin and (if new) upload one piece: ``(digest, token, size, check, uploaded)``."""
        digest = digest_of(data)
        check = check_of(data)
        with self._lock:
            first = self._first.get(digest)
            if first is None:
                mine: CFuture[str] = CFuture()
                self._first[digest] = mine
        if first is not None:
            return digest, first.result(), len(data), check, False
        try:
            token, uploaded = pin_and_upload(self.store.kv, self.store.objects, self.store.ns,
                                             digest, data, self.save_id)
        except BaseException as e:
            mine.set_exception(e)
            raise
        mine.set_result(token)
        return digest, token, len(data), check, uploaded


class KVStorageWriter(StorageWriter):
    """Save DCP checkpoints into ``store`` under ``checkpoint_id`` (``"run/name"``).

    ``step``: the training step recorded in the catalog (default: the trailing integer of
    the name, as in ``"step-100"``). The id may also be given to ``dcp.save(checkpoint_id=)``.
    Raises ``CheckpointExistsError`` ("Checkpoint already exists: ...", from ``dcp.save``)
    if the id is already committed, unless ``overwrite`` (default False, where
    FileSystemWriter's is True): then the committed checkpoint is replaced.
    """

    def __init__(self, store: CheckpointStore, checkpoint_id: str | None = None, *, step: int | None = None,
                 overwrite: bool = False) -> None:
        super().__init__()
        if not isinstance(store, CheckpointStore):
            raise InvalidArgumentError(f"KVStorageWriter needs a CheckpointStore, not {type(store).__name__}")
        self.store = store
        self.checkpoint_id = None if checkpoint_id is None else checkpoint_id_of(checkpoint_id)
        self.step = step
        self.overwrite = overwrite
        self.is_coordinator = False
        self.save_id: str | None = None
        self.last_stats: SaveStats | None = None

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id is not None:
            self.checkpoint_id = checkpoint_id_of(checkpoint_id)
        self.save_id = None

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        if self.checkpoint_id is None:
            raise InvalidArgumentError("KVStorageWriter has no checkpoint id: pass one ('run/name')")
        if kwargs.get("use_collectives", True) is False:
            raise InvalidArgumentError("KVStorageWriter commits once for all ranks: use_collectives=False is not supported")
        self.is_coordinator = is_coordinator

    def storage_meta(self) -> StorageMeta | None:
        return StorageMeta(checkpoint_id=self.checkpoint_id)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        assert self.checkpoint_id is not None
        save_id = self.store.begin(self.checkpoint_id, self.step, overwrite=self.overwrite)
        return [dataclasses.replace(p, storage_data=save_id) for p in plans]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        save_id = plan.storage_data
        if not isinstance(save_id, str):
            raise InvalidArgumentError("the save plan carries no save id: was prepare_global_plan skipped?")
        self.save_id = save_id
        run = _SaveRun(self.store, save_id)
        size = self.store.chunk_size
        results: list[WriteResult] = []
        with ThreadPoolExecutor(self.store.threads, thread_name_prefix="dcp-save") as pool:
            pending = []
            for item in plan.items:
                locator, keep, view = self._resolve(item, planner)
                futs = [pool.submit(run.piece, view[o:o + size]) for o in range(0, len(view), size)]
                pending.append((item, locator, keep, futs))
            for item, locator, _keep, futs in pending:
                pieces = [f.result() for f in futs]
                locator["chunks"] = [[d, t, n, c] for d, t, n, c, _ in pieces]
                new = sum(n for _, _, n, _, up in pieces if up)
                total = sum(n for _, _, n, _, _ in pieces)
                results.append(WriteResult(index=item.index, size_in_bytes=total,
                                           storage_data={**locator, "new": new}))
        fut: Future[list[WriteResult]] = Future()
        fut.set_result(results)
        return fut

    @staticmethod
    def _resolve(item: WriteItem, planner: SavePlanner) -> tuple[dict[str, Any], Any, memoryview]:
        data = planner.resolve_data(item)
        if item.type == WriteItemType.BYTE_IO:
            if not isinstance(data, io.BytesIO):
                raise InvalidArgumentError(f"DCP gave {type(data).__name__} for a bytes item")
            buf = data.getbuffer()
            return {"k": "b"}, data, memoryview(bytes(buf))
        if not isinstance(data, torch.Tensor):
            raise InvalidArgumentError(f"DCP gave {type(data).__name__} for a tensor item")
        t, view = tensor_bytes(data)
        return {"k": "t", "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}, t, view

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        assert self.checkpoint_id is not None
        stats = SaveStats()
        storage: dict[Any, Any] = {}
        save_id = None
        for rank_results in results:
            for wr in rank_results:
                loc = dict(wr.storage_data)
                new = loc.pop("new")
                storage[wr.index] = loc
                stats.bytes += wr.size_in_bytes
                stats.new_bytes += new
                stats.chunks += len(loc["chunks"])
        stats.dedup_bytes = stats.bytes - stats.new_bytes
        save_id = self.save_id
        if save_id is None:
            raise InvalidArgumentError("finish called before write_data")
        metadata.storage_data = storage
        metadata.storage_meta = StorageMeta(checkpoint_id=self.checkpoint_id, save_id=save_id)
        self.store.commit(self.checkpoint_id, save_id, pickle.dumps(metadata, protocol=pickle.HIGHEST_PROTOCOL), stats)
        self.last_stats = stats

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return False  # needs a CheckpointStore: never chosen automatically by path
