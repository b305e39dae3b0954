"""The profiling programs run end to end at a tiny size and print what they promise."""

from __future__ import annotations

import re

from bench.cache_model import main as cache_model_main
from bench.cache_model import simulate, simulate_forms, simulate_tiers
from bench.miss_cost import main as miss_cost_main
from bench.profile import main as profile_main


def test_simulate_counts_hits_and_misses_of_both_caches():
    # keys 1, 2 share block 0; key 3 is block 1. Row cache of one row, block cache of one.
    keys = [b"1", b"1", b"2", b"3", b"2"]
    blocks = [0, 0, 0, 1, 0]
    assert simulate(keys, blocks, 1, 1) == (1, 1, 3)  # row hit, block hit, 3 misses
    assert simulate(keys, blocks, 0, 2) == (0, 3, 2)


def test_simulate_tiers_a_disk_of_blocks_behind_memory_holds_what_memory_holds():
    # blocks 0, 1, 0, 2, 1: a memory cache of one block in front of a disk cache
    keys = [b"a", b"c", b"a", b"e", b"c"]
    blocks = [0, 1, 0, 2, 1]
    assert simulate_tiers(keys, blocks, blocks, 1, 2) == (0, 1, 4)  # block 0 again: disk
    assert simulate_tiers(keys, blocks, keys, 1, 2) == (0, 1, 4)   # rows: the same here
    assert simulate_tiers(keys, [0] * 5, keys, 1, 1) == (5 - 1, 0, 1)  # one block: memory


def test_cache_model_models_the_disk_tier(capsys):
    assert cache_model_main(["--records", "3000", "--ops", "3000", "--cache-size", "16KiB",
                             "--disk-size", "64KiB"]) == 0
    out = capsys.readouterr().out
    assert {line.split()[0] for line in out.splitlines()[2:]} == {
        "blocks-4k", "blocks-1k", "blocks-512", "rows"}


def test_simulate_forms_a_stored_tier_holds_what_the_decoded_one_drops():
    blocks = [0, 1, 0, 2, 0, 1]
    assert simulate_forms(blocks, 1, 0, 0) == (0, 0, 0, 6)  # one decoded slot: all miss
    assert simulate_forms(blocks, 1, 1, 0) == (0, 2, 0, 4)  # 0 and 1 come back stored
    assert simulate_forms(blocks, 0, 3, 0) == (0, 3, 0, 3)  # all stored: only first reads miss
    assert simulate_forms(blocks, 1, 0, 2) == (0, 0, 2, 4)  # a disk tier of 2 behind


def test_cache_model_models_the_forms(capsys):
    assert cache_model_main(["--forms", "--records", "3000", "--ops", "3000",
                             "--cache-size", "64KiB", "--disk-size", "16KiB"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("(")]
    assert [r.split()[0] for r in rows] == ["(a)", "(b)", "(b)", "(b)", "(c)"]
    misses = [float(r.split()[-1]) for r in rows]
    assert misses[-1] < misses[0]  # more blocks held, fewer GETs


def test_cache_model_prints_one_line_per_share(capsys):
    assert cache_model_main(["--records", "3000", "--ops", "3000", "--shares", "0,50",
                             "--cache-size", "64KiB"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if re.match(r"\s+\d+%", line)]
    assert len(rows) == 2 and rows[0].split()[3] == "0.0%"  # no row cache, no row hits


def test_profile_runs_a_phase_and_prints_the_profile(capsys):
    assert profile_main(["--workload", "b", "--records", "2000", "--ops", "2000",
                         "--cache-size", "64KiB", "--top", "5",
                         "--opt", "background_processes=false"]) == 0
    out = capsys.readouterr().out
    assert "workload B: 2,000 operations" in out and "function calls" in out
    assert re.search(r"block_cache: [\d.]+% of", out)


def test_miss_cost_prints_every_piece_for_each_compression(capsys):
    assert miss_cost_main(["--records", "2000", "--reads", "200"]) == 0
    out = capsys.readouterr().out
    for comp in ("lz4", "none"):
        assert re.search(rf"^{comp}: table [0-9.]+ MiB, 2,000 records", out, re.M)
    for piece in ("pread", "crc", "Block()", "whole miss (pread)", "whole miss (mmap)",
                  "cache insert"):
        assert out.count(piece) >= 2, piece
