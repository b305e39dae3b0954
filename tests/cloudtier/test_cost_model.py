"""cloudtier.cost_model: monthly costs and the break-even size, against figures worked
out by hand from the list prices (S3 Standard: $0.023/GiB-month, $0.005 per 1,000
PUT-class and $0.0004 per 1,000 GET-class requests; EBS gp3: $0.08/GiB-month; a month is
730 h = 2,628,000 s)."""

from __future__ import annotations

import dataclasses

import pytest

from cloudtier import S3_STANDARD, TieringCosts, monthly_cost
from cloudtier.cost_model import request_rates

GIB = 1 << 30
MONTH_S = 2_628_000


def test_a_month_of_storage_and_requests_by_part() -> None:
    cost = monthly_cost(10 * GIB, 100 * GIB, {"put": 1.0, "get": 10.0})
    assert cost.local_ssd == pytest.approx(0.80)  # 10 GiB x $0.08
    assert cost.object_storage == pytest.approx(2.30)  # 100 GiB x $0.023
    assert cost.puts == pytest.approx(13.14)  # 2,628,000 PUTs x $0.005 / 1,000
    assert cost.gets == pytest.approx(10.512)  # 26,280,000 GETs x $0.0004 / 1,000
    assert cost.storage == pytest.approx(3.10) and cost.requests == pytest.approx(23.652)
    assert cost.total == pytest.approx(26.752)
    assert cost.as_dict()["total"] == pytest.approx(26.752)


def test_request_classes_lists_and_heads_and_free_deletes() -> None:
    # LIST and POST are billed as PUTs, HEAD as a GET, DELETE is free on S3.
    cost = monthly_cost(rates={"list": 1.0, "post": 1.0, "head": 10.0, "delete": 100.0})
    assert cost.puts == pytest.approx(2 * 13.14) and cost.gets == pytest.approx(10.512)
    assert monthly_cost(rates={"delete": 1.0}, prices=dataclasses.replace(
        S3_STANDARD, delete_per_1000=0.001)).puts == pytest.approx(MONTH_S * 0.001 / 1000)


def test_request_rates_from_counts() -> None:
    rates = request_rates({"get": 100, "put": 10, "head": 0, "bytes_read": 5_000}, 10.0)
    assert rates == {"get": 10.0, "put": 1.0}
    with pytest.raises(ValueError):
        request_rates({"get": 1}, 0.0)


def _model(**kw: object) -> TieringCosts:
    # 1 GiB of data: tiered keeps 0.1 GiB locally and 1 GiB in the bucket, all-local 1 GiB
    # of disk; the tiered side makes 0.1 PUT/s.
    args: dict = {"data_bytes": GIB, "tiered_local_bytes": 0.1 * GIB,
                  "tiered_object_bytes": GIB, "all_local_bytes": GIB, "rates": {"put": 0.1}}
    args.update(kw)
    return TieringCosts(**args)


def test_break_even_where_the_request_cost_meets_the_storage_saving() -> None:
    m = _model()
    # Requests: 262,800 PUTs a month = $1.314. Each GiB saves $0.08 - ($0.008 + $0.023).
    assert m.tiered().requests == pytest.approx(1.314)
    assert m.saving_per_gib() == pytest.approx(0.049)
    be = m.break_even_bytes()
    assert be is not None and be / GIB == pytest.approx(1.314 / 0.049)  # 26.8 GiB
    assert m.tiered(be).total == pytest.approx(m.all_local(be).total)
    assert m.tiered(be * 0.9).total > m.all_local(be * 0.9).total  # dearer below it
    assert m.tiered(be * 1.1).total < m.all_local(be * 1.1).total  # cheaper above it


def test_the_same_data_at_100_gib_and_1_tib_at_the_same_request_rates() -> None:
    m = _model()
    assert m.tiered(100 * GIB).total == pytest.approx(100 * 0.031 + 1.314)  # $4.414
    assert m.all_local(100 * GIB).total == pytest.approx(8.00)
    t = m.tiered(1024 * GIB)
    assert t.local_ssd == pytest.approx(102.4 * 0.08) and t.object_storage == pytest.approx(1024 * 0.023)
    assert t.requests == pytest.approx(1.314)  # rates do not grow with the data
    assert m.all_local(1024 * GIB).total == pytest.approx(81.92) == m.all_local(1024 * GIB).local_ssd


def test_never_cheaper_and_always_cheaper() -> None:
    # A bucket holding 4 bytes per data byte ($0.092/GiB) costs more than SSD ($0.08).
    assert _model(tiered_object_bytes=4 * GIB).break_even_bytes() is None
    # No requests at all: cheaper from the first byte.
    assert _model(rates={}).break_even_bytes() == 0
    # The SSD price comes from the price table: at $0.125, each GiB saves $0.0895.
    pricey = _model(prices=dataclasses.replace(S3_STANDARD, ssd_gb_month=0.125))
    assert pricey.break_even_bytes() / GIB == pytest.approx(1.314 / (0.125 - 0.0125 - 0.023))


def test_bad_models_are_refused() -> None:
    with pytest.raises(ValueError):
        _model(data_bytes=0)
    with pytest.raises(ValueError):
        _model(all_local_bytes=-1)
