"""Parallel replay of WAL segments at open (the extended WAL's recovery).

Every segment names the table it flushes to, so segments are independent: each is
replayed by ``jobs.flush_segment`` into its own table, and up to ``recovery_processes``
of them run at once, one per worker process (threads here only wait on the workers'
pipes, so they hold no GIL while a replay runs). Results come back in segment order;
the caller applies the ordering rules (a torn segment hides every later one).

Memory: each worker holds one segment (at most one memtable's worth of writes) and the
table it builds, so recovery needs about ``recovery_processes`` x ``memtable_size`` of
memory at most, however large the WAL is.
"""

from __future__ import annotations

import queue
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from .worker import WorkerProcess

__all__ = ["replay_segments"]

RunJob = Callable[..., Any]


def replay_segments(tasks: list[dict[str, Any]], run_job: RunJob,
                    workers: list[WorkerProcess | None]) -> list[dict[str, Any]]:
    """Run ``flush_segment`` for each task (its keyword arguments); return the results in
    task order. ``run_job(worker, job, **kwargs)`` runs one job (inline for None). With
    more than one worker, as many tasks run at once; the first failure, in task order,
    is raised after every task has finished (no replay is abandoned halfway)."""
    if len(workers) <= 1 or len(tasks) <= 1:
        w = workers[0] if workers else None
        return [run_job(w, "flush_segment", **t) for t in tasks]
    free: queue.SimpleQueue[WorkerProcess | None] = queue.SimpleQueue()
    for w in workers:
        free.put(w)

    def one(task: dict[str, Any]) -> dict[str, Any]:
        w = free.get()
        try:
            result: dict[str, Any] = run_job(w, "flush_segment", **task)
            return result
        finally:
            free.put(w)

    with ThreadPoolExecutor(max_workers=len(workers),
                            thread_name_prefix="rocksmash-recovery") as pool:
        futures = [pool.submit(one, t) for t in tasks]
    return [f.result() for f in futures]
