"""The rocksmash engine (this project's tiered LSM) as a datalet.

Uses the engine's public API only: ``rocksmash.open(path, **options)``, ``get``,
``write(WriteBatch)``, ``scan(start, end, reverse=, snapshot=)`` (end exclusive),
``snapshot()`` and ``close()``. Options in the config's ``[datalet]`` table other than
``path`` are passed to ``rocksmash.open`` unchanged (for example a cold-tier URL).
Engine errors are ``rocksmash.Error`` subclasses; the service maps them to gRPC codes.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from typing import Any

from bespokv.datalets.base import Datalet, Op, check_key

__all__ = ["RocksmashDatalet"]


class RocksmashDatalet(Datalet):
    kind = "rocksmash"
    persistent = True

    def __init__(self, path: str, **options: Any) -> None:
        import rocksmash

        self._rm = rocksmash
        os.makedirs(path, exist_ok=True)
        self.path = path
        self._db = rocksmash.open(path, **options)

    def get(self, key: bytes) -> bytes | None:
        return self._db.get(key)

    def multi_get(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return self._db.multi_get(list(keys))

    def write(self, ops: Sequence[Op]) -> None:
        batch = self._rm.WriteBatch()
        for k, v in ops:
            check_key(k)
            if v is None:
                batch.delete(k)
            else:
                batch.put(k, v)
        self._db.write(batch)

    def scan(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        it = self._db.scan(start=start, end=end, reverse=reverse)
        return iter(it) if limit is None else itertools.islice(it, max(0, limit))

    def export(self, chunk: int = 512) -> Iterator[list[tuple[bytes, bytes]]]:
        snap = self._db.snapshot()
        try:
            buf: list[tuple[bytes, bytes]] = []
            for kv in self._db.scan(snapshot=snap):
                buf.append(kv)
                if len(buf) >= chunk:
                    yield buf
                    buf = []
            if buf:
                yield buf
        finally:
            snap.close()

    def close(self) -> None:
        self._db.close()
