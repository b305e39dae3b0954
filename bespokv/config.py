"""The cluster config file (TOML) and its in-memory form.

A cluster config names the nodes, the default controlet and datalet, the number of shards
and replicas, and optional per-shard overrides. Every node of a cluster reads the same
file; `bespokv node --config cluster.toml --node n1` picks its own entry. The format is
documented in docs/bespokv.md ("Config file"); the example there is tested.

Relative paths (datalet ``path``, TLS files, ``token_file``, ``peer_token_file``,
``etcd_password_file``) are relative to the file's directory. String datalet options may
use ``{node}``, ``{shard}`` and ``{dir}`` (the config file's directory); they are filled in
per shard replica. The secrets (tokens, etcd's password) stay out of the config's repr.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from bespokv.errors import InvalidArgumentError

__all__ = [
    "MODES",
    "MODE_ALIASES",
    "DataletSpec",
    "NodeConfig",
    "ShardOverride",
    "TlsConfig",
    "Limits",
    "Tuning",
    "ClusterConfig",
    "load",
    "normalize_mode",
    "check_backoff",
]

#: The four controlets: topology x consistency.
MODES = ("ms-sc", "ms-ec", "aa-sc", "aa-ec")
MODE_ALIASES = {
    "chain": "ms-sc",
    "master-slave/strong": "ms-sc",
    "primary-backup": "ms-ec",
    "master-slave/eventual": "ms-ec",
    "quorum": "aa-sc",
    "abd": "aa-sc",
    "active-active/strong": "aa-sc",
    "lww": "aa-ec",
    "active-active/eventual": "aa-ec",
}


def normalize_mode(mode: str) -> str:
    """Return the canonical mode name (``ms-sc``...), accepting the documented aliases."""
    m = MODE_ALIASES.get(mode.lower(), mode.lower())
    if m not in MODES:
        raise InvalidArgumentError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    return m


@dataclass(frozen=True)
class DataletSpec:
    """Which datalet to build and its options (``kind`` is a built-in name or ``module:Class``)."""

    kind: str = "memory"
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | str | None) -> DataletSpec:
        if d is None:
            return cls()
        if isinstance(d, str):
            return cls(kind=d)
        d = dict(d)
        kind = d.pop("kind", "memory")
        return cls(kind=str(kind), options=d)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.options}


@dataclass(frozen=True)
class NodeConfig:
    """One node. ``address`` is where the others and the clients reach it (in the shard
    map); ``listen``, when given, is what the node binds instead (a proxy, a NAT or a
    fault-injecting link in between forwards ``address`` to it)."""

    id: str
    address: str
    datalet: DataletSpec | None = None
    listen: str | None = None
    #: The node's own TLS certificate and key (PEM), instead of ``[cluster.tls]``'s: it
    #: serves with them and presents them on its calls to other nodes. With
    #: ``node_identities`` the certificate's common name must be the node's id.
    cert: str | None = None
    key: str | None = None


@dataclass(frozen=True)
class ShardOverride:
    id: int
    mode: str | None = None
    replicas: tuple[str, ...] | None = None


@dataclass(frozen=True)
class TlsConfig:
    """Server certificate and key; ``ca`` verifies peers (and clients, with ``mutual``)."""

    cert: str
    key: str
    ca: str | None = None
    mutual: bool = False
    server_name: str | None = None  # name to check in the server's certificate
    #: Tell nodes apart by their certificates: every node has its own (``[[nodes]] cert``,
    #: ``key``) whose common name is its id, and the replication service (``Peer``)
    #: accepts only callers whose certificate names a node of the map, a replication
    #: stream only from the node its certificate names. Needs ``mutual`` and ``ca``.
    node_identities: bool = False

    def __post_init__(self) -> None:
        if self.node_identities and not (self.mutual and self.ca):
            raise InvalidArgumentError("[cluster.tls] node_identities needs mutual = true and a ca")

    def read(self) -> tuple[bytes, bytes, bytes | None]:
        ca = Path(self.ca).read_bytes() if self.ca else None
        return Path(self.cert).read_bytes(), Path(self.key).read_bytes(), ca


@dataclass(frozen=True)
class Limits:
    """Bounds every request is checked against (violations are INVALID_ARGUMENT)."""

    max_key_bytes: int = 4096
    max_value_bytes: int = 1 << 20  # 1 MiB: a KV store, not a blob store
    max_batch_ops: int = 10_000
    max_request_bytes: int = 64 << 20  # gRPC message cap; above every valid batch

    def __post_init__(self) -> None:
        if self.max_key_bytes < 1 or self.max_value_bytes < 0 or self.max_batch_ops < 1:
            raise InvalidArgumentError("limits must be positive")


def check_backoff(initial_ms: float, max_ms: float) -> None:
    """Reconnect backoff bounds (Tuning, the client): positive, initial <= max."""
    if not 0 < initial_ms <= max_ms:
        raise InvalidArgumentError(
            f"reconnect backoff must be 0 < reconnect_backoff_ms ({initial_ms:g}) <= "
            f"max_reconnect_backoff_ms ({max_ms:g})"
        )


@dataclass(frozen=True)
class Tuning:
    """Timing and sizing knobs of the controlets. Each default says why it is what it is."""

    #: Seconds a replicated write or quorum operation may take before DEADLINE_EXCEEDED.
    request_timeout: float = 5.0
    #: Bytes of log entries per replication message: big enough to amortize a ~0.2 ms
    #: stream message, small enough to keep the pipeline moving.
    repl_batch_bytes: int = 1 << 20
    #: Log entries kept after every replica acknowledged them, so a restarted replica
    #: catches up incrementally instead of by a full copy.
    log_retain_entries: int = 50_000
    #: Unacknowledged writes a chain head / master holds before refusing new ones
    #: (RESOURCE_EXHAUSTED): bounds memory when a replica is down.
    max_pending: int = 100_000
    #: ms-ec: entries a connected replica may lag before the master makes writers wait.
    max_lag_entries: int = 10_000
    #: Active-active: seconds between anti-entropy rounds with each peer.
    anti_entropy_interval: float = 2.0
    #: Active-active: rounds in a row a digest bucket may differ from a peer's while its
    #: digests keep changing (writes in flight) before anti-entropy exchanges it anyway.
    #: A bucket whose difference holds still for one round is exchanged at once. 8: a
    #: write-hot bucket's repair waits at most 8 rounds (16 s by default), and a steady
    #: write load pays 1/8 of what exchanging every differing bucket every round cost (1:
    #: that old behaviour, which cost aa-sc half its throughput; docs/benchmarks.md).
    anti_entropy_force_rounds: int = 8
    #: Active-active: concurrent local stores of a shard share one datalet batch (one
    #: fsync on a syncing datalet): group commit. False: one batch per store, as before.
    group_commit: bool = True
    #: aa-sc: seconds a read phase (a read, a write's version query) waits for the
    #: majority it asked before it asks the other replicas too. It asks a majority only,
    #: which saves the others a read each; a failed call is replaced at once. 0.1: on a
    #: 2-core box at load 12, 0.05 still sent spares for 3-10% of client operations and
    #: 0.2 for none; far below a failover. 0: ask every replica at once (as before).
    quorum_spare_after: float = 0.1
    #: aa-ec: fraction of reads that also compare the key with the other replicas and
    #: repair whichever side is behind (in the background; anti-entropy does the rest).
    read_repair_chance: float = 0.1
    #: aa-ec: seconds a tombstone lives before it is collected; a replica down for longer
    #: must be wiped before it rejoins, or it could resurrect deleted keys.
    tombstone_grace: float = 3600.0
    #: Seconds a restarting head/master waits for its replicas' positions before it
    #: proceeds with those that answered.
    recovery_timeout: float = 10.0
    #: Keys per chunk when a full copy streams a datalet's contents.
    export_chunk: int = 512
    #: Run each shard replica's datalet calls on its own thread (datalets/worker.py), so a
    #: slow call stalls only its shard, not the node's event loop (datalets that declare
    #: ``blocking = False``, the in-memory one, always run on the loop). False runs every
    #: datalet on the loop (the behaviour before; for measuring what the thread costs).
    datalet_thread: bool = True
    #: Seconds a node's liveness lease in etcd lives without a keep-alive (whole seconds;
    #: etcd's own minimum applies, 1 s with the election settings ``EtcdCluster`` uses).
    #: A killed node is noticed this long after its last keep-alive.
    lease_ttl: float = 1.0
    #: Milliseconds a gRPC channel to a node waits before its first reconnect after the
    #: connection broke (gRPC's default: 1000). A restarted node is reachable again
    #: about this long after it listens, not a backed-off second later.
    reconnect_backoff_ms: float = 50.0
    #: Milliseconds the reconnect backoff grows to (gRPC's default: 120000). A node down
    #: for long is retried once a second per channel (one cheap connect attempt), so the
    #: first call after it returns waits at most about a second, not two minutes.
    max_reconnect_backoff_ms: float = 1000.0
    #: Calls a node's gRPC server holds before its event loop takes them up. gRPC cancels
    #: the calls beyond it (CANCELLED, before any handler ran). gRPC's default, 1000, is one
    #: unbatched ``get_many`` of 1,000 keys: such a read-back after a failover failed 1 run
    #: in 6 here. 16384: 64 clients at their ``MAX_CALLS_PER_NODE`` (256) each.
    max_pending_calls: int = 16384
    #: Seconds a shard may run short of a replica whose node is down (its lease gone)
    #: before a live node that holds none of the shard copies it and takes the dead
    #: one's place (repair.py). 300: a node restarted or cut off briefly comes back by
    #: itself well within it (rejoin.py), so no full copy starts for that; a dead disk or
    #: machine is replaced within minutes, not left one failure from loss. 0: never (the
    #: operator runs `bespokv node remove` / `node add`).
    replace_after: float = 300.0
    #: Whether the RESP front end (bespokv/resp) runs FLUSHDB, which deletes every key
    #: of the cluster: off, so a stray command from a Redis tool cannot wipe it.
    redis_flushdb: bool = False

    def __post_init__(self) -> None:
        if self.max_pending_calls < 1:
            raise InvalidArgumentError("max_pending_calls must be at least 1")
        if self.request_timeout <= 0 or self.anti_entropy_interval <= 0:
            raise InvalidArgumentError("timeouts and intervals must be positive")
        check_backoff(self.reconnect_backoff_ms, self.max_reconnect_backoff_ms)
        if self.replace_after < 0:
            raise InvalidArgumentError("replace_after must not be negative (0: never replace)")
        if self.quorum_spare_after < 0:
            raise InvalidArgumentError("quorum_spare_after must not be negative")
        if self.anti_entropy_force_rounds < 1:
            raise InvalidArgumentError("anti_entropy_force_rounds must be at least 1")
        if not 0.0 <= self.read_repair_chance <= 1.0:
            raise InvalidArgumentError("read_repair_chance must be between 0 and 1")


@dataclass(frozen=True)
class ClusterConfig:
    """One cluster: nodes, shard layout, default controlet and datalet, security, limits."""

    nodes: tuple[NodeConfig, ...]
    name: str = "bespokv"
    mode: str = "ms-sc"
    shards: int = 1
    replicas: int = 3
    vnodes: int = 64
    datalet: DataletSpec = field(default_factory=DataletSpec)
    shard_overrides: tuple[ShardOverride, ...] = ()
    #: the client token: it opens the client services (KV, Admin; decision 0052).
    token: str | None = field(default=None, repr=False)
    #: the credential of replicas: only it opens the Peer (replication) service; nodes
    #: use it for all their calls to each other. None: the client token serves for both.
    peer_token: str | None = field(default=None, repr=False)
    #: etcd's user and password (etcd's own authentication, decision 0053): the nodes and
    #: the CLI log in to etcd with them. Both or neither.
    etcd_user: str | None = None
    etcd_password: str | None = field(default=None, repr=False)
    tls: TlsConfig | None = None
    limits: Limits = field(default_factory=Limits)
    tuning: Tuning = field(default_factory=Tuning)
    base_dir: str = "."
    #: etcd endpoints (``host:port``): when given, the shard map, epochs and liveness live
    #: in etcd (``etcd_coordinator.py``); otherwise the map is fixed by this file.
    etcd: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", normalize_mode(self.mode))
        if not self.nodes:
            raise InvalidArgumentError("a cluster needs at least one node")
        ids = [n.id for n in self.nodes]
        if len(set(ids)) != len(ids):
            raise InvalidArgumentError(f"duplicate node ids in {ids}")
        if self.shards < 1:
            raise InvalidArgumentError("shards must be >= 1")
        if not 1 <= self.replicas <= len(self.nodes):
            raise InvalidArgumentError(
                f"replicas={self.replicas} must be between 1 and the number of nodes ({len(self.nodes)})"
            )
        if self.vnodes < 1:
            raise InvalidArgumentError("vnodes must be >= 1")
        for o in self.shard_overrides:
            if not 0 <= o.id < self.shards:
                raise InvalidArgumentError(f"shard override {o.id} outside 0..{self.shards - 1}")
            if o.mode is not None:
                normalize_mode(o.mode)
            for r in o.replicas or ():
                if r not in ids:
                    raise InvalidArgumentError(f"shard {o.id} names unknown node {r!r}")
            if o.replicas is not None and len(set(o.replicas)) != len(o.replicas):
                raise InvalidArgumentError(f"shard {o.id} lists a node twice")
        if self.tls is not None and self.tls.node_identities:
            for n in self.nodes:
                self.tls_for(n.id)  # raises for a node without its own certificate
        if (self.etcd_user is None) != (self.etcd_password is None):
            raise InvalidArgumentError("[cluster] etcd_user and etcd_password go together")

    @property
    def node_token(self) -> str | None:
        """The token a node sends on its calls to other nodes (and the CLI on the calls it
        makes for the cluster, e.g. a mode switch): the peer token, else the client token."""
        return self.peer_token or self.token

    def node(self, node_id: str) -> NodeConfig:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise InvalidArgumentError(f"no node {node_id!r} in the config (nodes: {[n.id for n in self.nodes]})")

    def tls_for(self, node_id: str) -> TlsConfig | None:
        """The TLS settings node ``node_id`` serves and calls with: the cluster's, with the
        node's own certificate and key when it has them (required by ``node_identities``)."""
        if self.tls is None:
            return None
        n = next((x for x in self.nodes if x.id == node_id), None)
        if n is not None and n.cert and n.key:
            return dataclasses.replace(self.tls, cert=n.cert, key=n.key)
        if self.tls.node_identities:
            raise InvalidArgumentError(
                f"node {node_id} has no certificate of its own ([[nodes]] cert and key), which "
                "[cluster.tls] node_identities needs"
            )
        return self.tls

    def datalet_for(self, node_id: str) -> DataletSpec:
        return self.node(node_id).datalet or self.datalet

    def replace(self, **changes: Any) -> ClusterConfig:
        return dataclasses.replace(self, **changes)

    # -- (de)serialization -------------------------------------------------------------

    @classmethod
    def from_dict(cls, d: dict[str, Any], base_dir: str | os.PathLike[str] = ".") -> ClusterConfig:
        try:
            return cls._from_dict(d, str(base_dir))
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, InvalidArgumentError):
                raise
            raise InvalidArgumentError(f"bad cluster config: {exc!r}") from exc

    @classmethod
    def _from_dict(cls, d: dict[str, Any], base_dir: str) -> ClusterConfig:
        c = dict(d.get("cluster", {}))
        base = Path(base_dir)

        def rel(p: str | None) -> str | None:
            return None if p is None else str((base / p).resolve()) if not os.path.isabs(p) else p

        nodes = tuple(
            NodeConfig(
                id=str(n["id"]),
                address=str(n.get("address", "127.0.0.1:0")),
                datalet=DataletSpec.from_dict(n["datalet"]) if "datalet" in n else None,
                listen=str(n["listen"]) if "listen" in n else None,
                cert=rel(n.get("cert")),
                key=rel(n.get("key")),
            )
            for n in d.get("nodes", [])
        )
        overrides = tuple(
            ShardOverride(
                id=int(s["id"]),
                mode=s.get("mode"),
                replicas=tuple(str(r) for r in s["replicas"]) if "replicas" in s else None,
            )
            for s in d.get("shards", [])
        )
        token = c.pop("token", None)
        token_file = c.pop("token_file", None)
        if token_file and not token:
            token = Path(rel(token_file) or "").read_text().strip()
        peer_token = c.pop("peer_token", None)
        peer_token_file = c.pop("peer_token_file", None)
        if peer_token_file and not peer_token:
            peer_token = Path(rel(peer_token_file) or "").read_text().strip()
        etcd_user = c.pop("etcd_user", None)
        etcd_password = c.pop("etcd_password", None)
        etcd_password_file = c.pop("etcd_password_file", None)
        if etcd_password_file and not etcd_password:
            etcd_password = Path(rel(etcd_password_file) or "").read_text().strip()
        tls_d = c.pop("tls", None)
        tls = None
        if tls_d:
            tls = TlsConfig(
                cert=rel(tls_d["cert"]) or "",
                key=rel(tls_d["key"]) or "",
                ca=rel(tls_d.get("ca")),
                mutual=bool(tls_d.get("mutual", False)),
                server_name=tls_d.get("server_name"),
                node_identities=bool(tls_d.get("node_identities", False)),
            )
        limits = Limits(**c.pop("limits", {}))
        tuning = Tuning(**d.get("tuning", {}))
        etcd = c.pop("etcd", ())
        etcd = tuple(str(e) for e in ([etcd] if isinstance(etcd, str) else etcd))
        known = {"name", "mode", "shards", "replicas", "vnodes"}
        unknown = set(c) - known
        if unknown:
            raise InvalidArgumentError(f"unknown [cluster] keys: {sorted(unknown)}")
        return cls(
            nodes=nodes,
            name=str(c.get("name", "bespokv")),
            mode=str(c.get("mode", "ms-sc")),
            shards=int(c.get("shards", 1)),
            replicas=int(c.get("replicas", min(3, len(nodes)) or 1)),
            vnodes=int(c.get("vnodes", 64)),
            datalet=DataletSpec.from_dict(d.get("datalet")),
            shard_overrides=overrides,
            token=token,
            peer_token=peer_token,
            etcd_user=None if etcd_user is None else str(etcd_user),
            etcd_password=None if etcd_password is None else str(etcd_password),
            tls=tls,
            limits=limits,
            tuning=tuning,
            base_dir=str(base.resolve()),
            etcd=etcd,
        )

    def to_dict(self) -> dict[str, Any]:
        cluster: dict[str, Any] = {
            "name": self.name,
            "mode": self.mode,
            "shards": self.shards,
            "replicas": self.replicas,
            "vnodes": self.vnodes,
        }
        if self.token:
            cluster["token"] = self.token
        if self.peer_token:
            cluster["peer_token"] = self.peer_token
        if self.etcd:
            cluster["etcd"] = list(self.etcd)
        if self.etcd_user is not None and self.etcd_password is not None:
            cluster["etcd_user"], cluster["etcd_password"] = self.etcd_user, self.etcd_password
        if self.tls:
            t: dict[str, Any] = {"cert": self.tls.cert, "key": self.tls.key, "mutual": self.tls.mutual}
            if self.tls.ca:
                t["ca"] = self.tls.ca
            if self.tls.server_name:
                t["server_name"] = self.tls.server_name
            if self.tls.node_identities:
                t["node_identities"] = True
            cluster["tls"] = t
        if self.limits != Limits():
            cluster["limits"] = dataclasses.asdict(self.limits)
        out: dict[str, Any] = {"cluster": cluster, "datalet": self.datalet.to_dict()}
        if self.tuning != Tuning():
            out["tuning"] = {
                k: v for k, v in dataclasses.asdict(self.tuning).items() if getattr(Tuning(), k) != v
            }
        out["nodes"] = []
        for n in self.nodes:
            nd: dict[str, Any] = {"id": n.id, "address": n.address}
            if n.datalet:
                nd["datalet"] = n.datalet.to_dict()
            if n.listen:
                nd["listen"] = n.listen
            if n.cert and n.key:
                nd["cert"], nd["key"] = n.cert, n.key
            out["nodes"].append(nd)
        if self.shard_overrides:
            out["shards"] = []
            for o in self.shard_overrides:
                od: dict[str, Any] = {"id": o.id}
                if o.mode:
                    od["mode"] = o.mode
                if o.replicas is not None:
                    od["replicas"] = list(o.replicas)
                out["shards"].append(od)
        return out

    def to_toml(self) -> str:
        return dump_toml(self.to_dict())

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the config atomically; readable by its owner only when it holds a secret."""
        tmp = Path(str(path) + ".tmp")
        secret = bool(self.token or self.peer_token or self.etcd_password)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(self.to_toml())
        if secret:
            os.chmod(tmp, 0o600)  # also when the file existed with wider permissions
        os.replace(tmp, path)


def load(path: str | os.PathLike[str]) -> ClusterConfig:
    """Read a cluster config file. Raises :class:`InvalidArgumentError` when it is malformed."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgumentError(f"{p}: not valid TOML: {exc}") from exc
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read cluster config {p}: {exc}") from exc
    return ClusterConfig.from_dict(data, p.parent)


def dump_toml(d: dict[str, Any]) -> str:
    """Nested dicts / lists of dicts as TOML (``tomli-w``: tomllib only reads). Any string
    round-trips through :func:`load`, control characters included."""
    try:
        return tomli_w.dumps(d)
    except TypeError as exc:
        raise InvalidArgumentError(f"cannot write the config as TOML: {exc}") from exc
