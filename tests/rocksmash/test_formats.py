"""Unit tests of the on-disk building blocks: record framing, write batches, blocks,
bloom filters, tables."""

from __future__ import annotations

import os
import struct

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from rocksmash import CorruptionError
from rocksmash.block import Block, BlockBuilder, decode_stored, encode_stored
from rocksmash.bloom import BloomFilter, build_filter, key_hash, split_hash
from rocksmash.env import LocalFile
from rocksmash.log_format import CLEAN, TORN, encode_record, read_records
from rocksmash.memtable import MISSING
from rocksmash.table import Table
from rocksmash.table_builder import TableBuilder, shortest_separator
from rocksmash.write_batch import decode_batch, encode_batch, encode_put

PAYLOADS = st.lists(st.binary(min_size=1, max_size=300), max_size=20)


@given(PAYLOADS)
def test_records_round_trip(payloads):
    data = b"".join(encode_record(p) for p in payloads)
    got, end, torn = read_records(data)
    assert got == payloads and end == len(data) and torn == CLEAN


@given(PAYLOADS.filter(bool), st.data())
def test_any_cut_is_a_torn_tail(payloads, data):
    blob = b"".join(encode_record(p) for p in payloads)
    cut = data.draw(st.integers(0, len(blob) - 1))
    got, end, torn = read_records(blob[:cut])
    assert torn == TORN or cut == end
    assert got == payloads[:len(got)]  # a prefix, never a wrong record
    assert end <= cut


@given(st.lists(st.binary(min_size=1, max_size=50), min_size=2, max_size=10), st.data())
def test_damage_before_valid_records_is_corruption(payloads, data):
    blob = bytearray(b"".join(encode_record(p) for p in payloads))
    first_len = 8 + len(payloads[0])
    pos = data.draw(st.integers(0, first_len - 1))
    blob[pos] ^= 0x5A
    with pytest.raises(CorruptionError):
        read_records(bytes(blob))


@given(st.integers(0, 2**63), st.lists(st.tuples(st.binary(max_size=20),
                                                 st.one_of(st.none(), st.binary(max_size=50))),
                                       min_size=1, max_size=10))
def test_write_batch_round_trip(seq, ops):
    assert decode_batch(encode_batch(seq, ops)) == (seq, ops)
    k, v = ops[0]
    if v is not None:
        assert decode_batch(encode_put(seq, k, v)) == (seq, [(k, v)])


def test_malformed_batch_is_corruption():
    good = encode_batch(5, [(b"k", b"v")])
    for bad in (good[:-1], good + b"x", good[:8] + struct.pack("<I", 2) + good[12:],
                good[:12] + b"\x07" + good[13:]):
        with pytest.raises(CorruptionError):
            decode_batch(bad)


@given(st.lists(st.tuples(st.binary(max_size=30), st.integers(0, 2**56),
                          st.one_of(st.none(), st.binary(max_size=100))), max_size=60),
       st.sampled_from(["none", "lz4", "zlib", "zstd"]))
def test_block_round_trip(entries, compression):
    entries.sort(key=lambda e: (e[0], -e[1]))
    b = BlockBuilder()
    for k, s, v in entries:
        b.add(k, s, v)
    raw = b.finish()
    blk = Block(decode_stored(encode_stored(raw, compression), "t"))
    assert list(blk.keys) == [e[0] for e in entries]
    assert list(blk.seqs) == [e[1] for e in entries]
    assert [blk.value(i) for i in range(len(entries))] == [e[2] for e in entries]
    n = len(entries)
    for lo, hi in ((0, n), (0, n // 2), (n // 3, n), (n // 2, n // 2 + 3)):
        assert list(blk.values(lo, min(hi, n))) == [e[2] for e in entries[lo:min(hi, n)]]


def test_fixed_width_values_split_in_one_call():
    b = BlockBuilder()
    for i in range(40):
        b.add(b"k%03d" % i, i, b"%010d" % i)
    blk = Block(b.finish())
    assert list(blk.values(0, 40)) == [b"%010d" % i for i in range(40)]
    assert list(blk.values(5, 30)) == [b"%010d" % i for i in range(5, 30)]


def test_block_checksum_catches_every_flipped_byte():
    b = BlockBuilder()
    for i in range(20):
        b.add(b"k%02d" % i, i, b"v" * i)
    stored = encode_stored(b.finish(), "lz4")
    for pos in range(len(stored)):
        bad = bytearray(stored)
        bad[pos] ^= 1
        with pytest.raises(CorruptionError):
            decode_stored(bytes(bad), "t")


def test_bloom_has_no_false_negatives_and_a_low_false_positive_rate():
    keys = [os.urandom(16) for _ in range(20000)]
    f = BloomFilter(build_filter([key_hash(k) for k in keys], 10))
    assert all(f.may_contain(key_hash(k)) for k in keys)
    others = [os.urandom(16) for _ in range(20000)]
    rate = sum(f.may_contain(key_hash(k)) for k in others) / len(others)
    assert rate < 0.03, rate  # measured about 1.8% at 10 bits/key
    assert BloomFilter(build_filter([], 10)).may_contain(key_hash(b"x"))


@given(st.binary(max_size=8), st.binary(max_size=8))
def test_shortest_separator(a, b):
    if a >= b:
        a, b = b, a
    if a == b:
        return
    s = shortest_separator(a, b)
    assert a <= s < b and len(s) <= len(a)


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.binary(max_size=12), st.binary(max_size=200), min_size=1, max_size=300),
       st.integers(64, 1024))
def test_table_round_trip(tmp_path_factory, items, block_size):
    path = str(tmp_path_factory.mktemp("t") / "t.sst")
    tb = TableBuilder(path, block_size=block_size, compression="lz4", bloom_bits_per_key=10)
    keys = sorted(items)
    for i, k in enumerate(keys):
        tb.add(k, i + 1, items[k])
    info = tb.finish()
    assert (info.smallest, info.largest, info.count) == (keys[0], keys[-1], len(keys))
    t = Table(1, LocalFile(path), None)
    for i, k in enumerate(keys):
        assert t.get(k, 1 << 60, *split_hash(k)) == items[k]
        assert t.get(k, i, *split_hash(k)) is MISSING  # older than the only version
    assert t.get(keys[-1] + b"\x00", 1 << 60, *split_hash(keys[-1] + b"\x00")) is MISSING
    assert [(k, v) for ks, vs in t.scan(None, None, False, 1 << 60)
            for k, v in zip(ks, vs)] == [(k, items[k]) for k in keys]
    assert [k for ks, _ in t.scan(None, None, True, 1 << 60) for k in ks[::-1]] == keys[::-1]
    assert [k for k, _, _ in t.entries()] == keys
    t.close()


@pytest.mark.parametrize("compression", ["lz4", "zlib", "zstd"])
def test_block_codecs_are_thread_safe(compression):
    """Compaction, flush and readers compress and decompress on different threads at
    once (zstd contexts, for one, must not be shared)."""
    import threading

    raws = []
    for t in range(4):
        b = BlockBuilder()
        for i in range(200):
            b.add(b"t%d-%05d" % (t, i), i, os.urandom(8) * 16)
        raws.append(b.finish())
    errors = []

    def work(raw):
        try:
            for _ in range(300):
                assert decode_stored(encode_stored(raw, compression), "t") == raw
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(r,)) for r in raws]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
