"""MeteredStore: request counts, bytes, latency percentiles and a dollar estimate.

What is counted, per operation kind (``put``, ``get``, ``head``, ``delete``, ``list``; one
``list`` is one LIST request, i.e. one page):

* ``requests``: every call that reached the wrapped store, failed ones included (S3 bills
  a 404 GET or a 412 PUT like any other), and ``errors``: those that raised.
* ``bytes_in`` / ``bytes_out``: payload bytes into the store (successful puts) and out of
  it (successful gets), in AWS's data-transfer sense.
* latency: a :class:`~cloudtier.histogram.LatencyHistogram` per kind (p50/p99 in ms).
* stored bytes: the sizes of the objects this wrapper has seen (put, headed, listed),
  minus those it has deleted or found missing. It does not list the bucket by itself, so
  pre-existing objects count once something lists or heads them.

Cost model (:class:`PriceTable`, S3 Standard and EBS gp3 us-east-1 list prices by default;
:mod:`cloudtier.cost_model` prices whole data sets, tiered against all-local, with it):
``requests`` cost = PUT-class (put, list) count x price/1000 + GET-class (get, head)
count x price/1000 + DELETE count x price/1000 (S3: free) + bytes out x transfer price.
``storage_per_month`` = stored GiB x price per GB-month (AWS bills storage in binary GB).
``monthly_estimate`` = the request cost so far scaled from the elapsed time to a month
of 730 hours (AWS's billing month) plus ``storage_per_month``; it assumes the observed
request rate continues, so measure a steady state (``reset()`` after warm-up).

Place it inside a ``RetryingStore`` (as ``open_store`` does) to meter every attempt, which is
what S3 bills, or outside to meter logical calls.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from cloudtier.errors import ClosedError, InvalidKeyError, NotFoundError, StoreError
from cloudtier.histogram import LatencyHistogram
from cloudtier.store import BytesLike, ListPage, ObjectInfo, ObjectStore, StoreWrapper

__all__ = ["PriceTable", "S3_STANDARD", "MeteredStore", "OPS", "SECONDS_PER_MONTH"]

_T = TypeVar("_T")

#: The operation kinds, in report order.
OPS = ("put", "get", "head", "delete", "list")
#: AWS prices monthly resources over 730 hours (365 days x 24 h / 12).
SECONDS_PER_MONTH = 730 * 3600
_GIB = 2**30


@dataclasses.dataclass(frozen=True)
class PriceTable:
    """Dollar prices of an object store, and of the provisioned SSD it is weighed
    against. Defaults: S3 Standard and EBS gp3, us-east-1 list prices."""

    name: str = "S3 Standard (us-east-1)"
    put_per_1000: float = 0.005  #: PUT, COPY, POST and LIST requests
    get_per_1000: float = 0.0004  #: GET, HEAD and other requests
    delete_per_1000: float = 0.0  #: DELETE requests are free on S3
    storage_gb_month: float = 0.023  #: first 50 TB tier, per GiB-month
    transfer_out_gb: float = 0.0  #: in-region transfer is free ($0.09/GB to the internet)
    #: Local disk, for what the same bytes cost on a machine's own SSD: EBS gp3, per
    #: provisioned GiB-month (its baseline 3,000 IOPS and 125 MB/s included).
    ssd_name: str = "EBS gp3 (us-east-1)"
    ssd_gb_month: float = 0.08

    def request_cost(self, requests: dict[str, int]) -> float:
        """Dollars for the given request counts by operation kind."""
        put_class = requests.get("put", 0) + requests.get("list", 0)
        get_class = requests.get("get", 0) + requests.get("head", 0)
        return (
            put_class * self.put_per_1000
            + get_class * self.get_per_1000
            + requests.get("delete", 0) * self.delete_per_1000
        ) / 1000.0


#: The default price table.
S3_STANDARD = PriceTable()


class MeteredStore(StoreWrapper):
    """Meters every call to ``inner``; :meth:`snapshot` reports. Thread-safe.

    ``clock`` (seconds, monotonic) times calls and the elapsed period; injectable for tests.
    """

    def __init__(
        self,
        inner: ObjectStore,
        prices: PriceTable = S3_STANDARD,
        *,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(inner)
        self.prices = prices
        self._clock = clock
        self._lock = threading.Lock()
        self._sizes: dict[str, int] = {}  # key -> size, for the storage estimate
        self.reset()

    def reset(self) -> None:
        """Zero the counters and restart the period; known object sizes are kept."""
        with self._lock:
            self._started = self._clock()
            self._requests = dict.fromkeys(OPS, 0)
            self._errors = dict.fromkeys(OPS, 0)
            self._latency = {op: LatencyHistogram() for op in OPS}
            self._bytes_in = 0
            self._bytes_out = 0

    # --- ObjectStore ------------------------------------------------------------------

    def put(
        self,
        key: str,
        data: BytesLike,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
    ) -> str:
        etag = self._timed(
            "put",
            key,
            lambda: self.inner.put(key, data, if_none_match=if_none_match, if_match=if_match),
        )
        with self._lock:
            self._bytes_in += len(data)
            self._sizes[key] = len(data)
        return etag

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        data = self._timed("get", key, lambda: self.inner.get(key, start, end))
        with self._lock:
            self._bytes_out += len(data)
        return data

    def head(self, key: str) -> ObjectInfo:
        info = self._timed("head", key, lambda: self.inner.head(key))
        with self._lock:
            self._sizes[key] = info.size
        return info

    def delete(self, key: str) -> None:
        self._timed("delete", key, lambda: self.inner.delete(key))
        with self._lock:
            self._sizes.pop(key, None)

    def list_page(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> ListPage:
        page = self._timed(
            "list", None, lambda: self.inner.list_page(prefix, start_after=start_after, limit=limit)
        )
        with self._lock:
            for info in page.objects:
                self._sizes[info.key] = info.size
        return page

    # --- reporting --------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """A plain, JSON-serialisable dict of everything measured since the last reset.

        Keys: ``elapsed_s``, ``requests`` and ``errors`` ({op: count}), ``bytes_in``,
        ``bytes_out``, ``latency_ms`` ({op: {count, mean, p50, p99, max}}),
        ``stored_objects``, ``stored_bytes``, ``prices`` (the table), and ``cost_usd``:
        ``requests`` (so far), ``transfer`` (so far), ``storage_per_month``,
        ``requests_per_month`` (extrapolated) and ``monthly_estimate`` (their sum).
        """
        with self._lock:
            elapsed = max(self._clock() - self._started, 0.0)
            requests = dict(self._requests)
            stored_bytes = sum(self._sizes.values())
            snap: dict[str, Any] = {
                "elapsed_s": elapsed,
                "requests": requests,
                "errors": dict(self._errors),
                "bytes_in": self._bytes_in,
                "bytes_out": self._bytes_out,
                "latency_ms": {op: h.summary_ms() for op, h in self._latency.items()},
                "stored_objects": len(self._sizes),
                "stored_bytes": stored_bytes,
                "prices": dataclasses.asdict(self.prices),
            }
            bytes_out = self._bytes_out
        p = self.prices
        request_cost = p.request_cost(requests)
        transfer_cost = bytes_out / _GIB * p.transfer_out_gb
        storage_month = stored_bytes / _GIB * p.storage_gb_month
        # Scale the period's request and transfer spend to a month; none without a period.
        scale = SECONDS_PER_MONTH / elapsed if elapsed > 0 else 0.0
        requests_month = (request_cost + transfer_cost) * scale
        snap["cost_usd"] = {
            "requests": request_cost,
            "transfer": transfer_cost,
            "storage_per_month": storage_month,
            "requests_per_month": requests_month,
            "monthly_estimate": requests_month + storage_month,
        }
        return snap

    # --- helpers ----------------------------------------------------------------------

    def _timed(self, op: str, key: str | None, call: Callable[[], _T]) -> _T:
        t0 = self._clock()
        try:
            result = call()
        except (InvalidKeyError, ClosedError):
            raise  # refused before any request was sent: nothing to bill
        except StoreError as e:
            with self._lock:
                self._count(op, self._clock() - t0, error=True)
                if isinstance(e, NotFoundError) and key is not None:
                    self._sizes.pop(key, None)
            raise
        with self._lock:
            self._count(op, self._clock() - t0, error=False)
        return result

    def _count(self, op: str, seconds: float, *, error: bool) -> None:
        """Record one request. Caller holds ``self._lock``."""
        self._requests[op] += 1
        if error:
            self._errors[op] += 1
        self._latency[op].record(seconds)
