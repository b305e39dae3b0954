"""master-slave + eventual consistency: asynchronous primary-backup.

* The master (first replica) applies each write, numbers it, and answers the client at
  once. It streams the log to every other replica directly (one ``Replicate`` stream per
  replica, batched and pipelined); replicas apply entries in order, so each one is always
  a prefix of the master's history.
* Replica lag is bounded: when a connected replica is ``max_lag_entries`` behind, new
  writes wait for it to catch up (RESOURCE_EXHAUSTED after ``request_timeout``). The
  check runs under the store's lock, just before the write is numbered, so no connected
  replica that is not receiving a full copy is ever more than ``max_lag_entries`` entries
  behind, concurrent writers included. A disconnected replica, or one receiving a full copy, does not
  hold writes back; it catches up from the log or by a full copy when it returns. Lag
  (entries and seconds) is reported in the shard status.
* Reads are served by the replica the request reaches (the client spreads them, or asks
  for the master to read its own writes); a replica that is not yet caught up after a
  restart forwards its reads to the master.
* CAS is decided by the master against its own state; it is atomic at the master.
  Writes acknowledged by the master and not yet replicated are lost if the master's
  datalet is lost: that is the price of eventual consistency.
* Loss report: when a replica is promoted master (failover), it asks the other survivors
  how far they saw the old master get (``Entries.head_seq``, the master's seq at each
  message) and reports, in its shard status, how many entries the old master had
  numbered beyond the promoted replica's seq: ``failover.lost_at_least``. It is a lower
  bound (the master may have numbered more after its last message); the upper bound is
  the lag bound, ``max_lag_entries`` entries, as long as one survivor was connected and
  not receiving a copy. An entry is one client write, or the writes of one ``Multi`` call
  to the shard.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections import deque
from collections.abc import AsyncIterator

from bespokv.controlets.base import ShardContext
from bespokv.controlets.masterslave import MasterSlaveControlet
from bespokv.controlets.scanning import local_scan_chunks
from bespokv.controlets.link import Link
from bespokv.datalets.base import Op
from bespokv.errors import OverloadedError, UnavailableError, WrongShardError
from bespokv.proto import bespokv_pb2 as pb
from bespokv.shardmap import ShardInfo

__all__ = ["PrimaryBackupControlet"]

log = logging.getLogger(__name__)


class PrimaryBackupControlet(MasterSlaveControlet):
    mode = "ms-ec"

    def __init__(self, ctx: ShardContext) -> None:
        super().__init__(ctx)
        self._lag_changed = asyncio.Event()
        self._times: deque[tuple[int, float]] = deque()  # (seq, monotonic) of recent writes
        #: the last promotion of this replica to master: its epoch, seq, and loss report
        self.failover: dict[str, int] = {}
        self._report: asyncio.Task[None] | None = None

    def downstreams(self) -> list[str]:
        return self.ctx.others if self.is_head else []

    def expected_upstream(self) -> str | None:
        return self.ctx.shard.head

    def role(self) -> str:
        return "master" if self.is_head else "replica"

    def write_target(self) -> str:
        return self.ctx.shard.head

    def read_target(self) -> str:
        return self.ctx.node_id if self.synced else self.ctx.shard.head

    def on_link_ack(self, link: Link) -> None:
        self._lag_changed.set()
        self._lag_changed = asyncio.Event()

    def _max_lag(self) -> int:
        # A replica receiving a full copy is not counted: it catches up from the log
        # right after, and holding writers back for the length of a copy would stall them.
        return max((lk.lag for lk in self.links.values() if lk.connected and not lk.copying), default=0)

    async def _wait_for_lag(self) -> None:
        bound = self.ctx.tuning.max_lag_entries
        if self._max_lag() < bound:
            return
        deadline = time.monotonic() + self.ctx.tuning.request_timeout
        while self._max_lag() >= bound:
            left = deadline - time.monotonic()
            if left <= 0:
                raise OverloadedError(
                    f"shard {self.ctx.shard_id}: a replica lags {self._max_lag()} entries (bound {bound}); retry later"
                )
            try:
                await asyncio.wait_for(self._lag_changed.wait(), left)
            except TimeoutError:
                pass

    async def reconfigure(self, info: ShardInfo) -> None:
        was_master = self.is_head
        await super().reconfigure(info)
        if self.is_head and not was_master:
            self.failover = {"epoch": info.epoch, "seq": self.store.seq, "lag_bound": self.ctx.tuning.max_lag_entries}
            self._report = asyncio.ensure_future(self._report_loss(dict(self.failover)))

    async def _report_loss(self, promoted: dict[str, int]) -> None:
        """How many entries the old master had numbered beyond ours, as far as any
        survivor saw (a lower bound; see the module docstring)."""
        seen = max(self.store.head_seq_seen, promoted["seq"])
        answers = await asyncio.gather(*(self._position_of(n) for n in self.ctx.others), return_exceptions=True)
        for a in answers:
            if isinstance(a, pb.PositionResponse):
                seen = max(seen, a.head_seq_seen)
        lost = seen - promoted["seq"]
        if self.failover.get("epoch") == promoted["epoch"]:
            self.failover["lost_at_least"] = lost
        log.warning(
            "shard %s: %s promoted master at seq %d (epoch %d); the old master had numbered at least %d "
            "entries more, now lost (bound: %d)",
            self.ctx.shard_id, self.ctx.node_id, promoted["seq"], promoted["epoch"], lost, promoted["lag_bound"],
        )

    async def stop(self) -> None:
        if self._report is not None:
            self._report.cancel()
            await asyncio.gather(self._report, return_exceptions=True)
        await super().stop()

    async def drain(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while any(lk.connected and lk.applied < self.store.seq for lk in self.links.values()):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                await asyncio.wait_for(self._lag_changed.wait(), left)
            except TimeoutError:
                return

    def _check_master(self) -> None:
        if not self.is_head:
            raise WrongShardError(f"writes to shard {self.ctx.shard_id} go to its master {self.ctx.shard.head}")
        if not self.ctx.can_serve():
            raise UnavailableError(f"shard {self.ctx.shard_id}: {self.ctx.node_id} cannot confirm its lease")
        if not self.synced:
            raise UnavailableError(f"shard {self.ctx.shard_id}: master {self.ctx.node_id} is recovering")

    def _record_time(self, seq: int) -> None:
        t = self._times
        t.append((seq, time.monotonic()))
        if len(t) > 2 * self.ctx.tuning.max_lag_entries + 1024:
            for _ in range(len(t) // 2):
                t.popleft()

    async def _admit(self) -> None:
        """Under the store's lock, just before the write is numbered (see the docstring)."""
        await self._wait_for_lag()
        self._check_master()

    async def write(self, ops: list[Op]) -> None:
        self._check_master()
        self._record_time(await self.store.append_local(ops, self._admit))

    async def cas(self, key: bytes, expected: bytes | None, value: bytes | None) -> tuple[bool, bytes | None]:
        self._check_master()
        ok, current, seq = await self.store.cas_local(key, expected, value, self._admit)
        if ok:
            self._record_time(seq)
        return ok, current

    def _check_readable(self) -> None:
        if not self.synced:
            raise UnavailableError(f"shard {self.ctx.shard_id}: {self.ctx.node_id} is catching up")

    async def get(self, key: bytes) -> bytes | None:
        self._check_readable()
        return await self.datalet.get(key)

    async def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        self._check_readable()
        return await self.datalet.multi_get(keys)

    async def scan(
        self, start: bytes | None, end: bytes | None, *, reverse: bool, limit: int | None
    ) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        self._check_readable()
        async for chunk in local_scan_chunks(self.datalet, start, end, reverse=reverse, limit=limit):
            yield chunk

    def lag_seconds(self, link: Link) -> float:
        """Age of the oldest write the replica has not acknowledged (0 when caught up)."""
        if link.applied >= self.store.seq:
            return 0.0
        i = bisect.bisect_right(self._times, (link.applied, float("inf")))
        if i >= len(self._times):
            return 0.0
        return time.monotonic() - self._times[i][1]

    def status(self) -> pb.ShardStatus:
        st = super().status()
        for node, link in self.links.items():
            st.info[f"lag_s.{node}"] = f"{self.lag_seconds(link):.3f}" if link.connected else "down"
        if not self.is_head and self.last_upstream_time:
            st.info["since_upstream_s"] = f"{time.monotonic() - self.last_upstream_time:.3f}"
        for k, v in self.failover.items():
            st.info[f"failover.{k}"] = str(v)
        return st
