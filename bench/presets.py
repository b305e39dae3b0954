"""Named comparisons (``--preset NAME``). Explicit command-line options override them."""

from __future__ import annotations

from typing import Any

__all__ = ["PRESETS"]

PRESETS: dict[str, dict[str, Any]] = {
    "engine-core": {
        "description": "the engine comparison: YCSB A, B, C, E, F; 1M records of 24-byte keys "
                       "and 100-byte values; zipfian; one client thread; rocksmash vs RocksDB, "
                       "both on local disk",
        "workloads": ["a", "b", "c", "e", "f"],
        "records": 1_000_000,
        "ops": 1_000_000,
        "key_size": 24,
        "value_size": 100,
        "distribution": "zipfian",
        "threads": 1,
        "systems": ["rocksmash", "rocksdb"],
        "baseline": "rocksdb",
        "network": "local",
    },
    "tiered-s3": {
        "description": "the tiering comparison: YCSB A-F; 1M records; rocksmash with a 10% local "
                       "budget and SlateDB on the same emulated S3 (SeaweedFS, or moto where it is "
                       "not installed, behind a 20 ms/request proxy); all-local RocksDB as the reference; each run phase capped at 2 "
                       "minutes (a read that misses every local cache costs >= 20 ms)",
        "workloads": ["a", "b", "c", "d", "e", "f"],
        "records": 1_000_000,
        "ops": 200_000,
        "systems": ["rocksmash", "slatedb", "rocksdb"],
        "baseline": "rocksdb",
        "network": "s3",
        "local_budget": "10%",
        "max_seconds": 120.0,
    },
    "demo": {
        "description": "the demo (`make demo`): YCSB A, B, C, E on 200,000 records, 1,000,000 "
                       "operations each, one client thread; rocksmash tiered (its default one "
                       "local budget, 10% of the data; the colder levels in S3: SeaweedFS, or "
                       "moto where it is not installed, behind a 20 ms/request proxy, started "
                       "for the run) vs the same engine all-local vs RocksDB all-local; each "
                       "run phase capped at 20 s; about 5 minutes on 2 cores",
        "workloads": ["a", "b", "c", "e"],
        "records": 200_000,
        "ops": 1_000_000,
        "systems": ["rocksmash", "rocksmash-local", "rocksdb"],
        "baseline": "rocksdb",
        "network": "s3",
        "local_budget": "10%",
        "max_seconds": 20.0,
    },
    "smoke": {
        "description": "a quick end-to-end check: every workload, 5,000 records and operations, "
                       "RocksDB and the no-op system",
        "workloads": ["a", "b", "c", "d", "e", "f"],
        "records": 5_000,
        "ops": 5_000,
        "systems": ["rocksdb", "noop"],
        "baseline": "rocksdb",
    },
    "overhead": {
        "description": "the driver's own cost per operation: the no-op systems (threads and "
                       "asyncio) on every workload, 1M operations",
        "workloads": ["a", "b", "c", "d", "e", "f"],
        "records": 100_000,
        "ops": 1_000_000,
        "systems": ["noop", "noop-async"],
        "baseline": "noop",
    },
    "service": {
        "description": "the service comparison: YCSB A and B, 20,000 records, 50,000 operations "
                       "from 64 asyncio client tasks; bespokv in each of its four modes (3 node "
                       "processes, 3 replicas, in-memory datalet, batching client) vs a 3-member "
                       "etcd cluster, all on loopback; etcd is the baseline; each run phase "
                       "capped at 60 s; 3-5 minutes on 2 cores",
        "workloads": ["a", "b"],
        "records": 20_000,
        "ops": 50_000,
        "threads": 64,
        "systems": ["bespokv-ms-sc", "bespokv-ms-ec", "bespokv-aa-sc", "bespokv-aa-ec", "etcd"],
        "baseline": "etcd",
        "max_seconds": 60.0,
    },
}
