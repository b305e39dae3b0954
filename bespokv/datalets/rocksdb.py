"""RocksDB as a datalet, through ``rocksdict`` (raw bytes mode).

Persistent: the data directory survives restarts. Writes go through RocksDB's WAL
(``sync=False`` by default: a killed process loses nothing, a power cut may lose the last
writes; set ``sync = true`` to fsync each batch). ``export`` reads a RocksDB snapshot, so a
full copy is point-in-time consistent.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

from bespokv.datalets.base import Datalet, Op, check_key

__all__ = ["RocksDBDatalet"]


class RocksDBDatalet(Datalet):
    kind = "rocksdb"
    persistent = True

    def __init__(self, path: str, *, sync: bool = False, **options: Any) -> None:
        import rocksdict

        self._rd = rocksdict
        os.makedirs(path, exist_ok=True)
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        for name, value in options.items():
            setter = getattr(opts, f"set_{name}", None)
            if setter is None:
                raise ValueError(f"unknown RocksDB option {name!r}")
            setter(value)
        self.path = path
        self._db = rocksdict.Rdict(path, opts)
        self._wopts = rocksdict.WriteOptions()
        self._wopts.sync = bool(sync)

    def get(self, key: bytes) -> bytes | None:
        return self._db.get(key)

    def multi_get(self, keys: Sequence[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        return list(self._db.get(list(keys)))

    def write(self, ops: Sequence[Op]) -> None:
        wb = self._rd.WriteBatch(raw_mode=True)
        for k, v in ops:
            check_key(k)
            if v is None:
                wb.delete(k)
            else:
                if type(v) is not bytes:
                    raise TypeError(f"values must be bytes, not {type(v).__name__}")
                wb.put(k, v)
        self._db.write(wb, self._wopts)

    def scan(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        return self._scan(self._db, start, end, reverse, limit)

    @staticmethod
    def _scan(
        src: Any, start: bytes | None, end: bytes | None, reverse: bool, limit: int | None
    ) -> Iterator[tuple[bytes, bytes]]:
        if limit is not None and limit <= 0:
            return
        it = src.iter()
        n = 0
        if not reverse:
            it.seek(start) if start is not None else it.seek_to_first()
            while it.valid():
                k = it.key()
                if end is not None and k >= end:
                    return
                yield k, it.value()
                n += 1
                if limit is not None and n >= limit:
                    return
                it.next()
        else:
            if end is not None:
                it.seek_for_prev(end)
                if it.valid() and it.key() >= end:
                    it.prev()
            else:
                it.seek_to_last()
            while it.valid():
                k = it.key()
                if start is not None and k < start:
                    return
                yield k, it.value()
                n += 1
                if limit is not None and n >= limit:
                    return
                it.prev()

    def export(self, chunk: int = 512) -> Iterator[list[tuple[bytes, bytes]]]:
        snap = self._db.snapshot()
        buf: list[tuple[bytes, bytes]] = []
        for kv in self._scan(snap, None, None, False, None):
            buf.append(kv)
            if len(buf) >= chunk:
                yield buf
                buf = []
        if buf:
            yield buf

    def stats(self) -> dict[str, float]:
        try:
            return {"estimated_keys": float(self._db.property_int_value("rocksdb.estimate-num-keys") or 0)}
        except Exception:  # stats are best effort
            return {}

    def close(self) -> None:
        try:
            self._db.close()
        except Exception:  # already closed
            pass
