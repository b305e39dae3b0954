"""master-slave + strong consistency: chain replication (van Renesse & Schneider, 2004).

The shard's replicas form a chain in shard-map order: head -> ... -> tail.

* Writes (put, delete, batch, CAS) enter at the head, which numbers them, applies them and
  streams them down the chain (one ``Replicate`` stream per hop, many entries per message,
  no per-write round trip). Each replica applies entries in order and passes them on. The
  tail's acknowledgement flows back up; the head answers the client once the tail has the
  write. A batch is one entry: atomic on every replica.
* Reads and scans are served by the tail, which holds exactly the acknowledged writes
  (plus writes about to be acknowledged), so every read is linearizable.
* CAS is decided at the head against the head's state, which already includes every
  write sequenced before it; it answers once that state is committed at the tail (a failed
  CAS also waits, so it never reveals an uncommitted value).

Without failover (next issue) the chain needs every replica for writes: while one is down,
writes wait and then fail with DEADLINE_EXCEEDED (they stay queued at the head and commit
when the replica is back, in order); reads keep working while the tail is up.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator

from bespokv.controlets.base import ShardContext
from bespokv.controlets.masterslave import MasterSlaveControlet
from bespokv.controlets.link import Link
from bespokv.controlets.scanning import local_scan_chunks
from bespokv.datalets.base import Op
from bespokv.errors import DeadlineExceededError, OverloadedError, UnavailableError, WrongShardError

__all__ = ["ChainControlet"]


class ChainControlet(MasterSlaveControlet):
    mode = "ms-sc"

    def __init__(self, ctx: ShardContext) -> None:
        super().__init__(ctx)
        self.successor = ctx.shard.successor(ctx.node_id)
        self.predecessor = ctx.shard.predecessor(ctx.node_id)
        self.is_tail = self.successor is None
        self.acked = 0  # head: highest seq the tail acknowledged
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def topology_changed(self) -> None:
        me = self.ctx.node_id
        self.successor = self.ctx.shard.successor(me)
        self.predecessor = self.ctx.shard.predecessor(me)
        self.is_tail = self.successor is None
        if self.is_tail and self.is_head:
            self.acked = self.store.seq
            self.on_link_ack_all()

    def on_link_ack_all(self) -> None:
        """Head and tail at once (the others were dropped): everything applied is committed."""
        w = self._waiters
        while w and w[0][0] <= self.store.seq:
            _, fut = w.popleft()
            if not fut.done():
                fut.set_result(None)

    def downstreams(self) -> list[str]:
        return [self.successor] if self.successor else []

    def expected_upstream(self) -> str | None:
        return self.predecessor

    def role(self) -> str:
        if self.is_head and self.is_tail:
            return "head+tail"
        return "head" if self.is_head else "tail" if self.is_tail else "middle"

    def write_target(self) -> str:
        return self.ctx.shard.head

    def read_target(self) -> str:
        return self.ctx.shard.tail

    def ack_value(self) -> int:
        if self.successor is None:
            return self.store.seq
        link = self.links.get(self.successor)
        return min(self.store.seq, link.acked if link else 0)

    def on_link_ack(self, link: Link) -> None:
        if self.is_head:
            if link.acked > self.acked and link.acked <= self.store.seq:
                self.acked = link.acked
                w = self._waiters
                while w and w[0][0] <= self.acked:
                    _, fut = w.popleft()
                    if not fut.done():
                        fut.set_result(None)
        else:
            self._signal_ack()

    async def stop(self) -> None:
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(UnavailableError("node shutting down"))
        self._waiters.clear()
        await super().stop()

    # -- writes ---------------------------------------------------------------------------

    def _check_head(self) -> None:
        if not self.is_head:
            raise WrongShardError(f"writes to shard {self.ctx.shard_id} enter at {self.ctx.shard.head}")
        if not self.ctx.can_serve():
            raise UnavailableError(f"shard {self.ctx.shard_id}: {self.ctx.node_id} cannot confirm its lease")
        if not self.synced:
            raise UnavailableError(f"shard {self.ctx.shard_id}: head {self.ctx.node_id} is recovering")
        if len(self._waiters) >= self.ctx.tuning.max_pending:
            raise OverloadedError(
                f"shard {self.ctx.shard_id}: {len(self._waiters)} writes await the tail; retry later"
            )

    async def _commit(self, seq: int) -> None:
        """Wait until the tail has acknowledged ``seq``."""
        if self.successor is None or seq <= self.acked:
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.append((seq, fut))
        timer = loop.call_later(self.ctx.tuning.request_timeout, self._expire, fut, seq)
        try:
            await fut
        finally:
            timer.cancel()

    def _expire(self, fut: asyncio.Future[None], seq: int) -> None:
        if not fut.done():
            fut.set_exception(
                DeadlineExceededError(
                    f"shard {self.ctx.shard_id}: write {seq} is applied at the head but the chain has not "
                    f"acknowledged it within {self.ctx.tuning.request_timeout}s (a replica is down?); "
                    "it will commit when the chain recovers"
                )
            )

    async def write(self, ops: list[Op]) -> None:
        self._check_head()
        seq = await self.store.append_local(ops)
        await self._commit(seq)

    async def cas(self, key: bytes, expected: bytes | None, value: bytes | None) -> tuple[bool, bytes | None]:
        self._check_head()
        ok, current, seq = await self.store.cas_local(key, expected, value)
        await self._commit(seq)  # a failed CAS also waits: it must not reveal uncommitted state
        return ok, current

    # -- reads ----------------------------------------------------------------------------

    def _check_tail(self) -> None:
        if not self.is_tail:
            raise WrongShardError(f"reads of shard {self.ctx.shard_id} are served by {self.ctx.shard.tail}")
        if not self.ctx.can_serve():
            raise UnavailableError(f"shard {self.ctx.shard_id}: {self.ctx.node_id} cannot confirm its lease")
        if not self.synced:
            raise UnavailableError(f"shard {self.ctx.shard_id}: tail {self.ctx.node_id} is catching up")

    async def get(self, key: bytes) -> bytes | None:
        self._check_tail()
        return await self.datalet.get(key)

    async def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        self._check_tail()
        return await self.datalet.multi_get(keys)

    async def scan(
        self, start: bytes | None, end: bytes | None, *, reverse: bool, limit: int | None
    ) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        self._check_tail()
        async for chunk in local_scan_chunks(self.datalet, start, end, reverse=reverse, limit=limit):
            yield chunk

    def status(self):  # type: ignore[no-untyped-def]
        st = super().status()
        if self.is_head:
            st.info["acked"] = str(self.acked)
            st.info["pending"] = str(len(self._waiters))
        return st
