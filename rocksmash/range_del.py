"""Range tombstones: what ``delete_range(start, end)`` leaves in the LSM tree.

A tombstone ``(start, end, seq)`` deletes the half-open key range ``[start, end)`` as of
sequence number ``seq``: a reader at sequence number ``R >= seq`` does not see any version
``(key, s)`` with ``start <= key < end`` and ``s < seq``. Readers below ``seq`` (older
snapshots) are not affected. Tombstones live beside the point entries of a source (a
memtable's ``ranges``, a table's ``range_deletions`` property), never among them.

The invariant that makes them cheap to apply: a table's key range (``smallest``,
``largest`` in the manifest) covers its tombstones, so compactions pick up and merge the
tables under a tombstone exactly as they do for point entries. Hence, for any key, every
entry that covers it (a version or a tombstone) in a newer source is newer than every one
in an older source. A tombstone that covers a key in one source therefore hides every
version of that key in all older sources; only inside its own source do sequence numbers
have to be compared.

A tombstone's ``end`` is exclusive, but a table's ``largest`` is inclusive: :func:`upper`
turns one into the other, exactly when ``end`` is some key's successor (``k + b"\\0"``,
which is how compaction cuts tombstones between output tables), otherwise as an
over-approximation (``end`` itself), which only makes a table's range look one key wider.

Lists of tombstones are sorted by ``start`` and never mutated in place (a reader may be
iterating one while a writer replaces it).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Iterable, Sequence

__all__ = ["Tombstone", "RangeEnd", "covering_seq", "visible", "upper", "bounds",
           "union", "filter_chunk", "clip", "to_props", "from_props"]

#: ``(start, end, seq)``: keys in ``[start, end)`` deleted as of ``seq``.
Tombstone = tuple[bytes, bytes, int]


class RangeEnd:
    """The value slot of a ``delete_range`` operation in ``WriteBatch.ops``: the op is
    ``(start, RangeEnd(end))``. Not bytes and not None, so no code that handles puts and
    deletes can take it for either."""

    __slots__ = ("end",)

    def __init__(self, end: bytes) -> None:
        self.end = end

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RangeEnd) and other.end == self.end

    def __hash__(self) -> int:
        return hash(self.end)

    def __repr__(self) -> str:
        return f"RangeEnd({self.end!r})"


def covering_seq(tombs: Sequence[Tombstone], key: bytes, read_seq: int) -> int:
    """The highest sequence number ``<= read_seq`` of the tombstones covering ``key``
    (0: none). A version of ``key`` with a lower sequence number is deleted."""
    best = 0
    for start, end, seq in tombs:
        if start > key:
            break
        if key < end and best < seq <= read_seq:
            best = seq
    return best


def visible(tombs: Sequence[Tombstone], read_seq: int) -> list[Tombstone]:
    """The tombstones a reader at ``read_seq`` sees."""
    return [t for t in tombs if t[2] <= read_seq]


def upper(end: bytes) -> bytes:
    """An inclusive upper bound of ``[.., end)``: exact when ``end`` is ``k + b"\\0"``."""
    return end[:-1] if end.endswith(b"\x00") else end


def bounds(tombs: Iterable[Tombstone]) -> tuple[bytes, bytes] | None:
    """``(smallest, largest)`` keys the tombstones cover, inclusive (None: no tombstone)."""
    tombs = list(tombs)
    if not tombs:
        return None
    return min(t[0] for t in tombs), max(upper(t[1]) for t in tombs)


def union(tombs: Iterable[Tombstone]) -> tuple[list[bytes], list[bytes]]:
    """The union of the ranges as disjoint, ascending intervals: ``(starts, ends)``."""
    starts: list[bytes] = []
    ends: list[bytes] = []
    for start, end, _ in sorted(tombs):
        if starts and start <= ends[-1]:
            if end > ends[-1]:
                ends[-1] = end
        else:
            starts.append(start)
            ends.append(end)
    return starts, ends


def filter_chunk(keys: Sequence[bytes], values: Sequence[bytes | None], starts: list[bytes],
                 ends: list[bytes]) -> tuple[Sequence[bytes], Sequence[bytes | None]]:
    """The entries of a chunk whose keys are outside the intervals ``(starts, ends)``."""
    if not keys:
        return keys, values
    i = bisect_right(starts, keys[0]) - 1
    if (i < 0 or keys[0] >= ends[i]) and (i + 1 == len(starts) or keys[-1] < starts[i + 1]):
        return keys, values  # the whole chunk lies between two intervals: the common case
    out_k: list[bytes] = []
    out_v: list[bytes | None] = []
    for key, value in zip(keys, values):
        i = bisect_right(starts, key) - 1
        if i < 0 or key >= ends[i]:
            out_k.append(key)
            out_v.append(value)
    return out_k, out_v


def clip(tombs: Iterable[Tombstone], lo: bytes | None, hi: bytes | None) -> list[Tombstone]:
    """The parts of the tombstones inside ``[lo, hi)`` (None: unbounded), empty ones dropped."""
    out = []
    for start, end, seq in tombs:
        if lo is not None and start < lo:
            start = lo
        if hi is not None and end > hi:
            end = hi
        if start < end:
            out.append((start, end, seq))
    out.sort()
    return out


def to_props(tombs: Iterable[Tombstone]) -> list[list]:
    """The ``range_deletions`` table property: ``[[start hex, end hex, seq], ...]``."""
    return [[s.hex(), e.hex(), seq] for s, e, seq in sorted(tombs)]


def from_props(props: dict) -> list[Tombstone]:
    """Parse the ``range_deletions`` property (absent: none); raises ValueError/TypeError
    on a malformed one (the caller reports it as corruption)."""
    raw = props.get("range_deletions")
    if not raw:
        return []
    out = [(bytes.fromhex(s), bytes.fromhex(e), int(seq)) for s, e, seq in raw]
    out.sort()
    return out
