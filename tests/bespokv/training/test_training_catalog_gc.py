"""The catalog (list/latest/delete/retention) and chunk GC, including GC racing saves."""

from __future__ import annotations

import random
import threading
import time

import pytest
import torch
import torch.distributed.checkpoint as dcp

import cloudtier
from bespokv.training import CheckpointStore, KVStorageReader, KVStorageWriter, MemoryKV
from bespokv.training.errors import CheckpointNotFoundError, CommitFailedError, InvalidArgumentError
from bespokv.training.records import ChunkRecord, chunk_key

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def save(store, cid, tensors):
    dcp.save({"m": tensors}, storage_writer=KVStorageWriter(store, cid))


def load(store, cid, like):
    back = {"m": {k: torch.full_like(v, -1) for k, v in like.items()}}
    dcp.load(back, storage_reader=KVStorageReader(store, cid))
    return back["m"]


def chunk_objects(store):
    return sorted(i.key for i in store.objects.list("chunks/"))


def test_list_latest_delete_and_retention(store):
    tensors = {"a": torch.randn(3000), "b": torch.randn(3000)}
    for step in (10, 2, 30):
        save(store, f"run/step-{step}", tensors)
    save(store, "other/step-99", tensors)
    infos = store.list("run")
    assert [c.step for c in infos] == [2, 10, 30]
    assert store.latest("run").id == "run/step-30"
    assert all(c.bytes == 24000 for c in infos)
    by_step = {c.step: c for c in infos}  # step 10 was saved first: it uploaded everything
    assert by_step[10].new_bytes == 24000 and by_step[2].new_bytes == 0 and by_step[2].dedup_bytes == 24000
    assert store.runs() == ["other", "run"]
    store.delete("run/step-10")
    with pytest.raises(CheckpointNotFoundError):
        store.delete("run/step-10")
    assert store.retain("run", keep_last=1) == ["run/step-2"]
    assert [c.id for c in store.list("run")] == ["run/step-30"]
    with pytest.raises(InvalidArgumentError):
        store.retain("run", keep_last=-1)
    with pytest.raises(InvalidArgumentError):
        store.list("")
    assert store.latest("nothing") is None


def test_gc_frees_only_unreferenced_chunks(store):
    torch.manual_seed(1)
    shared = torch.randn(1024)  # exactly one 4 KiB chunk
    save(store, "run/step-1", {"s": shared, "x": torch.randn(1024)})
    save(store, "run/step-2", {"s": shared, "x": torch.randn(1024)})
    assert len(chunk_objects(store)) == 3
    report = store.gc()
    assert report.chunks_deleted == 0 and report.chunks_kept == 3
    store.delete("run/step-1")
    report = store.gc()
    assert report.chunks_deleted == 1 and report.bytes_freed == 4096 and report.holders_dropped == 1
    assert len(chunk_objects(store)) == 2
    like = {"s": shared, "x": shared}
    assert torch.equal(load(store, "run/step-2", like)["s"], shared)
    store.delete("run/step-2")
    store.gc()
    assert chunk_objects(store) == [] and list(store.kv.scan_prefix(chunk_key(store.ns))) == []


def test_a_chunk_pinned_by_a_running_save_survives_gc(store):
    """The race the pin protocol exists for: a save finds a chunk already stored (so does
    not upload it), the only checkpoint holding it is deleted and GC runs, then the save
    commits. The chunk must still be there."""
    shared = torch.randn(1024)
    save(store, "run/step-1", {"s": shared})
    store.delete("run/step-1")  # now only the running save below will hold the chunk

    class GCOnFirstPut(cloudtier.StoreWrapper):
        fired = False

        def put(self, key, data, **kw):
            if not GCOnFirstPut.fired:  # the save has pinned "s" (deduplicated) by now
                GCOnFirstPut.fired = True
                report = store.gc()
                assert report.chunks_deleted == 0 and report.chunks_kept >= 1
            return super().put(key, data, **kw)

    racing = CheckpointStore(store.kv, GCOnFirstPut(store.objects), chunk_size=4096, threads=1)
    fresh = torch.randn(1024)
    save(racing, "run/step-2", {"s": shared, "t": fresh})
    assert GCOnFirstPut.fired and racing.latest("run").dedup_bytes == 4096
    store.gc()
    back = load(store, "run/step-2", {"s": shared, "t": fresh})
    assert torch.equal(back["s"], shared) and torch.equal(back["t"], fresh)


def test_a_pin_between_gc_reading_chunks_and_deciding_wins(store):
    """GC reads the chunk records (the shared chunk has only a deleted checkpoint's
    holder), then a save pins the chunk and commits, then GC decides: its CAS from the
    stale record must fail, so the committed checkpoint keeps its chunk."""
    shared = torch.randn(1024)
    save(store, "run/step-1", {"s": shared})
    store.delete("run/step-1")

    class PinAfterChunkScan:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def scan_prefix(self, prefix):
            items = list(self.inner.scan_prefix(prefix))
            if prefix == chunk_key(store.ns):
                save(store, "run/step-2", {"s": shared})  # dedups against the stale chunk
            return iter(items)

    gc_view = CheckpointStore(PinAfterChunkScan(store.kv), store.objects, chunk_size=4096)
    report = gc_view.gc()
    assert report.chunks_deleted == 0
    assert store.latest("run").dedup_bytes == 4096
    assert torch.equal(load(store, "run/step-2", {"s": shared})["s"], shared)


def test_a_chunk_marked_deleting_gets_a_new_incarnation(store):
    """GC marked the chunk deleting (and will delete its object), then a save pins it: the
    save uploads a fresh incarnation that GC's pending delete cannot touch."""
    t = torch.randn(1024)
    save(store, "run/step-1", {"t": t})
    store.delete("run/step-1")
    (key, raw), = store.kv.scan_prefix(chunk_key(store.ns))
    old = ChunkRecord.decode(raw)
    dying = ChunkRecord(old.token, "deleting", old.uploaded, old.size, ())
    assert store.kv.cas(key, raw, dying.encode())  # GC step 3, first half
    save(store, "run/step-2", {"t": t})
    new = ChunkRecord.decode(store.kv.get(key))
    assert new.token != old.token and new.uploaded and new.state == "live"
    store.gc()  # finishes deleting the old incarnation's object only
    assert torch.equal(load(store, "run/step-2", {"t": t})["t"], t)
    assert len(chunk_objects(store)) == 1


def test_expired_pending_save_is_reaped_and_cannot_commit_late(store):
    writer = KVStorageWriter(store, "run/step-1")
    t = torch.randn(2048)
    save_id = store.begin("run/step-2")
    report = store.gc(now=store.clock() + store.lease_s + 1)
    assert report.saves_reaped == 1
    from bespokv.training.store import SaveStats
    with pytest.raises(CommitFailedError):
        store.commit("run/step-2", save_id, b"", SaveStats())
    assert store.list("run") == []
    save(store, "run/step-2", {"t": t})  # the id is free again
    assert torch.equal(load(store, "run/step-2", {"t": t})["t"], t)
    del writer


def test_concurrent_saves_deletes_and_gc_never_lose_a_committed_chunk(tmp_path):
    """Saves sharing most tensors with the previous one, keep-last-2 retention and GC
    passes run in three threads at once; every checkpoint still committed at the end loads
    bit for bit, and a final GC leaves exactly the chunks those checkpoints use."""
    rng = random.Random(7)

    class JitteryKV(MemoryKV):  # yields the GIL around every call so the threads interleave
        def get(self, key):
            time.sleep(rng.random() * 1e-4)
            return super().get(key)

        def cas(self, key, expected, new, **kw):
            time.sleep(rng.random() * 1e-4)
            return super().cas(key, expected, new, **kw)

    store = CheckpointStore(JitteryKV(), cloudtier.open_store("memory://"), chunk_size=4096, threads=3)
    torch.manual_seed(7)
    pool = {f"p{i}": torch.randn(1024) for i in range(12)}
    saved: dict[str, dict[str, torch.Tensor]] = {}
    errors: list[BaseException] = []
    done = threading.Event()

    def saver():
        try:
            for step in range(1, 25):
                for name in rng.sample(sorted(pool), 2):  # ~15% of tensors change per save
                    pool[name] = torch.randn(1024)
                snap = {k: v.clone() for k, v in pool.items()}
                save(store, f"run/step-{step}", snap)
                saved[f"run/step-{step}"] = snap
        except BaseException as e:  # reported by the main thread
            errors.append(e)
        finally:
            done.set()

    def retainer():
        while not done.is_set():
            store.retain("run", keep_last=2)

    def collector():
        while not done.is_set():
            store.gc()

    threads = [threading.Thread(target=f) for f in (saver, retainer, collector, collector)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in threads), "a worker thread hung"
    assert not errors, errors
    live = store.list("run")
    assert live and live[-1].id == "run/step-24"
    for info in live:
        back = load(store, info.id, saved[info.id])
        for k, v in saved[info.id].items():
            assert torch.equal(back[k], v), (info.id, k)
    store.gc()
    used = set()
    for info in live:
        for loc in __import__("pickle").loads(store.metadata(info.id)).storage_data.values():
            used.update(f"chunks/{d[:2]}/{d}.{t}" for d, t, *_ in loc["chunks"])
    assert set(chunk_objects(store)) == used
