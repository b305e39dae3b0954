"""KVStorageReader: a ``torch.distributed.checkpoint`` StorageReader over a CheckpointStore.

::

    dcp.load(state_dict, storage_reader=KVStorageReader(store, "run1/step-100"))

Loads work with any world size (DCP reshards: each ReadItem names a stored item and the
offsets and lengths of the part it needs). Only committed checkpoints can be read; a
pending or deleted one raises ``CheckpointNotFoundError``. Chunks are fetched ``threads``
at a time, in windows of about ``WINDOW_BYTES`` so memory stays bounded, each checked
against its size and (``store.verify``) its XXH3-64 checksum.
"""

from __future__ import annotations

import io
import os
import pickle
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.distributed.checkpoint.storage import StorageReader
from torch.futures import Future

from bespokv.training.chunks import read_chunk
from bespokv.training.errors import CheckpointError, InvalidArgumentError
from bespokv.training.records import checkpoint_id_of
from bespokv.training.store import CheckpointStore

__all__ = ["KVStorageReader", "WINDOW_BYTES"]

#: Stored bytes fetched before they are handed to the planner: bounds a load's memory.
WINDOW_BYTES = 256 << 20


class KVStorageReader(StorageReader):
    """Load the committed checkpoint ``checkpoint_id`` (``"run/name"``) from ``store``."""

    def __init__(self, store: CheckpointStore, checkpoint_id: str | None = None) -> None:
        super().__init__()
        if not isinstance(store, CheckpointStore):
            raise InvalidArgumentError(f"KVStorageReader needs a CheckpointStore, not {type(store).__name__}")
        self.store = store
        self.checkpoint_id = None if checkpoint_id is None else checkpoint_id_of(checkpoint_id)
        self.storage_data: dict[Any, Any] = {}

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        self.storage_data = {}
        if checkpoint_id is not None:
            self.checkpoint_id = checkpoint_id_of(checkpoint_id)

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        if self.checkpoint_id is None:
            raise InvalidArgumentError("KVStorageReader has no checkpoint id: pass one ('run/name')")
        # The metadata is a pickle, like FileSystemReader's .metadata file: it is trusted
        # as much as the KV it comes from.
        metadata = pickle.loads(self.store.metadata(self.checkpoint_id))
        if not isinstance(metadata, Metadata):
            raise CheckpointError(f"checkpoint {self.checkpoint_id!r} metadata is a {type(metadata).__name__}")
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        return metadata

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        if metadata.storage_data is None:
            raise CheckpointError("checkpoint metadata has no storage data")
        self.storage_data = metadata.storage_data

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        by_item: dict[Any, list[ReadItem]] = {}
        for req in plan.items:
            by_item.setdefault(req.storage_index, []).append(req)
        with ThreadPoolExecutor(self.store.threads, thread_name_prefix="dcp-load") as pool:
            window: list[Any] = []
            in_window = 0
            for index, reqs in by_item.items():
                loc = self.storage_data[index]
                direct = self._whole_destination(loc, reqs, planner)
                window.append((loc, reqs, direct, self._fetch(pool, loc, direct)))
                in_window += sum(c[2] for c in loc["chunks"])
                if in_window >= WINDOW_BYTES:
                    self._deliver(window, planner)
                    window, in_window = [], 0
            self._deliver(window, planner)
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut

    @staticmethod
    def _whole_destination(loc: dict[str, Any], reqs: list[ReadItem], planner: LoadPlanner) -> torch.Tensor | None:
        """The destination tensor, when one request wants the whole stored item and the
        destination is a contiguous CPU tensor of its dtype and shape: then the chunks are
        copied straight into it (one copy fewer). Else None."""
        if loc["k"] != "t" or len(reqs) != 1 or reqs[0].type == LoadItemType.BYTE_IO:
            return None
        req = reqs[0]
        shape = list(loc["shape"])
        if any(req.storage_offsets) or list(req.lengths) != shape or any(req.dest_offsets):
            return None
        dest = planner.resolve_tensor(req).detach()
        if (dest.device.type != "cpu" or not dest.is_contiguous() or list(dest.shape) != shape
                or str(dest.dtype).removeprefix("torch.") != loc["dtype"]):
            return None
        return dest

    def _fetch(self, pool: ThreadPoolExecutor, loc: dict[str, Any], direct: torch.Tensor | None) -> tuple[Any, list[Any]]:
        """Start fetching one stored item into ``direct`` or a fresh buffer; return
        (buffer, futures)."""
        total = sum(c[2] for c in loc["chunks"])
        if loc["k"] == "t":
            target = direct if direct is not None else torch.empty(loc["shape"], dtype=getattr(torch, loc["dtype"]))
            flat = memoryview(target.reshape(-1).view(torch.uint8).numpy()) if total else memoryview(bytearray())
        else:
            target = bytearray(total)
            flat = memoryview(target)
        if len(flat) != total:
            raise CheckpointError(f"stored item is {total} bytes but its shape needs {len(flat)}")
        store = self.store
        futs = []
        offset = 0
        for digest, token, size, *check in loc["chunks"]:
            def copy(off: int = offset, d: str = digest, t: str = token, n: int = size,
                     c: str | None = check[0] if check else None) -> None:
                flat[off:off + n] = read_chunk(store.objects, d, t, n, c, verify=store.verify)
            futs.append(pool.submit(copy))
            offset += size
        return target, futs

    @staticmethod
    def _deliver(window: list[Any], planner: LoadPlanner) -> None:
        for _loc, reqs, direct, (target, futs) in window:
            for f in futs:
                f.result()
            if direct is not None:
                planner.commit_tensor(reqs[0], direct)
                continue
            for req in reqs:
                if req.type == LoadItemType.BYTE_IO:
                    planner.load_bytes(req, io.BytesIO(bytes(target)))
                    continue
                tensor = narrow_tensor_by_index(target, req.storage_offsets, req.lengths)
                dest = planner.resolve_tensor(req).detach()
                if dest.size() != tensor.size():
                    raise CheckpointError(f"{req.storage_index}: stored part is {tuple(tensor.size())}, "
                                          f"the destination {tuple(dest.size())}")
                dest.copy_(tensor)
                planner.commit_tensor(req, dest)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return False  # needs a CheckpointStore: never chosen automatically by path
