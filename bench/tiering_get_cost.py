"""``python -m bench.tiering_get_cost``: the client's CPU per ranged GET, per HTTP client.

A tiered database's miss costs one ranged GET of a fetch window (256 KiB by default).
Round 3 measured that the client's CPU per GET, not the round trip, bounds how many GETs
a second one process carries (the GIL). This probe compares candidate clients on the
same objects in one run:

* ``botocore``: cloudtier's :class:`~cloudtier.s3_store.S3Store` as it is;
* ``urllib3+sigv4``: a ``urllib3`` pool and botocore's SigV4 signer only;
* ``obstore``: the Rust ``object_store`` crate through obstore (its I/O outside the GIL).

For each client and thread count it issues ``--gets`` ranged GETs of ``--size`` bytes at
random offsets of a few ``--object-mib`` objects, and reports CPU seconds per GET
(``resource.getrusage(RUSAGE_SELF)``, all threads of this process, user + system) and
GETs per second of wall clock. The S3 server (SeaweedFS) and the delay proxy run as child
processes, so their CPU is not counted. Run it under the bench lock.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["main"]

_BUCKET = "get-cost"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _botocore(endpoint: str, opts: dict[str, Any], threads: int) -> Callable[[str, int, int], bytes]:
    from cloudtier.s3_store import S3Store

    store = S3Store(_BUCKET, max_pool_connections=max(threads, 1), **{**opts, "endpoint_url": endpoint})
    return lambda key, lo, hi: store.get(key, lo, hi)


def _urllib3_sigv4(endpoint: str, opts: dict[str, Any], threads: int) -> Callable[[str, int, int], bytes]:
    import urllib3
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    creds = Credentials(opts["access_key"], opts["secret_key"])
    signer = S3SigV4Auth(creds, "s3", opts["region"])
    pool = urllib3.PoolManager(maxsize=max(threads, 1), block=True)

    def get(key: str, lo: int, hi: int) -> bytes:
        url = f"{endpoint}/{_BUCKET}/{key}"
        req = AWSRequest("GET", url, headers={"Range": f"bytes={lo}-{hi - 1}"})
        req.context["payload_signing_enabled"] = False
        signer.add_auth(req)
        resp = pool.request("GET", url, headers=dict(req.headers.items()), preload_content=True)
        if resp.status not in (200, 206):
            raise RuntimeError(f"GET {key}: {resp.status}")
        return resp.data

    return get


def _obstore(endpoint: str, opts: dict[str, Any], threads: int) -> Callable[[str, int, int], bytes]:
    import obstore
    from obstore.store import S3Store as ObS3

    store = ObS3(
        _BUCKET,
        endpoint=endpoint,
        region=opts["region"],
        access_key_id=opts["access_key"],
        secret_access_key=opts["secret_key"],
        virtual_hosted_style_request=False,
        client_options={"allow_http": True, "pool_max_idle_per_host": str(max(threads, 1))},
        retry_config={"max_retries": 0},
    )

    def get(key: str, lo: int, hi: int) -> bytes:
        return bytes(obstore.get_range(store, key, start=lo, end=hi))

    return get


CLIENTS: dict[str, Callable[[str, dict[str, Any], int], Callable[[str, int, int], bytes]]] = {
    "botocore": _botocore,
    "urllib3+sigv4": _urllib3_sigv4,
    "obstore": _obstore,
}


def _measure(get: Callable[[str, int, int], bytes], keys: list[str], obj_size: int,
             size: int, gets: int, threads: int) -> tuple[float, float]:
    rng = random.Random(7)
    jobs = [(rng.choice(keys), rng.randrange(0, obj_size - size)) for _ in range(gets)]
    for key, lo in jobs[:threads]:  # open the connections outside the measurement
        get(key, lo, lo + size)
    lock = threading.Lock()
    it = iter(jobs)

    def worker() -> None:
        while True:
            with lock:
                job = next(it, None)
            if job is None:
                return
            data = get(job[0], job[1], job[1] + size)
            if len(data) != size:
                raise RuntimeError(f"short read: {len(data)}")

    cpu0, t0 = _cpu(), time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for f in [pool.submit(worker) for _ in range(threads)]:
            f.result()
    return (_cpu() - cpu0) / gets, gets / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tiering_get_cost", description=__doc__)
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--threads", default="1,16,64")
    ap.add_argument("--gets", type=int, default=600)
    ap.add_argument("--size", type=int, default=256 * 1024)
    ap.add_argument("--object-mib", type=int, default=8)
    ap.add_argument("--delay-ms", default="0,20", help="0 = direct; else through the proxy")
    args = ap.parse_args(argv)
    from cloudtier.s3_store import S3Store
    from cloudtier.testing import SeaweedServer, free_port

    obj_size = args.object_mib << 20
    with SeaweedServer() as server:
        opts = server.store_options()
        with S3Store(_BUCKET, create_bucket=True, **opts) as s3:
            keys = [f"obj-{i}" for i in range(4)]
            for k in keys:
                s3.put(k, os.urandom(obj_size))
        print(f"{'client':15} {'path':8} {'threads':>7} {'CPU ms/GET':>11} {'GETs/s':>8}", flush=True)
        for delay in [float(d) for d in args.delay_ms.split(",")]:
            proxy = None
            endpoint = opts["endpoint_url"]
            if delay:
                port = free_port()
                target = endpoint.removeprefix("http://")
                proxy = subprocess.Popen(
                    [sys.executable, "-m", "cloudtier.proxy", "--target", target,
                     "--port", str(port), "--delay-ms", str(delay)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                endpoint = f"http://127.0.0.1:{port}"
                _wait_port(port)
            try:
                for name in args.clients.split(","):
                    for threads in [int(t) for t in args.threads.split(",")]:
                        get = CLIENTS[name](endpoint, opts, threads)
                        cpu, rate = _measure(get, keys, obj_size, args.size, args.gets, threads)
                        path = f"proxy{delay:g}" if delay else "direct"
                        print(f"{name:15} {path:8} {threads:7d} {cpu * 1e3:11.2f} {rate:8.0f}", flush=True)
            finally:
                if proxy is not None:
                    proxy.terminate()
                    proxy.wait(10)
    return 0


def _wait_port(port: int, deadline_s: float = 30.0) -> None:
    import socket

    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 1.0).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the proxy did not listen on {port} within {deadline_s} s")


if __name__ == "__main__":
    sys.exit(main())
