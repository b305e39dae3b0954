"""Versioned registers: the part of the two active-active controlets they share.

Every value is stored with its version (see ``bespokv/versioned.py``); a replica only ever
replaces a value by one with a higher version (:meth:`VersionedControlet.store_if_newer`),
so applying the same versioned writes in any order, any number of times, converges.
Deletes are tombstones (versioned values without a value).

Peer traffic is batched: concurrent operations of one node share one ``VersionedRead`` or
``VersionedWrite`` RPC per peer (:class:`~bespokv.batcher.AutoBatcher`), and
:meth:`quorum` waits for the first ``need`` answers, leaving the others to finish.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import xxhash

from bespokv import versioned
from bespokv.batcher import AutoBatcher
from bespokv.controlets.base import Controlet, ShardContext, user_end
from bespokv.datalets.base import RESERVED_PREFIX
from bespokv.errors import DeadlineExceededError, Error, UnavailableError
from bespokv.hashring import key_hash
from bespokv.peers import rpc_error
from bespokv.proto import bespokv_pb2 as pb

__all__ = ["VersionedControlet", "QuorumError", "DIGEST_BUCKETS", "bucket_of", "digest_of"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Anti-entropy digest buckets per shard (frozen within a cluster: peers compare them).
DIGEST_BUCKETS = 64


def bucket_of(key: bytes) -> int:
    return key_hash(key) % DIGEST_BUCKETS


def digest_of(key: bytes, enc: bytes) -> int:
    """A key's contribution to its bucket digest: a hash of the key and its version."""
    return xxhash.xxh3_64_intdigest(key + enc[: versioned.HEADER])


class QuorumError(UnavailableError):
    """Fewer replicas answered than the quorum needs."""


class VersionedControlet(Controlet):
    """Shared machinery: store-if-newer, batched peer reads/writes, quorum waits."""

    def __init__(self, ctx: ShardContext) -> None:
        super().__init__(ctx)
        self._readers: dict[tuple[str, bool], AutoBatcher[list[bytes], list[pb.VersionedValue]]] = {}
        self._writers: dict[str, AutoBatcher[list[tuple[bytes, bytes]], int]] = {}
        self.readable = True
        self.stats: dict[str, float] = {
            "stored": 0,
            "stale_dropped": 0,
            "ae_rounds": 0,
            "ae_repaired": 0,
            "tombstones_collected": 0,
            # expired tombstones a collection round had to keep (a replica objected or
            # was unreachable): shows that rounds run even when they collect nothing
            "tombstones_kept": 0,
        }
        self.digests = [0] * DIGEST_BUCKETS
        self.last_ae: dict[str, float] = {}
        self._rebuild_digests()

    # -- local store ----------------------------------------------------------------------

    async def store_if_newer(self, entries: Sequence[tuple[bytes, bytes]]) -> int:
        """Write each encoded value whose version beats the stored one, in one batch.

        The read-compare-write runs as one call on the shard's worker thread, so no other
        write of the shard comes between the read and the write; the digests are updated
        afterwards, shielded from cancellation (the write happens anyway)."""
        if not entries:
            return 0
        # Keep the highest version per key within the batch (the later entry on a tie).
        best: dict[bytes, bytes] = {}
        for k, enc in entries:
            cur = best.get(k)
            if cur is None or not versioned.newer(cur, enc):
                best[k] = enc
        return await asyncio.shield(asyncio.ensure_future(self._store_best(best)))

    async def _store_best(self, best: dict[bytes, bytes]) -> int:
        changes = await self.datalet.run(self._store_on_worker, best)
        if changes:
            self.on_stored(changes)
        self.stats["stored"] += len(changes)
        self.stats["stale_dropped"] += len(best) - len(changes)
        return len(changes)

    def _store_on_worker(self, best: dict[bytes, bytes]) -> list[tuple[bytes, bytes | None, bytes]]:
        """(worker thread) Store what is newer; returns ``(key, old, new)`` per value stored."""
        datalet = self.datalet.inner
        keys = list(best)
        olds = datalet.multi_get(keys)
        ops: list[tuple[bytes, bytes | None]] = []
        changes: list[tuple[bytes, bytes | None, bytes]] = []
        for k, old in zip(keys, olds):
            enc = best[k]
            if versioned.newer(enc, old) and self.accept(k, enc, old):
                ops.append((k, enc))
                changes.append((k, old, enc))
        if ops:
            datalet.write(ops)
        return changes

    def accept(self, key: bytes, enc: bytes, old: bytes | None) -> bool:
        """Whether a newer incoming value should replace ``old``: yes, except a tombstone
        past its grace period over nothing (it was collected elsewhere; storing it would
        only bring it back). Over an older value it is stored, and collected later."""
        return old is not None or not self.expired(enc, time.time_ns() // 1_000_000)

    # -- tombstones -----------------------------------------------------------------------

    def deletion_ms(self, enc: bytes) -> int | None:
        """When a tombstone was written (ms), or None when unknown (never collected)."""
        return versioned.deleted_at(enc)

    def expired(self, enc: bytes, now_ms: int) -> bool:
        if enc[0] != versioned.TOMBSTONE:
            return False
        t = self.deletion_ms(enc)
        return t is not None and t < now_ms - int(self.ctx.tuning.tombstone_grace * 1000)

    async def confirm_collectable(self, dead: list[tuple[bytes, bytes]]) -> list[bool]:
        """Which expired tombstones may be dropped here (default: all)."""
        return [True] * len(dead)

    async def collect_tombstones(self) -> int:
        """Delete tombstones older than the grace period; returns how many."""
        now_ms = time.time_ns() // 1_000_000
        dead: list[tuple[bytes, bytes]] = []
        async for chunk in self.datalet.export(4096):
            for k, enc in chunk:
                if not k.startswith(RESERVED_PREFIX) and self.expired(enc, now_ms):
                    dead.append((k, enc))
        if not dead:
            return 0
        ok = await self.confirm_collectable(dead)
        self.stats["tombstones_kept"] += len(dead) - sum(ok)
        dead = [d for d, yes in zip(dead, ok) if yes]
        dropped = await asyncio.shield(asyncio.ensure_future(self._drop_unchanged(dead)))
        self.stats["tombstones_collected"] += len(dropped)
        return len(dropped)

    async def _drop_unchanged(self, dead: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        def drop() -> list[tuple[bytes, bytes]]:
            # (worker thread) Re-read in the same call as the delete: drop only what is unchanged.
            datalet = self.datalet.inner
            current = datalet.multi_get([k for k, _ in dead])
            gone = [(k, enc) for (k, enc), cur in zip(dead, current) if cur == enc]
            if gone:
                datalet.write([(k, None) for k, _ in gone])
            return gone

        gone = await self.datalet.run(drop)
        for k, enc in gone:
            self.digests[bucket_of(k)] ^= digest_of(k, enc)
        return gone

    async def collector_loop(self) -> None:
        period = max(0.5, min(self.ctx.tuning.tombstone_grace / 2, 60.0))
        while True:
            await asyncio.sleep(period)
            try:
                await self.collect_tombstones()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # retry next period
                log.info("shard %s: tombstone collection failed: %r", self.ctx.shard_id, exc)

    def on_stored(self, changes: list[tuple[bytes, bytes | None, bytes]]) -> None:
        """Keeps the anti-entropy digests current: ``(key, old, new)`` per value replaced."""
        d = self.digests
        for k, old, new in changes:
            b = bucket_of(k)
            if old is not None:
                d[b] ^= digest_of(k, old)
            d[b] ^= digest_of(k, new)

    def _rebuild_digests(self) -> None:
        """At construction, before the worker has any call: read the datalet directly."""
        d = [0] * DIGEST_BUCKETS
        for chunk in self.datalet.inner.export(4096):
            for k, enc in chunk:
                if not k.startswith(RESERVED_PREFIX):
                    d[bucket_of(k)] ^= digest_of(k, enc)
        self.digests = d

    # -- anti-entropy ---------------------------------------------------------------------

    async def anti_entropy_round(self, node: str) -> int:
        """Compare digests with ``node`` and exchange the buckets that differ, both ways;
        returns how many of our values changed."""
        resp = await self.ctx.peers.peer(node).Digest(
            pb.DigestRequest(shard=self.ctx.shard_id), timeout=5.0, metadata=self.ctx.peers.metadata
        )
        theirs = list(resp.digests)
        if len(theirs) != DIGEST_BUCKETS:
            raise ValueError(f"{node} sent {len(theirs)} digests, expected {DIGEST_BUCKETS}")
        differing = [b for b in range(DIGEST_BUCKETS) if theirs[b] != self.digests[b]]
        self.stats["ae_rounds"] += 1
        self.last_ae[node] = time.monotonic()
        if not differing:
            return 0
        changed = await self.pull_export(node, differing)
        wanted = set(differing)
        ours: list[tuple[bytes, bytes]] = []
        async for chunk in self.datalet.export(self.ctx.tuning.export_chunk):
            ours.extend((k, v) for k, v in chunk if not k.startswith(RESERVED_PREFIX) and bucket_of(k) in wanted)
            if len(ours) >= 2048:
                await self.write_to(node, ours)
                ours = []
        if ours:
            await self.write_to(node, ours)
        self.stats["ae_repaired"] += changed
        return changed

    async def anti_entropy_loop(self) -> None:
        """Every ``anti_entropy_interval``, one round with each other replica."""
        interval = self.ctx.tuning.anti_entropy_interval
        while True:
            await asyncio.sleep(interval)
            for node in self.ctx.others:
                try:
                    await self.anti_entropy_round(node)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # peer down; next round
                    log.debug("shard %s: anti-entropy with %s failed: %r", self.ctx.shard_id, node, exc)

    async def on_digest(self, request: pb.DigestRequest) -> pb.DigestResponse:
        return pb.DigestResponse(digests=self.digests)

    @staticmethod
    def live_pairs(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        out = []
        for k, enc in raw:
            if enc[0] == versioned.LIVE:
                out.append((k, enc[versioned.HEADER :]))
        return out

    async def get_local(self, key: bytes) -> bytes | None:
        enc = await self.datalet.get(key)
        return None if enc is None else versioned.decode(enc)[1]

    async def scan_local(
        self, start: bytes | None, end: bytes | None, *, reverse: bool, limit: int | None
    ) -> list[tuple[bytes, bytes]]:
        def live() -> list[tuple[bytes, bytes]]:
            # (worker thread) one call: tombstones are skipped, so the page size is unknown
            out: list[tuple[bytes, bytes]] = []
            for k, enc in self.datalet.inner.scan(start, user_end(end), reverse=reverse):
                if enc[0] == versioned.LIVE:
                    out.append((k, enc[versioned.HEADER :]))
                    if limit is not None and len(out) >= limit:
                        break
            return out

        return await self.datalet.run(live)

    # -- batched peer calls ---------------------------------------------------------------

    def _reader(self, node: str, versions_only: bool) -> AutoBatcher[list[bytes], list[pb.VersionedValue]]:
        b = self._readers.get((node, versions_only))
        if b is None:

            async def send(items: list[list[bytes]]) -> list[list[pb.VersionedValue]]:
                keys = [k for item in items for k in item]
                resp = await self.ctx.peers.peer(node).VersionedRead(
                    pb.VersionedReadRequest(shard=self.ctx.shard_id, keys=keys, versions_only=versions_only),
                    timeout=self.ctx.tuning.request_timeout,
                    metadata=self.ctx.peers.metadata,
                )
                vals = list(resp.values)
                out, i = [], 0
                for item in items:
                    out.append(vals[i : i + len(item)])
                    i += len(item)
                return out

            b = self._readers[(node, versions_only)] = AutoBatcher(send, max_batch=256, max_inflight=2)
        return b

    def _writer(self, node: str) -> AutoBatcher[list[tuple[bytes, bytes]], int]:
        b = self._writers.get(node)
        if b is None:

            async def send(items: list[list[tuple[bytes, bytes]]]) -> list[int]:
                entries = [pb.KeyValue(key=k, value=v) for item in items for k, v in item]
                resp = await self.ctx.peers.peer(node).VersionedWrite(
                    pb.VersionedWriteRequest(shard=self.ctx.shard_id, entries=entries),
                    timeout=self.ctx.tuning.request_timeout,
                    metadata=self.ctx.peers.metadata,
                )
                return [resp.applied] * len(items)

            b = self._writers[node] = AutoBatcher(send, max_batch=256, max_inflight=2)
        return b

    async def read_from(self, node: str, keys: list[bytes], versions_only: bool) -> list[bytes | None]:
        """Encoded values of ``keys`` at ``node`` (None where absent)."""
        if node == self.ctx.node_id:
            if not self.readable:
                raise UnavailableError(f"{node} is recovering")
            return await self.datalet.multi_get(keys)
        try:
            vals = await self._reader(node, versions_only).submit(keys)
        except Exception as exc:  # mapped
            raise rpc_error(exc, f"read from {node}") from exc
        return [v.data if v.found else None for v in vals]

    async def write_to(self, node: str, entries: list[tuple[bytes, bytes]]) -> None:
        if node == self.ctx.node_id:
            await self.store_if_newer(entries)
            return
        try:
            await self._writer(node).submit(entries)
        except Exception as exc:  # mapped
            raise rpc_error(exc, f"write to {node}") from exc

    async def quorum(
        self,
        calls: dict[str, Callable[[], Awaitable[T]]],
        need: int,
        what: str,
        *,
        ambiguous: bool = False,
    ) -> dict[str, T]:
        """Run ``calls`` (one per node) and return the first ``need`` successes.

        Raises :class:`QuorumError` (UNAVAILABLE) when too many fail, or
        DEADLINE_EXCEEDED after ``request_timeout`` (only when ``ambiguous``: a write
        phase that may have landed somewhere; a read phase says UNAVAILABLE).
        """
        results: dict[str, T] = {}
        errors: dict[str, str] = {}
        tasks: dict[asyncio.Future[T], str] = {}
        for node, call in calls.items():
            tasks[asyncio.ensure_future(call())] = node
        pending = set(tasks)
        deadline = time.monotonic() + self.ctx.tuning.request_timeout
        try:
            while len(results) < need:
                if len(results) + len(pending) < need:
                    raise QuorumError(
                        f"shard {self.ctx.shard_id}: {what} reached {len(results)} of {need} replicas needed"
                        f" ({'; '.join(f'{n}: {e}' for n, e in errors.items())})"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    msg = f"shard {self.ctx.shard_id}: {what} timed out with {len(results)} of {need} replicas"
                    raise DeadlineExceededError(msg) if ambiguous else QuorumError(msg)
                done, pending = await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    node = tasks[t]
                    exc = t.exception()
                    if exc is None:
                        results[node] = t.result()
                    else:
                        errors[node] = str(exc) if isinstance(exc, Error) else repr(exc)
        finally:
            for t in pending:  # let stragglers finish (they complete writes); mute errors
                t.add_done_callback(_silence)
        return results

    # -- peer RPC handlers ----------------------------------------------------------------

    async def on_versioned_read(self, request: pb.VersionedReadRequest) -> pb.VersionedReadResponse:
        if not self.readable:
            raise UnavailableError(f"{self.ctx.node_id} is recovering its replica of shard {self.ctx.shard_id}")
        vals = await self.datalet.multi_get(list(request.keys))
        out = []
        for v in vals:
            if v is None:
                out.append(pb.VersionedValue(found=False))
            else:
                out.append(pb.VersionedValue(found=True, data=v[: versioned.HEADER] if request.versions_only else v))
        return pb.VersionedReadResponse(values=out)

    async def on_versioned_write(self, request: pb.VersionedWriteRequest) -> pb.VersionedWriteResponse:
        entries = [(e.key, e.value) for e in request.entries]
        for k, enc in entries:
            if k.startswith(RESERVED_PREFIX) or not k:
                raise UnavailableError("versioned write with a reserved or empty key")
            versioned.decode(enc)  # raises CorruptionError on a malformed value
        self.observe(entries)
        return pb.VersionedWriteResponse(applied=await self.store_if_newer(entries))

    def observe(self, entries: list[tuple[bytes, bytes]]) -> None:
        """Hook: versions seen from peers (LWW advances its clock)."""

    async def on_versioned_scan(self, request: pb.VersionedScanRequest) -> pb.VersionedScanResponse:
        if not self.readable:
            raise UnavailableError(f"{self.ctx.node_id} is recovering its replica of shard {self.ctx.shard_id}")
        end = user_end(request.end or None)
        pairs = await self.datalet.scan(request.start or None, end, reverse=request.reverse, limit=request.limit or None)
        return pb.VersionedScanResponse(pairs=[pb.KeyValue(key=k, value=v) for k, v in pairs])

    async def on_export(self, request: pb.ExportRequest) -> AsyncIterator[pb.ExportChunk]:
        buckets = set(request.buckets)
        async for chunk in self.datalet.export(self.ctx.tuning.export_chunk):
            pairs = [
                pb.KeyValue(key=k, value=v)
                for k, v in chunk
                if not k.startswith(RESERVED_PREFIX) and (not buckets or bucket_of(k) in buckets)
            ]
            if pairs:
                yield pb.ExportChunk(pairs=pairs)

    async def pull_export(self, node: str, buckets: Sequence[int] = ()) -> int:
        """Merge ``node``'s replica (or some of its digest buckets) into ours."""
        call = self.ctx.peers.peer(node).Export(
            pb.ExportRequest(shard=self.ctx.shard_id, buckets=list(buckets)),
            timeout=max(30.0, self.ctx.tuning.request_timeout),
            metadata=self.ctx.peers.metadata,
        )
        n = 0
        async for chunk in call:
            entries = [(kv.key, kv.value) for kv in chunk.pairs]
            self.observe(entries)
            n += await self.store_if_newer(entries)
        return n

    def close_batchers(self) -> None:
        for b in list(self._readers.values()) + list(self._writers.values()):
            b.close()

    def extra_stats(self) -> dict[str, Any]:
        return dict(self.stats)


def _silence(t: asyncio.Future[Any]) -> None:
    if not t.cancelled():
        t.exception()
