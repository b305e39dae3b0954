"""A master-slave replica returning to its shard: catch up, then ask to be put back.

A node that was dropped from a ms-sc or ms-ec shard (it was killed and restarted, or paused
or cut off long enough for its lease to expire) serves nothing of that shard. When it holds
its lease again, and the shard runs with fewer replicas than the config gives it, the node
rejoins:

1. **State transfer.** It empties its replica and pulls a full copy from the shard's
   *source*: the tail of a chain (which holds exactly the committed writes) or the master
   of a primary-backup shard (every replica is a prefix of its log). The copy is followed
   by the entries written while it streamed, so the replica ends exact at the source's
   position of that moment.
2. **Change stream, before being a member.** It pulls again (only the entries after its
   position now) so that the gap the upstream must close after step 3 is short.
3. **Membership.** One compare-and-swap on the map epoch appends the node at the end of the
   shard's replicas, only if the shard has not changed since the source was chosen (a
   failover in between restarts the rejoin from step 1: a master promoted meanwhile may
   have numbered new writes after a shorter log than the one copied).
4. **Serving.** In the new map the node's upstream (the old tail, or the master) feeds it
   over the normal replication stream; the handshake sends whatever it lacks from the log.
   The node is *synced* (serves reads, counts as tail) only once it has applied everything
   its upstream held when that stream started under the new epoch, so a new tail never
   answers a read without a write the old tail had acknowledged.

Why always a full copy (never resume from the node's own stored position): the node may
hold entries no other replica has (an old head's writes that never reached the tail),
numbered like different writes the new head committed after the failover. A position alone
cannot tell such a log from a true prefix.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable

from bespokv.config import Tuning
from bespokv.controlets.catchup import pull
from bespokv.controlets.replstore import ReplicatedStore
from bespokv.coordinator import Coordinator
from bespokv.datalets.worker import DataletWorker
from bespokv.peers import PeerPool
from bespokv.reconcile import may_rejoin
from bespokv.shardmap import ShardInfo

__all__ = ["rejoin", "source_of"]

log = logging.getLogger(__name__)

#: Seconds between tries of a rejoin that failed (source unreachable, map changed).
RETRY = 0.5


def source_of(info: ShardInfo) -> str:
    """Whom a returning replica copies from: the chain's tail, or the master."""
    return info.tail if info.mode == "ms-sc" else info.head


async def rejoin(
    *,
    coordinator: Coordinator,
    peers: PeerPool,
    me: str,
    shard: int,
    replicas: int,
    worker: Callable[[], DataletWorker],
    tuning: Tuning,
) -> bool:
    """Run steps 1-3 for ``shard`` until ``me`` is one of its replicas again (True), or the
    shard no longer needs it, or not now (reconcile.may_rejoin: it has ``replicas``
    replicas already, or a move or a freeze is under way: False). ``worker``
    gives the replica's datalet worker (made on first use). Retries every failure."""
    while True:
        # Only a node that holds its lease may join: the cluster drops only nodes whose
        # lease it saw expire, so a member without one would never be dropped again.
        if not coordinator.can_serve() or me in coordinator.down():
            await asyncio.sleep(0.1)
            continue
        info = coordinator.shard_map().shard(shard)
        if me in info.replicas:
            return True
        if not may_rejoin(info, me, replicas):  # full, or a move or a freeze under way
            return False
        source = source_of(info)
        try:
            store = ReplicatedStore(worker(), tuning)
            await store.begin_copy()  # nothing of the old replica survives (see above)
            await pull(store, peers, shard, source, me)  # 1: the full copy
            await pull(store, peers, shard, source, me)  # 2: what was written meanwhile

            def change(s: ShardInfo, seen: ShardInfo = info) -> ShardInfo | None:
                if s != seen or me in s.replicas:
                    return None
                return dataclasses.replace(s, replicas=(*s.replicas, me))

            new = await coordinator.change_shard(shard, change)
            if new is not None and me in new.shard(shard).replicas:
                log.warning(
                    "node %s: rejoined shard %s after a copy from %s at seq %d: %s (epoch %d)",
                    me, shard, source, store.seq, ",".join(new.shard(shard).replicas), new.epoch,
                )
                return True
            log.info("node %s: shard %s changed while rejoining; starting over", me, shard)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # retried: the source may be failing over
            log.info("node %s: rejoining shard %s from %s failed: %r; retrying", me, shard, source, exc)
        await asyncio.sleep(RETRY)
