"""`pip install .` alone gives a working embedded engine, without the service's or the
object stores' dependencies, and without a top-level `bench` package; the installed
metadata carries the license (Apache-2.0, with the LICENSE file)."""

from __future__ import annotations

import os
import subprocess
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


@pytest.mark.slow
def test_plain_install_runs_the_engine(tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = str(env_dir / "bin" / "python")
    r = subprocess.run([py, "-m", "pip", "install", "-q", ROOT], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([py, "-c", SMOKE], capture_output=True, text=True, timeout=300,
                       cwd=str(tmp_path))  # not the checkout: only what was installed
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
