"""Decisions a node takes when the shard map or liveness changes, as pure functions.

Each function maps what the node sees (the shard map, who is down, its own replicas and
the work it has in flight) to what it should do; ``server.py`` carries the decisions out
(the I/O: copies, merges, compare-and-swaps). Kept free of gRPC and etcd so that each
rule is tested on its own (tests/bespokv/test_reconcile.py).
"""

from __future__ import annotations

from bespokv.shardmap import ShardInfo

__all__ = ["switch_merge_asked"]


def switch_merge_asked(info: ShardInfo, me: str) -> bool:
    """Whether ``me``'s active-active replica of ``info`` must merge the others' values
    before a switch to a master-slave mode (modeswitch.py, decision 0049)."""
    return info.merge and info.frozen and me in info.replicas and not info.mode.startswith("ms")
