"""Turning raw phase records into the numbers a report shows.

* Latency: per operation type and over all operations, from an HdrHistogram (3
  significant digits, 1 ns .. 1 h). The driver keeps raw nanosecond latencies in an
  array; :func:`latency_histogram` rounds each down to its HDR bucket with numpy and
  records each distinct bucket once with its count, which yields exactly the histogram
  that recording every value would, at a fraction of the cost.
* Throughput: items / wall time of the phase (first client start to last client end),
  and per-second buckets of completed items ("throughput over time").
* Resources: peak RSS (see :class:`RssSampler`), bytes on disk (:func:`disk_usage`).
* Object-store cost: :func:`dollar_estimate` prices request counts and stored bytes with
  cloudtier's S3 price table when it is importable, else the same list prices below.
"""

from __future__ import annotations

import os
import resource
import threading
from pathlib import Path
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

from bench.driver import PhaseRecord
from bench.workloads import OP_NAMES

__all__ = [
    "latency_histogram",
    "latency_summary",
    "percentiles_from_encoded",
    "merge_encoded",
    "cdf_from_encoded",
    "summarize_phase",
    "per_second",
    "disk_usage",
    "RssSampler",
    "tree_memory",
    "self_peak_rss",
    "cpu_seconds",
    "load_average",
    "dollar_estimate",
    "hit_ratios",
    "counter_delta",
]

_HDR_LOWEST = 1
_HDR_HIGHEST = 3600 * 10**9
_HDR_DIGITS = 3
_HDR_KEEP_BITS = 11  # 3 significant decimal digits -> 2048 sub-buckets -> 11 bits
_GIB = 2**30
_CHUNK = 1 << 17


def _bucketed(v: np.ndarray) -> np.ndarray:
    """Round each latency down to the lowest value of its HDR bucket (top 11 bits kept)."""
    v = np.clip(v, _HDR_LOWEST, _HDR_HIGHEST)
    _, exp = np.frexp(v.astype(np.float64))
    shift = np.maximum(exp - _HDR_KEEP_BITS, 0).astype(np.int64)
    return (v >> shift) << shift


def _record(h: HdrHistogram, latencies_ns: np.ndarray) -> None:
    values, counts = np.unique(_bucketed(latencies_ns.astype(np.int64, copy=False)), return_counts=True)
    for value, count in zip(values.tolist(), counts.tolist()):
        h.record_value(value, count)


def latency_histogram(latencies_ns: np.ndarray) -> HdrHistogram:
    """An HdrHistogram of the given latencies (ns); values are clamped to 1 ns .. 1 h.

    Works in chunks of 128k values, so the temporary arrays stay a few MiB however
    long the phase was (the trial's peak RSS should be the system's, not this).
    """
    h = HdrHistogram(_HDR_LOWEST, _HDR_HIGHEST, _HDR_DIGITS)
    for lo in range(0, latencies_ns.size, _CHUNK):
        _record(h, latencies_ns[lo:lo + _CHUNK])
    return h


def _histograms_by_code(latencies_ns: np.ndarray, codes: np.ndarray, n_codes: int) -> list[HdrHistogram]:
    hists = [HdrHistogram(_HDR_LOWEST, _HDR_HIGHEST, _HDR_DIGITS) for _ in range(n_codes)]
    for lo in range(0, latencies_ns.size, _CHUNK):
        lat, cod = latencies_ns[lo:lo + _CHUNK], codes[lo:lo + _CHUNK]
        for code in np.unique(cod).tolist():
            _record(hists[code], lat[cod == code])
    return hists


def latency_summary(h: HdrHistogram) -> dict[str, Any]:
    """count, mean, p50/p95/p99/p99.9, max (microseconds) and the encoded histogram."""
    n = h.get_total_count()
    if n == 0:
        return {"count": 0}
    us = lambda ns: ns / 1000.0  # noqa: E731
    return {
        "count": n,
        "mean_us": us(h.get_mean_value()),
        "p50_us": us(h.get_value_at_percentile(50)),
        "p95_us": us(h.get_value_at_percentile(95)),
        "p99_us": us(h.get_value_at_percentile(99)),
        "p999_us": us(h.get_value_at_percentile(99.9)),
        "max_us": us(h.get_max_value()),
        "hdr": h.encode().decode("ascii"),
    }


def _decode(encoded: str) -> HdrHistogram:
    h = HdrHistogram(_HDR_LOWEST, _HDR_HIGHEST, _HDR_DIGITS)
    h.decode_and_add(encoded)
    return h


def percentiles_from_encoded(encoded: str, percentiles: list[float]) -> list[float]:
    """Latencies (µs) at the given percentiles of an encoded histogram."""
    h = _decode(encoded)
    return [h.get_value_at_percentile(p) / 1000.0 for p in percentiles]


def merge_encoded(encoded: list[str]) -> dict[str, Any]:
    """The :func:`latency_summary` of several encoded histograms added together."""
    h = HdrHistogram(_HDR_LOWEST, _HDR_HIGHEST, _HDR_DIGITS)
    for e in encoded:
        h.decode_and_add(e)
    return latency_summary(h)


def cdf_from_encoded(encoded: str) -> tuple[np.ndarray, np.ndarray]:
    """(latency µs, cumulative fraction) points of an encoded histogram, for CDF plots."""
    h = _decode(encoded)
    total = h.get_total_count()
    xs, ys, seen = [], [], 0
    for item in h.get_recorded_iterator():
        seen += item.count_added_in_this_iter_step
        xs.append(h.get_highest_equivalent_value(item.value_iterated_to) / 1000.0)
        ys.append(seen / total)
    return np.array(xs), np.array(ys)


def per_second(ticks: list[tuple[int, int]], start_ns: int, end_ns: int) -> list[float]:
    """Items per second in consecutive one-second buckets from ``start_ns``.

    The last, partial bucket is scaled to a rate by its actual length (dropped if it is
    shorter than 100 ms, where the scaling would be mostly noise).
    """
    if not ticks or end_ns <= start_ns:
        return []
    t = (np.array([a for a, _ in ticks], dtype=np.int64) - start_ns) / 1e9
    n = np.array([b for _, b in ticks], dtype=np.float64)
    span = (end_ns - start_ns) / 1e9
    buckets = int(np.ceil(span))
    counts = np.bincount(np.clip(t, 0, span).astype(np.int64).clip(0, buckets - 1), weights=n,
                         minlength=buckets)
    rates = counts.astype(np.float64)
    tail = span - (buckets - 1)
    if tail < 0.1 and buckets > 1:
        rates[-2] += rates[-1]  # fold the sliver into the previous second
        return rates[:-1].tolist()
    rates[-1] /= tail
    return rates.tolist()


def summarize_phase(rec: PhaseRecord) -> dict[str, Any]:
    """The JSON summary of one phase (see docs/benchmarks.md for every field)."""
    out: dict[str, Any] = {
        "items": rec.items,
        "seconds": rec.seconds,
        "throughput": rec.items / rec.seconds,
        "clients": rec.clients,
        "not_found": rec.not_found,
        "stopped_early": rec.stopped_early,
        "timeline": per_second(rec.ticks, rec.start_ns, rec.end_ns),
        "latency": {},
    }
    lat = rec.latencies_ns
    out["latency"]["all"] = latency_summary(latency_histogram(lat))
    if rec.codes.size == lat.size and rec.codes.size:
        mix = np.bincount(rec.codes, minlength=len(OP_NAMES))
        out["mix"] = {OP_NAMES[i]: int(c) for i, c in enumerate(mix) if c}
        for code, h in enumerate(_histograms_by_code(lat, rec.codes, len(OP_NAMES))):
            if mix[code]:
                out["latency"][OP_NAMES[code]] = latency_summary(h)
    return out


def disk_usage(path: Path) -> dict[str, int]:
    """Bytes under ``path``: ``allocated`` (blocks on disk) and ``apparent`` (file sizes)."""
    allocated = apparent = files = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            allocated += st.st_blocks * 512
            apparent += st.st_size
            files += 1
    return {"allocated": allocated, "apparent": apparent, "files": files}


def self_peak_rss() -> dict[str, int]:
    """Peak RSS (bytes) of this process and of its largest reaped child (getrusage)."""
    return {
        "self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
    }


def cpu_seconds() -> dict[str, float]:
    """User + system CPU seconds of this process and of its reaped children (getrusage)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"self": me.ru_utime + me.ru_stime, "children": kids.ru_utime + kids.ru_stime}


def load_average() -> float | None:
    """The 1-minute load average (runnable processes), or None where unsupported."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _pss(pid: int) -> int:
    """Proportional set size (bytes) of ``pid`` from /proc/PID/smaps_rollup: its private
    pages plus its share of pages mapped by several processes (0 where unreadable)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def tree_memory(pid: int) -> tuple[int, int]:
    """``(RSS, PSS)`` (bytes) of process ``pid`` plus all its descendants ((0, 0) if gone).
    A sum of RSS counts a page shared by several processes (the interpreter, libraries)
    once per process; a sum of PSS counts it once in all."""
    import psutil

    try:
        proc = psutil.Process(pid)
        procs = [proc] + proc.children(recursive=True)
    except psutil.Error:
        return 0, 0
    rss = pss = 0
    for p in procs:
        try:
            rss += p.memory_info().rss
        except psutil.Error:
            continue
        pss += _pss(p.pid)
    return rss, pss


class RssSampler:
    """Samples the RSS of a process tree in a background thread; tracks the peak.

    Run it in the *parent* of the measured process, so sampling steals no time from the
    measured interpreter's GIL. ``peak`` is a lower bound of the true peak (a spike
    shorter than ``interval`` can be missed); the child's own ``ru_maxrss`` is exact for
    the child itself.
    """

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self.peak_pss = 0  # the peak of the tree's summed PSS (sampled alike)
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            rss, pss = tree_memory(self.pid)
            self.samples += 1
            self.peak = max(self.peak, rss)
            self.peak_pss = max(self.peak_pss, pss)
            self._stop.wait(self.interval)

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _price_table() -> Any:
    try:
        from cloudtier.metered import S3_STANDARD  # the project's one price table
        return S3_STANDARD
    except Exception:
        return None


def dollar_estimate(requests: dict[str, int] | None, stored_bytes: int | None) -> dict[str, Any] | None:
    """Dollars for ``requests`` (by kind: get/put/list/head/delete) and for keeping
    ``stored_bytes`` for a month, at S3 Standard us-east-1 list prices.
    """
    if not requests and not stored_bytes:
        return None
    req = {k: int(v) for k, v in (requests or {}).items() if k in ("get", "put", "list", "head", "delete")}
    table = _price_table()
    if table is not None:
        request_usd = table.request_cost(req)
        storage_usd = (stored_bytes or 0) / _GIB * table.storage_gb_month
        source = table.name
    else:  # the same list prices, for when cloudtier is not importable
        put_class = req.get("put", 0) + req.get("list", 0)
        get_class = req.get("get", 0) + req.get("head", 0)
        request_usd = (put_class * 0.005 + get_class * 0.0004) / 1000.0
        storage_usd = (stored_bytes or 0) / _GIB * 0.023
        source = "S3 Standard (us-east-1) list prices"
    return {"requests_usd": request_usd, "storage_usd_per_month": storage_usd, "prices": source}


def hit_ratios(caches: dict[str, tuple[int, int]]) -> dict[str, float | None]:
    """hits / (hits + misses) per cache; None for a cache that was never consulted."""
    return {name: (h / (h + m) if h + m else None) for name, (h, m) in caches.items()}


def counter_delta(after: dict[str, Any] | None, before: dict[str, Any] | None) -> dict[str, Any] | None:
    """``after - before`` for numeric entries (counters over one phase)."""
    if after is None:
        return None
    before = before or {}
    out: dict[str, Any] = {}
    for k, v in after.items():
        b = before.get(k)
        if isinstance(v, (int, float)) and isinstance(b, (int, float)):
            out[k] = v - b
        elif isinstance(v, (list, tuple)) and isinstance(b, (list, tuple)) and len(v) == len(b):
            out[k] = type(v)(x - y for x, y in zip(v, b))
        else:
            out[k] = v
    return out
