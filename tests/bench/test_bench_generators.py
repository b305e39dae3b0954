"""Request distributions: against theory, against YCSB's reference algorithms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.generators import (SCRAMBLED_ITEM_COUNT, SCRAMBLED_ZETAN, LatestChooser,
                              ScrambledZipfianChooser, ScrambledZipfianGenerator,
                              UniformChooser, ZipfianChooser, ZipfianGenerator, fnv_hash64,
                              make_chooser, zeta)

MASK64 = (1 << 64) - 1


def java_fnvhash64(val: int) -> int:
    """YCSB's Utils.fnvhash64, transcribed literally (Java long arithmetic)."""
    h = 0xCBF29CE484222325
    for _ in range(8):
        octet = val & 0xFF
        val >>= 8
        h ^= octet
        h = (h * 1099511628211) & MASK64
    signed = h - (1 << 64) if h >= 1 << 63 else h
    return abs(signed)


def gray_pmf(n: int, theta: float) -> np.ndarray:
    """Exact rank probabilities of Gray et al.'s sampler (YCSB's ZipfianGenerator),
    derived by inverting its formula over u in [0, 1)."""
    zetan = sum(i ** -theta for i in range(1, n + 1))
    zeta2 = 1 + 2 ** -theta
    eta = (1 - (2 / n) ** (1 - theta)) / (1 - zeta2 / zetan)
    u1 = (1 + 0.5 ** theta) / zetan
    k = np.arange(n + 1, dtype=np.float64)
    bounds = 1 - (1 - (k / n) ** (1 - theta)) / eta  # rank k  <=>  u in [b_k, b_{k+1})
    bounds = np.clip(bounds, u1, 1.0)
    pmf = np.diff(bounds)
    pmf[0] += 1 / zetan
    pmf[1] += 0.5 ** theta / zetan
    return pmf


def chi_square_critical(df: int, z: float = 3.09) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile (z=3.09: p = 0.001)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def test_fnv_matches_ycsb_reference() -> None:
    nums = [0, 1, 2, 255, 256, 10**6, 2**31 - 1, 2**40 + 12345, 10**10 - 1]
    got = fnv_hash64(np.array(nums)).tolist()
    assert got == [java_fnvhash64(v) for v in nums]
    # YCSB's first key with insertorder=hashed is "user6284781860667377211".
    assert got[0] == 6284781860667377211


def test_zeta_matches_ycsb_constant_and_direct_sum() -> None:
    assert zeta(1000, 0.99) == pytest.approx(sum(i ** -0.99 for i in range(1, 1001)), rel=1e-12)
    # 10^10 terms go through the Euler-Maclaurin tail; YCSB hard-codes the value.
    assert zeta(SCRAMBLED_ITEM_COUNT, 0.99) == pytest.approx(SCRAMBLED_ZETAN, rel=1e-9)


def test_zipfian_top_ranks_match_theory() -> None:
    n, theta, draws = 1000, 0.99, 400_000
    ranks = ZipfianGenerator(n, theta).sample(np.random.default_rng(7), n, draws)
    assert ranks.min() >= 0 and ranks.max() < n
    freq = np.bincount(ranks, minlength=n) / draws
    true_zipf = np.arange(1, n + 1) ** -theta
    true_zipf /= true_zipf.sum()
    # Ranks 0 and 1 are exact in Gray's method: within 3% of the zipfian law.
    for k in (0, 1):
        assert freq[k] == pytest.approx(true_zipf[k], rel=0.03)
    # The method approximates higher ranks; the top-10 mass stays within 6% of the law.
    assert freq[:10].sum() == pytest.approx(true_zipf[:10].sum(), rel=0.06)
    # And the whole histogram is what the algorithm should produce (chi-square, p=0.001).
    expected = gray_pmf(n, theta) * draws
    chi2 = float(((np.bincount(ranks, minlength=n) - expected) ** 2 / expected).sum())
    assert chi2 < chi_square_critical(n - 1)


def test_zipfian_theta_changes_skew() -> None:
    rng = np.random.default_rng(1)
    hot = np.mean(ZipfianGenerator(1000, 0.99).sample(rng, 1000, 50_000) == 0)
    mild = np.mean(ZipfianGenerator(1000, 0.5).sample(rng, 1000, 50_000) == 0)
    assert hot > 3 * mild


def test_zipfian_item_count_grows_incrementally() -> None:
    g = ZipfianGenerator(1000)
    counts = np.arange(1000, 1000 + 5000)
    ranks = g.sample(np.random.default_rng(2), counts)
    assert np.all(ranks < counts)
    assert g._zeta_for(np.array([5999]))[0] == pytest.approx(zeta(5999, 0.99), rel=1e-12)
    with pytest.raises(ValueError):
        g.sample(np.random.default_rng(2), np.array([10]))


def test_scrambled_zipfian_in_range_and_heavy_tailed() -> None:
    n, draws = 1000, 200_000
    x = ScrambledZipfianGenerator(n).sample(np.random.default_rng(3), draws)
    assert x.min() >= 0 and x.max() < n
    counts = np.bincount(x, minlength=n)
    # The hottest item is rank 0, scrambled: fnvhash64(0) mod n.
    assert counts.argmax() == java_fnvhash64(0) % n
    # Heavy tail: the top item ~ 1/zeta(1e10) = 3.8% of draws (uniform would be 0.1%),
    # the top 1% of items over 10% of draws.
    assert counts.max() / draws > 0.03
    assert np.sort(counts)[::-1][: n // 100].sum() / draws > 0.10
    # ...and hot items are scattered, not the low item numbers.
    assert counts[:10].sum() / draws < 0.1


def test_latest_favours_recent_records() -> None:
    rng = np.random.default_rng(4)
    chooser = LatestChooser(1000)
    keys = chooser.choose(rng, np.full(100_000, 1000))
    assert keys.min() >= 0 and keys.max() <= 999
    counts = np.bincount(keys, minlength=1000)
    assert counts.argmax() == 999
    assert counts[-10:].sum() > 50 * counts[:10].sum()
    # Once more records exist, the newest of them is the hottest.
    grown = chooser.choose(rng, np.full(100_000, 1500))
    assert np.bincount(grown).argmax() == 1499


def test_choosers_redraw_keys_not_inserted_yet() -> None:
    rng = np.random.default_rng(5)
    counts = np.full(50_000, 1000)
    for chooser in (ZipfianChooser(1100), ScrambledZipfianChooser(1100), UniformChooser(1000),
                    LatestChooser(1000)):
        keys = chooser.choose(rng, counts)
        assert keys.min() >= 0 and keys.max() < 1000, type(chooser).__name__


def test_make_chooser_names() -> None:
    assert isinstance(make_chooser("zipfian", 10, 0), ScrambledZipfianChooser)
    assert isinstance(make_chooser("scrambled", 10, 0), ScrambledZipfianChooser)
    assert isinstance(make_chooser("zipfian-plain", 10, 0), ZipfianChooser)
    assert isinstance(make_chooser("latest", 10, 0), LatestChooser)
    assert isinstance(make_chooser("uniform", 10, 0), UniformChooser)
    with pytest.raises(ValueError):
        make_chooser("gaussian", 10, 0)
