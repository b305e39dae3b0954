"""The measured loop: drives a runner through the load and run phases.

Hot-loop contract (what the driver's overhead figure in docs/benchmarks.md measures):
per operation the client loop does one branch on the op code, two
``time.perf_counter_ns()`` calls around the runner call, and one ``array.append`` of
the latency. Operation generation happens per batch of 4096, between the timed calls,
so it is excluded from latencies but included in throughput. Every 256 operations the
loop records a throughput tick, reports progress and checks the ``max_seconds``
deadline. Histograms, per-second
buckets and percentiles are computed after the phase (:mod:`bench.metrics`), never in
the loop.

Sync runners are driven by ``threads`` client threads (the calling thread when there is
one), async runners by as many asyncio tasks on one event loop, which
:class:`Session` owns for the runner's whole life.
"""

from __future__ import annotations

import asyncio
import threading
import time
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from bench.runners import AnyRunner
from bench.workloads import OpBatch, OperationStream, StreamConfig, load_batches, thread_share

__all__ = ["PhaseRecord", "Session"]

Progress = Callable[[int], None]

#: Operations between two deadline checks (and two throughput-over-time ticks). Slicing a
#: batch costs a few ns per operation; it bounds how far --max-time can overshoot.
_SLICE = 256


def _no_progress(n: int) -> None:
    pass


@dataclass
class PhaseRecord:
    """Raw measurements of one phase, merged over client threads.

    ``codes[i]`` is the op code (:class:`bench.workloads.Op`) of the operation whose
    latency is ``latencies_ns[i]``; in the load phase each entry is one ``load_batch``
    call and ``codes`` is empty. ``ticks`` are ``(perf_counter_ns, items completed)``
    per batch, for throughput over time. ``items`` counts operations (records in load).
    """

    phase: str
    start_ns: int
    end_ns: int
    items: int
    latencies_ns: np.ndarray
    codes: np.ndarray
    ticks: list[tuple[int, int]]
    not_found: int = 0
    clients: int = 1
    stopped_early: bool = False

    @property
    def seconds(self) -> float:
        return max(self.end_ns - self.start_ns, 1) / 1e9


@dataclass
class _ClientResult:
    start_ns: int = 0
    end_ns: int = 0
    items: int = 0
    latencies: array = field(default_factory=lambda: array("q"))
    codes: list[np.ndarray] = field(default_factory=list)
    ticks: list[tuple[int, int]] = field(default_factory=list)
    not_found: int = 0
    stopped_early: bool = False


def _merge(phase: str, results: list[_ClientResult]) -> PhaseRecord:
    lat = np.concatenate([np.frombuffer(r.latencies, dtype=np.int64) for r in results]) \
        if results else np.zeros(0, np.int64)
    codes = [c for r in results for c in r.codes]
    return PhaseRecord(
        phase=phase,
        start_ns=min(r.start_ns for r in results),
        end_ns=max(r.end_ns for r in results),
        items=sum(r.items for r in results),
        latencies_ns=lat.copy(),
        codes=np.concatenate(codes) if codes else np.zeros(0, np.uint8),
        ticks=sorted(t for r in results for t in r.ticks),
        not_found=sum(r.not_found for r in results),
        clients=len(results),
        stopped_early=any(r.stopped_early for r in results),
    )


# --- synchronous runners -------------------------------------------------------------

def _sync_ops(runner: Any, batches: Iterable[OpBatch], out: _ClientResult,
              progress: Progress, deadline_ns: int) -> None:
    pc = time.perf_counter_ns
    read, update, insert, scan, rmw = runner.read, runner.update, runner.insert, runner.scan, runner.rmw
    lat_append = out.latencies.append
    ticks_append = out.ticks.append
    not_found = 0
    stopped = False
    out.start_ns = pc()
    for batch in batches:
        ops, keys, args = batch.ops, batch.keys, batch.args
        n = len(ops)
        for lo in range(0, n, _SLICE):
            hi = min(lo + _SLICE, n)
            for op, key, arg in zip(ops[lo:hi], keys[lo:hi], args[lo:hi]):
                if op == 0:
                    t0 = pc()
                    v = read(key)
                    t1 = pc()
                    if v is None:
                        not_found += 1
                elif op == 1:
                    t0 = pc()
                    update(key, arg)
                    t1 = pc()
                elif op == 3:
                    t0 = pc()
                    scan(key, arg)
                    t1 = pc()
                elif op == 4:
                    t0 = pc()
                    rmw(key, arg)
                    t1 = pc()
                else:
                    t0 = pc()
                    insert(key, arg)
                    t1 = pc()
                lat_append(t1 - t0)
            now = pc()
            ticks_append((now, hi - lo))
            out.items += hi - lo
            progress(hi - lo)
            if now > deadline_ns:
                stopped = True
                out.codes.append(batch.codes[:hi])
                break
        if stopped:
            break
        out.codes.append(batch.codes)
    out.end_ns = pc()
    out.not_found = not_found
    out.stopped_early = stopped and out.items < getattr(batches, "count", out.items + 1)


def _sync_load(runner: Any, batches: Iterable[tuple[list[bytes], list[bytes]]],
               out: _ClientResult, progress: Progress, deadline_ns: int) -> None:
    pc = time.perf_counter_ns
    load_batch = runner.load_batch
    out.start_ns = pc()
    for keys, values in batches:
        t0 = pc()
        load_batch(keys, values)
        t1 = pc()
        out.latencies.append(t1 - t0)
        out.items += len(keys)
        out.ticks.append((t1, len(keys)))
        progress(len(keys))
    out.end_ns = pc()


def _in_threads(target: Callable[..., None], work: list[Any], runner: Any, progress: Progress,
                deadline_ns: int) -> list[_ClientResult]:
    results = [_ClientResult() for _ in work]
    if len(work) == 1:
        target(runner, work[0], results[0], progress, deadline_ns)
        return results
    barrier = threading.Barrier(len(work))
    errors: list[BaseException] = []
    lock = threading.Lock()

    def locked_progress(n: int) -> None:
        with lock:
            progress(n)

    def client(i: int) -> None:
        try:
            barrier.wait()
            target(runner, work[i], results[i], locked_progress, deadline_ns)
        except BaseException as e:  # surfaced in the main thread below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,), name=f"bench-client-{i}") for i in range(len(work))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


# --- asyncio runners -----------------------------------------------------------------

async def _async_ops(runner: Any, batches: Iterable[OpBatch], out: _ClientResult,
                     progress: Progress, deadline_ns: int) -> None:
    pc = time.perf_counter_ns
    read, update, insert, scan, rmw = runner.read, runner.update, runner.insert, runner.scan, runner.rmw
    lat_append = out.latencies.append
    ticks_append = out.ticks.append
    not_found = 0
    stopped = False
    out.start_ns = pc()
    for batch in batches:
        ops, keys, args = batch.ops, batch.keys, batch.args
        n = len(ops)
        for lo in range(0, n, _SLICE):
            hi = min(lo + _SLICE, n)
            for op, key, arg in zip(ops[lo:hi], keys[lo:hi], args[lo:hi]):
                if op == 0:
                    t0 = pc()
                    v = await read(key)
                    t1 = pc()
                    if v is None:
                        not_found += 1
                elif op == 1:
                    t0 = pc()
                    await update(key, arg)
                    t1 = pc()
                elif op == 3:
                    t0 = pc()
                    await scan(key, arg)
                    t1 = pc()
                elif op == 4:
                    t0 = pc()
                    await rmw(key, arg)
                    t1 = pc()
                else:
                    t0 = pc()
                    await insert(key, arg)
                    t1 = pc()
                lat_append(t1 - t0)
            now = pc()
            ticks_append((now, hi - lo))
            out.items += hi - lo
            progress(hi - lo)
            if now > deadline_ns:
                stopped = True
                out.codes.append(batch.codes[:hi])
                break
        if stopped:
            break
        out.codes.append(batch.codes)
    out.end_ns = pc()
    out.not_found = not_found
    out.stopped_early = stopped and out.items < getattr(batches, "count", out.items + 1)


async def _async_load(runner: Any, batches: Iterable[tuple[list[bytes], list[bytes]]],
                      out: _ClientResult, progress: Progress, deadline_ns: int) -> None:
    pc = time.perf_counter_ns
    out.start_ns = pc()
    for keys, values in batches:
        t0 = pc()
        await runner.load_batch(keys, values)
        t1 = pc()
        out.latencies.append(t1 - t0)
        out.items += len(keys)
        out.ticks.append((t1, len(keys)))
        progress(len(keys))
    out.end_ns = pc()


async def _in_tasks(target: Callable[..., Any], work: list[Any], runner: Any, progress: Progress,
                    deadline_ns: int) -> list[_ClientResult]:
    results = [_ClientResult() for _ in work]
    await asyncio.gather(*(target(runner, w, r, progress, deadline_ns) for w, r in zip(work, results)))
    return results


# --- the session ---------------------------------------------------------------------

class Session:
    """One runner's life: open, load, settle, run phases, stats, close.

    Hides whether the runner is sync or async (an async runner gets one event loop for
    all its calls). Not thread-safe; use from one thread.
    """

    def __init__(self, runner: AnyRunner) -> None:
        self.runner = runner
        self._loop = asyncio.new_event_loop() if runner.is_async else None
        self._warm: tuple[StreamConfig, list[OperationStream]] | None = None

    def _call(self, result: Any) -> Any:
        if self._loop is not None:
            return self._loop.run_until_complete(result)
        return result

    def open(self) -> None:
        self._call(self.runner.open())

    def settle(self, mode: str) -> str:
        return self._call(self.runner.settle(mode))

    def close(self) -> None:
        try:
            self._call(self.runner.close())
        finally:
            if self._loop is not None:
                self._loop.close()
                self._loop = None

    def write(self, keys: list[bytes], values: list[bytes]) -> None:
        """One write batch outside any measured phase (a rewrite before a compaction)."""
        self._call(self.runner.load_batch(keys, values))

    def load(self, cfg: StreamConfig, batch_size: int = 1000,
             progress: Progress = _no_progress) -> PhaseRecord:
        """Insert records ``0..record_count-1`` with ``cfg.threads`` clients."""
        work = [load_batches(cfg, t, batch_size) for t in range(cfg.threads)]
        return self._drive("load", _sync_load, _async_load, work, progress, None)

    def warm_up(self, cfg: StreamConfig, operations: int,
                progress: Progress = _no_progress) -> PhaseRecord:
        """Issue the first ``operations`` operations of the workload's streams, for the
        caller not to report; the next :meth:`run` with the same ``cfg`` continues them."""
        streams = [OperationStream(cfg, t) for t in range(cfg.threads)]
        work = [s.take(thread_share(operations, cfg.threads, t)) for t, s in enumerate(streams)]
        self._warm = (cfg, streams)
        return self._drive("warmup", _sync_ops, _async_ops, work, progress, None)

    def run(self, cfg: StreamConfig, phase: str = "run", operation_count: int | None = None,
            max_seconds: float | None = None, progress: Progress = _no_progress) -> PhaseRecord:
        """Issue the workload's operations with ``cfg.threads`` clients.

        Continues the streams of a preceding :meth:`warm_up` with the same ``cfg``.
        Stops within 256 operations per client after ``max_seconds`` ran out, if given
        (the record says ``stopped_early``).
        """
        total = cfg.operation_count if operation_count is None else operation_count
        if self._warm is not None and self._warm[0] == cfg:
            streams = self._warm[1]
        else:
            streams = [OperationStream(cfg, t) for t in range(cfg.threads)]
        self._warm = None
        work = [s.take(thread_share(total, cfg.threads, t)) for t, s in enumerate(streams)]
        return self._drive(phase, _sync_ops, _async_ops, work, progress, max_seconds)

    def _drive(self, phase: str, sync_target: Callable[..., None], async_target: Callable[..., Any],
               work: list[Any], progress: Progress, max_seconds: float | None) -> PhaseRecord:
        deadline = time.perf_counter_ns() + int(max_seconds * 1e9) if max_seconds else 1 << 62
        if self._loop is not None:
            results = self._loop.run_until_complete(
                _in_tasks(async_target, work, self.runner, progress, deadline))
        else:
            results = _in_threads(sync_target, work, self.runner, progress, deadline)
        return _merge(phase, results)
