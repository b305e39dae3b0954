"""Compaction choice (dynamic level targets) and version retention under snapshots."""

from __future__ import annotations

from rocksmash.compaction import level_targets, pick_compaction, range_compaction
from rocksmash.jobs import _retained
from rocksmash.options import Options
from rocksmash.version import FileMeta, Version

MB = 1 << 20


def f(n, lo, hi, size=MB, seq=1):
    return FileMeta(n, size, lo, hi, seq, seq)


def test_targets_follow_the_last_level():
    opts = Options(level_base_size=64 * MB, level_multiplier=10, num_levels=7)
    empty = Version([[] for _ in range(7)])
    assert level_targets(empty, opts)[0] == 6  # a small DB compacts L0 into the last level
    big = Version([[], [], [], [], [], [], [f(1, b"a", b"z", size=10_000 * MB)]])
    base, targets = level_targets(big, opts)
    assert base == 3
    assert targets[5] == 1000 * MB and targets[4] == 100 * MB and targets[3] == 64 * MB


def test_l0_trigger_and_trivial_move():
    opts = Options(l0_compaction_trigger=2, num_levels=4)
    v = Version([[f(1, b"a", b"c", seq=1)], [], [], []])
    assert pick_compaction(v, opts, {}) is None
    v = Version([[f(1, b"a", b"c", seq=1), f(2, b"b", b"d", seq=2)], [], [],
                 [f(3, b"x", b"y")]])
    c = pick_compaction(v, opts, {})
    assert c.level == 0 and c.output_level == 3 and not c.trivial_move
    assert {x.number for _, x in c.inputs} == {1, 2}
    assert c.bottommost


def test_level_compaction_picks_overlaps_below():
    opts = Options(level_base_size=1 * MB, level_multiplier=2, num_levels=3)
    lvl1 = [f(10, b"a", b"f", size=4 * MB), f(11, b"g", b"m", size=4 * MB)]
    lvl2 = [f(20, b"a", b"c"), f(21, b"d", b"h"), f(22, b"n", b"z")]
    v = Version([[], lvl1, lvl2])
    pointers: dict = {}
    c = pick_compaction(v, opts, pointers)
    assert c.level == 1 and c.output_level == 2
    assert {x.number for _, x in c.inputs} == {10, 20, 21}
    c2 = pick_compaction(v, opts, pointers)  # round-robin moves on to the next file
    assert {x.number for _, x in c2.inputs} == {11, 21}


def test_range_compaction_widens_over_l0_and_levels():
    v = Version([[f(1, b"a", b"c", seq=5), f(2, b"c", b"k", seq=6)],
                 [f(3, b"j", b"p")], [], [f(4, b"o", b"q"), f(5, b"x", b"z")]])
    c = range_compaction(v, b"a", b"b")
    assert {x.number for _, x in c.inputs} == {1, 2, 3, 4}
    assert c.output_level == 3 and c.bottommost
    assert range_compaction(Version([[], [], [], []]), None, None) is None


def test_retention_keeps_one_version_per_snapshot_stripe():
    versions = [(9, b"v9"), (7, b"v7"), (5, None), (3, b"v3"), (1, b"v1")]
    assert _retained(versions, [], False) == [(9, b"v9")]
    assert _retained(versions, [4], False) == [(9, b"v9"), (3, b"v3")]
    assert _retained(versions, [5, 8], False) == [(9, b"v9"), (7, b"v7"), (5, None)]
    # At the bottom, a deletion that is the oldest kept version goes too.
    assert _retained([(5, None), (3, b"v3")], [], True) == []
    # Snapshot 6 sees the deletion at 5; with nothing older kept it sees "absent" anyway.
    assert _retained([(9, b"v9"), (5, None), (3, b"v3")], [6], True) == [(9, b"v9")]
    assert _retained([(9, None), (5, b"v5")], [6], True) == [(9, None), (5, b"v5")]
