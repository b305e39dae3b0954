"""The key cache (rocksmash/key_cache.py): rows of cloud tables on local disk. Its format
(golden file), a collision or a torn or flipped record is a miss and never a wrong value,
and in a database: hot rows answer reads without a GET, and they follow a full
compaction into the new tables."""

from __future__ import annotations

import os
import shutil
import uuid

import pytest

import rocksmash
from rocksmash import InvalidArgumentError
from rocksmash.key_cache import (ROW_HEADER_SIZE, KeyCache, decode_row, encode_row, slot)

TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")
#: The golden segment's rows: (table, key, seq, value or None for a deletion).
GOLDEN_ROWS = [(17, b"apple", 7, b"red" * 20), (17, b"banana", 9, None),
               (18, b"cherry", 5, b"dark red")]


def _segments(d: str) -> list[str]:
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".seg"))


def test_row_layout():
    row = encode_row(b"key", 0x0102030405060708, b"val")
    assert row == (b"\x08\x07\x06\x05\x04\x03\x02\x01" b"\x01" b"\x03\x00\x00\x00"
                   b"key" b"val")
    assert decode_row(row) == (b"key", 0x0102030405060708, b"val")
    assert decode_row(encode_row(b"k", 3, None)) == (b"k", 3, None)
    assert decode_row(encode_row(b"k", 3, b"")) == (b"k", 3, b"")
    assert len(encode_row(b"k", 3, None)) == ROW_HEADER_SIZE + 1
    for bad in (row[:5], row[:8] + b"\x02" + row[9:], encode_row(b"k", 3, None) + b"x",
                row[:9] + b"\xff\x00\x00\x00" + row[13:]):
        assert decode_row(bad) is None


def test_golden_segment(tmp_path):
    """The frozen layout: a segment written now equals the golden one byte for byte, and
    the golden one reads back (by scan: it comes without an INDEX)."""
    d = str(tmp_path / "new")
    kc = KeyCache(d, 1 << 20)
    for table, key, seq, value in GOLDEN_ROWS:
        assert kc.put(table, key, seq, value)
    kc.close()
    golden = os.path.join(TESTDATA, "keycache.seg")
    if os.environ.get("ROCKSMASH_REGEN_GOLDEN"):
        shutil.copyfile(_segments(d)[0], golden)
    with open(_segments(d)[0], "rb") as f, open(golden, "rb") as g:
        assert f.read() == g.read()
    old = tmp_path / "old"
    old.mkdir()
    shutil.copyfile(golden, old / "00000001.seg")
    kc = KeyCache(str(old), 1 << 20)
    assert kc.store.opened_from == "scan"
    for table, key, seq, value in GOLDEN_ROWS:
        assert kc.get(table, key) == (seq, value)
    assert kc.get(17, b"cherry") is None and kc.get(19, b"apple") is None
    kc.close()


def _colliding_keys() -> tuple[bytes, bytes]:
    seen: dict[int, bytes] = {}
    i = 0
    while True:
        k = b"user%d" % i
        s = slot(k)
        if s in seen:
            return seen[s], k
        seen[s] = k
        i += 1


def test_a_slot_collision_is_a_miss_not_the_other_keys_value(tmp_path):
    a, b = _colliding_keys()
    assert a != b and slot(a) == slot(b)
    kc = KeyCache(str(tmp_path), 1 << 20)
    kc.put(1, a, 5, b"value of a")
    assert kc.get(1, a) == (5, b"value of a")
    assert kc.get(1, b) is None  # never a's value
    kc.put(1, b, 6, None)  # b takes the slot
    assert kc.get(1, b) == (6, None) and kc.get(1, a) is None
    assert kc.stats()["collisions"] == 2
    kc.close()


@pytest.mark.parametrize("with_index", [False, True])
def test_flipped_or_torn_records_are_misses(tmp_path, with_index):
    d = str(tmp_path)
    kc = KeyCache(d, 1 << 20)
    keys = [b"key%04d" % i for i in range(50)]
    for i, k in enumerate(keys):
        kc.put(3, k, i + 1, b"v" * 40 + k)
    if with_index:
        kc.close()  # INDEX written: it matches the segment sizes, so it is used
    else:
        kc.store._abandon()  # killed: no INDEX, the segments are scanned
    seg = _segments(d)[0]
    data = bytearray(open(seg, "rb").read())
    rec = 20 + ROW_HEADER_SIZE + 7 + 47  # record header + row header + key + value
    data[10 * rec + 30] ^= 0x01  # a bit in key 10's record
    data[20 * rec + 25] ^= 0x40  # and in key 20's
    with open(seg, "wb") as f:
        f.write(data if with_index else data[:-5])  # and (killed) a torn last record
    kc = KeyCache(d, 1 << 20)
    assert kc.store.opened_from == ("index" if with_index else "scan")
    for i, k in enumerate(keys):
        got = kc.get(3, k)
        # (a scan stops at a segment's first bad record: the rest is not trusted)
        if (i in (10, 20)) if with_index else i >= 10:
            assert got is None, i
        else:
            assert got == (i + 1, b"v" * 40 + k), i
    assert kc.get(3, keys[10]) is None  # (dropped, not retried)
    kc.close()


OPTS = dict(memtable_size="64KiB", block_size=512, target_file_size="256KiB",
            cloud_target_file_size="256KiB", cloud_fetch_size=0, level_base_size="256KiB",
            l0_compaction_trigger=2, wal_shipping="off", local_budget=0,
            block_cache_size=0, cache_size="256KiB", background_processes=False)


def _gets(db) -> int:
    return db.stats()["cloud"]["object_store"]["requests"].get("get", 0)


def _value(i: int, gen: int) -> bytes:
    return b"g%d-" % gen + b"value%06d" % i * 5


@pytest.mark.parametrize("aware", [True, False])
def test_hot_rows_survive_a_full_compaction(tmp_path, aware):
    """Hot keys spread over the whole key space (one per several blocks: the DataCache
    cannot hold their blocks) are read back after a full compaction that rewrote every
    table with 0 GETs: their rows followed into the new tables. Without the
    compaction-aware fill every one of them costs a GET."""
    n = 20000
    hot = list(range(0, n, 97))  # 207 keys, each in its own block
    opts = dict(OPTS, object_store=f"memory://{uuid.uuid4().hex}/db", key_cache_size="50%",
                compaction_aware_cache=aware)
    with rocksmash.open(tmp_path / "db", **opts) as db:
        for lo in range(0, n, 1000):
            db.update({b"key%06d" % i: _value(i, 1) for i in range(lo, lo + 1000)})
        db.compact_range()
        for _ in range(2):  # the first read brings each row in, the second hits it
            for i in hot:
                assert db.get(b"key%06d" % i) == _value(i, 1)
        before = _gets(db)
        for i in hot:
            assert db.get(b"key%06d" % i) == _value(i, 1)
        assert _gets(db) == before  # from the key cache (no block cache here)
        # Rewrite a third of the keys (some hot ones too) and delete a few hot ones.
        db.update({b"key%06d" % i: _value(i, 2) for i in range(0, n, 3)})
        for i in hot[::10]:
            db.delete(b"key%06d" % i)
        db.compact_range()
        s = db.stats()
        assert s["cloud"]["key_cache"]["entries"] >= (len(hot) - len(hot[::10]) if aware else 0)
        before = _gets(db)
        for i in hot:
            want = None if i in hot[::10] else _value(i, 2 if i % 3 == 0 else 1)
            assert db.get(b"key%06d" % i) == want
        after = _gets(db) - before
        fp = s["cloud"]["footprint"]
        assert fp["key_cache"] > 0 and fp["total"] == (fp["local_tables"] + fp["meta_cache"]
                                                       + fp["data_cache"] + fp["key_cache"])
    if aware:
        assert after == 0
    else:
        assert after >= len(hot) * 9 // 10 - 5  # (the few absent keys need no GET)


def test_key_cache_size_is_a_part_of_the_cache(tmp_path):
    store = f"memory://{uuid.uuid4().hex}/db"
    with pytest.raises(InvalidArgumentError, match="key_cache_size"):
        rocksmash.open(tmp_path / "a", object_store=store, cache_size="1MiB",
                       key_cache_size="1MiB")
    with pytest.raises(InvalidArgumentError, match="key_cache_size"):
        rocksmash.open(tmp_path / "b", object_store=store, key_cache_size="x%")
    with rocksmash.open(tmp_path / "c", object_store=store, cache_size="1MiB",
                        key_cache_size="25%") as db:
        s = db.stats()["cloud"]
        assert s["key_cache"]["capacity"] == 256 << 10
        assert s["data_cache"]["capacity"] == 768 << 10
    # Reopened without it, the key cache's directory goes (it holds nothing usable).
    assert os.path.isdir(tmp_path / "c" / "cloud-rows")
    with rocksmash.open(tmp_path / "c", object_store=store, cache_size="1MiB") as db:
        assert db.stats()["cloud"]["key_cache"] is None
    assert not os.path.exists(tmp_path / "c" / "cloud-rows")


def test_a_row_newer_than_a_snapshot_is_not_served_to_it(tmp_path):
    """One cloud table holds two versions of a key (a snapshot kept the old one); the key
    cache holds the newest. A read at the snapshot gets the old one, through the block."""
    opts = dict(OPTS, object_store=f"memory://{uuid.uuid4().hex}/db", key_cache_size="50%")
    with rocksmash.open(tmp_path / "db", **opts) as db:
        db.put(b"k", b"old")
        snap = db.snapshot()
        db.put(b"k", b"new")
        db.delete(b"gone")
        db.compact_range()
        assert db.stats()["levels"][0]["files"] == 0  # both versions are in the cloud
        assert db.get(b"k") == b"new" and db.get(b"k") == b"new"  # the second: a row hit
        assert db.stats()["cloud"]["key_cache"]["hits"] == 1
        assert snap.get(b"k") == b"old"
        assert snap.get(b"k") == b"old"
        snap.close()


def test_keys_the_block_cache_answers_are_sampled_and_survive_a_compaction(tmp_path):
    """With a block cache that holds every block, the key cache sees a hot key's reads
    only by sampling (one block-cache hit in SAMPLE_EVERY); that is enough for the hot
    keys to be there, and to follow the full compaction that empties the block cache of
    the old tables, so they read back with 0 GETs."""
    n = 20000
    hot = list(range(0, n, 97))
    opts = dict(OPTS, object_store=f"memory://{uuid.uuid4().hex}/db", key_cache_size="90%",
                block_cache_size="8MiB")  # (a DataCache of 26 KiB: too small for the blocks)
    with rocksmash.open(tmp_path / "db", **opts) as db:
        for lo in range(0, n, 1000):
            db.update({b"key%06d" % i: _value(i, 1) for i in range(lo, lo + 1000)})
        db.compact_range()
        assert sum(1 for _ in db.scan()) == n  # every block into the block cache, no row
        assert db.stats()["cloud"]["key_cache"]["entries"] == 0
        for _ in range(8):  # 207 keys a round: the sampled ones rotate through all
            for i in hot:
                assert db.get(b"key%06d" % i) == _value(i, 1)
        assert db._data_cache.rows.wait_for_writes(60)  # (sampled rows: fetch threads)
        kc = db.stats()["cloud"]["key_cache"]
        assert kc["sampled"] >= 7 * len(hot) // 4 - 1 and kc["entries"] >= len(hot)
        db.update({b"key%06d" % i: _value(i, 2) for i in range(0, n, 3)})
        db.compact_range()
        before = _gets(db)
        for i in hot:
            assert db.get(b"key%06d" % i) == _value(i, 2 if i % 3 == 0 else 1)
        assert _gets(db) == before
