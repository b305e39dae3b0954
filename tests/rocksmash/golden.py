"""Fixed inputs for the golden files of every format (see scripts/gen_golden.py and
test_golden.py). The inputs and expected contents live here; the bytes in testdata/."""

from __future__ import annotations

import os

from rocksmash.range_del import RangeEnd

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")

#: The table's entries: (key, seq, value or None for a deletion), in table order.
TABLE_ENTRIES = [(b"apple", 7, b"red" * 20), (b"banana", 9, None), (b"banana", 3, b"yellow"),
                 (b"cherry", 5, b"dark red" * 30)] + [
                (b"key%04d" % i, 100 + i, b"value%04d" % i * 3) for i in range(200)]
#: The WAL segment: number 12, flushing to table 13, first sequence 41, two batches.
#: ``wal.log`` is its format 1 file (written before range deletions; only read now).
WAL = dict(number=12, table_number=13, first_seq=41,
           batches=[(41, [(b"a", b"1"), (b"b", None)]), (43, [(b"c", b"3" * 100)])])
#: A WAL segment of format 2 (``wal2.log``): the same batches, then one with a range delete.
WAL2 = dict(WAL, batches=WAL["batches"] + [
    (44, [(b"b", b"2"), (b"a", RangeEnd(b"c")), (b"c", None)])])
#: A table with range tombstones (``table-ranges.sst``, format 2): entries as above, and
#: (start, end, seq) tombstones; one of them covers no key of its own table.
RANGE_TABLE_ENTRIES = [(b"a", 9, b"new"), (b"a", 4, b"old"), (b"b", 3, b"covered"),
                       (b"d", 8, None)]
RANGE_TABLE_TOMBSTONES = [(b"a", b"c", 6), (b"x", b"z\x00", 7)]
#: The manifest: number 20, snapshot then one edit.
MANIFEST_NUMBER = 20
#: The cloud objects.
EPOCH_DOC = {"format_version": 2, "epoch": 3, "owner": "host:1", "claimed": 1.5,
             "db_id": "0123456789abcdef0123456789abcdef"}
MIRROR_DOC = {"format_version": 2, "generation": 4, "epoch": 3,
              "db_id": "0123456789abcdef0123456789abcdef", "num_levels": 4, "last_seq": 300,
              "next_file": 31, "files": [[3, 17, 5000, "6b6579", "6b657a", 1, 300, 3]]}
#: A mirror of format 3: a cloud table, the backup of a local one, the WAL from segment 25.
MIRROR3_DOC = {"format_version": 3, "generation": 5, "epoch": 3,
               "db_id": "0123456789abcdef0123456789abcdef", "num_levels": 4, "last_seq": 320,
               "next_file": 33, "log_number": 25, "wal_fences": [1, 9],
               "files": [[0, 23, 900, "61", "63", 301, 310, 3, 0],
                         [3, 17, 5000, "6b6579", "6b657a", 1, 300, 3, 1]]}
#: A pin (pins/<pin>) naming two cloud tables, and the CHECKPOINT file of its checkpoint.
PIN_DOC = {"format_version": 1, "pin": "00112233445566778899aabbccddeeff",
           "db_id": "0123456789abcdef0123456789abcdef", "epoch": 3, "created": 1.5,
           "checkpoint": "host:/backups/ck1",
           "keys": ["tables/000017-e3.sst", "tables/000019-e3.sst"]}
CHECKPOINT_DOC = {"format_version": 1, "pin": "00112233445566778899aabbccddeeff",
                  "source_db_id": "0123456789abcdef0123456789abcdef"}
#: WAL objects: a fence, and segment 12's two batches (the golden WAL segment's records).
WAL_FENCE_HEADER = {"format_version": 1, "kind": "fence",
                    "db_id": "0123456789abcdef0123456789abcdef", "epoch": 3}
WAL_RECORDS_HEADER = {"format_version": 1, "kind": "records",
                      "db_id": "0123456789abcdef0123456789abcdef", "epoch": 3, "segment": 12,
                      "table": 13, "first_seq": 41, "offset": 40}


def build(tmp: str) -> dict[str, str]:
    """Write one file of each format under ``tmp``; return {golden name: path}."""
    from rocksmash.checkpoint import _write_checkpoint_file
    from rocksmash.cloud import WalObject, encode_object
    from rocksmash.data_cache import DataCache
    from rocksmash.env import LocalFile
    from rocksmash.manifest import Manifest
    from rocksmash.meta_cache import encode_table_meta
    from rocksmash.table import Table
    from rocksmash.table_builder import TableBuilder
    from rocksmash.version import CLOUD, FileMeta, Version, VersionEdit
    from rocksmash.wal import WalWriter
    from rocksmash.write_batch import encode_batch

    out: dict[str, str] = {}
    table = os.path.join(tmp, "000013.sst")
    b = TableBuilder(table, block_size=512, compression="lz4", bloom_bits_per_key=10)
    for key, seq, value in TABLE_ENTRIES:
        b.add(key, seq, value)
    b.finish()
    out["table.sst"] = table
    ranged = os.path.join(tmp, "000014.sst")
    b = TableBuilder(ranged, block_size=512, compression="lz4", bloom_bits_per_key=10)
    for key, seq, value in RANGE_TABLE_ENTRIES:
        b.add(key, seq, value)
    b.add_ranges(RANGE_TABLE_TOMBSTONES)
    b.finish()
    out["table-ranges.sst"] = ranged

    os.makedirs(os.path.join(tmp, "wal2"))
    wal = WalWriter(os.path.join(tmp, "wal2"), WAL2["number"], WAL2["table_number"],
                    WAL2["first_seq"])
    for seq, ops in WAL2["batches"]:
        wal.add(encode_batch(seq, ops))
    wal.close()
    out["wal2.log"] = wal.path
    wal = WalWriter(tmp, WAL["number"], WAL["table_number"], WAL["first_seq"])
    for seq, ops in WAL["batches"]:  # (wal.log's records: the WAL object's below)
        wal.add(encode_batch(seq, ops))
    wal.close()

    mdir = os.path.join(tmp, "manifest")
    os.makedirs(mdir)
    v = Version([[FileMeta(13, 4096, b"apple", b"key0199", 3, 299)], [],
                 [FileMeta(17, 5000, b"key", b"kez", 1, 300, None, CLOUD, 3)], []])
    m = Manifest.create(mdir, MANIFEST_NUMBER, v, log_number=12, next_file=21, last_seq=299,
                        epoch=3, db_id="0123456789abcdef0123456789abcdef", mirror_gen=4)
    m.log(VersionEdit(added=[(1, FileMeta(19, 777, b"a", b"c", 41, 43))], deleted=[(0, 13)],
                      log_number=14, next_file=22, last_seq=43, mirror_gen=4))
    m.close()
    out["MANIFEST"] = os.path.join(mdir, f"MANIFEST-{MANIFEST_NUMBER:06d}")

    t = Table(13, LocalFile(table), None)
    meta = os.path.join(tmp, "table.mashmeta")
    with open(meta, "wb") as f:
        f.write(encode_table_meta(t.meta()))
    out["table.mashmeta"] = meta

    cdir = os.path.join(tmp, "cache")
    dc = DataCache(cdir, 1 << 20, admission="always")
    for block in range(t.nblocks):
        dc.put(13, block, t.fetch(block))
    dc.close()
    t.close()
    segments = sorted(n for n in os.listdir(cdir) if n.endswith(".seg"))
    out["datacache.seg"] = os.path.join(cdir, segments[0])
    out["datacache.INDEX"] = os.path.join(cdir, "INDEX")

    for name, doc in (("epoch.object", EPOCH_DOC), ("mirror.object", MIRROR_DOC),
                      ("mirror3.object", MIRROR3_DOC), ("pin.object", PIN_DOC)):
        p = os.path.join(tmp, name)
        with open(p, "wb") as f:
            f.write(encode_object(doc))
        out[name] = p

    os.makedirs(os.path.join(tmp, "checkpoint"))
    _write_checkpoint_file(os.path.join(tmp, "checkpoint"), CHECKPOINT_DOC)
    out["CHECKPOINT"] = os.path.join(tmp, "checkpoint", "CHECKPOINT")

    with open(wal.path, "rb") as f:
        records = f.read()[40:]
    header = dict(WAL_RECORDS_HEADER, end=40 + len(records))
    for name, obj in (("wal-fence.object", WalObject(9, WAL_FENCE_HEADER, b"")),
                      ("wal-records.object", WalObject(10, header, records))):
        p = os.path.join(tmp, name)
        with open(p, "wb") as f:
            f.write(obj.encode())
        out[name] = p
    return out
