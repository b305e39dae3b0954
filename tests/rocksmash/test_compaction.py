"""Compaction choice (dynamic level targets) and version retention under snapshots."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rocksmash.compaction import level_targets, manual_step, pick_compaction
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


def run_manual(v, lo, hi, old_seq, limit, next_number=100):
    """Apply manual_step's steps to ``v`` as the database would (outputs: one new file
    per step covering its inputs' range), checking each step; return the steps."""
    steps = []
    old_number = next_number
    while (c := manual_step(v, lo, hi, old_seq, old_number, limit)) is not None:
        assert len(steps) < 100, "manual_step does not finish"
        steps.append(c)
        files = [x for _, x in c.inputs]
        # A step reads at most the limit, unless one file and its overlap exceed it, or it
        # is L0's (L0 files overlap each other: that step is the background L0 compaction)
        assert (c.input_bytes <= limit or c.level == 0
                or len([1 for lvl, _ in c.inputs if lvl == c.level]) == 1)
        if c.trivial_move:
            out = files[0]
        else:
            out = FileMeta(next_number, sum(x.size for x in files), min(x.smallest for x in files),
                           max(x.largest for x in files), min(x.min_seq for x in files),
                           max(x.max_seq for x in files))
            next_number += 1
        levels = [[x for x in lvl if all(x is not y for y in files)] for lvl in v.levels]
        levels[c.output_level] = sorted(levels[c.output_level] + [out], key=lambda x: x.smallest)
        for a, b in zip(levels[c.output_level], levels[c.output_level][1:]):
            assert a.largest < b.smallest, "a step left overlapping files on a level"
        v = Version(levels)
    return steps, v


def test_a_manual_compaction_moves_the_old_data_into_the_last_level_in_bounded_steps():
    lvl1 = [f(10 + i, bytes([97 + 2 * i]), bytes([98 + 2 * i]), size=4 * MB) for i in range(6)]
    lvl3 = [f(30 + i, bytes([97 + 2 * i]), bytes([98 + 2 * i]), size=4 * MB) for i in range(6)]
    lvl3.append(f(40, b"x", b"z", size=4 * MB))  # overlaps nothing above: rewritten alone
    v = Version([[f(1, b"a", b"b", seq=5), f(2, b"b", b"b", seq=6)], lvl1, [], lvl3])
    steps, end = run_manual(v, None, None, old_seq=6, limit=12 * MB)
    assert steps[0].level == 0 and {x.number for _, x in steps[0].inputs} == {1, 2, 10}
    assert all(c.input_bytes <= 12 * MB for c in steps)
    assert [c.level for c in steps] == [0] + [1] * 6 + [3]
    assert not any(end.levels[i] for i in range(3))  # everything is in the last level
    assert all(x.number >= 100 for x in end.levels[3])  # every old file was rewritten
    assert all(c.bottommost for c in steps[1:])


def test_a_manual_compaction_leaves_what_is_outside_its_range_and_newer_than_the_call():
    v = Version([[f(1, b"m", b"n", seq=9)], [f(10, b"a", b"b"), f(11, b"x", b"y")], [],
                 [f(30, b"a", b"c"), f(31, b"w", b"z")]])
    steps, end = run_manual(v, b"a", b"c", old_seq=5, limit=100 * MB)
    assert [x.number for x in end.levels[0]] == [1]  # newer than the call
    assert [x.number for x in end.levels[1]] == [11]  # outside the range
    assert 31 in {x.number for x in end.levels[3]} and 30 not in {x.number for x in end.levels[3]}
    assert manual_step(Version([[], [], [], []]), None, None, 5, 100, MB) is None


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(1, 6),
                          st.integers(1, 8), st.integers(1, 9)), max_size=25),
       st.integers(1, 9), st.integers(1, 30))
@settings(max_examples=150, deadline=None)
def test_manual_steps_finish_bounded_and_leave_no_old_data_above_the_last_level(
        specs, old_seq, limit_mb):
    levels: list[list[FileMeta]] = [[], [], [], []]
    for n, (level, lo, width, size, seq) in enumerate(specs, start=1):
        cand = f(n, bytes([lo]), bytes([lo + width]), size=size * MB, seq=seq)
        if level == 0 or all(cand.largest < x.smallest or cand.smallest > x.largest
                             for x in levels[level]):
            levels[level].append(cand)
    for lvl in levels[1:]:
        lvl.sort(key=lambda x: x.smallest)
    v = Version(levels)
    steps, end = run_manual(v, None, None, old_seq, limit_mb * MB)
    assert not any(x.min_seq <= old_seq for lvl in end.levels[:3] for x in lvl)
    assert all(x.number >= 100 or x.min_seq > old_seq for x in end.levels[3])


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
