"""Consistent hashing with virtual nodes.

Two rings place data (see docs/bespokv.md, "Sharding"):

* keys -> shards: every shard owns ``vnodes`` points on a ring; a key belongs to the shard
  owning the first point at or after its hash slot's point (``slots.py``; wrapping around);
* shards -> replica sets: every node owns ``vnodes`` points on a second ring; a shard's
  replicas are the first ``replicas`` distinct nodes met walking from the shard's hash,
  rotated (keeping the cyclic order) to spread heads and tails evenly (``shardmap.py``).
  The order matters: for master-slave modes the first is the head/master, the last the tail.

Ring points are 64-bit xxh3 hashes of member names. Adding a shard or a node moves only about 1/n of the
keys or shards. Points are frozen by this encoding: changing it remaps every key.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Sequence
from typing import Generic, TypeVar

import xxhash

__all__ = ["key_hash", "HashRing"]

M = TypeVar("M", bound=Hashable)


def key_hash(data: bytes) -> int:
    """The 64-bit hash used for every ring position (frozen: changing it remaps all keys)."""
    return xxhash.xxh3_64_intdigest(data)


class HashRing(Generic[M]):
    """A ring of members, each at ``vnodes`` pseudo-random points.

    ``names`` gives the byte string hashed for each member's points (defaults to ``str``).
    Lookups are O(log(points)). Immutable after construction.
    """

    def __init__(self, members: Sequence[M], vnodes: int = 64, *, names: Sequence[bytes] | None = None) -> None:
        if not members:
            raise ValueError("a hash ring needs at least one member")
        if vnodes < 1:
            raise ValueError("vnodes must be >= 1")
        if names is None:
            names = [str(m).encode() for m in members]
        points: list[tuple[int, int]] = []
        for idx, name in enumerate(names):
            for v in range(vnodes):
                points.append((key_hash(name + b"#" + str(v).encode()), idx))
        points.sort()
        self._members = list(members)
        self._hashes = [h for h, _ in points]
        self._owners = [i for _, i in points]
        self.vnodes = vnodes

    @property
    def members(self) -> list[M]:
        return list(self._members)

    def lookup_hash(self, h: int) -> M:
        i = bisect.bisect_left(self._hashes, h)
        if i == len(self._hashes):
            i = 0
        return self._members[self._owners[i]]

    def lookup_sorted(self, hashes: Sequence[int]) -> list[M]:
        """:meth:`lookup_hash` of each of ``hashes`` (ascending), in one walk of the ring."""
        out: list[M] = []
        points, owners, members = self._hashes, self._owners, self._members
        n = len(points)
        i = 0
        for h in hashes:
            while i < n and points[i] < h:
                i += 1
            out.append(members[owners[i if i < n else 0]])
        return out

    def lookup(self, key: bytes) -> M:
        """The member owning ``key``."""
        return self.lookup_hash(key_hash(key))

    def preference_list(self, key: bytes, n: int) -> list[M]:
        """The first ``n`` distinct members met walking clockwise from ``key``'s hash."""
        n = min(n, len(self._members))
        i = bisect.bisect_left(self._hashes, key_hash(key))
        out: list[M] = []
        seen: set[int] = set()
        size = len(self._hashes)
        for step in range(size):
            owner = self._owners[(i + step) % size]
            if owner not in seen:
                seen.add(owner)
                out.append(self._members[owner])
                if len(out) == n:
                    break
        return out
