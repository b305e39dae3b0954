"""A save never commits onto a damaged chunk: it checks what it deduplicates, and repairs it.

Issue 27 item 13: after a stored chunk was damaged, the next save that shared it reported
``new_bytes=0``, committed, and could not be loaded (``ChunkMissingError``).
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed.checkpoint as dcp

from bespokv.training import KVStorageReader, KVStorageWriter
from bespokv.training.records import ChunkRecord, chunk_key, parse_object_key

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # DCP warns that no process group exists


def flip_in_place(store, key: str) -> None:
    """Flip one byte of the object's file behind the store's back (file:// only), at a
    later clock tick than its put."""
    path = os.path.join(store.objects.root, key)
    st = os.stat(path)
    with open(path, "r+b") as f:
        first = f.read(1)
        f.seek(0)
        f.write(bytes([first[0] ^ 0x01]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


DAMAGE = {
    "deleted": lambda store, key, data: store.objects.delete(key),
    "cut": lambda store, key, data: store.objects.put(key, data[:-1]),
    "swapped": lambda store, key, data: store.objects.put(key, bytes(b ^ 0xFF for b in data)),
    "flipped in place": lambda store, key, data: flip_in_place(store, key),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_save_repairs_a_damaged_chunk_it_shares(store, damage):
    if damage == "flipped in place" and not hasattr(store.objects, "root"):
        pytest.skip("only a file:// store has files to modify in place")
    sd = {"w": torch.randn(3000), "b": torch.randn(10)}
    dcp.save(sd, storage_writer=KVStorageWriter(store, "run/step-1"))
    key = sorted(i.key for i in store.objects.list("chunks/"))[0]
    DAMAGE[damage](store, key, store.objects.get(key))
    digest, _token = parse_object_key(key)
    size = ChunkRecord.decode(store.kv.get(chunk_key(store.ns, digest))).size

    writer = KVStorageWriter(store, "run/step-2")
    dcp.save(sd, storage_writer=writer)
    assert writer.last_stats.new_bytes == size  # the damaged chunk, uploaded again
    for cid in ("run/step-2", "run/step-1"):  # the repair is in place: the older one loads too
        back = {k: torch.zeros_like(v) for k, v in sd.items()}
        dcp.load(back, storage_reader=KVStorageReader(store, cid))
        assert all(torch.equal(back[k], v) for k, v in sd.items()), cid

    writer = KVStorageWriter(store, "run/step-3")
    dcp.save(sd, storage_writer=writer)
    assert writer.last_stats.new_bytes == 0  # intact again: deduplicated


def test_scrub_finds_damage_the_etag_does_not_show_and_the_next_save_repairs_it(kv, tmp_path):
    """A byte flipped without a new mtime (the put's clock tick, or a tool that restores
    mtimes; S3: rot under the server) passes a save's HEAD; only reading finds it."""
    import cloudtier

    from bespokv.training import CheckpointStore

    with cloudtier.open_store((tmp_path / "objects").as_uri()) as objects:
        store = CheckpointStore(kv, objects, chunk_size=4096, threads=4)
        sd = {"w": torch.randn(3000), "b": torch.randn(10)}
        dcp.save(sd, storage_writer=KVStorageWriter(store, "run/step-1"))
        key = sorted(i.key for i in objects.list("chunks/"))[0]
        path = os.path.join(objects.root, key)
        st = os.stat(path)
        with open(path, "r+b") as f:
            f.write(b"\x00\x01\x02")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        dcp.save(sd, storage_writer=KVStorageWriter(store, "run/step-2"))  # deduplicates onto it

        report = store.scrub()
        assert report.chunks_checked == len(list(objects.list("chunks/")))
        assert report.damaged == [parse_object_key(key)[0]]
        assert sorted(report.checkpoints_damaged) == ["run/step-1", "run/step-2"]
        assert store.scrub().damaged == [], "a damaged chunk is reported once, then awaits a save"

        dcp.save(sd, storage_writer=KVStorageWriter(store, "run/step-3"))  # uploads it again
        for cid in ("run/step-1", "run/step-2", "run/step-3"):
            back = {k: torch.zeros_like(v) for k, v in sd.items()}
            dcp.load(back, storage_reader=KVStorageReader(store, cid))
            assert all(torch.equal(back[k], v) for k, v in sd.items()), cid
