"""cloudtier: object stores and everything about talking to them.

One small interface (:class:`ObjectStore`: put with optional compare-and-swap, ranged get,
head, delete, sorted paginated list), three backends chosen by URL (``s3://``, ``file://``,
``memory://``), wrappers that stack around any store (retries, metering with a dollar
estimate, seeded fault injection), and the tools for a local S3 test bed: a moto server
runner and a TCP delay proxy. See ``docs/cloudtier.md``.

>>> import cloudtier
>>> with cloudtier.open_store("memory://") as store:
...     etag = store.put("a/1", b"hello")
...     store.get("a/1", 1, 3)
b'el'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cloudtier.cost_model import MonthlyCost, TieringCosts, monthly_cost
from cloudtier.errors import (
    ClosedError,
    InvalidKeyError,
    InvalidURLError,
    NotFoundError,
    PreconditionFailedError,
    StoreError,
    StoreTimeoutError,
    TransientError,
)
from cloudtier.faults import FaultConfig, FaultInjectingStore
from cloudtier.file_store import FileStore
from cloudtier.histogram import LatencyHistogram
from cloudtier.memory_store import MemoryStore
from cloudtier.metered import S3_STANDARD, MeteredStore, PriceTable
from cloudtier.retrying import RetryingStore, RetryPolicy
from cloudtier.store import BytesLike, ListPage, ObjectInfo, ObjectStore, StoreWrapper
from cloudtier.url import open_store

if TYPE_CHECKING:
    from cloudtier.s3_store import S3Store

__all__ = [
    # the interface
    "ObjectStore",
    "ObjectInfo",
    "ListPage",
    "BytesLike",
    "StoreWrapper",
    "open_store",
    # backends
    "S3Store",
    "FileStore",
    "MemoryStore",
    # wrappers
    "RetryingStore",
    "RetryPolicy",
    "MeteredStore",
    "PriceTable",
    "S3_STANDARD",
    # what data costs, tiered against all-local
    "MonthlyCost",
    "TieringCosts",
    "monthly_cost",
    "LatencyHistogram",
    "FaultInjectingStore",
    "FaultConfig",
    # errors
    "StoreError",
    "NotFoundError",
    "PreconditionFailedError",
    "TransientError",
    "StoreTimeoutError",
    "InvalidURLError",
    "InvalidKeyError",
    "ClosedError",
]


def __getattr__(name: str) -> Any:
    # S3Store pulls in boto3 (~0.3 s); load it only when someone asks for it.
    if name == "S3Store":
        from cloudtier.s3_store import S3Store

        return S3Store
    raise AttributeError(f"module 'cloudtier' has no attribute {name!r}")
