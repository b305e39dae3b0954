"""Start local bespokv clusters: for tests, benchmarks and demos.

Three helpers, all on 127.0.0.1 with free ports:

* :class:`LocalCluster` - every node its own process (``python -m bespokv node``), as in
  production; kill -9 and restart nodes by process id. The benchmark runner uses this.
* :class:`InProcessCluster` - every node a :class:`~bespokv.server.Node` on the caller's
  event loop (real gRPC over loopback, no processes): fast, for controlet tests.
* :class:`ThreadedCluster` - an InProcessCluster on a private loop thread with a sync API.

::

    from bespokv.testing import LocalCluster
    with LocalCluster(nodes=3, replicas=3, mode="ms-sc", datalet="memory") as cluster:
        with cluster.client() as c:        # a bespokv.Client
            c.put(b"k", b"v")

:class:`RedisServer` starts a private ``redis-server`` (Debian's package) for the Redis
datalet; :func:`redis_available` says whether one can be started.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bespokv.client import AsyncClient, Client
from bespokv.config import ClusterConfig, DataletSpec, Limits, NodeConfig, ShardOverride, TlsConfig, Tuning
from bespokv.datalets import DataletFactory

__all__ = [
    "wait_until",
    "free_port",
    "make_config",
    "LocalCluster",
    "InProcessCluster",
    "ThreadedCluster",
    "RedisServer",
    "redis_available",
]

REPO_ROOT = str(Path(__file__).resolve().parent.parent)


def wait_until(cond: Callable[[], object], timeout: float, what: str, *, interval: float = 0.05) -> object:
    """Poll ``cond()`` until it returns something true and return that; raise
    ``TimeoutError`` naming ``what`` after ``timeout`` seconds. Exceptions from ``cond``
    propagate. Tests use this instead of fixed sleeps."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"after {timeout}s still waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    """A TCP port on 127.0.0.1, free when checked and outside the ephemeral range (see
    cloudtier.testing.ports; imported here, so importing bespokv loads no cloudtier)."""
    from cloudtier.testing.ports import free_port as pick

    return pick()


def make_config(
    nodes: int = 3,
    *,
    replicas: int | None = None,
    shards: int | None = None,
    mode: str = "ms-sc",
    datalet: str | DataletSpec = "memory",
    base_dir: str | None = None,
    token: str | None = None,
    tuning: Tuning | None = None,
    limits: Limits | None = None,
    shard_overrides: Sequence[ShardOverride] = (),
    node_datalets: dict[str, DataletSpec] | None = None,
    ports: Sequence[int] | None = None,
    **extra: Any,
) -> ClusterConfig:
    """A loopback cluster config with ``nodes`` nodes named n1..nN on free ports."""
    ports = list(ports) if ports is not None else [free_port() for _ in range(nodes)]
    spec = DataletSpec(datalet) if isinstance(datalet, str) else datalet
    node_datalets = node_datalets or {}
    ncfg = tuple(
        NodeConfig(f"n{i + 1}", f"127.0.0.1:{ports[i]}", node_datalets.get(f"n{i + 1}")) for i in range(nodes)
    )
    return ClusterConfig(
        nodes=ncfg,
        mode=mode,
        shards=shards if shards is not None else max(1, nodes),
        replicas=replicas if replicas is not None else min(3, nodes),
        datalet=spec,
        token=token,
        tuning=tuning or Tuning(),
        limits=limits or Limits(),
        shard_overrides=tuple(shard_overrides),
        base_dir=base_dir or tempfile.gettempdir(),
        **extra,
    )


# -- Redis ------------------------------------------------------------------------------------


def redis_available() -> bool:
    """True when a ``redis-server`` binary is on PATH."""
    return shutil.which("redis-server") is not None


class RedisServer:
    """A private redis-server on a free loopback port, with its files in a temp dir."""

    def __init__(self, dir: str | None = None, port: int | None = None, *, detach: bool = False) -> None:
        self.detach = detach
        self.dir = dir or tempfile.mkdtemp(prefix="bespokv-redis-")
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        os.makedirs(self.dir, exist_ok=True)
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir, "--save", "",
             "--appendonly", "no", "--protected-mode", "yes", "--daemonize", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=self.detach,
        )
        import redis

        deadline = time.monotonic() + timeout
        while True:
            try:
                redis.Redis(port=self.port, socket_connect_timeout=0.2).ping()
                return self
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- multi-process ----------------------------------------------------------------------------


class LocalCluster:
    """A cluster of node processes on loopback. Stops everything it started on exit.

    ``datalet="redis"`` starts one private redis-server per node. ``etcd=N`` starts an
    N-member etcd (``<dir>/etcd``) first and has the nodes coordinate through it (leases,
    failover); 0 keeps the static shard map. A cluster with a token (client or peer) gets
    an etcd that requires a login too (decision 0053): the user ``root`` with a generated
    password (unless the config names one), written into the config the nodes and the CLI
    read. Node logs go to ``<dir>/logs/<node>.log``; the config is ``<dir>/cluster.toml``.

    ``cuttable=True`` puts a ``cloudtier.proxy.DelayProxy`` on every path *into* a node
    (its advertised address forwards to the port it listens on) and on its paths to each
    etcd member (its own config, ``<dir>/cluster-<node>.toml``, names those proxies), so
    :meth:`cut` partitions a node: nobody reaches it and it reaches no etcd member (its
    lease expires, the cluster fails over). Its own calls to the other nodes are not cut
    (they go through the others' proxies): they are what fencing must refuse.
    :meth:`direct_address` is its real port, for a client on its side of the cut.

    ``resp=True`` (or :meth:`serve_resp` before :meth:`start`) has every node serve RESP
    too (``bespokv node --redis-port``), on the client and cluster ports in
    :attr:`resp_ports`.
    """

    def __init__(
        self,
        nodes: int = 3,
        *,
        replicas: int | None = None,
        shards: int | None = None,
        mode: str = "ms-sc",
        datalet: str | DataletSpec = "memory",
        dir: str | None = None,
        token: str | None = None,
        peer_token: str | None = None,
        tuning: Tuning | None = None,
        config: ClusterConfig | None = None,
        env: dict[str, str] | None = None,
        python: str = sys.executable,
        ports: Sequence[int] | None = None,
        detach: bool = False,
        etcd: int = 0,
        tls: TlsConfig | None = None,
        cuttable: bool = False,
        resp: bool = False,
    ) -> None:
        self._own_dir = dir is None
        self.dir = dir or tempfile.mkdtemp(prefix="bespokv-cluster-")
        os.makedirs(os.path.join(self.dir, "logs"), exist_ok=True)
        self.redis: dict[str, RedisServer] = {}
        kind = datalet.kind if isinstance(datalet, DataletSpec) else datalet
        if config is None:
            node_datalets: dict[str, DataletSpec] = {}
            if kind == "redis":
                for i in range(nodes):
                    nid = f"n{i + 1}"
                    self.redis[nid] = RedisServer(os.path.join(self.dir, "redis", nid), detach=detach)
                    node_datalets[nid] = DataletSpec("redis", {"url": self.redis[nid].url})
            config = make_config(
                nodes, replicas=replicas, shards=shards, mode=mode, datalet=datalet, base_dir=self.dir,
                token=token, peer_token=peer_token, tuning=tuning, node_datalets=node_datalets, ports=ports,
            )
        self.etcd: Any = None
        if etcd:
            from bespokv.etcdserver import EtcdCluster

            self.etcd = EtcdCluster(Path(self.dir) / "etcd", members=etcd, fast=True)
            self.etcd.detach = detach
            config = config.replace(etcd=tuple(f"{h}:{p}" for h, p in self.etcd.endpoints))
            if config.node_token and config.etcd_password is None:
                config = config.replace(etcd_user="root", etcd_password=secrets.token_urlsafe(32))
        if tls is not None:
            config = config.replace(tls=tls)
        #: per node: (listen port, target) of each proxy on its paths (cuttable clusters)
        self._links: dict[str, list[tuple[int, str]]] = {}
        self.proxies: dict[str, list[Any]] = {}
        node_etcd: dict[str, tuple[str, ...]] = {}
        if cuttable:
            nodes_cfg = []
            for n in config.nodes:
                listen = f"127.0.0.1:{free_port()}"
                nodes_cfg.append(dataclasses.replace(n, listen=listen))
                links = [(int(n.address.rsplit(":", 1)[1]), listen)]
                for ep in config.etcd:
                    links.append((free_port(), ep))
                self._links[n.id] = links
                node_etcd[n.id] = tuple(f"127.0.0.1:{port}" for port, _ in links[1:])
            config = config.replace(nodes=tuple(nodes_cfg))
        self.config = config.replace(base_dir=self.dir)
        self.config_path = os.path.join(self.dir, "cluster.toml")
        self.config.write(self.config_path)
        self._node_config_paths: dict[str, str] = {}
        for nid, eps in node_etcd.items():
            path = self._node_config_paths[nid] = os.path.join(self.dir, f"cluster-{nid}.toml")
            self.config.replace(etcd=eps).write(path)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        #: per node: its RESP client and cluster ports (``resp=True``; bespokv/resp)
        self.resp_ports: dict[str, tuple[int, int]] = {}
        if resp:
            self.serve_resp()
        self.detach = detach
        self.python = python
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = REPO_ROOT + os.pathsep + self.env.get("PYTHONPATH", "")
        self.env.update(env or {})

    def serve_resp(self) -> None:
        """Give every node RESP ports (free ones), used from its next start on."""
        self.resp_ports = {n.id: (free_port(), free_port()) for n in self.config.nodes}

    @property
    def node_ids(self) -> list[str]:
        return [n.id for n in self.config.nodes]

    @property
    def addresses(self) -> list[str]:
        return [n.address for n in self.config.nodes]

    def address(self, node_id: str) -> str:
        return self.config.node(node_id).address

    def start_etcd(self) -> None:
        """Start the cluster's etcd (again, after a stop: on its data), with its login on
        when the config has one."""
        self.etcd.start()
        if self.config.etcd_password is not None:
            self.etcd.enable_auth(self.config.etcd_password)

    def start(self, *, wait: bool = True, timeout: float = 60.0) -> LocalCluster:
        if self.etcd is not None:
            self.start_etcd()
        if self._links and not self.proxies:
            from cloudtier.proxy import DelayProxy

            for nid, links in self._links.items():
                self.proxies[nid] = [DelayProxy(target, port=port).start() for port, target in links]
        for r in self.redis.values():
            r.start()
        for nid in self.node_ids:
            self.start_node(nid)
        if wait:
            self.wait_ready(timeout)
        return self

    def start_node(self, node_id: str) -> subprocess.Popen[bytes]:
        p = self.procs.get(node_id)
        if p is not None and p.poll() is None:
            raise RuntimeError(f"node {node_id} is already running (pid {p.pid})")
        log = open(os.path.join(self.dir, "logs", f"{node_id}.log"), "ab")
        try:
            resp = self.resp_ports.get(node_id)
            proc = subprocess.Popen(
                [self.python, "-m", "bespokv", "node", "--config",
                 self._node_config_paths.get(node_id, self.config_path), "--node", node_id]
                + (["--redis-port", str(resp[0]), "--redis-cluster-port", str(resp[1])] if resp else []),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.dir,
                start_new_session=self.detach,
            )
        finally:
            log.close()
        self.procs[node_id] = proc
        return proc

    def all_pids(self) -> list[int]:
        """Process ids of running nodes, private redis-servers and etcd members."""
        pids = [p.pid for p in self.procs.values() if p.poll() is None]
        pids += [r.proc.pid for r in self.redis.values() if r.proc is not None and r.proc.poll() is None]
        if self.etcd is not None:
            pids += self.etcd.pids()
        return pids

    def pid(self, node_id: str) -> int:
        return self.procs[node_id].pid

    def kill(self, node_id: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (default SIGKILL) to the node's process and reap it."""
        p = self.procs[node_id]
        if p.poll() is None:
            os.kill(p.pid, sig)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(5)

    @contextlib.contextmanager
    def driver(self) -> Iterator[tuple[asyncio.AbstractEventLoop, Any, Any]]:
        """``(loop, coordinator, peers)``: a private event loop with a started
        ``EtcdCoordinator`` (holding no lease) and a ``PeerPool``, for a test or a program
        driving map changes (mode switches, node moves) with ``loop.run_until_complete``."""
        from bespokv.etcd_coordinator import EtcdCoordinator
        from bespokv.peers import PeerPool

        loop = asyncio.new_event_loop()
        coord = EtcdCoordinator(self.config, self.config.etcd)
        try:
            loop.run_until_complete(coord.start())
            peers = PeerPool(coord.shard_map(), token=self.config.node_token, tls=self.config.tls,
                             limits=self.config.limits, tuning=self.config.tuning)
            try:
                yield loop, coord, peers
            finally:
                loop.run_until_complete(peers.close())
        finally:
            loop.run_until_complete(coord.stop())
            loop.close()

    def add_node_config(self, node_id: str) -> str:
        """Append a node on a free port to the config file (for ``membership.add_node``;
        the running nodes do not read it again); returns its address. Start it with
        :meth:`start_node`."""
        if self._links:
            raise RuntimeError("a cuttable cluster cannot grow")
        address = f"127.0.0.1:{free_port()}"
        self.config = self.config.replace(nodes=(*self.config.nodes, NodeConfig(node_id, address)))
        self.config.write(self.config_path)
        return address

    def cut(self, node_id: str) -> None:
        """Partition the node (a cuttable cluster): no byte reaches it, and none of its
        own reaches etcd, until :meth:`heal`."""
        for p in self._proxies_of(node_id):
            p.cut()

    def heal(self, node_id: str) -> None:
        for p in self._proxies_of(node_id):
            p.heal()

    def direct_address(self, node_id: str) -> str:
        """Where the node really listens (past its cuttable proxy)."""
        n = self.config.node(node_id)
        return n.listen or n.address

    def _proxies_of(self, node_id: str) -> list[Any]:
        if not self._links:
            raise RuntimeError("not a cuttable cluster (LocalCluster(..., cuttable=True))")
        return self.proxies[node_id]

    def pause(self, node_id: str) -> None:
        """SIGSTOP the node: it holds its sockets but answers nothing (a stalled process)."""
        p = self.procs[node_id]
        if p.poll() is None:
            os.kill(p.pid, signal.SIGSTOP)

    def resume(self, node_id: str) -> None:
        """SIGCONT a paused node."""
        p = self.procs[node_id]
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)

    def stop_node(self, node_id: str) -> int | None:
        """SIGTERM the node and wait for a clean exit; returns its exit code."""
        self.kill(node_id, signal.SIGTERM)
        return self.procs[node_id].returncode

    def restart(self, node_id: str) -> None:
        p = self.procs.get(node_id)
        if p is not None and p.poll() is None:
            self.stop_node(node_id)
        self.start_node(node_id)

    def wait_ready(self, timeout: float = 60.0, nodes: Sequence[str] | None = None) -> None:
        """Wait until the given (default: all) nodes answer and all their shards are ready."""
        want = set(nodes or self.node_ids)
        deadline = time.monotonic() + timeout
        last = ""
        client: Client | None = None
        try:
            while True:
                for nid, p in self.procs.items():
                    if nid in want and p.poll() is not None:
                        raise RuntimeError(f"node {nid} exited with {p.returncode}; see {self.log_path(nid)}")
                try:
                    if client is None:
                        client = self.client(retries=0, timeout=2.0)
                    st = client.cluster_status()
                    bad = [
                        f"{n.id}:{'down' if not n.up else ','.join(str(s.shard) for s in n.shards if not s.ready)}"
                        for n in st.nodes
                        if n.id in want and (not n.up or not all(s.ready for s in n.shards))
                    ]
                    if not bad:
                        return
                    last = "not ready: " + " ".join(bad)
                except Exception as exc:  # not up yet
                    last = str(exc)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"cluster not ready after {timeout}s: {last}")
                time.sleep(0.1)
        finally:
            if client is not None:
                client.close()

    def wait_reported_down(self, node_id: str, timeout: float = 30.0) -> None:
        """Wait until the other nodes report ``node_id`` unreachable (after a kill or a
        pause): fault tests hold a fault until the cluster has noticed it."""
        others = [n.address for n in self.config.nodes if n.id != node_id]
        with Client(others, retries=0, timeout=2.0, token=self.config.token, tls=self.config.tls) as c:

            def down() -> bool:
                try:
                    st = c.cluster_status()
                except Exception:  # the seed itself may be restarting
                    return False
                return any(n.id == node_id and not n.up for n in st.nodes)

            wait_until(down, timeout, f"{node_id} to be reported down")

    def log_path(self, node_id: str) -> str:
        return os.path.join(self.dir, "logs", f"{node_id}.log")

    def client(self, **kwargs: Any) -> Client:
        """A sync client (seeds: every node). Close it when done."""
        kwargs.setdefault("token", self.config.token)
        kwargs.setdefault("tls", self.config.tls)
        return Client(self.addresses, **kwargs)

    def async_client(self, **kwargs: Any) -> AsyncClient:
        kwargs.setdefault("token", self.config.token)
        kwargs.setdefault("tls", self.config.tls)
        return AsyncClient(self.addresses, **kwargs)

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGCONT)  # a paused node must run to stop
                    os.kill(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self.procs.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
                p.wait(5)
        for r in self.redis.values():
            r.stop()
        if self.etcd is not None:
            self.etcd.stop()
        for ps in self.proxies.values():
            for p in ps:
                p.stop()
        self.proxies.clear()

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


# -- in-process -------------------------------------------------------------------------------


class InProcessCluster:
    """Nodes as objects on the current event loop (``async with``)."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        datalet_factory: DataletFactory | None = None,
    ) -> None:
        self.config = config
        self.datalet_factory = datalet_factory
        from bespokv.server import Node

        self._node_cls = Node
        self.nodes: dict[str, Any] = {}

    async def start(self, *, ready_timeout: float = 30.0) -> InProcessCluster:
        for n in self.config.nodes:
            await self.start_node(n.id)
        await self.wait_ready(ready_timeout)
        return self

    async def start_node(self, node_id: str) -> Any:
        node = self._node_cls(self.config, node_id, datalet_factory=self.datalet_factory)
        await node.start()
        self.nodes[node_id] = node
        return node

    async def stop_node(self, node_id: str, grace: float = 0.0) -> None:
        node = self.nodes.pop(node_id, None)
        if node is not None:
            await node.stop(grace)

    async def wait_ready(self, timeout: float = 30.0) -> None:
        await asyncio.gather(*(n.wait_ready(timeout) for n in self.nodes.values()))

    def client(self, **kwargs: Any) -> AsyncClient:
        kwargs.setdefault("token", self.config.token)
        kwargs.setdefault("tls", self.config.tls)
        return AsyncClient([n.address for n in self.config.nodes], **kwargs)

    async def stop(self) -> None:
        for nid in list(self.nodes):
            await self.stop_node(nid)

    async def __aenter__(self) -> InProcessCluster:
        try:
            return await self.start()
        except BaseException:
            await self.stop()
            raise

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class ThreadedCluster:
    """An :class:`InProcessCluster` on a private event-loop thread, driven synchronously."""

    def __init__(self, config: ClusterConfig, *, datalet_factory: DataletFactory | None = None) -> None:
        self.config = config
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="bespokv-cluster", daemon=True)
        self._thread.start()
        self.cluster = InProcessCluster(config, datalet_factory=datalet_factory)

    def call(self, coro: Any, timeout: float | None = 120.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def run(self, fn: Callable[[], Any]) -> Any:
        """Run a plain function on the cluster's loop thread (to inspect nodes safely)."""

        async def wrap() -> Any:
            return fn()

        return self.call(wrap())

    def start(self) -> ThreadedCluster:
        self.call(self.cluster.start())
        return self

    def client(self, **kwargs: Any) -> Client:
        kwargs.setdefault("token", self.config.token)
        kwargs.setdefault("tls", self.config.tls)
        return Client([n.address for n in self.config.nodes], **kwargs)

    @property
    def nodes(self) -> dict[str, Any]:
        return self.cluster.nodes

    def stop(self) -> None:
        try:
            self.call(self.cluster.stop(), timeout=60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            if not self.loop.is_running():
                self.loop.close()

    def __enter__(self) -> ThreadedCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
