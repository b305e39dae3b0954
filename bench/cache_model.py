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

``--disk-size`` models the tiered read path instead: an in-memory LRU block cache of
``--cache-size`` in front of a local-disk cache of ``--disk-size`` (the DataCache), and
prints, for each way of keeping heat on the disk (:data:`DISK_CANDIDATES`), the share of
reads each tier answers and the object-store GETs per 1,000 reads (a miss of both is
one GET). It is the measurement behind docs/decisions/0016 (key-level heat)::

    python -m bench cache-model --records 200k --ops 200k --cache-size 8MiB --disk-size 3.4MiB

``--forms`` models the form in which the memory block cache keeps blocks (decision 0034):
at one budget of ``--cache-size``, (a) every block decoded, charged what a decoded block
really takes (``--decoded-bytes``), (b) a decoded tier of a share of the budget
(``--decoded-shares``) in front of a tier of stored blocks (compressed, as read: charged
``--stored-row-bytes`` per row + ``--stored-overhead``; a block evicted from the decoded
tier drops to the stored one, a stored hit is decoded and moves up), (c) every block
stored (every hit pays lz4 and a decode). It prints the share of block lookups each tier
answers and, with ``--disk-size`` (the tiered read path: a DataCache of stored blocks
behind the memory), the GETs per 1,000 reads::

    python -m bench cache-model --forms --records 1M --ops 1M --disk-size 11.8MiB
"""

from __future__ import annotations

import argparse
from bisect import bisect_left
from collections import OrderedDict
from typing import Sequence

import numpy as np

from bench.units import parse_bytes, parse_count
from bench.workloads import CORE_WORKLOADS, Op, OperationStream, StreamConfig

__all__ = ["main", "simulate", "simulate_tiers", "simulate_forms", "DISK_CANDIDATES"]

#: Ways to keep heat on the local disk: name -> (rows per block of the cloud tables,
#: rows per disk-cache unit (0: the unit is the block), what it stands for). Stored bytes
#: are charged per row (``--stored-row-bytes``: compressed, as in the cloud tables) plus
#: the DataCache's 20-byte record header per unit; a row unit is charged
#: ``--disk-row-bytes`` (key, value and an index entry, uncompressed).
DISK_CANDIDATES: dict[str, tuple[int, int, str]] = {
    "blocks-4k": (29, 0, "today: 4 KiB cloud blocks cached whole"),
    "blocks-1k": (7, 0, "smaller cloud blocks (1 KiB), fetched by ranged GET"),
    "blocks-512": (4, 0, "512-byte cloud blocks"),
    "rows": (29, 1, "a key-level cache on disk of cloud-resident values (also the bound "
                    "for compaction that clusters hot keys into hot blocks)"),
}


class _Lru:
    """An LRU set of ``slots`` entries: :meth:`hit` says whether ``x`` was in it and
    makes it the most recent (adding it, and evicting the oldest, if it was not)."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.entries: OrderedDict[object, None] = OrderedDict()

    def __contains__(self, x: object) -> bool:
        return x in self.entries

    def hit(self, x: object) -> bool:
        entries = self.entries
        if x in entries:
            entries.move_to_end(x)
            return True
        entries[x] = None
        if len(entries) > self.slots:
            entries.popitem(last=False)
        return False


def simulate(keys: Sequence[bytes], blocks: Sequence[int], row_slots: int, block_slots: int
             ) -> tuple[int, int, int]:
    """(row hits, block hits, misses) of an LRU row cache of ``row_slots`` rows in front
    of an LRU block cache of ``block_slots`` blocks; a miss fills both."""
    rows, cached = _Lru(row_slots), _Lru(block_slots)
    row_hits = block_hits = misses = 0
    for k, b in zip(keys, blocks):
        if row_slots and rows.hit(k):
            row_hits += 1
        elif cached.hit(b):
            block_hits += 1
        else:
            misses += 1
    return row_hits, block_hits, misses


def simulate_tiers(keys: Sequence[bytes], blocks: Sequence[int], units: Sequence[object],
                   mem_slots: int, disk_slots: int) -> tuple[int, int, int]:
    """(memory hits, disk hits, misses) of an LRU block cache of ``mem_slots`` blocks in
    front of an LRU disk cache of ``disk_slots`` units (``units[i]``: the unit read ``i``
    needs there, a block or a row); a miss of both fills both."""
    mem, disk = _Lru(mem_slots), _Lru(disk_slots)
    mem_hits = disk_hits = misses = 0
    for b, u in zip(blocks, units):
        if mem.hit(b):
            mem_hits += 1
        elif disk.hit(u):
            disk_hits += 1
        else:
            misses += 1
    return mem_hits, disk_hits, misses


def simulate_forms(blocks: Sequence[int], decoded_slots: int, stored_slots: int,
                   disk_slots: int) -> tuple[int, int, int, int]:
    """(decoded hits, stored hits, disk hits, misses) of a memory block cache that keeps
    ``decoded_slots`` blocks decoded and ``stored_slots`` more stored (exclusive LRU
    tiers: a block leaving the decoded tier drops to the stored one; a stored hit moves
    the block up), in front of an LRU disk cache of ``disk_slots`` blocks (0: none). A
    miss of the memory fills the top tier that has slots (and the disk cache)."""
    decoded: OrderedDict[int, None] = OrderedDict()
    stored: OrderedDict[int, None] = OrderedDict()
    disk = _Lru(disk_slots)
    hits_d = hits_s = hits_disk = misses = 0

    def keep_stored(b: int) -> None:
        if stored_slots:
            stored[b] = None
            if len(stored) > stored_slots:
                stored.popitem(last=False)

    def keep(b: int) -> None:
        if decoded_slots:
            decoded[b] = None
            if len(decoded) > decoded_slots:
                keep_stored(decoded.popitem(last=False)[0])
        else:
            keep_stored(b)

    for b in blocks:
        if b in decoded:
            decoded.move_to_end(b)
            hits_d += 1
            continue
        if b in stored:
            hits_s += 1
            if decoded_slots:
                del stored[b]
                keep(b)
            else:
                stored.move_to_end(b)
            continue
        if disk_slots and disk.hit(b):
            hits_disk += 1
        else:
            misses += 1  # a GET (disk.hit admitted the block to the disk cache)
        keep(b)
    return hits_d, hits_s, hits_disk, misses


def _forms(args: argparse.Namespace, positions: list[int]) -> int:
    from rocksmash.block import TRAILER_SIZE

    per_block = args.rows_per_block
    blocks = [p // per_block for p in positions]
    stored_block = per_block * args.stored_row_bytes + TRAILER_SIZE
    stored_charge = stored_block + args.stored_overhead
    disk_slots = int(args.disk_size // (stored_block + 20)) if args.disk_size else 0
    nblocks = -(-args.records // per_block)
    print(f"{len(blocks):,} block lookups over {nblocks:,} blocks; budget "
          f"{args.cache_size / 2**20:.1f} MiB; a block charged {args.decoded_bytes:,} B "
          f"decoded, {stored_charge:,} B stored; disk cache "
          f"{(args.disk_size or 0) / 2**20:.1f} MiB ({disk_slots:,} blocks)")
    print("form                       blocks held  decoded hits  stored hits  disk hits  "
          "misses  GET/1k reads")
    shares = [100.0] + [float(x) for x in args.decoded_shares.split(",")] + [0.0]
    for share in shares:
        budget = args.cache_size
        decoded_slots = int(budget * share / 100 // args.decoded_bytes)
        stored_slots = int((budget - decoded_slots * args.decoded_bytes) // stored_charge)
        if share == 100.0:
            name, stored_slots = "(a) all decoded", 0
        elif share == 0.0:
            name = "(c) all stored"
        else:
            name = f"(b) {share:g}% decoded + stored"
        d, st, dk, x = simulate_forms(blocks, decoded_slots, stored_slots, disk_slots)
        n = max(len(blocks), 1)
        gets = f"{1000 * x / n:>12.1f}" if disk_slots else f"{'-':>12}"
        print(f"{name:<26} {decoded_slots + stored_slots:>11,}  {d / n:>12.1%}  {st / n:>11.1%}  "
              f"{dk / n:>9.1%}  {x / n:>6.1%}  {gets}")
    return 0


def _tiers(args: argparse.Namespace, keys: list[bytes], positions: list[int]) -> int:
    print(f"{len(keys):,} reads; memory block cache {args.cache_size / 2**20:.1f} MiB, disk "
          f"cache {args.disk_size / 2**20:.2f} MiB; stored {args.stored_row_bytes} B/row, "
          f"decoded {args.block_bytes / args.rows_per_block:.0f} B/row, disk row "
          f"{args.disk_row_bytes} B")
    print("candidate    mem hits  disk hits  misses  GET/1k reads")
    for name, (per_block, per_unit, _) in DISK_CANDIDATES.items():
        blocks = [p // per_block for p in positions]
        if per_unit:
            units: Sequence[object] = keys
            unit_bytes = args.disk_row_bytes
        else:
            units = blocks
            unit_bytes = per_block * args.stored_row_bytes + 20
        mem_slots = int(args.cache_size // (args.block_bytes * per_block / args.rows_per_block))
        m, d, x = simulate_tiers(keys, blocks, units, mem_slots, int(args.disk_size // unit_bytes))
        n = max(len(keys), 1)
        print(f"{name:<11}  {m / n:>8.1%}  {d / n:>9.1%}  {x / n:>6.1%}  {1000 * x / n:>12.1f}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from rocksmash.block_cache import STORED_OVERHEAD
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
    p.add_argument("--disk-size", type=parse_bytes, default=None,
                   help="model the tiered read path: a disk cache of this size behind the "
                        "memory block cache of --cache-size (see above)")
    p.add_argument("--stored-row-bytes", type=int, default=89,
                   help="stored (compressed) bytes per row in cloud blocks (default 89: "
                        "the tiering experiment's 17.0 MiB of cloud tables for 200k rows)")
    p.add_argument("--disk-row-bytes", type=int, default=160,
                   help="bytes per row of a key-level disk cache (default 160: 124 of "
                        "payload, a 20-byte record header, and an index entry)")
    p.add_argument("--forms", action="store_true",
                   help="model the block cache's forms: decoded, stored, or both (see above)")
    p.add_argument("--decoded-bytes", type=int, default=4787,
                   help="bytes a decoded block is charged (default 4787: Block.charge of 29 "
                        "rows of the benchmark's 24 + 100 bytes in the heads form, decision "
                        "0038; it was 6793 with a key list)")
    p.add_argument("--stored-overhead", type=int, default=STORED_OVERHEAD,
                   help="bytes charged per stored block on top of its stored bytes (default: "
                        "the block cache's STORED_OVERHEAD)")
    p.add_argument("--decoded-shares", default="50,25,10",
                   help="decoded-tier shares of the budget modelled for (b), in percent")
    args = p.parse_args(argv)
    cfg = StreamConfig(CORE_WORKLOADS[args.workload], args.records, args.ops, 1, None, 24,
                       100, 0.5, 0.99, "hashed", args.seed)
    keys: list[bytes] = []
    for batch in OperationStream(cfg, 0).take(args.ops):
        keys += [k for op, k in zip(batch.ops, batch.keys) if op != Op.INSERT]
    # A fully compacted table: blocks of consecutive keys in key order.
    loaded = sorted(cfg.key_space().keys(np.arange(args.records)))
    positions = [bisect_left(loaded, k) for k in keys]
    if args.forms:
        return _forms(args, positions)
    if args.disk_size is not None:
        return _tiers(args, keys, positions)
    blocks = [p // args.rows_per_block for p in positions]
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
