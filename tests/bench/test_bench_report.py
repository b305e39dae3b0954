"""Comparison ratios and report rendering, on a synthetic results document."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.metrics import latency_summary, latency_histogram
from bench.report import (SCHEMA, comparison_rows, load_json, ratio, render_markdown,
                          render_table, write_reports)


def _trial(system: str, workload: str, tput: float, p99_ns: int, rss: int, status: str = "ok") -> dict:
    lat = np.full(1000, p99_ns, dtype=np.int64)
    summary = latency_summary(latency_histogram(lat))
    t = {"system": system, "workload": workload, "status": status,
         "error": None if status == "ok" else "Traceback...\nRuntimeError: boom",
         "load": {"throughput": tput / 2},
         "run": {"throughput": tput, "not_found": 0, "items": 1000, "timeline": [tput, tput],
                 "latency": {"all": summary, "read": summary}},
         "rss": {"baseline": 10, "peak_self": rss, "tree_peak": rss // 2},
         "disk": {"after_run": {"allocated": rss * 2, "apparent": rss}}}
    return t


def _doc() -> dict:
    return {"schema": SCHEMA, "baseline": "rocksdb", "systems": ["rocksdb", "rocksmash"],
            "workloads": ["a", "c"], "command": "python -m bench ycsb ...",
            "trials": [_trial("rocksdb", "a", 100_000, 10_000, 1000),
                       _trial("rocksmash", "a", 200_000, 5_000, 3000),
                       _trial("rocksdb", "c", 50_000, 20_000, 1000),
                       _trial("rocksmash", "c", 0, 0, 0, status="failed")]}


def test_ratio_edge_cases() -> None:
    assert ratio(3, 2) == 1.5
    assert ratio(None, 2) is None and ratio(2, None) is None
    assert ratio(1, 0) is None and ratio(float("nan"), 1) is None


def test_rows_carry_ratios_against_the_baseline() -> None:
    rows = {(r["workload"], r["system"]): r for r in comparison_rows(_doc())}
    a_new, a_base = rows[("a", "rocksmash")], rows[("a", "rocksdb")]
    assert a_base["is_baseline"] and a_base["tput_ratio"] == 1.0
    assert a_new["tput_ratio"] == pytest.approx(2.0)
    assert a_new["load_tput_ratio"] == pytest.approx(2.0)
    assert a_new["p99_ratio"] == pytest.approx(0.5, rel=2e-3)
    assert a_new["rss_ratio"] == pytest.approx(3.0)
    assert a_new["disk_ratio"] == pytest.approx(3.0)
    failed = rows[("c", "rocksmash")]
    assert failed["status"] == "failed" and failed["tput_ratio"] is None
    # Another baseline flips the ratios.
    flipped = {(r["workload"], r["system"]): r for r in comparison_rows(_doc(), "rocksmash")}
    assert flipped[("a", "rocksdb")]["tput_ratio"] == pytest.approx(0.5)


def test_table_and_markdown_show_ratios_and_failures() -> None:
    table = render_table(_doc())
    assert "2.00x" in table and "0.50x" in table and "FAILED: RuntimeError: boom" in table
    assert "rocksdb *" in table
    md = render_markdown(_doc(), ["throughput.png"])
    assert "| A | rocksmash |" in md and "2.00x" in md
    assert "### Workload A" in md and "![throughput](throughput.png)" in md
    assert "RuntimeError: boom" in md


def test_write_reports_json_markdown_png(tmp_path) -> None:
    paths = write_reports(_doc(), tmp_path)
    assert load_json(paths["json"])["trials"][1]["run"]["throughput"] == 200_000
    assert paths["markdown"].read_text().startswith("# YCSB comparison")
    names = {p.name for p in paths["plots"]}
    assert {"throughput.png", "latency_cdf_a.png", "timeline_a.png"} <= names
    for p in paths["plots"]:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"schema": "nope"}))
    with pytest.raises(ValueError):
        load_json(bad)


def test_notes_flag_undercounting_systems_and_a_busy_machine() -> None:
    doc = _doc()
    doc["machine"] = {"cores": 2}
    t = doc["trials"][1]
    t["proxy"] = {"requests": 100, "bytes_up": 10_000_000}
    t["object_store_requests"] = {"load": {"put": 10, "bytes_written": 100}, "run": {"get": 5}}
    t["load_average"] = {"before": 4.5, "after": 3.0}
    md = render_markdown(doc)
    assert "counted 15 object-store requests, the proxy saw 100" in md
    assert "100 bytes written to the object store, the proxy carried 10,000,000 bytes up" in md
    assert "the machine was busy (1-minute load average 4.5 on 2 cores" in md
    quiet = _doc()
    quiet["trials"][1]["proxy"] = {"requests": 15, "bytes_up": 16_000}
    quiet["trials"][1]["object_store_requests"] = {"load": {"put": 10, "bytes_written": 1_000}, "run": {"get": 5}}
    assert "proxy saw" not in render_markdown(quiet) and "busy" not in render_markdown(quiet)


def test_repetitions_report_medians_spread_and_failures() -> None:
    doc = _doc()
    doc["trials"] = []
    for rep, (base_tput, new_tput) in enumerate([(100, 150), (110, 300), (90, 240)]):
        for t in (_trial("rocksdb", "a", base_tput, 10_000, 1000), _trial("rocksmash", "a", new_tput, 5_000, 1000)):
            t["repeat"] = rep
            doc["trials"].append(t)
    doc["trials"] += [dict(_trial("rocksdb", "c", 50, 1000, 1), repeat=0),
                      dict(_trial("rocksdb", "c", 70, 1000, 1), repeat=1),
                      dict(_trial("rocksmash", "c", 60, 1000, 1), repeat=0),
                      dict(_trial("rocksmash", "c", 0, 0, 0, status="failed"), repeat=1)]
    rows = {(r["workload"], r["system"]): r for r in comparison_rows(doc)}
    new = rows[("a", "rocksmash")]
    assert new["repeats"] == 3 and new["tput"] == 240 and new["tput_ratio"] == pytest.approx(2.4)
    assert (new["tput_min"], new["tput_max"]) == (150, 300)
    assert new["tput_spread"] == pytest.approx((300 - 150) / 2 / 240)
    assert rows[("c", "rocksdb")]["tput"] == 60  # median of two
    assert rows[("c", "rocksmash")]["status"] == "failed"  # one failed repetition fails the pair
    table = render_table(doc)
    assert "spread" in table and "+-31%" in table
    md = render_markdown(doc)
    assert "rocksmash #2" in md and "| rocksmash | read | 3,000 |" in md  # histograms merged


def test_report_command_rebuilds_reports_against_another_baseline(tmp_path, capsys) -> None:
    from bench.cli import main

    (tmp_path / "results.json").write_text(json.dumps(_doc()))
    assert main(["report", str(tmp_path / "results.json"), "--baseline", "rocksmash", "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "rocksmash *" in out and "0.50x" in out  # rocksdb is half as fast as the new baseline
    assert "baseline: rocksmash" in (tmp_path / "report.md").read_text()
