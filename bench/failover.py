"""Failover time of a bespokv cluster, per mode and fault (``python -m bench failover``).

For each mode and fault: a local cluster (3 node processes, 3 shards, 3 replicas, the
in-memory datalet, default tuning) coordinated through a 1-member etcd, all on loopback.
A load of ``--tasks`` asyncio tasks writes distinct keys through one ``AsyncClient``; one
probe task per shard writes a key of that shard, one put after another. After
``--warmup`` seconds the node heading shard 0 is killed (``kill``: SIGKILL) or paused
(``pause``: SIGSTOP, resumed with SIGCONT when the trial ends), or shard 0's mode is
switched live (``switch``: ``bespokv.modeswitch.switch_mode`` to ``SWITCH_TO[mode]``, from
the same process; the fault's time is the start of the switch), or a fourth node is added
(``add``: ``bespokv.membership.add_node``, which moves its share of replicas to it online;
the fault's time is the start of the add).

Reported per shard: the failover time, from the fault to the completion of the first
successful probe write *issued at or after* the fault (a write in flight at the fault that
completes later is not counted: it may have been acknowledged before the fault took
effect), and the whole load's throughput per 100 ms bin through the fault (the
availability timeline). Also per shard: the longest gap between two successful probe
writes, and between two successful probe reads (one reader task per shard reading its
probe key in a loop), from the fault to the end of the trial: the write and read pauses.
No node is restarted.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["run_trial", "main_args"]

MODES = ("ms-sc", "ms-ec", "aa-sc", "aa-ec")
FAULTS = ("kill", "pause")
#: ``switch``: the mode shard 0 is switched to (the other family; ms-sc <-> aa-sc)
SWITCH_TO = {"ms-sc": "aa-sc", "ms-ec": "aa-ec", "aa-sc": "ms-sc", "aa-ec": "ms-ec"}
BIN = 0.1
#: Seconds the trial goes on after the fault.
AFTER = 8.0


async def _drive(cluster: Any, *, tasks: int, warmup: float, after: float, fault: str) -> dict[str, Any]:
    client = cluster.async_client(retries=1000, timeout=5.0)
    await client.connect()
    smap = await client.shard_map()
    shard_keys: dict[int, list[bytes]] = {sid: [] for sid in smap.shards}
    i = 0
    while any(len(v) < 1 for v in shard_keys.values()):
        k = b"probe%06d" % i
        shard_keys[smap.shard_for(k)].append(k)
        i += 1
    victim = smap.shard(0).head
    done: list[float] = []  # completion times of load writes
    probes: dict[int, list[tuple[float, float]]] = {sid: [] for sid in smap.shards}  # (issued, completed)
    reads: dict[int, list[float]] = {sid: [] for sid in smap.shards}  # completions
    stop = asyncio.Event()
    t_fault: list[float] = []

    async def load(n: int) -> None:
        j = 0
        while not stop.is_set():
            try:
                await client.put(b"load%02d-%08d" % (n, j), b"x" * 100)
                done.append(time.monotonic())
            except Exception:  # not acknowledged; counted as a gap
                pass
            j += 1

    async def probe(sid: int) -> None:
        key = shard_keys[sid][0]
        while not stop.is_set():
            issued = time.monotonic()
            try:
                await client.put(key, b"%f" % issued)
            except Exception:  # retried by the next iteration
                continue
            probes[sid].append((issued, time.monotonic()))

    async def reader(sid: int) -> None:
        key = shard_keys[sid][0]
        while not stop.is_set():
            try:
                await client.get(key)
            except Exception:  # counted as a gap
                continue
            reads[sid].append(time.monotonic())

    workers = [asyncio.ensure_future(load(n)) for n in range(tasks)]
    workers += [asyncio.ensure_future(probe(sid)) for sid in smap.shards]
    workers += [asyncio.ensure_future(reader(sid)) for sid in smap.shards]
    start = time.monotonic()
    await asyncio.sleep(warmup)
    t_fault.append(time.monotonic())
    switched: dict[str, Any] = {}
    if fault == "kill":
        cluster.kill(victim)
    elif fault == "pause":
        cluster.pause(victim)
    elif fault == "add":
        switched = await _add(cluster)
        victim = f"n4 added, {len(switched['moves'])} replicas moved"
    else:
        victim = f"shard 0 -> {SWITCH_TO[cluster.config.mode]}"
        switched = await _switch(cluster, SWITCH_TO[cluster.config.mode])
    await asyncio.sleep(max(0.0, t_fault[0] + after - time.monotonic()))
    end = time.monotonic()
    stop.set()
    await asyncio.wait(workers, timeout=30)
    for w in workers:
        w.cancel()
    final = await client.refresh_map()
    await client.close()
    t0 = t_fault[0]
    failover: dict[int, float | None] = {}
    for sid, rows in probes.items():
        first = next((c for issued, c in rows if issued >= t0), None)
        failover[sid] = None if first is None else first - t0

    def longest_gap(times: list[float]) -> float:
        ts = [t0] + [t for t in times if t >= t0] + [end]
        return max(b - a for a, b in zip(ts, ts[1:]))

    bins = int((time.monotonic() - start) / BIN) + 1
    timeline = [0] * bins
    for t in done:
        timeline[min(bins - 1, int((t - start) / BIN))] += 1
    return {
        "victim": victim,
        "fault_at_s": t0 - start,
        "failover_s": {str(k): v for k, v in failover.items()},
        # None when a shard took no write issued after the fault within the trial
        "max_failover_s": None if None in failover.values() else max(failover.values(), default=None),
        "write_gap_s": {str(sid): longest_gap([c for _, c in rows]) for sid, rows in probes.items()},
        "read_gap_s": {str(sid): longest_gap(rows) for sid, rows in reads.items()},
        "switch": switched,
        "timeline_ops_per_s": [n / BIN for n in timeline],
        "epoch_after": final.epoch,
        "replicas_after": {str(s.id): list(s.replicas) for s in final.shards.values()},
    }


async def _switch(cluster: Any, to: str) -> dict[str, Any]:
    from bespokv.etcd_coordinator import EtcdCoordinator
    from bespokv.modeswitch import switch_mode
    from bespokv.peers import PeerPool

    coord = EtcdCoordinator(cluster.config, cluster.config.etcd)
    await coord.start()
    peers = PeerPool(coord.shard_map(), token=cluster.config.token)
    try:
        reports = await switch_mode(coord, peers, 0, to, timeout=60)
    finally:
        await peers.close()
        await coord.stop()
    return {"to": to, "drained_s": sum(r.drained_s for r in reports), "serving_s": sum(r.serving_s for r in reports)}


async def _add(cluster: Any) -> dict[str, Any]:
    from bespokv.etcd_coordinator import EtcdCoordinator
    from bespokv.membership import add_node

    coord = EtcdCoordinator(cluster.config, cluster.config.etcd)
    await coord.start()
    t0 = time.monotonic()
    try:
        address = cluster.add_node_config("n4")
        moves = await add_node(coord, "n4", address, start=lambda: cluster.start_node("n4"), timeout=60)
    finally:
        await coord.stop()
    return {"moves": [list(m) for m in moves], "added_s": time.monotonic() - t0}


def run_trial(mode: str, fault: str, *, tasks: int = 16, warmup: float = 3.0, after: float = AFTER) -> dict[str, Any]:
    """One cluster, one fault; returns the measurements (see the module docstring)."""
    from bespokv.testing import LocalCluster

    with tempfile.TemporaryDirectory(prefix="bespokv-failover-") as d:
        cluster = LocalCluster(3, replicas=3, shards=3, mode=mode, datalet="memory", dir=d, etcd=1)
        with cluster:  # stopping it resumes a paused node first
            result = asyncio.run(_drive(cluster, tasks=tasks, warmup=warmup, after=after, fault=fault))
    result.update(mode=mode, fault=fault)
    return result


def _plot(results: list[dict[str, Any]], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    faults = sorted({r["fault"] for r in results})
    fig, axes = plt.subplots(len(faults), 1, figsize=(9, 3.2 * len(faults)), squeeze=False)
    for ax, fault in zip(axes[:, 0], faults):
        for r in (r for r in results if r["fault"] == fault):
            tl = r["timeline_ops_per_s"]
            xs = [i * BIN - r["fault_at_s"] for i in range(len(tl))]
            ax.plot(xs, tl, label=r["mode"], linewidth=1)
        ax.axvline(0, color="black", linestyle="--", linewidth=0.8)
        ax.set_title(f"{fault} of one node (t = 0) — writes per second, 100 ms bins")
        ax.set_xlabel("seconds since the fault")
        ax.set_ylabel("ops/s")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main_args(modes: Sequence[str], faults: Sequence[str], repeat: int, tasks: int, out: Path | None,
              command: str) -> int:
    results = []
    for rep in range(repeat):
        for fault in faults:
            for mode in modes:
                r = run_trial(mode, fault, tasks=tasks)
                r["repetition"] = rep + 1
                results.append(r)
                shards = " ".join(
                    f"s{k}={'none' if v is None else f'{v:.2f}s'}" for k, v in sorted(r["failover_s"].items())
                )
                gaps = " ".join(
                    f"s{k}={r['write_gap_s'][k]:.2f}/{r['read_gap_s'][k]:.2f}s" for k in sorted(r["write_gap_s"])
                )
                print(f"{mode:6} {fault:6} rep {rep + 1}: victim {r['victim']}, first write after the fault: "
                      f"{shards}; longest write/read gap: {gaps}; epoch {r['epoch_after']}", flush=True)
    lines = [f"# failover ({command})", "",
             "mode   fault   max failover s | shard 0's longest write gap s | read gap s (per repetition)",
             "-----  ------  ---"]
    for fault in faults:
        for mode in modes:
            rows = [r for r in results if r["mode"] == mode and r["fault"] == fault]
            vals = [r["max_failover_s"] for r in rows]
            shown = ", ".join(f"none in {AFTER:g} s" if v is None else f"{v:.2f}" for v in vals)
            wgap = ", ".join(f"{r['write_gap_s']['0']:.2f}" for r in rows)
            rgap = ", ".join(f"{r['read_gap_s']['0']:.2f}" for r in rows)
            lines.append(f"{mode:6} {fault:7} {shown} | {wgap} | {rgap}")
    report = "\n".join(lines)
    print()
    print(report)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps({"command": command, "results": results}, indent=1))
        (out / "report.txt").write_text(report + "\n")
        plot = _plot(results, out / "timeline.png")
        print(f"\nresults: {out / 'results.json'}" + (f"\nplot:    {plot}" if plot else ""))
    return 0


if __name__ == "__main__":  # pragma: no cover - python -m bench failover is the entry
    sys.exit(main_args(MODES, FAULTS, 1, 16, None, "python -m bench.failover"))
