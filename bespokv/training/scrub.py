"""Scrub: read every stored chunk, check it against its name, and mark the damaged ones.

A save checks each chunk it deduplicates with one HEAD: size and the store's etag
(:mod:`~bespokv.training.chunks`, decision 0056). Damage that the etag does not show (bits
rotting under an S3 server, a ``file://`` object changed in place within its put's clock
tick) is found only by reading the bytes, which ``scrub`` does for every uploaded chunk:
it reads the whole store, so run it when that is affordable (after a disk incident, or on
a schedule). Each chunk whose object is absent, of the wrong size, or whose BLAKE3 is not
its name is marked not uploaded (one CAS), so the next save that holds those bytes uploads
them again, to the same key, which repairs every checkpoint sharing the chunk. Until then
those checkpoints fail to load with ``ChunkMissingError``; the report names them.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from cloudtier import NotFoundError

from bespokv.training.chunks import digest_of
from bespokv.training.records import COMMITTED, LIVE, CheckpointRecord, ChunkRecord, chunk_key, object_key

if TYPE_CHECKING:
    from bespokv.training.store import CheckpointStore

__all__ = ["ScrubReport", "scrub"]


@dataclasses.dataclass
class ScrubReport:
    """What one scrub found."""

    chunks_checked: int = 0
    bytes_read: int = 0
    damaged: list[str] = dataclasses.field(default_factory=list)  #: digests, now marked for re-upload
    checkpoints_damaged: list[str] = dataclasses.field(default_factory=list)  #: committed ids holding one


def _intact(store: CheckpointStore, digest: str, rec: ChunkRecord) -> tuple[bool, int]:
    try:
        data = store.objects.get(object_key(digest, rec.token))
    except NotFoundError:
        return False, 0
    return len(data) == rec.size and digest_of(data) == digest, len(data)


def _mark_for_upload(store: CheckpointStore, digest: str, token: str) -> None:
    """Clear ``uploaded`` on incarnation ``token`` (a no-op once it is no longer current)."""
    key = chunk_key(store.ns, digest)
    while True:
        raw = store.kv.get(key)
        if raw is None:
            return
        rec = ChunkRecord.decode(raw)
        if rec.token != token or not rec.uploaded:
            return
        if store.kv.cas(key, raw, dataclasses.replace(rec, uploaded=False, etag=None).encode()):
            return


def scrub(store: CheckpointStore) -> ScrubReport:
    """Read and check every uploaded chunk of ``store``, ``store.threads`` at a time."""
    report = ScrubReport()
    prefix_len = len(chunk_key(store.ns))
    records = []
    for key, raw in store.kv.scan_prefix(chunk_key(store.ns)):
        rec = ChunkRecord.decode(raw)
        if rec.state == LIVE and rec.uploaded:
            records.append((key[prefix_len:].decode(), rec))
    holders: set[str] = set()
    with ThreadPoolExecutor(store.threads, thread_name_prefix="dcp-scrub") as pool:
        for (digest, rec), (ok, nbytes) in zip(records, pool.map(lambda r: _intact(store, *r), records)):
            report.chunks_checked += 1
            report.bytes_read += nbytes
            if not ok:
                _mark_for_upload(store, digest, rec.token)
                report.damaged.append(digest)
                holders.update(rec.holders)
    run_prefix = store.ns + b"ck/"
    for key, raw in store.kv.scan_prefix(run_prefix):
        ck = CheckpointRecord.decode(raw)
        if ck.state == COMMITTED and ck.save_id in holders:
            report.checkpoints_damaged.append(key[len(run_prefix):].decode())
    return report
