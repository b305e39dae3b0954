"""``python -m bench cache-model``: a row cache and a block cache, modelled, on a YCSB stream.

Replays the read keys of ``--ops`` operations of one workload's stream (the same seeded
stream ``ycsb`` issues) through LRU models of a row cache and a block cache sharing one
budget, and prints, per row-cache share, the share of reads each cache answers and the
share that reads a table. Deterministic and fast: it answers "would a row cache pay?"
without timing anything. Keys map to blocks as in a fully compacted table (sorted keys,
``--rows-per-block`` to a block); a row is charged key + value + the row cache's
per-row overhead, a block ``--block-bytes`` (the engine's uncompressed block size).

    python -m bench cache-model --workload c
    python -m bench cache-model --shares 0,5,10,25 --cache-size 64MiB --ops 1e6
"""

from __future__ import annotations

import argparse
from bisect import bisect_left
from collections import OrderedDict
from typing import Sequence

import numpy as np

from bench.units import parse_bytes, parse_count
from bench.workloads import CORE_WORKLOADS, Op, OperationStream, StreamConfig

__all__ = ["main", "simulate"]


def simulate(keys: Sequence[bytes], blocks: Sequence[int], row_slots: int, block_slots: int
             ) -> tuple[int, int, int]:
    """(row hits, block hits, misses) of an LRU row cache of ``row_slots`` rows in front
    of an LRU block cache of ``block_slots`` blocks; a miss fills both."""
    rows: OrderedDict[bytes, None] = OrderedDict()
    cached: OrderedDict[int, None] = OrderedDict()
    row_hits = block_hits = misses = 0
    for k, b in zip(keys, blocks):
        if row_slots and k in rows:
            rows.move_to_end(k)
            row_hits += 1
            continue
        if b in cached:
            cached.move_to_end(b)
            block_hits += 1
        else:
            misses += 1
            cached[b] = None
            if len(cached) > block_slots:
                cached.popitem(last=False)
        if row_slots:
            rows[k] = None
            if len(rows) > row_slots:
                rows.popitem(last=False)
    return row_hits, block_hits, misses


def main(argv: Sequence[str] | None = None) -> int:
    from rocksmash.row_cache import ROW_OVERHEAD

    p = argparse.ArgumentParser(prog="python -m bench cache-model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", "-w", default="c", choices=sorted(CORE_WORKLOADS))
    p.add_argument("--records", "-r", type=parse_count, default=1_000_000)
    p.add_argument("--ops", "-n", type=parse_count, default=1_000_000)
    p.add_argument("--cache-size", type=parse_bytes, default=64 << 20,
                   help="the one budget both caches share (default 64MiB)")
    p.add_argument("--shares", default="0,10,25,50",
                   help="row-cache shares of the budget to model, in percent")
    p.add_argument("--block-bytes", type=int, default=4105,
                   help="bytes charged per cached block (default 4105: a 4 KiB block of "
                        "the benchmark's records)")
    p.add_argument("--rows-per-block", type=int, default=29)
    p.add_argument("--row-overhead", type=int, default=None,
                   help="bytes charged per row on top of key and value (default: the row "
                        "cache's ROW_OVERHEAD; 0 charges rows as blocks are, payload only)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    cfg = StreamConfig(CORE_WORKLOADS[args.workload], args.records, args.ops, 1, None, 24,
                       100, 0.5, 0.99, "hashed", args.seed)
    keys: list[bytes] = []
    for batch in OperationStream(cfg, 0).take(args.ops):
        keys += [k for op, k in zip(batch.ops, batch.keys) if op != Op.INSERT]
    # A fully compacted table: blocks of consecutive keys in key order.
    loaded = sorted(cfg.key_space().keys(np.arange(args.records)))
    blocks = [bisect_left(loaded, k) // args.rows_per_block for k in keys]
    row_bytes = 24 + 100 + (ROW_OVERHEAD if args.row_overhead is None else args.row_overhead)
    print(f"workload {args.workload.upper()}: {len(keys):,} keyed operations, cache "
          f"{args.cache_size / 2**20:.0f} MiB, rows charged {row_bytes} B, blocks "
          f"{args.block_bytes} B")
    print("row share  rows      blocks  row hits  block hits  misses")
    for share in (float(s) for s in args.shares.split(",")):
        row_slots = int(args.cache_size * share / 100 / row_bytes)
        block_slots = int(args.cache_size * (1 - share / 100) / args.block_bytes)
        r, b, m = simulate(keys, blocks, row_slots, block_slots)
        n = max(len(keys), 1)
        print(f"{share:>8g}%  {row_slots:>7,}  {block_slots:>7,}  {r / n:>8.1%}  "
              f"{b / n:>10.1%}  {m / n:>6.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
