"""Both decoded forms of a block (decision 0038) answer as a plain sorted list does.

Blocks of keys of one width >= 8 bytes keep no key objects (the *heads* form: a bisect
over 8 key bytes per entry, then the key compared in the raw block); others keep a key
list. A table's ``get`` and scan, and the block's own ``find``/``keys``/``values``, are
checked against a sorted list of ``(key, seq, value)``, for fixed- and variable-width
keys with NUL and 0xFF bytes, keys whose heads tie (they differ only after the 8 bytes
the heads hold), several versions per key, and probe keys of every length.
"""

from __future__ import annotations

from bisect import bisect_left

import hypothesis.strategies as st
from hypothesis import event, given, settings

from rocksmash.block import Block, BlockBuilder
from rocksmash.block_cache import BlockCache
from rocksmash.bloom import split_hash
from rocksmash.mem_env import MemEnv
from rocksmash.memtable import MISSING
from rocksmash.table import Table, scan_tables
from rocksmash.table_builder import TableBuilder

# Few distinct bytes (NUL and 0xFF among them), so keys share long prefixes and heads tie.
BYTE = st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF])
TIED_HEADS = [b"\x00" * 8, b"\x00" * 7 + b"\xff", b"\xff" * 8]


def _keys(width: int | None) -> st.SearchStrategy[bytes]:
    if width is None:  # variable width (short keys too)
        return st.lists(BYTE, min_size=0, max_size=20).map(bytes)
    return st.lists(BYTE, min_size=width, max_size=width).map(bytes)


@st.composite
def entries(draw: st.DrawFn) -> tuple[list[tuple[bytes, int, bytes | None]], int | None]:
    """Sorted entries (key ascending, seq descending) and the key width (None: mixed)."""
    width = draw(st.one_of(st.none(), st.integers(1, 24), st.sampled_from([8, 9, 16, 24])))
    prefix = draw(st.lists(BYTE, max_size=width if width is not None else 6).map(bytes))
    rest = None if width is None else width - len(prefix)
    suffix = _keys(rest)
    if rest is not None and rest >= 10 and draw(st.booleans()):
        # Few distinct 8-byte heads, then a tail: keys whose heads tie.
        suffix = st.tuples(st.sampled_from(TIED_HEADS), _keys(rest - 8)).map(b"".join)
    suffixes = draw(st.lists(suffix, min_size=1, max_size=80, unique=True))
    out = []
    seq = 1
    for suffix in suffixes:
        for _ in range(draw(st.integers(1, 3))):
            value = draw(st.one_of(st.none(), st.binary(max_size=40)))
            out.append((prefix + suffix, seq, value))
            seq += 1
    out.sort(key=lambda e: (e[0], -e[1]))
    return out, width


def _visible(model: list[tuple[bytes, int, bytes | None]], key: bytes, seq: int) -> object:
    for k, s, v in model:
        if k == key and s <= seq:
            return v
    return MISSING


def _probes(model: list[tuple[bytes, int, bytes | None]], extra: list[bytes]) -> list[bytes]:
    keys = sorted({k for k, _, _ in model})
    near = [k[:-1] for k in keys if k] + [k + b"\x00" for k in keys] + [
        k[:-1] + bytes([(k[-1] + 1) % 256]) for k in keys if k]
    return keys + near + extra


@settings(max_examples=100, deadline=None)
@given(entries(), st.lists(st.binary(max_size=26), max_size=10))
def test_block_find_keys_and_values_match_a_sorted_list(data, extra):
    model, width = data
    b = BlockBuilder()
    for k, s, v in model:
        b.add(k, s, v)
    blk = Block(b.finish())
    keys = [k for k, _, _ in model]
    widths = {len(k) for k in keys}
    assert (blk.klist is None) == (len(widths) == 1 and min(widths) >= 8)
    if blk.klist is None:  # the heads form: no key objects, charged as such
        assert blk.charge < len(blk.raw) + 600 + 8 * len(model)
        assert blk.find_once(keys[0]) == 0 and blk.heads is None  # (builds no heads)
        assert blk.find(keys[0]) == 0 and blk.heads is not None
        event("heads form, heads tie" if len(set(blk.heads)) < len(set(keys))
              else "heads form, no tie")
    else:
        event("list form")
    assert list(blk.keys) == keys
    assert list(blk.seqs) == [s for _, s, _ in model]
    assert list(blk.values(0, len(model))) == [v for _, _, v in model]
    for probe in _probes(model, extra):
        j = bisect_left(keys, probe)
        want = j if j < len(keys) and keys[j] == probe else -1
        assert blk.find(probe) == want, (probe, keys)
        assert Block(blk.raw).find_once(probe) == want, (probe, keys)
        if want >= 0:
            assert blk.key_is(want, probe)
            assert want == len(keys) - 1 or blk.key_is(want + 1, probe) == (keys[want + 1] == probe)


@settings(max_examples=50, deadline=None)
@given(entries(), st.lists(st.binary(max_size=26), max_size=6),
       st.integers(64, 512), st.data())
def test_table_get_and_scan_match_a_sorted_list(data, extra, block_size, draw):
    model, _ = data
    env = MemEnv()
    env.mkdir("/db")
    b = TableBuilder("/db/t.sst", block_size=block_size, compression="lz4", bloom_bits_per_key=10,
                     env=env)
    for k, s, v in model:
        b.add(k, s, v)
    b.finish(sync=False)
    # A cache small enough that blocks come and go (gets on cached and uncached blocks).
    table = Table(1, env.open_random("/db/t.sst"), BlockCache(draw.draw(st.sampled_from([1, 3000, 1 << 20]))))
    max_seq = max(s for _, s, _ in model)
    seqs = sorted({max_seq, max(1, max_seq // 2), 1})
    for probe in _probes(model, extra):
        for seq in seqs:
            assert table.get(probe, seq, *split_hash(probe)) == _visible(model, probe, seq), probe
            got = table.get_entry(probe, seq)
            want = next(((s, v) for k, s, v in model if k == probe and s <= seq), None)
            assert got == want
    keys = sorted({k for k, _, _ in model})
    bounds = [None] + _probes(model, extra)[:6]
    start, end = draw.draw(st.sampled_from(bounds)), draw.draw(st.sampled_from(bounds))
    for reverse in (False, True):
        for seq in seqs:
            want = [(k, _visible(model, k, seq)) for k in keys
                    if (start is None or k >= start) and (end is None or k < end)]
            want = [(k, v) for k, v in want if v is not MISSING]
            if reverse:
                want.reverse()
            # (Chunks come in scan order; each chunk's entries ascend.)
            got = [kv for ks, vs in scan_tables((table,), start, end, reverse, seq)
                   for kv in (reversed(list(zip(ks, vs))) if reverse else zip(ks, vs))]
            assert got == want, (start, end, reverse, seq)
