"""The bespokv client library: shard-aware, retrying, batching; asyncio and sync.

    from bespokv import Client
    with Client("127.0.0.1:7001") as c:          # any node; the shard map is fetched
        c.put(b"k", b"v")
        assert c.get(b"k") == b"v"
        c.write_batch([(b"a", b"1"), (b"b", None)])   # atomic per shard
        for k, v in c.scan(b"a", b"z"):
            ...

    async with AsyncClient(["127.0.0.1:7001"]) as c:
        await asyncio.gather(*(c.put(b"k%d" % i, b"v") for i in range(1000)))

Routing: the client computes each key's shard and sends the operation straight to the node
that serves it (``routing.py``). Batching and pipelining: concurrent single operations to
the same node and shard share one ``Multi`` RPC, with up to ``max_inflight`` RPCs in flight
per node and shard (so a stalled shard delays no other shard's operations);
``get_many``/``put_many``/``write_batch`` do the same for one caller. Retries: operations
failing with a retriable status (UNAVAILABLE, RESOURCE_EXHAUSTED, FAILED_PRECONDITION after
a shard-map refresh; DEADLINE_EXCEEDED for reads) are retried with exponential backoff
and jitter, up to ``retries`` times. Writes are retried only when ``retry_writes`` is true
(the default): a write that failed ambiguously may then be applied twice, which is harmless
for puts and deletes (they are idempotent) but not linearizable. Pass
``retry_writes=False`` to see every ambiguous failure.

The sync :class:`Client` runs an :class:`AsyncClient` on a private event-loop thread.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from bespokv import opcodec
from bespokv.batcher import AutoBatcher
from bespokv.config import ClusterConfig, Limits, TlsConfig, check_backoff, load
from bespokv.errors import (
    ClosedError,
    DeadlineExceededError,
    Error,
    InvalidArgumentError,
    OverloadedError,
    UnavailableError,
    WrongShardError,
    from_status,
    status_code,
)
from bespokv.merge import merge_chunks
from bespokv.proto import bespokv_pb2 as pb
from bespokv.proto import bespokv_pb2_grpc as pbg
from bespokv.routing import ACTIVE_ACTIVE, EPOCH_HEADER, read_node, write_node
from bespokv.security import MAX_RECONNECT_BACKOFF_MS, RECONNECT_BACKOFF_MS, call_metadata, open_channel
from bespokv.shardmap import NodeInfo, ShardInfo, ShardMap

__all__ = ["AsyncClient", "Client", "CasResult"]

#: ``Multi`` RPCs in flight per node and shard, for reads and as many for writes. 1: operations
#: that arrive while one is in flight ride in the next, so batches are bigger and RPCs
#: fewer, and each RPC costs the nodes CPU whatever it carries (a peer round for each, in
#: aa-sc). With 64 tasks on the shared 2-core machine (load 15-19), 1 instead of 2 gave
#: aa-sc (rocksmash, fsync on) 1.7-2.0x the throughput at half the node CPU per
#: operation, ms-sc 1.3-1.4x, ms-ec 1.2x, aa-ec 1.05x, and no loss with 8 tasks
#: (``python -m bench service-profile --max-inflight N``; docs/benchmarks.md). Those
#: figures are from when batchers were per node; per node and shard, on an idle machine,
#: aa-sc ran at 1.19x (A) and 1.55x (B) etcd's throughput.
MAX_INFLIGHT = 1

#: Unbatched calls (``batching=False``) in flight to one node at once; more wait their
#: turn in the client. gRPC's server cancels the calls beyond its pending-call limit
#: (CANCELLED, with nothing to say whether it ran them), and a ``get_many`` of thousands of
#: keys would otherwise open one call per key at once. Well below the nodes' limit
#: (``Tuning.max_pending_calls``), so that many clients fit.
MAX_CALLS_PER_NODE = 256

T = TypeVar("T")
Op = tuple[bytes, bytes | None]


@dataclass(frozen=True)
class CasResult:
    succeeded: bool
    current: bytes | None  # the value before the call (None: the key did not exist)


def _shard_map_from_proto(resp: pb.ShardMapResponse) -> ShardMap:
    nodes = {n.id: NodeInfo(n.id, n.address) for n in resp.nodes}
    shards = {s.id: ShardInfo(s.id, s.mode, tuple(s.replicas), s.epoch or 1) for s in resp.shards}
    return ShardMap(shards, nodes, vnodes=resp.vnodes, epoch=resp.epoch, cluster=resp.cluster)


_NOT_SENT = ("failed to connect", "connection refused", "dns resolution failed")


def _rpc_error(exc: grpc.aio.AioRpcError, node: str) -> Error:
    """A client-side error for a failed call; marks calls that never reached the node."""
    details = exc.details() or ""
    err = from_status(exc.code(), f"{node}: {details}")
    if exc.code() == grpc.StatusCode.UNAVAILABLE and any(s in details.lower() for s in _NOT_SENT):
        err.applied = False
    return err


def _as_bytes(x: Any, what: str) -> bytes:
    if isinstance(x, bytes):
        return x
    if isinstance(x, (bytearray, memoryview)):
        return bytes(x)
    if isinstance(x, str):
        return x.encode()
    raise InvalidArgumentError(f"{what} must be bytes or str, not {type(x).__name__}")


class AsyncClient:
    """An asyncio client. Create it anywhere; use it from one event loop."""

    def __init__(
        self,
        addresses: str | Sequence[str],
        *,
        token: str | None = None,
        tls: TlsConfig | None = None,
        timeout: float = 10.0,
        retries: int = 8,
        retry_writes: bool = True,
        read_from: str = "primary",
        batching: bool = True,
        max_batch: int = 256,
        max_inflight: int = MAX_INFLIGHT,
        max_calls_per_node: int = MAX_CALLS_PER_NODE,
        limits: Limits | None = None,
        seed: int | None = None,
        watch: bool = True,
        reconnect_backoff_ms: float = RECONNECT_BACKOFF_MS,
        max_reconnect_backoff_ms: float = MAX_RECONNECT_BACKOFF_MS,
    ) -> None:
        check_backoff(reconnect_backoff_ms, max_reconnect_backoff_ms)
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.max_reconnect_backoff_ms = max_reconnect_backoff_ms
        self.watch = watch
        self._watchers: list[asyncio.Task[None]] = []
        self.seeds = [addresses] if isinstance(addresses, str) else list(addresses)
        if not self.seeds:
            raise InvalidArgumentError("a client needs at least one node address")
        if read_from not in ("primary", "any"):
            raise InvalidArgumentError("read_from must be 'primary' or 'any'")
        self.timeout = timeout
        self.retries = retries
        self.retry_writes = retry_writes
        self.read_from = read_from
        self.batching = batching
        self.max_batch = max_batch
        self.max_inflight = max_inflight
        if max_calls_per_node < 1:
            raise InvalidArgumentError("max_calls_per_node must be >= 1")
        self.max_calls_per_node = max_calls_per_node
        self._calls: dict[str, asyncio.Semaphore] = {}  # per node, for unbatched calls
        self._md = call_metadata(token)
        self._tls = tls
        self._limits = limits
        self._rng = random.Random(seed)
        self._home = self._rng.randrange(1 << 30)
        self._homes: dict[int, int] = {}
        self._map: ShardMap | None = None
        self._channels: dict[str, grpc.aio.Channel] = {}
        #: One batcher per (node, shard, writes?): reads never queue behind writes stuck
        #: on a broken chain (a write's Multi may wait its whole deadline for the tail),
        #: and a shard whose datalet stalls holds up only its own ``Multi``.
        self._batchers: dict[tuple[str, int, bool], AutoBatcher[pb.Op, pb.OpResult]] = {}
        self._refreshing: asyncio.Future[None] | None = None
        self._last_refresh = 0.0
        self._down: set[str] = set()  # nodes the cluster reports down (etcd liveness)
        self._closed = False

    @classmethod
    def from_config(cls, config: ClusterConfig | str, **kwargs: Any) -> AsyncClient:
        """A client for the cluster described by a config (object or file path)."""
        cfg = load(config) if isinstance(config, str) else config
        kwargs.setdefault("token", cfg.token)
        kwargs.setdefault("tls", cfg.tls)
        kwargs.setdefault("limits", cfg.limits)
        kwargs.setdefault("reconnect_backoff_ms", cfg.tuning.reconnect_backoff_ms)
        kwargs.setdefault("max_reconnect_backoff_ms", cfg.tuning.max_reconnect_backoff_ms)
        return cls([n.address for n in cfg.nodes], **kwargs)

    # -- connection -----------------------------------------------------------------------

    def _channel(self, address: str) -> grpc.aio.Channel:
        if self._closed:
            raise ClosedError("client is closed")
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = open_channel(
                address, tls=self._tls, limits=self._limits, reconnect_backoff_ms=self.reconnect_backoff_ms,
                max_reconnect_backoff_ms=self.max_reconnect_backoff_ms,
            )
        return ch

    def _kv(self, node: str) -> pbg.KVStub:
        return pbg.KVStub(self._channel(self._shard_map().address(node)))

    def _shard_map(self) -> ShardMap:
        if self._map is None:
            raise ClosedError("client is not connected: call connect() first")
        return self._map

    async def connect(self) -> AsyncClient:
        """Fetch the shard map from the first seed that answers (and, with ``watch``,
        follow its changes in the background)."""
        if self._map is None:
            await self.refresh_map()
        if self.watch and not self._watchers and not self._closed:
            # Two watches on two different nodes: one of them may be the node that fails
            # (a paused node keeps its stream open and says nothing).
            self._watchers = [asyncio.ensure_future(self._watch_map(k)) for k in (0, 1)]
        return self

    def _install(self, new: ShardMap, down: Iterable[str] = ()) -> None:
        """Adopt a newer map, and the nodes reported down. Calls in flight to a node that
        no longer replicates any shard (dropped by a failover) or that is down (its lease
        expired: dead, or paused and so silent) fail at once with UNAVAILABLE and are
        retried on the new map or another replica, instead of waiting for their deadline."""
        old = self._map
        down = set(down)
        if old is not None and new.epoch < old.epoch:
            return
        if old is not None and new.epoch == old.epoch and down == self._down:
            return
        self._map = new
        newly_down = down - self._down
        self._down = down
        if old is None:
            return
        serving = {r for s in new.shards.values() for r in s.replicas}
        gone = ({r for s in old.shards.values() for r in s.replicas} - serving) | newly_down
        for (node, _, _), b in self._batchers.items():
            if node in gone:
                b.abort(UnavailableError(f"{node} is down or was dropped (map epoch {new.epoch})"))

    async def _watch_map(self, i: int) -> None:
        """Follow the map over ``Admin.WatchShardMap``, from one node at a time."""
        while not self._closed:
            nodes = [n.address for n in self._shard_map().nodes.values()]
            addresses = list(dict.fromkeys(self.seeds + nodes))
            addr = addresses[i % len(addresses)]
            i += 2
            try:
                async for resp in pbg.AdminStub(self._channel(addr)).WatchShardMap(
                    pb.ShardMapRequest(), metadata=self._md
                ):
                    self._install(_shard_map_from_proto(resp), resp.down)
            except asyncio.CancelledError:
                raise
            except Exception:  # that node is gone or paused: watch another
                pass
            await asyncio.sleep(0.2)

    async def refresh_map(self) -> ShardMap:
        """Fetch the shard map again (after FAILED_PRECONDITION: wrong shard)."""
        if self._refreshing is not None:
            await self._refreshing
            return self._shard_map()
        loop = asyncio.get_running_loop()
        self._refreshing = loop.create_future()
        try:
            addresses = list(dict.fromkeys(self.seeds + ([n.address for n in self._map.nodes.values()] if self._map else [])))
            errors = []
            for attempt in range(max(1, self.retries)):
                for addr in addresses:
                    try:
                        resp = await pbg.AdminStub(self._channel(addr)).ShardMap(
                            pb.ShardMapRequest(), timeout=min(self.timeout, 3.0), metadata=self._md
                        )
                        self._install(_shard_map_from_proto(resp), resp.down)
                        return self._shard_map()
                    except grpc.aio.AioRpcError as exc:
                        err = from_status(exc.code(), exc.details())
                        if not err.retriable and not isinstance(err, DeadlineExceededError):
                            raise err from None
                        errors.append(f"{addr}: {exc.code().name}")
                await asyncio.sleep(min(0.05 * 2**attempt, 1.0))
            raise UnavailableError(f"no node answered with a shard map ({'; '.join(errors[-len(addresses):])})")
        finally:
            fut, self._refreshing = self._refreshing, None
            if fut is not None and not fut.done():
                fut.set_result(None)

    async def _refresh_quietly(self) -> None:
        """Refresh the map after a failure, at most every 100 ms; errors are the caller's
        retry's business."""
        now = time.monotonic()
        if now - self._last_refresh < 0.1:
            return
        self._last_refresh = now
        try:
            await self.refresh_map()
        except Error:
            pass

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for w in self._watchers:
            w.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        for b in self._batchers.values():
            b.close()
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()

    async def __aenter__(self) -> AsyncClient:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- routing --------------------------------------------------------------------------

    def shard_of(self, key: bytes) -> ShardInfo:
        return self._shard_map().shard_of_key(key)

    def _home_of(self, info: ShardInfo) -> int:
        return self._homes.get(info.id, self._home)

    def _rotate_home(self, info: ShardInfo) -> None:
        self._homes[info.id] = self._home_of(info) + 1

    def target(self, info: ShardInfo, *, write: bool) -> str:
        """The node this client sends an operation on shard ``info`` to."""
        home = self._home_of(info)
        if info.mode in ACTIVE_ACTIVE and self._down:
            # Any replica serves: skip those the cluster reports down.
            n = len(info.replicas)
            home = next((home + k for k in range(n) if info.replicas[(home + k) % n] not in self._down), home)
        if write:
            return write_node(info, home)
        return read_node(info, home, read_from=self.read_from)

    def _batcher(self, node: str, shard: int, write: bool) -> AutoBatcher[pb.Op, pb.OpResult]:
        b = self._batchers.get((node, shard, write))
        if b is None:

            async def send(ops: list[pb.Op]) -> list[pb.OpResult]:
                resp = await self._kv(node).Multi(
                    pb.MultiRequest(ops=ops), timeout=self.timeout, metadata=self._epoch_md()
                )
                return list(resp.results)

            b = self._batchers[node, shard, write] = AutoBatcher(send, max_batch=self.max_batch, max_inflight=self.max_inflight)
        return b

    async def _batched(self, node: str, shard: int, write: bool, op: pb.Op) -> pb.OpResult:
        """``op`` through ``node``'s batcher, within ``timeout`` of now, queueing included:
        the RPC has that deadline too, and this one makes sure no wait for a batch (a bug in
        the batching, a batch cancelled by :meth:`_install`) outlives the call's timeout."""
        try:
            async with asyncio.timeout(self.timeout):  # not wait_for: no task per call
                return await self._batcher(node, shard, write).submit(op)
        except TimeoutError:
            raise DeadlineExceededError(f"{node}: no answer within {self.timeout:g} s (outcome unknown)") from None

    def _epoch_md(self) -> tuple[tuple[str, str], ...]:
        """Call metadata: the token, and the map epoch the call is routed with (a node
        refuses a request routed with a map older than the shard's last change)."""
        return tuple(self._md or ()) + ((EPOCH_HEADER, str(self._shard_map().epoch)),)

    async def _unary(self, node: str, op: pb.Op) -> pb.OpResult:
        calls = self._calls.get(node)
        if calls is None:
            calls = self._calls[node] = asyncio.Semaphore(self.max_calls_per_node)
        loop = asyncio.get_running_loop()
        start = loop.time()
        try:
            async with asyncio.timeout(self.timeout):  # not wait_for: no task per call
                await calls.acquire()
        except TimeoutError:
            err = DeadlineExceededError(
                f"{node}: {self.max_calls_per_node} calls still in flight after {self.timeout:g} s; not sent"
            )
            err.applied = False
            raise err from None
        try:
            left = max(self.timeout - (loop.time() - start), 0.001)
            return await opcodec.call_unary(self._kv(node), op, timeout=left, metadata=self._epoch_md())
        finally:
            calls.release()

    def _may_retry(self, err: Error, write: bool) -> bool:
        if isinstance(err, (OverloadedError, WrongShardError)) or err.applied is False:
            return True  # refused before being applied, or never sent
        if not err.retriable:
            return False
        return self.retry_writes or not write

    async def _execute(self, key: bytes, make: Any, *, write: bool, batched: bool | None = None) -> pb.OpResult:
        """Run one operation on ``key``'s shard with routing and retries.

        ``make(shard_id) -> pb.Op`` builds the request for the current shard map.

        ``timeout`` bounds the whole call, retries and map refreshes included (each
        attempt gets what is left): DeadlineExceededError when it runs out.
        """
        attempt = 0
        last: Error | None = None
        batched = self.batching if batched is None else batched
        try:
            async with asyncio.timeout(self.timeout):
                await self.connect()
                while True:
                    info = self.shard_of(key)
                    node = self.target(info, write=write)
                    op = make(info.id)
                    try:
                        try:
                            res = await (self._batched(node, info.id, write, op) if batched
                                         else self._unary(node, op))
                        except grpc.aio.AioRpcError as exc:
                            raise _rpc_error(exc, node) from None
                        if res.status.code:
                            raise from_status(status_code(res.status.code), res.status.message)
                        return res
                    except Error as err:
                        attempt += 1
                        last = err
                        if self._closed or attempt > self.retries or not self._may_retry(err, write):
                            raise
                        if isinstance(err, WrongShardError):
                            await self.refresh_map()
                        elif isinstance(err, (UnavailableError, DeadlineExceededError)):
                            if info.mode in ACTIVE_ACTIVE:
                                self._rotate_home(info)
                            else:  # the head/tail may be gone: the cluster may have failed over
                                await self._refresh_quietly()
                        await asyncio.sleep(min(0.02 * 2 ** (attempt - 1), 1.0) * (0.5 + self._rng.random()))
        except TimeoutError:
            tried = f"{attempt + 1} attempt(s)" + (f"; the last error: {last}" if last else "")
            raise DeadlineExceededError(
                f"no answer within {self.timeout:g} s, the whole call's timeout ({tried}; "
                f"{'the outcome is unknown' if write else 'nothing was read'})") from None

    # -- operations -----------------------------------------------------------------------

    async def get(self, key: bytes | str) -> bytes | None:
        """The value of ``key``, or None."""
        k = _as_bytes(key, "key")
        res = await self._execute(k, lambda s: pb.Op(get=pb.GetRequest(key=k, shard=s)), write=False)
        return res.get.value if res.get.found else None

    async def put(self, key: bytes | str, value: bytes | str) -> None:
        k, v = _as_bytes(key, "key"), _as_bytes(value, "value")
        await self._execute(k, lambda s: pb.Op(put=pb.PutRequest(key=k, value=v, shard=s)), write=True)

    async def delete(self, key: bytes | str) -> None:
        k = _as_bytes(key, "key")
        await self._execute(k, lambda s: pb.Op(delete=pb.DeleteRequest(key=k, shard=s)), write=True)

    async def cas(self, key: bytes | str, expected: bytes | str | None, value: bytes | str | None) -> CasResult:
        """Set ``key`` to ``value`` (None: delete) if it currently is ``expected`` (None:
        absent). UNIMPLEMENTED in the active-active modes."""
        k = _as_bytes(key, "key")
        e = None if expected is None else _as_bytes(expected, "expected")
        v = None if value is None else _as_bytes(value, "value")

        def make(s: int) -> pb.Op:
            req = pb.CasRequest(key=k, shard=s)
            if e is not None:
                req.expected = e
            if v is not None:
                req.value = v
            return pb.Op(cas=req)

        res = await self._execute(k, make, write=True)
        return CasResult(res.cas.succeeded, res.cas.current if res.cas.found else None)

    async def get_many(self, keys: Iterable[bytes | str]) -> list[bytes | None]:
        """Values of many keys, fetched concurrently (pipelined per node)."""
        return list(await asyncio.gather(*(self.get(k) for k in keys)))

    async def put_many(self, items: Iterable[tuple[bytes | str, bytes | str]]) -> None:
        """Put many pairs concurrently; not atomic (see :meth:`write_batch`)."""
        await asyncio.gather(*(self.put(k, v) for k, v in items))

    async def write_batch(self, ops: Iterable[tuple[bytes | str, bytes | str | None]]) -> None:
        """Apply puts and deletes (value None), atomically within each shard.

        Ops are split by shard and each shard's part is one ``Batch`` (atomic on every
        replica in the master-slave modes, per key in the active-active modes). Parts of
        different shards are independent.
        """
        await self.connect()
        by_shard: dict[int, list[pb.Mutation]] = {}
        first_key: dict[int, bytes] = {}
        for key, value in ops:
            k = _as_bytes(key, "key")
            sid = self.shard_of(k).id
            m = pb.Mutation(key=k, delete=True) if value is None else pb.Mutation(key=k, value=_as_bytes(value, "value"))
            by_shard.setdefault(sid, []).append(m)
            first_key.setdefault(sid, k)

        async def one(sid: int, muts: list[pb.Mutation]) -> None:
            def make(s: int) -> pb.Op:
                if s != sid:  # the shard map changed: the part no longer fits one shard
                    raise WrongShardError("shard map changed during a batch")
                return pb.Op(batch=pb.BatchRequest(mutations=muts, shard=s))

            await self._execute(first_key[sid], make, write=True)

        await asyncio.gather(*(one(s, m) for s, m in by_shard.items()))

    async def scan(
        self,
        start: bytes | str | None = None,
        end: bytes | str | None = None,
        *,
        limit: int | None = None,
        reverse: bool = False,
        chunk: int = 0,
    ) -> AsyncIterator[tuple[bytes, bytes]]:
        """Pairs with ``start <= key < end`` over all shards, in key order."""
        async for pairs in self.scan_chunks(start, end, limit=limit, reverse=reverse):
            for kv in pairs:
                yield kv

    async def scan_chunks(
        self,
        start: bytes | str | None = None,
        end: bytes | str | None = None,
        *,
        limit: int | None = None,
        reverse: bool = False,
    ) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        await self.connect()
        s = b"" if start is None else _as_bytes(start, "start")
        e = b"" if end is None else _as_bytes(end, "end")
        smap = self._shard_map()
        sources = [self._scan_shard(info, s, e, limit or 0, reverse) for info in smap.shards.values()]
        merged = merge_chunks(sources, reverse=reverse)
        sent = 0
        try:
            async for pairs in merged:
                if limit is not None and sent + len(pairs) > limit:
                    pairs = pairs[: limit - sent]
                sent += len(pairs)
                if pairs:
                    yield pairs
                if limit is not None and sent >= limit:
                    return
        finally:  # stopping early must close the per-shard streams too
            await merged.aclose()
            for src in sources:
                await src.aclose()

    async def _scan_shard(
        self, info: ShardInfo, start: bytes, end: bytes, limit: int, reverse: bool
    ) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        """One shard's pairs; resumes after the last key received when a node fails."""
        attempt = 0
        lo, hi, left = start, end, limit
        while True:
            node = self.target(info, write=False)
            req = pb.ScanRequest(start=lo, end=hi, limit=left, reverse=reverse, shard=info.id)
            try:
                async for resp in self._kv(node).Scan(req, metadata=self._md, timeout=max(self.timeout, 60.0)):
                    pairs = [(kv.key, kv.value) for kv in resp.pairs]
                    if not pairs:
                        continue
                    if reverse:
                        hi = pairs[-1][0]
                    else:
                        lo = pairs[-1][0] + b"\x00"
                    if limit:
                        left -= len(pairs)
                    yield pairs
                    if limit and left <= 0:
                        return
                return
            except grpc.aio.AioRpcError as exc:
                err = from_status(exc.code(), f"{node}: {exc.details()}")
                attempt += 1
                if attempt > self.retries or not self._may_retry(err, write=False):
                    raise err from None
                if isinstance(err, WrongShardError):
                    await self.refresh_map()
                elif info.mode in ACTIVE_ACTIVE:
                    self._rotate_home(info)
                await asyncio.sleep(min(0.02 * 2 ** (attempt - 1), 1.0))

    # -- replica-level access (diagnostics, tests) -------------------------------------------

    async def get_local(self, node: str, key: bytes | str) -> bytes | None:
        """``node``'s own replica's value of ``key`` (no routing, no consistency)."""
        await self.connect()
        k = _as_bytes(key, "key")
        try:
            resp = await self._kv(node).Get(pb.GetRequest(key=k, local=True), timeout=self.timeout, metadata=self._md)
        except grpc.aio.AioRpcError as exc:
            raise from_status(exc.code(), exc.details()) from None
        return resp.value if resp.found else None

    async def scan_local(self, node: str, shard: int) -> list[tuple[bytes, bytes]]:
        """All user pairs of ``node``'s replica of ``shard``."""
        await self.connect()
        req = pb.ScanRequest(shard=shard, local=True)
        out: list[tuple[bytes, bytes]] = []
        try:
            async for resp in self._kv(node).Scan(req, timeout=self.timeout, metadata=self._md):
                out.extend((kv.key, kv.value) for kv in resp.pairs)
        except grpc.aio.AioRpcError as exc:
            raise from_status(exc.code(), exc.details()) from None
        return out

    # -- admin ----------------------------------------------------------------------------

    async def shard_map(self) -> ShardMap:
        await self.connect()
        return self._shard_map()

    async def cluster_status(self) -> pb.ClusterStatusResponse:
        """Every node's status, as seen by the first node that answers."""
        await self.connect()
        last: Exception | None = None
        for node in self._shard_map().nodes.values():
            try:
                return await pbg.AdminStub(self._channel(node.address)).ClusterStatus(
                    pb.ClusterStatusRequest(), timeout=5.0, metadata=self._md
                )
            except grpc.aio.AioRpcError as exc:
                last = from_status(exc.code(), exc.details())
        raise UnavailableError(f"no node answered: {last}")

    async def node_stats(self, node: str) -> pb.NodeStatus:
        await self.connect()
        try:
            return await pbg.AdminStub(self._channel(self._shard_map().address(node))).NodeStats(
                pb.NodeStatsRequest(), timeout=5.0, metadata=self._md
            )
        except grpc.aio.AioRpcError as exc:
            raise from_status(exc.code(), exc.details()) from None


class Client:
    """A synchronous client: the :class:`AsyncClient` API, run on a private loop thread.

    Thread-safe: calls from several threads are pipelined together.
    """

    def __init__(self, addresses: str | Sequence[str], **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="bespokv-client", daemon=True)
        self._thread.start()
        self._closed = False
        self._ac = AsyncClient(addresses, **kwargs)
        try:
            self._run(self._ac.connect())
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_config(cls, config: ClusterConfig | str, **kwargs: Any) -> Client:
        cfg = load(config) if isinstance(config, str) else config
        kwargs.setdefault("token", cfg.token)
        kwargs.setdefault("tls", cfg.tls)
        kwargs.setdefault("limits", cfg.limits)
        kwargs.setdefault("reconnect_backoff_ms", cfg.tuning.reconnect_backoff_ms)
        kwargs.setdefault("max_reconnect_backoff_ms", cfg.tuning.max_reconnect_backoff_ms)
        return cls([n.address for n in cfg.nodes], **kwargs)

    @property
    def aio(self) -> AsyncClient:
        """The underlying async client (use it only on :attr:`loop`)."""
        return self._ac

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def _run(self, coro: Any) -> Any:
        if self._closed:
            coro.close()
            raise ClosedError("client is closed")
        fut: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result()

    def get(self, key: bytes | str) -> bytes | None:
        return self._run(self._ac.get(key))

    def put(self, key: bytes | str, value: bytes | str) -> None:
        self._run(self._ac.put(key, value))

    def delete(self, key: bytes | str) -> None:
        self._run(self._ac.delete(key))

    def cas(self, key: bytes | str, expected: bytes | str | None, value: bytes | str | None) -> CasResult:
        return self._run(self._ac.cas(key, expected, value))

    def get_many(self, keys: Iterable[bytes | str]) -> list[bytes | None]:
        return self._run(self._ac.get_many(list(keys)))

    def put_many(self, items: Iterable[tuple[bytes | str, bytes | str]]) -> None:
        self._run(self._ac.put_many(list(items)))

    def write_batch(self, ops: Iterable[tuple[bytes | str, bytes | str | None]]) -> None:
        self._run(self._ac.write_batch(list(ops)))

    def scan(
        self,
        start: bytes | str | None = None,
        end: bytes | str | None = None,
        *,
        limit: int | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        agen = self._ac.scan_chunks(start, end, limit=limit, reverse=reverse)
        try:
            while True:
                try:
                    chunk = self._run(agen.__anext__())
                except StopAsyncIteration:
                    return
                yield from chunk
        finally:
            if not self._closed:
                try:
                    self._run(agen.aclose())
                except Exception:  # closing an abandoned scan
                    pass

    def get_local(self, node: str, key: bytes | str) -> bytes | None:
        return self._run(self._ac.get_local(node, key))

    def scan_local(self, node: str, shard: int) -> list[tuple[bytes, bytes]]:
        return self._run(self._ac.scan_local(node, shard))

    def shard_map(self) -> ShardMap:
        return self._run(self._ac.shard_map())

    def refresh_map(self) -> ShardMap:
        """Fetch the shard map again from the nodes."""
        return self._run(self._ac.refresh_map())

    def cluster_status(self) -> pb.ClusterStatusResponse:
        return self._run(self._ac.cluster_status())

    def node_stats(self, node: str) -> pb.NodeStatus:
        return self._run(self._ac.node_stats(node))

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._loop.is_running():
                asyncio.run_coroutine_threadsafe(self._ac.close(), self._loop).result(timeout=5)
        except Exception:  # closing anyway
            pass
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._loop.is_running():
            self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
