"""Golden files of the KV records: a format change must be deliberate (and get a new "v")."""

from __future__ import annotations

import os

import pytest

from bespokv.training.errors import CheckpointError, InvalidArgumentError
from bespokv.training.records import (
    CheckpointRecord,
    ChunkRecord,
    object_key,
    parse_object_key,
    split_checkpoint_id,
    step_of,
)

DATA = os.path.join(os.path.dirname(__file__), "testdata")


def golden(name: str) -> bytes:
    with open(os.path.join(DATA, name), "rb") as f:
        return f.read()


def test_checkpoint_record_golden():
    raw = golden("checkpoint_record_v1.json")
    rec = CheckpointRecord.decode(raw)
    assert rec == CheckpointRecord("committed", "18f00000000-0123456789ab", 100, 1700000000.5, 1700021600.5,
                                   1700000042.25, 1048576, 104857, 943719, 3, 1)
    assert rec.encode() == raw


def test_chunk_record_golden():
    raw = golden("chunk_record_v1.json")
    rec = ChunkRecord.decode(raw)
    assert rec.token == "00112233aabbccdd" and rec.uploaded and rec.size == 8 << 20
    assert rec.holders == ("18f00000000-0123456789ab", "18f00000001-ba9876543210")
    assert rec.encode() == raw and rec.etag is None  # written before etags were kept


def test_chunk_record_with_etag_golden():
    """An uploaded chunk's record keeps the store's etag (what a deduplicating save's HEAD
    must find); the field is absent, not null, when unknown, so older records keep their bytes."""
    raw = golden("chunk_record_v1_etag.json")
    rec = ChunkRecord.decode(raw)
    assert rec == ChunkRecord("00112233aabbccdd", "live", True, 8 << 20, ("18f00000000-0123456789ab",),
                              "9e107d9d372bb6826bd81d3542a419d6")
    assert rec.encode() == raw
    with pytest.raises(CheckpointError):
        ChunkRecord.decode(raw.replace(b'"9e107d9d372bb6826bd81d3542a419d6"', b"5"))


@pytest.mark.parametrize("raw", [b"not json", b"[]", b'{"x":1}', b'{"v":2,"state":"committed"}', b'{"v":1,"bogus":1}'])
def test_bad_records_are_refused(raw):
    with pytest.raises(CheckpointError):
        CheckpointRecord.decode(raw)
    with pytest.raises(CheckpointError):
        ChunkRecord.decode(raw)


def test_ids_and_object_keys():
    assert split_checkpoint_id("a/b/step-3") == ("a/b", "step-3") and step_of("step-3") == 3
    assert step_of("final") is None
    with pytest.raises(InvalidArgumentError):
        split_checkpoint_id("nope")
    d = "ab" + "0" * 62
    assert parse_object_key(object_key(d, "t0k")) == (d, "t0k")
    assert parse_object_key("chunks/zz/" + d + ".t") is None and parse_object_key("other") is None
