"""MeteredStore counts and dollar math; LatencyHistogram accuracy."""

from __future__ import annotations

import json
import random

import pytest

from cloudtier import (
    S3_STANDARD,
    ClosedError,
    LatencyHistogram,
    MemoryStore,
    MeteredStore,
    NotFoundError,
    PreconditionFailedError,
    PriceTable,
)
from cloudtier.metered import SECONDS_PER_MONTH


class StepClock:
    """Each reading advances by ``step`` seconds: every call "takes" ``step``."""

    def __init__(self, step: float = 0.001) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_counts_requests_errors_and_bytes() -> None:
    store = MeteredStore(MemoryStore(page_size=2))
    for i in range(5):
        store.put(f"k{i}", b"x" * 100)
    store.get("k0")
    store.get("k1", 10, 30)
    store.head("k2")
    with pytest.raises(NotFoundError):
        store.get("missing")
    with pytest.raises(PreconditionFailedError):
        store.put("k0", b"y", if_none_match=True)
    store.delete("k4")
    assert len(list(store.list())) == 4  # 2 pages of 2 objects
    snap = store.snapshot()
    assert snap["requests"] == {"put": 6, "get": 3, "head": 1, "delete": 1, "list": 2}
    assert snap["errors"] == {"put": 1, "get": 1, "head": 0, "delete": 0, "list": 0}
    assert snap["bytes_in"] == 500  # the failed put sent nothing that was stored
    assert snap["bytes_out"] == 100 + 20
    assert snap["stored_objects"] == 4
    assert snap["stored_bytes"] == 400
    json.dumps(snap)  # a plain dict, ready for a report


def test_refused_calls_are_not_billed() -> None:
    store = MeteredStore(MemoryStore())
    with pytest.raises(ValueError):
        store.put("", b"x")  # invalid key: no request was sent
    store.close()
    with pytest.raises(ClosedError):
        store.get("k")
    assert sum(store.snapshot()["requests"].values()) == 0


def test_request_dollars_at_s3_standard_prices() -> None:
    store = MeteredStore(MemoryStore())
    for i in range(1000):
        store.put(f"k{i}", b"")
    for i in range(1000):
        store.get(f"k{i}")
    cost = store.snapshot()["cost_usd"]
    assert cost["requests"] == pytest.approx(1000 * 0.005 / 1000 + 1000 * 0.0004 / 1000)
    assert cost["requests"] == pytest.approx(0.0054)


def test_price_table_classes() -> None:
    requests = {"put": 2000, "list": 1000, "get": 5000, "head": 5000, "delete": 7000}
    assert S3_STANDARD.request_cost(requests) == pytest.approx(3 * 0.005 + 10 * 0.0004)
    custom = PriceTable(name="r2-ish", put_per_1000=0.0045, get_per_1000=0.00036, storage_gb_month=0.015)
    assert custom.request_cost(requests) == pytest.approx(3 * 0.0045 + 10 * 0.00036)


def test_monthly_estimate_extrapolates_requests_and_adds_storage() -> None:
    clock = StepClock(step=0.0)
    prices = PriceTable(put_per_1000=1.0, get_per_1000=0.0, storage_gb_month=2.0)
    store = MeteredStore(MemoryStore(), prices, clock=clock)
    store.put("big", b"\0" * (2**20))  # 1 MiB
    store.put("small", b"\0" * (2**20))
    clock.now += 3600.0  # one hour went by
    cost = store.snapshot()["cost_usd"]
    assert cost["requests"] == pytest.approx(2 * 1.0 / 1000)
    assert cost["storage_per_month"] == pytest.approx(2 / 1024 * 2.0)  # 2 MiB of a GiB
    assert cost["requests_per_month"] == pytest.approx(2 / 1000 * SECONDS_PER_MONTH / 3600)
    assert cost["monthly_estimate"] == pytest.approx(cost["requests_per_month"] + cost["storage_per_month"])


def test_stored_bytes_follow_overwrites_deletes_and_listings() -> None:
    backend = MemoryStore()
    backend.put("preexisting", b"x" * 50)  # put behind the meter's back
    store = MeteredStore(backend)
    store.put("a", b"x" * 10)
    store.put("a", b"x" * 30)  # overwrite: replaces, not adds
    assert store.snapshot()["stored_bytes"] == 30
    list(store.list())  # learns about the pre-existing object
    assert store.snapshot()["stored_bytes"] == 80
    store.delete("a")
    assert store.snapshot()["stored_bytes"] == 50
    backend.delete("preexisting")
    with pytest.raises(NotFoundError):
        store.head("preexisting")  # a 404 forgets it
    assert store.snapshot()["stored_bytes"] == 0


def test_latency_percentiles_per_operation() -> None:
    clock = StepClock(step=0.002)  # each clock read +2 ms: every call measures 2 ms
    store = MeteredStore(MemoryStore(), clock=clock)
    for i in range(10):
        store.put(f"k{i}", b"v")
    lat = store.snapshot()["latency_ms"]
    assert lat["put"]["count"] == 10
    assert lat["put"]["p50"] == pytest.approx(2.0, rel=0.05)
    assert lat["put"]["p99"] == pytest.approx(2.0, rel=0.05)
    assert lat["get"] == {"count": 0, "mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0.0}


def test_reset_zeroes_counters_but_keeps_sizes() -> None:
    store = MeteredStore(MemoryStore())
    store.put("k", b"12345")
    store.reset()
    snap = store.snapshot()
    assert sum(snap["requests"].values()) == 0
    assert snap["stored_bytes"] == 5


def test_histogram_percentiles_are_within_five_percent() -> None:
    rng = random.Random(1)
    samples = [rng.lognormvariate(-6, 1.5) for _ in range(20_000)]  # ~2.5 ms median
    h = LatencyHistogram()
    for s in samples:
        h.record(s)
    ordered = sorted(samples)
    for q in (1, 25, 50, 90, 99, 99.9):
        exact = ordered[max(0, int(q / 100 * len(ordered) + 0.999999) - 1)]
        assert h.percentile(q) == pytest.approx(exact, rel=0.05), q
    assert h.percentile(100) == max(samples)
    assert h.percentile(0) >= min(samples)
    assert h.count == len(samples)


def test_histogram_edges() -> None:
    h = LatencyHistogram()
    assert h.percentile(50) == 0.0
    h.record(0.0)
    h.record(5000.0)  # beyond the last bucket: clamped there, max still exact
    assert h.percentile(100) == 5000.0
    with pytest.raises(ValueError):
        h.percentile(101)
