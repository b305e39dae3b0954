"""Read-ahead for batched point reads: every object-store GET a ``multi_get`` will need
is started at once, in the cloud tier's fetch threads, before the keys are read one by
one (which then find their blocks in the block cache).

Why this way: a miss costs a round trip (20-30 ms) and almost no CPU, so a batch of N
misses read one after another costs N round trips, read together about one. The read
path itself stays the plain serial :meth:`DB.get` (one code path for values, shadowing
and snapshots); this module only decides which blocks to warm. For each key it walks
the tables a get would visit, in the same order, and stops at the first table that holds
the key locally (block cache, key cache, DataCache or a local table: nothing to fetch) or whose
block would need a GET (that block is fetched; deeper levels are not, as the key is
most likely there). A guess that turns out wrong costs nothing but the serial read's own
GET for a deeper level.
"""

from __future__ import annotations

from concurrent.futures import wait
from typing import Any, Iterable

from .bloom import split_hash
from .memtable import MISSING
from .table import FETCH_WAIT_S, Table
from .version import Version

__all__ = ["fetch_for_keys"]


def _first_fetch(version: Version, key: bytes, seq: int, word: int, mi: int
                 ) -> tuple[Table, int] | None:
    """The first (table, block) on ``key``'s read path that needs a GET, if the key is
    not found locally before it."""
    for t in version.tables_for(key):
        if not t.may_contain(word, mi):
            continue
        i = t.block_for(key)
        if i is None:
            continue
        if t.needs_fetch(i) and not (t.rows is not None and t.rows.contains(t.number, key)):
            return t, i
        if t.get(key, seq, word, mi) is not MISSING:
            return None  # found locally
    return None


def fetch_for_keys(keys: Iterable[bytes], mems: list[Any], version: Version, seq: int) -> int:
    """Fetch, all at once, the cloud blocks that reading ``keys`` at ``seq`` will miss;
    wait for them (at most FETCH_WAIT_S). Returns how many fetches were started.
    Failures are left to the reads that follow (they fetch again and raise)."""
    started = []
    wanted: set[tuple[int, int]] = set()
    for key in keys:
        if any(key in m.entries for m in mems):
            continue  # a memtable has it (or a newer write of it): no table read
        hit = _first_fetch(version, key, seq, *split_hash(key))
        if hit is None:
            continue
        t, i = hit
        if (id(t), i) in wanted:
            continue
        wanted.add((id(t), i))
        fut = t.prefetch_block(i)
        if fut is not None:
            started.append(fut)
    if started:
        wait(started, FETCH_WAIT_S)
    return len(started)
