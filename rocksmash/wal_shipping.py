"""WAL shipping: the extended WAL, copied to the object store as it is written.

The writer's local WAL segments are shipped to ``wal/<N>`` objects (cloud.WalObject),
numbered consecutively from this writer's fence, each holding a byte range of one
segment's records exactly as they are in the file. With the backups of the local tables
(in the mirror), they let a writer whose local disk is gone reopen from the bucket with
every write the mode promises (docs/cloud.md, "WAL shipping"):

- ``"sync"``: a ``sync=True`` write returns only once its record is in a WAL object
  (group commit: one PUT covers every writer waiting). Other writes ship as in
  ``"interval"``.
- ``"interval"``: new records are shipped at least every ``wal_ship_interval``, in one
  PUT per interval (none when nothing was written).
- ``"sealed"``: a segment is shipped once its memtable is sealed.

Shipments go out in order, one at a time, so "everything up to (segment, offset) is in
the bucket" is one position. A failed shipment is retried with exactly the same bytes
(so a PUT that landed although it failed is recognised as this writer's own); writes go
on meanwhile, and the lag is in :meth:`WalShipper.stats`. A shipment refused because a
newer writer's fence holds its number (FencedError) or by the store for good stops the
database's writes through ``on_fatal``.

The shipper reads the segment through its own file descriptor, opened when the segment is
created, so a flush may delete the file before its last bytes are shipped.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from cloudtier import S3_STANDARD
from cloudtier.metered import SECONDS_PER_MONTH

from .cloud import CloudTier
from .errors import Error, FencedError, UnavailableError
from .wal import HEADER_SIZE, WalWriter

__all__ = ["SHIPPING_MODES", "WalShipper", "monthly_put_cost"]

SHIPPING_MODES = ("off", "sealed", "interval", "sync")
#: Bytes of records per WAL object at most (a bound on the shipper's memory).
MAX_OBJECT_BYTES = 16 << 20


def monthly_put_cost(puts_per_second: float) -> float:
    """Dollars a month for a steady PUT rate at S3 Standard's list price."""
    return puts_per_second * SECONDS_PER_MONTH * S3_STANDARD.put_per_1000 / 1000


@dataclass
class _Segment:
    wal: WalWriter
    fd: int
    shipped: int = HEADER_SIZE
    #: The segment's final size once its memtable is sealed (no more appends).
    sealed_end: int | None = None
    #: The end of a shipment that failed: it is retried with exactly these bytes.
    retry_end: int | None = None

    @property
    def end(self) -> int:
        return self.wal.offset if self.sealed_end is None else self.sealed_end


class WalShipper:
    """Ships one database's WAL segments (see the module docstring). Thread-safe.

    Register every segment with :meth:`add_segment` when it is created (in order) and
    :meth:`seal` it when its memtable is sealed.
    """

    def __init__(self, cloud: CloudTier, mode: str, interval: float,
                 on_fatal: Callable[[BaseException], None], objects: dict[int, int]) -> None:
        assert mode in SHIPPING_MODES[1:]
        self.mode = mode
        self.interval = interval
        self._cloud = cloud
        self._on_fatal = on_fatal
        self._cv = threading.Condition()
        self._segments: deque[_Segment] = deque()
        #: Everything up to (segment number, offset) is in the bucket.
        self._position = (0, 0)
        self._waiters = 0
        self._failures = 0
        self._last_error: Error | None = None
        self._fatal: BaseException | None = None
        self._stopping = False
        self._started = time.monotonic()
        #: WAL data objects in the bucket that this writer knows of: number -> segment.
        self.objects = dict(objects)
        #: Segments below this are in tables a published mirror names: not needed.
        self._covered_below = 0
        self._shipped_objects = 0
        self._shipped_bytes = 0
        #: When the oldest record not yet shipped was first seen (None: nothing waits).
        self._unshipped_since: float | None = None
        self._thread = threading.Thread(target=self._loop, name="rocksmash-wal-shipping",
                                        daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ the writer's side

    def add_segment(self, wal: WalWriter) -> None:
        """A new live segment (after every earlier one)."""
        fd = os.open(wal.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        with self._cv:
            self._segments.append(_Segment(wal, fd))

    def seal(self, wal: WalWriter) -> None:
        """``wal``'s memtable is sealed: its segment is complete (write lock held)."""
        with self._cv:
            for s in self._segments:
                if s.wal is wal:
                    s.sealed_end = wal.offset
            self._cv.notify_all()

    def wait(self, segment: int, end: int, timeout: float) -> None:
        """Block until ``segment`` is shipped up to ``end`` (``sync`` mode).

        UnavailableError if a shipment covering it fails (the write is applied locally and
        may still be shipped later; its durability is not confirmed) or after
        ``timeout``; FencedError if this writer was fenced.
        """
        target = (segment, end)
        deadline = time.monotonic() + timeout
        with self._cv:
            failures = self._failures
            self._waiters += 1
            self._cv.notify_all()
            try:
                while self._position < target:
                    if self._fatal is not None:
                        raise _fatal_error(self._fatal)
                    if self._failures != failures:
                        raise UnavailableError(
                            f"the write is applied locally but its WAL shipment to the "
                            f"object store failed ({self._last_error}); it is retried in "
                            f"the background")
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise UnavailableError(
                            f"the write is applied locally but its WAL shipment did not "
                            f"complete within {timeout:g} s")
                    self._cv.wait(left)
            finally:
                self._waiters -= 1

    def stop(self, timeout: float) -> None:
        """Ship what is left (bounded by ``timeout``), then stop the thread."""
        with self._cv:
            for s in self._segments:
                if s.sealed_end is None:
                    s.sealed_end = s.wal.offset
            self._stopping = True
            self._cv.notify_all()
        self._thread.join(timeout)
        with self._cv:
            self._fatal = self._fatal or Error("WAL shipping stopped")
            self._cv.notify_all()
            if self._thread.is_alive():
                return  # stuck in a request: its descriptors stay open until it ends
            for s in self._segments:
                os.close(s.fd)
            self._segments.clear()

    def stats(self) -> dict[str, Any]:
        with self._cv:
            elapsed = max(time.monotonic() - self._started, 1e-9)
            # (in "sealed" mode the live segment is not due, so it is no lag)
            lag = sum(s.end - s.shipped for s in self._segments
                      if self.mode != "sealed" or s.sealed_end is not None)
            oldest = self._unshipped_since
            rate = self._shipped_objects / elapsed
            return {
                "mode": self.mode, "interval": self.interval,
                "objects_shipped": self._shipped_objects,
                "bytes_shipped": self._shipped_bytes,
                "failures": self._failures,
                "last_error": repr(self._last_error) if self._last_error else None,
                "lag_bytes": lag,
                "lag_seconds": time.monotonic() - oldest if lag and oldest else 0.0,
                "objects_in_bucket": len(self.objects),
                "puts_per_second": rate,
                "monthly_put_cost_usd": monthly_put_cost(rate),
            }

    # ------------------------------------------------------------ the shipping thread

    def _next_chunk(self) -> tuple[_Segment, int] | None:
        """The oldest unshipped range: its segment and end (``_cv`` held)."""
        while self._segments:
            s = self._segments[0]
            done = s.sealed_end is not None and s.shipped >= s.sealed_end
            if done or (s.wal.number < self._covered_below and s.retry_end is None):
                # complete and shipped, or in tables the bucket has: nothing to ship
                os.close(s.fd)
                self._segments.popleft()
                self._position = max(self._position, (s.wal.number, s.end))
                self._cv.notify_all()
                continue
            if s.retry_end is not None:
                return s, s.retry_end
            if self.mode == "sealed" and s.sealed_end is None:
                return None
            end = min(s.end, s.shipped + MAX_OBJECT_BYTES)
            return (s, end) if end > s.shipped else None
        return None

    def _due(self, last_ship: float) -> bool:
        """Whether to ship now (``_cv`` held)."""
        if self._stopping or self._waiters:
            return True
        if self.mode == "sealed":
            return any(s.sealed_end is not None for s in self._segments)
        return time.monotonic() - last_ship >= self.interval

    def _wait_s(self, pending: bool, last_ship: float, delay: float) -> float | None:
        """How long the shipping thread sleeps before it looks again (None: until
        signalled); never 0, so an idle shipper does not spin.

        Writers do not signal each append (that would cost every write), so the interval
        modes look again when the interval since the last shipment is up, or, with
        nothing to ship (``pending`` False), one interval from now: an idle shipper that
        computed "the interval is already up" would wait 0 s and spin, holding the GIL
        against every reader thread (it did: readers' object-store GETs took twice the
        round trip). Sealing signals, so "sealed" waits for that."""
        if delay > 0:
            return delay
        if self.mode == "sealed":
            return None
        left = self.interval - (time.monotonic() - last_ship)
        return left if pending and left > 0 else self.interval

    def _loop(self) -> None:
        last_ship = 0.0
        delay = 0.0  # backoff after a failure
        while True:
            with self._cv:
                while True:
                    chunk = self._next_chunk()
                    if chunk is not None and self._unshipped_since is None:
                        self._unshipped_since = time.monotonic()
                    if chunk is None and self._stopping:
                        return
                    if chunk is not None and self._due(last_ship) and delay <= 0:
                        break
                    self._cv.wait(self._wait_s(chunk is not None, last_ship, delay))
                    delay = 0.0
                seg, end = chunk
            last_ship = time.monotonic()
            try:
                self._ship(seg, end)
                delay = 0.0
            except Error as e:
                seg.retry_end = end
                if isinstance(e, FencedError) or not e.retriable:
                    with self._cv:
                        self._fatal = e
                        self._last_error = e
                        self._cv.notify_all()
                    self._on_fatal(e)
                    return
                with self._cv:
                    self._failures += 1
                    self._last_error = e
                    self._cv.notify_all()
                    if self._stopping:
                        return  # close does not wait out an outage: the local WAL has it
                delay = min(max(delay * 2, 0.1), 5.0)

    def _ship(self, seg: _Segment, end: int) -> None:
        start = seg.shipped
        data = os.pread(seg.fd, end - start, start)
        if len(data) != end - start:
            raise Error(f"WAL segment {seg.wal.number} is shorter than written "
                        f"({start + len(data)} < {end} bytes)")
        w = seg.wal
        header = {"segment": w.number, "table": w.table_number, "first_seq": w.first_seq,
                  "offset": start, "end": end}
        n = self._cloud.ship_wal(header, data)
        with self._cv:
            seg.shipped = end
            seg.retry_end = None
            self._position = (w.number, end)
            # (One retired while it was in flight is deleted by the next collect, once it is
            # no longer this writer's last: CloudTier.delete_wal.)
            self.objects[n] = w.number
            self._shipped_objects += 1
            self._shipped_bytes += len(data)
            self._unshipped_since = None
            self._cv.notify_all()

    def covered(self, log_number: int) -> list[int]:
        """A published mirror has every write of the segments before ``log_number`` in
        its tables: they need no more shipping. Returns the numbers of their WAL objects,
        for the caller to delete (then :meth:`forget`)."""
        with self._cv:
            self._covered_below = max(self._covered_below, log_number)
            self._cv.notify_all()
            return [n for n, s in self.objects.items() if s < log_number]

    def forget(self, numbers: list[int]) -> None:
        with self._cv:
            for n in numbers:
                self.objects.pop(n, None)


def _fatal_error(e: BaseException) -> Error:
    if isinstance(e, FencedError):
        return FencedError(str(e))
    return e if isinstance(e, Error) else Error(str(e))
