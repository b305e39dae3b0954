"""``python -m bench service-profile``: what one client operation costs a bespokv cluster.

Starts a :class:`bespokv.testing.LocalCluster` (3 node processes, 3 replicas, one shard
per node), loads ``--records`` records, then runs a YCSB-like mix (``--read-fraction``
reads, the rest updates, scrambled zipfian keys) from ``--threads`` asyncio tasks sharing
one client for ``--seconds``. It prints the throughput and, from the nodes' counters
(differences over the run phase), per client operation:

* ``quorum_rounds``: quorum phases the coordinators ran (aa-sc: a write batch is two, a
  read batch one, plus one per write-back);
* ``datalet_writes``: store calls that wrote (with ``{"sync": true}``, one fsync each),
  summed over every replica, and ``store_calls`` per ``datalet_writes`` group;
* ``write_backs``: keys a read wrote back;
* the node processes' CPU time per client operation (user + system, from /proc: on a
  shared machine a steadier figure than the throughput);
* the client's operations per ``Multi`` RPC.

``--py-spy NODE`` also records that node process with py-spy (``pip install py-spy``)
during the run phase and prints its top functions (by own time, then with callees).

Example (the aa-sc figures of docs/benchmarks.md "service with fsync on")::

    python -m bench service-profile --mode aa-sc --datalet rocksmash \\
        --datalet-options '{"sync": true}' --py-spy n1
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Sequence

import numpy as np

from bench.generators import ScrambledZipfianChooser

__all__ = ["main"]

#: Counters summed over the nodes and divided by the client operations of the run.
PER_OP = ("quorum_rounds", "quorum_spares", "datalet_writes", "store_calls", "store_groups", "write_backs", "writes", "reads",
          "ae_rounds", "ae_buckets", "ae_repaired", "peer_read_rpcs", "peer_read_calls", "peer_write_rpcs",
          "peer_write_calls")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench service-profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", default="aa-sc", choices=["ms-sc", "ms-ec", "aa-sc", "aa-ec"])
    p.add_argument("--datalet", default="rocksmash")
    p.add_argument("--datalet-options", default='{"sync": true}', help="a JSON object")
    p.add_argument("--tuning", default="{}", help="a JSON object of bespokv.config.Tuning fields")
    p.add_argument("--max-inflight", type=int, default=None,
                   help="the client's Multi RPCs in flight per node (default: the client's, 1)")
    p.add_argument("--records", type=int, default=20_000)
    p.add_argument("--threads", type=int, default=64)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--read-fraction", type=float, default=0.5, help="0.5: YCSB A; 0.95: B")
    p.add_argument("--value-size", type=int, default=100)
    p.add_argument("--py-spy", metavar="NODE", help="record this node (n1, n2, n3) with py-spy")
    p.add_argument("--top", type=int, default=25, help="py-spy functions to print")
    p.add_argument("--seed", type=int, default=1)
    return p


def _counters(status: Any) -> dict[str, float]:
    """Per-shard counters of every node, summed over shards and nodes."""
    out: dict[str, float] = collections.defaultdict(float)
    for node in status.nodes:
        for k, v in node.counters.items():
            if k.startswith("shard") and "." in k:
                out[k.split(".", 1)[1]] += v
            else:
                out[f"node.{k}"] += v
    return out


async def _run(args: argparse.Namespace, cluster: Any) -> dict[str, Any]:
    client = cluster.async_client(**({} if args.max_inflight is None else {"max_inflight": args.max_inflight}))
    await client.connect()
    try:
        value = b"v" * args.value_size
        keys = [b"user%012d" % i for i in range(args.records)]
        for i in range(0, len(keys), 1000):
            await client.write_batch([(k, value) for k in keys[i : i + 1000]])
        rng = np.random.default_rng(args.seed)
        chooser = ScrambledZipfianChooser(args.records)
        before = _counters(await client.cluster_status())
        cpu0 = _cpu_seconds(cluster.all_pids())
        done = 0
        stop_at = time.monotonic() + args.seconds

        async def worker(seed: int) -> None:
            nonlocal done
            r = np.random.default_rng(seed)
            while time.monotonic() < stop_at:
                picks = chooser.choose(r, np.full(64, args.records, dtype=np.int64))
                reads = r.random(64) < args.read_fraction
                for key_no, is_read in zip(picks, reads):
                    if time.monotonic() >= stop_at:
                        return
                    if is_read:
                        await client.get(keys[key_no])
                    else:
                        await client.put(keys[key_no], value)
                    done += 1

        spy = None
        if args.py_spy:
            spy = _start_spy(cluster.pid(args.py_spy), args.seconds)
        t0 = time.monotonic()
        await asyncio.gather(*(worker(int(rng.integers(1 << 31))) for _ in range(args.threads)))
        elapsed = time.monotonic() - t0
        cpu = _cpu_seconds(cluster.all_pids()) - cpu0
        after = _counters(await client.cluster_status())
        batches = [(b.batches, b.items) for b in client._batchers.values()]
        return {"ops": done, "elapsed": elapsed, "cpu": cpu, "max_inflight": client.max_inflight, "before": before, "after": after, "spy": spy,
                "ops_per_multi": sum(i for _, i in batches) / max(1, sum(n for n, _ in batches))}
    finally:
        await client.close()


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes (Linux /proc), in seconds."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _start_spy(pid: int, seconds: float) -> tuple[subprocess.Popen[bytes], str]:
    out = tempfile.mktemp(suffix=".txt", prefix="py-spy-")
    exe = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    proc = subprocess.Popen([exe, "record", "--pid", str(pid), "--duration", str(int(seconds)),
                             "--format", "raw", "--output", out, "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return proc, out


def _print_spy(spy: tuple[subprocess.Popen[bytes], str], top: int) -> None:
    proc, out = spy
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    if not os.path.exists(out):
        print(f"py-spy wrote nothing: {err.decode(errors='replace')[-500:]}")
        return
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    with open(out) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            n = int(count)
            frames = stack.split(";")
            samples += n
            own[frames[-1]] += n
            for fr in set(frames):
                total[fr] += n
    os.remove(out)
    print(f"\npy-spy: {samples} samples (all threads)")
    for title, c in (("own time", own), ("with callees", total)):
        print(f"  top {top} by {title}:")
        for fr, n in c.most_common(top):
            print(f"    {100 * n / max(1, samples):5.1f}%  {fr}")


def main(argv: Sequence[str] | None = None) -> int:
    from bespokv.config import DataletSpec, Tuning
    from bespokv.testing import LocalCluster

    args = _parser().parse_args(argv)
    spec = DataletSpec(args.datalet, dict(json.loads(args.datalet_options or "{}")))
    tuning = Tuning(**json.loads(args.tuning or "{}"))
    with LocalCluster(3, mode=args.mode, datalet=spec, tuning=tuning) as cluster:
        res = asyncio.run(_run(args, cluster))
    ops, elapsed = res["ops"], res["elapsed"]
    client_inflight = res["max_inflight"]
    print(f"{args.mode} on {args.datalet} {args.datalet_options}: {ops} ops in {elapsed:.1f} s = "
          f"{ops / elapsed:,.0f} ops/s ({args.threads} tasks, read fraction {args.read_fraction}, "
          f"tuning {args.tuning}, client max_inflight {client_inflight}); "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"node CPU per client op: {1000 * res['cpu'] / max(1, ops):.2f} ms (all node processes; "
          f"the figure to compare on a shared machine)")
    print(f"client operations per Multi RPC: {res['ops_per_multi']:.1f}")
    diff = {k: res["after"].get(k, 0.0) - res["before"].get(k, 0.0) for k in res["after"]}
    for k in PER_OP:
        if k in diff:
            print(f"  {k:16s} {diff[k]:10.0f}  = {diff[k] / max(1, ops):.3f} per client op")
    if diff.get("datalet_writes"):
        print(f"  store calls per datalet write: {diff.get('store_calls', 0) / diff['datalet_writes']:.2f}")
    if diff.get("writes"):
        print(f"  keys per coordinated write: {diff.get('write_keys', 0) / diff['writes']:.1f}; "
              f"per read: {diff.get('read_keys', 0) / max(1, diff.get('reads', 0)):.1f}")
    if res["spy"] is not None:
        _print_spy(res["spy"], args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
