"""``python -m bench miss-cost``: what one block-cache miss of a local table costs, by piece.

Writes one table of ``--records`` entries (24-byte keys, 100-byte values half
compressible, as engine-core's) per compression in ``--compressions``, then reads
``--reads`` random blocks and prints the CPU time per block (``time.thread_time_ns``,
so other processes on a loaded machine count less than in wall time) of each piece of
the miss path: the ``pread``, the CRC, ``decode_stored`` (CRC + decompression), the
decode into a ``Block``, the whole miss as ``Table`` does it, the same through an
``mmap`` of the file instead of ``pread``, and the block-cache insert; then, to compare,
a hit (``Table.get`` of a key whose block is cached) and the bytes a cached block is
charged. It answers "what
would uncompressed or mmap'ed local blocks save per miss?" (issue 15). The file sizes
are printed too: an uncompressed table is larger, and the OS page cache that holds it
(or the mapping, which counts in RSS) is memory as well.

    python -m bench miss-cost
    python -m bench miss-cost --records 50k --reads 5k
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import tempfile
import time
import zlib
from typing import Callable, Sequence

from bench.units import parse_count
from rocksmash.block import TRAILER_SIZE, Block, decode_stored
from rocksmash.block_cache import BlockCache
from rocksmash.bloom import split_hash
from rocksmash.env import LocalFile
from rocksmash.table import Table
from rocksmash.table_builder import TableBuilder

__all__ = ["main", "measure"]


def _per_call_us(fn: Callable[[int], object], blocks: list[int]) -> float:
    start = time.thread_time_ns()
    for i in blocks:
        fn(i)
    return (time.thread_time_ns() - start) / len(blocks) / 1000


def measure(path: str, records: int, reads: int, compression: str,
            seed: int = 3) -> tuple[dict[str, float], int]:
    """CPU microseconds per block of each piece of a miss, and the table's size."""
    rnd = random.Random(seed)
    keys = sorted({b"user%020d" % rnd.getrandbits(62) for _ in range(records)})
    half = bytes(rnd.getrandbits(8) for _ in range(50))
    values = [half + rnd.randbytes(50) for _ in keys]
    b = TableBuilder(path, block_size=4096, compression=compression, bloom_bits_per_key=10)
    b.add_unique(keys, list(range(1, len(keys) + 1)), values)
    b.finish(sync=False)
    t = Table(0, LocalFile(path), None, os.path.basename(path))
    try:
        blocks = [rnd.randrange(t.nblocks) for _ in range(reads)]
        stored = {i: t.fetch(i) for i in set(blocks)}
        raws = {i: decode_stored(memoryview(s), "block") for i, s in stored.items()}
        offs, sizes = t.offsets, t.sizes
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
            view = memoryview(mm)
            try:
                out = {
                    "pread": _per_call_us(t.fetch, blocks),
                    "crc": _per_call_us(lambda i: zlib.crc32(memoryview(stored[i])[:-4]),
                                        blocks),
                    "decode_stored (crc + decompress)": _per_call_us(
                        lambda i: decode_stored(memoryview(stored[i]), "block"), blocks),
                    "Block()": _per_call_us(lambda i: Block(raws[i]), blocks),
                    "whole miss (pread)": _per_call_us(
                        lambda i: Block(decode_stored(t.fetch(i), "block")), blocks),
                    "whole miss (mmap)": _per_call_us(
                        lambda i: Block(decode_stored(
                            view[offs[i]:offs[i] + sizes[i] + TRAILER_SIZE], "block")),
                        blocks),
                }
            finally:
                view.release()
        decoded = {i: Block(r) for i, r in raws.items()}
        cache = BlockCache(1 << 40)
        distinct = list(decoded)
        out["cache insert"] = _per_call_us(
            lambda i: cache.insert(t, i, decoded[i]), distinct)
        # A hit for comparison: Table.get of a key whose block is cached (and has had
        # its first find, which builds a heads-form block's heads; decision 0038).
        hot = Table(1, LocalFile(path), BlockCache(1 << 40), os.path.basename(path))
        try:
            probes = [keys[rnd.randrange(len(keys))] for _ in range(reads)]
            hashes = [split_hash(k) for k in probes]
            for k, (w, m) in zip(probes, hashes):
                hot.get(k, 1 << 56, w, m)
                hot.get(k, 1 << 56, w, m)
            seq_max = 1 << 56
            start = time.thread_time_ns()
            for k, (w, m) in zip(probes, hashes):
                hot.get(k, seq_max, w, m)
            out["hit (Table.get, block cached)"] = (
                (time.thread_time_ns() - start) / len(probes) / 1000)
            out["charge per cached block (bytes)"] = hot.cache.used / max(  # type: ignore[union-attr]
                1, sum(b is not None for b in hot.blocks))
        finally:
            hot.close()
        return out, os.path.getsize(path)
    finally:
        t.close()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench miss-cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=parse_count, default=200_000)
    p.add_argument("--reads", type=parse_count, default=20_000)
    p.add_argument("--compressions", default="lz4,none",
                   help="comma-separated table compressions to compare (default lz4,none)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-miss-") as d:
        for comp in args.compressions.split(","):
            pieces, size = measure(os.path.join(d, f"{comp}.sst"), args.records,
                                   args.reads, comp)
            print(f"{comp}: table {size / 2**20:.1f} MiB, {args.records:,} records; "
                  f"CPU us per block:")
            for name, us in pieces.items():
                print(f"  {name:36s} {us:7.0f}" if "bytes" in name else f"  {name:36s} {us:7.2f}")
    return 0
