"""bench.costs: a comparison's monthly cost and break-even size per workload, against
figures worked out by hand (S3 Standard $0.023/GiB-month, $0.005 per 1,000 PUTs, $0.0004
per 1,000 GETs; EBS gp3 $0.08/GiB-month; a month is 2,628,000 s)."""

from __future__ import annotations

import pytest

from bench.costs import format_size, render_costs, workload_costs

GIB = 1 << 30


def _trial(system: str, workload: str, local: float, *, bucket: dict | None = None,
           run: dict | None = None, reads: int = 0, seconds: float = 10.0) -> dict:
    t = {"system": system, "workload": workload, "status": "ok",
         "disk": {"after_run": {"allocated": int(local)}},
         "run": {"seconds": seconds, "latency": {"read": {"count": reads}, "update": {"count": 7}}},
         "object_store_requests": {"run": run} if run is not None else None}
    if bucket is not None:
        t["object_store_usage"] = {"objects": 3, "bytes": sum(bucket.values())}
        t["bucket_kinds"] = {"kinds": {k: {"objects": 1, "bytes": v} for k, v in bucket.items()}}
    return t


def _doc() -> dict:
    # 1,048,576 records of 24 + 1000 bytes: 1 GiB of data.
    return {"systems": ["rocksmash", "rocksmash-local", "rocksdb"], "baseline": "rocksdb",
            "workloads": ["a", "c"],
            "config": {"records": 1 << 20, "key_size": 24, "value_size": 1000},
            "trials": [
                # A: 0.1 GiB local, 1 GiB kept in the bucket (5 GiB of retired tables in their
                # grace are not kept), 1 PUT and 100 GETs in 10 s, 10,000 reads.
                _trial("rocksmash", "a", 0.1 * GIB, bucket={"cloud_tables": GIB, "retired_tables": 5 * GIB},
                       run={"put": 1, "get": 100, "bytes_read": 123}, reads=10_000),
                _trial("rocksmash-local", "a", 1.1 * GIB),
                _trial("rocksdb", "a", GIB),
                # C: no request in the run phase at all.
                _trial("rocksmash", "c", 0.1 * GIB, bucket={"cloud_tables": GIB}, run={"get": 0}, reads=5),
                _trial("rocksmash-local", "c", 1.1 * GIB),
                _trial("rocksdb", "c", GIB),
                {"system": "rocksdb", "workload": "c", "status": "failed"},  # not counted
            ]}


def test_cost_per_workload_by_part_with_the_break_even() -> None:
    rows = {r["workload"]: r for r in workload_costs(_doc())}
    a = rows["a"]
    assert (a["tiered"], a["all_local"]) == ("rocksmash", "rocksdb")  # RocksDB's own disk
    assert a["data_bytes"] == GIB and a["tiered_object_bytes"] == GIB  # not the grace
    assert a["rocksmash_local_bytes"] == pytest.approx(1.1 * GIB)
    assert a["rates"] == {"put": 0.1, "get": 10.0}
    assert a["gets_per_1k_reads"] == pytest.approx(10.0)
    t, lo = a["now"]["tiered"], a["now"]["all_local"]
    assert t.local_ssd == pytest.approx(0.008) and t.object_storage == pytest.approx(0.023)
    assert t.puts == pytest.approx(1.314) and t.gets == pytest.approx(10.512)
    assert lo.total == pytest.approx(0.08)
    # requests $11.826 a month; each GiB saves $0.08 - $0.031 = $0.049: 241.3 GiB
    assert a["break_even_bytes"] / GIB == pytest.approx(11.826 / 0.049)
    at100 = a["at"]["100 GiB"]
    assert at100["tiered"].total == pytest.approx(100 * 0.031 + 11.826)
    assert at100["all_local"].total == pytest.approx(8.0)
    assert a["at"]["1 TiB"]["all_local"].total == pytest.approx(81.92)
    assert rows["c"]["break_even_bytes"] == 0  # no requests: cheaper at any size
    assert rows["c"]["gets_per_1k_reads"] == 0


def test_ssd_price_from_the_config_and_the_text_view() -> None:
    doc = _doc()
    doc["config"]["ssd_usd_gb_month"] = 0.125
    a = {r["workload"]: r for r in workload_costs(doc)}["a"]
    assert a["now"]["all_local"].total == pytest.approx(0.125)
    assert a["break_even_bytes"] / GIB == pytest.approx(11.826 / (0.125 - 0.0125 - 0.023))
    text = render_costs(doc)
    assert "EBS gp3 (us-east-1) $0.125/GiB-month" in text and "$0.023/GiB-month" in text
    assert format_size(a["break_even_bytes"]) in text and "any size" in text
    assert "100 GiB: tiered / all-local" in text and "1 TiB" in text


def test_without_rocksdb_all_local_rocksmash_is_the_reference_and_nothing_without_a_tier() -> None:
    doc = _doc()
    doc["systems"].remove("rocksdb")
    doc["trials"] = [t for t in doc["trials"] if t["system"] != "rocksdb"]
    a = workload_costs(doc)[0]
    assert a["all_local"] == "rocksmash-local" and a["all_local_bytes"] == pytest.approx(1.1 * GIB)
    doc["trials"] = [t for t in doc["trials"] if t["system"] != "rocksmash"]
    assert workload_costs(doc) == [] and render_costs(doc) == ""


def test_format_size() -> None:
    assert format_size(None) == "never" and format_size(0) == "any size"
    assert format_size(512 << 20) == "512 MiB" and format_size(241.3 * GIB) == "241.3 GiB"
    assert format_size(2048 * GIB) == "2.0 TiB"
