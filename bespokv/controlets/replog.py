"""The head's (and every forwarding replica's) in-memory log of recent write batches."""

from __future__ import annotations

from bespokv.datalets.base import Op

__all__ = ["ReplicationLog", "Restart"]


class Restart(Exception):
    """The local store was reset (a full copy arrived); streams fed from it must restart."""


def _entry_size(ops: list[Op]) -> int:
    return sum(len(k) + (len(v) if v is not None else 0) + 8 for k, v in ops) + 16


class ReplicationLog:
    """Recent write batches ``(seq, ops)`` with consecutive sequence numbers.

    Holds everything after the lowest pin (so streams in flight never lose entries) plus
    ``retain`` entries more, for replicas that reconnect shortly after.
    """

    def __init__(self, retain: int = 50_000) -> None:
        self.retain = retain
        self._seqs: list[int] = []
        self._ops: list[list[Op]] = []
        self._sizes: list[int] = []
        self._off = 0
        self.last = 0
        self._pins: dict[object, int] = {}

    @property
    def first(self) -> int:
        """Seq of the oldest entry held (``last + 1`` when empty)."""
        return self._seqs[self._off] if self._off < len(self._seqs) else self.last + 1

    def __len__(self) -> int:
        return len(self._seqs) - self._off

    def reset(self, seq: int) -> None:
        self._seqs, self._ops, self._sizes, self._off = [], [], [], 0
        self.last = seq

    def append(self, seq: int, ops: list[Op]) -> None:
        if seq != self.last + 1:
            raise AssertionError(f"log append out of order: {seq} after {self.last}")
        self._seqs.append(seq)
        self._ops.append(ops)
        self._sizes.append(_entry_size(ops))
        self.last = seq
        if len(self._seqs) - self._off > self.retain + 1024:
            self.trim()

    def covers(self, after: int) -> bool:
        """True when every entry after ``after`` (up to ``last``) is held."""
        return self.first - 1 <= after <= self.last

    def after(self, after: int, max_bytes: int) -> list[tuple[int, list[Op]]]:
        """Entries with seq > ``after``, up to about ``max_bytes`` (at least one)."""
        if after >= self.last:
            return []
        if not self.covers(after):
            raise Restart(f"log no longer holds entries after {after} (first is {self.first})")
        i = self._off + (after + 1 - self.first)
        out: list[tuple[int, list[Op]]] = []
        size = 0
        n = len(self._seqs)
        while i < n:
            out.append((self._seqs[i], self._ops[i]))
            size += self._sizes[i]
            i += 1
            if size >= max_bytes:
                break
        return out

    def pin(self, owner: object, seq: int) -> None:
        self._pins[owner] = seq

    def unpin(self, owner: object) -> None:
        self._pins.pop(owner, None)

    def trim(self) -> None:
        floor = min(self._pins.values(), default=self.last)
        keep_from = min(floor, self.last) - self.retain + 1
        drop = 0
        n = len(self._seqs)
        while self._off + drop < n and self._seqs[self._off + drop] < keep_from:
            drop += 1
        self._off += drop
        if self._off > 4096 and self._off * 2 > n:
            del self._seqs[: self._off], self._ops[: self._off], self._sizes[: self._off]
            self._off = 0
