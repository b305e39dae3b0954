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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import xxhash

from bespokv import representation, versioned
from bespokv.batcher import AutoBatcher
from bespokv.controlets.base import Controlet, ShardContext, user_end
from bespokv.controlets.replstore import MERGED_KEY
from bespokv.datalets.base import RESERVED_PREFIX
from bespokv.errors import DeadlineExceededError, Error, UnavailableError
from bespokv.hashring import key_hash
from bespokv.peers import rpc_error
from bespokv.proto import bespokv_pb2 as pb
from bespokv.shardmap import ShardInfo

__all__ = ["VersionedControlet", "QuorumError", "DIGEST_BUCKETS", "bucket_of", "digest_of"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Anti-entropy digest buckets per shard (frozen within a cluster: peers compare them).
DIGEST_BUCKETS = 64


#: Seconds a peer that failed a read phase's call, or kept one waiting past
#: ``Tuning.quorum_spare_after``, is asked only as a spare (then it is tried again).
SLOW_PEER_SECONDS = 1.0

#: Store calls one group commit takes at most (the rest wait for the next group): bounds
#: the size of one datalet batch, which holds the worker (and the shard's reads) that long.
STORE_GROUP_CALLS = 64


def _keep_newest(into: dict[bytes, bytes], entries: Iterable[tuple[bytes, bytes]]) -> None:
    """Put each entry's value in ``into`` unless ``into`` holds a newer one (the later
    entry wins a tie)."""
    for k, enc in entries:
        cur = into.get(k)
        if cur is None or not versioned.newer(cur, enc):
            into[k] = enc


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
            # store-if-newer calls run on the worker, and how many of them wrote (with a
            # syncing datalet, each write is one fsync): their ratio is the group commit
            "store_calls": 0,
            "store_groups": 0,
            "datalet_writes": 0,
            # quorum phases this node coordinated (a write is two, a read one or two)
            "quorum_rounds": 0,
            # spare calls read phases had to start (a call failed or was slow)
            "quorum_spares": 0,
            "ae_rounds": 0,
            "ae_repaired": 0,
            # buckets exchanged by anti-entropy (whole buckets, both ways)
            "ae_buckets": 0,
            "tombstones_collected": 0,
            # expired tombstones a collection round had to keep (a replica objected or
            # was unreachable): shows that rounds run even when they collect nothing
            "tombstones_kept": 0,
        }
        self.digests = [0] * DIGEST_BUCKETS
        self.last_ae: dict[str, float] = {}
        #: per peer: both sides' digests at the last round, and per bucket how many
        #: rounds in a row it has differed (settled_differences)
        self._ae_seen: dict[str, tuple[list[int], list[int]]] = {}
        self._ae_streak: dict[str, list[int]] = {}
        #: per peer: until when read phases ask it only as a spare (it failed or was slow)
        self._slow_until: dict[str, float] = {}
        #: group commit of store_if_newer (one group on the worker at a time); never
        #: closed: a group on its way to the worker finishes, and updates the digests
        self._store_group: AutoBatcher[dict[bytes, bytes], int] = AutoBatcher(
            self._store_groups, max_batch=STORE_GROUP_CALLS, max_inflight=1
        )
        if not ctx.tuning.group_commit:  # one call per group, as many on the worker as come
            self._store_group = AutoBatcher(self._store_groups, max_batch=1, max_inflight=1 << 30)
        self._rebuild_digests()
        #: the shard epoch whose switch merge this replica has finished (0: none)
        self.merged_epoch = 0
        self._switch_merge: asyncio.Task[None] | None = None
        self._switch_merge_epoch = 0
        #: whether the datalet may hold MERGED_KEY (unknown at the start)
        self._marker_maybe = True

    # -- before a live switch to a master-slave mode (modeswitch.py, decision 0049) ---------

    def merge_for_switch(self, info: ShardInfo) -> None:
        """``info`` (frozen and drained) asks its replicas to merge before it switches to a
        master-slave mode: pull every other replica's values into this one (newest version
        wins; every replica must answer, retried until they do), then store ``MERGED_KEY``
        (the history the switch gives the shard) and report ``merged_epoch``. No new
        version appears meanwhile (the shard is frozen and drained: stragglers and repairs
        carry versions that exist already), so every replica ends with the same values.
        Stopped by :meth:`stop` (before the switch converts the replica) or by
        :meth:`end_switch_merge` (the switch was called off)."""
        if self._switch_merge_epoch == info.epoch:
            return
        if self._switch_merge is not None:
            self._switch_merge.cancel()
        self._switch_merge_epoch = info.epoch
        self._switch_merge = asyncio.ensure_future(self._merge_all(info))

    async def _merge_all(self, info: ShardInfo) -> None:
        pending = [r for r in info.replicas if r != self.ctx.node_id]
        while pending:
            for node in list(pending):
                try:
                    await self.pull_export(node)
                    pending.remove(node)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # retried: every replica must answer
                    log.info("shard %s: merging %s's values for the switch failed: %r", info.id, node, exc)
            if pending:
                await asyncio.sleep(0.2)
        self._marker_maybe = True
        await self.datalet.write([(MERGED_KEY, representation.switch_history(info.id, info.epoch))])
        self.merged_epoch = info.epoch
        log.info("shard %s: %s merged every replica's values (epoch %d)", info.id, self.ctx.node_id, info.epoch)

    async def end_switch_merge(self) -> None:
        """The shard is not merging for a switch (any more): stop a merge, and drop the
        marker a called-off switch left, since writes may come again and this replica then
        no longer holds every replica's values."""
        task, self._switch_merge = self._switch_merge, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._switch_merge_epoch = self.merged_epoch = 0
        if self._marker_maybe:
            if await self.datalet.get(MERGED_KEY) is not None:
                await self.datalet.write([(MERGED_KEY, None)])
            self._marker_maybe = False

    async def _stop_switch_merge(self) -> None:
        """(from the subclasses' stop) A merge must not write after the replica converts."""
        task = self._switch_merge
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def status(self) -> pb.ShardStatus:
        st = super().status()
        if self.merged_epoch:
            st.info["merged_epoch"] = str(self.merged_epoch)
        return st

    # -- local store ----------------------------------------------------------------------

    async def store_if_newer(self, entries: Sequence[tuple[bytes, bytes]]) -> int:
        """Write each encoded value whose version beats the stored one; returns how many
        of ``entries``' keys took this call's value.

        Group commit: concurrent calls of the shard share one read-compare-write on the
        worker thread (one datalet batch, so one fsync on a syncing datalet): a call made
        while a group is on the worker joins the next group. The read-compare-write runs
        as one call on the worker, so no other write of the shard comes between the read
        and the write; it is shielded from the caller's cancellation (the write happens
        anyway, and the digests must follow it). A call returns once its group is stored."""
        if not entries:
            return 0
        # Keep the highest version per key within the batch (the later entry on a tie).
        best: dict[bytes, bytes] = {}
        _keep_newest(best, entries)
        return await asyncio.shield(asyncio.ensure_future(self._store_group.submit(best)))

    async def _store_groups(self, groups: list[dict[bytes, bytes]]) -> list[int]:
        """(the group committer's send) One worker call for every waiting call's values."""
        merged: dict[bytes, bytes] = {}
        for best in groups:
            _keep_newest(merged, best.items())
        changes = await self.datalet.run(self._store_on_worker, merged)
        self.stats["store_calls"] += len(groups)
        self.stats["store_groups"] += 1
        if changes:
            self.stats["datalet_writes"] += 1
            self.on_stored(changes)
        self.stats["stored"] += len(changes)
        self.stats["stale_dropped"] += len(merged) - len(changes)
        stored = {k: new for k, _, new in changes}
        return [sum(1 for k, enc in best.items() if stored.get(k) == enc) for best in groups]

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
        """Compare digests with ``node`` and exchange the buckets that differ for good,
        both ways; returns how many of our values changed.

        A bucket differs for good when it differed in the last round too and neither
        side's digest of it changed since (see :meth:`settled_differences`): a bucket
        that differs only because writes are on their way (stored here, not yet there)
        is not exchanged, which under a steady write load was nearly every bucket, every
        round: a full export both ways."""
        resp = await self.ctx.peers.peer(node).Digest(
            pb.DigestRequest(shard=self.ctx.shard_id), timeout=5.0, metadata=self.ctx.peers.metadata
        )
        theirs = list(resp.digests)
        if len(theirs) != DIGEST_BUCKETS:
            raise ValueError(f"{node} sent {len(theirs)} digests, expected {DIGEST_BUCKETS}")
        differing = self.settled_differences(node, list(self.digests), theirs)
        self.stats["ae_rounds"] += 1
        self.last_ae[node] = time.monotonic()
        if not differing:
            return 0
        self.stats["ae_buckets"] += len(differing)
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

    def settled_differences(self, node: str, ours: list[int], theirs: list[int]) -> list[int]:
        """The buckets to exchange with ``node`` this round, given both sides' digests.

        A bucket is exchanged when its digests differ now and differed with the same
        values in the previous round with ``node`` (nothing arrived on either side in
        between, so the difference is not writes in flight), or when it has differed
        in ``Tuning.anti_entropy_force_rounds`` rounds in a row (a bucket written all
        the time is still repaired, every that many rounds)."""
        force = self.ctx.tuning.anti_entropy_force_rounds
        prev = self._ae_seen.get(node)
        self._ae_seen[node] = (ours, theirs)
        streak = self._ae_streak.setdefault(node, [0] * DIGEST_BUCKETS)
        out = []
        for b in range(DIGEST_BUCKETS):
            if ours[b] == theirs[b]:
                streak[b] = 0
                continue
            streak[b] += 1
            settled = prev is not None and prev[0][b] == ours[b] and prev[1][b] == theirs[b]
            if settled or streak[b] >= force:
                out.append(b)
                streak[b] = 0
        return out

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
        spares: bool = False,
    ) -> dict[str, T]:
        """Run ``calls`` (one per node) and return the first ``need`` successes.

        ``spares``: a read phase. Only ``need`` calls start, this node's own first, then
        the peers that have not kept one waiting lately; the others are spares, started
        one per failed call, and all at once when ``Tuning.quorum_spare_after`` passes
        without ``need`` answers (a slow or paused peer), so a read costs a majority of
        replicas, not all of them. Any majority serves a read phase (ABD), so which
        replicas answer changes nothing but the cost. ``quorum_spare_after = 0`` starts
        every call at once.

        Raises :class:`QuorumError` (UNAVAILABLE) when too many fail, or
        DEADLINE_EXCEEDED after ``request_timeout`` (only when ``ambiguous``: a write
        phase that may have landed somewhere; a read phase says UNAVAILABLE).
        """
        self.stats["quorum_rounds"] += 1
        results: dict[str, T] = {}
        errors: dict[str, str] = {}
        tasks: dict[asyncio.Future[T], str] = {}
        pending: set[asyncio.Future[T]] = set()
        spare_after = self.ctx.tuning.quorum_spare_after if spares else 0.0
        waiting = self._preference(list(calls)) if spare_after > 0 else []
        now = time.monotonic()
        deadline = now + self.ctx.tuning.request_timeout
        spare_at = now + spare_after

        def start(node: str) -> None:
            t = asyncio.ensure_future(calls[node]())
            tasks[t] = node
            pending.add(t)

        if not waiting:
            for node in calls:
                start(node)
        try:
            while len(results) < need:
                while waiting and len(results) + len(pending) < need:
                    start(waiting.pop(0))  # (a spare replaces a failed call)
                if len(results) + len(pending) < need:
                    raise QuorumError(
                        f"shard {self.ctx.shard_id}: {what} reached {len(results)} of {need} replicas needed"
                        f" ({'; '.join(f'{n}: {e}' for n, e in errors.items())})"
                    )
                now = time.monotonic()
                left = deadline - now
                if left <= 0:
                    msg = f"shard {self.ctx.shard_id}: {what} timed out with {len(results)} of {need} replicas"
                    raise DeadlineExceededError(msg) if ambiguous else QuorumError(msg)
                if waiting and now >= spare_at:
                    self.stats["quorum_spares"] += len(waiting)
                    for t in pending:  # these kept us waiting: not first choices for a while
                        self._slow_until[tasks[t]] = now + SLOW_PEER_SECONDS
                    while waiting:
                        start(waiting.pop(0))
                timeout = min(left, spare_at - now) if waiting else left
                done, _ = await asyncio.wait(pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    pending.discard(t)
                    node = tasks[t]
                    exc = t.exception()
                    if exc is None:
                        results[node] = t.result()
                    else:
                        errors[node] = str(exc) if isinstance(exc, Error) else repr(exc)
                        self._slow_until[node] = time.monotonic() + SLOW_PEER_SECONDS
        finally:
            for t in pending:  # let stragglers finish (they complete writes); mute errors
                t.add_done_callback(_silence)
        return results

    def _preference(self, nodes: list[str]) -> list[str]:
        """The order a read phase asks ``nodes`` in: this node, then peers that have not
        failed or kept a read waiting in the last ``SLOW_PEER_SECONDS``, then the rest."""
        now = time.monotonic()
        me = self.ctx.node_id

        def rank(node: str) -> int:
            if node == me:
                return 0
            return 2 if self._slow_until.get(node, 0.0) > now else 1

        return sorted(nodes, key=rank)

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
        out: dict[str, Any] = dict(self.stats)
        # peer RPCs this replica sent, and the calls they carried (batching)
        out["peer_read_rpcs"] = sum(b.batches for b in self._readers.values())
        out["peer_read_calls"] = sum(b.items for b in self._readers.values())
        out["peer_write_rpcs"] = sum(b.batches for b in self._writers.values())
        out["peer_write_calls"] = sum(b.items for b in self._writers.values())
        return out


def _silence(t: asyncio.Future[Any]) -> None:
    if not t.cancelled():
        t.exception()
