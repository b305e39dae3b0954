"""YCSB's core workloads and the deterministic operation streams they produce.

================  =========================================  ============  ==============
workload          operations                                  distribution  scan length
================  =========================================  ============  ==============
``a`` update-heavy 50% read, 50% update                        zipfian
``b`` read-mostly  95% read, 5% update                         zipfian
``c`` read-only    100% read                                   zipfian
``d`` read-latest  95% read, 5% insert                         latest
``e`` short scans  95% scan, 5% insert                         zipfian       uniform 1..100
``f`` rmw          50% read, 50% read-modify-write             zipfian
================  =========================================  ============  ==============

(The proportions are YCSB's ``workloads/workload[a-f]`` files.) A run has two phases:
*load* inserts records ``0..record_count-1`` (in key-number order; with hashed keys that
is random key order), *run* issues ``operation_count`` operations.

Determinism: a stream is a pure function of its :class:`StreamConfig`, the client
thread index and the phase. Each client thread ``t`` of ``T`` gets its own seeded
``numpy.random.Generator`` and its own share of the operations; its ``j``-th insert gets
key number ``record_count + j*T + t``, so threads never insert the same key. With one
thread the stream is exactly YCSB's semantics; with several, a thread assumes the others
inserted as many keys as itself, so a read of a key another thread has not inserted yet
can happen (the driver counts such reads as ``not_found``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Iterator

import numpy as np

from bench.generators import DISTRIBUTIONS, ZIPFIAN_CONSTANT, make_chooser
from bench.records import KeySpace, ValuePool

__all__ = [
    "Op",
    "OP_NAMES",
    "Workload",
    "CORE_WORKLOADS",
    "StreamConfig",
    "OpBatch",
    "OperationStream",
    "OpSlice",
    "load_batches",
    "thread_share",
]

#: Operations are generated in batches of this many (part of what a seed reproduces).
BATCH_SIZE = 4096


class Op(IntEnum):
    """Operation codes; the values index :data:`OP_NAMES` and proportion tuples."""

    READ = 0
    UPDATE = 1
    INSERT = 2
    SCAN = 3
    RMW = 4


OP_NAMES: tuple[str, ...] = ("read", "update", "insert", "scan", "rmw")
_WRITE_OPS = (Op.UPDATE, Op.INSERT, Op.RMW)
_PHASE_CODES = {"load": 0, "run": 1}


@dataclass(frozen=True)
class Workload:
    """A YCSB workload definition: operation proportions (summing to 1) and defaults."""

    name: str
    title: str
    read: float = 0.0
    update: float = 0.0
    insert: float = 0.0
    scan: float = 0.0
    rmw: float = 0.0
    distribution: str = "zipfian"
    max_scan_length: int = 100

    def __post_init__(self) -> None:
        total = sum(self.proportions)
        if abs(total - 1.0) > 1e-9 or min(self.proportions) < 0:
            raise ValueError(f"workload {self.name}: proportions must be >= 0 and sum to 1, got {total}")

    @property
    def proportions(self) -> tuple[float, float, float, float, float]:
        """Proportions indexed by :class:`Op`."""
        return (self.read, self.update, self.insert, self.scan, self.rmw)

    def mix(self) -> str:
        """Human-readable mix, e.g. ``50% read, 50% update``."""
        return ", ".join(f"{p * 100:g}% {OP_NAMES[i]}" for i, p in enumerate(self.proportions) if p)


CORE_WORKLOADS: dict[str, Workload] = {
    "a": Workload("a", "update heavy", read=0.5, update=0.5),
    "b": Workload("b", "read mostly", read=0.95, update=0.05),
    "c": Workload("c", "read only", read=1.0),
    "d": Workload("d", "read latest", read=0.95, insert=0.05, distribution="latest"),
    "e": Workload("e", "short ranges", scan=0.95, insert=0.05),
    "f": Workload("f", "read-modify-write", read=0.5, rmw=0.5),
}


@dataclass(frozen=True)
class StreamConfig:
    """Everything that determines the operations of a load and a run.

    ``distribution=None`` means the workload's own (zipfian, or latest for D).
    """

    workload: Workload
    record_count: int
    operation_count: int
    threads: int = 1
    distribution: str | None = None
    key_size: int = 24
    value_size: int = 100
    compression_ratio: float = 0.5
    theta: float = ZIPFIAN_CONSTANT
    insert_order: str = "hashed"
    seed: int = 1

    def __post_init__(self) -> None:
        if self.record_count < 1:
            raise ValueError("record_count must be >= 1")
        if self.threads < 1:
            raise ValueError("threads must be >= 1")
        if self.distribution is not None and self.distribution not in DISTRIBUTIONS + ("scrambled",):
            raise ValueError(f"unknown distribution {self.distribution!r}; choose from {', '.join(DISTRIBUTIONS)}")

    @property
    def resolved_distribution(self) -> str:
        """The distribution actually used."""
        d = self.distribution or self.workload.distribution
        return "zipfian" if d == "scrambled" else d

    @property
    def expected_inserts(self) -> int:
        """YCSB's key-space allowance for run-phase inserts (``ops * insert share * 2``)."""
        return int(self.operation_count * self.workload.insert * 2.0)

    def key_space(self) -> KeySpace:
        return KeySpace(self.key_size, self.insert_order)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["workload"] = self.workload.name
        d["resolved_distribution"] = self.resolved_distribution
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StreamConfig":
        fields = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in fields}
        kw["workload"] = CORE_WORKLOADS[d["workload"]]
        return cls(**kw)


def thread_share(total: int, threads: int, thread: int) -> int:
    """How many of ``total`` items thread ``thread`` of ``threads`` handles."""
    return total // threads + (1 if thread < total % threads else 0)


@dataclass
class OpBatch:
    """A batch of operations, as plain lists for a fast driver loop.

    ``args[i]`` is the value for update/insert/rmw, the record count for scan, and None
    for read. ``codes`` is the same as ``ops`` as a numpy array.
    """

    codes: np.ndarray
    ops: list[int]
    keys: list[bytes]
    args: list[Any]


class OperationStream:
    """The run-phase operations of one client thread, in batches.

    Iterating yields :class:`OpBatch` objects totalling this thread's share of
    ``operation_count`` (or ``operation_count`` given here); :meth:`take` hands out
    consecutive slices instead (a warm-up is the first slice, the measured run the
    next, so the run continues where the warm-up left off: its inserts are new keys).
    Not thread-safe; one stream per thread.
    """

    def __init__(self, cfg: StreamConfig, thread: int = 0, phase: str = "run",
                 operation_count: int | None = None, batch_size: int = BATCH_SIZE) -> None:
        if not 0 <= thread < cfg.threads:
            raise ValueError(f"thread {thread} out of range for {cfg.threads} threads")
        self.cfg = cfg
        self.thread = thread
        total = cfg.operation_count if operation_count is None else operation_count
        self.count = thread_share(total, cfg.threads, thread)
        self.batch_size = batch_size
        self._rng = np.random.default_rng([cfg.seed, thread, _PHASE_CODES[phase]])
        self._values = ValuePool(cfg.value_size, cfg.compression_ratio, seed=cfg.seed * 1009 + thread)
        self._keys = cfg.key_space()
        self._chooser = make_chooser(cfg.resolved_distribution, cfg.record_count,
                                     cfg.expected_inserts, cfg.theta)
        cum = np.cumsum(cfg.workload.proportions)
        cum[-1] = 1.0
        self._cum = cum
        self._inserted = 0  # inserts this thread has issued so far

    def __iter__(self) -> Iterator[OpBatch]:
        return iter(self.take(self.count))

    def take(self, count: int) -> "OpSlice":
        """The next ``count`` operations of this stream (a warm-up, then the run, say).

        The slice draws lazily from the stream's state when iterated; iterate slices in
        the order they were taken.
        """
        return OpSlice(self, count)

    def _batch(self, n: int) -> OpBatch:
        cfg, rng = self.cfg, self._rng
        T = cfg.threads
        codes = np.searchsorted(self._cum, rng.random(n), side="right").astype(np.uint8)
        is_insert = codes == Op.INSERT
        inserts_before = np.cumsum(is_insert, dtype=np.int64) - is_insert
        counts = cfg.record_count + (self._inserted + inserts_before) * T
        keynums = np.empty(n, dtype=np.int64)
        chosen = ~is_insert
        keynums[chosen] = self._chooser.choose(rng, counts[chosen])
        n_ins = int(is_insert.sum())
        if n_ins:
            j = self._inserted + np.arange(n_ins, dtype=np.int64)
            keynums[is_insert] = cfg.record_count + j * T + self.thread
            self._inserted += n_ins
        args: list[Any] = [None] * n
        writes = np.flatnonzero(np.isin(codes, _WRITE_OPS)).tolist()
        for i, v in zip(writes, self._values.take(len(writes))):
            args[i] = v
        scans = np.flatnonzero(codes == Op.SCAN)
        if scans.size:
            lengths = rng.integers(1, cfg.workload.max_scan_length + 1, scans.size).tolist()
            for i, length in zip(scans.tolist(), lengths):
                args[i] = length
        return OpBatch(codes, codes.tolist(), self._keys.keys(keynums), args)


class OpSlice:
    """``count`` consecutive operations of an :class:`OperationStream`, in batches."""

    def __init__(self, stream: OperationStream, count: int) -> None:
        self.stream = stream
        self.count = count

    def __iter__(self) -> Iterator[OpBatch]:
        left = self.count
        while left > 0:
            n = min(self.stream.batch_size, left)
            left -= n
            yield self.stream._batch(n)


def load_batches(cfg: StreamConfig, thread: int = 0,
                 batch_size: int = 1000) -> Iterator[tuple[list[bytes], list[bytes]]]:
    """The load phase of one client thread: ``(keys, values)`` lists of <= batch_size.

    Thread ``t`` loads the ``t``-th contiguous slice of key numbers ``0..record_count-1``.
    """
    start = sum(thread_share(cfg.record_count, cfg.threads, i) for i in range(thread))
    stop = start + thread_share(cfg.record_count, cfg.threads, thread)
    keys = cfg.key_space()
    values = ValuePool(cfg.value_size, cfg.compression_ratio, seed=cfg.seed * 1009 + 7919 + thread)
    for lo in range(start, stop, batch_size):
        hi = min(lo + batch_size, stop)
        yield keys.keys(np.arange(lo, hi, dtype=np.int64)), values.take(hi - lo)
