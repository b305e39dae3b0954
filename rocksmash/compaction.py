"""Choosing compactions: leveled, with dynamic level sizes (as RocksDB's
``level_compaction_dynamic_level_bytes``).

Targets follow the data: the last level holds whatever it holds, each level above it is
``level_multiplier`` times smaller, and levels that would be smaller than
``level_base_size`` stay empty. Level 0 compacts into the *base level*, the highest level
in use; a small database therefore compacts L0 straight into the last level, and the base
level moves up as the database grows. This keeps most data in the last level and write
amplification near the multiplier per level actually used.

Scores: L0 = files / ``l0_compaction_trigger``; level i = bytes / target(i); files on a
level above the base level score high, so they move down. The highest score >= 1 wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .options import Options
from .version import FileMeta, Version

__all__ = ["Compaction", "level_targets", "pick_compaction", "range_compaction",
           "first_cloud_level"]


@dataclass
class Compaction:
    level: int
    output_level: int
    #: Sorted runs to merge: each a list of files in key order that do not overlap.
    runs: list[list[FileMeta]]
    #: Every input file with its level (all are deleted by the edit).
    inputs: list[tuple[int, FileMeta]] = field(default_factory=list)
    bottommost: bool = False
    #: A single input that overlaps nothing below: move it, rewrite nothing.
    trivial_move: bool = False
    reason: str = ""

    @property
    def input_bytes(self) -> int:
        return sum(f.size for _, f in self.inputs)


def base_size(v: Version, opts: Options) -> int:
    """``level_base_size``, shrunk with a cloud tier so local levels fit the budget."""
    if opts.object_store is None:
        return opts.level_base_size
    total = sum(v.level_bytes(i) for i in range(v.num_levels))
    return min(opts.level_base_size, max(1 << 20, opts.budget_for(total) // 4))


def level_targets(v: Version, opts: Options) -> tuple[int, list[float]]:
    """The base level and each level's target size in bytes (0 above the base level)."""
    last = v.num_levels - 1
    last_size = v.level_bytes(last)
    bsize = base_size(v, opts)
    base, cur = last, float(last_size)
    while base > 1 and cur > bsize:
        cur /= opts.level_multiplier
        base -= 1
    targets = [0.0] * v.num_levels
    for i in range(base, last):
        targets[i] = max(float(bsize), last_size / opts.level_multiplier ** (last - i))
    return base, targets


def first_cloud_level(v: Version, opts: Options) -> int:
    """Levels at and below the result belong in the object store (``num_levels``: none).

    Walks down from L0 adding each level's size (its target, if larger) until the local
    budget is exceeded. L0 is always local: flushes must never wait on the network.
    """
    if opts.object_store is None:
        return v.num_levels
    last = v.num_levels - 1
    sizes = [v.level_bytes(i) for i in range(v.num_levels)]
    budget = opts.budget_for(sum(sizes))
    _, targets = level_targets(v, opts)
    used = sizes[0]
    for level in range(1, v.num_levels):
        used += sizes[level] if level == last else max(sizes[level], int(targets[level]))
        if used > budget:
            return level
    return v.num_levels


def _key_range(files: list[FileMeta]) -> tuple[bytes, bytes]:
    return min(f.smallest for f in files), max(f.largest for f in files)


def _bottommost(v: Version, output_level: int, lo: bytes, hi: bytes) -> bool:
    return all(not v.overlapping(level, lo, hi)
               for level in range(output_level + 1, v.num_levels))


def pick_compaction(v: Version, opts: Options, pointers: dict[int, bytes]) -> Compaction | None:
    """The most urgent compaction, or None if every level is within its target.

    ``pointers`` (level -> largest key compacted last) rotates which file of a level is
    compacted next, so every part of the key space gets its turn; it is updated here.
    """
    last = v.num_levels - 1
    base, targets = level_targets(v, opts)
    best_score, best_level = len(v.levels[0]) / opts.l0_compaction_trigger, 0
    for level in range(1, last):
        size = v.level_bytes(level)
        if not size:
            continue
        score = 1e9 if level < base else size / targets[level]
        if score > best_score:
            best_score, best_level = score, level
    if best_score < 1:
        return None
    if best_level == 0:
        l0 = list(v.levels[0])
        # Never under a non-empty level: L0 holds the newest data and must stay above it.
        out_level = next((i for i in range(1, base) if v.levels[i]), base)
        lo, hi = _key_range(l0)
        below = v.overlapping(out_level, lo, hi)
        runs = [[f] for f in l0] + ([below] if below else [])
        inputs = [(0, f) for f in l0] + [(out_level, f) for f in below]
        trivial = len(l0) == 1 and not below
        reason = f"L0 has {len(l0)} files"
    else:
        files = v.levels[best_level]
        ptr = pointers.get(best_level)
        f = next((x for x in files if ptr is None or x.smallest > ptr), files[0])
        pointers[best_level] = f.largest
        out_level = best_level + 1
        lo, hi = f.smallest, f.largest
        below = v.overlapping(out_level, lo, hi)
        runs = [[f]] + ([below] if below else [])
        inputs = [(best_level, f)] + [(out_level, g) for g in below]
        trivial = not below
        reason = f"L{best_level} at {best_score:.2f}x its target"
    if below:
        lo, hi = min(lo, below[0].smallest), max(hi, below[-1].largest)
    return Compaction(best_level, out_level, runs, inputs,
                      bottommost=_bottommost(v, out_level, lo, hi), trivial_move=trivial,
                      reason=reason)


def range_compaction(v: Version, lo: bytes | None, hi: bytes | None) -> Compaction | None:
    """Merge everything overlapping [lo, hi] (inclusive) into the last level.

    The range widens level by level to cover every file taken so far, so no older
    version of a moved key is left behind on a level above its newer one.
    """
    last = v.num_levels - 1
    inputs: list[tuple[int, FileMeta]] = []
    runs: list[list[FileMeta]] = []
    for level in range(last + 1):
        files = v.overlapping(level, lo, hi)
        if level == 0:  # L0 files overlap each other: widen until no more join
            while True:
                if files:
                    flo, fhi = _key_range(files)
                    lo = None if lo is None else min(lo, flo)
                    hi = None if hi is None else max(hi, fhi)
                wider = v.overlapping(0, lo, hi)
                if len(wider) == len(files):
                    break
                files = wider
        if not files:
            continue
        inputs += [(level, f) for f in files]
        runs += [[f] for f in files] if level == 0 else [files]
        flo, fhi = _key_range(files)
        lo = None if lo is None else min(lo, flo)
        hi = None if hi is None else max(hi, fhi)
    if not inputs:
        return None
    return Compaction(0, last, runs, inputs, bottommost=True, reason="manual compact_range")
