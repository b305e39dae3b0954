"""Channels and stubs to other nodes, shared by forwarding and replication.

One aio channel per node address, opened lazily, with the cluster's TLS settings, message
limits and token. Peer RPC failures surface as ``grpc.aio.AioRpcError``; callers turn them
into bespokv errors with :func:`rpc_error`.
"""

from __future__ import annotations

import grpc

from bespokv.config import Limits, TlsConfig, Tuning
from bespokv.errors import DeadlineExceededError, Error, UnavailableError, from_status
from bespokv.proto import bespokv_pb2_grpc as pbg
from bespokv.security import call_metadata, open_channel
from bespokv.shardmap import ShardMap

__all__ = ["PeerPool", "rpc_error"]


def rpc_error(exc: BaseException, what: str = "") -> Error:
    """A bespokv error for a failed peer call (UNAVAILABLE when the peer did not answer)."""
    if isinstance(exc, grpc.aio.AioRpcError):
        err = from_status(exc.code(), exc.details())
        if what and isinstance(err, (UnavailableError, DeadlineExceededError)):
            return type(err)(f"{what}: {exc.details()}")
        return err
    if isinstance(exc, Error):
        return exc
    return UnavailableError(f"{what}: {exc!r}" if what else repr(exc))


class PeerPool:
    """Lazily opened channels and stubs to the nodes of a shard map."""

    def __init__(
        self,
        shard_map: ShardMap,
        *,
        token: str | None = None,
        tls: TlsConfig | None = None,
        limits: Limits | None = None,
        tuning: Tuning | None = None,
    ) -> None:
        """``tuning``: its reconnect backoff applies to every channel (default Tuning's)."""
        self.shard_map = shard_map
        self.metadata = call_metadata(token)
        self._tls = tls
        self._limits = limits
        self._tuning = tuning or Tuning()
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._peer: dict[str, pbg.PeerStub] = {}
        self._kv: dict[str, pbg.KVStub] = {}
        self._admin: dict[str, pbg.AdminStub] = {}

    def channel(self, node_id: str) -> grpc.aio.Channel:
        addr = self.shard_map.address(node_id)
        ch = self._channels.get(addr)
        if ch is None:
            t = self._tuning
            ch = self._channels[addr] = open_channel(
                addr, tls=self._tls, limits=self._limits, reconnect_backoff_ms=t.reconnect_backoff_ms,
                max_reconnect_backoff_ms=t.max_reconnect_backoff_ms,
            )
        return ch

    def peer(self, node_id: str) -> pbg.PeerStub:
        s = self._peer.get(node_id)
        if s is None:
            s = self._peer[node_id] = pbg.PeerStub(self.channel(node_id))
        return s

    def kv(self, node_id: str) -> pbg.KVStub:
        s = self._kv.get(node_id)
        if s is None:
            s = self._kv[node_id] = pbg.KVStub(self.channel(node_id))
        return s

    def admin(self, node_id: str) -> pbg.AdminStub:
        s = self._admin.get(node_id)
        if s is None:
            s = self._admin[node_id] = pbg.AdminStub(self.channel(node_id))
        return s

    async def close(self) -> None:
        chans = list(self._channels.values())
        self._channels.clear()
        self._peer.clear()
        self._kv.clear()
        self._admin.clear()
        for ch in chans:
            await ch.close()
