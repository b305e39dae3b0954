"""Datalets: the single-server stores bespokv replicates (see ``base.py`` for the protocol).

Built in: ``memory`` (ordered, volatile), ``rocksdb`` (rocksdict), ``rocksmash`` (this
project's engine) and ``redis`` (a real Redis server over RESP). Any other class is named in
the config as ``kind = "package.module:ClassName"``; it is constructed with the remaining
options as keyword arguments.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from bespokv.config import DataletSpec
from bespokv.datalets.base import RESERVED_PREFIX, Datalet, DataletAdapter, Op, ensure_datalet
from bespokv.datalets.memory import MemoryDatalet
from bespokv.errors import InvalidArgumentError

__all__ = [
    "Datalet",
    "DataletAdapter",
    "MemoryDatalet",
    "Op",
    "RESERVED_PREFIX",
    "BUILTIN",
    "ensure_datalet",
    "make_datalet",
    "datalet_path",
    "DataletFactory",
]

#: ``factory(node_id, shard_id) -> datalet``: how a node gets one datalet per shard replica.
DataletFactory = Callable[[str, int], Datalet]


def _rocksdb(**kw: Any) -> Datalet:
    from bespokv.datalets.rocksdb import RocksDBDatalet

    return RocksDBDatalet(**kw)


def _rocksmash(**kw: Any) -> Datalet:
    from bespokv.datalets.rocksmash import RocksmashDatalet

    return RocksmashDatalet(**kw)


def _redis(**kw: Any) -> Datalet:
    from bespokv.datalets.redis import RedisDatalet

    return RedisDatalet(**kw)


BUILTIN: dict[str, Callable[..., Datalet]] = {
    "memory": MemoryDatalet,
    "rocksdb": _rocksdb,
    "rocksmash": _rocksmash,
    "redis": _redis,
}

_PATH_KINDS = {"rocksdb", "rocksmash"}


def _fill(v: Any, subst: dict[str, str]) -> Any:
    if isinstance(v, str):
        try:
            return v.format(**subst)
        except (KeyError, IndexError, ValueError):
            return v
    return v


def datalet_path(spec: DataletSpec, *, node: str, shard: int, base_dir: str = ".") -> str | None:
    """The directory of ``node``'s replica of ``shard`` for a path-based kind, else None."""
    if spec.kind not in _PATH_KINDS:
        return None
    raw = spec.options.get("path", "{dir}/data/{node}")
    path = _fill(raw, {"node": node, "shard": str(shard), "dir": base_dir})
    if "{shard}" not in str(raw):
        path = os.path.join(path, f"shard-{shard}")
    if not os.path.isabs(path):
        path = os.path.join(base_dir, path)
    return str(path)


def make_datalet(spec: DataletSpec, *, node: str, shard: int, base_dir: str = ".") -> Datalet:
    """Build the datalet holding ``node``'s replica of ``shard`` from a config spec.

    Path-based kinds get one directory per shard: ``path`` (default ``{dir}/data/{node}``)
    plus ``/shard-<n>`` unless the path already uses ``{shard}``. Redis gets the namespace
    ``<node>/<shard>`` unless one is given.
    """
    subst = {"node": node, "shard": str(shard), "dir": base_dir}
    opts = {k: _fill(v, subst) for k, v in spec.options.items()}
    kind = spec.kind
    path = datalet_path(spec, node=node, shard=shard, base_dir=base_dir)
    if path is not None:
        opts["path"] = path
    elif kind == "redis":
        opts.setdefault("namespace", f"{node}/{shard}")
    factory = BUILTIN.get(kind)
    if factory is None:
        if ":" not in kind:
            raise InvalidArgumentError(
                f"unknown datalet kind {kind!r}: use one of {sorted(BUILTIN)} or 'package.module:ClassName'"
            )
        mod_name, _, attr = kind.partition(":")
        try:
            factory = getattr(importlib.import_module(mod_name), attr)
        except (ImportError, AttributeError) as exc:
            raise InvalidArgumentError(f"cannot load datalet class {kind!r}: {exc}") from exc
    return ensure_datalet(factory(**opts))
