"""Which node serves an operation: the rules shared by nodes (forwarding) and clients.

=====  ====================  =============================================
mode   writes and CAS        reads and scans
=====  ====================  =============================================
ms-sc  head (first replica)  tail (last replica)
ms-ec  master (first)        master, or any replica with ``read_from="any"``
aa-sc  any replica           any replica
aa-ec  any replica           any replica
=====  ====================  =============================================

For the active-active modes a client picks one replica per shard (its "home", chosen
at random per client and kept while it answers) so a client reads its own writes in aa-ec.
"""

from __future__ import annotations

from bespokv.shardmap import ShardInfo

__all__ = ["write_node", "read_node", "ACTIVE_ACTIVE", "EPOCH_HEADER"]

ACTIVE_ACTIVE = ("aa-sc", "aa-ec")

#: Call metadata: the shard-map epoch a client (or forwarding node) routed a request with.
#: A node refuses a request routed with a map older than the shard's last change.
EPOCH_HEADER = "x-bespokv-epoch"


def write_node(info: ShardInfo, home: int = 0) -> str:
    if info.mode in ACTIVE_ACTIVE:
        return info.replicas[home % len(info.replicas)]
    return info.head


def read_node(info: ShardInfo, home: int = 0, *, read_from: str = "primary") -> str:
    if info.mode == "ms-sc":
        return info.tail
    if info.mode == "ms-ec":
        return info.replicas[home % len(info.replicas)] if read_from == "any" else info.head
    return info.replicas[home % len(info.replicas)]
