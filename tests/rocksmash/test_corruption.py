"""Damaged files give the documented behaviour: a torn WAL or manifest tail is dropped
(it was never acknowledged as complete); damage anywhere else raises CorruptionError;
no corrupt value is ever returned."""

from __future__ import annotations

import os

import pytest

import rocksmash
from rocksmash import CorruptionError
from rocksmash.filenames import parse_name
from rocksmash.table_format import FOOTER_SIZE

OPTS = dict(background_processes=False, block_size=256)


def files(path, kind):
    out = []
    for name in sorted(os.listdir(path)):
        p = parse_name(name)
        if p and p[0] == kind:
            out.append(os.path.join(path, name))
    return out


def flip(path, offset, mask=0x40):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ mask]))


def make_db(path, n=300, flush=True):
    with rocksmash.open(path, **OPTS) as db:
        for i in range(n):
            db.put(b"key%04d" % i, b"value-%04d" % i * 3)
        if flush:
            db.flush()
            db.compact_range()


def test_flipped_data_block_is_detected_not_served(tmp_path):
    make_db(tmp_path)
    (table,) = files(tmp_path, "sst")
    flip(table, 100)  # inside the first data block
    with rocksmash.open(tmp_path, **OPTS) as db:
        with pytest.raises(CorruptionError, match="checksum"):
            db.get(b"key0000")
        with pytest.raises(CorruptionError):
            list(db.scan())
        assert db.get(b"key0299") == b"value-0299" * 3  # other blocks still serve


@pytest.mark.parametrize("where", ["footer", "index"])
def test_damaged_table_metadata_refuses_open(tmp_path, where):
    make_db(tmp_path)
    (table,) = files(tmp_path, "sst")
    size = os.path.getsize(table)
    flip(table, size - 3 if where == "footer" else size - FOOTER_SIZE - 40)
    with pytest.raises(CorruptionError):
        rocksmash.open(tmp_path, **OPTS)


def test_truncated_table_refuses_open(tmp_path):
    make_db(tmp_path)
    (table,) = files(tmp_path, "sst")
    os.truncate(table, os.path.getsize(table) // 2)
    with pytest.raises(CorruptionError):
        rocksmash.open(tmp_path, **OPTS)


def test_missing_table_refuses_open(tmp_path):
    make_db(tmp_path)
    os.unlink(files(tmp_path, "sst")[0])
    with pytest.raises(CorruptionError, match="missing"):
        rocksmash.open(tmp_path, **OPTS)


def test_torn_wal_tail_is_dropped(tmp_path):
    make_db(tmp_path, n=50, flush=False)
    (log,) = files(tmp_path, "log")
    os.truncate(log, os.path.getsize(log) - 7)  # the last record is cut short
    with rocksmash.open(tmp_path, **OPTS) as db:
        assert db.get(b"key0048") == b"value-0048" * 3
        assert db.get(b"key0049") is None
        assert db.stats()["torn_wal_tails"] == 1
        db.put(b"after", b"x")
    with rocksmash.open(tmp_path, **OPTS) as db:
        assert db.get(b"after") == b"x" and db.get(b"key0048") is not None


def test_garbage_after_wal_is_dropped(tmp_path):
    make_db(tmp_path, n=50, flush=False)
    (log,) = files(tmp_path, "log")
    with open(log, "ab") as f:
        f.write(b"\x00" * 100 + os.urandom(50))
    with rocksmash.open(tmp_path, **OPTS) as db:
        assert len(list(db.scan())) == 50


def test_damaged_wal_middle_is_corruption(tmp_path):
    make_db(tmp_path, n=50, flush=False)
    (log,) = files(tmp_path, "log")
    flip(log, os.path.getsize(log) // 2)
    with pytest.raises(CorruptionError, match="refusing"):
        rocksmash.open(tmp_path, **OPTS)


def test_torn_manifest_tail_is_ignored(tmp_path):
    make_db(tmp_path)
    (manifest,) = files(tmp_path, "manifest")
    with open(manifest, "ab") as f:
        f.write(b"\x20\x00\x00\x00garbage")  # a record header promising more bytes
    with rocksmash.open(tmp_path, **OPTS) as db:
        assert db.get(b"key0123") == b"value-0123" * 3


def test_damaged_manifest_is_corruption(tmp_path):
    make_db(tmp_path)
    with rocksmash.open(tmp_path, **OPTS) as db:
        db.put(b"more", b"x")
        db.flush()  # a second manifest record follows the snapshot
    (manifest,) = files(tmp_path, "manifest")
    flip(manifest, 12)  # inside the first record's payload
    with pytest.raises(CorruptionError):
        rocksmash.open(tmp_path, **OPTS)


def test_bad_current_is_corruption(tmp_path):
    make_db(tmp_path)
    with open(tmp_path / "CURRENT", "wb") as f:
        f.write(b"not a manifest\n")
    with pytest.raises(CorruptionError, match="CURRENT"):
        rocksmash.open(tmp_path, **OPTS)


def test_newer_format_is_refused(tmp_path):
    make_db(tmp_path, n=5)
    import rocksmash.manifest as m

    old = m.FORMAT_VERSION
    m.FORMAT_VERSION = old + 1
    try:
        with rocksmash.open(tmp_path, **OPTS):
            pass
    finally:
        m.FORMAT_VERSION = old
    with pytest.raises(rocksmash.NewerFormatError, match="newer"):
        rocksmash.open(tmp_path, **OPTS)
