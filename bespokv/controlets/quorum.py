"""active-active + strong consistency: majority quorums over versioned registers (ABD).

Attiya, Bar-Noy and Dolev's emulation of an atomic register, one register per key, with no
leader: any replica coordinates any operation, and every operation needs a majority
(``q = n // 2 + 1``) of the shard's replicas.

* write(k, v): (1) ask a majority for k's version; (2) pick a version above every one
  seen - ``(ts, writer)`` with ts above the highest seen, above anything this node issued
  before, and at least its hybrid clock's reading; the writer field makes it unique; (3) store ``(version, v)`` at all replicas and answer once
  a majority stored it. Deletes write tombstones that record their wall-clock time. A
  batch runs both phases once for all its keys (one RPC per replica per phase); it is
  atomic per key, not across keys.
* read(k): (1) ask a majority for k's versioned value; (2) if they disagree, write the
  highest back until a majority holds it (so no later read can return an older value);
  (3) return it.
* scan: pages of the range from a majority, merged by version, written back like reads.

A write returns once a majority stored it; the other replicas get it when its store
message arrives, or from anti-entropy (the digest exchange of ``registers.py``, as in
aa-ec), which is safe here because it only delivers versioned values late, as a slow
network would. Every operation is linearizable per key. CAS is not offered (UNIMPLEMENTED): a
read/write register cannot implement compare-and-set without consensus.

Tombstones older than ``tombstone_grace`` are collected, but only once no replica holds a
live value older than the tombstone (checked with a versions-only read of every replica):
otherwise a replica that missed the delete could answer a quorum read with that value.

A replica restarted with a volatile datalet has lost its values; until it has merged the
replicas of ``n - q + 1`` others (which must include a survivor of every majority) it
serves no quorum reads, though it accepts writes. With a persistent datalet it rejoins at
once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from bespokv import versioned
from bespokv.controlets.base import ShardContext, user_end
from bespokv.controlets.registers import VersionedControlet
from bespokv.datalets.base import Op
from bespokv.errors import UnavailableError
from bespokv.proto import bespokv_pb2 as pb

__all__ = ["QuorumControlet"]

log = logging.getLogger(__name__)
SCAN_PAGE = 256


class QuorumControlet(VersionedControlet):
    mode = "aa-sc"

    def __init__(self, ctx: ShardContext) -> None:
        super().__init__(ctx)
        self.replicas = list(ctx.shard.replicas)
        self.q = ctx.shard.quorum
        self._last_ts = 0
        self._tasks: list[asyncio.Task[None]] = []
        others = len(self.replicas) - 1
        self.readable = others == 0 or ctx.datalet.persistent
        self.stats.update({"write_backs": 0, "recovered_keys": 0, "writes": 0, "write_keys": 0, "reads": 0, "read_keys": 0})

    async def start(self) -> None:
        if not self.readable:
            self._tasks.append(asyncio.ensure_future(self._recover()))
        if self.ctx.others:
            self._tasks.append(asyncio.ensure_future(self.anti_entropy_loop()))
        self._tasks.append(asyncio.ensure_future(self.collector_loop()))

    async def confirm_collectable(self, dead: list[tuple[bytes, bytes]]) -> list[bool]:
        """A tombstone is dropped only when no replica holds a live value older than it
        (which a quorum read could otherwise bring back); replicas holding the tombstone,
        nothing, or something newer are fine. Every replica must answer."""
        ok = [True] * len(dead)
        step = 1000
        for node in self.ctx.others:
            for i in range(0, len(dead), step):
                part = dead[i : i + step]
                try:
                    theirs = await self.read_from(node, [k for k, _ in part], True)
                except Exception:  # a replica is unreachable: not this round
                    return [False] * len(dead)
                for j, ((_, enc), t) in enumerate(zip(part, theirs)):
                    if t is not None and t[0] == versioned.LIVE and versioned.newer(enc, t):
                        ok[i + j] = False
        return ok

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._stop_switch_merge()
        self.close_batchers()

    def role(self) -> str:
        return "peer"

    def ready(self) -> bool:
        return self.readable

    def write_target(self) -> str:
        return self.ctx.node_id

    def read_target(self) -> str:
        return self.ctx.node_id

    # -- recovery -------------------------------------------------------------------------

    async def _recover(self) -> None:
        need = len(self.replicas) - self.q + 1
        merged: set[str] = set()
        others = self.ctx.others
        while len(merged) < min(need, len(others)):
            for node in others:
                if node in merged:
                    continue
                try:
                    self.stats["recovered_keys"] += await self.pull_export(node)
                    merged.add(node)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # retried
                    log.info("shard %s: recovery from %s failed: %r", self.ctx.shard_id, node, exc)
            if len(merged) < min(need, len(others)):
                await asyncio.sleep(0.3)
        self.readable = True
        log.info("shard %s: %s recovered from %s", self.ctx.shard_id, self.ctx.node_id, sorted(merged))

    # -- phases ---------------------------------------------------------------------------

    def _read_calls(self, keys: list[bytes], versions_only: bool) -> dict[str, Callable[[], Awaitable[list[bytes | None]]]]:
        calls: dict[str, Callable[[], Awaitable[list[bytes | None]]]] = {}
        for node in self.replicas:
            if node == self.ctx.node_id and not self.readable:
                continue

            def call(node: str = node) -> Awaitable[list[bytes | None]]:
                return self.read_from(node, keys, versions_only)

            calls[node] = call
        return calls

    async def _store(self, entries: list[tuple[bytes, bytes]], nodes: list[str], need: int, what: str) -> None:
        calls = {}
        for node in nodes:

            def call(node: str = node) -> Awaitable[None]:
                return self.write_to(node, entries)

            calls[node] = call
        await self.quorum(calls, need, what, ambiguous=True)

    def _next_ts(self, seen: int) -> int:
        # Above everything seen and issued (ABD), and a hybrid clock reading: a version
        # then also outranks any tombstone collected after its grace period, which a
        # replica that has not collected it yet may still return.
        self._last_ts = max(self._last_ts + 1, seen + 1, self.ctx.clock.now())
        return self._last_ts

    async def write(self, ops: list[Op]) -> None:
        latest: dict[bytes, bytes | None] = {}
        for k, v in ops:
            latest[k] = v
        keys = list(latest)
        self.stats["writes"] += 1
        self.stats["write_keys"] += len(keys)
        answers = await self.quorum(self._read_calls(keys, True), self.q, "version query", spares=True)
        seen = 0
        for vals in answers.values():
            for enc in vals:
                if enc is not None:
                    seen = max(seen, versioned.version_of(enc)[0])
        ts = self._next_ts(seen)
        me = self.ctx.writer_id
        now_ms = time.time_ns() // 1_000_000  # recorded in tombstones, for their collection
        entries = [(k, versioned.encode(ts, me, latest[k], deleted_at_ms=now_ms)) for k in keys]
        await self._store(entries, self.replicas, self.q, "write")

    async def _read_keys(self, keys: list[bytes]) -> list[bytes | None]:
        """Linearizable read of several keys: query a majority, write back, decode."""
        self.stats["reads"] += 1
        self.stats["read_keys"] += len(keys)
        answers = await self.quorum(self._read_calls(keys, False), self.q, "read", spares=True)
        out: list[bytes | None] = []
        write_back: list[tuple[bytes, bytes]] = []
        for i, k in enumerate(keys):
            best: bytes | None = None
            for vals in answers.values():
                enc = vals[i]
                if enc is not None and (best is None or versioned.newer(enc, best)):
                    best = enc
            if best is None:
                out.append(None)
                continue
            have = sum(1 for vals in answers.values() if vals[i] is not None and vals[i][1:13] == best[1:13])
            if have < self.q:
                write_back.append((k, best))
            out.append(versioned.decode(best)[1])
        if write_back:
            self.stats["write_backs"] += len(write_back)
            # Store at every replica; a majority must hold each value before we answer.
            await self._store(write_back, self.replicas, self.q, "read write-back")
        return out

    async def get(self, key: bytes) -> bytes | None:
        return (await self._read_keys([key]))[0]

    async def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        return await self._read_keys(keys)

    # -- scans ----------------------------------------------------------------------------

    async def _scan_from(self, node: str, lo: bytes | None, hi: bytes, reverse: bool) -> list[tuple[bytes, bytes]]:
        if node == self.ctx.node_id:
            if not self.readable:
                raise UnavailableError("recovering")
            return await self.datalet.scan(lo, hi, reverse=reverse, limit=SCAN_PAGE)
        resp = await self.ctx.peers.peer(node).VersionedScan(
            pb.VersionedScanRequest(
                shard=self.ctx.shard_id, start=lo or b"", end=hi, limit=SCAN_PAGE, reverse=reverse
            ),
            timeout=self.ctx.tuning.request_timeout,
            metadata=self.ctx.peers.metadata,
        )
        return [(kv.key, kv.value) for kv in resp.pairs]

    async def scan(
        self, start: bytes | None, end: bytes | None, *, reverse: bool, limit: int | None
    ) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        lo, hi = start, user_end(end)
        remaining = limit
        while remaining is None or remaining > 0:
            calls = {}
            for node in self.replicas:
                if node == self.ctx.node_id and not self.readable:
                    continue

                def call(node: str = node, lo: bytes | None = lo, hi: bytes = hi) -> Awaitable[list[tuple[bytes, bytes]]]:
                    return self._scan_from(node, lo, hi, reverse)

                calls[node] = call
            pages = await self.quorum(calls, self.q, "scan")
            full = [p for p in pages.values() if len(p) >= SCAN_PAGE]
            bound: bytes | None = None
            if full:
                lasts = [p[-1][0] for p in full]
                bound = max(lasts) if reverse else min(lasts)
            merged: dict[bytes, list[bytes]] = {}
            for p in pages.values():
                for k, enc in p:
                    if bound is not None and ((k < bound) if reverse else (k > bound)):
                        continue
                    merged.setdefault(k, []).append(enc)
            keys = sorted(merged, reverse=reverse)
            out: list[tuple[bytes, bytes]] = []
            write_back: list[tuple[bytes, bytes]] = []
            for k in keys:
                encs = merged[k]
                best = encs[0]
                for enc in encs[1:]:
                    if versioned.newer(enc, best):
                        best = enc
                have = sum(1 for e in encs if e[1:13] == best[1:13])
                if have < self.q:
                    write_back.append((k, best))
                if best[0] == versioned.LIVE:
                    out.append((k, best[versioned.HEADER :]))
            if write_back:
                self.stats["write_backs"] += len(write_back)
                await self._store(write_back, self.replicas, self.q, "scan write-back")
            if remaining is not None:
                out = out[:remaining]
                remaining -= len(out)
            if out:
                yield out
            if bound is None:
                return
            if reverse:
                hi = bound
            else:
                lo = bound + b"\x00"

    def status(self) -> pb.ShardStatus:
        st = super().status()
        st.info["quorum"] = str(self.q)
        st.info["write_backs"] = str(int(self.stats["write_backs"]))
        return st
