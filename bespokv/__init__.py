"""bespokv: turn single-server key-value stores into a sharded, replicated service.

A *datalet* (``bespokv.datalets``) is one single-server store; a *controlet*
(``bespokv.controlets``) replicates one shard over several datalets with a chosen topology
and consistency; nodes (``bespokv.server``) serve their shard replicas over gRPC; the
client (``bespokv.client``) routes by shard, batches and retries. See docs/bespokv.md.
"""

from __future__ import annotations

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
