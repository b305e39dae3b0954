"""The node's keys as the RESP commands use them: batched, routed, retried.

The RESP front end runs inside a node and calls the node's own request path
(``Node.do_multi``, ``do_cas``, ``do_scan``: the code the gRPC service runs), so a Redis
command is validated, routed, forwarded and grouped per shard exactly as a gRPC request.
Single reads and writes from every connection share one :class:`AutoBatcher` per shard
and direction (reads never wait behind writes stuck on a broken chain), so pipelined
commands of many connections become one ``Multi`` per shard, sent straight to the node
that serves them (this one, or one hop away): one replicated entry, one quorum round.

Retries follow the client library's rules (``client.py``): refused-before-applied errors
and stale shard maps are retried, so are reads and idempotent writes (puts, deletes) on
UNAVAILABLE or DEADLINE_EXCEEDED; a compare-and-set is retried only when it is known not
to have been applied. Everything gives up after ``request_timeout`` and raises the last
error (the command's reply is then an error).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from bespokv.batcher import AutoBatcher
from bespokv.errors import (
    Error,
    OverloadedError,
    WrongShardError,
    from_exception,
    from_status,
    status_code,
)
from bespokv.peers import rpc_error
from bespokv.proto import bespokv_pb2 as pb
from bespokv.routing import ACTIVE_ACTIVE, read_node, write_node
from bespokv.shardmap import ShardInfo

if TYPE_CHECKING:
    from bespokv.server import Node

__all__ = ["Backend"]

Result = pb.OpResult


def _may_retry(err: Error, write: bool, idempotent: bool) -> bool:
    if isinstance(err, (OverloadedError, WrongShardError)) or err.applied is False:
        return True  # refused before being applied
    return err.retriable and (idempotent or not write)


def _error_of(res: Result) -> Error | None:
    if not res.status.code:
        return None
    return from_status(status_code(res.status.code), res.status.message)


class Backend:
    """Key-value operations of one node, for its RESP front end. One event loop."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.timeout = node.config.tuning.request_timeout
        self._batchers: dict[tuple[int, bool], AutoBatcher[pb.Op, Result]] = {}

    def mode_of(self, key: bytes) -> str:
        return self.node.shard_map.shard_of_key(key).mode

    # -- single operations, batched ------------------------------------------------------------

    def _batcher(self, shard: int, write: bool) -> AutoBatcher[pb.Op, Result]:
        b = self._batchers.get((shard, write))
        if b is None:

            async def send(ops: list[pb.Op]) -> list[Result]:
                return await self._multi_at_target(self.node.shard_map.shard(shard), ops, write)

            b = self._batchers[shard, write] = AutoBatcher(send, max_batch=512, max_inflight=1)
        return b

    def start(self, key: bytes, make: Callable[[int], pb.Op], write: bool) -> asyncio.Future[Result]:
        """Send one operation on ``key`` (``make(shard) -> pb.Op``); finish it with
        :meth:`finish`. Starting many before awaiting any is what batches them."""
        sid = self.node.shard_map.shard_for(key)
        return self._batcher(sid, write).enqueue(make(sid))

    async def finish(
        self, fut: asyncio.Future[Result], key: bytes, make: Callable[[int], pb.Op], write: bool,
        *, idempotent: bool = True,
    ) -> Result:
        """The result of a started operation, retried as the module doc says; raises the
        error of the last attempt."""
        deadline = time.monotonic() + self.timeout
        attempt = 0
        while True:
            try:
                res = await fut
                err = _error_of(res)
            except Exception as exc:  # the whole batch failed
                err = from_exception(exc)
            if err is None:
                return res
            attempt += 1
            if not _may_retry(err, write, idempotent) or time.monotonic() >= deadline:
                raise err
            await asyncio.sleep(min(0.01 * 2**attempt, 0.5))
            fut = self.start(key, make, write)

    async def run(self, key: bytes, make: Callable[[int], pb.Op], write: bool, *, idempotent: bool = True) -> Result:
        return await self.finish(self.start(key, make, write), key, make, write, idempotent=idempotent)

    async def get(self, key: bytes) -> bytes | None:
        res = await self.run(key, lambda s: pb.Op(get=pb.GetRequest(key=key, shard=s)), False)
        return res.get.value if res.get.found else None

    async def put(self, key: bytes, value: bytes) -> None:
        await self.run(key, lambda s: pb.Op(put=pb.PutRequest(key=key, value=value, shard=s)), True)

    async def cas(self, key: bytes, expected: bytes | None, value: bytes | None) -> tuple[bool, bytes | None]:
        """Set ``key`` to ``value`` (None: delete) if it is ``expected`` (None: absent):
        ``(succeeded, value before)``. Not retried once it may have been applied."""

        def make(s: int) -> pb.Op:
            req = pb.CasRequest(key=key, shard=s)
            if expected is not None:
                req.expected = expected
            if value is not None:
                req.value = value
            return pb.Op(cas=req)

        res = await self.run(key, make, True, idempotent=False)
        return res.cas.succeeded, (res.cas.current if res.cas.found else None)

    # -- groups of one shard, atomic where the mode makes batches atomic ---------------------------

    def _target(self, info: ShardInfo, write: bool) -> str:
        """Where the shard's operations run: the controlet's choice, except that ms-ec
        reads go to the master (as the client library's default), so a connection reads
        its own writes wherever it is connected."""
        if info.mode == "ms-ec" and not write:
            return info.head
        c = self.node.controlets.get(info.id)
        if c is not None:
            return c.write_target() if write else c.read_target()
        if info.mode in ACTIVE_ACTIVE:  # any replica serves: the first that is up
            down = self.node.coordinator.down()
            return next((r for r in info.replicas if r not in down), info.replicas[0])
        return write_node(info) if write else read_node(info)

    async def _multi_at_target(self, info: ShardInfo, ops: list[pb.Op], write: bool) -> list[Result]:
        """``ops`` (of one shard) in one ``Multi`` at the node that serves them, where
        they are one group (one replicated entry; for reads, one datalet call: a
        consistent view of the shard in the master-slave modes)."""
        node = self.node
        target = self._target(info, write)
        if target == node.node_id:
            return list((await node.do_multi(pb.MultiRequest(ops=ops), 0)).results)
        try:
            resp = await node.peers.kv(target).Multi(
                pb.MultiRequest(ops=ops), timeout=self.timeout * 2, metadata=node.forwarder.metadata(0)
            )
        except Exception as exc:  # mapped
            raise rpc_error(exc, f"{'writing at' if write else 'reading from'} {target}") from exc
        return list(resp.results)

    async def read_group(self, keys: list[bytes]) -> list[bytes | None]:
        """Values of ``keys``, all in one shard, read together."""
        deadline = time.monotonic() + self.timeout
        attempt = 0
        while True:
            info = self.node.shard_map.shard_of_key(keys[0])
            ops = [pb.Op(get=pb.GetRequest(key=k, shard=info.id)) for k in keys]
            try:
                results = await self._multi_at_target(info, ops, False)
                err = next((e for e in map(_error_of, results) if e is not None), None)
            except Exception as exc:  # mapped below
                err = from_exception(exc)
            if err is None:
                return [r.get.value if r.get.found else None for r in results]
            attempt += 1
            if not _may_retry(err, False, True) or time.monotonic() >= deadline:
                raise err
            await asyncio.sleep(min(0.01 * 2**attempt, 0.5))

    async def write_group(self, ops: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Puts and deletes (value None) of one shard as one atomic batch (atomic on every
        replica in the master-slave modes, per key in the active-active modes)."""
        muts = [pb.Mutation(key=k, delete=True) if v is None else pb.Mutation(key=k, value=v) for k, v in ops]
        await self.run(ops[0][0], lambda s: pb.Op(batch=pb.BatchRequest(mutations=muts, shard=s)), True)

    def by_shard(self, keys: list[bytes]) -> dict[int, list[int]]:
        """Positions of ``keys`` grouped by shard, in order."""
        shard_for = self.node.shard_map.shard_for
        out: dict[int, list[int]] = {}
        for i, k in enumerate(keys):
            out.setdefault(shard_for(k), []).append(i)
        return out

    async def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Values of ``keys`` in order; each shard's keys read together."""
        groups = self.by_shard(keys)
        values: list[bytes | None] = [None] * len(keys)

        async def one(idx: list[int]) -> None:
            got = await self.read_group([keys[i] for i in idx])
            for i, v in zip(idx, got):
                values[i] = v

        await asyncio.gather(*(one(idx) for idx in groups.values()))
        return values

    async def write_many(self, ops: list[tuple[bytes, bytes | None]]) -> None:
        """Puts and deletes, one atomic batch per shard (shards independent)."""
        groups = self.by_shard([k for k, _ in ops])
        await asyncio.gather(*(self.write_group([ops[i] for i in idx]) for idx in groups.values()))

    # -- scans --------------------------------------------------------------------------------

    async def scan_keys(self, start: bytes, *, limit: int, shard: int | None = None) -> list[bytes]:
        """Up to ``limit`` keys from ``start`` on, in key order, of one shard or of all
        (merged); reserved keys included (callers drop them)."""
        req = pb.ScanRequest(start=start, limit=limit)
        if shard is not None:
            req.shard = shard
        out: list[bytes] = []
        chunks = self.node.do_scan(req, 0)
        try:
            async for resp in chunks:
                out.extend(kv.key for kv in resp.pairs)
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]  # an async generator
        return out

    def close(self) -> None:
        for b in self._batchers.values():
            b.close()
        self._batchers.clear()
