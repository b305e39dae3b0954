"""How often live bespokv nodes lose their lease on a CPU-starved machine (decision 0050).

For each lease TTL asked for: a 3-node etcd cluster (ms-sc, 3 shards x 3 replicas, the
memory datalet), a client writing as fast as it can, and ``stress --cpu N`` (or as many
Python busy loops where stress is not installed) for ``--seconds``; optionally the nodes
and etcd niced (on a machine busy with other work, that starves them without adding load). Then every node's lease figures from its status (``lease_lapses``: its
lease expired while it ran; ``lease_longest_gap_s``: the longest time between two
keep-alives) and the failovers in the node logs. Prints one line per run::

    python scripts/lease_under_load.py --ttl 1 --ttl 2 --seconds 60 --burners 2
    python scripts/lease_under_load.py --ttl 1 --seconds 60 --burners 2 --nice 10 --repeat 2

Every process it starts binds to 127.0.0.1 and is stopped by its id.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bespokv.config import Tuning
from bespokv.testing import LocalCluster

BURN = "import time\nwhile True: sum(range(10000))\n"


def _burners(n: int) -> list[subprocess.Popen[bytes]]:
    if n <= 0:
        return []
    if shutil.which("stress"):
        return [subprocess.Popen(["stress", "--cpu", str(n)], stdout=subprocess.DEVNULL, start_new_session=True)]
    return [subprocess.Popen([sys.executable, "-c", BURN], start_new_session=True) for _ in range(n)]


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        os.killpg(p.pid, signal.SIGKILL)  # stress forks its workers into the group we made
        p.wait(10)


def run(ttl: float, seconds: float, burners: int, nice: int) -> dict[str, object]:
    tuning = Tuning(lease_ttl=ttl, request_timeout=3.0)
    folder = tempfile.mkdtemp(prefix="lease-under-load-")
    with LocalCluster(3, replicas=3, shards=3, mode="ms-sc", tuning=tuning, etcd=1, dir=folder) as cluster:
        if nice:  # the nodes and etcd: what the cluster started
            for pid in cluster.all_pids():
                os.setpriority(os.PRIO_PROCESS, pid, nice)
        client = cluster.client(retries=50, timeout=5.0)
        stop = threading.Event()
        writes = [0]

        def write() -> None:
            i = 0
            while not stop.is_set():
                try:
                    client.put(b"k%08d" % i, b"v" * 100)
                    writes[0] += 1
                except Exception:  # counted as a gap by the lease figures, not here
                    pass
                i += 1

        writer = threading.Thread(target=write)
        load = _burners(burners)
        writer.start()
        try:
            time.sleep(seconds)
            loadavg = os.getloadavg()[0]
        finally:
            stop.set()
            writer.join(60)
            _stop(load)
        status = client.cluster_status()
        client.close()
        lapses = {n.id: int(n.counters.get("lease_lapses", 0)) for n in status.nodes}
        gaps = {n.id: n.counters.get("lease_longest_gap_s", 0.0) for n in status.nodes}
        failovers = 0
        for path in glob.glob(os.path.join(folder, "logs", "*.log")):
            with open(path, errors="replace") as f:
                failovers += sum(1 for line in f if "failed over without" in line)
    shutil.rmtree(folder, ignore_errors=True)
    return {"ttl": ttl, "lapses": sum(lapses.values()), "per_node": lapses, "longest_gap_s": max(gaps.values()),
            "failovers": failovers, "writes": writes[0], "loadavg": round(loadavg, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ttl", type=float, action="append", help="lease TTL in seconds (repeatable; default 1)")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--burners", type=int, default=2, help="stress --cpu N (0: no extra load)")
    ap.add_argument("--nice", type=int, default=0, help="renice the nodes and etcd by this much")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    print(f"uptime before: {os.getloadavg()}")
    for _ in range(args.repeat):
        for ttl in args.ttl or [1.0]:
            r = run(ttl, args.seconds, args.burners, args.nice)
            print(f"ttl {r['ttl']:g} s, {args.burners} burners, nice {args.nice}: {r['lapses']} lapses {r['per_node']}, "
                  f"longest keep-alive gap {r['longest_gap_s']:.2f} s, {r['failovers']} failovers, "
                  f"{r['writes']} writes, load {r['loadavg']}", flush=True)
    print(f"uptime after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
