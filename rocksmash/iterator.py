"""DBIterator: what a scan returns. A Python iterator over a range, with seek.

An iterator reads at one sequence number (its snapshot: an implicit one it owns, or the
caller's) within the range ``[start, end)`` it was created with, in one direction. Each
position is one merge over the sources (``DB._scan``); ``seek`` ends the current merge and
starts a new one at the target, at the same sequence number, so what it sees does not
change.

Seek semantics (as RocksDB's, and rocksdict's ``seek``/``seek_for_prev``; decision 0010):

* ``seek(key)`` in a forward iterator: the next item is the first key ``>= key``; in a
  reverse iterator: the first key ``<= key`` (RocksDB's ``SeekForPrev``). plyvel's
  reverse ``seek`` differs here: there the next item is the last key ``< key``.
* ``seek_to_first()``: the next item is the smallest key of the range; ``seek_to_last()``:
  the largest. Iteration then goes on in the iterator's direction, so in a forward
  iterator ``seek_to_last()`` leaves one item, and in a reverse one ``seek_to_first()``.
* Targets outside the range are clamped to it (as plyvel does): nothing outside
  ``[start, end)`` is ever returned.
* ``limit`` counts from each positioning: after a seek, up to ``limit`` more items.

A ``for`` loop iterates the merge itself (C-level ``itertools.chain``, no Python call per
item). So a seek done *inside* a loop over the same iterator cannot redirect that loop:
the loop raises InvalidArgumentError (after at most the rest of the run of keys it was
in) instead of silently going on. ``next(it)`` always follows seeks; loops started after a
seek start at the new position.

Exhaustion releases the snapshot an iterator made for itself (decision 0010, amended):
once a ``next`` finds nothing left, the iterator holds nothing, as after :meth:`close`, so
an exhausted iterator kept in a variable neither keeps old versions from compaction nor
holds a bucket reader's view from following the writer (issue 27). A seek after that goes
on at the same sequence number if nothing was written since (it then sees the same
state); otherwise it raises ClosedError. To seek back over one state after writes, scan
with ``snapshot=`` (the caller's snapshot is never released by the iterator).

Thread-safety: an iterator is used by one thread at a time (like any Python iterator);
many iterators may run at once beside writers.
"""

from __future__ import annotations

from functools import partial
from itertools import chain, islice
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Callable, Iterator

from .errors import ClosedError, InvalidArgumentError
from .keys import BytesLike, as_bytes

if TYPE_CHECKING:
    from .db import DB, Snapshot

__all__ = ["DBIterator", "KEY", "VALUE"]

#: Projections of an item: ``keys_only`` iteration, and ``DB.values``.
KEY = itemgetter(0)
VALUE = itemgetter(1)

_SEEK_IN_LOOP = ("the iterator was repositioned (seek) while a for loop was iterating it; "
                 "to seek while iterating, call next(it) in a while loop")
_RELEASED = ("the iterator released its snapshot when it was exhausted, and the database has "
             "changed since; scan again, or scan with snapshot= to seek back over one state")


#: An exhausted iterator (it stays exhausted, so one serves every closed or empty position).
_EMPTY: Iterator[Any] = iter(())


def _hold(_snapshot: object) -> None:
    """The merge's end callback: it only holds the snapshot alive while the merge runs."""


def _guard(superseded: list[bool], stop: Callable[[], None] | None,
           snap: "Snapshot | None") -> Iterator[Any]:
    """Chained after a merge. A loop that reaches it after a seek raises (see module doc);
    otherwise the iteration is exhausted: end the merge (a ``limit`` leaves it suspended)
    and release the iterator's own snapshot ``snap`` (None: the caller's). The release is
    deferred (applied at the next snapshot, flush or swap): it takes no lock here."""
    if superseded[0]:
        raise InvalidArgumentError(_SEEK_IN_LOOP)
    if stop is not None:
        stop()
    if snap is not None:
        snap._release_later()
    yield from ()


class DBIterator:
    """Iterator of ``(key, value)`` from :meth:`DB.scan` (keys alone with ``keys_only``).

    Use as a context manager or call :meth:`close`; it holds its snapshot (an implicit one
    unless given one) until exhausted, closed or garbage collected. Exhausted, it can
    still :meth:`seek` back while nothing was written since (see :mod:`rocksmash.iterator`
    for the seek semantics and what exhaustion releases).
    """

    __slots__ = ("_db", "_seq", "_snap", "_owns_snap", "_start", "_end", "_reverse",
                 "_limit", "_project", "_it", "_stop", "_superseded", "_closed",
                 "__weakref__")

    def __init__(self, db: "DB", snap: "Snapshot", owns_snap: bool, start: bytes | None,
                 end: bytes | None, reverse: bool, limit: int | None,
                 project: Callable[[tuple[bytes, bytes]], Any] | None) -> None:
        self._db = db
        self._seq = snap.seq
        self._snap = snap
        self._owns_snap = owns_snap
        self._start, self._end, self._reverse = start, end, reverse
        self._limit, self._project = limit, project
        self._it: Iterator[Any] = _EMPTY
        self._stop: Callable[[], None] | None = None
        self._superseded = [False]
        self._closed = False
        self._position(start, end)

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[Any]:
        # A for-loop iterates the merge itself: no Python-level call per item.
        return self._it

    def __next__(self) -> Any:
        if self._db._closed:
            raise self._db._closed_error()
        return next(self._it)

    # ------------------------------------------------------------------ seeking

    def seek(self, key: BytesLike) -> None:
        """Continue at ``key``: forward, the first key ``>= key``; reverse, the first key
        ``<= key``. A key outside the range is clamped to it."""
        key = as_bytes(key, "key")
        self._check_usable()
        if self._reverse:
            hi = key + b"\x00"  # the smallest key above ``key``: keys <= key remain
            if self._end is not None and self._end < hi:
                hi = self._end
            self._position(self._start, hi)
        else:
            lo = key if self._start is None or key > self._start else self._start
            self._position(lo, self._end)

    def seek_to_first(self) -> None:
        """Continue at the smallest key of the range (a reverse iterator then has just
        that one item left)."""
        self._check_usable()
        if not self._reverse:
            self._position(self._start, self._end)
            return
        first = self._edge(smallest=True)
        self._position(self._start, None if first is None else first + b"\x00", first is None)

    def seek_to_last(self) -> None:
        """Continue at the largest key of the range (a forward iterator then has just that
        one item left)."""
        self._check_usable()
        if self._reverse:
            self._position(self._start, self._end)
            return
        last = self._edge(smallest=False)
        self._position(last, self._end, last is None)

    def _edge(self, smallest: bool) -> bytes | None:
        """The smallest (or largest) key of the range at this iterator's sequence number."""
        it, stop = self._db._scan(self._start, self._end, not smallest, self._seq, None)
        try:
            item = next(it, None)
        finally:
            stop()
        return None if item is None else item[0]

    def _position(self, lo: bytes | None, hi: bytes | None, empty: bool = False) -> None:
        """End the current merge; start one over ``[lo, hi)`` (a part of the range)."""
        if self._stop is not None:
            self._end_merge(superseded=True)
        self._superseded[0] = True
        self._superseded = superseded = [False]
        own = self._snap if self._owns_snap else None
        if empty or self._limit == 0 or (lo is not None and hi is not None and lo >= hi):
            self._it = _guard(superseded, None, own)
            return
        release = partial(_hold, own) if own is not None else None
        it, self._stop = self._db._scan(lo, hi, self._reverse, self._seq, release)
        if self._limit is not None:
            it = islice(it, self._limit)
        if self._project is not None:
            it = map(self._project, it)
        self._it = chain(it, _guard(superseded, self._stop, own))

    def _end_merge(self, superseded: bool) -> None:
        self._superseded[0] = superseded
        stop, self._stop = self._stop, None
        if stop is not None:
            stop()

    def _check_usable(self) -> None:
        if self._closed:
            raise ClosedError("iterator is closed")
        if self._db._closed:
            raise self._db._closed_error()
        if self._snap._closed:
            snap = self._db._resume_snapshot(self._seq) if self._owns_snap else None
            if snap is None:
                raise ClosedError(_RELEASED if self._owns_snap else
                                  "the iterator's snapshot is closed")
            self._snap = snap  # released at exhaustion, and nothing written since

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Stop the iteration (later ``next`` raises StopIteration, ``seek`` ClosedError)
        and release its snapshot and table readers."""
        self._closed = True
        if self._stop is not None:
            self._end_merge(superseded=False)
        self._it = _EMPTY
        if self._db._closed:
            return
        if self._owns_snap:
            self._snap.close()
        else:
            self._db._release_snapshot(None)  # apply deferred releases now

    def __enter__(self) -> "DBIterator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
