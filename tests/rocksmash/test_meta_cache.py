"""MashMeta (the compact encoding of a cloud table's metadata) and the MetaCache directory."""

from __future__ import annotations

import os
import random
import threading
import zlib

import hypothesis.strategies as st
import pytest
from hypothesis import given

from rocksmash import CorruptionError, InvalidArgumentError, NewerFormatError
from rocksmash.block import decode_stored
from rocksmash.env import LocalFile
from rocksmash.meta_cache import (META_FORMAT_VERSION, RESTART_INTERVAL, MetaCache,
                                  TableMeta, decode_table_meta, encode_table_meta)
from rocksmash.table import Table
from rocksmash.table_builder import TableBuilder
from rocksmash.table_format import FOOTER, FOOTER_SIZE

PROPS = st.dictionaries(st.text(max_size=10),
                        st.one_of(st.integers(-2**63, 2**63), st.text(max_size=20)),
                        max_size=5)


def contiguous(sizes: list[int], first: int = 0) -> list[int]:
    offsets, off = [], first
    for s in sizes:
        offsets.append(off)
        off += s + 5
    return offsets


@st.composite
def table_metas(draw: st.DrawFn) -> TableMeta:
    keys = sorted(draw(st.sets(st.binary(max_size=40), max_size=80)))
    n = len(keys)
    sizes = draw(st.lists(st.one_of(st.integers(0, 70000), st.integers(0, 2**32 - 1)),
                          min_size=n, max_size=n))
    if draw(st.booleans()):
        offsets = contiguous(sizes, draw(st.integers(0, 2**40)))
    else:  # any layout must round-trip, just less compactly
        offsets = draw(st.lists(st.integers(0, 2**64 - 1), min_size=n, max_size=n))
    return TableMeta(keys, offsets, sizes, draw(st.binary(max_size=300)), draw(PROPS),
                     draw(st.integers(0, 2**50)))


@given(table_metas())
def test_mashmeta_round_trip(meta):
    assert decode_table_meta(encode_table_meta(meta)) == meta


@given(st.lists(st.binary(min_size=1, max_size=30), min_size=RESTART_INTERVAL * 3,
                max_size=200, unique=True))
def test_mashmeta_round_trip_long_shared_prefixes(tails):
    # Keys that share long prefixes exercise front coding and every restart point.
    keys = sorted(b"tenant-0042/object/" + t for t in tails)
    sizes = [4000 + i % 97 for i in range(len(keys))]
    meta = TableMeta(keys, contiguous(sizes), sizes, b"\x05\x01\x00\x00\x00" + bytes(8),
                     {"count": 1}, sum(sizes) + 5 * len(keys))
    enc = encode_table_meta(meta)
    assert decode_table_meta(enc) == meta
    assert len(enc) < sum(map(len, keys))  # front coding pays off on shared prefixes


def test_empty_table_meta_round_trips():
    meta = TableMeta([], [], [], b"", {}, 0)
    assert decode_table_meta(encode_table_meta(meta)) == meta


def small_meta() -> TableMeta:
    keys = [b"apple", b"apricot", b"banana", b"blueberry", b"cherry"]
    sizes = [4000, 4001, 300, 70000, 12]
    return TableMeta(keys, contiguous(sizes), sizes, bytes(range(40)),
                     {"count": 10, "compression": "lz4"}, 79000)


def test_every_flipped_byte_and_every_cut_is_detected():
    enc = encode_table_meta(small_meta())
    for i in range(len(enc)):
        bad = bytearray(enc)
        bad[i] ^= 0x41
        with pytest.raises(CorruptionError):
            decode_table_meta(bytes(bad))
    for cut in range(len(enc)):
        with pytest.raises(CorruptionError):
            decode_table_meta(enc[:cut])
    with pytest.raises(CorruptionError):
        decode_table_meta(enc + b"\x00")


def reseal(body: bytes) -> bytes:
    return body + zlib.crc32(body).to_bytes(4, "little")


def test_newer_version_is_refused_by_name():
    enc = bytearray(encode_table_meta(small_meta()))
    enc[0] = META_FORMAT_VERSION + 1
    with pytest.raises(NewerFormatError, match="version"):
        decode_table_meta(reseal(bytes(enc[:-4])))


def test_malformed_but_checksummed_is_refused():
    enc = encode_table_meta(small_meta())
    body = enc[:-4]
    for forged in (body[:-3], body + b"xyz", body[:2] + b"\x7f" + body[3:]):
        with pytest.raises(CorruptionError):
            decode_table_meta(reseal(forged))


def test_encode_rejects_bad_input():
    good = small_meta()
    with pytest.raises(InvalidArgumentError):
        encode_table_meta(TableMeta(good.index_keys[::-1], good.offsets, good.sizes,
                                    good.filter, good.props, good.data_end))
    with pytest.raises(InvalidArgumentError):
        encode_table_meta(TableMeta(good.index_keys, good.offsets[:-1], good.sizes,
                                    good.filter, good.props, good.data_end))
    with pytest.raises(InvalidArgumentError):
        encode_table_meta(TableMeta(good.index_keys, good.offsets, good.sizes,
                                    good.filter, {"x": object()}, good.data_end))
    with pytest.raises(InvalidArgumentError):
        encode_table_meta(TableMeta([b"a"], [0], [2**32], b"", {}, 0))


def meta_of_table(path: str) -> TableMeta:
    """The TableMeta of a real table file, as the engine will extract it."""
    t = Table(1, LocalFile(path), None)
    try:
        footer = FOOTER.unpack(t.file.read(t.file.size() - FOOTER_SIZE, FOOTER_SIZE))
        filt = decode_stored(t.file.read(footer[0], footer[1] + 5), "filter")
        return TableMeta(list(t.index_keys), list(t.offsets), list(t.sizes), filt,
                         t.props, t.data_end)
    finally:
        t.close()


def test_compactness_of_a_realistic_table(tmp_path):
    # 24-byte keys, 100-byte incompressible values, 4 KiB blocks, 10 bloom bits per key.
    rng = random.Random(7)
    path = str(tmp_path / "000001.sst")
    b = TableBuilder(path, block_size=4096, compression="lz4", bloom_bits_per_key=10)
    for i in range(15000):
        b.add(b"user%020d" % (i * 7919), 1, rng.randbytes(100))
    b.finish(sync=False)
    meta = meta_of_table(path)
    enc = encode_table_meta(meta)
    assert decode_table_meta(enc) == meta
    n = len(meta.sizes)
    ratio = len(enc) / meta.data_end
    filter_part = len(meta.filter) / n
    print(f"\nMashMeta: {n} blocks, {len(enc)} bytes = {len(enc) / n:.1f} B/block "
          f"({filter_part:.1f} filter + {len(enc) / n - filter_part:.1f} index/props), "
          f"{100 * ratio:.2f}% of {meta.data_end} data bytes")
    assert ratio < 0.02
    # Without the filter (fixed by the table format) the rest is a small fraction.
    assert (len(enc) - len(meta.filter)) / meta.data_end < 0.005


# -- MetaCache --------------------------------------------------------------------------

def test_meta_cache_put_get_delete_and_reopen(tmp_path):
    d = str(tmp_path / "meta")
    mc = MetaCache(d)
    assert mc.get(7) is None and mc.numbers() == [] and mc.total_bytes() == 0
    m = small_meta()
    mc.put(7, m)
    mc.put(12, TableMeta([], [], [], b"", {}, 0))
    assert mc.get(7) == m
    assert mc.numbers() == [7, 12]
    assert mc.total_bytes() == sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))

    again = MetaCache(d)  # a restart: everything is still there
    assert again.numbers() == [7, 12] and again.get(7) == m
    again.delete(7)
    again.delete(99)  # absent: fine
    assert again.get(7) is None and again.numbers() == [12]
    assert MetaCache(d).numbers() == [12]


def test_meta_cache_put_replaces(tmp_path):
    mc = MetaCache(str(tmp_path))
    mc.put(1, small_meta())
    newer = TableMeta([b"z"], [0], [10], b"", {"v": 2}, 15)
    mc.put(1, newer)
    assert mc.get(1) == newer and mc.numbers() == [1]


def test_meta_cache_damaged_file_is_dropped_and_counted(tmp_path):
    d = str(tmp_path)
    mc = MetaCache(d)
    mc.put(3, small_meta())
    mc.put(4, small_meta())
    path = os.path.join(d, "000003.mmeta")
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 1
    open(path, "wb").write(data)
    assert mc.get(3) is None
    assert mc.damaged == 1 and not os.path.exists(path) and mc.numbers() == [4]
    assert mc.get(4) == small_meta()
    # A truncated (torn, hand-damaged) file behaves the same.
    path4 = os.path.join(d, "000004.mmeta")
    os.truncate(path4, 10)
    assert MetaCache(d).get(4) is None


def test_meta_cache_interrupted_put_leaves_old_value(tmp_path, monkeypatch):
    d = str(tmp_path)
    mc = MetaCache(d)
    mc.put(5, small_meta())

    def crash(*args):
        raise OSError("simulated crash before rename")
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        mc.put(5, TableMeta([b"new"], [0], [1], b"", {}, 6))
    monkeypatch.undo()
    # The temp file of the crashed put is invisible and removed at the next open.
    assert any(f.endswith(".tmp") for f in os.listdir(d))
    again = MetaCache(d)
    assert again.get(5) == small_meta()
    assert not any(f.endswith(".tmp") for f in os.listdir(d))
    open(os.path.join(d, "notes.txt"), "w").write("not ours")
    assert MetaCache(d).numbers() == [5]


def test_meta_cache_threads(tmp_path):
    mc = MetaCache(str(tmp_path))
    errors: list[BaseException] = []

    def worker(base: int) -> None:
        try:
            for i in range(20):
                n = base * 100 + i % 5
                m = TableMeta([b"k%d" % i], [0], [i], b"", {"n": n}, i + 5)
                mc.put(n, m)
                got = mc.get(n)
                assert got is None or got.props["n"] == n
                if i % 7 == 0:
                    mc.delete(n)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for n in mc.numbers():
        assert mc.get(n).props["n"] == n
