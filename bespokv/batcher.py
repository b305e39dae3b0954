"""Automatic batching of concurrent calls into one RPC (pipelining without a protocol).

A unary gRPC call from Python costs about half a millisecond whatever it carries, so the
node (for peer traffic) and the client (for user operations) funnel single operations
through an :class:`AutoBatcher`: items submitted while a batch is being prepared or is in
flight ride in the next batch. At most ``max_inflight`` batches are in flight at once,
which bounds queueing and keeps order per batcher loose but fair.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["AutoBatcher"]

T = TypeVar("T")
R = TypeVar("R")

Batch = list[tuple[T, asyncio.Future[R]]]


class AutoBatcher(Generic[T, R]):
    """Coalesces concurrent :meth:`submit` calls into calls of ``send(items)``.

    ``send`` returns one result per item, in order; a result that is an exception instance
    is raised to that item's submitter only. If ``send`` raises, every item of the batch
    gets the exception. Must be used from one event loop.

    Liveness contract: every submitter is answered when its batch's ``send`` ends (so a
    ``send`` with a deadline bounds every :meth:`submit`), and a finished batch always
    frees its in-flight slot, however it ended: returned, raised, or cancelled.
    """

    def __init__(
        self,
        send: Callable[[list[T]], Awaitable[Sequence[R | BaseException]]],
        *,
        max_batch: int = 512,
        max_inflight: int = 2,
    ) -> None:
        self._send = send
        self._max_batch = max_batch
        self._max_inflight = max_inflight
        self._queue: Batch[T, R] = []
        self._inflight = 0
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._batches: dict[int, Batch[T, R]] = {}  # in flight, for abort()
        self.batches = 0
        self.items = 0

    async def submit(self, item: T) -> R:
        return await self.enqueue(item)

    def enqueue(self, item: T) -> asyncio.Future[R]:
        """:meth:`submit` without a coroutine: the future of ``item``'s result (callers
        that start many items and await them in order create no task per item)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[R] = loop.create_future()
        self._queue.append((item, fut))
        if not self._scheduled and self._inflight < self._max_inflight:
            self._scheduled = True
            loop.call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        self._scheduled = False
        if any(fut.done() for _, fut in self._queue):  # given up (cancelled): not sent
            self._queue = [(item, fut) for item, fut in self._queue if not fut.done()]
        while self._queue and self._inflight < self._max_inflight:
            batch = self._queue[: self._max_batch]
            del self._queue[: self._max_batch]
            # Counted and registered here, released by the task's done callback, never by
            # the coroutine itself: a task cancelled before its first step (abort() in the
            # same loop iteration as this flush) never runs its body, and its waiters and
            # its slot must be released all the same.
            self._inflight += 1
            self._batches[id(batch)] = batch
            task = asyncio.ensure_future(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._finished, batch))

    async def _run(self, batch: Batch[T, R]) -> None:
        try:
            results = await self._send([item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"batch send returned {len(results)} results for {len(batch)} items")
        except Exception as exc:  # delivered to every waiter
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
            return
        for (_, fut), res in zip(batch, results):
            if fut.done():
                continue
            if isinstance(res, BaseException):
                fut.set_exception(res)
            else:
                fut.set_result(res)

    def _finished(self, batch: Batch[T, R], task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._batches.pop(id(batch), None)
        for _, fut in batch:  # the task was cancelled (close(), abort()) before answering
            if not fut.done():
                fut.cancel()
        self.batches += 1
        self.items += len(batch)
        self._inflight -= 1
        if self._queue and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def abort(self, exc: Exception) -> None:
        """Fail every queued and in-flight item with ``exc`` and cancel the calls in flight
        (their server may be gone or paused); the batcher stays usable."""
        for batch in list(self._batches.values()):
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
        for _, fut in self._queue:
            if not fut.done():
                fut.set_exception(exc)
        self._queue.clear()
        for t in list(self._tasks):
            t.cancel()

    def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        for _, fut in self._queue:
            if not fut.done():
                fut.cancel()
        self._queue.clear()
