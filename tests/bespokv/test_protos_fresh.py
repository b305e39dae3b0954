"""The checked-in generated gRPC code must match bespokv/proto/bespokv.proto.

Regenerate with ``sh scripts/gen_protos.sh`` after editing the .proto. The comparison
ignores the generator's version stamps, so a newer grpcio-tools does not fail it; any
change to the messages or services does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ["bespokv_pb2.py", "bespokv_pb2_grpc.py", "bespokv_pb2.pyi"]


def normalize(text: str) -> str:
    text = re.sub(r"# Protobuf Python Version: .*\n", "", text)
    text = re.sub(r"_runtime_version\.ValidateProtobufRuntimeVersion\([^)]*\)\n", "", text)
    text = re.sub(r"GRPC_GENERATED_VERSION = '[^']*'\n", "", text)
    return text


def test_generated_code_is_fresh(tmp_path):
    pytest.importorskip("grpc_tools", reason="grpcio-tools is needed to regenerate the code")
    env = dict(os.environ, PYTHON=sys.executable)
    subprocess.run(["sh", str(ROOT / "scripts" / "gen_protos.sh"), str(tmp_path)], check=True, env=env, cwd=ROOT)
    stale = []
    for name in GENERATED:
        fresh = (tmp_path / "bespokv" / "proto" / name).read_text()
        checked_in = (ROOT / "bespokv" / "proto" / name).read_text()
        if normalize(fresh) != normalize(checked_in):
            stale.append(name)
    assert not stale, f"stale generated code {stale}: run `sh scripts/gen_protos.sh` and commit the result"


def test_normalize_keeps_real_changes():
    a = "GRPC_GENERATED_VERSION = '1.2.3'\nclass X: pass\n"
    b = "GRPC_GENERATED_VERSION = '9.9.9'\nclass X: pass\n"
    assert normalize(a) == normalize(b)
    assert normalize(a) != normalize(a.replace("X", "Y"))
