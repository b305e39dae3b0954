"""open_store: a store from a URL, with the wrappers stacked in one fixed order.

=================================  =====================================================
URL                                store
=================================  =====================================================
``s3://bucket`` ``s3://bucket/p``  :class:`~cloudtier.s3_store.S3Store` on ``bucket``,
                                   keys under the prefix ``p/``
``file:///abs/dir``                :class:`~cloudtier.file_store.FileStore` in ``/abs/dir``
``memory://``                      a fresh private :class:`~cloudtier.memory_store.MemoryStore`
``memory://name/p``                the process-wide memory bucket ``name``, prefix ``p/``
=================================  =====================================================

Backend options are keyword arguments (the URL carries no query string), checked against
the backend's constructor; an unknown one raises :class:`InvalidURLError` naming it.

Wrapper options, applied innermost first whatever their order in the call::

    backend -> FaultInjectingStore (faults=) -> MeteredStore (metered=) -> RetryingStore (retries=)

Faults sit next to the backend because they emulate the network; the meter sits inside
the retries so it counts every attempt (what S3 bills) and sees injected delays; retries
are outermost so the caller sees one call. Reach a layer with ``store.find(MeteredStore)``.
"""

from __future__ import annotations

import inspect
import urllib.parse
from collections.abc import Mapping
from typing import Any

from cloudtier.errors import InvalidURLError
from cloudtier.faults import FaultConfig, FaultInjectingStore
from cloudtier.file_store import FileStore
from cloudtier.memory_store import MemoryStore
from cloudtier.metered import S3_STANDARD, MeteredStore, PriceTable
from cloudtier.retrying import RetryingStore, RetryPolicy
from cloudtier.store import ObjectStore

__all__ = ["open_store", "SCHEMES"]

#: The URL schemes open_store understands.
SCHEMES = ("s3", "file", "memory")


def open_store(
    url: str,
    *,
    retries: int | RetryPolicy | None = None,
    metered: bool | PriceTable = False,
    faults: FaultConfig | Mapping[str, Any] | None = None,
    **options: Any,
) -> ObjectStore:
    """Open the object store ``url`` names, wrapped as asked.

    ``retries``: ``N`` retries (``N + 1`` attempts) with the default backoff, or a full
    :class:`RetryPolicy`; ``0``/``None`` for none. ``metered``: ``True`` for S3 Standard
    prices, or a :class:`PriceTable`. ``faults``: a :class:`FaultConfig` or a dict of its
    fields. ``options``: backend options (see each backend's class docstring).

    Raises ``InvalidURLError`` (a ``ValueError``) for a malformed URL, an unknown scheme or
    an unknown option; ``ValueError`` for a bad option value; ``StoreError`` if the
    backend cannot be opened (e.g. ``create_bucket=True`` and the server is down).
    """
    if not isinstance(url, str):
        raise InvalidURLError(f"store URLs are str, not {type(url).__name__}")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise InvalidURLError(
            f"unknown store URL scheme in {url!r}; use one of "
            + ", ".join(f"{s}://" for s in SCHEMES)
        )
    if parts.query or parts.fragment:
        raise InvalidURLError(
            f"store URL {url!r} has a query or fragment; pass options as keyword arguments"
        )
    if parts.scheme == "s3":
        if not parts.netloc:
            raise InvalidURLError(f"{url!r} names no bucket; use s3://bucket/prefix")
        store: ObjectStore = _construct(_s3_class(), url, options, parts.netloc, parts.path)
    elif parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise InvalidURLError(
                f"{url!r} has host {parts.netloc!r}; file URLs take an absolute path: "
                "file:///abs/dir"
            )
        path = urllib.parse.unquote(parts.path)
        if not path.startswith("/"):
            raise InvalidURLError(f"{url!r} needs an absolute path: file:///abs/dir")
        store = _construct(FileStore, url, options, path)
    else:
        store = _construct(MemoryStore, url, options, parts.netloc, parts.path)
    return _wrap(store, url, retries=retries, metered=metered, faults=faults)


def _s3_class() -> type[ObjectStore]:
    # Imported on first use: boto3 costs ~0.3 s to import, which memory:// and file://
    # users (and every compaction worker process) need not pay.
    from cloudtier.s3_store import S3Store

    return S3Store


def _construct(cls: type[ObjectStore], url: str, options: dict[str, Any], *args: str) -> ObjectStore:
    allowed = [
        name
        for name, p in inspect.signature(cls.__init__).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    for name in options:
        if name not in allowed:
            raise InvalidURLError(
                f"unknown option {name!r} for {url.split(':', 1)[0]}:// stores; "
                f"valid options: {', '.join(allowed)}, retries, metered, faults"
            )
    return cls(*args, **options)


def _wrap(
    store: ObjectStore,
    url: str,
    *,
    retries: int | RetryPolicy | None,
    metered: bool | PriceTable,
    faults: FaultConfig | Mapping[str, Any] | None,
) -> ObjectStore:
    try:
        if faults is not None:
            if isinstance(faults, Mapping):
                try:
                    faults = FaultConfig(**faults)
                except TypeError as e:
                    raise InvalidURLError(f"bad faults option for {url!r}: {e}") from e
            store = FaultInjectingStore(store, faults)
        if isinstance(metered, PriceTable):
            store = MeteredStore(store, metered)
        elif metered is True:
            store = MeteredStore(store, S3_STANDARD)
        elif metered is not False:
            raise ValueError(f"metered must be a bool or a PriceTable, got {metered!r}")
        if isinstance(retries, RetryPolicy):
            store = RetryingStore(store, retries)
        elif retries:
            if not isinstance(retries, int) or retries < 0:
                raise ValueError(f"retries must be an int >= 0 or a RetryPolicy, got {retries!r}")
            store = RetryingStore(store, RetryPolicy(max_attempts=retries + 1))
    except BaseException:
        store.close()
        raise
    return store
