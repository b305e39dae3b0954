"""The block cache charges what a decoded block really takes (its bytes and the Python
objects around them), so ``block_cache_size`` is memory, as RocksDB's block cache is."""

from __future__ import annotations

import os
import tracemalloc

from rocksmash.block_cache import BlockCache
from rocksmash.env import LocalFile
from rocksmash.table import Table
from rocksmash.table_builder import TableBuilder


def _charge_and_spent(tmp_path, keys: list[bytes]) -> tuple[int, int, int, Table]:
    """Decode every block of a table of ``keys`` (100-byte values, 4 KiB blocks) into a
    cache: (its charge, the bytes tracemalloc saw spent, the blocks' bytes, the table)."""
    path = str(tmp_path / "t.sst")
    b = TableBuilder(path, block_size=4096, compression="lz4", bloom_bits_per_key=10)
    b.add_unique(keys, list(range(1, len(keys) + 1)), [os.urandom(50) * 2 for _ in keys])
    b.finish(sync=False)
    cache = BlockCache(1 << 30)
    table = Table(1, LocalFile(path), cache)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i, key in enumerate(table.index_keys):
            table.block(i).find(key)  # (a block's first find builds its heads)
        spent = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return cache.used, spent, sum(len(blk.raw) for blk in table.blocks), table


def test_block_charge_is_what_python_spends(tmp_path):
    """For the benchmark's rows (24-byte keys, 100-byte values, 4 KiB blocks): the heads
    form, no key objects (decision 0038)."""
    used, spent, raw, table = _charge_and_spent(tmp_path, [b"user%020d" % i for i in range(3000)])
    assert all(blk.heads is not None and blk.klist is None for blk in table.blocks)
    assert spent < 1.25 * raw  # (the list form spent 1.65x)
    assert 0.9 * spent <= used <= 1.1 * spent, (used, spent, raw)


def test_list_form_charge_is_what_python_spends(tmp_path):
    """Keys of different widths keep a key list, charged for its objects."""
    used, spent, raw, table = _charge_and_spent(
        tmp_path, sorted(b"user%d" % i for i in range(3000)))
    assert all(blk.heads is None and blk.klist is not None for blk in table.blocks)
    assert spent > 1.3 * raw  # (the objects matter: charging only the bytes undercounts)
    assert 0.9 * spent <= used <= 1.1 * spent, (used, spent, raw)


def _cloud_table(tmp_path, cache: BlockCache, name: str = "t"):
    """A table read as a cloud table is (through a DataCache), with the benchmark's rows."""
    from rocksmash.data_cache import DataCache

    path = str(tmp_path / f"{name}.sst")
    b = TableBuilder(path, block_size=4096, compression="lz4", bloom_bits_per_key=10)
    keys = [b"user%020d" % i for i in range(6000)]
    values = [os.urandom(50) * 2 for _ in keys]
    b.add_unique(keys, list(range(1, 6001)), values)
    b.finish(sync=False)
    dc = DataCache(str(tmp_path / f"{name}-dc"), 1 << 30, admission="always")
    return Table(1, LocalFile(path), cache, data_cache=dc), dc, dict(zip(keys, values))


def _read_all(table: Table, rows: dict[bytes, bytes]) -> None:
    from rocksmash.bloom import split_hash

    for k, v in rows.items():
        assert table.get(k, 1 << 56, *split_hash(k)) == v


def test_cloud_blocks_the_decoded_form_cannot_hold_stay_stored(tmp_path):
    # A budget of about 40 decoded blocks, a table of 200, 80 of them read over and over:
    # with the stored form the cache holds more blocks in the same bytes, reads stay
    # right, and the hot pass loads fewer blocks from the DataCache (the next tier: a
    # GET for a cloud table).
    loads, held = {}, {}
    for stored in (False, True):
        cache = BlockCache(40 * 7000, stored=stored)
        table, dc, rows = _cloud_table(tmp_path, cache, f"t{int(stored)}")
        hot = {k: v for k, v in rows.items() if k <= table.index_keys[79]}  # 80 blocks
        _read_all(table, rows)
        _read_all(table, hot)
        before = dc.stats()["hits"]
        _read_all(table, hot)
        loads[stored] = dc.stats()["hits"] - before
        s = cache.stats()
        assert s["used"] <= s["capacity"] and s["used"] == s["used_decoded"] + s["used_stored"]
        held[stored] = sum(b is not None for b in table.blocks)
        if stored:
            held[stored] += sum(x is not None for x in table.stored)
            assert s["demoted"] > 0 and s["stored_hits"] > 0 and s["used_stored"] > 0
            assert s["used_decoded"] <= s["capacity"] * 0.5
        else:
            assert table.stored is None and s["used_stored"] == 0 and s["stored_hits"] == 0
        cache.drop_table(table)
        assert cache.used == 0 and cache.used_stored == 0
        dc.close()
    assert held[True] > 2 * held[False], held
    assert loads[True] < loads[False] * 0.8, loads


def test_a_cache_that_holds_everything_decoded_demotes_nothing(tmp_path):
    cache = BlockCache(1 << 30)
    table, dc, rows = _cloud_table(tmp_path, cache)
    _read_all(table, rows)
    _read_all(table, rows)
    s = cache.stats()
    assert s["demoted"] == 0 and s["used_stored"] == 0 and s["stored_hits"] == 0
    assert all(b is not None for b in table.blocks)
    dc.close()
