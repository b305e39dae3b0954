"""The shard map: which shard a key is in, and which nodes replicate each shard.

A :class:`ShardMap` is an immutable value handed out by the coordinator (see
``coordinator.py``); a new epoch replaces it whole. Clients fetch it from any node
(``Admin.ShardMap``) and route with the same code the nodes use, so both always agree
for a given epoch.

Keys map to shards through Redis Cluster's hash slots (``slots.py``, decision 0059): a
key's slot (CRC16, hash tags honoured) has a fixed point on the ring of shard vnodes, so
all keys of a slot share a shard and the RESP front end can announce slot ranges.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import xxhash

from bespokv.errors import InvalidArgumentError, UnknownShardError
from bespokv.hashring import HashRing
from bespokv.slots import SLOTS, key_slot, slot_point

if TYPE_CHECKING:
    from bespokv.config import ClusterConfig

__all__ = ["NodeInfo", "ShardInfo", "ShardMap", "node_number", "writer_id"]


def node_number(node_id: str) -> int:
    """A node's 32-bit number, the tie-breaker inside versions (aa modes). Frozen encoding."""
    return xxhash.xxh32_intdigest(node_id.encode())


def writer_id(node_id: str, incarnation: bytes) -> int:
    """The 32-bit writer field of versions written by one incarnation of a node."""
    return xxhash.xxh32_intdigest(node_id.encode() + b"/" + incarnation)


@dataclass(frozen=True)
class NodeInfo:
    id: str
    address: str


@dataclass(frozen=True)
class ShardInfo:
    """One shard: its controlet mode and its replicas in order (head/master first), and
    its epoch: the map epoch at which it last changed. Requests made under an older epoch
    of the shard are refused (fencing). ``frozen``: a live mode switch is draining the
    shard (modeswitch.py): its nodes refuse new writes (not applied; retried), reads go on.
    ``move``: ``(to, from_)`` while membership.py moves the replica of node ``from_`` to
    node ``to`` (``to`` copies it, then takes ``from_``'s place in one CAS). ``merge``:
    set on a frozen, drained active-active shard that switches to a master-slave mode:
    every replica merges the others' values into its own before the switch (modeswitch.py)."""

    id: int
    mode: str
    replicas: tuple[str, ...]
    epoch: int = 1
    frozen: bool = False
    move: tuple[str, str] | None = None
    merge: bool = False

    @property
    def head(self) -> str:
        return self.replicas[0]

    @property
    def tail(self) -> str:
        return self.replicas[-1]

    def successor(self, node_id: str) -> str | None:
        i = self.replicas.index(node_id)
        return self.replicas[i + 1] if i + 1 < len(self.replicas) else None

    def predecessor(self, node_id: str) -> str | None:
        i = self.replicas.index(node_id)
        return self.replicas[i - 1] if i > 0 else None

    @property
    def quorum(self) -> int:
        return len(self.replicas) // 2 + 1


class ShardMap:
    """Keys -> shards (a ring of shard vnodes) and shards -> ordered replica sets."""

    def __init__(
        self,
        shards: dict[int, ShardInfo],
        nodes: dict[str, NodeInfo],
        *,
        vnodes: int = 64,
        epoch: int = 1,
        cluster: str = "bespokv",
    ) -> None:
        if not shards:
            raise InvalidArgumentError("a shard map needs at least one shard")
        numbers: dict[int, str] = {}
        for nid in nodes:
            n = node_number(nid)
            if n in numbers:
                raise InvalidArgumentError(f"node ids {numbers[n]!r} and {nid!r} hash alike; rename one")
            numbers[n] = nid
        for s in shards.values():
            for r in s.replicas:
                if r not in nodes:
                    raise InvalidArgumentError(f"shard {s.id} names unknown node {r!r}")
        self.shards = dict(sorted(shards.items()))
        self.nodes = dict(nodes)
        self.vnodes = vnodes
        self.epoch = epoch
        self.cluster = cluster
        ids = list(self.shards)
        self._ring: HashRing[int] = HashRing(ids, vnodes, names=[b"shard:%d" % i for i in ids])
        #: shard id of every slot, built on first use
        self._slot_shards: list[int] | None = None

    @classmethod
    def from_config(cls, cfg: ClusterConfig, epoch: int = 1) -> ShardMap:
        nodes = {n.id: NodeInfo(n.id, n.address) for n in cfg.nodes}
        node_ring: HashRing[str] = HashRing(list(nodes), cfg.vnodes, names=[n.encode() for n in nodes])
        overrides = {o.id: o for o in cfg.shard_overrides}
        shards: dict[int, ShardInfo] = {}
        heads: Counter[str] = Counter()
        tails: Counter[str] = Counter()
        for sid in range(cfg.shards):
            o = overrides.get(sid)
            mode = cfg.mode
            pl = node_ring.preference_list(b"shard:%d" % sid, cfg.replicas)
            # Rotate the ring's order so heads (which take the writes) and tails (the
            # chain's reads) spread over the nodes: with few shards the raw ring order
            # can give one node most heads.
            r = min(range(len(pl)), key=lambda i: (heads[pl[i]], tails[pl[i - 1]], i))
            replicas = tuple(pl[r:] + pl[:r])
            if o is not None:
                if o.mode:
                    from bespokv.config import normalize_mode

                    mode = normalize_mode(o.mode)
                if o.replicas is not None:
                    replicas = o.replicas
            shards[sid] = ShardInfo(sid, mode, replicas)
            heads[replicas[0]] += 1
            tails[replicas[-1]] += 1
        return cls(shards, nodes, vnodes=cfg.vnodes, epoch=epoch, cluster=cfg.name)

    def shard_for(self, key: bytes) -> int:
        """The id of the shard that owns ``key`` (the shard of its hash slot)."""
        owners = self._slot_shards
        if owners is None:
            owners = self._slot_owners()
        return owners[key_slot(key)]

    def _slot_owners(self) -> list[int]:
        """The shard of every slot, from the ring (once per map, one walk of the ring; a
        key's shard is then a list index instead of a ring search)."""
        if self._slot_shards is None:
            self._slot_shards = self._ring.lookup_sorted([slot_point(s) for s in range(SLOTS)])
        return self._slot_shards

    def slot_shard(self, slot: int) -> int:
        """The id of the shard that owns hash slot ``slot``."""
        return self._slot_owners()[slot]

    def slot_ranges(self) -> list[tuple[int, int, int]]:
        """``(first slot, last slot, shard id)`` for each run of slots owned by one shard,
        in slot order, covering all 16,384 slots."""
        out: list[tuple[int, int, int]] = []
        owners = self._slot_owners()
        first = 0
        for s in range(1, SLOTS + 1):
            if s == SLOTS or owners[s] != owners[first]:
                out.append((first, s - 1, owners[first]))
                first = s
        return out

    def shard(self, shard_id: int) -> ShardInfo:
        try:
            return self.shards[shard_id]
        except KeyError:
            raise UnknownShardError(
                f"unknown shard {shard_id} (this cluster has shards {min(self.shards)}..{max(self.shards)})"
            ) from None

    def shard_of_key(self, key: bytes) -> ShardInfo:
        return self.shards[self.shard_for(key)]

    def load(self) -> Counter[str]:
        """Replicas each member holds (0 for a member that holds none)."""
        load: Counter[str] = Counter({n: 0 for n in self.nodes})
        for s in self.shards.values():
            load.update(s.replicas)
        return load

    def shards_of(self, node_id: str) -> list[ShardInfo]:
        return [s for s in self.shards.values() if node_id in s.replicas]

    def address(self, node_id: str) -> str:
        try:
            return self.nodes[node_id].address
        except KeyError:
            raise UnknownShardError(f"unknown node {node_id!r}") from None

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ShardMap)
            and self.shards == other.shards
            and self.nodes == other.nodes
            and self.vnodes == other.vnodes
            and self.epoch == other.epoch
        )

    def __repr__(self) -> str:
        return f"ShardMap(epoch={self.epoch}, shards={len(self.shards)}, nodes={list(self.nodes)})"
