"""A saver killed (SIGKILL) mid-save leaves no visible checkpoint; GC collects its chunks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import warnings

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

import cloudtier
import rocksmash
from bespokv.training import CheckpointStore, KVStorageReader, KVStorageWriter

CHILD = os.path.join(os.path.dirname(__file__), "killed_saver_child.py")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.mark.parametrize("where", ["upload", "commit"])
def test_killed_saver_leaves_no_visible_checkpoint(tmp_path, where):
    db_dir, obj_dir = str(tmp_path / "meta"), str(tmp_path / "objects")
    os.makedirs(obj_dir)
    proc = subprocess.run([sys.executable, CHILD, db_dir, obj_dir, where], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr)
    assert "saving step-2" in proc.stdout

    with rocksmash.open(db_dir) as db, cloudtier.open_store("file://" + obj_dir) as objects:
        store = CheckpointStore(db, objects, chunk_size=4096)
        assert [c.id for c in store.list("run")] == ["run/step-1"]
        assert store.latest("run").id == "run/step-1"
        step1_chunks = store.latest("run").chunks
        assert len(list(objects.list("chunks/"))) > step1_chunks  # the dead save's orphans
        with pytest.raises(CheckpointException, match="in progress"):  # until the dead save's lease ends
            dcp.save({"x": torch.ones(1)}, storage_writer=KVStorageWriter(store, "run/step-2"))

        report = store.gc()  # the dead save's lease has not run out: its chunks stay
        assert report.saves_reaped == 0 and report.chunks_deleted == 0
        report = store.gc(now=store.clock() + store.lease_s + 1)
        assert report.saves_reaped == 1 and report.chunks_deleted > 0
        assert len(list(objects.list("chunks/"))) == step1_chunks
        kept = store.latest("run").save_id.encode()
        assert all(k.startswith(store.ns + b"md/" + kept) for k, _ in store.kv.scan_prefix(store.ns + b"md/"))

        torch.manual_seed(0)
        expected = {f"t{i}": torch.randn(4096) for i in range(4)}
        back = {k: torch.zeros(4096) for k in expected}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.load(back, storage_reader=KVStorageReader(store, "run/step-1"))
        assert all(torch.equal(back[k], expected[k]) for k in expected)
        dcp.save(back, storage_writer=KVStorageWriter(store, "run/step-2"))  # the id is free now
        assert store.latest("run").id == "run/step-2"
