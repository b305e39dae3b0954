"""The training demo: checkpoints into rocksmash + S3, a kill, a resume, the tensor table.

    python -m bespokv.training.demo [--steps 300] [--every 50] [--kill-at 170] [--s3 auto|seaweedfs|moto]

The parent starts a local S3 server (SeaweedFS, or moto where it is absent) on
127.0.0.1 and runs the trainer as a child process it controls:

1. the first child profiles one training step (TensorProfiler), saves the tensor table
   in rocksmash, trains a small ``torch.nn`` transformer (random initial weights, synthetic
   data, CPU) and checkpoints every ``--every`` steps with ``dcp.async_save``
   (metadata in rocksmash, chunks in S3), then kills itself with SIGKILL at ``--kill-at``;
2. the second child reuses the saved profile, resumes from ``latest``, re-runs the steps
   after that checkpoint, and trains to the end;
3. the parent prints both runs' losses on the steps they share (equal: the resumed run
   carries on exactly), the catalog (bytes new vs deduplicated), and the tensor table's
   head of the prefetch order and size classes.

Everything is bounded: each child has a timeout, and the servers are stopped by pid.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any

__all__ = ["main"]

VOCAB, DIM, SEQ, BATCH, LR = 32, 64, 32, 16, 1e-3
RUN = "demo"


def build_model() -> Any:
    """A small transformer from ``torch.nn`` with random initial weights (the same in every
    process: seeded), about 0.1 M parameters."""
    import torch

    class TinyLM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = torch.nn.Embedding(VOCAB, DIM)
            self.pos = torch.nn.Embedding(SEQ, DIM)
            layer = torch.nn.TransformerEncoderLayer(DIM, 4, 2 * DIM, dropout=0.0, batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = torch.nn.Linear(DIM, VOCAB)

        def forward(self, x: Any) -> Any:
            h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
            return self.head(self.encoder(h))

    torch.manual_seed(1234)
    return TinyLM()


def batch(step: int) -> tuple[Any, Any]:
    """Synthetic data for ``step`` (the same in every run): ``y[t] = x[t-1]`` (0 at t=0),
    which needs attention to the previous position: learned over a few hundred steps."""
    import torch

    g = torch.Generator().manual_seed(step)
    x = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    prev = torch.cat([torch.zeros(BATCH, 1, dtype=x.dtype), x[:, :-1]], dim=1)
    return x, prev


def train_step(model: Any, opt: Any, step: int) -> float:
    import torch

    x, y = batch(step)
    loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def child(args: argparse.Namespace) -> None:
    """One training process: profile or reuse the profile, resume if possible, train."""
    warnings.simplefilter("ignore")
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    import cloudtier
    import rocksmash
    from bespokv.training import CheckpointStore, KVStorageReader, KVStorageWriter, TensorProfiler, TensorTable
    from bespokv.training.tensor_table import profile_key

    torch.set_num_threads(1)
    db = rocksmash.open(args.db)
    objects = cloudtier.open_store(args.bucket, retries=3, **json.loads(args.s3_options))
    store = CheckpointStore(db, objects)
    model = build_model()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    key = profile_key(model, {"batch": BATCH, "seq": SEQ})

    table = TensorTable.load(db, key)
    if table is None:
        with TensorProfiler(model, opt) as prof:
            train_step(model, opt, -1)  # a warm-up step on its own data; its state is discarded
        table = prof.table(kv=db, key=key)
        table.save()
        model = build_model()  # train from the untouched initial weights
        opt = torch.optim.Adam(model.parameters(), lr=LR)
        print(json.dumps({"event": "profiled", "rows": len(table)}), flush=True)
    else:
        print(json.dumps({"event": "profile reused", "rows": len(table)}), flush=True)
    for r in table.rows:  # a tensor cache would migrate here; the demo sends optimizer state to nvme
        if r.kind == "optimizer":
            table.move(r.tensor_id, "nvme")

    start = 0
    found = store.latest(RUN)
    if found is not None:
        model_sd, optim_sd = get_state_dict(model, opt)  # Adam's state initialized, to load into
        state = {"model": model_sd, "optim": optim_sd, "step": 0}
        dcp.load(state, storage_reader=KVStorageReader(store, found.id))
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        start = state["step"]
        print(json.dumps({"event": "resumed", "from": found.id, "step": start}), flush=True)

    pending = None
    for step in range(start + 1, args.steps + 1):
        loss = train_step(model, opt, step)
        print(json.dumps({"event": "loss", "step": step, "loss": loss}), flush=True)
        if step == args.kill_at and found is None:
            if pending is not None:
                pending.result(timeout=120)
            table.close()
            print(json.dumps({"event": "killing myself", "step": step}), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if step % args.every == 0:
            if pending is not None:
                pending.result(timeout=120)  # one save in flight at a time
                store.retain(RUN, keep_last=3)
            model_sd, optim_sd = get_state_dict(model, opt)
            state = {"model": model_sd, "optim": optim_sd, "step": step}
            pending = dcp.async_save(state, storage_writer=KVStorageWriter(store, f"{RUN}/step-{step}"))
    if pending is not None:
        pending.result(timeout=120)
        store.retain(RUN, keep_last=3)
    store.gc()
    table.close()
    db.close()
    print(json.dumps({"event": "done"}), flush=True)


def run_child(argv: list[str], timeout: float) -> tuple[int, list[dict[str, Any]]]:
    proc = subprocess.run([sys.executable, "-m", "bespokv.training.demo", "--child", *argv],
                          capture_output=True, text=True, timeout=timeout)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode not in (0, -signal.SIGKILL):
        raise SystemExit(f"trainer failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.returncode, events


def summary(db_path: str, bucket: str, s3_options: dict[str, Any]) -> None:
    import cloudtier
    import rocksmash
    from bespokv.training import CheckpointStore, TensorTable
    from bespokv.training.tensor_table import profile_key

    with rocksmash.open(db_path) as db:
        store = CheckpointStore(db, cloudtier.open_store(bucket, **s3_options))
        print("\ncatalog of run 'demo' (keep-last-3 retention):")
        print(f"  {'checkpoint':<18}{'step':>6}{'MiB':>8}{'new MiB':>9}{'dedup MiB':>11}")
        for c in store.list(RUN):
            print(f"  {c.id:<18}{c.step:>6}{c.bytes / 2**20:>8.2f}{c.new_bytes / 2**20:>9.2f}"
                  f"{c.dedup_bytes / 2**20:>11.2f}")
        objs = list(store.objects.list("chunks/"))
        print(f"  chunks in S3: {len(objs)} objects, {sum(o.size for o in objs) / 2**20:.2f} MiB")
        table = TensorTable.load(db, profile_key(build_model(), {"batch": BATCH, "seq": SEQ}), flush_interval=3600)
        assert table is not None
        print(f"\ntensor table: {len(table)} rows; head of the prefetch order:")
        for r in table.plan(len(table) - 1, 8):
            print(f"  {r.tensor_id:<42}{r.kind:<11}{r.phase:<5}{r.bytes:>9} B  now on {table.where(r.tensor_id)}")
        print("size classes (bytes <= class: tensors):")
        print("  " + ", ".join(f"{c}: {n}" for c, n in table.size_classes().items()))
        table.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bespokv.training.demo", description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--kill-at", type=int, default=170)
    p.add_argument("--s3", default="auto", choices=["auto", "seaweedfs", "moto"])
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per trainer process")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--db", help=argparse.SUPPRESS)
    p.add_argument("--bucket", help=argparse.SUPPRESS)
    p.add_argument("--s3-options", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args)
        return
    if not 0 < args.every <= args.kill_at < args.steps:
        p.error("need 0 < --every <= --kill-at < --steps")
    from cloudtier.testing import local_s3_server

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="training-demo-") as tmp, \
            local_s3_server(args.s3, buckets=("ckpt",)) if args.s3 != "moto" else local_s3_server("moto") as s3:
        opts = s3.store_options()
        bucket = "s3://ckpt/demo"
        import cloudtier

        cloudtier.open_store(bucket, create_bucket=True, **opts).close()
        print(f"S3 endpoint: {type(s3).__name__} at {s3.endpoint_url}; metadata: rocksmash in {tmp}/meta")
        common = ["--db", f"{tmp}/meta", "--bucket", bucket, "--s3-options", json.dumps(opts),
                  "--steps", str(args.steps), "--every", str(args.every), "--kill-at", str(args.kill_at)]
        code1, first = run_child(common, args.timeout)
        if code1 != -signal.SIGKILL:
            raise SystemExit("the first trainer was meant to be killed and was not")
        print(f"run 1: {next(e['event'] for e in first if 'profile' in e['event'])}, trained to step "
              f"{max(e['step'] for e in first if e['event'] == 'loss')}, killed by SIGKILL")
        code2, second = run_child(common, args.timeout)
        resumed = next(e for e in second if e["event"] == "resumed")
        print(f"run 2: {next(e['event'] for e in second if 'profile' in e['event'])}, resumed from "
              f"{resumed['from']} (step {resumed['step']})")
        before = {e["step"]: e["loss"] for e in first if e["event"] == "loss"}
        after = {e["step"]: e["loss"] for e in second if e["event"] == "loss"}
        shared = sorted(set(before) & set(after))
        print("\nloss on the steps both runs trained (the resumed run carries on exactly):")
        for s in shared[:3] + shared[-2:] if len(shared) > 5 else shared:
            print(f"  step {s:>4}: before kill {before[s]:.6f}   after resume {after[s]:.6f}")
        marks = [1, args.every, resumed["step"], args.kill_at, args.steps]
        print("loss curve: " + ", ".join(f"step {s}: {({**before, **after})[s]:.4f}" for s in marks))
        if any(abs(before[s] - after[s]) > 1e-5 for s in shared):
            raise SystemExit("the resumed run diverged from the killed one")
        summary(f"{tmp}/meta", bucket, opts)
    print(f"\ndemo finished in {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main()
