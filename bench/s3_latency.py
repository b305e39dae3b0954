"""``python -m bench s3-latency``: per-request latency of the local S3 servers, side by side.

Starts each server (SeaweedFS's ``weed mini`` and moto's server, :mod:`cloudtier.testing`)
in turn on 127.0.0.1, and from one client thread through cloudtier's ``S3Store`` (boto3,
one kept-alive connection, no proxy) issues, per operation kind, ``--requests`` requests
of ``--size``-byte objects: PUT (each to a new key), GET (whole object), ranged GET (the
first 4 KiB), HEAD, LIST (one page of up to 100 keys) and DELETE. Latencies come from
cloudtier's ``MeteredStore`` histograms (log buckets, within 4.4%); the report gives p50,
p99 and mean per kind and server, and the ratio of the two servers' p50s measured in the
same run. Both servers compete with the client for the same cores, so these are loopback
costs of the server software, not network latencies.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import time
from pathlib import Path
from typing import Any, Callable

__all__ = ["measure_server", "run_latency", "render_latency", "main_args"]

_BUCKET = "bench-latency"
_RANGE = 4096

#: request kind -> (the call on a store for one key, the meter's operation name).
REQUESTS: dict[str, tuple[Callable[[Any, str, bytes], Any], str]] = {
    "put": (lambda s, k, data: s.put(k, data), "put"),
    "get": (lambda s, k, data: s.get(k), "get"),
    "get-range": (lambda s, k, data: s.get(k, 0, _RANGE), "get"),
    "head": (lambda s, k, data: s.head(k), "head"),
    "list": (lambda s, k, data: s.list_page("obj-", limit=100), "list"),
    "delete": (lambda s, k, data: s.delete(k), "delete"),
}


def measure_server(kind: str, requests: int, size: int,
                   log: Callable[[str], None] = print) -> dict[str, Any]:
    """Start the ``kind`` server, time ``requests`` requests of each kind, stop it."""
    from cloudtier import MeteredStore
    from cloudtier.s3_store import S3Store
    from cloudtier.testing import local_s3_server

    payload = os.urandom(size)
    t0 = time.perf_counter()
    with local_s3_server(kind) as server:
        started_s = time.perf_counter() - t0
        log(f"  {kind}: started in {started_s:.1f} s at {server.endpoint_url} (pid {server.pid})")
        out: dict[str, Any] = {"server": kind, "start_s": started_s, "latency_ms": {}}
        with S3Store(_BUCKET, "lat", create_bucket=True, **server.store_options()) as s3:
            for key in ("warm-0", "warm-1"):  # connection set-up and first-request costs
                s3.put(key, payload)
                s3.get(key)
            keys = [f"obj-{i:06d}" for i in range(requests)]
            for label, (call, op) in REQUESTS.items():  # in order: puts first, deletes last
                meter = MeteredStore(s3)
                for k in keys:
                    call(meter, k, payload)
                out["latency_ms"][label] = meter.snapshot()["latency_ms"][op]  # meter not closed: s3 stays open
    return out


def run_latency(servers: list[str], requests: int, size: int, command: str = "",
                log: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure each server in turn; return the results document."""
    from bench.compare import machine_info

    if requests < 1 or size < 0:
        raise ValueError("need --requests >= 1 and --size >= 0")
    doc: dict[str, Any] = {
        "schema": "bench.s3_latency/1", "command": command, "machine": machine_info(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "config": {"requests": requests, "size": size, "range": _RANGE}, "results": [],
    }
    for kind in servers:
        doc["results"].append(measure_server(kind, requests, size, log))
    return doc


def render_latency(doc: dict[str, Any]) -> str:
    """One row per request kind: p50 / p99 / mean per server, and the p50 ratio."""
    results = doc["results"]
    names = [r["server"] for r in results]
    head = ["request"] + [f"{n} p50/p99/mean ms" for n in names]
    if len(names) == 2:
        head.append(f"p50 {names[0]} / {names[1]}")
    body = []
    for label in REQUESTS:
        row = [label]
        lat = [r["latency_ms"].get(label) or {} for r in results]
        for x in lat:
            row.append("-" if not x.get("count") else f"{x['p50']:.2f} / {x['p99']:.2f} / {x['mean']:.2f}")
        if len(names) == 2:
            a, b = (x.get("p50") for x in lat)
            row.append(f"{a / b:.2f}x" if a and b else "-")
        body.append(row)
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    fmt = "  ".join(f"{{:{w}}}" for w in widths)
    cfg = doc["config"]
    lines = [f"{cfg['requests']} requests of each kind, {cfg['size']}-byte objects, one client thread, "
             f"127.0.0.1, no proxy:", fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*b).rstrip() for b in body]
    lines.append("start-up: " + ", ".join(f"{r['server']} {r['start_s']:.1f} s" for r in results))
    return "\n".join(lines)


def main_args(servers: list[str], requests: int, size: int, out: Path | None, command: str) -> int:
    """The ``s3-latency`` command: measure, print, and write ``results.json`` to ``out``."""
    doc = run_latency(servers, requests, size, command)
    text = render_latency(doc)
    print()
    print(text)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(doc, indent=1))
        (out / "report.txt").write_text(text + "\n")
        print(f"\nresults: {out / 'results.json'}")
    return 0
