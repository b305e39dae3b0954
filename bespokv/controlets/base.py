"""What every controlet offers the node, and what the node gives every controlet.

A controlet owns one replica of one shard on one node: it wraps that replica's datalet
and talks to the same shard's controlets on the other replicas. The node (``server.py``)
routes each client operation to the node the controlet names (``write_target`` /
``read_target``) and calls the matching method there.

Contracts shared by all controlets:

* Methods run on the node's event loop. The datalet is reached through the shard's
  :class:`~bespokv.datalets.worker.DataletWorker`: every call is awaited and runs on the
  shard's own thread, in submission order, so a slow datalet never blocks the loop (other
  shards, replication streams, health checks). State that must change together with a
  datalet write is guarded by the controlet (a lock, or a function run on the worker).
* ``write(ops)`` returns only when the write is as durable as the mode promises (see each
  module); it raises a bespokv error otherwise (UNAVAILABLE/RESOURCE_EXHAUSTED: not applied;
  DEADLINE_EXCEEDED: may or may not be applied).
* Keys passed in are already validated (non-empty, not reserved, within limits).
* ``scan`` yields lists of pairs in key order (reverse order when asked), never reserved
  keys, at most ``limit`` pairs in total when a limit is given.
"""

from __future__ import annotations

import abc
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import grpc

from bespokv.config import Limits, Tuning
from bespokv.datalets.base import RESERVED_PREFIX, Op
from bespokv.datalets.worker import DataletWorker
from bespokv.errors import UnsupportedError
from bespokv.hlc import HybridClock
from bespokv.peers import PeerPool
from bespokv.proto import bespokv_pb2 as pb
from bespokv.shardmap import ShardInfo

__all__ = ["ShardContext", "Controlet", "user_end"]


def user_end(end: bytes | None) -> bytes:
    """The exclusive end bound of a user scan: never reaches the reserved key range."""
    if end is None or end > RESERVED_PREFIX:
        return RESERVED_PREFIX
    return end


@dataclass
class ShardContext:
    """Everything a controlet gets from its node."""

    node_id: str
    node_number: int
    #: this process's tie-breaker in versions (node id + random incarnation)
    writer_id: int
    shard: ShardInfo
    #: the replica's datalet, behind its worker thread
    datalet: DataletWorker
    peers: PeerPool
    clock: HybridClock
    tuning: Tuning = field(default_factory=Tuning)
    limits: Limits = field(default_factory=Limits)
    epoch: int = 1
    #: False while the node cannot be sure it is still a member (see Coordinator.can_serve):
    #: heads, masters and tails then refuse what needs their role
    can_serve: Callable[[], bool] = lambda: True
    #: the datalet still holds active-active (versioned) values: a master-slave head
    #: merges and rewrites them before serving (representation.py)
    stored_versions: bool = False

    @property
    def shard_id(self) -> int:
        return self.shard.id

    @property
    def others(self) -> list[str]:
        return [r for r in self.shard.replicas if r != self.node_id]


class Controlet(abc.ABC):
    """One replica of one shard: replication topology x consistency level."""

    mode: ClassVar[str]

    def __init__(self, ctx: ShardContext) -> None:
        self.ctx = ctx
        self.datalet = ctx.datalet
        self.started_at = time.monotonic()

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Begin background work (replication links, recovery, anti-entropy)."""

    async def drain(self, timeout: float) -> None:  # noqa: B027 - optional hook
        """Before a clean stop: hand acknowledged-but-unreplicated writes to the other
        replicas, waiting at most ``timeout`` seconds (a kill -9 skips this)."""

    async def stop(self) -> None:  # noqa: B027 - optional hook
        """Stop background work; the datalet is closed by the node afterwards."""

    # -- routing --------------------------------------------------------------------------

    @abc.abstractmethod
    def write_target(self) -> str:
        """The node that must execute writes (and CAS) of this shard."""

    @abc.abstractmethod
    def read_target(self) -> str:
        """The node that should execute reads of this shard (for a request arriving here)."""

    # -- operations -----------------------------------------------------------------------

    @abc.abstractmethod
    async def get(self, key: bytes) -> bytes | None:
        """Read ``key`` with the mode's consistency."""

    async def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """``get`` of several keys (each read has the mode's consistency)."""
        return [await self.get(k) for k in keys]

    @abc.abstractmethod
    async def write(self, ops: list[Op]) -> None:
        """Apply ``ops`` (puts and deletes) with the mode's atomicity and durability."""

    async def cas(self, key: bytes, expected: bytes | None, value: bytes | None) -> tuple[bool, bytes | None]:
        """Compare-and-set; returns ``(succeeded, value before)``."""
        raise UnsupportedError(f"compare-and-set is not offered by {self.mode} shards")

    @abc.abstractmethod
    def scan(
        self, start: bytes | None, end: bytes | None, *, reverse: bool, limit: int | None
    ) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        """Ordered pairs in ``[start, end)`` with the mode's consistency, in chunks."""

    async def get_local(self, key: bytes) -> bytes | None:
        """This replica's own value of ``key``, no coordination (diagnostics)."""
        return await self.datalet.get(key)

    async def scan_local(
        self, start: bytes | None, end: bytes | None, *, reverse: bool, limit: int | None
    ) -> list[tuple[bytes, bytes]]:
        return await self.datalet.scan(start, user_end(end), reverse=reverse, limit=limit)

    # -- status ---------------------------------------------------------------------------

    @abc.abstractmethod
    def role(self) -> str:
        """head/middle/tail, master/replica, or peer."""

    def ready(self) -> bool:
        return True

    def status(self) -> pb.ShardStatus:
        st = pb.ShardStatus(
            shard=self.ctx.shard_id, mode=self.mode, role=self.role(), ready=self.ready()
        )
        st.info["replicas"] = ",".join(self.ctx.shard.replicas)
        return st

    # -- peer RPCs (each controlet implements the ones it uses) ----------------------------

    async def on_replicate(self, request_iterator: AsyncIterator[pb.ReplMessage], context: grpc.aio.ServicerContext) -> None:
        raise UnsupportedError(f"{self.mode} shards do not ship logs")

    def on_position(self) -> pb.PositionResponse:
        raise UnsupportedError(f"{self.mode} shards have no replication position")

    def on_pull(self, request: pb.PullRequest) -> AsyncIterator[pb.ReplMessage]:
        raise UnsupportedError(f"{self.mode} shards do not serve pulls")

    async def on_versioned_read(self, request: pb.VersionedReadRequest) -> pb.VersionedReadResponse:
        raise UnsupportedError(f"{self.mode} shards keep no versions")

    async def on_versioned_write(self, request: pb.VersionedWriteRequest) -> pb.VersionedWriteResponse:
        raise UnsupportedError(f"{self.mode} shards keep no versions")

    async def on_versioned_scan(self, request: pb.VersionedScanRequest) -> pb.VersionedScanResponse:
        raise UnsupportedError(f"{self.mode} shards keep no versions")

    async def on_digest(self, request: pb.DigestRequest) -> pb.DigestResponse:
        raise UnsupportedError(f"{self.mode} shards run no anti-entropy")

    def on_export(self, request: pb.ExportRequest) -> AsyncIterator[pb.ExportChunk]:
        raise UnsupportedError(f"{self.mode} shards do not export versions")

    def extra_stats(self) -> dict[str, Any]:
        return {}
