"""Datalet calls off the event loop: one thread per shard replica.

A datalet is synchronous (see ``base.py``). Called on the node's event loop, one slow call
(a rocksmash write stall, an fsync, Redis across a slow link) would freeze every
replication stream, health check and other shard of the node, so a healthy-but-stalled
node would look dead. :class:`DataletWorker` runs every call of one shard replica's
datalet on that replica's own thread instead.

Contracts:

* One thread per worker, calls run in the order they were submitted (FIFO), never two at
  once: the datalet still needs no locking, and a call submitted after another one has
  been submitted sees its effects. Controlets rely on this order.
* A function passed to :meth:`DataletWorker.run` runs on the worker thread with the
  datalet; it is atomic with respect to every other call of the shard. Controlets put a
  read-compare-write there (store-if-newer, CAS) instead of holding a lock across awaits.
* The thread keeps running a call whose awaiting coroutine was cancelled (it cannot be
  interrupted); callers that must update in-memory state after a write shield it.
* Exceptions raised by the datalet propagate to the awaiting coroutine unchanged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, TypeVar

from bespokv.datalets.base import Datalet, Op

__all__ = ["DataletWorker", "SWITCH_INTERVAL"]

T = TypeVar("T")

#: The interpreter's thread switch interval in a node with worker threads (seconds).
#: Python's default, 5 ms, is how long a thread that wants the GIL waits before it makes
#: the holder let go: with a busy event loop, every datalet call would wait up to that
#: long to start, and the loop as long again for its answer. 0.2 ms keeps the hop short;
#: forced switches stay rare because both threads mostly give the GIL up by themselves.
SWITCH_INTERVAL = 0.0002

_DONE = object()


class DataletWorker:
    """A datalet's async face: the same methods, awaited, run on a private thread."""

    def __init__(self, datalet: Datalet, name: str, *, thread: bool = True) -> None:
        self.inner = datalet
        self.kind: str = getattr(datalet, "kind", type(datalet).__name__)
        self.persistent: bool = bool(getattr(datalet, "persistent", False))
        #: None: calls run inline on the event loop (``Tuning.datalet_thread = false``)
        self._pool = (
            concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name) if thread else None
        )
        if thread and sys.getswitchinterval() > SWITCH_INTERVAL:
            sys.setswitchinterval(SWITCH_INTERVAL)

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the worker thread, after every call submitted before."""
        if self._pool is None:
            return fn(*args, **kwargs)
        loop = asyncio.get_running_loop()
        call = functools.partial(fn, *args, **kwargs) if kwargs else (functools.partial(fn, *args) if args else fn)
        return await loop.run_in_executor(self._pool, call)

    # -- the datalet protocol, awaited ------------------------------------------------------

    async def get(self, key: bytes) -> bytes | None:
        return await self.run(self.inner.get, key)

    async def multi_get(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return await self.run(self.inner.multi_get, keys)

    async def write(self, ops: Sequence[Op]) -> None:
        await self.run(self.inner.write, ops)

    async def scan(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> list[tuple[bytes, bytes]]:
        """One page, read in one call (callers page with a bounded ``limit``)."""
        return await self.run(_scan_list, self.inner, start, end, reverse, limit)

    async def export(self, chunk: int = 512) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        """The datalet's ``export``, each chunk produced by one call on the worker thread
        (writes submitted between two chunks run between them, as the protocol allows)."""
        it: Iterator[list[tuple[bytes, bytes]]] = await self.run(self.inner.export, chunk)
        try:
            while True:
                page = await self.run(next, it, _DONE)
                if page is _DONE:
                    return
                yield page  # type: ignore[misc]
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                await self.run(close)

    async def clear(self) -> None:
        await self.run(self.inner.clear)

    async def stats(self) -> dict[str, float]:
        return await self.run(self.inner.stats)

    async def close(self) -> None:
        """Close the datalet (after every call already submitted) and stop the thread."""
        try:
            await self.run(self.inner.close)
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=False)


def _scan_list(
    datalet: Datalet, start: bytes | None, end: bytes | None, reverse: bool, limit: int | None
) -> list[tuple[bytes, bytes]]:
    return list(datalet.scan(start, end, reverse=reverse, limit=limit))
