"""Golden files: one checked-in example of every on-disk and in-bucket format
(tests/rocksmash/testdata/, made by scripts/gen_golden.py from tests/rocksmash/golden.py).

Each is decoded by today's code and compared with its known contents, and today's encoder
must reproduce it byte for byte, so no format changes by accident. A deliberate change
bumps its number in rocksmash/formats.py, updates docs/format.md, and reruns the script.
"""

from __future__ import annotations

import os

import pytest

from rocksmash.bloom import split_hash
from rocksmash.checkpoint import read_checkpoint
from rocksmash.cloud import MIRROR_FORMATS, CloudTier, WalObject, decode_object
from rocksmash.log_format import read_records
from rocksmash.data_cache import DataCache
from rocksmash.env import LocalFile
from rocksmash.manifest import load_manifest
from rocksmash.meta_cache import decode_table_meta
from rocksmash.pins import _decode as decode_pin
from rocksmash.table import Table
from rocksmash.wal import read_segment
from rocksmash.write_batch import decode_batch

from .golden import (CHECKPOINT_DOC, EPOCH_DOC, PIN_DOC, MANIFEST_NUMBER, MIRROR3_DOC, MIRROR_DOC, OUT,
                     RANGE_TABLE_ENTRIES, RANGE_TABLE_TOMBSTONES, TABLE_ENTRIES, WAL, WAL2,
                     WAL_FENCE_HEADER, WAL_RECORDS_HEADER, build)


def golden(name):
    return os.path.join(OUT, name)


def test_encoders_reproduce_every_golden_file(tmp_path):
    for name, path in build(str(tmp_path)).items():
        with open(path, "rb") as f, open(golden(name), "rb") as g:
            assert f.read() == g.read(), f"{name} is no longer encoded as before"


def test_table_decodes():
    t = Table(13, LocalFile(golden("table.sst")), None)
    try:
        assert list(t.entries()) == [(k, -s, v) for k, s, v in TABLE_ENTRIES]
        assert t.props["smallest"] == b"apple".hex() and t.props["count"] == len(TABLE_ENTRIES)
        h = split_hash(b"banana")
        assert t.get(b"banana", 100, *h) is None and t.get(b"banana", 5, *h) == b"yellow"
    finally:
        t.close()


def test_mashmeta_decodes():
    meta = decode_table_meta(open(golden("table.mashmeta"), "rb").read())
    t = Table(13, LocalFile(golden("table.sst")), None)
    try:
        want = t.meta()
        assert list(meta.index_keys) == list(want.index_keys)
        assert (list(meta.offsets), list(meta.sizes), meta.filter, meta.props, meta.data_end) == (
            list(want.offsets), list(want.sizes), want.filter, want.props, want.data_end)
    finally:
        t.close()


@pytest.mark.parametrize("name,want", [("wal.log", WAL), ("wal2.log", WAL2)])
def test_wal_segment_decodes(name, want):
    """Format 1 (written by earlier releases, no encoder any more) and format 2."""
    seg = read_segment(golden(name))
    assert (seg.number, seg.table_number, seg.first_seq, seg.torn) == (
        want["number"], want["table_number"], want["first_seq"], False)
    assert [decode_batch(r) for r in seg.records] == want["batches"]
    assert open(golden(name), "rb").read()[8] == (1 if name == "wal.log" else 2)


def test_range_table_decodes():
    t = Table(14, LocalFile(golden("table-ranges.sst")), None)
    try:
        assert list(t.entries()) == [(k, -s, v) for k, s, v in RANGE_TABLE_ENTRIES]
        assert t.ranges == RANGE_TABLE_TOMBSTONES
        assert (t.props["format_version"], t.props["smallest"], t.props["largest"]) == (
            2, b"a".hex(), b"z".hex())  # the key range covers the tombstones
        assert t.get_entry(b"b", 10) == (3, b"covered")  # (the reader applies tombstones)
        assert open(golden("table-ranges.sst"), "rb").read()[-12:-8] == b"\x02\0\0\0"
        assert list(t.scan(None, None, False, 10)) == [([b"a", b"b", b"d"],
                                                        [b"new", None, None])]
    finally:
        t.close()


def test_manifest_decodes(tmp_path):
    name = f"MANIFEST-{MANIFEST_NUMBER:06d}"
    (tmp_path / name).write_bytes(open(golden("MANIFEST"), "rb").read())
    (tmp_path / "CURRENT").write_text(name + "\n")
    state = load_manifest(str(tmp_path))
    assert (state.log_number, state.next_file, state.last_seq, state.epoch, state.db_id,
            state.mirror_gen) == (14, 22, 43, 3, "0123456789abcdef0123456789abcdef", 4)
    files = [(lvl, f.number, f.smallest, f.largest, f.tier, f.epoch)
             for lvl, f in state.version.files()]
    assert files == [(1, 19, b"a", b"c", 0, 0), (2, 17, b"key", b"kez", 1, 3)]


def test_data_cache_decodes(tmp_path):
    d = tmp_path / "cache"
    d.mkdir()
    for name in ("datacache.seg", "datacache.INDEX"):
        target = "INDEX" if name.endswith("INDEX") else "00000001.seg"
        (d / target).write_bytes(open(golden(name), "rb").read())
    segs = sorted(n for n in os.listdir(d) if n.endswith(".seg"))
    assert segs  # the golden segment's name is the DataCache's first
    t = Table(13, LocalFile(golden("table.sst")), None)
    dc = DataCache(str(d), 1 << 20, admission="always")
    try:
        for block in range(t.nblocks):
            assert dc.get(13, block) == t.fetch(block)
    finally:
        dc.close()
        t.close()


@pytest.mark.parametrize("name,doc", [("epoch.object", EPOCH_DOC),
                                      ("mirror.object", MIRROR_DOC),
                                      ("mirror3.object", MIRROR3_DOC)])
def test_cloud_objects_decode(name, doc):
    assert decode_object(open(golden(name), "rb").read(), name, MIRROR_FORMATS) == doc


def test_pin_and_checkpoint_file_decode():
    assert decode_pin(open(golden("pin.object"), "rb").read(), PIN_DOC["pin"]) == PIN_DOC
    assert read_checkpoint(OUT) == CHECKPOINT_DOC


def test_mirror_files_of_both_formats():
    (v2,) = CloudTier.mirror_files(MIRROR_DOC)
    assert (v2[0], v2[1].number, v2[1].tier, v2[1].epoch) == (3, 17, 1, 3)
    backup, cloud = CloudTier.mirror_files(MIRROR3_DOC)
    assert (backup[0], backup[1].number, backup[1].tier, backup[1].object_key) == (
        0, 23, 0, "tables/000023-e3.sst")
    assert (cloud[0], cloud[1].number, cloud[1].tier) == (3, 17, 1)


def test_wal_objects_decode():
    fence = WalObject.decode(9, open(golden("wal-fence.object"), "rb").read())
    assert (fence.kind, fence.header, fence.records) == ("fence", WAL_FENCE_HEADER, b"")
    obj = WalObject.decode(10, open(golden("wal-records.object"), "rb").read())
    assert obj.kind == "records" and obj.segment == WAL["number"]
    assert obj.header == dict(WAL_RECORDS_HEADER, end=40 + len(obj.records))
    payloads, _, _ = read_records(obj.records)
    assert [decode_batch(p) for p in payloads] == WAL["batches"]
