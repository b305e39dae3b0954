"""active-active + eventual consistency: last writer wins, by hybrid logical clock.

* Any replica accepts a write: it stamps it with its hybrid logical clock (ties broken by
  writer id), stores it, answers, and pushes it to the other replicas asynchronously
  (batched ``VersionedWrite`` calls, one outbox per peer). Replicas keep the highest
  version of each key, so they agree once they have seen the same writes, whatever the
  order. Deletes are tombstones.
* Reads and scans are served by the replica the request reaches. A fraction
  (``read_repair_chance``) of reads also compares the keys with the other replicas in the
  background and repairs whichever side is behind (read repair).
* Anti-entropy repairs what pushes missed (a peer was down, an outbox overflowed): every
  ``anti_entropy_interval`` a replica compares per-bucket digests (64 buckets, each the XOR
  of a hash of every key with its version) with each peer and exchanges the contents of
  the buckets that differ for good, both ways: a bucket whose difference held still for a
  round, or that differed ``anti_entropy_force_rounds`` rounds in a row (writes on their
  way make a bucket differ for a moment; ``registers.py``).
* Tombstones are collected ``tombstone_grace`` seconds after their timestamp. An incoming
  tombstone older than that is dropped when there is nothing for it to delete (so
  collected ones do not come back) and stored otherwise. A replica that was down for
  longer than the grace period can still resurrect a key whose tombstone is gone from
  every other replica: wipe such a replica before it rejoins.
* CAS is not offered (UNIMPLEMENTED): last-writer-wins cannot make a conditional write
  atomic across replicas.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator

from bespokv import versioned
from bespokv.controlets.base import ShardContext
from bespokv.controlets.registers import VersionedControlet
from bespokv.controlets.scanning import local_scan_chunks
from bespokv.datalets.base import Op
from bespokv.errors import UnavailableError
from bespokv.hlc import physical_ms
from bespokv.proto import bespokv_pb2 as pb
from bespokv.shardmap import ShardInfo

__all__ = ["LwwControlet"]

log = logging.getLogger(__name__)
OUTBOX_LIMIT = 100_000  # entries queued per peer before pushes are dropped (anti-entropy repairs)
PUSH_BATCH = 2048


class LwwControlet(VersionedControlet):
    mode = "aa-ec"

    def __init__(self, ctx: ShardContext) -> None:
        super().__init__(ctx)
        self._outbox: dict[str, list[tuple[bytes, bytes]]] = {n: [] for n in ctx.others}
        self._outbox_event: dict[str, asyncio.Event] = {n: asyncio.Event() for n in ctx.others}
        self._pushers: dict[str, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._pushing = 0
        self._failing: set[str] = set()  # peers whose last push failed
        self.stats.update({"pushed": 0, "push_dropped": 0, "read_repairs": 0})
        self._repairs = 0  # read repairs in flight (bounded)
        # A replica whose datalet is volatile comes back empty: it copies one peer's
        # replica before it serves reads (it forwards them meanwhile).
        self.readable = ctx.datalet.persistent or not ctx.others

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        for node in self.ctx.others:
            self._pushers[node] = asyncio.ensure_future(self._pusher(node))
        if self.ctx.others:
            self._tasks.append(asyncio.ensure_future(self.anti_entropy_loop()))
        if not self.readable:
            self._tasks.append(asyncio.ensure_future(self._initial_sync()))
        self._tasks.append(asyncio.ensure_future(self.collector_loop()))

    async def drain(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self._pushing or any(box and n not in self._failing for n, box in self._outbox.items()):
            if time.monotonic() > deadline:
                return
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        tasks = [*self._tasks, *self._pushers.values()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._stop_switch_merge()
        self.close_batchers()

    async def reconfigure(self, info: ShardInfo) -> None:
        """The shard's replica set changed (a node add/remove moved a replica): push to the
        replicas it has now. Writes acknowledged before this reach a new replica through
        its own merge (membership.py) or anti-entropy."""
        self.ctx.shard = info
        self.ctx.epoch = info.epoch
        others = set(self.ctx.others)
        for node in list(self._outbox):
            if node not in others:
                task = self._pushers.pop(node, None)
                if task is not None:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                del self._outbox[node], self._outbox_event[node]
                self._failing.discard(node)
        for node in self.ctx.others:
            if node not in self._outbox:
                self._outbox[node] = []
                self._outbox_event[node] = asyncio.Event()
                self._pushers[node] = asyncio.ensure_future(self._pusher(node))

    def role(self) -> str:
        return "peer"

    def write_target(self) -> str:
        return self.ctx.node_id

    def read_target(self) -> str:
        if self.readable:
            return self.ctx.node_id
        return self.ctx.others[0]

    def ready(self) -> bool:
        return self.readable

    async def _initial_sync(self) -> None:
        while not self.readable:
            for node in self.ctx.others:
                try:
                    await self.pull_export(node)
                    self.readable = True
                    log.info("shard %s: %s copied %s's replica", self.ctx.shard_id, self.ctx.node_id, node)
                    return
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # try the next peer
                    log.info("shard %s: initial copy from %s failed: %r", self.ctx.shard_id, node, exc)
            await asyncio.sleep(0.3)

    # -- tombstones ---------------------------------------------------------------------

    def deletion_ms(self, enc: bytes) -> int | None:
        # LWW versions are hybrid clock readings: a tombstone's version is its time.
        return physical_ms(versioned.version_of(enc)[0])

    def observe(self, entries: list[tuple[bytes, bytes]]) -> None:
        if entries:
            self.ctx.clock.observe(max(versioned.version_of(enc)[0] for _, enc in entries))

    # -- operations -----------------------------------------------------------------------

    async def write(self, ops: list[Op]) -> None:
        ts = self.ctx.clock.now()
        me = self.ctx.writer_id
        latest = dict(ops)  # a batch's later op on a key wins
        entries = [(k, versioned.encode(ts, me, v)) for k, v in latest.items()]
        await self.store_if_newer(entries)
        for node, box in self._outbox.items():
            if len(box) + len(entries) > OUTBOX_LIMIT:
                self.stats["push_dropped"] += len(entries)
                continue
            box.extend(entries)
            self._outbox_event[node].set()

    async def get(self, key: bytes) -> bytes | None:
        if not self.readable:
            raise UnavailableError(f"shard {self.ctx.shard_id}: {self.ctx.node_id} is copying a peer's replica")
        self._maybe_repair([key])
        return await self.get_local(key)

    def _maybe_repair(self, keys: list[bytes]) -> None:
        chance = self.ctx.tuning.read_repair_chance
        if chance and self.ctx.others and self._repairs < 64 and random.random() < chance:
            self._repairs += 1
            task = asyncio.ensure_future(self.read_repair(keys))
            task.add_done_callback(self._repair_done)

    def _repair_done(self, task: asyncio.Future[int]) -> None:
        self._repairs -= 1
        if not task.cancelled() and task.exception() is not None:
            log.debug("shard %s: read repair failed: %r", self.ctx.shard_id, task.exception())

    async def read_repair(self, keys: list[bytes]) -> int:
        """Bring ``keys`` up to date on every reachable replica; returns values fixed."""
        keys = list(dict.fromkeys(keys))
        views: dict[str, list[bytes | None]] = {self.ctx.node_id: await self.datalet.multi_get(keys)}
        results = await asyncio.gather(
            *(self.read_from(n, keys, versions_only=False) for n in self.ctx.others), return_exceptions=True
        )
        for node, r in zip(self.ctx.others, results):
            if isinstance(r, list):
                views[node] = r
        best: list[bytes | None] = []
        for i in range(len(keys)):
            b: bytes | None = None
            for vals in views.values():
                v = vals[i]
                if v is not None and (b is None or versioned.newer(v, b)):
                    b = v
            best.append(b)
        fixed = 0
        for node, vals in views.items():
            stale = [(k, b) for k, b, v in zip(keys, best, vals) if b is not None and (v is None or versioned.newer(b, v))]
            if stale:
                fixed += len(stale)
                await self.write_to(node, stale)
        self.stats["read_repairs"] += fixed
        return fixed

    async def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        if not self.readable:
            raise UnavailableError(f"shard {self.ctx.shard_id}: {self.ctx.node_id} is copying a peer's replica")
        self._maybe_repair(keys)
        out: list[bytes | None] = []
        for enc in await self.datalet.multi_get(keys):
            out.append(None if enc is None or enc[0] != versioned.LIVE else enc[versioned.HEADER :])
        return out

    async def scan(
        self, start: bytes | None, end: bytes | None, *, reverse: bool, limit: int | None
    ) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        if not self.readable:
            raise UnavailableError(f"shard {self.ctx.shard_id}: {self.ctx.node_id} is copying a peer's replica")
        async for chunk in local_scan_chunks(
            self.datalet, start, end, reverse=reverse, limit=limit, transform=self.live_pairs
        ):
            yield chunk

    # -- background -----------------------------------------------------------------------

    async def _pusher(self, node: str) -> None:
        backoff = 0.05
        ev = self._outbox_event[node]
        while True:
            await ev.wait()
            ev.clear()
            while self._outbox[node]:
                box = self._outbox[node]
                batch, self._outbox[node] = box[:PUSH_BATCH], box[PUSH_BATCH:]
                self._pushing += 1
                try:
                    await self.write_to(node, batch)
                    self.stats["pushed"] += len(batch)
                    self._failing.discard(node)
                    backoff = 0.05
                    continue
                except asyncio.CancelledError:
                    raise
                except Exception:  # the peer is down: keep, retry later
                    rest = self._outbox[node]
                    if len(rest) + len(batch) <= OUTBOX_LIMIT:
                        self._outbox[node] = batch + rest
                    else:
                        self.stats["push_dropped"] += len(batch)
                    self._failing.add(node)
                finally:
                    self._pushing -= 1
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    def status(self) -> pb.ShardStatus:
        st = super().status()
        for node, box in self._outbox.items():
            st.lag[node] = len(box)
        for k in ("pushed", "push_dropped", "tombstones_collected", "read_repairs"):
            st.info[k] = str(int(self.stats[k]))
        return st
