"""Forwarding: a node sends an operation it does not serve to the node that does.

Any node accepts any KV request; when the replica that must run it is elsewhere, the
node forwards it there. Forwarded single operations ride in batched ``Multi`` calls, one
batcher per (target node, hop count, reads or writes): a read never waits in a ``Multi``
whose writes wait for a broken chain. A forwarded request carries a hop count
(``x-bespokv-hops``); a node does not forward a request that has already been forwarded
``MAX_HOPS`` times (FAILED_PRECONDITION), so disagreeing shard maps cannot loop. It also
carries the forwarding node's map epoch (fencing, see routing.py).
"""

from __future__ import annotations

from collections.abc import Callable

from bespokv.batcher import AutoBatcher
from bespokv.errors import WrongShardError, from_status, status_code
from bespokv.opcodec import is_write
from bespokv.peers import PeerPool, rpc_error
from bespokv.proto import bespokv_pb2 as pb
from bespokv.routing import EPOCH_HEADER

__all__ = ["HOPS_HEADER", "MAX_HOPS", "Forwarder", "hops_of"]

HOPS_HEADER = "x-bespokv-hops"
MAX_HOPS = 2


def hops_of(metadata: tuple[tuple[str, str], ...] | None) -> tuple[int, int]:
    """``(hops, epoch)`` from a call's metadata (0 for what is absent; a garbled hop
    count counts as ``MAX_HOPS``: not forwarded again)."""
    hops = 0
    epoch = 0
    for k, v in metadata or ():
        if k == HOPS_HEADER:
            try:
                hops = int(v)
            except ValueError:
                hops = MAX_HOPS
        elif k == EPOCH_HEADER:
            try:
                epoch = int(v)
            except ValueError:
                epoch = 0
    return hops, epoch


def check_hops(hops: int, what: str) -> None:
    if hops >= MAX_HOPS:
        raise WrongShardError(f"{what} forwarded {hops} times and still not at its node; shard maps disagree")


class Forwarder:
    """Batched forwarding of single operations to other nodes (see the module doc)."""

    def __init__(self, peers: PeerPool, *, timeout: float, epoch: Callable[[], int]) -> None:
        self.peers = peers
        self.timeout = timeout
        self.epoch = epoch
        self._batchers: dict[tuple[str, int, bool], AutoBatcher[pb.Op, pb.OpResult]] = {}

    def metadata(self, hops: int) -> tuple[tuple[str, str], ...]:
        """Call metadata for a request forwarded one hop further."""
        return tuple(self.peers.metadata or ()) + ((HOPS_HEADER, str(hops + 1)), (EPOCH_HEADER, str(self.epoch())))

    def _batcher(self, node: str, hops: int, write: bool) -> AutoBatcher[pb.Op, pb.OpResult]:
        b = self._batchers.get((node, hops, write))
        if b is None:

            async def send(ops: list[pb.Op]) -> list[pb.OpResult]:
                resp = await self.peers.kv(node).Multi(
                    pb.MultiRequest(ops=ops), timeout=self.timeout, metadata=self.metadata(hops)
                )
                return list(resp.results)

            b = self._batchers[node, hops, write] = AutoBatcher(send, max_batch=512, max_inflight=2)
        return b

    async def forward(self, node: str, op: pb.Op, hops: int) -> pb.OpResult:
        """Run ``op`` at ``node``; raises its error as a bespokv error."""
        check_hops(hops, "request")
        try:
            res = await self._batcher(node, hops, is_write(op)).submit(op)
        except Exception as exc:  # mapped
            raise rpc_error(exc, f"forwarding to {node}") from exc
        if res.status.code:
            raise from_status(status_code(res.status.code), res.status.message)
        return res

    def close(self) -> None:
        for b in self._batchers.values():
            b.close()
