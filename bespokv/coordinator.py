"""Membership and the shard map, behind a small interface.

Nodes and clients never read the config directly for placement; they ask a
:class:`Coordinator`. :class:`StaticCoordinator` computes the shard map once from the
cluster config (single-box use: it never changes); ``etcd_coordinator.EtcdCoordinator``
keeps it in etcd, with node liveness leases, changed by transactions and watched by every
node (``[cluster] etcd = [...]`` in the config selects it: :func:`make_coordinator`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from bespokv.config import ClusterConfig
from bespokv.errors import UnsupportedError
from bespokv.shardmap import ShardInfo, ShardMap

__all__ = ["Coordinator", "StaticCoordinator", "make_coordinator"]

Listener = Callable[[ShardMap], None]
AliveListener = Callable[[set[str]], None]


class Coordinator(abc.ABC):
    """Source of truth for the shard map and membership.

    Contract: :meth:`shard_map` always returns a complete map; a new map has a higher
    ``epoch``; listeners registered with :meth:`subscribe` are called (on the caller's
    event loop) after each change, in epoch order.
    """

    #: True when the map can change (failover, rejoin); False for a fixed map
    dynamic: bool = False

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

    def subscribe_alive(self, listener: AliveListener) -> Callable[[], None]:
        """Call ``listener(alive_node_ids)`` whenever the set of live nodes, or of shards
        with a live mode-switch driver (:meth:`switching`), changes (never, for a
        coordinator that does not track liveness)."""
        return lambda: None

    def switching(self) -> set[int]:
        """Shards whose live mode switch holds a lease (:meth:`switch_lease`): a frozen
        shard without one was left by a driver that died (modeswitch.py)."""
        return set()

    def switch_lease(self, shard: int, to: str, *, wait: float = 0.0) -> AbstractAsyncContextManager[None]:
        """Held by a mode-switch driver for the whole switch of ``shard``: it marks the
        switch as alive while the driver is, and keeps a second driver out (it waits up to
        ``wait`` seconds, then gets UnavailableError)."""
        raise UnsupportedError("a live mode switch needs etcd coordination (this map is fixed); switch offline")

    def down(self) -> set[str]:
        """Nodes of the map known to be down (none, for a coordinator without liveness)."""
        return set()

    def lease_stats(self) -> dict[str, float]:
        """This node's liveness lease, for its status: ``lease_ttl_s``, ``lease_lapses``
        (times it found its lease expired while it ran: the cluster took it for dead),
        ``lease_last_lapse_ago_s`` and ``lease_longest_gap_s`` (the longest time between
        two keep-alives). Empty for a coordinator without leases."""
        return {}

    def can_serve(self) -> bool:
        """False while this node cannot be sure it is still a member (its lease may have
        expired, so the cluster may have failed over without it): it then serves nothing
        that needs its role (fencing a paused or cut-off node)."""
        return True

    async def change_shard(
        self, shard_id: int, change: Callable[[ShardInfo], ShardInfo | None]
    ) -> ShardMap | None:
        """Replace a shard's entry atomically (failover); None when nothing changed."""
        raise UnsupportedError("this coordinator's shard map is fixed")

    async def change_nodes(self, add: dict[str, str] | None = None, remove: str | None = None) -> ShardMap:
        """Add nodes to the map or remove one no shard names (node add/remove)."""
        raise UnsupportedError("this coordinator's membership is fixed")

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


def make_coordinator(config: ClusterConfig, node_id: str | None = None) -> Coordinator:
    """The coordinator a config asks for: etcd when it names endpoints, else static."""
    if config.etcd:
        from bespokv.etcd_coordinator import EtcdCoordinator

        return EtcdCoordinator(config, config.etcd, node_id=node_id, lease_ttl=config.tuning.lease_ttl)
    return StaticCoordinator(config)
