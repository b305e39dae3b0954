"""SlateDB through its PyPI binding (``slatedb.uniffi``, asyncio API).

SlateDB keeps everything in an object store. Without ``--network s3`` it uses the local
file system as its object store (``file:///`` rooted at the trial's data directory);
with it, the bucket and prefix of the trial, through the same endpoint (and delay proxy)
as every other system.

Comparable settings: LZ4 compression, 4 KiB SST blocks, the default bloom filter
(10 bits/key), WAL on, writes not awaited for durability (the put returns once the
write is in the memtable and the WAL buffer; SlateDB flushes the WAL every 100 ms), an
in-memory block cache of ``--cache-size``. With a local budget (``--local-budget``
resolved to bytes by the driver) SlateDB also gets an on-disk object-store cache of that
size in the data directory, its nearest equivalent of rocksmash's local tier.

``--opt slatedb.KEY=VALUE`` sets any key of SlateDB's ``Settings`` (dotted paths work,
e.g. ``--opt slatedb.l0_sst_size_bytes=16777216``, ``--opt slatedb.compression_codec=Zstd``).
"""

from __future__ import annotations

import json
from typing import Any

from bench.runners.base import AsyncRunner, RunnerStats

__all__ = ["SlateDBRunner"]

_DEFAULT_CACHE = 64 << 20
_CACHE_ID = 1


class SlateDBRunner(AsyncRunner):
    name = "slatedb"
    uses_object_store = True

    async def open(self) -> None:
        import slatedb.uniffi as sd

        self._sd = sd
        cfg = self.config
        target = cfg.object_store
        if target is not None:
            # Explicit (local server's) credentials, or the usual AWS_* variables for a real endpoint.
            b = (sd.ObjectStoreBuilder(sd.ObjectStoreType.S3) if target.access_key_id
                 else sd.ObjectStoreBuilder.from_env(sd.ObjectStoreType.S3))
            b.with_config("bucket", target.bucket)
            b.with_config("region", target.region)
            if target.endpoint_url:
                b.with_config("endpoint", target.endpoint_url)
                b.with_config("allow_http", "true" if target.allow_http else "false")
            if target.access_key_id:
                b.with_config("access_key_id", target.access_key_id)
                b.with_config("secret_access_key", target.secret_access_key or "")
            store = b.build()
            path = target.prefix.strip("/") or "slatedb"
            where = target.url
        else:
            store = sd.ObjectStore.resolve("file:///")
            path = str(cfg.data_dir / "slatedb").lstrip("/")
            where = f"file:///{path}"

        settings = sd.Settings.default()
        settings.set("compression_codec", json.dumps("Lz4"))
        budget = cfg.local_budget_bytes
        if target is not None and budget:
            settings.set("object_store_cache_options.root_folder",
                         json.dumps(str(cfg.data_dir / "object-store-cache")))
            settings.set("object_store_cache_options.max_cache_size_bytes", json.dumps(int(budget)))
        for key, value in cfg.options.items():
            settings.set(key, json.dumps(value))

        builder = sd.DbBuilder(path, store)
        builder.with_settings(settings)
        builder.with_sst_block_size(sd.SstBlockSize.BLOCK4_KIB)
        cache_bytes = int(cfg.cache_size or _DEFAULT_CACHE)
        builder.with_db_cache(sd.DbCache.new_moka_cache(
            sd.MokaCacheOptions(max_capacity=cache_bytes, time_to_live=None, time_to_idle=None)), _CACHE_ID)
        self._metrics = sd.DefaultMetricsRecorder()
        builder.with_metrics_recorder(self._metrics)
        self._db = await builder.build()
        self._describe = {
            "slatedb": _version(), "where": where, "block_size": 4096, "compression": "lz4",
            "block_cache_bytes": cache_bytes, "settings": json.loads(settings.to_json_string()),
        }
        self._range = sd.KeyRange

    async def load_batch(self, keys: list[bytes], values: list[bytes]) -> None:
        wb = self._sd.WriteBatch()
        for k, v in zip(keys, values):
            wb.put(k, v)
        await self._db.write(wb)

    async def read(self, key: bytes) -> bytes | None:
        return await self._db.get(key)

    async def update(self, key: bytes, value: bytes) -> None:
        await self._db.put(key, value)

    async def scan(self, start: bytes, count: int) -> int:
        it = await self._db.scan(self._range(start=start, start_inclusive=True, end=None, end_inclusive=False))
        return len(await it.next_batch(count))

    async def settle(self, mode: str) -> str:
        if mode == "none":
            return "nothing"
        sd = self._sd
        await self._db.flush_with_options(sd.FlushOptions(flush_type=sd.FlushType.MEM_TABLE))
        if mode == "flush":
            return "flush memtable"
        return "flush memtable (SlateDB compacts in the background; no manual compaction API)"

    async def close(self) -> None:
        await self._db.shutdown()

    def stats(self) -> RunnerStats:
        store: dict[str, int] = {}
        caches: dict[str, list[int]] = {}
        raw: dict[str, Any] = {}
        for m in self._metrics.snapshot():
            labels = {lab.key: lab.value for lab in m.labels}
            value = m.value
            if not (value.is_counter() or value.is_gauge()):
                continue
            n = int(value[0])
            if m.name == "slatedb.object_store.request_count":
                api = labels.get("api", "other")
                kind = next((k for k in ("get", "put", "list", "head", "delete") if api.startswith(k)), "other")
                if api.startswith("multipart"):
                    kind = "put"
                store[kind] = store.get(kind, 0) + n
            elif m.name == "slatedb.db_cache.access_count":
                pair = caches.setdefault(labels.get("entry_kind", "cache"), [0, 0])
                pair[0 if labels.get("result") == "hit" else 1] += n
            elif not labels:
                raw[m.name] = n
        if self.config.object_store is None:
            store = {}  # the "object store" is the local file system: not billable requests
        return RunnerStats(object_store=store or None,
                           caches={k: (v[0], v[1]) for k, v in caches.items()}, raw=raw)

    def tier_counters(self, stats: RunnerStats) -> dict[str, int | None]:
        out = super().tier_counters(stats)
        raw = stats.raw or {}
        if "data_block" in stats.caches:  # its in-memory block cache
            out["bc_hits"], out["bc_misses"] = stats.caches["data_block"]
        # Its on-disk cache of object-store parts.
        hit = raw.get("slatedb.object_store_cache.part_hit_count")
        access = raw.get("slatedb.object_store_cache.part_access_count")
        if hit is not None and access is not None:
            out["dc_hits"], out["dc_misses"] = hit, access - hit
            # SlateDB counts its GETs above its on-disk cache: a GET answered from a cached
            # part never reaches the network (the proxy confirms it), so it is not counted.
            out["gets"] = max(0, (out["gets"] or 0) - hit)
        return out

    def tier_shape(self, stats: RunnerStats) -> dict[str, Any]:
        cache = (stats.raw or {}).get("slatedb.object_store_cache.cache_bytes")
        return {} if cache is None else {"disk_cache_bytes": cache}

    def describe(self) -> dict[str, Any]:
        return self._describe


def _version() -> str:
    import importlib.metadata as md

    return md.version("slatedb")
