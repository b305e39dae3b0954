"""YCSB's request distributions, vectorized with numpy.

The benchmark draws operations in batches, so every generator here draws a whole batch at
once from a caller-owned ``numpy.random.Generator`` (the caller seeds it; nothing here
keeps hidden randomness, which is what makes two runs with one seed identical).

Records are numbered ``0, 1, 2, ...`` in insert order ("key numbers"); the mapping from a
key number to key bytes lives in :mod:`bench.records`. A *chooser* turns the per-operation
record counts into key numbers: ``choose(rng, counts)`` returns, for each ``counts[i]``
(the number of records that exist when operation ``i`` is issued), a key number in
``[0, counts[i])``.

=================  ==========================================================================
chooser            what it does (and which YCSB class it mirrors)
=================  ==========================================================================
``uniform``        uniform over the records loaded before the run (UniformLongGenerator;
                   like YCSB, keys inserted during the run are never picked)
``zipfian``        YCSB's ``requestdistribution=zipfian``: ScrambledZipfianGenerator, a
                   zipfian over 10^10 ranks (theta 0.99, zeta precomputed by YCSB) whose
                   rank is FNV-hashed modulo the key space, so hot keys are spread out;
                   the key space includes the inserts expected in the run and draws of
                   not-yet-inserted keys are redrawn, as YCSB's CoreWorkload does
``zipfian-plain``  ZipfianGenerator over the key space: key number ``k`` has rank ``k``,
                   so the first-inserted records are the hottest
``latest``         SkewedLatestGenerator: the newest record is the hottest, popularity
                   falls off as a zipfian over recency
=================  ==========================================================================

Zipfian sampling follows Gray et al., "Quickly Generating Billion-Record Synthetic
Databases" (SIGMOD 1994), as YCSB does: ranks 0 and 1 are exact, higher ranks come from
a closed-form inverse that approximates the zipfian law. When the item count grows (new
inserts), zeta(n) is extended incrementally and eta recomputed from the current n.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

__all__ = [
    "ZIPFIAN_CONSTANT",
    "SCRAMBLED_ITEM_COUNT",
    "SCRAMBLED_ZETAN",
    "DISTRIBUTIONS",
    "fnv_hash64",
    "zeta",
    "ZipfianGenerator",
    "ScrambledZipfianGenerator",
    "KeyChooser",
    "UniformChooser",
    "ZipfianChooser",
    "ScrambledZipfianChooser",
    "LatestChooser",
    "make_chooser",
]

#: YCSB's default zipfian constant (``zipfian.constant`` / ZipfianGenerator.ZIPFIAN_CONSTANT).
ZIPFIAN_CONSTANT = 0.99
#: Rank space of YCSB's ScrambledZipfianGenerator (ITEM_COUNT).
SCRAMBLED_ITEM_COUNT = 10_000_000_000
#: zeta(10^10, 0.99) as hard-coded in YCSB's ScrambledZipfianGenerator (ZETAN).
SCRAMBLED_ZETAN = 26.46902820178302

#: Names accepted for ``--distribution`` (``scrambled`` is an alias of ``zipfian``).
DISTRIBUTIONS = ("zipfian", "zipfian-plain", "latest", "uniform")

_FNV_OFFSET_BASIS_64 = np.uint64(0xCBF29CE484222325)
_FNV_PRIME_64 = np.uint64(1099511628211)
_BYTE = np.uint64(0xFF)
_EIGHT = np.uint64(8)
# Sum zeta exactly up to this many terms; beyond it, Euler-Maclaurin for the tail.
_ZETA_EXACT_TERMS = 50_000_000
_ZETA_CHUNK = 4_000_000
_MAX_REDRAWS = 10_000


def fnv_hash64(values: np.ndarray) -> np.ndarray:
    """YCSB's ``Utils.fnvhash64``: FNV-1a over the 8 little-endian bytes, then abs().

    ``values`` are non-negative integers (any integer dtype). Returns uint64. The result
    equals Java's ``Math.abs(hash)`` except for the single hash ``Long.MIN_VALUE``, which
    Java leaves negative and this returns as 2**63.
    """
    v = np.asarray(values).astype(np.int64, copy=False).view(np.uint64)
    h = np.full(v.shape, _FNV_OFFSET_BASIS_64, dtype=np.uint64)
    for _ in range(8):
        h ^= v & _BYTE
        h *= _FNV_PRIME_64  # wraps modulo 2**64, like Java's long arithmetic
        v = v >> _EIGHT
    return np.abs(h.view(np.int64)).view(np.uint64)


def zeta(n: int, theta: float) -> float:
    """The generalized harmonic number ``sum(1 / i**theta for i in 1..n)``.

    Exact (pairwise float64 summation) up to 5e7 terms; beyond that the tail is added
    with the Euler-Maclaurin formula (relative error far below 1e-12 for theta near 1).
    """
    if n <= 0:
        return 0.0
    exact_to = min(n, _ZETA_EXACT_TERMS)
    total = _partial_zeta(0, exact_to, theta)
    if n > exact_to:
        a, b = float(exact_to), float(n)
        one_minus = 1.0 - theta
        integral = (b**one_minus - a**one_minus) / one_minus
        f = lambda x: x**-theta  # noqa: E731
        df = lambda x: -theta * x ** (-theta - 1.0)  # noqa: E731
        total += integral + (f(b) - f(a)) / 2.0 + (df(b) - df(a)) / 12.0
    return total


def _partial_zeta(start: int, stop: int, theta: float) -> float:
    """``sum(1 / i**theta for i in start+1..stop)`` exactly, in chunks."""
    total = 0.0
    lo = start + 1
    while lo <= stop:
        hi = min(lo + _ZETA_CHUNK, stop + 1)
        total += float(np.sum(np.arange(lo, hi, dtype=np.float64) ** -theta))
        lo = hi
    return total


class ZipfianGenerator:
    """Zipfian ranks: ``P(rank = k) ~ 1 / (k + 1)**theta`` for ``k`` in ``[0, n)``.

    ``n`` may grow between calls (YCSB's incremental zeta); it may not shrink. Not
    thread-safe: give each client thread its own generator.
    """

    def __init__(self, item_count: int, theta: float = ZIPFIAN_CONSTANT,
                 zetan: float | None = None) -> None:
        if item_count < 1:
            raise ValueError(f"zipfian needs at least one item, got {item_count}")
        if not 0 < theta < 1:
            raise ValueError(f"zipfian theta must be in (0, 1), got {theta}")
        self.theta = theta
        self.alpha = 1.0 / (1.0 - theta)
        self.zeta2 = zeta(2, theta)
        self.half_pow_theta = 0.5**theta
        # _zetas[k] == zeta(_base + k); extended as item counts grow, trimmed from below.
        self._base = item_count
        self._zetas = np.array([zeta(item_count, theta) if zetan is None else zetan])

    @property
    def item_count(self) -> int:
        """The smallest item count this generator can still draw for."""
        return self._base

    def _zeta_for(self, counts: np.ndarray) -> np.ndarray:
        lo, hi = int(counts.min()), int(counts.max())
        if lo < self._base:
            raise ValueError(f"zipfian item count shrank from {self._base} to {lo}")
        top = self._base + len(self._zetas) - 1
        if hi > top:
            terms = np.arange(top + 1, hi + 1, dtype=np.float64) ** -self.theta
            self._zetas = np.concatenate([self._zetas, self._zetas[-1] + np.cumsum(terms)])
        if lo > self._base:
            self._zetas = self._zetas[lo - self._base:].copy()
            self._base = lo
        return self._zetas[counts - self._base]

    def sample(self, rng: np.random.Generator, counts: np.ndarray | int, size: int | None = None) -> np.ndarray:
        """Draw one rank per element of ``counts`` (or ``size`` ranks for a scalar count).

        Returns int64 ranks with ``0 <= rank < count``.
        """
        if np.isscalar(counts):
            n_scalar = int(counts)  # type: ignore[arg-type]
            if size is None:
                raise ValueError("size is required with a scalar count")
            zetan = self._zeta_for(np.array([n_scalar]))[0]
            n: np.ndarray | float = float(n_scalar)
            limit: np.ndarray | int = n_scalar - 1
            draws = size
        else:
            c = np.asarray(counts, dtype=np.int64)
            zetan = self._zeta_for(c)
            n = c.astype(np.float64)
            limit = c - 1
            draws = len(c)
        theta = self.theta
        u = rng.random(draws)
        eta = (1.0 - (2.0 / n) ** (1.0 - theta)) / (1.0 - self.zeta2 / zetan)
        uz = u * zetan
        with np.errstate(invalid="ignore", over="ignore"):
            ranks = (n * (eta * u - eta + 1.0) ** self.alpha).astype(np.int64)
        ranks[uz < 1.0 + self.half_pow_theta] = 1
        ranks[uz < 1.0] = 0
        np.clip(ranks, 0, limit, out=ranks)
        return ranks


class ScrambledZipfianGenerator:
    """YCSB's ScrambledZipfianGenerator: zipfian ranks over 10^10 items, FNV-hashed
    modulo ``item_count``. Popular items are scattered across ``[0, item_count)``.
    """

    def __init__(self, item_count: int, theta: float = ZIPFIAN_CONSTANT) -> None:
        if item_count < 1:
            raise ValueError(f"scrambled zipfian needs at least one item, got {item_count}")
        self.item_count = item_count
        zetan = SCRAMBLED_ZETAN if theta == ZIPFIAN_CONSTANT else zeta(SCRAMBLED_ITEM_COUNT, theta)
        self._ranks = ZipfianGenerator(SCRAMBLED_ITEM_COUNT, theta, zetan=zetan)
        self._modulus = np.uint64(item_count)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Draw ``size`` item numbers in ``[0, item_count)`` (int64)."""
        ranks = self._ranks.sample(rng, SCRAMBLED_ITEM_COUNT, size)
        return (fnv_hash64(ranks) % self._modulus).astype(np.int64)


class KeyChooser(Protocol):
    """Picks the key numbers of read/update/scan/read-modify-write operations."""

    def choose(self, rng: np.random.Generator, counts: np.ndarray) -> np.ndarray:
        """One key number per operation; ``0 <= result[i] < counts[i]`` (int64 array)."""
        ...


class UniformChooser:
    """Uniform over the ``record_count`` records loaded before the run (as YCSB)."""

    def __init__(self, record_count: int) -> None:
        self.record_count = record_count

    def choose(self, rng: np.random.Generator, counts: np.ndarray) -> np.ndarray:
        out = rng.integers(0, self.record_count, len(counts), dtype=np.int64)
        return np.minimum(out, counts - 1)


def _redraw_beyond(draw, rng: np.random.Generator, counts: np.ndarray) -> np.ndarray:
    """Draw with ``draw(rng, k)`` and redraw every value ``>= counts[i]`` (not yet inserted)."""
    out = draw(rng, len(counts))
    bad = np.flatnonzero(out >= counts)
    for _ in range(_MAX_REDRAWS):
        if bad.size == 0:
            return out
        out[bad] = draw(rng, bad.size)
        bad = bad[out[bad] >= counts[bad]]
    raise RuntimeError("key chooser kept drawing keys that are not inserted yet")


class ZipfianChooser:
    """Plain zipfian over a key space of ``space`` records: key number == rank."""

    def __init__(self, space: int, theta: float = ZIPFIAN_CONSTANT) -> None:
        self.space = space
        self._gen = ZipfianGenerator(space, theta)

    def choose(self, rng: np.random.Generator, counts: np.ndarray) -> np.ndarray:
        return _redraw_beyond(lambda r, k: self._gen.sample(r, self.space, k), rng, counts)


class ScrambledZipfianChooser:
    """YCSB's ``zipfian``: scrambled zipfian over ``space`` (loaded + expected inserts)."""

    def __init__(self, space: int, theta: float = ZIPFIAN_CONSTANT) -> None:
        self.space = space
        self._gen = ScrambledZipfianGenerator(space, theta)

    def choose(self, rng: np.random.Generator, counts: np.ndarray) -> np.ndarray:
        return _redraw_beyond(self._gen.sample, rng, counts)


class LatestChooser:
    """YCSB's SkewedLatestGenerator: ``newest - zipfian(count)``; the newest record is hottest."""

    def __init__(self, record_count: int, theta: float = ZIPFIAN_CONSTANT) -> None:
        self._gen = ZipfianGenerator(max(record_count, 1), theta)

    def choose(self, rng: np.random.Generator, counts: np.ndarray) -> np.ndarray:
        return counts - 1 - self._gen.sample(rng, counts)


def make_chooser(distribution: str, record_count: int, expected_inserts: int,
                 theta: float = ZIPFIAN_CONSTANT) -> KeyChooser:
    """Build the chooser for a ``--distribution`` name.

    ``expected_inserts`` sizes the zipfian key spaces the way YCSB's CoreWorkload does
    (``operationcount * insertproportion * 2``). Raises ValueError for unknown names.
    """
    space = record_count + expected_inserts
    if distribution in ("zipfian", "scrambled"):
        return ScrambledZipfianChooser(space, theta)
    if distribution == "zipfian-plain":
        return ZipfianChooser(space, theta)
    if distribution == "latest":
        return LatestChooser(record_count, theta)
    if distribution == "uniform":
        return UniformChooser(record_count)
    raise ValueError(f"unknown distribution {distribution!r}; choose from {', '.join(DISTRIBUTIONS)}")
