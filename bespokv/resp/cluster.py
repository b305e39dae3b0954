"""Redis Cluster on top of the shard map: slots, CLUSTER replies, -MOVED (decision 0059).

Every key's hash slot belongs to one shard (``slots.py``), so a shard is what Redis calls
a shard, and its *master* is the replica a Redis client should send the slot's commands
to: the head in the master-slave modes, the first replica in the active-active modes,
skipping replicas the cluster reports down. A node may be the master of some shards and
a replica of others, which Redis's node roles cannot say; so CLUSTER SLOTS lists each
range's master only (redis-py takes a node's role from the first range naming it, so
listing replicas would hide some masters from it), CLUSTER SHARDS lists every replica, and
CLUSTER NODES lists every node as a master of the slots it leads.

Every node serves two RESP ports. The *client port* takes any command for any key and
runs or forwards it (a plain client, ``redis-cli``, needs nothing else); SCAN, KEYS,
DBSIZE and FLUSHDB there cover the whole cluster. The *cluster port* behaves as a Redis
Cluster node: a key command for a slot this node is not the master of gets ``-MOVED
<slot> <host>:<port>`` (``READONLY`` connections may read at any replica), keys of one
command must share a slot (``-CROSSSLOT``), and SCAN, KEYS, DBSIZE and FLUSHDB cover the
slots this node leads, so a cluster client that sends them to every master sees each key
once. CLUSTER replies on either port name the cluster ports, so ``RedisCluster`` started
from a client port moves to the cluster ports. Nodes learn each other's ports from their
``NodeStats`` (the ``redis`` and ``redis_cluster`` fields).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bespokv.proto import bespokv_pb2 as pb
from bespokv.resp.protocol import OK, bulk, encode, error, integer
from bespokv.resp.table import Command, CommandError, arg, command
from bespokv.shardmap import ShardInfo, ShardMap
from bespokv.slots import SLOTS, key_slot

if TYPE_CHECKING:
    from bespokv.resp.server import Session
    from bespokv.server import Node

__all__ = ["Directory", "Endpoint", "master_of", "node_hex_id", "redirect"]


@dataclass(frozen=True)
class Endpoint:
    """A node's RESP ports."""

    host: str
    port: int
    cluster_port: int


def node_hex_id(node_id: str) -> str:
    """The 40-character id Redis Cluster replies use for a node (SHA-1 of its id)."""
    return hashlib.sha1(node_id.encode()).hexdigest()


def master_of(info: ShardInfo, down: set[str] | frozenset[str]) -> str:
    """The replica a Redis client sends the shard's commands to."""
    return next((r for r in info.replicas if r not in down), info.replicas[0])


Lookup = Callable[[str], Awaitable[Endpoint | None]]


def _parse_address(address: str) -> tuple[str, int] | None:
    if not address:
        return None
    host, _, port = address.rpartition(":")
    return (host, int(port)) if port.isdigit() else None


def stats_lookup(node: Node) -> Lookup:
    """A node's RESP ports from its ``NodeStats`` (empty fields: it serves none)."""

    async def lookup(node_id: str) -> Endpoint | None:
        st = await node.peers.admin(node_id).NodeStats(pb.NodeStatsRequest(), timeout=1.0, metadata=node.peers.metadata)
        plain = _parse_address(getattr(st, "redis", ""))
        clustered = _parse_address(getattr(st, "redis_cluster", ""))
        if plain is None or clustered is None:
            return None
        return Endpoint(plain[0], plain[1], clustered[1])

    return lookup


class Directory:
    """Where each node's RESP ports are: this node's own, and the others' as last learned."""

    #: Seconds between two refreshes for CLUSTER replies (a client refreshing its map
    #: after every error must not fan out to every node each time).
    REFRESH = 0.5

    def __init__(self, node_id: str, me: Endpoint, lookup: Lookup) -> None:
        self.node_id = node_id
        self.known: dict[str, Endpoint] = {node_id: me}
        self._lookup = lookup
        self._last = 0.0
        self._refreshing: asyncio.Future[None] | None = None

    async def refresh(self, nodes: list[str]) -> dict[str, Endpoint]:
        """Ask every other node of ``nodes`` for its ports (1 s each, concurrently);
        unreachable ones keep what was known."""
        if time.monotonic() - self._last < self.REFRESH and all(n in self.known for n in nodes):
            return self.known
        if self._refreshing is not None:
            await asyncio.shield(self._refreshing)
            return self.known
        self._refreshing = asyncio.get_running_loop().create_future()
        try:

            async def one(n: str) -> None:
                try:
                    ep = await self._lookup(n)
                except Exception:  # down or unreachable: keep what we knew
                    return
                if ep is not None:
                    self.known[n] = ep
                else:
                    self.known.pop(n, None)

            await asyncio.gather(*(one(n) for n in nodes if n != self.node_id))
            self._last = time.monotonic()
        finally:
            fut, self._refreshing = self._refreshing, None
            fut.set_result(None)
        return self.known


    async def follow(self, node: Node) -> None:
        """Keep the table current: refresh now, after every map change, and every
        ``FOLLOW`` seconds while some node's ports are unknown. Runs until cancelled."""
        while True:
            changed = node.map_changed
            try:
                await self.refresh(list(node.shard_map.nodes))
            except Exception:  # best effort; the next round retries
                pass
            missing = any(n not in self.known for n in node.shard_map.nodes)
            try:
                await asyncio.wait_for(changed.wait(), self.FOLLOW if missing else 60.0)
            except TimeoutError:
                pass

    #: Seconds between refreshes while a node's ports are unknown.
    FOLLOW = 1.0


def redirect(s: Session, cmd: Command, keys: list[bytes]) -> bytes | None:
    """On the cluster port: the ``-MOVED``/``-CROSSSLOT`` reply for a key command this
    node must not serve, or None to serve it."""
    slot = key_slot(keys[0])
    for k in keys[1:]:
        if key_slot(k) != slot:
            return error("CROSSSLOT Keys in request don't hash to the same slot")
    node = s.server.node
    smap = node.shard_map
    info = smap.shards[smap.slot_shard(slot)]
    me = node.node_id
    master = master_of(info, node.coordinator.down())
    if master == me or (s.readonly and not cmd.write and me in info.replicas):
        return None
    ep = s.server.directory.known.get(master)
    if ep is None:  # its port is not known here yet: serve it (forwarded)
        return None
    return error(f"MOVED {slot} {ep.host}:{ep.cluster_port}")


# -- CLUSTER replies ---------------------------------------------------------------------------


def _masters(smap: ShardMap, down: set[str] | frozenset[str], known: dict[str, Endpoint]) -> dict[int, str]:
    """shard id -> the node listed as its master (one whose ports are known)."""
    out = {}
    for sid, info in smap.shards.items():
        order = [master_of(info, down)] + [r for r in info.replicas if r not in down]
        n = next((r for r in order if r in known), None)
        if n is not None:
            out[sid] = n
    return out


async def _view(s: Session) -> tuple[ShardMap, set[str], dict[str, Endpoint], dict[int, str]]:
    node = s.server.node
    smap = node.shard_map
    down = set(node.coordinator.down())
    known = await s.server.directory.refresh(list(smap.nodes))
    return smap, down, known, _masters(smap, down, known)


def _node_entry(n: str, ep: Endpoint) -> list[Any]:
    return [ep.host, ep.cluster_port, node_hex_id(n)]


async def cluster_slots(s: Session) -> Any:
    smap, _, known, masters = await _view(s)
    return [
        [first, last, _node_entry(masters[sid], known[masters[sid]])]
        for first, last, sid in smap.slot_ranges()
        if sid in masters
    ]


async def cluster_shards(s: Session) -> Any:
    smap, down, known, masters = await _view(s)
    ranges: dict[int, list[int]] = {}
    for first, last, sid in smap.slot_ranges():
        ranges.setdefault(sid, []).extend((first, last))
    out = []
    for sid, info in smap.shards.items():
        nodes = []
        for r in info.replicas:
            ep = known.get(r)
            if ep is None:
                continue
            nodes.append({
                "id": node_hex_id(r), "port": ep.cluster_port, "ip": ep.host, "endpoint": ep.host,
                "role": "master" if masters.get(sid) == r else "replica", "replication-offset": 0,
                "health": "fail" if r in down else "online",
            })
        out.append({"slots": ranges.get(sid, []), "nodes": nodes})
    return out


async def cluster_nodes(s: Session) -> str:
    smap, down, known, masters = await _view(s)
    led: dict[str, list[str]] = {}
    for first, last, sid in smap.slot_ranges():
        if sid in masters:
            led.setdefault(masters[sid], []).append(str(first) if first == last else f"{first}-{last}")
    now = int(time.time() * 1000)
    me = s.server.node.node_id
    lines = []
    for n in smap.nodes:
        ep = known.get(n)
        if ep is None:
            continue
        flags = ("myself," if n == me else "") + "master" + (",fail" if n in down else "")
        link = "disconnected" if n in down else "connected"
        lines.append(
            f"{node_hex_id(n)} {ep.host}:{ep.cluster_port}@0 {flags} - 0 {now} {smap.epoch} {link} "
            + " ".join(led.get(n, []))
        )
    return "\n".join(line.rstrip() for line in lines) + "\n"


async def cluster_info(s: Session) -> str:
    smap, down, known, masters = await _view(s)
    covered = sum(last - first + 1 for first, last, sid in smap.slot_ranges() if sid in masters)
    failed = sum(
        last - first + 1 for first, last, sid in smap.slot_ranges() if all(r in down for r in smap.shards[sid].replicas)
    )
    fields = {
        "cluster_enabled": 1,
        "cluster_state": "ok" if covered == SLOTS and not failed else "fail",
        "cluster_slots_assigned": SLOTS, "cluster_slots_ok": SLOTS - failed, "cluster_slots_pfail": 0,
        "cluster_slots_fail": failed, "cluster_known_nodes": len(smap.nodes), "cluster_size": len(set(masters.values())),
        "cluster_current_epoch": smap.epoch, "cluster_my_epoch": smap.epoch,
    }
    return "".join(f"{k}:{v}\r\n" for k, v in fields.items())


@command("cluster", -2, "stale", group="cluster", since="3.0.0",
         summary="CLUSTER SLOTS, SHARDS, NODES, INFO, MYID, KEYSLOT.", arguments=(arg("subcommand"),))
async def cmd_cluster(s: Session, args: list[bytes]) -> bytes:
    sub = args[1].upper()
    if len(args) == 2:
        if sub == b"SLOTS":
            return encode(await cluster_slots(s), s.resp3)
        if sub == b"SHARDS":
            return encode(await cluster_shards(s), s.resp3)
        if sub == b"NODES":
            return bulk((await cluster_nodes(s)).encode())
        if sub == b"INFO":
            return bulk((await cluster_info(s)).encode())
        if sub == b"MYID":
            return bulk(node_hex_id(s.server.node.node_id).encode())
    if sub == b"KEYSLOT" and len(args) == 3:
        return integer(key_slot(args[2]))
    raise CommandError(
        f"ERR unknown subcommand or wrong number of arguments for '{args[1].decode(errors='replace')}'. Try CLUSTER HELP."
    )


@command("readonly", 1, "fast loading stale", group="cluster", since="3.0.0",
         summary="Lets the connection read at any replica of a slot (cluster port).")
async def cmd_readonly(s: Session, args: list[bytes]) -> bytes:
    s.readonly = True
    return OK


@command("readwrite", 1, "fast loading stale", group="cluster", since="3.0.0",
         summary="Sends the connection's reads to the slot's master again (cluster port).")
async def cmd_readwrite(s: Session, args: list[bytes]) -> bytes:
    s.readonly = False
    return OK


@command("asking", 1, "fast", group="cluster", since="3.0.0", summary="Accepted; slots never migrate here.")
async def cmd_asking(s: Session, args: list[bytes]) -> bytes:
    return OK

