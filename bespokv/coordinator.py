"""Membership and the shard map, behind a small interface.

Nodes and clients never read the config directly for placement; they ask a
:class:`Coordinator`. This issue ships :class:`StaticCoordinator` (the shard map is
computed once from the cluster config and never changes). The next one adds an etcd-backed
coordinator with leases, failover and epochs behind the same interface, which is why it
has ``subscribe`` and ``report_unreachable`` although the static one does nothing with them.
"""

from __future__ import annotations

import abc
from collections.abc import Callable

from bespokv.config import ClusterConfig
from bespokv.shardmap import ShardMap

__all__ = ["Coordinator", "StaticCoordinator"]

Listener = Callable[[ShardMap], None]


class Coordinator(abc.ABC):
    """Source of truth for the shard map and membership.

    Contract: :meth:`shard_map` always returns a complete map; a new map has a higher
    ``epoch``; listeners registered with :meth:`subscribe` are called (on the caller's
    event loop) after each change, in epoch order.
    """

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Connect to the backing store (no-op for the static coordinator)."""

    async def stop(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""

    @abc.abstractmethod
    def shard_map(self) -> ShardMap:
        """The current shard map."""

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(new_map)`` after every change; returns an unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    async def report_unreachable(self, node_id: str) -> None:  # noqa: B027 - optional hook
        """A node could not reach ``node_id``; a dynamic coordinator may start a failover."""

    @property
    def _listeners(self) -> list[Listener]:
        ls = self.__dict__.get("_listeners_list")
        if ls is None:
            ls = self.__dict__["_listeners_list"] = []
        return ls


class StaticCoordinator(Coordinator):
    """The shard map of a cluster config file, fixed for the life of the process."""

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self._map = ShardMap.from_config(config)

    def shard_map(self) -> ShardMap:
        return self._map
