"""Compaction-aware caching: a compaction into the cloud levels warms the DataCache with
the hot parts of its output, and the key cache with the rows its inputs had there, from
the local copies it has just written (no fetch), so hot keys stay cached across
compactions (docs/cloud.md, "Compaction-aware caching").
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, Iterable, NamedTuple

from .block import Block, decode_stored
from .key_cache import MAX_SEQ, newest_version, row_bytes
from .version import CLOUD, FileMeta

if TYPE_CHECKING:
    from .data_cache import DataCache
    from .key_cache import KeyCache
    from .table import Table

__all__ = ["Heat", "collect", "hot_ranges", "fill", "fill_rows"]


class Heat(NamedTuple):
    """What a compaction carries over: hot key ranges (blocks) and hot keys (rows)."""

    ranges: list[tuple[bytes, bytes, int]]
    rows: list[tuple[bytes, int]]


def collect(inputs: Iterable[FileMeta], dc: "DataCache") -> Heat:
    """The heat of a compaction's inputs, read before they are retired: their hot block
    ranges (:func:`hot_ranges`) and every row they have in the key cache, with its heat
    (a row is there because it was read from the cloud; its hits rank it)."""
    inputs = list(inputs)
    kc = dc.rows
    rows = ([r for f in inputs if f.tier == CLOUD for r in kc.rows(f.number)]
            if kc is not None else [])
    return Heat(hot_ranges(inputs, dc), rows)


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


def fill(dc: "DataCache", tables: dict[int, "Table"], hot: Heat) -> int:
    """Put blocks of the new cloud ``tables`` (number -> a readable local copy) into the
    data cache, and the rows of ``hot.rows`` into the key cache (:func:`fill_rows`);
    return how many entries. Blocks: first those overlapping ``hot.ranges``, hottest
    first, up to three quarters of the cache (forcing more would evict the hottest ones it
    just put in); then any others while the cache has spare room, evicting nothing."""
    filled = fill_rows(dc.rows, tables, hot.rows) if dc.rows is not None else 0
    return filled + _fill_blocks(dc, tables, hot.ranges)


def fill_rows(kc: "KeyCache", tables: dict[int, "Table"], rows: list[tuple[bytes, int]]
              ) -> int:
    """Put the newest version in the new ``tables`` of each key of ``rows`` (key, heat)
    into the key cache under its new table; return how many. Hot ones (heat > 0) first,
    hottest first, with an eviction credit, up to three quarters of the key cache; the
    others while it has room. A key that no new table holds (dropped at the bottom
    level) gets no entry."""
    if not rows or not tables:
        return 0
    order = sorted(tables, key=lambda n: tables[n].index_keys[-1] if tables[n].nblocks else b"")
    lasts = [tables[n].index_keys[-1] if tables[n].nblocks else b"" for n in order]
    found: list[tuple[int, int, bytes, int, bytes | None]] = []  # -heat, table, key, seq, v
    decoded: dict[tuple[int, int], Block] = {}
    for key, heat in sorted(rows):
        k = bisect_left(lasts, key)
        if k == len(order):
            continue
        number = order[k]
        t = tables[number]
        i = t.block_for(key)
        if i is None:
            continue
        blk = decoded.get((number, i))
        if blk is None:
            decoded.clear()  # keys come sorted: one block at a time is enough
            blk = decoded[(number, i)] = Block(decode_stored(memoryview(t.fetch(i)),
                                                             f"{t.name} block {i}"))
        e = newest_version(blk, key, MAX_SEQ)
        if e is not None:
            found.append((-heat, number, key, e[0], e[1]))
    found.sort(key=lambda r: r[0])
    budget = kc.capacity * 3 // 4
    filled = 0
    for neg, number, key, seq, value in found:
        size = row_bytes(key, value)
        hot = neg < 0 and size <= budget
        if hot:
            budget -= size
        filled += kc.put(number, key, seq, value, force=hot, if_room=not hot)
    return filled


def _fill_blocks(dc: "DataCache", tables: dict[int, "Table"],
                 hot: list[tuple[bytes, bytes, int]]) -> int:
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
