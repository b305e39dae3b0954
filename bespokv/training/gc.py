"""Chunk garbage collection: reference counts from chunk records, liveness from the catalog.

One pass, in this order (the order is what makes it safe; see
docs/decisions/0001-checkpoint-chunk-gc.md):

1. read every chunk record (holders = the saves referencing it);
2. read every checkpoint record: a save is live if its record is committed, or pending
   and not expired; expired pending records are reaped (a killed saver's);
3. for each chunk read in 1, drop dead holders; a chunk left with none is CAS-ed from the
   exact value read in 1 to ``deleting``, its object deleted, its record removed. Any save
   that pinned the chunk after step 1 changed the record, so the CAS fails and the chunk
   stays. A save pinned before step 1 is in the holders, and its record existed before
   step 2 (``begin`` precedes every pin), so step 2 sees it live unless it is gone.
4. sweep the object store for chunk objects whose incarnation no record names (left by a
   GC that died between 3's steps, or a lost ambiguous write) and delete them.

Several GCs may run at once: each step is a CAS or an idempotent delete.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from bespokv.training.records import (
    COMMITTED,
    DELETING,
    LIVE,
    CheckpointRecord,
    ChunkRecord,
    chunk_key,
    object_key,
    parse_object_key,
)

if TYPE_CHECKING:
    from bespokv.training.store import CheckpointStore

__all__ = ["GCReport", "collect"]


@dataclasses.dataclass
class GCReport:
    """What one GC pass did."""

    chunks_kept: int = 0
    chunks_deleted: int = 0
    bytes_freed: int = 0
    holders_dropped: int = 0
    saves_reaped: int = 0
    orphan_objects_deleted: int = 0


def collect(store: CheckpointStore, *, now: float | None = None, sweep: bool = True) -> GCReport:
    """Run one GC pass over ``store``; ``now`` overrides the clock (to expire leases).

    Never deletes a chunk that a committed checkpoint, or a live save, holds.
    """
    report = GCReport()
    now = store.clock() if now is None else now
    kv, ns = store.kv, store.ns
    chunks = list(kv.scan_prefix(chunk_key(ns)))  # step 1: before the liveness scan
    live: set[str] = set()
    for key, raw in kv.scan_prefix(ns + b"ck/"):  # step 2
        rec = CheckpointRecord.decode(raw)
        if rec.state == COMMITTED or rec.expires > now:
            live.add(rec.save_id)
        elif store.reap(key, raw, rec):
            report.saves_reaped += 1
        else:  # changed under us (committed just now?): treat as live this pass
            live.add(rec.save_id)
    prefix_len = len(chunk_key(ns))
    for key, raw in chunks:  # step 3
        digest = key[prefix_len:].decode()
        rec = ChunkRecord.decode(raw)
        holders = tuple(h for h in rec.holders if h in live)
        if rec.state == LIVE and holders:
            if holders != rec.holders and kv.cas(key, raw, dataclasses.replace(rec, holders=holders).encode()):
                report.holders_dropped += len(rec.holders) - len(holders)
            report.chunks_kept += 1
            continue
        if rec.state == LIVE:
            dying = dataclasses.replace(rec, state=DELETING, holders=())
            dying_raw = dying.encode()
            if not kv.cas(key, raw, dying_raw):
                report.chunks_kept += 1  # pinned since step 1
                continue
            raw = dying_raw
        store.objects.delete(object_key(digest, rec.token))
        if kv.cas(key, raw, None):
            report.chunks_deleted += 1
            report.bytes_freed += rec.size
    if sweep:  # step 4
        for info in list(store.objects.list("chunks/")):
            parsed = parse_object_key(info.key)
            if parsed is None:
                continue
            digest, token = parsed
            raw = kv.get(chunk_key(ns, digest))
            if raw is None or ChunkRecord.decode(raw).token != token:
                store.objects.delete(info.key)
                report.orphan_objects_deleted += 1
    return report
