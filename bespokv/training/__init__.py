"""Training metadata on the store: PyTorch DCP checkpoints and a 10Cache-style tensor table.

Both run on one small KV interface (:mod:`bespokv.training.kv`) that an open ``rocksmash``
DB or a ``bespokv`` Client satisfies. See docs/training.md.

* :class:`CheckpointStore`, :class:`KVStorageWriter`, :class:`KVStorageReader`: DCP
  checkpoints as content-addressed, deduplicated chunks in a cloudtier object store, with
  metadata and an atomic commit in the KV, a catalog, retention and safe chunk GC.
* :class:`TensorProfiler`, :class:`TensorTable`: 10Cache's prefetch table.

The DCP classes import torch; they load on first use, so the KV parts do not need it.
"""

from __future__ import annotations

from typing import Any

from bespokv.training.errors import (
    CheckpointError,
    CheckpointExistsError,
    CheckpointNotFoundError,
    ChunkMissingError,
    CommitFailedError,
)
from bespokv.training.kv import KV, BespokvKV, MemoryKV, RocksmashKV, as_kv

__all__ = [
    "CheckpointStore",
    "CheckpointInfo",
    "GCReport",
    "ScrubReport",
    "KVStorageWriter",
    "KVStorageReader",
    "TensorProfiler",
    "TensorTable",
    "TensorRow",
    "KV",
    "MemoryKV",
    "RocksmashKV",
    "BespokvKV",
    "as_kv",
    "CheckpointError",
    "CheckpointExistsError",
    "CheckpointNotFoundError",
    "ChunkMissingError",
    "CommitFailedError",
]

_LAZY = {
    "CheckpointStore": "bespokv.training.store",
    "CheckpointInfo": "bespokv.training.catalog",
    "GCReport": "bespokv.training.gc",
    "ScrubReport": "bespokv.training.scrub",
    "KVStorageWriter": "bespokv.training.dcp_writer",
    "KVStorageReader": "bespokv.training.dcp_reader",
    "TensorProfiler": "bespokv.training.profiler",
    "TensorTable": "bespokv.training.tensor_table",
    "TensorRow": "bespokv.training.tensor_table",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bespokv.training' has no attribute {name!r}")
