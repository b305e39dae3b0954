"""Compaction-aware caching: a compaction into the cloud levels warms the DataCache with
the hot parts of its output, from the local copies it has just written (no fetch), so hot
keys stay cached across compactions (docs/cloud.md, "Compaction-aware caching").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from .version import CLOUD, FileMeta

if TYPE_CHECKING:
    from .data_cache import DataCache
    from .table import Table

__all__ = ["hot_ranges", "fill"]


def hot_ranges(inputs: Iterable[FileMeta], dc: "DataCache") -> list[tuple[bytes, bytes, int]]:
    """Key ranges ``[lo, hi]`` of the input tables' hot blocks, with a heat: the block's
    hits in the data cache, or 1 for a block in the block cache hit since its last sweep
    (read more than once)."""
    ranges = []
    for f in inputs:
        t = f.table
        heat = dict.fromkeys(t.referenced_blocks(), 1)
        if f.tier == CLOUD:
            for i in dc.hot_blocks(f.number):
                heat[i] = max(heat.get(i, 0), dc.hotness(f.number, i), 1)
        for i, h in heat.items():
            lo, hi = t.block_bounds(i)
            ranges.append((f.smallest if lo is None else lo, hi, h))
    return ranges


def fill(dc: "DataCache", tables: dict[int, "Table"], hot: list[tuple[bytes, bytes, int]]
         ) -> int:
    """Put blocks of the new cloud ``tables`` (number -> a readable local copy) into the
    data cache; return how many. First the blocks overlapping ``hot`` ranges, hottest
    first, up to three quarters of the cache (forcing more would evict the hottest ones it
    just put in); then any others while the cache has spare room, evicting nothing."""
    heat: dict[tuple[int, int], int] = {}
    for number, t in tables.items():
        for lo, hi, h in hot:
            for j in t.blocks_meeting(lo, hi):
                if heat.get((number, j), 0) < h:
                    heat[(number, j)] = h
    budget = dc.capacity * 3 // 4
    filled = 0
    for (number, j), _ in sorted(heat.items(), key=lambda kv: -kv[1]):
        data = tables[number].fetch(j)
        if len(data) > budget:
            break
        budget -= len(data)
        filled += dc.put(number, j, data, force=True)
    for number, t in tables.items():  # spare room takes the rest
        for j in range(t.nblocks):
            if (number, j) not in heat:
                if not dc.put(number, j, t.fetch(j), if_room=True):
                    break
                filled += 1
    return filled
