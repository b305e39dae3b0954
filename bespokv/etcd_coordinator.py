"""The etcd-backed coordinator: shard map, epochs and node liveness live in etcd.

Layout under ``/bespokv/<cluster>/`` (values are JSON; frozen):

=====================  =================================================================
key                    value
=====================  =================================================================
``epoch``              ``{"epoch": E}``: the map epoch. Every change of the map puts
                       ``E + 1`` in the same transaction, guarded by ``value == E``, so
                       changes are totally ordered and an epoch names one map.
``nodes/<id>``         ``{"address": "127.0.0.1:7001"}``
``shards/<id>``        ``{"mode": "ms-sc", "replicas": ["n1", "n2", "n3"], "epoch": S}``,
                       ``S`` the map epoch of the transaction that last changed the shard
                       (its *shard epoch*: requests made under an older one are fenced);
                       ``"frozen": true`` is added while a live mode switch drains the
                       shard (modeswitch.py; absent means false), ``"merge": true``
                       while its replicas merge each other's values before a switch
                       from an active-active to a master-slave mode (modeswitch.py),
                       ``"move": [to, from]`` while a replica moves between nodes
                       (membership.py)
``alive/<id>``         ``{"pid": P}``, attached to the node's lease: present while the
                       node keeps its lease alive (keep-alive every ``lease_ttl / 3``)
``switch/<shard>``     ``{"pid": P, "to": "aa-sc"}``, attached to a mode-switch driver's
                       lease (``SWITCH_LEASE_TTL``): present while a live switch of the
                       shard runs; created only if absent, so one driver at a time. A
                       frozen shard without it was left by a driver that died, and its
                       replicas lift the freeze (modeswitch.py)
=====================  =================================================================

Bootstrap: the first coordinator to start writes the config's map with a transaction that
succeeds only while ``epoch`` does not exist; every later one (any node, any restart) reads
what is stored, so the map survives restarts with its failovers applied.

Everyone (nodes and clients) watches the prefix; on any event it re-reads the prefix and,
when the epoch grew, installs the new map and calls the listeners (in epoch order: a map
is installed only if its epoch is higher than the current one).

Client library: ``aetcd`` (asyncio, the maintained fork of python-etcd3; its generated
code works with protobuf 5-7 like the rest of this project; it speaks etcd's v3 gRPC API:
transactions, leases, watches). The older python-etcd3 and etcd3-py are unmaintained and
pin protobuf 3. aetcd talks to one member at a time; this module rotates over the
endpoints when a member fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from bespokv.config import ClusterConfig
from bespokv.coordinator import Coordinator
from bespokv.errors import InvalidArgumentError, UnavailableError
from bespokv.shardmap import NodeInfo, ShardInfo, ShardMap

__all__ = ["EtcdCoordinator", "parse_endpoints"]

log = logging.getLogger(__name__)

#: Seconds one etcd call may take before the coordinator tries the next member.
CALL_TIMEOUT = 2.0

#: Seconds a mode-switch driver's lease outlives its last keep-alive: a shard frozen by a
#: driver that died takes writes again this long after (plus one watch event). Longer than
#: a node's lease, since a driver is a command-line program on a possibly busy machine.
SWITCH_LEASE_TTL = 10


def parse_endpoints(endpoints: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"127.0.0.1:2379,127.0.0.1:2381"`` or a list of ``host:port`` -> ``[(host, port)]``."""
    items = endpoints.split(",") if isinstance(endpoints, str) else list(endpoints)
    out: list[tuple[str, int]] = []
    for item in items:
        item = item.strip()
        if item.startswith("http://"):
            item = item[len("http://") :]
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise InvalidArgumentError(f"etcd endpoint {item!r} is not host:port")
        out.append((host, int(port)))
    if not out:
        raise InvalidArgumentError("no etcd endpoints given")
    return out


class EtcdCoordinator(Coordinator):
    """The shard map in etcd. ``node_id`` given: also hold that node's liveness lease."""

    dynamic = True

    def __init__(
        self,
        config: ClusterConfig,
        endpoints: str | Sequence[str],
        *,
        node_id: str | None = None,
        lease_ttl: float = 2.0,
        deadline: float = 10.0,
    ) -> None:
        """``deadline``: seconds an etcd operation keeps trying (over every member) before
        it fails with UNAVAILABLE."""
        self.config = config
        self.endpoints = parse_endpoints(endpoints)
        self.node_id = node_id
        self.deadline = deadline
        self.lease_ttl = max(1, round(lease_ttl))  # etcd leases are whole seconds
        self.prefix = f"/bespokv/{config.name}/".encode()
        self._client: Any = None
        self._endpoint = 0
        self._map: ShardMap | None = None
        self._alive: set[str] = set()
        self._switching: set[int] = set()
        self._alive_listeners: list[Callable[[set[str]], None]] = []
        self._lease: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self._refresh = asyncio.Event()
        self._stopped = False
        #: monotonic time the lease was last refreshed (a node that cannot refresh it for
        #: ``lease_ttl`` must assume the cluster has moved on without it)
        self.lease_refreshed = 0.0
        #: times this node found its lease expired while it ran (the cluster took it for
        #: dead and failed it over), the monotonic time of the last one, and the longest
        #: time between two successful keep-alives (a lapse is one longer than the TTL)
        self.lease_lapses = 0
        self.last_lapse = 0.0
        self.longest_keepalive_gap = 0.0

    # -- connection ---------------------------------------------------------------------

    async def _connect(self) -> Any:
        import aetcd

        last: BaseException | None = None
        for _ in range(len(self.endpoints)):
            host, port = self.endpoints[self._endpoint]
            client = aetcd.Client(host=host, port=port, timeout=CALL_TIMEOUT,  # login: decision 0053
                                  username=self.config.etcd_user, password=self.config.etcd_password)
            try:
                await client.connect()
                await client.status()
                return client
            except Exception as exc:  # try the next member
                last = exc
                with contextlib.suppress(Exception):
                    await client.close()
                self._endpoint = (self._endpoint + 1) % len(self.endpoints)
        raise UnavailableError(f"no etcd member answers at {self.endpoints}: {last!r}")

    async def _call(self, fn: Callable[[Any], Any], what: str, *, deadline: float | None = None) -> Any:
        """``await fn(client)``, reconnecting to the next member on failure, until ``deadline``."""
        end = time.monotonic() + (self.deadline if deadline is None else deadline)
        while True:
            try:
                if self._client is None:
                    self._client = await self._connect()
                return await fn(self._client)
            except (Exception, asyncio.CancelledError) as exc:  # retried on another member
                if isinstance(exc, asyncio.CancelledError) and _cancelling():
                    raise  # this task is being cancelled; otherwise the call was (below)
                # A call cancelled without its task: another caller's failure closed the
                # shared client under it (the close below). Retried like any failure.
                if time.monotonic() > end or self._stopped:
                    raise UnavailableError(f"etcd {what} failed: {exc!r}") from exc
                log.info("etcd %s failed (%r); trying another member", what, exc)
                client, self._client = self._client, None
                if client is not None:
                    with contextlib.suppress(Exception):
                        await client.close()
                self._endpoint = (self._endpoint + 1) % len(self.endpoints)
                await asyncio.sleep(0.1)

    def _key(self, *parts: str) -> bytes:
        return self.prefix + "/".join(parts).encode()

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        await self._bootstrap()
        await self._reload()
        if self.node_id is not None:
            await self._grant_lease()
            self._tasks.append(asyncio.ensure_future(self._keepalive_loop()))
        self._tasks.append(asyncio.ensure_future(self._watch_loop()))
        self._tasks.append(asyncio.ensure_future(self._refresh_loop()))

    async def stop(self) -> None:
        self._stopped = True
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._lease is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._lease.revoke(), CALL_TIMEOUT)
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()
            self._client = None

    async def _bootstrap(self) -> None:
        smap = ShardMap.from_config(self.config)
        epoch_key = self._key("epoch")

        async def txn(c: Any) -> Any:
            puts = [c.transactions.put(epoch_key, json.dumps({"epoch": smap.epoch}).encode())]
            for n in smap.nodes.values():
                puts.append(c.transactions.put(self._key("nodes", n.id), json.dumps({"address": n.address}).encode()))
            for s in smap.shards.values():
                puts.append(c.transactions.put(self._key("shards", str(s.id)), _shard_value(s, smap.epoch)))
            return await c.transaction(compare=[c.transactions.create(epoch_key) == 0], success=puts, failure=[])

        ok, _ = await self._call(txn, "bootstrap")
        if ok:
            log.info("cluster %s: shard map epoch %d written to etcd", self.config.name, smap.epoch)

    # -- reading ------------------------------------------------------------------------

    async def _read(self) -> tuple[ShardMap, set[str], set[int]]:
        res = await self._call(lambda c: c.get_prefix(self.prefix), "read")
        epoch = 0
        nodes: dict[str, NodeInfo] = {}
        shards: dict[int, ShardInfo] = {}
        alive: set[str] = set()
        switching: set[int] = set()
        plen = len(self.prefix)
        for kv in res:
            name = kv.key[plen:].decode()
            value = json.loads(kv.value)
            if name == "epoch":
                epoch = int(value["epoch"])
            elif name.startswith("nodes/"):
                nid = name[len("nodes/") :]
                nodes[nid] = NodeInfo(nid, value["address"])
            elif name.startswith("shards/"):
                sid = int(name[len("shards/") :])
                move = value.get("move")
                shards[sid] = ShardInfo(
                    sid, value["mode"], tuple(value["replicas"]), int(value["epoch"]), bool(value.get("frozen", False)),
                    (str(move[0]), str(move[1])) if move else None, bool(value.get("merge", False)),
                )
            elif name.startswith("alive/"):
                alive.add(name[len("alive/") :])
            elif name.startswith("switch/"):
                switching.add(int(name[len("switch/") :]))
        if not shards or not epoch:
            raise UnavailableError(f"etcd holds no shard map under {self.prefix.decode()}")
        smap = ShardMap(shards, nodes, vnodes=self.config.vnodes, epoch=epoch, cluster=self.config.name)
        return smap, alive, switching

    async def _reload(self) -> None:
        smap, alive, switching = await self._read()
        if alive != self._alive or switching != self._switching:
            self._alive, self._switching = alive, switching
            for al in list(self._alive_listeners):
                try:
                    al(set(alive))
                except Exception:  # one listener's bug must not stop the rest
                    log.exception("liveness listener failed")
        if self._map is None or smap.epoch > self._map.epoch:
            self._map = smap
            for listener in list(self._listeners):
                try:
                    listener(smap)
                except Exception:  # one listener's bug must not stop the rest
                    log.exception("shard map listener failed")

    async def _watch_loop(self) -> None:
        """Watch the prefix; every event (or a broken watch) asks for a re-read."""
        while not self._stopped:
            try:
                watch = await self._call(lambda c: c.watch_prefix(self.prefix), "watch", deadline=3600)
                self._refresh.set()  # events between the read and the watch
                async for _event in watch:
                    self._refresh.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # reconnect and watch again
                log.info("etcd watch ended (%r); watching again", exc)
                self._client = None
            await asyncio.sleep(0.1)

    async def _refresh_loop(self) -> None:
        while True:
            await self._refresh.wait()
            self._refresh.clear()
            try:
                await self._reload()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # next event retries
                log.info("etcd re-read failed: %r", exc)
                await asyncio.sleep(0.2)
                self._refresh.set()

    def shard_map(self) -> ShardMap:
        if self._map is None:
            raise UnavailableError("the etcd coordinator has not started")
        return self._map

    def alive(self) -> set[str]:
        """Nodes whose liveness lease is held (as of the last event seen)."""
        return set(self._alive)

    def down(self) -> set[str]:
        return set(self.shard_map().nodes) - self._alive

    def switching(self) -> set[int]:
        return set(self._switching)

    @contextlib.asynccontextmanager
    async def switch_lease(
        self, shard: int, to: str, *, wait: float = 0.0, ttl: int = SWITCH_LEASE_TTL
    ) -> AsyncIterator[None]:
        """Hold ``switch/<shard>`` on a lease of ``ttl`` seconds, kept alive until the block
        ends (then revoked, which deletes the key). While another driver holds it, wait up
        to ``wait`` seconds for it to go (its switch ends, or its lease expires), then raise
        UnavailableError."""
        key = self._key("switch", str(shard))
        lease = await self._call(lambda c: c.lease(ttl), "lease grant")
        value = json.dumps({"pid": os.getpid(), "to": to}).encode()

        async def txn(c: Any) -> Any:
            return await c.transaction(
                compare=[c.transactions.create(key) == 0],
                success=[c.transactions.put(key, value, lease=lease)],
                failure=[c.transactions.get(key)],
            )

        async def keepalive() -> None:
            while True:
                await asyncio.sleep(ttl / 3)
                try:
                    await self._call(lambda c: c.refresh_lease(lease.id), "switch lease keep-alive", deadline=ttl / 3)
                except UnavailableError as exc:  # the next period retries; past ttl the nodes thaw
                    log.warning("mode switch of shard %s: lease keep-alive failed: %r", shard, exc)

        try:
            end = time.monotonic() + wait
            while True:
                ok, other = await self._call(txn, "switch lease")
                if ok or time.monotonic() > end:
                    break
                await asyncio.sleep(0.2)
            if not ok:
                held = json.loads(other[0][0][0]) if other and other[0] else {}
                raise UnavailableError(
                    f"shard {shard}: another mode switch is running (pid {held.get('pid')}, to {held.get('to')}); "
                    f"waited {wait:g} s; let it finish, or stop it: its freeze lifts within {ttl} s of its end"
                )
            task = asyncio.ensure_future(keepalive())
            try:
                await self._reload()  # our own key seen before the freeze it covers
                yield
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(lease.revoke(), CALL_TIMEOUT)

    def subscribe_alive(self, listener: Callable[[set[str]], None]) -> Callable[[], None]:
        self._alive_listeners.append(listener)
        return lambda: self._alive_listeners.remove(listener)

    def lease_stats(self) -> dict[str, float]:
        if self.node_id is None:
            return {}
        stats = {
            "lease_ttl_s": float(self.lease_ttl),
            "lease_lapses": float(self.lease_lapses),
            "lease_longest_gap_s": round(self.longest_keepalive_gap, 3),
        }
        if self.lease_lapses:
            stats["lease_last_lapse_ago_s"] = round(time.monotonic() - self.last_lapse, 1)
        return stats

    def can_serve(self) -> bool:
        if self.node_id is None:
            return True
        # The lease is certainly alive for ``ttl`` after the refresh was *sent*; half of it
        # leaves room for a refresh that took long. Past that, the cluster may have moved on.
        return time.monotonic() - self.lease_refreshed < self.lease_ttl / 2 + self.lease_ttl / 3

    # -- changes ------------------------------------------------------------------------

    async def change_shard(self, shard_id: int, change: Callable[[ShardInfo], ShardInfo | None]) -> ShardMap | None:
        """Apply ``change`` to a shard by compare-and-swap on the map epoch: read, compute,
        commit only if no other change came in between (else read again, up to 20 times).
        ``change`` returns the new shard, or None to leave it. Returns the new map (None if
        nothing changed)."""
        epoch_key = self._key("epoch")
        for _ in range(20):
            smap, _alive, _switching = await self._read()
            new = change(smap.shard(shard_id))
            if new is None or new == smap.shard(shard_id):
                return None
            e = smap.epoch

            async def txn(c: Any, new: ShardInfo = new, e: int = e) -> Any:
                return await c.transaction(
                    compare=[c.transactions.value(epoch_key) == json.dumps({"epoch": e}).encode()],
                    success=[
                        c.transactions.put(epoch_key, json.dumps({"epoch": e + 1}).encode()),
                        c.transactions.put(self._key("shards", str(shard_id)), _shard_value(new, e + 1)),
                    ],
                    failure=[],
                )

            ok, _ = await self._call(txn, "shard change")
            if ok:
                await self._reload()
                return self.shard_map()
        raise UnavailableError(f"shard {shard_id}: too many concurrent map changes")

    async def change_nodes(self, add: dict[str, str] | None = None, remove: str | None = None) -> ShardMap:
        """Add nodes (``{id: address}``) to the map, or remove one that no shard names, by
        compare-and-swap on the map epoch. Returns the new map."""
        epoch_key = self._key("epoch")
        for _ in range(20):
            smap, _alive, _switching = await self._read()
            if remove is not None and any(remove in s.replicas for s in smap.shards.values()):
                raise InvalidArgumentError(f"node {remove} still replicates shards; move them first")
            e = smap.epoch

            async def txn(c: Any, e: int = e) -> Any:
                ops = [c.transactions.put(epoch_key, json.dumps({"epoch": e + 1}).encode())]
                for nid, address in (add or {}).items():
                    ops.append(c.transactions.put(self._key("nodes", nid), json.dumps({"address": address}).encode()))
                if remove is not None:
                    ops.append(c.transactions.delete(self._key("nodes", remove)))
                return await c.transaction(
                    compare=[c.transactions.value(epoch_key) == json.dumps({"epoch": e}).encode()],
                    success=ops, failure=[],
                )

            ok, _ = await self._call(txn, "node change")
            if ok:
                await self._reload()
                return self.shard_map()
        raise UnavailableError("too many concurrent map changes")

    # -- the node's lease ----------------------------------------------------------------

    async def _grant_lease(self) -> None:
        assert self.node_id is not None
        lease = await self._call(lambda c: c.lease(self.lease_ttl), "lease grant")
        value = json.dumps({"pid": os.getpid()}).encode()
        sent = time.monotonic()
        await self._call(lambda c: c.put(self._key("alive", self.node_id), value, lease=lease), "alive put")
        self._lease = lease
        self.lease_refreshed = sent

    async def _keepalive_loop(self) -> None:
        period = self.lease_ttl / 3
        while True:
            await asyncio.sleep(period)
            try:
                sent = time.monotonic()
                reply = await self._call(lambda c: c.refresh_lease(self._lease.id), "lease keep-alive", deadline=period)
                if reply is None or reply.TTL <= 0:  # expired meanwhile: the cluster saw us die; take a new one
                    self.lease_lapses += 1
                    self.last_lapse = time.monotonic()
                    log.warning(
                        "node %s: its lease expired while it ran (no keep-alive for %.2f s, lease %d s): "
                        "the cluster took it for dead", self.node_id, sent - self.lease_refreshed, self.lease_ttl,
                    )
                    await self._grant_lease()
                else:
                    self.longest_keepalive_gap = max(self.longest_keepalive_gap, sent - self.lease_refreshed)
                    self.lease_refreshed = sent
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # next period retries
                log.warning("node %s: lease keep-alive failed: %r", self.node_id, exc)


def _shard_value(s: ShardInfo, epoch: int) -> bytes:
    value: dict[str, Any] = {"mode": s.mode, "replicas": list(s.replicas), "epoch": epoch}
    if s.frozen:  # only while a live mode switch drains the shard (modeswitch.py)
        value["frozen"] = True
    if s.move:  # only while a replica moves to another node (membership.py)
        value["move"] = list(s.move)
    if s.merge:  # only while the replicas merge before an aa -> ms switch (modeswitch.py)
        value["merge"] = True
    return json.dumps(value).encode()


def _cancelling() -> bool:
    """Whether the current task has been asked to cancel (not just one of its awaits)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
