"""The checkpoint catalog: list, latest, delete and keep-last-N retention per run.

Functions of a :class:`~bespokv.training.store.CheckpointStore` (bound there as methods).
Only committed records are shown; pending saves are invisible. Deleting a checkpoint
removes its record (one KV delete: it is gone for every reader at once) and its metadata;
its chunks are freed by the next ``gc`` once no other checkpoint holds them.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from bespokv.training.errors import CheckpointNotFoundError, InvalidArgumentError
from bespokv.training.records import COMMITTED, CheckpointRecord, checkpoint_key, split_checkpoint_id

if TYPE_CHECKING:
    from bespokv.training.store import CheckpointStore

__all__ = ["CheckpointInfo", "list_checkpoints", "latest", "delete", "retain", "runs"]


@dataclasses.dataclass(frozen=True)
class CheckpointInfo:
    """One committed checkpoint as the catalog lists it."""

    id: str  #: ``run/name``: pass it to KVStorageReader
    run: str
    name: str
    step: int | None
    time: float  #: commit time, seconds since the epoch
    bytes: int
    new_bytes: int  #: uploaded by this save
    dedup_bytes: int  #: already stored by an earlier save
    chunks: int
    save_id: str


def _check_run(run: object) -> str:
    if not isinstance(run, str) or not run or any(not s for s in run.split("/")):
        raise InvalidArgumentError(f"a run name is a non-empty str without empty '/' segments, not {run!r}")
    return run


def list_checkpoints(store: CheckpointStore, run: str) -> list[CheckpointInfo]:
    """The committed checkpoints of ``run``, oldest first (by step, then commit time)."""
    prefix = checkpoint_key(store.ns, _check_run(run))
    out = []
    for key, raw in store.kv.scan_prefix(prefix):
        name = key[len(prefix):].decode()
        if "/" in name:  # a record of a nested run ("run/sub/name")
            continue
        rec = CheckpointRecord.decode(raw)
        if rec.state != COMMITTED:
            continue
        out.append(CheckpointInfo(f"{run}/{name}", run, name, rec.step, rec.committed or 0.0, rec.bytes,
                                  rec.new_bytes, rec.dedup_bytes, rec.chunks, rec.save_id))
    out.sort(key=lambda c: (c.step if c.step is not None else -1, c.time))
    return out


def latest(store: CheckpointStore, run: str) -> CheckpointInfo | None:
    """The newest committed checkpoint of ``run`` (highest step), or None."""
    found = list_checkpoints(store, run)
    return found[-1] if found else None


def delete(store: CheckpointStore, checkpoint_id: str) -> None:
    """Delete a committed checkpoint. Raises ``CheckpointNotFoundError`` if there is none."""
    run, name = split_checkpoint_id(checkpoint_id)
    key = checkpoint_key(store.ns, run, name)
    raw = store.kv.get(key)
    if raw is None or CheckpointRecord.decode(raw).state != COMMITTED:
        raise CheckpointNotFoundError(f"no committed checkpoint {checkpoint_id!r}")
    rec = CheckpointRecord.decode(raw)
    if not store.kv.cas(key, raw, None):
        raise CheckpointNotFoundError(f"checkpoint {checkpoint_id!r} changed while being deleted")
    store._delete_metadata(rec.save_id)


def retain(store: CheckpointStore, run: str, keep_last: int) -> list[str]:
    """Delete all but the newest ``keep_last`` checkpoints of ``run``; return the deleted ids."""
    if not isinstance(keep_last, int) or keep_last < 0:
        raise InvalidArgumentError(f"keep_last must be an int >= 0, not {keep_last!r}")
    found = list_checkpoints(store, run)
    doomed = found[: max(0, len(found) - keep_last)]
    for c in doomed:
        delete(store, c.id)
    return [c.id for c in doomed]


def runs(store: CheckpointStore) -> list[str]:
    """Every run with at least one record (committed or pending)."""
    prefix = store.ns + b"ck/"
    names = {key[len(prefix):].decode().rpartition("/")[0] for key, _ in store.kv.scan_prefix(prefix)}
    return sorted(names)
