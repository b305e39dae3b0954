"""Child of test_wal_shipping's disk-loss loop: a seeded workload on a tiered database.

After each write call returns, ``<index>`` is printed on stdout (acknowledged). Every
``MARK_EVERY`` writes the child makes the mode's promise hold for everything so far and
prints ``S <index>``: with "sealed" it seals the memtable (a flush), and in every mode it
waits (with a deadline) until the shipper reports no lag, so everything up to ``index``
is in the bucket. The parent SIGKILLs it at a random point and deletes its directory.

Usage: python shipping_child.py DB_DIR STORE_URL MODE SEED STORE_OPTIONS_JSON
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from powerloss_child import ops, run

MARK_EVERY = 150


def main() -> None:
    path, url, mode, seed, store_opts = sys.argv[1:6]
    import rocksmash

    db = rocksmash.open(path, object_store=url, object_store_options=json.loads(store_opts),
                        wal_shipping=mode, memtable_size="16KiB", l0_compaction_trigger=2,
                        target_file_size="32KiB", level_base_size="64KiB", level_multiplier=4,
                        num_levels=4, local_budget="40%", cloud_target_file_size="32KiB",
                        block_size=512, background_processes=False)
    out = os.fdopen(1, "w", buffering=1)
    for i, op in enumerate(ops(int(seed))):
        run(db, op)
        out.write(f"{i}\n")
        if i % MARK_EVERY == MARK_EVERY - 1:
            if mode == "sealed":
                db.flush()
            deadline = time.monotonic() + 60
            while db.stats()["cloud"]["wal_shipping"]["lag_bytes"]:
                if time.monotonic() > deadline:
                    raise SystemExit("WAL shipping lag did not reach 0 within 60 s")
                time.sleep(0.005)
            out.write(f"S {i}\n")


if __name__ == "__main__":
    main()
