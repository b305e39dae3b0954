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

__all__ = ["Compaction", "level_targets", "pick_compaction", "manual_step", "manual_left", "MANUAL_STEP_FILES",
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


#: A manual compaction's step reads at most this many times ``target_file_size`` (at
#: least one file and what it overlaps below): the bound on how long the job holds the
#: worker that a flush may be waiting for (a flush takes the next free worker, but one
#: worker is all a 2-core machine gets), and on the disk it needs beside its inputs.
MANUAL_STEP_FILES = 10


def manual_step(v: Version, lo: bytes | None, hi: bytes | None, old_seq: int,
                old_number: int, limit: int) -> Compaction | None:
    """The next bounded step of ``compact_range(lo, hi)``, or None when it is done.

    What has to move is the data written up to ``old_seq`` (the last sequence number
    acknowledged before the call): a file holds some of it if its ``min_seq`` is at most
    ``old_seq``, whoever made the file, so steps and the background compactions running
    between them need no bookkeeping, and writes during the call do not keep it going.

    - While a level above the last holds such a file in [lo, hi]: take the highest such
      level's files (L0: every L0 file that overlaps, widened as L0 files overlap each
      other, which is no more than the background L0 compaction takes; deeper: a run of
      adjacent files starting at the first such one, as many as fit in ``limit`` bytes
      with what they overlap below) and merge them into the next level below that
      overlaps them (the last level if none does). Levels between hold nothing in that
      range, so no older version ends up above a newer one.
    - Then the last level's files in [lo, hi] numbered below ``old_number`` (so made
      before the call; the steps' own outputs are already merged), in runs of adjacent
      files within ``limit``, each rewritten alone, dropping overwritten versions and
      deletions that no snapshot needs.
    """
    last = v.num_levels - 1
    for level in range(last):
        files = v.overlapping(level, lo, hi)
        if not any(_owed(f, level, last, old_seq, old_number) for f in files):
            continue
        if level == 0:  # L0 files overlap each other: widen until no more join
            flo, fhi = _key_range(files)
            while True:
                wider = v.overlapping(0, flo, fhi)
                if len(wider) == len(files):
                    break
                files = wider
                flo, fhi = _key_range(files)
            out_level, below = _below(v, 0, flo, fhi)
            runs = [[f] for f in files]
        else:
            first = next(i for i, f in enumerate(files)
                         if _owed(f, level, last, old_seq, old_number))
            out_level, below, n = _fit(v, level, files[first:], limit)
            files = files[first:first + n]
            runs = [files]
        inputs = [(level, f) for f in files] + [(out_level, f) for f in below]
        flo, fhi = _key_range([f for _, f in inputs])
        return Compaction(level, out_level, runs + ([below] if below else []), inputs,
                          bottommost=_bottommost(v, out_level, flo, fhi),
                          trivial_move=len(files) == 1 and not below,
                          reason="manual compact_range")
    files = v.overlapping(last, lo, hi)
    start = next((i for i, f in enumerate(files)
                  if _owed(f, last, last, old_seq, old_number)), None)
    if start is None:
        return None
    _, _, n = _fit(v, last, files[start:], limit)
    chunk = files[start:start + n]
    return Compaction(last, last, [chunk], [(last, f) for f in chunk], bottommost=True,
                      reason="manual compact_range, last level")


def manual_left(v: Version, lo: bytes | None, hi: bytes | None, old_seq: int,
                old_number: int) -> int:
    """Bytes of the files :func:`manual_step` still has to take (for progress reports:
    data moving down several levels is merged once per level, so the steps read more)."""
    last = v.num_levels - 1
    return sum(f.size for level in range(v.num_levels) for f in v.overlapping(level, lo, hi)
               if _owed(f, level, last, old_seq, old_number))


def _owed(f: FileMeta, level: int, last: int, old_seq: int, old_number: int) -> bool:
    """Whether a manual compaction still has to take ``f`` (see :func:`manual_step`):
    above the last level, if it holds data acknowledged before the call; on the last
    level, if it was made before the call."""
    return f.min_seq <= old_seq if level < last else f.number < old_number


def _below(v: Version, level: int, lo: bytes, hi: bytes) -> tuple[int, list[FileMeta]]:
    """The first level below ``level`` with files in [lo, hi], and those files (the last
    level and none if no level has any)."""
    for out in range(level + 1, v.num_levels):
        below = v.overlapping(out, lo, hi)
        if below:
            return out, below
    return v.num_levels - 1, []


def _fit(v: Version, level: int, run: list[FileMeta],
         limit: int) -> tuple[int, list[FileMeta], int]:
    """How many of the adjacent files ``run`` (of ``level`` >= 1) a step takes: at least
    one, and more while they and what they overlap below fit in ``limit`` bytes. Returns
    the output level, the files it overlaps there (none for the last level: the step
    rewrites the run alone) and the count."""
    last = v.num_levels - 1
    best: tuple[int, list[FileMeta], int] | None = None
    for n in range(1, len(run) + 1):
        lo, hi = run[0].smallest, run[n - 1].largest
        out, below = (last, []) if level == last else _below(v, level, lo, hi)
        if best is not None and sum(f.size for f in run[:n] + below) > limit:
            break
        best = (out, below, n)
    assert best is not None
    return best
