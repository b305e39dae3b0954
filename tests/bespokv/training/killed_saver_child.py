"""Child of test_training_killed_saver: saves step-1, then dies by SIGKILL inside step-2.

    python killed_saver_child.py DB_DIR OBJECTS_DIR {upload|commit}

``upload``: killed at the third chunk upload of step-2; ``commit``: killed at the commit
CAS itself, after the metadata parts are written. Exits 0 only if it was not killed.
"""

from __future__ import annotations

import os
import signal
import sys
import warnings

import torch
import torch.distributed.checkpoint as dcp

import cloudtier
import rocksmash
from bespokv.training import CheckpointStore, KVStorageWriter, RocksmashKV

warnings.simplefilter("ignore")


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class KillAtUpload(cloudtier.StoreWrapper):
    puts = 0

    def put(self, key, data, **kw):
        KillAtUpload.puts += 1
        if KillAtUpload.puts == 3:
            die()
        return super().put(key, data, **kw)


class KillAtCommit(RocksmashKV):
    def cas(self, key, expected, new, **kw):
        if new is not None and b'"state":"committed"' in new:
            die()
        return super().cas(key, expected, new, **kw)


def main() -> None:
    db_dir, objects_dir, where = sys.argv[1:4]
    db = rocksmash.open(db_dir)
    objects = cloudtier.open_store("file://" + objects_dir)
    torch.manual_seed(0)
    state = {f"t{i}": torch.randn(4096) for i in range(4)}  # 16 KiB each: 4 chunks each
    dcp.save(state, storage_writer=KVStorageWriter(CheckpointStore(db, objects, chunk_size=4096), "run/step-1"))
    state = {k: v + 1 for k, v in state.items()}
    if where == "upload":
        store = CheckpointStore(db, KillAtUpload(objects), chunk_size=4096, threads=1)
    else:
        store = CheckpointStore(KillAtCommit(db), objects, chunk_size=4096, threads=1)
    print("saving step-2", flush=True)
    dcp.save(state, storage_writer=KVStorageWriter(store, "run/step-2"))
    sys.exit(0)


if __name__ == "__main__":
    main()
