"""`python -m bench checkpoint` runs end to end on a tiny state (no S3, no fsspec peer)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch", reason="the training extra (torch==2.13.0) is not installed")


def test_checkpoint_bench_smoke(tmp_path):
    from bench.checkpoint import main

    assert main(["--size", "2MiB", "--tensors", "10", "--repeat", "1", "--rounds", "3", "--s3", "none",
                 "--skip-fsspec", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    assert set(res["throughput"]) == {"fs-local", "kv-file", "kv-file-md5"}
    first, second, third = res["dedup"]
    # everything once (the Adam step scalars are equal: one chunk), plus the pickled param_groups
    assert res["state_bytes"] - 4096 < first["uploaded_bytes"] < res["state_bytes"] + 8192
    # 10% of the tensors (one parameter and its Adam state) change per round
    assert second["uploaded_bytes"] == third["uploaded_bytes"] == pytest.approx(res["state_bytes"] / 10, rel=0.01)
    assert "TensorTable" in (tmp_path / "report.md").read_text()


def test_fsspec_peer_script_imports_torch_from_any_directory(tmp_path):
    """Issue 27 item 17: the peer put bench/ first on sys.path, so bench/profile.py shadowed
    the standard library's profile (torch imports it through cProfile) and the peer died."""
    import os
    import subprocess
    import sys

    from bench.checkpoint import peer_command

    command = peer_command(sys.executable, {})[:-1] + ["--imports"]  # as the benchmark runs it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the peer's venv has no project
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_offload_bench_smoke(tmp_path):
    from bench.checkpoint_offload import main

    assert main(["--dim", "16", "--layers", "1", "--vocab", "50", "--batch", "2", "--seq", "4", "--warmup", "3",
                 "--steps", "1", "--repeat", "1", "--dir", str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    modes = res["modes"]
    assert modes["resident"]["allocations_per_step"] == [0]
    assert modes["on_demand"]["allocations_per_step"][0] > 0  # two fresh tensors per parameter per step
    assert 0 < modes["prefetch"]["state_bytes_in_memory"] <= res["pool_capacity_bytes"]  # a bounded pool
