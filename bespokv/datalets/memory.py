"""An ordered in-memory datalet (a sorted dict), with a bounded change feed.

Volatile: a restarted node comes back empty and its controlet copies the shard from a
peer. The change feed keeps the last ``feed_entries`` write batches so
``changes_since`` can serve a position that recent.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence

from sortedcontainers import SortedDict

from bespokv.datalets.base import Datalet, Op, check_key

__all__ = ["MemoryDatalet"]


class MemoryDatalet(Datalet):
    kind = "memory"
    persistent = False
    blocking = False  # a sorted dict in this process: a thread hop would cost more than the call

    def __init__(self, feed_entries: int = 10_000) -> None:
        self._d: SortedDict = SortedDict()
        self._pos = 0
        self._feed: deque[tuple[int, list[Op]]] = deque(maxlen=max(0, int(feed_entries)))

    def get(self, key: bytes) -> bytes | None:
        return self._d.get(key)

    def multi_get(self, keys: Sequence[bytes]) -> list[bytes | None]:
        g = self._d.get
        return [g(k) for k in keys]

    def write(self, ops: Sequence[Op]) -> None:
        ops = list(ops)
        for k, v in ops:  # validate all before applying any: atomic
            check_key(k)
            if v is not None and type(v) is not bytes:
                raise TypeError(f"values must be bytes, not {type(v).__name__}")
        d = self._d
        for k, v in ops:
            if v is None:
                d.pop(k, None)
            else:
                d[k] = v
        self._pos += 1
        if self._feed.maxlen:
            self._feed.append((self._pos, ops))

    def scan(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        keys = self._d.irange(start, end, inclusive=(True, False), reverse=reverse)
        d = self._d
        n = 0
        for k in keys:
            if limit is not None and n >= limit:
                return
            # The dict may change between yields (a controlet interleaves writes with a
            # long export); skip keys deleted meanwhile.
            v = d.get(k)
            if v is None:
                continue
            n += 1
            yield k, v

    def export(self, chunk: int = 512) -> Iterator[list[tuple[bytes, bytes]]]:
        # A point-in-time copy of the keys; values are read as the copy is streamed.
        keys = list(self._d.keys())
        d = self._d
        for i in range(0, len(keys), chunk):
            out = []
            for k in keys[i : i + chunk]:
                v = d.get(k)
                if v is not None:
                    out.append((k, v))
            if out:
                yield out

    def position(self) -> int | None:
        return self._pos

    def changes_since(self, position: int) -> Iterator[tuple[int, list[Op]]] | None:
        if position == self._pos:
            return iter(())
        if not self._feed or position > self._pos or position < self._feed[0][0] - 1:
            return None
        return iter([(p, ops) for p, ops in self._feed if p > position])

    def clear(self) -> None:
        self._d.clear()
        self._pos += 1
        self._feed.clear()

    def stats(self) -> dict[str, float]:
        return {"keys": float(len(self._d))}

    def __len__(self) -> int:
        return len(self._d)
