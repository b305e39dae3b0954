"""The fsspec/s3fs peer of ``python -m bench checkpoint``, run in its own virtualenv.

s3fs pins aiobotocore, which pins a botocore older than the boto3 this project needs, so
the peer cannot share the project's venv; ``bench.checkpoint`` builds one with torch
(the same 2.13.0) and s3fs and runs this script there::

    python checkpoint_fsspec.py JSON_ARGS     # prints one JSON line of results
    python checkpoint_fsspec.py --imports     # imports everything, prints "ok" (a test)

It imports only torch, s3fs and ``checkpoint_state.py``, the latter by its path. ``bench/``
must not be on ``sys.path`` (Python puts a script's directory first): ``bench/profile.py``
would shadow the standard library's ``profile``, which torch imports through ``cProfile``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import types
import warnings

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter  # noqa: E402

warnings.simplefilter("ignore")


def _load_state_module() -> types.ModuleType:
    path = os.path.join(_HERE, "checkpoint_state.py")
    spec = importlib.util.spec_from_file_location("checkpoint_state", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_state = _load_state_module()
empty_like_state, make_state = _state.empty_like_state, _state.make_state
same_state, state_bytes = _state.same_state, _state.state_bytes


def main() -> None:
    if sys.argv[1] == "--imports":
        print("ok")
        return
    a = json.loads(sys.argv[1])
    sd = make_state(a["bytes"], a["tensors"], a["seed"])
    fs = {"key": a["access_key"], "secret": a["secret_key"],
          "client_kwargs": {"endpoint_url": a["endpoint_url"], "region_name": a["region"]}}
    out = []
    for trial in range(a["repeat"]):
        path = f"s3://{a['bucket']}/fsspec-{os.getpid()}-{trial}"
        c0, t0 = time.process_time(), time.perf_counter()
        dcp.save(sd, storage_writer=FsspecWriter(path, thread_count=a["threads"], **fs))
        save_s, save_cpu = time.perf_counter() - t0, time.process_time() - c0
        back = empty_like_state(sd)
        t0 = time.perf_counter()
        dcp.load(back, storage_reader=FsspecReader(path, **fs))
        load_s = time.perf_counter() - t0
        if not same_state(sd, back):
            raise SystemExit("fsspec peer: a tensor did not round-trip")
        out.append({"save_s": save_s, "load_s": load_s, "save_cpu_s": save_cpu})
    print(json.dumps({"bytes": state_bytes(sd), "trials": out, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
