"""The demo's summary, its request check and its cost/footprint picture, from a synthetic
results document (no system runs here)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from bench.demo import summary
from bench.report import render_markdown
from bench.results import request_check

GIB = 1 << 30
_KINDS = ("get", "put", "head", "delete", "list", "post", "other", "continuation")


def _proxy(bursts: int = 0, **kinds: int) -> dict:
    return {"requests": bursts, **{f"http_{k}": kinds.get(k, 0) for k in _KINDS}}


def _trial(system: str, w: str, tput: float, disk: float, **extra: object) -> dict:
    t = {"system": system, "workload": w, "status": "ok",
         "run": {"throughput": tput, "seconds": 10.0,
                 "latency": {"read": {"count": 5000 if w == "a" else 10_000}}},
         "disk": {"after_load": {"allocated": int(disk)}, "after_run": {"allocated": int(disk)}}}
    t.update(extra)
    return t


def _tiered(w: str, tput: float, run: dict) -> dict:
    load = {"put": 5, "get": 1, "list": 2}
    own = {k: load.get(k, 0) + run.get(k, 0) for k in set(load) | set(run)}
    puts = own.get("put", 0)
    after = _proxy(sum(own.values()) + puts, continuation=puts, **own)
    end = dict(after, requests=after["requests"] + 1, http_delete=1)  # the close deletes one
    return _trial("rocksmash", w, tput, 0.1 * GIB,
                  object_store_requests={"load": load, "run": run},
                  object_store_usage={"objects": 9, "bytes": 3 * GIB},
                  bucket_kinds={"kinds": {"cloud_tables": {"objects": 8, "bytes": GIB},
                                          "retired_tables": {"objects": 1, "bytes": 2 * GIB}}},
                  proxy_at={"start": _proxy(), "before_run": _proxy(), "after_run": after, "end": end},
                  proxy={"requests": end["requests"]},
                  stats={p: {"raw": {"cloud": {"footprint": {"budget": int(0.1 * GIB),
                                                             "total": int(0.09 * GIB)}}}}
                         for p in ("after_load", "after_run")})


def _doc() -> dict:
    return {"schema": "bench.ycsb/1", "baseline": "rocksdb",
            "systems": ["rocksmash", "rocksmash-local", "rocksdb"], "workloads": ["a", "c"],
            "config": {"records": 1 << 20, "ops": 100_000, "key_size": 24, "value_size": 1000,
                       "threads": 1, "local_budget": "10%"},
            "environment": {"network": "s3", "object_store": "SeaweedFS", "delay_ms": 20.0,
                            "latency_model": "proxy", "latency": "the delay proxy adds 20 ms"},
            "trials": [_tiered("a", 800.0, {"put": 10, "get": 50}),
                       _trial("rocksmash-local", "a", 1000.0, 1.1 * GIB),
                       _trial("rocksdb", "a", 2000.0, GIB),
                       _tiered("c", 900.0, {"get": 20}),
                       _trial("rocksmash-local", "c", 1000.0, 1.1 * GIB),
                       _trial("rocksdb", "c", 1800.0, GIB)]}


def _paths(out: Path) -> dict:
    return {"markdown": out / "report.md", "json": out / "results.json",
            "plots": [out / "cost_footprint.png"]}


def test_summary_per_workload_against_both_all_local_systems() -> None:
    text = summary(_doc(), _paths(Path("out")))
    assert "x rocksdb" in text and "x rocksmash-local" in text and "GET/1k reads" in text
    row_a = next(line for line in text.splitlines() if line.strip().startswith("A   "))
    # 800 ops/s: 0.40x RocksDB, 0.80x all-local rocksmash; 102.4 MiB of disk: 0.10x, 0.09x;
    # 50 GETs for 5,000 reads.
    cells = row_a.replace(" MiB", "_MiB").split()
    for cell in ("800", "0.40x", "0.80x", "102.4_MiB", "0.10x", "0.09x", "10.00"):
        assert cell in cells, (cell, row_a)
    assert "latency model proxy: the delay proxy adds 20 ms" in text
    assert "What this means:" in text and "does not pay" in text
    assert "0.80x-0.90x of all-local rocksmash's throughput" in text
    assert "its reads made 70 GETs (20 ms each)" in text
    assert "break-even" in text and "100 GiB: tiered / all-local" in text
    assert ("Local disk after load + full compaction: rocksmash 102.4 MiB, 0.10x rocksdb's 1.0 GiB, "
            "0.09x rocksmash-local's 1.1 GiB") in text
    assert "at most 0.90x by its own footprint accounting" in text and "1.00x on disk" in text
    assert "out/report.md" in text and "cost_footprint.png" in text


def test_request_counts_agree_with_the_proxy_or_say_where_they_differ() -> None:
    doc = _doc()
    check = request_check(doc["trials"][0])
    assert check is not None and check["agree"]
    assert check["own"] == check["proxy"] == 68 and check["close"] == 1 and check["continuations"] == 15
    text = summary(doc, _paths(Path("out")))
    assert ("the system counted 96 over its 2 trials (open to the end of each run) and the "
            "proxy carried the same 96 HTTP requests") in text
    assert "the closes made 2 more" in text and "not requests" in text
    flying = copy.deepcopy(doc)  # a PUT the proxy saw start and the meter not yet return
    flying["trials"][3]["proxy_at"]["after_run"]["http_put"] += 1
    check = request_check(flying["trials"][3])
    assert not check["agree"] and check["in_flight"] == 1
    assert "but for 1 still in flight when a run ended" in summary(flying, _paths(Path("out")))
    bad = copy.deepcopy(doc)  # the proxy saw fewer: no request in flight explains that
    bad["trials"][3]["proxy_at"]["after_run"]["http_get"] -= 3
    assert request_check(bad["trials"][3])["in_flight"] is None
    text = summary(bad, _paths(Path("out")))
    assert "do NOT agree" in text and "GET 21 vs 18" in text
    md = render_markdown(doc)
    assert "## Monthly cost and break-even" in md and "the proxy carried the same 68" in md
    assert "- latency model: proxy: the delay proxy adds 20 ms" in md


def test_no_request_check_without_the_proxy_boundaries() -> None:
    t = _doc()["trials"][0]
    del t["proxy_at"]["after_run"]
    assert request_check(t) is None


def test_cost_and_footprint_are_plotted_beside_throughput(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from bench.plots import write_plots

    paths = write_plots(_doc(), tmp_path)
    assert paths[0].name == "cost_footprint.png" and paths[0].stat().st_size > 10_000
    assert (tmp_path / "throughput.png").exists()
    only_local = _doc()
    only_local["trials"] = [t for t in only_local["trials"] if t["system"] != "rocksmash"]
    (tmp_path / "x").mkdir()
    assert "cost_footprint.png" not in [p.name for p in write_plots(only_local, tmp_path / "x")]
