"""Paging through a datalet without holding an iterator across awaits."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from bespokv.controlets.base import user_end
from bespokv.datalets.worker import DataletWorker

__all__ = ["local_scan_chunks", "PAGE"]

PAGE = 256


async def local_scan_chunks(
    datalet: DataletWorker,
    start: bytes | None,
    end: bytes | None,
    *,
    reverse: bool,
    limit: int | None,
    transform: Callable[[list[tuple[bytes, bytes]]], list[tuple[bytes, bytes]]] | None = None,
    page: int = PAGE,
) -> AsyncIterator[list[tuple[bytes, bytes]]]:
    """User pairs of ``[start, end)`` in pages; each page is read in one datalet call,
    and the scan re-seeks after every page (writes may land between pages).
    ``transform`` may drop or rewrite pairs of a page (e.g. tombstones)."""
    end = user_end(end)
    remaining = limit
    lo, hi = start, end
    while remaining is None or remaining > 0:
        raw = await datalet.scan(lo, hi, reverse=reverse, limit=page)
        if not raw:
            return
        out = transform(raw) if transform else raw
        if remaining is not None and len(out) > remaining:
            out = out[:remaining]
        if out:
            if remaining is not None:
                remaining -= len(out)
            yield out
        if len(raw) < page:
            return
        if reverse:
            hi = raw[-1][0]
        else:
            lo = raw[-1][0] + b"\x00"
