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

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

__all__ = ["replay_segments"]


def replay_segments(tasks: list[dict[str, Any]], run: Callable[[dict[str, Any]], Any],
                    parallel: int) -> list[dict[str, Any]]:
    """Run ``run(task)`` (one ``flush_segment`` job) for each task, up to ``parallel`` at
    once; return the results in task order. The first failure, in task order, is raised
    after every task has finished (no replay is abandoned halfway)."""
    if parallel <= 1 or len(tasks) <= 1:
        return [run(t) for t in tasks]
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="rocksmash-recovery") as ex:
        futures = [ex.submit(run, t) for t in tasks]
    return [f.result() for f in futures]
