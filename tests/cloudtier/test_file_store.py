"""file:// specifics: layout, atomicity, etag xattrs, conflicts, cross-process CAS."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cloudtier
from cloudtier import FileStore, InvalidKeyError, NotFoundError, PreconditionFailedError
from cloudtier.file_store import ETAG_XATTR, RESERVED_DIR

REPO_ROOT = Path(cloudtier.__file__).resolve().parent.parent


def test_keys_are_plain_files_under_the_root(tmp_path: Path) -> None:
    with FileStore(tmp_path) as store:
        store.put("db/000001.sst", b"table")
    assert (tmp_path / "db" / "000001.sst").read_bytes() == b"table"


def test_put_leaves_no_temp_files(tmp_path: Path) -> None:
    with FileStore(tmp_path) as store:
        for i in range(5):
            store.put(f"k{i}", b"x" * i)
        with pytest.raises(PreconditionFailedError):
            store.put("k1", b"y", if_none_match=True)  # the losing temp file is removed too
    assert os.listdir(tmp_path / RESERVED_DIR / "tmp") == []


def test_etag_xattr_is_written_with_the_file(tmp_path: Path) -> None:
    with FileStore(tmp_path) as store:
        etag = store.put("k", b"content")
    assert os.getxattr(tmp_path / "k", ETAG_XATTR).decode() == etag == hashlib.md5(b"content").hexdigest()


def test_files_without_xattr_get_their_hash_as_etag(tmp_path: Path) -> None:
    (tmp_path / "dropped-in").write_bytes(b"copied by hand")
    with FileStore(tmp_path) as store:
        expected = hashlib.md5(b"copied by hand").hexdigest()
        assert store.head("dropped-in").etag == expected
        assert [o.etag for o in store.list()] == [expected]
        # if_match works against the computed etag as well.
        store.put("dropped-in", b"new", if_match=expected)
        assert store.get("dropped-in") == b"new"


def test_a_file_modified_in_place_gets_its_true_etag(tmp_path: Path) -> None:
    """The etag xattr carries the mtime it was stamped at; a later write changes the mtime,
    so the etag is computed from the bytes (a checkpoint save's HEAD relies on it)."""
    with FileStore(tmp_path) as store:
        stamped = store.put("k", b"content")
        st = os.stat(tmp_path / "k")
        with open(tmp_path / "k", "r+b") as f:
            f.write(b"C")
        os.utime(tmp_path / "k", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a later clock tick
        damaged = hashlib.md5(b"Content").hexdigest()
        assert store.head("k").etag == damaged != stamped
        assert [o.etag for o in store.list()] == [damaged]
        with pytest.raises(PreconditionFailedError):
            store.put("k", b"new", if_match=stamped)
        store.put("k", b"new", if_match=damaged)
        assert store.head("k").etag == hashlib.md5(b"new").hexdigest()


def test_file_system_without_xattrs_falls_back_to_hashing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_xattrs(*args: object, **kwargs: object) -> None:
        raise OSError(95, "Operation not supported")  # EOPNOTSUPP

    monkeypatch.setattr(os, "setxattr", no_xattrs)
    monkeypatch.setattr(os, "getxattr", no_xattrs)
    with FileStore(tmp_path) as store:
        v1 = store.put("k", b"one")
        assert v1 == hashlib.md5(b"one").hexdigest() == store.head("k").etag
        store.put("k", b"two", if_match=v1)
        with pytest.raises(PreconditionFailedError):
            store.put("k", b"three", if_match=v1)


def test_reserved_directory_is_neither_key_nor_listed(tmp_path: Path) -> None:
    with FileStore(tmp_path) as store:
        store.put("visible", b"x")
        with pytest.raises(InvalidKeyError):
            store.put(f"{RESERVED_DIR}/lock", b"x")
        assert [o.key for o in store.list()] == ["visible"]
        assert list(store.list(f"{RESERVED_DIR}/")) == []


def test_file_and_directory_of_one_name_conflict(tmp_path: Path) -> None:
    with FileStore(tmp_path) as store:
        store.put("a", b"file")
        with pytest.raises(InvalidKeyError, match="cannot hold both"):
            store.put("a/b", b"x")
        store.put("c/d", b"x")
        with pytest.raises(InvalidKeyError, match="cannot hold both"):
            store.put("c", b"x")
        assert store.get("a") == b"file" and store.get("c/d") == b"x"


def test_delete_prunes_empty_directories(tmp_path: Path) -> None:
    with FileStore(tmp_path) as store:
        store.put("x/y/z", b"1")
        store.put("x/keep", b"2")
        store.delete("x/y/z")
        assert not (tmp_path / "x" / "y").exists()
        assert (tmp_path / "x").is_dir()
        store.put("x/y", b"now a file")  # possible because the directory went away
        assert store.get("x/y") == b"now a file"


def test_leftover_empty_directory_does_not_block_a_put(tmp_path: Path) -> None:
    (tmp_path / "crashed").mkdir()  # as if a crash hit between unlink and prune
    with FileStore(tmp_path) as store:
        store.put("crashed", b"ok")
        assert store.get("crashed") == b"ok"


def test_directory_is_not_an_object(tmp_path: Path) -> None:
    with FileStore(tmp_path) as store:
        store.put("dir/file", b"x")
        with pytest.raises(NotFoundError):
            store.get("dir")
        with pytest.raises(NotFoundError):
            store.head("dir")
        store.delete("dir")  # absent as an object: a no-op
        assert store.get("dir/file") == b"x"


def test_stale_temp_files_are_removed_at_open(tmp_path: Path) -> None:
    FileStore(tmp_path).close()
    stale = tmp_path / RESERVED_DIR / "tmp" / "put-stale"
    fresh = tmp_path / RESERVED_DIR / "tmp" / "put-fresh"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"x")
    os.utime(stale, (0, 0))
    FileStore(tmp_path).close()
    assert not stale.exists()
    assert fresh.exists()  # may belong to a put in flight in another process


def test_open_store_file_url(tmp_path: Path) -> None:
    with cloudtier.open_store(f"file://{tmp_path}/sub", fsync=False) as store:
        store.put("k", b"v")
    assert (tmp_path / "sub" / "k").read_bytes() == b"v"


_CAS_WORKER = textwrap.dedent(
    """
    import sys
    from cloudtier import FileStore, PreconditionFailedError
    root, name, increments = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = FileStore(root)
    # 1) everyone tries to become leader once
    try:
        store.put("leader", name.encode(), if_none_match=True)
        print("leader")
    except PreconditionFailedError:
        print("follower")
    # 2) compare-and-swap increments of a shared counter
    done = 0
    while done < increments:
        info = store.head("counter")
        value = int(store.get("counter").split()[0])  # "<n> by <writer>"
        try:
            store.put("counter", str(value + 1).encode() + b" by " + name.encode(), if_match=info.etag)
            done += 1
        except PreconditionFailedError:
            pass
    store.close()
    """
)


def test_conditional_puts_are_atomic_across_processes(tmp_path: Path) -> None:
    with FileStore(tmp_path) as store:
        store.put("counter", b"0")
    processes, increments = 3, 20
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CAS_WORKER, str(tmp_path), f"p{n}", str(increments)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for n in range(processes)
    ]
    outputs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err.decode()
        outputs.append(out.decode().split())
    assert sorted(o[0] for o in outputs) == ["follower"] * (processes - 1) + ["leader"]
    with FileStore(tmp_path) as store:
        assert int(store.get("counter").split()[0]) == processes * increments


def test_disk_errors_become_store_errors_and_leave_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cloudtier import StoreError

    with FileStore(tmp_path) as store:
        store.put("k", b"old")

        def disk_full(fd: int) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "fsync", disk_full)
        with pytest.raises(StoreError, match="No space left") as info:
            store.put("k", b"new")
        assert not info.value.retriable
        monkeypatch.undo()
        assert store.get("k") == b"old"  # the failed put changed nothing
    assert os.listdir(tmp_path / RESERVED_DIR / "tmp") == []


def _racing_fsync(monkeypatch: pytest.MonkeyPatch, race: object) -> None:
    """Run ``race()`` once, just before the first directory fsync a mutation makes after
    releasing its lock: where a concurrent delete can prune the directory."""
    import cloudtier.file_store as file_store

    real = file_store._fsync_dir
    pending = [race]

    def fsync_dir(path: str) -> None:
        while pending:
            pending.pop()()  # type: ignore[operator]
        real(path)

    monkeypatch.setattr(file_store, "_fsync_dir", fsync_dir)


def test_a_put_survives_a_delete_that_prunes_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27 item 16: the put's directory fsync met ENOENT (StoreError) when a delete
    of the new object emptied and removed the directory between the rename and the fsync."""
    with FileStore(tmp_path) as store:
        _racing_fsync(monkeypatch, lambda: store.delete("chunks/ab/x"))
        store.put("chunks/ab/x", b"1")  # the put came first, then the delete: both succeed
        assert not (tmp_path / "chunks").exists()
        store.put("chunks/ab/x", b"2")
        assert store.get("chunks/ab/x") == b"2"


def test_a_delete_survives_another_delete_that_prunes_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FileStore(tmp_path) as store:
        store.put("chunks/ab/x", b"1")
        store.put("chunks/ab/y", b"2")
        # x's delete leaves chunks/ab (y is there); y's delete then removes it before x's fsync
        _racing_fsync(monkeypatch, lambda: store.delete("chunks/ab/y"))
        store.delete("chunks/ab/x")
        assert list(store.list()) == [] and not (tmp_path / "chunks").exists()


def test_xxh3_etags_are_cheap_and_each_store_kind_reports_its_own(tmp_path: Path) -> None:
    import xxhash

    want = "xxh3-" + xxhash.xxh3_128_hexdigest(b"content")
    with cloudtier.open_store(tmp_path.as_uri(), etag="xxh3") as store:
        assert store.put("k", b"content") == want == store.head("k").etag
        store.put("k", b"other", if_match=store.head("k").etag)
        with pytest.raises(PreconditionFailedError):
            store.put("k", b"third", if_match=want)
        store.put("m", b"content")
    with FileStore(tmp_path) as md5_store:  # the same files: their etags by its own function
        assert md5_store.head("m").etag == hashlib.md5(b"content").hexdigest()
        md5_store.put("m", b"content")
    with FileStore(tmp_path, etag="xxh3") as store:
        assert store.head("m").etag == want
    with pytest.raises(ValueError, match="etag"):
        FileStore(tmp_path, etag="sha1")


def test_an_object_of_several_write_pieces_round_trips(tmp_path: Path) -> None:
    from cloudtier.file_store import _WRITE_PIECE

    data = os.urandom(3 * _WRITE_PIECE + 12345)
    with FileStore(tmp_path) as store:
        assert store.put("big", memoryview(data)) == hashlib.md5(data).hexdigest()
        assert store.get("big") == data and store.head("big").size == len(data)
