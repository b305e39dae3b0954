"""``python -m bench get-concurrency``: how many GETs a second each latency model lets
through, by the number of client threads (decision 0047).

One local S3 server (SeaweedFS, else moto) on 127.0.0.1 holds one object of
``--object-size``; ``--threads`` client threads each issue ranged GETs of ``--size``
(a rocksmash fetch window is 256 KiB) at random offsets for ``--seconds``, through
cloudtier's ``S3Store`` (one connection per thread), in three set-ups measured in the
same run:

* ``none``: straight to the server, no delay: what the server and client cost;
* ``proxy``: through the delay proxy (one process) adding ``--delay-ms`` per request:
  the ``proxy`` latency model;
* ``store``: straight to the server, ``--delay-ms`` added inside the client's store
  (cloudtier's FaultInjectingStore ``latency_s``): the ``store`` latency model.

With a delay d and n threads, an ideal emulated network allows n / d GETs a second;
the report gives that bound beside each measured rate. On a 2-core machine the server,
the client (and the proxy) share the same cores, so every set-up is bounded by their
CPU; what differs is how much a model adds to it.
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
from typing import Any, Sequence

__all__ = ["measure", "main"]

SETUPS = ("none", "proxy", "store")


def _rate(store: Any, threads: int, seconds: float, size: int, object_size: int) -> float:
    count = [0] * threads
    stop = time.monotonic() + seconds

    def work(i: int) -> None:
        rng = random.Random(i)
        while time.monotonic() < stop:
            off = rng.randrange(0, object_size - size)
            store.get("obj", off, off + size)
            count[i] += 1

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    t0 = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(count) / (time.monotonic() - t0)


def measure(threads: list[int], seconds: float, size: int, delay_ms: float, server: str = "auto",
            object_size: int = 32 << 20) -> list[dict[str, Any]]:
    """GETs/s per (set-up, thread count); one row each."""
    import cloudtier
    from cloudtier.proxy import DelayProxy, parse_hostport
    from cloudtier.testing import local_s3_server

    rows = []
    with local_s3_server(server) as srv:
        opts = dict(srv.store_options(), max_pool_connections=max(threads) + 8)
        with cloudtier.open_store("s3://bench-getc/p", create_bucket=True, **opts) as st:
            st.put("obj", os.urandom(object_size))
        with DelayProxy(parse_hostport(srv.endpoint_url), delay_ms=delay_ms) as proxy:
            for setup in SETUPS:
                extra: dict[str, Any] = {}
                if setup == "proxy":
                    extra["endpoint_url"] = proxy.endpoint_url
                elif setup == "store":
                    extra["faults"] = {"latency_s": delay_ms / 1000.0}
                with cloudtier.open_store("s3://bench-getc/p", **{**opts, **extra}) as store:
                    for n in threads:
                        r = _rate(store, n, seconds, size, object_size)
                        bound = None if setup == "none" or not delay_ms else n * 1000.0 / delay_ms
                        rows.append({"setup": setup, "threads": n, "gets_per_s": r, "ideal": bound})
                        print(f"  {setup:5} {n:3} threads: {r:7.0f} GETs/s"
                              + ("" if bound is None else f" (ideal {bound:,.0f})"), flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    from bench.units import parse_bytes

    p = argparse.ArgumentParser(prog="python -m bench get-concurrency",
                                description=(__doc__ or "").split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--threads", default="1,8,64", help="comma-separated thread counts (1,8,64)")
    p.add_argument("--seconds", type=float, default=5.0, help="per measurement (5)")
    p.add_argument("--size", type=parse_bytes, default=256 << 10, help="bytes per GET (256KiB)")
    p.add_argument("--delay-ms", type=float, default=20.0, help="emulated delay per request (20)")
    p.add_argument("--s3-server", default="auto", choices=("auto", "seaweedfs", "moto"))
    a = p.parse_args(argv)
    threads = [int(x) for x in a.threads.split(",") if x.strip()]
    print(f"ranged GETs of {a.size:,} bytes, {a.delay_ms:g} ms per request, {a.seconds:g} s each:")
    measure(threads, a.seconds, a.size, a.delay_ms, a.s3_server)
    return 0
