"""One local budget (``cache_size="rest"``): local tables, MetaCache and DataCache share
``local_budget``, the DataCache getting what the others leave, and stats show the split."""

from __future__ import annotations

import random
import uuid

import pytest

import rocksmash
from rocksmash import InvalidArgumentError
from rocksmash.data_cache import DataCache

OPTS = dict(memtable_size="64KiB", block_size=512, target_file_size="256KiB",
            cloud_target_file_size="512KiB", cloud_fetch_size=0, level_base_size="256KiB",
            l0_compaction_trigger=2, wal_shipping="off")


def test_local_tables_and_caches_share_one_budget(tmp_path):
    budget = 1 << 20
    keys = [b"key%07d" % i for i in range(40000)]
    rng = random.Random(1)
    values = {k: rng.randbytes(60) for k in keys}  # incompressible: 2.8 MB of tables
    opts = dict(OPTS, object_store=f"memory://{uuid.uuid4().hex}/db", local_budget=budget,
                cache_size="rest", block_cache_size="64KiB")
    with rocksmash.open(tmp_path / "db", **opts) as db:
        for i in range(0, len(keys), 1000):
            db.update({k: values[k] for k in keys[i:i + 1000]})
        db.compact_range()
        for _ in range(2):  # second-hit admission: the second pass fills the cache
            assert db.multi_get(keys[::7]) == [values[k] for k in keys[::7]]
        fp = db.stats()["cloud"]["footprint"]
        assert fp["budget"] == budget and fp["table_bytes"] > 2 * budget  # it must tier
        # (fitted at the last flush or compaction; metadata of replaced tables may have
        # gone since, which only leaves room to spare)
        assert fp["data_cache_capacity"] <= budget - fp["local_tables"] - fp["meta_cache"]
        assert fp["data_cache"] > budget // 4  # the cache did fill up to its share ...
        assert fp["total"] == fp["local_tables"] + fp["meta_cache"] + fp["data_cache"]
        assert fp["total"] <= budget  # ... and the three together stay within the budget
    with rocksmash.open(tmp_path / "db", **opts) as db:  # reopened: fitted again, kept
        fp = db.stats()["cloud"]["footprint"]
        assert fp["total"] <= budget and fp["data_cache"] > budget // 4
        assert db.get(keys[7]) == values[keys[7]]


def test_a_budget_smaller_than_the_tables_leaves_the_cache_its_minimum(tmp_path):
    opts = dict(OPTS, object_store=f"memory://{uuid.uuid4().hex}/db", local_budget=1,
                cache_size="rest")
    with rocksmash.open(tmp_path / "db", **opts) as db:
        db.update({b"k%05d" % i: b"v" * 50 for i in range(5000)})
        db.compact_range()
        fp = db.stats()["cloud"]["footprint"]
        assert fp["data_cache_capacity"] == rocksmash.options.MIN_REST_CACHE


def test_cache_size_is_a_size_or_rest(tmp_path):
    with pytest.raises(InvalidArgumentError, match="cache_size"):
        rocksmash.open(tmp_path / "db", object_store="memory://x/db", cache_size="remainder")


def test_a_shrinking_data_cache_evicts_to_its_new_capacity(tmp_path):
    with DataCache(str(tmp_path / "dc"), 1 << 20, admission="always",
                   segment_size=16 << 10) as dc:
        for b in range(200):
            assert dc.put(1, b, bytes([b % 256]) * 4000)
        dc.set_capacity(100 << 10)
        st = dc.stats()
        assert st["disk_bytes"] <= 100 << 10 and st["capacity"] == 100 << 10
        kept = dc.cached_blocks(1)
        assert kept and all(dc.get(1, b) == bytes([b % 256]) * 4000 for b in kept)
        with pytest.raises(InvalidArgumentError):
            dc.set_capacity(0)


def gets(db):
    return db.stats()["cloud"]["object_store"]["requests"].get("get", 0)


@pytest.mark.parametrize("aware", [True, False])
def test_hot_keys_stay_local_across_a_full_compaction_within_the_budget(tmp_path, aware):
    """Heat survives compaction in a one-budget cache: the compaction puts the hot ranges
    of its output into the DataCache it then fits to the budget, so the hot keys are read
    back with next to no GETs (without the compaction-aware fill: about one GET each)."""
    rng = random.Random(2)
    keys = [b"key%07d" % i for i in range(40000)]
    opts = dict(OPTS, object_store=f"memory://{uuid.uuid4().hex}/db", local_budget=1 << 20,
                cache_size="rest", block_cache_size="16KiB", compaction_aware_cache=aware,
                fencing_check_interval=3600)
    hot = keys[::131]  # about 300 keys spread over the whole key space
    with rocksmash.open(tmp_path / "db", **opts) as db:
        for i in range(0, len(keys), 1000):
            db.update({k: rng.randbytes(60) for k in keys[i:i + 1000]})
        db.compact_range()
        for _ in range(3):  # hot: read again and again
            for k in hot:
                db.get(k)
        rewritten = {k: rng.randbytes(60) for k in rng.sample(keys, len(keys) // 5)}
        db.update(rewritten)
        db.compact_range()  # rewrites every table: new numbers, nothing cached by name
        before = gets(db)
        for k in hot:
            assert db.get(k) is not None and (k not in rewritten or db.get(k) == rewritten[k])
        fetched = gets(db) - before
        assert db.stats()["cloud"]["footprint"]["total"] <= 1 << 20
    if aware:
        assert fetched <= len(hot) // 10
    else:
        assert fetched >= len(hot) // 2
