"""Measure the two ways to keep the local levels recoverable from the bucket (decision 0006).

    .venv/bin/python scripts/measure_wal_retention.py [--records N] [--updates N]

Loads N keys, then overwrites random ones (zipfian-ish: 80% of updates on 20% of keys),
on a tiered database (file:// bucket, local budget 10%, WAL shipping on), and reports:

- backups (what rocksmash does): bytes uploaded as backups of local tables, and the bytes
  of backups the bucket holds at the end (the local tables' size);
- keeping the WAL instead: the WAL bytes that would have to stay in the bucket at the end,
  i.e. every segment holding a record at or after the oldest sequence number still in a
  local table (records older than that are all in cloud tables).
"""

from __future__ import annotations

import argparse
import random
import tempfile

import rocksmash
from rocksmash.version import LOCAL
from rocksmash.wal_shipping import WalShipper


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--updates", type=int, default=400_000)
    args = ap.parse_args()
    segments: dict[int, list[int]] = {}  # segment -> [first_seq, bytes]
    real_ship = WalShipper._ship

    def ship(self, seg, end):  # record every segment's first sequence and bytes
        segments.setdefault(seg.wal.number, [seg.wal.first_seq, 0])[1] += end - seg.shipped
        real_ship(self, seg, end)

    WalShipper._ship = ship  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as d:
        db = rocksmash.open(f"{d}/db", object_store=f"file://{d}/bucket", local_budget="10%",
                            memtable_size="4MiB", target_file_size="2MiB",
                            level_base_size="8MiB", cloud_target_file_size="8MiB")
        rng = random.Random(1)
        for i in range(args.records):  # values compress 2:1, like YCSB's
            db.put(b"user%010d" % (i * 7919 % args.records), rng.randbytes(50) * 2)
        hot = max(1, args.records // 5)
        for _ in range(args.updates):
            k = rng.randrange(hot) if rng.random() < 0.8 else rng.randrange(args.records)
            db.put(b"user%010d" % k, rng.randbytes(50) * 2)
        db.flush()
        s = db.stats()
        local = [f for lvl, f in db._version.files() if f.tier == LOCAL]
        min_local = min((f.min_seq for f in local), default=s["sequence"] + 1)
        order = sorted(segments.items())
        keep = 0
        for i, (_, (_, nbytes)) in enumerate(order):
            last = order[i + 1][1][0] - 1 if i + 1 < len(order) else s["sequence"]
            if last >= min_local:
                keep += nbytes
        wal_total = sum(b for _, b in segments.values())
        print(f"data: {args.records} keys, {args.updates} updates; table bytes "
              f"{s['table_bytes']}, local {s['cloud']['local_table_bytes']}, cloud "
              f"{s['cloud']['cloud_table_bytes']}")
        print(f"WAL shipped: {wal_total} bytes in {len(segments)} segments")
        print(f"backups: uploaded {s.get('backup_bytes', 0)} bytes in "
              f"{s.get('backup_uploads', 0)} uploads; held at the end "
              f"{sum(f.size for f in local)} bytes")
        print(f"keeping the WAL instead: {keep} bytes held at the end "
              f"(oldest local sequence {min_local} of {s['sequence']})")
        db.close()


if __name__ == "__main__":
    main()
