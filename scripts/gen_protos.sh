#!/bin/sh
# Regenerates the checked-in gRPC/protobuf Python code of bespokv from its .proto files.
# Usage: sh scripts/gen_protos.sh [OUTPUT_ROOT]   (default: the repository root)
# tests/bespokv/test_protos_fresh.py runs this into a temp dir and fails when the
# checked-in files differ, so run it (and commit the result) after editing a .proto.
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
OUT=${1:-.}
mkdir -p "$OUT"
"$PY" -m grpc_tools.protoc -I . \
    --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" \
    bespokv/proto/bespokv.proto
