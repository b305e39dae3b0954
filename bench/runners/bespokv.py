"""bespokv: a sharded, replicated cluster of node processes on loopback, over gRPC.

``open()`` starts a :class:`bespokv.testing.LocalCluster` (every node its own
``python -m bespokv node`` process, a child of the trial, so its memory counts toward
the trial) with its config, logs and any datalet files under the trial's data
directory, waits until every shard is ready, and connects one
:class:`bespokv.AsyncClient`. ``close()`` closes the client and stops every node by
process id (SIGTERM, SIGKILL after 10 s).

Systems: ``bespokv-ms-sc``, ``bespokv-ms-ec``, ``bespokv-aa-sc``, ``bespokv-aa-ec`` take
the controlet mode from their name; plain ``bespokv`` takes it from ``--opt
bespokv.mode=...`` (default ms-sc). Options (``--opt SYSTEM.KEY=VALUE``, SYSTEM being the
name that runs, e.g. ``--opt bespokv-ms-sc.datalet=rocksmash``):

==================  ==========================================================================
``datalet``         ``memory`` (default: volatile, nothing on disk), ``rocksdb``, ``rocksmash``
                    (one database per shard replica under the data directory), ``redis``
``datalet_options`` a JSON object of datalet options (e.g. rocksmash's ``open`` options)
``nodes``           node processes (3)
``replicas``        replicas per shard (3)
``shards``          shards (default: one per node, so each node heads one shard)
``mode``            the controlet, for plain ``bespokv`` (ms-sc, ms-ec, aa-sc, aa-ec)
``tuning``          a JSON object of :class:`bespokv.config.Tuning` fields
client keys         ``max_batch`` (256), ``max_inflight`` (1), ``read_from`` (primary),
                    ``batching`` (true), ``timeout`` (10 s), ``retries`` (8): passed to
                    the :class:`~bespokv.AsyncClient`
==================  ==========================================================================

The driver's N asyncio tasks share the one client: concurrent operations on the same
node ride in one ``Multi`` RPC, at most ``max_inflight`` in flight per node (bespokv's
batching and pipelining; a unary gRPC call costs Python about half a millisecond, so this
is where the throughput comes from). ``read``/``update`` are the client's own ``get`` and
``put`` (no adapter frame). A load batch is one ``write_batch`` (one atomic ``Batch`` per
shard). A scan reads the first ``count`` pairs of the merged all-shard scan from the key.

Settle: nothing to flush through the service API; it waits (up to 60 s) until every
replica of every shard is ready and reports no replication lag, so that a mode that
acknowledges before replicating (ms-ec, aa-ec) does not carry the load's replication
into the run phase.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, ClassVar

from bench.runners.base import AsyncRunner, RunnerStats

__all__ = ["BespokvRunner", "BespokvMsScRunner", "BespokvMsEcRunner", "BespokvAaScRunner",
           "BespokvAaEcRunner"]

_CLIENT_KEYS = {"max_batch", "max_inflight", "read_from", "batching", "timeout", "retries"}
_CLUSTER_KEYS = {"mode", "datalet", "datalet_options", "nodes", "replicas", "shards", "tuning"}
_SETTLE_TIMEOUT = 60.0


class BespokvRunner(AsyncRunner):
    """A local bespokv cluster; the mode from ``--opt bespokv.mode`` (default ms-sc)."""

    name = "bespokv"
    #: The controlet mode a subclass fixes (None: from the ``mode`` option).
    mode: ClassVar[str | None] = None

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self._cluster: Any = None
        self._client: Any = None

    async def open(self) -> None:
        from bespokv.config import DataletSpec, Tuning
        from bespokv.testing import LocalCluster

        opts = dict(self.config.options)
        unknown = set(opts) - _CLIENT_KEYS - _CLUSTER_KEYS
        if unknown:
            raise ValueError(f"unknown bespokv option(s) {sorted(unknown)}; known: "
                             f"{sorted(_CLIENT_KEYS | _CLUSTER_KEYS)}")
        if self.mode is not None and opts.get("mode", self.mode) != self.mode:
            raise ValueError(f"{self.name} runs mode {self.mode}; use the system of the mode "
                             f"wanted (or plain bespokv with --opt bespokv.mode=...)")
        mode = self.mode or str(opts.get("mode", "ms-sc"))
        kind = str(opts.get("datalet", "memory"))
        spec = DataletSpec(kind, dict(opts.get("datalet_options") or {}))
        nodes = int(opts.get("nodes", 3))
        replicas = int(opts.get("replicas", 3))
        shards = opts.get("shards")
        tuning = Tuning(**opts["tuning"]) if opts.get("tuning") else None
        client_opts = {k: opts[k] for k in _CLIENT_KEYS if k in opts}

        self._cluster = LocalCluster(nodes, replicas=replicas, shards=None if shards is None else int(shards),
                                     mode=mode, datalet=spec, dir=str(self.config.data_dir / "bespokv"),
                                     tuning=tuning)
        # Blocking is fine here: nothing else runs on the loop before open() returns.
        self._cluster.start(timeout=120.0)
        self._client = self._cluster.async_client(**client_opts)
        await self._client.connect()
        # The driver calls these per operation: the client's own methods, no adapter frame.
        self.read = self._client.get  # type: ignore[method-assign]
        self.update = self._client.put  # type: ignore[method-assign]
        self.insert = self._client.put  # type: ignore[method-assign]
        smap = await self._client.shard_map()
        self._describe = {
            "bespokv": "source tree", "mode": mode, "datalet": spec.to_dict(), "nodes": nodes,
            "replicas": replicas, "shards": len(smap.shards),
            "placement": {str(s.id): list(s.replicas) for s in smap.shards.values()},
            "client": {"max_batch": self._client.max_batch, "max_inflight": self._client.max_inflight,
                       "read_from": self._client.read_from, "batching": self._client.batching,
                       "timeout": self._client.timeout, "retries": self._client.retries,
                       "retry_writes": self._client.retry_writes},
            "node_pids": self._cluster.all_pids(),
        }

    async def load_batch(self, keys: list[bytes], values: list[bytes]) -> None:
        await self._client.write_batch(list(zip(keys, values)))

    async def read(self, key: bytes) -> bytes | None:  # replaced in open()
        return await self._client.get(key)

    async def update(self, key: bytes, value: bytes) -> None:  # replaced in open()
        await self._client.put(key, value)

    async def scan(self, start: bytes, count: int) -> int:
        n = 0
        async with contextlib.aclosing(self._client.scan_chunks(start, limit=count)) as chunks:
            async for pairs in chunks:
                n += len(pairs)
        return n

    async def settle(self, mode: str) -> str:
        if mode == "none":
            return "nothing"
        t0 = time.monotonic()
        last = ""
        while time.monotonic() - t0 < _SETTLE_TIMEOUT:
            st = await self._client.cluster_status()
            behind = [f"{n.id}/{s.shard}" for n in st.nodes for s in n.shards
                      if not n.up or not s.ready or any(v != 0 for v in s.lag.values())]
            if not behind:
                return (f"waited {time.monotonic() - t0:.1f} s until every replica was ready with no "
                        "replication lag (no flush or compaction through the service API)")
            last = " ".join(behind)
            await asyncio.sleep(0.1)
        return f"replicas still behind after {_SETTLE_TIMEOUT:g} s: {last}"

    async def close(self) -> None:
        try:
            if self._client is not None:
                await self._client.close()
        finally:
            if self._cluster is not None:
                self._cluster.stop()

    def stats(self) -> RunnerStats:
        # Node counters are fetched over gRPC in settle/describe only: stats() is sync and
        # the loop belongs to the driver. The report gets the node pids and the client's
        # batching counters (operations per Multi RPC is the batching that happened).
        raw: dict[str, Any] = {}
        if self._cluster is not None:
            raw["node_pids"] = self._cluster.all_pids()
        if self._client is not None:
            batches: dict[str, dict[str, int]] = {}
            for (node, _, write), b in getattr(self._client, "_batchers", {}).items():
                c = batches.setdefault(f"{node}/{'writes' if write else 'reads'}",
                                       {"rpcs": 0, "ops": 0})
                c["rpcs"] += b.batches
                c["ops"] += b.items
            raw["client_batches"] = batches
        return RunnerStats(raw=raw)

    def describe(self) -> dict[str, Any]:
        return getattr(self, "_describe", {})


class BespokvMsScRunner(BespokvRunner):
    """Master-slave, strong: chain replication (writes head to tail, reads at the tail)."""

    name = "bespokv-ms-sc"
    mode = "ms-sc"


class BespokvMsEcRunner(BespokvRunner):
    """Master-slave, eventual: the master acknowledges, replicas apply asynchronously."""

    name = "bespokv-ms-ec"
    mode = "ms-ec"


class BespokvAaScRunner(BespokvRunner):
    """Active-active, strong: ABD majority quorums, any replica coordinates."""

    name = "bespokv-aa-sc"
    mode = "aa-sc"


class BespokvAaEcRunner(BespokvRunner):
    """Active-active, eventual: any replica accepts, last writer wins, anti-entropy."""

    name = "bespokv-aa-ec"
    mode = "aa-ec"
