"""Merging sorted sources for scans, a run at a time instead of an item at a time.

A *source* (memtable, table, level) yields *chunks*: ``(keys, values)``, two parallel
lists with keys strictly ascending inside a chunk, at most one version per key (the
newest the reader may see), and ``None`` values for deletions (they must still shadow
older sources). Forward sources yield chunks in ascending order; reverse sources yield
chunks in *descending* order, each chunk still ascending inside.

Sources are given newest first, so when several hold a key, the earliest one wins; no
sequence numbers are needed here (the LSM invariant: memtables are newer than L0, L0
files are ordered by age, and level i is newer than level i+1).

Why runs: with a handful of sources and a scan of dozens of keys, most consecutive keys
come from the same source. The merge finds, with one ``bisect``, how many keys of the
leading source come before any other source's next key, and hands out that whole slice;
the per-key work is then a C-level ``zip``. An item-at-a-time ``heapq.merge`` through
nested generators costs several times more per key in CPython.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import chain
from typing import Callable, Generator, Iterable, Iterator, Sequence

__all__ = ["merge_forward", "merge_reverse", "Chunk"]

Chunk = tuple[Sequence[bytes], Sequence["bytes | None"]]


def _live(keys: Sequence[bytes], values: Sequence[bytes | None]
          ) -> Iterator[tuple[bytes, bytes]]:
    if None in values:
        return ((k, v) for k, v in zip(keys, values) if v is not None)
    return zip(keys, values)  # type: ignore[arg-type]


def merge_forward(sources: Iterable[Iterator[Chunk]],
                  release: Callable[[], None] | None = None
                  ) -> tuple[Iterator[tuple[bytes, bytes]], Callable[[], None]]:
    """``(key, value)`` in ascending key order, newest source winning, deletions dropped;
    and a function that ends the merge early.

    ``release`` is called once when the merge ends: exhausted, ended or collected.
    The runs are chained by ``itertools.chain`` in C, so handing out one key costs no
    Python frame at all; the generator below resumes once per run.
    """
    sources = list(sources)
    if len(sources) == 2:  # the common case: the memtable and one level (see _forward_two)
        runs = _forward_two(sources[0], sources[1], release)
    else:
        runs = _forward_runs(sources, release)
    return chain.from_iterable(runs), runs.close


def merge_reverse(sources: Iterable[Iterator[Chunk]],
                  release: Callable[[], None] | None = None
                  ) -> tuple[Iterator[tuple[bytes, bytes]], Callable[[], None]]:
    """``(key, value)`` in descending key order; see :func:`merge_forward`."""
    runs = _reverse_runs(sources, release)
    return chain.from_iterable(runs), runs.close


def _forward_runs(sources: Iterable[Iterator[Chunk]], release: Callable[[], None] | None
                  ) -> Generator[Iterator[tuple[bytes, bytes]], None, None]:
    try:
        # Each head: [keys, values, pos, source, priority]; exhausted heads are dropped.
        heads: list[list] = []
        for prio, src in enumerate(sources):
            for keys, values in src:
                if keys:
                    heads.append([keys, values, 0, src, prio])
                    break
        while heads:
            if len(heads) == 1:
                keys, values, pos, src, _ = heads[0]
                yield _live(keys[pos:], values[pos:])
                for keys, values in src:
                    yield _live(keys, values)
                return
            best = heads[0]
            bkey = best[0][best[2]]
            for h in heads[1:]:
                k = h[0][h[2]]
                if k < bkey or (k == bkey and h[4] < best[4]):
                    best, bkey = h, k
            limit = None
            for h in heads:
                if h is not best:
                    k = h[0][h[2]]
                    if limit is None or k < limit:
                        limit = k
            keys, values, pos = best[0], best[1], best[2]
            if limit == bkey:
                end = pos + 1  # the newest version of a key several sources hold
            else:
                end = bisect_left(keys, limit, pos)
            yield _live(keys[pos:end], values[pos:end])
            last = keys[end - 1]
            best[2] = end
            for h in heads:  # older versions of the last key handed out are shadowed
                if h is not best and h[0][h[2]] == last:
                    h[2] += 1
            heads = [h for h in heads if h[2] < len(h[0]) or _refill(h)]
    finally:
        if release is not None:
            release()


def _next_chunk(src: Iterator[Chunk]) -> Chunk | tuple[None, None]:
    """The next non-empty chunk of ``src``; ``(None, None)`` when it is done."""
    for keys, values in src:
        if keys:
            return keys, values
    return None, None


def _forward_two(a: Iterator[Chunk], b: Iterator[Chunk], release: Callable[[], None] | None
                 ) -> Generator[Iterator[tuple[bytes, bytes]], None, None]:
    """:func:`_forward_runs` for exactly two sources, ``a`` the newer: the same runs, with
    the two heads in locals instead of a list of heads scanned per run (a scan of the
    memtable and one level, the common case, resumes this a few times per scan)."""
    try:
        ak, av = _next_chunk(a)
        bk, bv = _next_chunk(b)
        ai = bi = 0
        while ak is not None and bk is not None:
            ka = ak[ai]
            kb = bk[bi]
            if ka < kb:
                end = bisect_left(ak, kb, ai)
                yield _live(ak[ai:end], av[ai:end])  # type: ignore[index]
                ai = end
            elif kb < ka:
                end = bisect_left(bk, ka, bi)
                yield _live(bk[bi:end], bv[bi:end])  # type: ignore[index]
                bi = end
            else:  # both hold the key: ``a``'s version wins, ``b``'s is shadowed
                value = av[ai]  # type: ignore[index]
                if value is not None:
                    yield iter(((ka, value),))
                ai += 1
                bi += 1
            if ai == len(ak):
                ak, av = _next_chunk(a)
                ai = 0
            if bi == len(bk):
                bk, bv = _next_chunk(b)
                bi = 0
        if ak is not None:
            keys, values, pos, src = ak, av, ai, a
        elif bk is not None:
            keys, values, pos, src = bk, bv, bi, b
        else:
            return
        yield _live(keys[pos:], values[pos:])  # type: ignore[index]
        for keys, values in src:
            yield _live(keys, values)
    finally:
        if release is not None:
            release()


def _reverse_runs(sources: Iterable[Iterator[Chunk]], release: Callable[[], None] | None
                  ) -> Generator[Iterator[tuple[bytes, bytes]], None, None]:
    """Here a head's live part of its chunk is ``keys[:end]``, consumed from the back."""
    try:
        heads: list[list] = []  # [keys, values, end, source, priority]
        for prio, src in enumerate(sources):
            for keys, values in src:
                if keys:
                    heads.append([keys, values, len(keys), src, prio])
                    break
        while heads:
            if len(heads) == 1:
                keys, values, end, src, _ = heads[0]
                yield _live(keys[end - 1::-1], values[end - 1::-1])
                for keys, values in src:
                    yield _live(keys[::-1], values[::-1])
                return
            best = heads[0]
            bkey = best[0][best[2] - 1]
            for h in heads[1:]:
                k = h[0][h[2] - 1]
                if k > bkey or (k == bkey and h[4] < best[4]):
                    best, bkey = h, k
            limit = None
            for h in heads:
                if h is not best:
                    k = h[0][h[2] - 1]
                    if limit is None or k > limit:
                        limit = k
            keys, values, end = best[0], best[1], best[2]
            if limit == bkey:
                start = end - 1
            else:
                start = bisect_right(keys, limit, 0, end)
            stop = start - 1 if start else None
            yield _live(keys[end - 1:stop:-1], values[end - 1:stop:-1])
            last = keys[start]
            best[2] = start
            for h in heads:
                if h is not best and h[0][h[2] - 1] == last:
                    h[2] -= 1
            heads = [h for h in heads if h[2] > 0 or _refill_reverse(h)]
    finally:
        if release is not None:
            release()


def _refill(h: list) -> bool:
    """Load the next non-empty chunk into head ``h``; False when its source is done."""
    for keys, values in h[3]:
        if keys:
            h[0], h[1], h[2] = keys, values, 0
            return True
    return False


def _refill_reverse(h: list) -> bool:
    for keys, values in h[3]:
        if keys:
            h[0], h[1], h[2] = keys, values, len(keys)
            return True
    return False
