"""bench.costs: the monthly-cost view of a comparison, against hand-computed figures."""

from __future__ import annotations

import pytest

from bench.costs import HOURS_PER_MONTH, monthly_costs, render_costs

GIB = 1 << 30


def _trial(system: str, workload: str, local: int, stored: int | None, run: dict | None,
           seconds: float = 10.0) -> dict:
    t = {"system": system, "workload": workload, "status": "ok",
         "disk": {"after_run": {"allocated": local}}, "run": {"seconds": seconds},
         "object_store_requests": {"run": run} if run is not None else None}
    if stored is not None:
        t["object_store_usage"] = {"objects": 1, "bytes": stored}
    return t


def _doc() -> dict:
    return {"systems": ["rocksmash", "rocksdb"], "baseline": "rocksdb", "config": {},
            "trials": [
                _trial("rocksmash", "a", 1 * GIB, 9 * GIB, {"get": 100, "put": 10, "head": 0, "list": 0, "delete": 0}),
                _trial("rocksmash", "b", 3 * GIB, 11 * GIB, {"get": 300, "put": 0}),
                _trial("rocksdb", "a", 10 * GIB, 0, None),
                _trial("rocksdb", "b", 10 * GIB, 0, None),
                {"system": "rocksdb", "workload": "c", "status": "failed"},  # not counted
            ]}


def test_monthly_costs_match_the_price_table() -> None:
    rows = {r["system"]: r for r in monthly_costs(_doc(), ssd_usd_gb_month=0.10)}
    tiered, local = rows["rocksmash"], rows["rocksdb"]
    assert tiered["local_usd"] == pytest.approx(2 * 0.10)  # mean 2 GiB of SSD
    assert tiered["object_usd"] == pytest.approx(10 * 0.023)  # mean 10 GiB in S3 Standard
    per_month = HOURS_PER_MONTH * 3600 / 10.0  # the run lasted 10 s
    a = (100 * 0.0004 + 10 * 0.005) / 1000 * per_month
    b = (300 * 0.0004) / 1000 * per_month
    assert tiered["requests_usd"] == pytest.approx((a + b) / 2)
    assert tiered["total_usd"] == pytest.approx(0.2 + 0.23 + (a + b) / 2)
    assert local["trials"] == 2 and local["local_usd"] == pytest.approx(1.0)
    assert local["object_usd"] is None and local["requests_usd"] is None  # all-local
    assert local["total_usd"] == pytest.approx(1.0)


def test_ssd_price_comes_from_the_config_and_render_shows_the_ratio() -> None:
    doc = _doc()
    doc["config"]["ssd_usd_gb_month"] = 0.5
    rows = {r["system"]: r for r in monthly_costs(doc)}
    assert rows["rocksdb"]["total_usd"] == pytest.approx(5.0)
    text = render_costs(doc)
    assert "local SSD $0.5/GiB-month" in text and "$0.023/GiB-month" in text
    ratio = rows["rocksmash"]["total_usd"] / 5.0
    assert f"{ratio:.2f}x" in text and "rocksdb *" in text
