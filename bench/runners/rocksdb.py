"""RocksDB through ``rocksdict``, configured to be comparable with rocksmash.

Options (each settable with ``--opt rocksdb.KEY=VALUE``):

=====================  =========  ================================================
key                    default    why
=====================  =========  ================================================
``compression``        ``lz4``    rocksmash's local-table codec
``bloom_bits``         ``10``     full-key bloom filter, 10 bits/key, as rocksmash
``block_size``         ``4096``   4 KiB data blocks, as rocksmash
``background_jobs``    ``2``      the machine has 2 cores
``statistics``         ``true``   needed for block-cache hit ratios (costs a few %)
=====================  =========  ================================================

The WAL is on and writes are not synced (``WriteOptions.sync = False``), like
rocksmash's default group commit without fsync per write. The block cache is
``--cache-size``. Values are stored raw (``raw_mode``), not pickled.
"""

from __future__ import annotations

import re
from itertools import islice
from typing import Any

from bench.runners.base import Runner, RunnerStats

__all__ = ["RocksDBRunner"]

_DEFAULT_CACHE = 64 << 20
_TICKER_RE = re.compile(r"^(rocksdb\.[\w.]+) COUNT : (\d+)$", re.MULTILINE)


class RocksDBRunner(Runner):
    name = "rocksdb"

    def open(self) -> None:
        import rocksdict as rd

        o = self.config.options
        self._settings: dict[str, Any] = {
            "compression": str(o.get("compression", "lz4")),
            "bloom_bits": int(o.get("bloom_bits", 10)),
            "block_size": int(o.get("block_size", 4096)),
            "background_jobs": int(o.get("background_jobs", 2)),
            "statistics": bool(o.get("statistics", True)),
            "block_cache_bytes": int(self.config.cache_size or _DEFAULT_CACHE),
            "wal": True,
            "sync": False,
        }
        s = self._settings
        opts = rd.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_compression_type(getattr(rd.DBCompressionType, s["compression"])())
        opts.set_max_background_jobs(s["background_jobs"])
        table = rd.BlockBasedOptions()
        table.set_block_size(s["block_size"])
        table.set_bloom_filter(s["bloom_bits"], False)
        table.set_block_cache(rd.Cache(s["block_cache_bytes"]))
        opts.set_block_based_table_factory(table)
        if s["statistics"]:
            opts.enable_statistics()
        self._opts = opts
        self._db = db = rd.Rdict(str(self.config.data_dir / "rocksdb"), opts)
        wo = rd.WriteOptions()
        wo.sync = False
        wo.disable_wal = False
        db.set_write_options(wo)
        self._rd = rd
        # The hot operations are rocksdict's own methods: no adapter frame per call.
        self.read = db.get  # type: ignore[method-assign]
        self.update = db.put  # type: ignore[method-assign]
        self.insert = db.put  # type: ignore[method-assign]

    def load_batch(self, keys: list[bytes], values: list[bytes]) -> None:
        wb = self._rd.WriteBatch(raw_mode=True)
        for k, v in zip(keys, values):
            wb.put(k, v)
        self._db.write(wb)

    def read(self, key: bytes) -> bytes | None:  # replaced in open()
        return self._db.get(key)

    def update(self, key: bytes, value: bytes) -> None:  # replaced in open()
        self._db.put(key, value)

    def scan(self, start: bytes, count: int) -> int:
        # items(from_key=...) is rocksdict's fastest forward scan (it fetches in chunks).
        return len(list(islice(self._db.items(from_key=start), count)))

    def settle(self, mode: str) -> str:
        if mode == "none":
            return "nothing"
        self._db.flush()
        if mode == "flush":
            return "flush"
        self._db.compact_range(None, None)
        return "flush + compact_range(all)"

    def close(self) -> None:
        self._db.close()

    def stats(self) -> RunnerStats:
        raw: dict[str, Any] = {}
        for prop in ("rocksdb.estimate-live-data-size", "rocksdb.total-sst-files-size",
                     "rocksdb.block-cache-usage", "rocksdb.estimate-num-keys",
                     "rocksdb.num-files-at-level0", "rocksdb.num-files-at-level1",
                     "rocksdb.num-files-at-level2", "rocksdb.num-files-at-level3"):
            try:
                raw[prop] = self._db.property_int_value(prop)
            except Exception:  # a property this RocksDB build lacks
                pass
        caches: dict[str, tuple[int, int]] = {}
        if self._settings["statistics"]:
            tickers = {m.group(1): int(m.group(2))
                       for m in _TICKER_RE.finditer(self._opts.get_statistics() or "")}
            for name in ("block.cache", "block.cache.data", "block.cache.index", "block.cache.filter"):
                hit, miss = tickers.get(f"rocksdb.{name}.hit"), tickers.get(f"rocksdb.{name}.miss")
                if hit is not None and miss is not None:
                    caches[name.replace(".", "_")] = (hit, miss)
            for t in ("rocksdb.bloom.filter.useful", "rocksdb.bloom.filter.full.positive",
                      "rocksdb.bloom.filter.full.true.positive", "rocksdb.bytes.read",
                      "rocksdb.bytes.written", "rocksdb.compact.read.bytes",
                      "rocksdb.compact.write.bytes", "rocksdb.flush.write.bytes",
                      "rocksdb.wal.bytes"):
                if t in tickers:
                    raw[t] = tickers[t]
        return RunnerStats(object_store=None, caches=caches, raw=raw)

    def describe(self) -> dict[str, Any]:
        import importlib.metadata as md

        return {"rocksdict": md.version("rocksdict"), **self._settings}
