"""memory:// specifics: private vs named buckets, prefixes."""

from __future__ import annotations

import pytest

from cloudtier import MemoryStore, NotFoundError, open_store
from cloudtier.memory_store import drop_memory_bucket


def test_unnamed_stores_are_private() -> None:
    a, b = open_store("memory://"), open_store("memory://")
    a.put("k", b"v")
    with pytest.raises(NotFoundError):
        b.get("k")


def test_named_bucket_is_shared_and_prefixes_scope_it() -> None:
    try:
        whole = open_store("memory://shared-test")
        db1 = open_store("memory://shared-test/db1")
        db2 = MemoryStore("shared-test", "db2/")
        db1.put("wal/1", b"one")
        db2.put("wal/1", b"two")
        assert db1.get("wal/1") == b"one"
        assert db2.get("wal/1") == b"two"
        assert [o.key for o in whole.list()] == ["db1/wal/1", "db2/wal/1"]
        assert [o.key for o in db1.list()] == ["wal/1"]
        # A reopened store sees the same objects (a test can "restart" a database).
        assert open_store("memory://shared-test/db1").get("wal/1") == b"one"
    finally:
        drop_memory_bucket("shared-test")
    assert list(open_store("memory://shared-test").list()) == []


def test_returned_bytes_cannot_alias_stored_ones() -> None:
    store = MemoryStore()
    data = bytearray(b"abc")
    store.put("k", data)
    data[0] = ord("z")
    assert store.get("k") == b"abc"
