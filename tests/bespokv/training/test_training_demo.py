"""The demo runs end to end (a short configuration): killed, resumed, losses equal."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.server]


def test_demo_kills_itself_resumes_and_carries_on():
    proc = subprocess.run([sys.executable, "-m", "bespokv.training.demo", "--steps", "40", "--every", "10",
                           "--kill-at", "25", "--timeout", "120", "--s3", "moto"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    out = proc.stdout
    assert "killed by SIGKILL" in out and "resumed from demo/step-20 (step 20)" in out
    assert "profile reused" in out and "demo/step-40" in out and "size classes" in out
