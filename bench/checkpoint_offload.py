"""``python -m bench.checkpoint_offload``: training step time with Adam's state offloaded.

A small real model (a ``torch.nn`` transformer encoder, random weights, synthetic tokens,
CPU) trains with its optimizer state (Adam's ``exp_avg`` and ``exp_avg_sq``) kept

* ``resident``: in memory (no offload; the optimizer still steps per parameter, from the
  gradient hooks, as in the other two, so only the offload differs);
* ``on_demand``: on local disk, read back in the step that needs it into fresh tensors
  and written back before the next (the naive offloader);
* ``prefetch``: on local disk, read ahead in the tensor table's profiled order by a
  background thread into a bounded pool of reusable buffers, written back by another
  (:mod:`bespokv.training.offload`).

The modes alternate step by step blocks (``--repeat``), each after ``--warmup`` steps;
the median step time is reported with its ratio to ``resident``, the buffers each mode
allocated per step after warm-up, and the most bytes of Adam state held in memory (all of
it; one parameter's at a time; the pool). The tier's files
are in ``--dir`` (default: a temp directory), so reads may come from the page cache.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

__all__ = ["main"]

MODES = ("resident", "on_demand", "prefetch")


def _model(args: argparse.Namespace) -> Any:
    import torch

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(args.dim, 8, 4 * args.dim, batch_first=True, dropout=0.0)
    return torch.nn.Sequential(torch.nn.Embedding(args.vocab, args.dim), torch.nn.TransformerEncoder(layer, args.layers),
                               torch.nn.Linear(args.dim, args.vocab))


def _loss(model: Any, tokens: Any, vocab: int) -> Any:
    import torch

    return torch.nn.functional.cross_entropy(model(tokens).reshape(-1, vocab), tokens.reshape(-1))


def _profile(args: argparse.Namespace) -> Any:
    import torch

    from bespokv.training import TensorProfiler

    model = _model(args)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq))
    with TensorProfiler(model, opt) as prof:
        _loss(model, tokens, args.vocab).backward()
        opt.step()
    return prof.table()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.checkpoint_offload", description=__doc__.split("\n")[0])
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--depth", type=int, default=4, help="parameters the prefetcher reads ahead")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=3, help="measured steps per block")
    p.add_argument("--repeat", type=int, default=3, help="blocks per mode, alternating")
    p.add_argument("--dir", default=None, help="the tier's directory (default: a temp directory)")
    p.add_argument("--out", default="results/checkpoint-offload")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    import torch

    from bespokv.training.offload import FileTier, OptimizerOffloader

    load_before = [round(x, 2) for x in os.getloadavg()]
    table = _profile(args)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, args.vocab, (args.batch, args.seq), generator=g) for _ in range(4)]
    times: dict[str, list[float]] = {m: [] for m in MODES}
    allocations: dict[str, list[int]] = {m: [] for m in MODES}
    held: dict[str, int] = {}
    pool_capacity = 0
    with tempfile.TemporaryDirectory(prefix="bench-offload-", dir=args.dir) as tmp:
        runs = {}
        for mode in MODES:
            model = _model(args)
            off = OptimizerOffloader(model, table, FileTier(f"{tmp}/{mode}"), mode=mode, depth=args.depth,
                                     adam={"lr": 1e-4})
            runs[mode] = (model, off)
            for i in range(args.warmup):
                _loss(model, batches[i % len(batches)], args.vocab).backward()
                off.finish_step()
        state_bytes = 2 * sum(p.numel() * p.element_size() for p in runs["resident"][0].parameters())
        for _ in range(args.repeat):
            for mode in MODES:
                model, off = runs[mode]
                for i in range(args.steps):
                    before = off.pool.allocations + off.fresh_allocations
                    t0 = time.perf_counter()
                    _loss(model, batches[i % len(batches)], args.vocab).backward()
                    off.finish_step()
                    times[mode].append(time.perf_counter() - t0)
                    allocations[mode].append(off.pool.allocations + off.fresh_allocations - before)
        for mode in MODES:
            off = runs[mode][1]
            biggest = max(q.numel() * q.element_size() for q in runs[mode][0].parameters())
            held[mode] = {"resident": state_bytes, "on_demand": 2 * biggest, "prefetch": off.pool.allocated_bytes}[mode]
            if mode == "prefetch":
                pool_capacity = sum(c * n for c, n in off.pool.capacity.items())
            off.close()
    res = {"command": "python -m bench.checkpoint_offload " + " ".join(argv if argv is not None else sys.argv[1:]),
           "params": state_bytes // 8, "state_bytes": state_bytes, "rows": len(table), "pool_capacity_bytes": pool_capacity,
           "load_before": load_before, "load_after": [round(x, 2) for x in os.getloadavg()],
           "modes": {m: {"step_s": times[m], "median_step_s": statistics.median(times[m]),
                         "allocations_per_step": allocations[m], "state_bytes_in_memory": held[m]} for m in MODES}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=1))
    base = res["modes"]["resident"]["median_step_s"]
    lines = ["# Optimizer-state offload\n", f"command: `{res['command']}`  ",
             f"model: {res['params'] / 1e6:.1f}M parameters, Adam state {state_bytes / 2**20:.0f} MiB, "
             f"{len(table)} table rows; {args.repeat} blocks of {args.steps} steps per mode, alternating  ",
             f"load average before/after: {res['load_before']} / {res['load_after']} on {os.cpu_count()} cores\n",
             "| mode | median step s | x resident | buffers allocated per step | Adam state in memory |",
             "|---|---|---|---|---|"]
    for m in MODES:
        r = res["modes"][m]
        lines.append(f"| {m} | {r['median_step_s']:.3f} | {r['median_step_s'] / base:.2f}x | "
                     f"{statistics.median(r['allocations_per_step']):.0f} | {r['state_bytes_in_memory'] / 2**20:.1f} MiB |")
    report = "\n".join(lines) + "\n"
    (out / "report.md").write_text(report)
    print(report + f"\nwritten: {out}/results.json, {out}/report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
