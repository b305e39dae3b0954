"""rocksmash, embedded, with its tiering options passed through.

``rocksmash.open(data_dir, **options)`` gets, when set: ``object_store`` (the trial's
``s3://bucket/prefix``) with ``object_store_options`` holding cloudtier's S3 options
(``endpoint_url``, ``region``, ``access_key``, ``secret_key``; or a top-level
``endpoint_url`` for an engine without ``object_store_options``; with the ``store``
latency model also ``faults={"latency_s": ...}``, the per-request delay), ``local_budget``
(``10%`` or ``2GiB``), ``block_cache_size`` (``--cache-size``: the in-memory block
cache, as for every system; rocksmash's own ``cache_size``, the on-disk DataCache of
cloud blocks, keeps its default unless set with ``--opt rocksmash.cache_size=...``),
plus every ``--opt rocksmash.KEY=VALUE``. An object store asked of an engine without
the option is refused up front with a clear error, not silently dropped.
Object-store credentials reach boto3 through the standard ``AWS_*`` environment
variables, which the trial sets for the local endpoint (SeaweedFS or moto).

``rocksmash-local`` (:class:`RocksmashLocalRunner`) is the same engine with everything on
local disk even when the run has an object store: it drops the trial's object store and
local budget before opening, so one ``--network s3`` comparison can show tiered rocksmash,
all-local rocksmash, SlateDB and RocksDB side by side.

Reads and writes call the engine's own ``get``/``put`` (no adapter frame per operation);
the load phase uses ``WriteBatch``; settle ``compact`` is ``flush()`` then
``compact_range()``. Cache hit ratios and object-store request counts are read from
``db.stats()`` by :mod:`bench.runners.introspect`.
"""

from __future__ import annotations

import os
from itertools import islice
from typing import Any

from bench.runners.base import Runner, RunnerStats
from bench.runners.introspect import cache_pairs, flatten, json_safe, object_store_counts

__all__ = ["RocksmashRunner", "RocksmashLocalRunner"]


class RocksmashRunner(Runner):
    name = "rocksmash"
    uses_object_store = True
    takes_store_latency = True

    def open(self) -> None:
        import rocksmash

        cfg = self.config
        known = _option_names(rocksmash)
        opts: dict[str, Any] = {}
        target = cfg.object_store
        if target is not None:
            if known is not None and "object_store" not in known:
                raise RuntimeError("this rocksmash has no object_store option yet; "
                                   "run it with --network local")
            opts["object_store"] = target.url
            if known is not None and "object_store_options" in known:
                # cloudtier's S3 backend options (see cloudtier.s3_store.S3Store)
                # A connection per GET in flight: client threads (the tiering experiment
                # runs up to 64) plus rocksmash's background fetch threads.
                opts["object_store_options"] = dict(target.store_options(),
                                                    max_pool_connections=128)
            elif target.endpoint_url:
                opts["endpoint_url"] = target.endpoint_url
            if target.access_key_id:
                os.environ.setdefault("AWS_ACCESS_KEY_ID", target.access_key_id)
                os.environ.setdefault("AWS_SECRET_ACCESS_KEY", target.secret_access_key or "")
            os.environ.setdefault("AWS_DEFAULT_REGION", target.region)
            if cfg.local_budget:
                opts["local_budget"] = cfg.local_budget
        if cfg.cache_size:
            # --cache-size is every system's in-memory block cache: rocksmash's
            # block_cache_size (its cache_size is the on-disk DataCache of cloud blocks).
            name = "block_cache_size" if known is None or "block_cache_size" in known else "cache_size"
            opts[name] = cfg.cache_size
        opts.update(cfg.options)
        self._opts = opts
        self._rm = rocksmash
        self._db = db = rocksmash.open(str(cfg.data_dir / "rocksmash"), **opts)
        self.read = db.get  # type: ignore[method-assign]
        self.update = db.put  # type: ignore[method-assign]
        self.insert = db.put  # type: ignore[method-assign]

    def load_batch(self, keys: list[bytes], values: list[bytes]) -> None:
        wb = self._rm.WriteBatch()
        if hasattr(wb, "put_many"):
            wb.put_many(zip(keys, values))
        else:  # a rocksmash from before WriteBatch.put_many
            for k, v in zip(keys, values):
                wb.put(k, v)
        self._db.write(wb)

    def read(self, key: bytes) -> bytes | None:  # replaced in open()
        return self._db.get(key)

    def update(self, key: bytes, value: bytes) -> None:  # replaced in open()
        self._db.put(key, value)

    def scan(self, start: bytes, count: int) -> int:
        with self._db.scan(start=start) as it:
            return len(list(islice(it, count)))

    def settle(self, mode: str) -> str:
        if mode == "none":
            return "nothing"
        self._db.flush()
        if mode == "flush":
            return "flush"
        self._db.compact_range()
        return "flush + compact_range()"

    def close(self) -> None:
        self._db.close()

    def stats(self) -> RunnerStats:
        try:
            raw = self._db.stats()
        except Exception as e:  # stats are a nice-to-have; never fail a trial on them
            return RunnerStats(raw={"error": repr(e)})
        if not isinstance(raw, dict):
            return RunnerStats(raw={"stats": json_safe(raw)})
        return RunnerStats(object_store=object_store_counts(raw), caches=cache_pairs(flatten(raw)),
                           raw=json_safe(raw))

    def tier_counters(self, stats: RunnerStats) -> dict[str, int | None]:
        out = super().tier_counters(stats)
        raw = stats.raw or {}
        block_cache = raw.get("block_cache")
        if isinstance(block_cache, dict):
            out["bc_hits"], out["bc_misses"] = block_cache["hits"], block_cache["misses"]
            out["bc_stored_hits"] = block_cache.get("stored_hits")  # (cloud blocks, 0034)
        dc = (raw.get("cloud") or {}).get("data_cache")
        if dc:
            out["dc_hits"], out["dc_misses"] = dc["hits"], dc["misses"]
            out["fills"] = raw.get("cache_fills_by_compaction", 0)
        kc = (raw.get("cloud") or {}).get("key_cache")
        if kc:
            out["kc_hits"], out["kc_misses"] = kc["hits"], kc["misses"]
        return out

    def tier_shape(self, stats: RunnerStats) -> dict[str, Any]:
        raw = stats.raw or {}
        if "table_bytes" not in raw:
            return {}
        cloud = raw.get("cloud") or {}
        return {"table_bytes": raw["table_bytes"],
                "local_table_bytes": cloud.get("local_table_bytes", raw["table_bytes"]),
                "cloud_table_bytes": cloud.get("cloud_table_bytes", 0),
                "cloud_tables": cloud.get("cloud_tables", 0),
                "first_cloud_level": cloud.get("first_cloud_level"),
                "meta_cache_bytes": cloud.get("meta_cache_bytes"),
                "meta_bytes_pct_of_cloud": cloud.get("meta_bytes_pct_of_cloud"),
                "data_cache_bytes": (cloud.get("data_cache") or {}).get("bytes"),
                "key_cache_bytes": (cloud.get("key_cache") or {}).get("disk_bytes"),
                "block_cache_used": (raw.get("block_cache") or {}).get("used"),
                "block_cache_used_stored": (raw.get("block_cache") or {}).get("used_stored"),
                "levels": [[lv["level"], lv["files"], lv["bytes"]]
                           for lv in raw.get("levels", []) if lv["files"]]}

    def describe(self) -> dict[str, Any]:
        import importlib.metadata as md

        try:
            version = md.version("rocksmash")
        except md.PackageNotFoundError:
            version = getattr(self._rm, "__version__", "source tree")
        return {"rocksmash": version, "open_options": json_safe(self._opts)}


def _option_names(rocksmash: Any) -> set[str] | None:
    """The option names ``rocksmash.Options`` declares, or None if it cannot tell."""
    import dataclasses

    options = getattr(rocksmash, "Options", None)
    if options is None or not dataclasses.is_dataclass(options):
        return None
    return {f.name for f in dataclasses.fields(options)}


class RocksmashLocalRunner(RocksmashRunner):
    """rocksmash with every level on local disk, whatever ``--network`` says.

    The object store and the local budget of the trial are ignored (nothing is sent to
    the object store, so the trial's bucket prefix stays empty); every other option,
    ``--cache-size`` and ``--opt rocksmash-local.KEY=VALUE`` included, applies as for
    ``rocksmash``.
    """

    name = "rocksmash-local"
    uses_object_store = False

    def open(self) -> None:
        import dataclasses

        self.config = dataclasses.replace(self.config, object_store=None, local_budget=None,
                                          local_budget_bytes=None)
        super().open()
