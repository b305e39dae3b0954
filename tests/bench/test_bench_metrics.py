"""Latency histograms, per-second throughput, resource and cost helpers."""

from __future__ import annotations

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram

from bench.driver import PhaseRecord
from bench.metrics import (cdf_from_encoded, counter_delta, disk_usage, dollar_estimate,
                           hit_ratios, latency_histogram, per_second,
                           percentiles_from_encoded, summarize_phase)
from bench.units import parse_bytes, parse_count, parse_duration


def test_bulk_histogram_equals_recording_each_value() -> None:
    rng = np.random.default_rng(1)
    lat = rng.lognormal(9, 1.2, 30_000).astype(np.int64) + 50
    bulk = latency_histogram(lat)
    one_by_one = HdrHistogram(1, 3600 * 10**9, 3)
    for v in lat.tolist():
        one_by_one.record_value(v)
    assert bulk.get_total_count() == one_by_one.get_total_count() == lat.size
    for p in (1, 50, 90, 99, 99.9, 100):
        assert bulk.get_value_at_percentile(p) == one_by_one.get_value_at_percentile(p)
    # HDR with 3 significant digits: within 0.1% of the exact percentile.
    assert bulk.get_value_at_percentile(99) == pytest.approx(np.percentile(lat, 99), rel=2e-3)


def test_encoded_histogram_round_trip_and_cdf() -> None:
    lat = np.arange(1, 10_001, dtype=np.int64) * 1000  # 1..10000 us
    rec = PhaseRecord("run", 0, 2 * 10**9, lat.size, lat, np.zeros(lat.size, np.uint8),
                      [(10**9, 5000), (2 * 10**9, 5000)])
    s = summarize_phase(rec)
    assert s["throughput"] == pytest.approx(5000)
    assert s["mix"] == {"read": 10_000}
    read = s["latency"]["read"]
    assert read["count"] == 10_000
    assert read["p50_us"] == pytest.approx(5000, rel=2e-3)
    assert read["p99_us"] == pytest.approx(9900, rel=2e-3)
    assert percentiles_from_encoded(read["hdr"], [50])[0] == pytest.approx(read["p50_us"])
    x, y = cdf_from_encoded(read["hdr"])
    assert np.all(np.diff(x) > 0) and np.all(np.diff(y) >= 0) and y[-1] == pytest.approx(1.0)


def test_per_second_buckets() -> None:
    s = 10**9
    ticks = [(int(0.2 * s), 100), (int(0.9 * s), 100), (int(1.5 * s), 50), (int(2.5 * s), 30)]
    assert per_second(ticks, 0, int(2.5 * s)) == pytest.approx([200, 50, 60])
    # a last sliver under 100 ms is folded into the previous second
    assert per_second([(int(0.5 * s), 10), (int(1.05 * s), 4)], 0, int(1.05 * s)) == [14]
    assert per_second([], 0, s) == []


def test_dollars_hit_ratios_and_deltas() -> None:
    d = dollar_estimate({"put": 1000, "get": 10_000, "list": 0, "delete": 5}, 2**30)
    assert d["requests_usd"] == pytest.approx(0.005 + 0.004)
    assert d["storage_usd_per_month"] == pytest.approx(0.023)
    assert dollar_estimate(None, None) is None
    assert hit_ratios({"block": (3, 1), "idle": (0, 0)}) == {"block": 0.75, "idle": None}
    assert counter_delta({"get": 10, "name": "x", "pair": [5, 7]}, {"get": 4, "pair": [1, 2]}) == \
        {"get": 6, "name": "x", "pair": [4, 5]}


def test_disk_usage_counts_files(tmp_path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 5000)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b").write_bytes(b"y" * 100)
    u = disk_usage(tmp_path)
    assert u["apparent"] == 5100 and u["files"] == 2 and u["allocated"] >= 4096


def test_units() -> None:
    assert parse_count("1e6") == parse_count("1M") == parse_count("1_000_000") == 1_000_000
    assert parse_count("250k") == 250_000
    assert parse_bytes("64MiB") == 64 << 20 and parse_bytes("1.5GB") == 1_500_000_000
    assert parse_duration("5m") == 300
    for bad in ("1.5", "ten", "5x"):
        with pytest.raises(ValueError):
            parse_count(bad)
