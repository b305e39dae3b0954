"""What a tiered system's bucket prefix holds at the end of a run, and what it keeps.

:func:`bucket_kinds` lists a rocksmash prefix by kind (``rocksmash.bucket_usage``, the
breakdown ``rocksmash du`` prints); :func:`bucket_kept_bytes` is the part a month is
paid for: everything but the retired tables still in their grace, which leave by
themselves.
"""

from __future__ import annotations

from typing import Any

from bench.runners.base import ObjectStoreTarget

__all__ = ["TRANSIENT_KINDS", "bucket_kept_bytes", "bucket_kinds"]


#: Kinds of rocksmash.bucket_usage that leave the bucket by themselves: within
#: retired_object_grace of their retirement once no reader holds them, or at the next
#: open. What the bucket holds at the close is therefore not what a month costs.
TRANSIENT_KINDS = ("retired_tables", "unnamed_tables")


def bucket_kept_bytes(r: dict[str, Any]) -> int | None:
    """The bucket bytes a configuration keeps paying for: its prefix at the close minus
    the retired tables still in their grace (rocksmash's breakdown, ``bucket_kinds``).
    Without a breakdown (SlateDB, or a listing that failed), the prefix at the close."""
    kinds = (r.get("bucket_kinds") or {}).get("kinds")
    if not kinds:
        return (r.get("object_store_usage") or {}).get("bytes")
    return int(sum(k["bytes"] for name, k in kinds.items() if name not in TRANSIENT_KINDS))


def bucket_kinds(target: ObjectStoreTarget) -> dict[str, Any] | None:
    """rocksmash's bucket prefix at the end by kind (rocksmash.bucket_usage), or None
    with the error noted if it cannot be listed (a trial never fails on it)."""
    import cloudtier
    from rocksmash.bucket_usage import bucket_usage

    try:
        store = cloudtier.open_store(target.url, **target.store_options(latency=False))
        try:
            return bucket_usage(store)
        finally:
            store.close()
    except Exception as e:  # the figure is a nice-to-have next to the listed bytes
        return {"error": repr(e)}
