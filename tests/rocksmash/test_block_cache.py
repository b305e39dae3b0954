"""The block cache charges what a decoded block really takes (its bytes and the Python
objects around them), so ``block_cache_size`` is memory, as RocksDB's block cache is."""

from __future__ import annotations

import os
import tracemalloc

from rocksmash.block_cache import BlockCache
from rocksmash.env import LocalFile
from rocksmash.table import Table
from rocksmash.table_builder import TableBuilder


def test_block_charge_is_what_python_spends(tmp_path):
    """For the benchmark's rows (24-byte keys, 100-byte values, 4 KiB blocks)."""
    path = str(tmp_path / "t.sst")
    b = TableBuilder(path, block_size=4096, compression="lz4", bloom_bits_per_key=10)
    keys = [b"user%020d" % i for i in range(3000)]
    b.add_unique(keys, list(range(1, 3001)), [os.urandom(50) * 2 for _ in keys])
    b.finish(sync=False)
    cache = BlockCache(1 << 30)
    table = Table(1, LocalFile(path), cache)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(table.nblocks):
            table.block(i)
        spent = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    raw = sum(len(blk.raw) for blk in table.blocks)
    assert spent > 1.3 * raw  # (the objects matter: charging only the bytes undercounts)
    assert 0.85 * spent <= cache.used <= 1.15 * spent, (cache.used, spent, raw)
