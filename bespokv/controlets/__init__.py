"""Controlets: one per (replication topology, consistency level).

======  ==================  =============  ===========================================
mode    topology            consistency    module
======  ==================  =============  ===========================================
ms-sc   master-slave        strong         ``chain.py`` (chain replication)
ms-ec   master-slave        eventual       ``primary.py`` (asynchronous primary-backup)
aa-sc   active-active       strong         ``quorum.py`` (ABD majority registers)
aa-ec   active-active       eventual       ``lww.py`` (last writer wins, HLC, anti-entropy)
======  ==================  =============  ===========================================

Each shard names its mode in the cluster config; every controlet works with every datalet.
"""

from __future__ import annotations

from bespokv.controlets.base import Controlet, ShardContext
from bespokv.controlets.chain import ChainControlet
from bespokv.controlets.lww import LwwControlet
from bespokv.controlets.primary import PrimaryBackupControlet
from bespokv.controlets.quorum import QuorumControlet

__all__ = [
    "Controlet",
    "ShardContext",
    "ChainControlet",
    "PrimaryBackupControlet",
    "QuorumControlet",
    "LwwControlet",
    "CONTROLETS",
    "make_controlet",
]

CONTROLETS: dict[str, type[Controlet]] = {
    "ms-sc": ChainControlet,
    "ms-ec": PrimaryBackupControlet,
    "aa-sc": QuorumControlet,
    "aa-ec": LwwControlet,
}


def make_controlet(ctx: ShardContext) -> Controlet:
    return CONTROLETS[ctx.shard.mode](ctx)
