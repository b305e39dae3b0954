"""redis-benchmark against bespokv's RESP front end and a real redis-server, in one run.

    python scripts/resp_benchmark.py [--modes ms-ec,ms-sc,aa-sc,aa-ec] [-n 200000] [--n1 50000]

For each mode, a 3-node local cluster (one process per node, memory datalets, 3
replicas, 3 shards) with `--redis`; then, for it and for a private redis-server:

* ``-t set,get -n N -P 16 -c 50`` through one node's client port (the node forwards what
  it does not serve: a plain client's view),
* the same with ``--cluster`` on the cluster ports (redis-benchmark sends each key to its
  slot's master: a cluster client's view; redis-server runs standalone, so its figure is
  the plain one),
* ``-P 1`` (unpipelined) through the client port, with ``--n1`` requests.

Prints requests/s and the ratio to redis-server per row (docs/benchmarks.md). Needs
redis-server and redis-benchmark (Debian's redis-server and redis-tools). Run it on a
quiet machine: ``flock /tmp/rocksmash-bench.lock python scripts/resp_benchmark.py``.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bespokv.testing import LocalCluster, RedisServer


def bench(port: int, n: int, pipeline: int, clients: int, *, cluster: bool = False) -> dict[str, float]:
    cmd = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", "set,get", "-n", str(n),
           "-P", str(pipeline), "-c", str(clients), "--csv"]
    if cluster:
        cmd.append("--cluster")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=True).stdout
    rows = [r for r in csv.reader(io.StringIO(out)) if len(r) >= 2 and r[0] in ("SET", "GET")]
    return {r[0]: float(r[1]) for r in rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default="ms-ec,ms-sc,aa-sc,aa-ec")
    ap.add_argument("-n", type=int, default=200_000, help="requests per test at -P 16")
    ap.add_argument("--n1", type=int, default=50_000, help="requests per test at -P 1")
    ap.add_argument("-c", type=int, default=50, help="clients")
    args = ap.parse_args()
    if not (shutil.which("redis-benchmark") and shutil.which("redis-server")):
        print("needs redis-server and redis-benchmark (apt-get install redis-server redis-tools)", file=sys.stderr)
        return 2
    results: dict[str, dict[str, dict[str, float]]] = {}
    with RedisServer() as r:
        results["redis-server"] = {
            "P16": bench(r.port, args.n, 16, args.c),
            "P16 cluster": {},
            "P1": bench(r.port, args.n1, 1, args.c),
        }
    for mode in args.modes.split(","):
        with LocalCluster(3, replicas=3, shards=3, mode=mode, datalet="memory", resp=True) as c:
            plain, clustered = c.resp_ports["n1"]
            results[mode] = {
                "P16": bench(plain, args.n, 16, args.c),
                "P16 cluster": bench(clustered, args.n, 16, args.c, cluster=True),
                "P1": bench(plain, args.n1, 1, args.c),
            }
        print(f"{mode}: {results[mode]}", file=sys.stderr, flush=True)
    base = results["redis-server"]
    print("| target | test | -P 16, client port | x Redis | -P 16, --cluster | x Redis | -P 1 | x Redis |")
    print("|---|---|---|---|---|---|---|---|")
    for name, res in results.items():
        for t in ("SET", "GET"):
            cells = []
            for kind, ref in (("P16", "P16"), ("P16 cluster", "P16"), ("P1", "P1")):
                v = res[kind].get(t)
                cells += [f"{v:,.0f}" if v else "-", f"{v / base[ref][t]:.3f}" if v else "-"]
            print(f"| {name} | {t} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
