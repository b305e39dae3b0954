"""Merging sorted chunked streams (one per shard) into one sorted stream."""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import AsyncIterator
from typing import Any

__all__ = ["merge_chunks"]

CHUNK = 256


class _Rev:
    """Inverts byte-string order inside a heap (for reverse scans)."""

    __slots__ = ("k",)

    def __init__(self, k: bytes) -> None:
        self.k = k

    def __lt__(self, other: _Rev) -> bool:
        return self.k > other.k

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Rev) and self.k == other.k


async def merge_chunks(
    sources: list[AsyncIterator[list[tuple[bytes, bytes]]]], *, reverse: bool
) -> AsyncIterator[list[tuple[bytes, bytes]]]:
    """K-way merge of streams of sorted chunks into sorted chunks. Keys never repeat across
    sources (shards are disjoint), so nothing is deduplicated. Sources are read lazily."""
    if len(sources) == 1:
        async for chunk in sources[0]:
            if chunk:
                yield chunk
        return
    iters = [s.__aiter__() for s in sources]
    try:
        async for chunk in _merge(iters, reverse):
            yield chunk
    finally:
        for it in iters:
            close = getattr(it, "aclose", None)
            if close is not None:
                try:
                    await close()
                except Exception:  # closing an abandoned stream
                    pass


async def _merge(
    iters: list[AsyncIterator[list[tuple[bytes, bytes]]]], reverse: bool
) -> AsyncIterator[list[tuple[bytes, bytes]]]:
    bufs: list[list[tuple[bytes, bytes]]] = [[] for _ in iters]
    pos = [0] * len(iters)
    live = [True] * len(iters)

    async def refill(i: int) -> None:
        while live[i] and pos[i] >= len(bufs[i]):
            try:
                bufs[i] = await iters[i].__anext__()
                pos[i] = 0
            except StopAsyncIteration:
                live[i] = False

    await asyncio.gather(*(refill(i) for i in range(len(iters))))
    heap: list[tuple[Any, int]] = []

    def push(i: int) -> None:
        if live[i] and pos[i] < len(bufs[i]):
            k = bufs[i][pos[i]][0]
            heapq.heappush(heap, (_Rev(k) if reverse else k, i))

    for i in range(len(iters)):
        push(i)
    out: list[tuple[bytes, bytes]] = []
    while heap:
        _, i = heapq.heappop(heap)
        out.append(bufs[i][pos[i]])
        pos[i] += 1
        if pos[i] >= len(bufs[i]):
            if out:
                yield out
                out = []
            await refill(i)
        push(i)
        if len(out) >= CHUNK:
            yield out
            out = []
    if out:
        yield out
