"""``python -m bench checkpoint``: the DCP checkpoint store against DCP's own writers.

Measured in one run, on one machine (see docs/benchmarks.md, "The checkpoint benchmark"):

* save and load throughput (GB/s, 1e9 bytes) of a model-plus-Adam state dict (default
  1 GiB) for
  - ``fs-local``: DCP's FileSystemWriter/Reader into a local directory;
  - ``kv-file``: KVStorageWriter/Reader, rocksmash + ``file://`` on the same disk, the
    store opened with ``etag="xxh3"`` as docs/training.md advises;
  - ``kv-file-md5``: the same with the file store's default MD5 etags;
  - ``fsspec-s3``: DCP's FsspecWriter/Reader (s3fs) to the local S3 server;
  - ``kv-s3``: KVStorageWriter/Reader, rocksmash + ``s3://`` on the same server;
  every trial into a fresh location (no dedup between trials), trials alternating, the
  median reported; every load is checked tensor by tensor (``torch.equal``);
* bytes uploaded over ``--rounds`` successive checkpoints of fine-tuning in which
  ``--change`` of the tensors change (metered at the object store);
* commit latency (the coordinator's ``finish``), catalog ops/s, and TensorTable
  ``move``/``plan``/``where`` calls per second.

The fsspec peer runs in its own virtualenv (``.venv/fsspec-peer``, built on first use
from the package index: torch==2.13.0 and s3fs): s3fs's aiobotocore pins a botocore
older than this project's boto3. ``--skip-fsspec`` leaves it out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

__all__ = ["main"]

HERE = Path(__file__).resolve().parent
PEER_VENV = HERE.parent / ".venv" / "fsspec-peer"


def _gb_s(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9


def _peer_python() -> str:
    """The fsspec peer's interpreter; builds its venv on first use (a minute or so)."""
    py = PEER_VENV / "bin" / "python"
    if not py.exists():
        print(f"building the fsspec peer's venv in {PEER_VENV} (torch==2.13.0, s3fs) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        proc = subprocess.run([str(py), "-m", "pip", "install", "-q", "torch==2.13.0", "s3fs>=2024.1", "numpy"],
                              capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise SystemExit(f"could not build the fsspec peer's venv:\n{proc.stderr[-3000:]}")
    return str(py)


def peer_command(python: str, args: dict[str, Any]) -> list[str]:
    """The command that runs the fsspec peer (``checkpoint_fsspec.py``) with ``python``."""
    return [python, str(HERE / "checkpoint_fsspec.py"), json.dumps(args)]


class _Timed:
    """Wraps a KVStorageWriter class to time its ``finish`` (the commit)."""

    commits: list[float] = []

    @classmethod
    def writer(cls, store: Any, cid: str) -> Any:
        from bespokv.training import KVStorageWriter

        class TimedWriter(KVStorageWriter):
            def finish(self, metadata: Any, results: Any) -> None:
                t0 = time.perf_counter()
                super().finish(metadata, results)
                cls.commits.append(time.perf_counter() - t0)

        return TimedWriter(store, cid)


def _throughput(args: argparse.Namespace, tmp: str, s3: Any, sd: dict[str, Any], nbytes: int) -> dict[str, Any]:
    import torch.distributed.checkpoint as dcp

    import cloudtier
    import rocksmash
    from bench.checkpoint_state import empty_like_state, same_state
    from bespokv.training import CheckpointStore, KVStorageReader

    results: dict[str, list[dict[str, float]]] = {}

    def trial(name: str, save: Any, load: Any) -> None:
        c0, t0 = time.process_time(), time.perf_counter()
        save()
        save_s, save_cpu = time.perf_counter() - t0, time.process_time() - c0
        back = empty_like_state(sd)
        t0 = time.perf_counter()
        load(back)
        load_s = time.perf_counter() - t0
        if not same_state(sd, back):
            raise SystemExit(f"{name}: a tensor did not round-trip")
        results.setdefault(name, []).append({"save_s": save_s, "load_s": load_s, "save_cpu_s": save_cpu})
        print(f"  {name:<11} save {_gb_s(nbytes, save_s):6.3f} GB/s ({save_cpu:5.2f} s CPU)   "
              f"load {_gb_s(nbytes, load_s):6.3f} GB/s", flush=True)

    def fs_local(i: int) -> None:
        path = f"{tmp}/fs-{i}"
        trial("fs-local",
              lambda: dcp.save(sd, storage_writer=dcp.FileSystemWriter(path, thread_count=args.threads, overwrite=False)),
              lambda back: dcp.load(back, storage_reader=dcp.FileSystemReader(path)))

    def kv(name: str, url: str, i: int, **opts: Any) -> None:
        db = rocksmash.open(f"{tmp}/{name}-meta-{i}")
        store = CheckpointStore(db, cloudtier.open_store(url, **opts), threads=args.threads)
        try:
            trial(name, lambda: dcp.save(sd, storage_writer=_Timed.writer(store, "bench/step-1")),
                  lambda back: dcp.load(back, storage_reader=KVStorageReader(store, "bench/step-1")))
        finally:
            db.close()

    for i in range(args.repeat):
        fs_local(i)
        os.makedirs(f"{tmp}/kvobj-{i}")
        kv("kv-file", Path(f"{tmp}/kvobj-{i}").as_uri(), i, etag="xxh3")
        os.makedirs(f"{tmp}/kvobj-md5-{i}")
        kv("kv-file-md5", Path(f"{tmp}/kvobj-md5-{i}").as_uri(), i)
        if s3 is not None:
            kv("kv-s3", f"s3://bench/kv-{i}", i, **s3.store_options())
    if s3 is not None and not args.skip_fsspec:
        opts = s3.store_options()
        peer_args = {"bytes": args.size, "tensors": args.tensors, "seed": 0, "repeat": args.repeat,
                     "threads": args.threads, "bucket": "bench", **opts}
        proc = subprocess.run(peer_command(_peer_python(), peer_args), capture_output=True, text=True, timeout=3600)
        if proc.returncode != 0:
            raise SystemExit(f"fsspec peer failed:\n{proc.stderr[-3000:]}")
        peer = json.loads(proc.stdout.strip().splitlines()[-1])
        results["fsspec-s3"] = peer["trials"]
        for t in peer["trials"]:
            print(f"  fsspec-s3   save {_gb_s(nbytes, t['save_s']):6.3f} GB/s   load {_gb_s(nbytes, t['load_s']):6.3f} GB/s")
    summary = {}
    for name, trials in results.items():
        summary[name] = {"save_gb_s": _gb_s(nbytes, statistics.median(t["save_s"] for t in trials)),
                         "load_gb_s": _gb_s(nbytes, statistics.median(t["load_s"] for t in trials)),
                         "save_cpu_s": statistics.median(t.get("save_cpu_s", float("nan")) for t in trials),
                         "trials": trials}
    return summary


def _dedup(args: argparse.Namespace, tmp: str, s3: Any, sd: dict[str, Any], nbytes: int) -> list[dict[str, Any]]:
    import torch.distributed.checkpoint as dcp

    import cloudtier
    import rocksmash
    from bench.checkpoint_state import change_fraction
    from bespokv.training import CheckpointStore, KVStorageWriter

    if s3 is not None:
        objects = cloudtier.open_store("s3://bench/dedup", metered=True, **s3.store_options())
    else:
        os.makedirs(f"{tmp}/dedup-obj")
        objects = cloudtier.open_store(Path(f"{tmp}/dedup-obj").as_uri(), metered=True, etag="xxh3")
    meter = objects.find(cloudtier.MeteredStore)
    assert meter is not None
    rows = []
    with rocksmash.open(f"{tmp}/dedup-meta") as db:
        store = CheckpointStore(db, objects, threads=args.threads)
        for r in range(1, args.rounds + 1):
            if r > 1:
                change_fraction(sd, args.change, r)
            before = meter.snapshot()["bytes_in"]
            dcp.save(sd, storage_writer=KVStorageWriter(store, f"ft/step-{r}"))
            up = meter.snapshot()["bytes_in"] - before
            info = store.latest("ft")
            rows.append({"round": r, "state_bytes": nbytes, "uploaded_bytes": up,
                         "new_bytes": info.new_bytes, "dedup_bytes": info.dedup_bytes})
            print(f"  round {r}: uploaded {up / 2**20:8.1f} MiB of {nbytes / 2**20:.1f} MiB "
                  f"({100 * up / nbytes:5.1f}%)", flush=True)
    return rows


def _metadata_ops(args: argparse.Namespace, tmp: str) -> dict[str, float]:
    import cloudtier
    import rocksmash
    from bespokv.training import CheckpointStore, TensorTable
    from bespokv.training.store import SaveStats
    from bespokv.training.tensor_table import TensorRow

    out: dict[str, float] = {}
    with rocksmash.open(f"{tmp}/catalog-meta") as db:
        store = CheckpointStore(db, cloudtier.open_store("memory://"))
        n = 200
        t0 = time.perf_counter()
        for i in range(n):
            sid = store.begin(f"cat/step-{i}")
            store.commit(f"cat/step-{i}", sid, b"x" * 2048, SaveStats(1, 1, 0, 1))
        out["begin_commit_per_s"] = n / (time.perf_counter() - t0)
        for name, fn in (("latest_per_s", lambda: store.latest("cat")), ("list_200_per_s", lambda: store.list("cat"))):
            k, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < 1.0:
                fn()
                k += 1
            out[name] = k / (time.perf_counter() - t0)
    rows = [TensorRow(f"t{i}", "parameter", "m", "fwd", 1024, 4096, "float32", "cpu", i, i) for i in range(10_000)]
    table = TensorTable(rows)
    ids = [r.tensor_id for r in rows]
    calls = 1_000_000
    for name, fn in (("move", lambda i: table.move(ids[i % 10_000], "nvme")),
                     ("plan_k16", lambda i: table.plan(i % 10_000, 16)),
                     ("where", lambda i: table.where(ids[i % 10_000]))):
        t0 = time.perf_counter()
        for i in range(calls):
            fn(i)
        out[f"table_{name}_per_s"] = calls / (time.perf_counter() - t0)
    return out


def _report(res: dict[str, Any]) -> str:
    tp = res["throughput"]
    lines = ["# Checkpoint benchmark\n", f"command: `{res['command']}`  ",
             f"state: {res['state_bytes'] / 2**30:.2f} GiB ({res['tensors']} parameters + Adam state, float32), "
             f"threads {res['threads']}, repeat {res['repeat']} (median), S3: {res['s3']}  ",
             f"load average before/after: {res['load_before']} / {res['load_after']} on {os.cpu_count()} cores\n",
             "| writer/reader | save GB/s | save CPU s | load GB/s | save ratio | load ratio |",
             "|---|---|---|---|---|---|"]
    peers = {"kv-file": "fs-local", "kv-file-md5": "fs-local", "kv-s3": "fsspec-s3"}
    for name in ("fs-local", "kv-file", "kv-file-md5", "fsspec-s3", "kv-s3"):
        if name not in tp:
            continue
        r = tp[name]
        peer = tp.get(peers.get(name, ""))
        ratio = (f"{r['save_gb_s'] / peer['save_gb_s']:.2f}x {peers[name]}", f"{r['load_gb_s'] / peer['load_gb_s']:.2f}x") \
            if peer else ("", "")
        cpu = f"{r['save_cpu_s']:.2f}" if r["save_cpu_s"] == r["save_cpu_s"] else ""
        lines.append(f"| {name} | {r['save_gb_s']:.3f} | {cpu} | {r['load_gb_s']:.3f} | {ratio[0]} | {ratio[1]} |")
    lines += ["", "| round | uploaded MiB | of MiB | share |", "|---|---|---|---|"]
    for d in res["dedup"]:
        lines.append(f"| {d['round']} | {d['uploaded_bytes'] / 2**20:.1f} | {d['state_bytes'] / 2**20:.1f} | "
                     f"{100 * d['uploaded_bytes'] / d['state_bytes']:.1f}% |")
    c = res["commit_s"]
    m = res["metadata_ops"]
    lines += ["", f"commit (`finish`) of the {res['state_bytes'] / 2**30:.2f} GiB saves: median {1e3 * statistics.median(c):.1f} ms "
                  f"(n={len(c)})  ", f"begin+commit of a small checkpoint: {m['begin_commit_per_s']:.0f}/s; latest(run) of 200: "
                  f"{m['latest_per_s']:.0f}/s; list(run) of 200: {m['list_200_per_s']:.0f}/s  ",
              f"TensorTable (10,000 rows): move {m['table_move_per_s'] / 1e6:.2f} M/s, plan(k=16) "
              f"{m['table_plan_k16_per_s'] / 1e6:.2f} M/s, where {m['table_where_per_s'] / 1e6:.2f} M/s"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from bench.units import parse_bytes

    p = argparse.ArgumentParser(prog="python -m bench checkpoint", description=__doc__.split("\n")[0])
    p.add_argument("--size", type=parse_bytes, default=1 << 30, help="state dict bytes (default 1GiB)")
    p.add_argument("--tensors", type=int, default=40, help="parameters (each with exp_avg, exp_avg_sq)")
    p.add_argument("--threads", type=int, default=8, help="I/O threads of every writer (FileSystemWriter's thread_count too)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5, help="successive fine-tuning checkpoints")
    p.add_argument("--change", type=float, default=0.10, help="share of tensors changed per round")
    p.add_argument("--s3", default="auto", choices=["auto", "seaweedfs", "moto", "none"])
    p.add_argument("--skip-fsspec", action="store_true")
    p.add_argument("--out", default="results/checkpoint")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    import torch

    from bench.checkpoint_state import make_state, state_bytes
    from cloudtier.testing import local_s3_server

    res: dict[str, Any] = {"command": "python -m bench checkpoint " + " ".join(argv or sys.argv[1:]),
                           "load_before": [round(x, 2) for x in os.getloadavg()], "threads": args.threads,
                           "repeat": args.repeat, "tensors": args.tensors, "torch": torch.__version__}
    sd = make_state(args.size, args.tensors)
    nbytes = state_bytes(sd)
    res["state_bytes"] = nbytes
    with tempfile.TemporaryDirectory(prefix="bench-checkpoint-", dir=os.environ.get("BENCH_TMP")) as tmp:
        server = None if args.s3 == "none" else local_s3_server(args.s3, **({"buckets": ("bench",)} if args.s3 != "moto" else {}))
        try:
            if server is not None:
                server.start()
                import cloudtier

                cloudtier.open_store("s3://bench", create_bucket=True, **server.store_options()).close()
            res["s3"] = type(server).__name__ if server else "none"
            print(f"throughput, {nbytes / 2**30:.2f} GiB state, {args.repeat} trials each:", flush=True)
            res["throughput"] = _throughput(args, tmp, server, sd, nbytes)
            res["commit_s"] = list(_Timed.commits)
            print(f"dedup over {args.rounds} checkpoints, {args.change:.0%} of tensors changing:", flush=True)
            res["dedup"] = _dedup(args, tmp, server, sd, nbytes)
            res["metadata_ops"] = _metadata_ops(args, tmp)
        finally:
            if server is not None:
                server.stop()
    res["load_after"] = [round(x, 2) for x in os.getloadavg()]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=1))
    report = _report(res)
    (out / "report.md").write_text(report)
    print("\n" + report + f"\nwritten: {out}/results.json, {out}/report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
