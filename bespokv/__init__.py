"""bespokv: turn single-server key-value stores into a sharded, replicated service.

A *datalet* (``bespokv.datalets``) is one single-server store; a *controlet*
(``bespokv.controlets``) replicates one shard over several datalets with a chosen topology
and consistency; nodes (``bespokv.server``) serve their shard replicas over gRPC; the
client (``bespokv.client``) routes by shard, batches and retries. See docs/bespokv.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bespokv.client import AsyncClient, CasResult, Client
    from bespokv.config import MODES, ClusterConfig, DataletSpec, load
    from bespokv.datalets.base import Datalet
    from bespokv.errors import (
        CorruptionError,
        DeadlineExceededError,
        Error,
        InvalidArgumentError,
        OverloadedError,
        UnauthenticatedError,
        UnavailableError,
        UnknownShardError,
        UnsupportedError,
        WrongShardError,
    )

#: Where each public name lives. They are imported on first use (PEP 562), so that
#: ``import bespokv`` and the ``bespokv`` command work, and can say which extra to
#: install, where the service's dependencies (grpcio, protobuf) are missing.
_HOMES = {
    "AsyncClient": "bespokv.client", "Client": "bespokv.client", "CasResult": "bespokv.client",
    "MODES": "bespokv.config", "ClusterConfig": "bespokv.config",
    "DataletSpec": "bespokv.config", "load": "bespokv.config",
    "Datalet": "bespokv.datalets.base",
    **{name: "bespokv.errors" for name in (
        "CorruptionError", "DeadlineExceededError", "Error", "InvalidArgumentError",
        "OverloadedError", "UnauthenticatedError", "UnavailableError", "UnknownShardError",
        "UnsupportedError", "WrongShardError")},
}

#: The modules of the ``service`` extra, and the message when one is missing.
SERVICE_MODULES = ("grpc", "google.protobuf", "grpc_health", "tomli_w")
INSTALL_HINT = "bespokv needs the 'service' extra: pip install 'rocksmash[service]'"


def missing_service_modules() -> list[str]:
    """The modules of the ``service`` extra that are not installed (empty: all are)."""
    from importlib.util import find_spec

    missing = []
    for name in SERVICE_MODULES:
        try:
            if find_spec(name) is None:
                missing.append(name)
        except ModuleNotFoundError:  # the parent package (google) is missing
            missing.append(name)
    return missing


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'bespokv' has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(home), name)
    except ModuleNotFoundError as e:
        if missing_service_modules():
            raise ModuleNotFoundError(f"{INSTALL_HINT} (missing: {e.name})", name=e.name) from e
        raise
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "AsyncClient",
    "Client",
    "CasResult",
    "ClusterConfig",
    "DataletSpec",
    "Datalet",
    "MODES",
    "load",
    "Error",
    "InvalidArgumentError",
    "UnknownShardError",
    "WrongShardError",
    "UnavailableError",
    "DeadlineExceededError",
    "OverloadedError",
    "UnauthenticatedError",
    "UnsupportedError",
    "CorruptionError",
]
