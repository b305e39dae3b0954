"""Reads do not queue behind writes stuck on a broken chain.

A chain with a paused replica takes no writes (the head waits for the tail), but its
tail still serves reads. A client whose batched writes to node T hang (T heads a broken
chain) must still get its reads from T (T is the tail of another shard) at once: reads
and writes travel in separate batched ``Multi`` calls. The fixed map (no etcd) keeps the
chain broken for as long as the node is paused, so "at once" means: while every write
is still pending."""

from __future__ import annotations

import asyncio

import pytest

from bespokv.config import Tuning
from bespokv.testing import LocalCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

#: Writes stay stuck for this long (far longer than the test waits for the read).
STUCK = 60.0


def _key_of(smap, shard: int, prefix: bytes) -> bytes:
    return next(k for k in (prefix + b"%d" % i for i in range(10_000)) if smap.shard_for(k) == shard)


def test_a_read_is_answered_while_writes_to_the_same_node_hang():
    tuning = Tuning(request_timeout=STUCK)
    with LocalCluster(3, replicas=3, shards=3, mode="ms-sc", datalet="memory", tuning=tuning) as cluster:

        async def run() -> None:
            client = cluster.async_client(timeout=STUCK, retries=0)
            try:
                smap = await client.shard_map()
                read_shard = smap.shards[0]
                t = read_shard.tail
                write_shard = next(s for s in smap.shards.values() if s.head == t)
                paused = next(n for n in write_shard.replicas if n != t)
                rkey = _key_of(smap, read_shard.id, b"r")
                await client.put(rkey, b"before")
                cluster.pause(paused)
                try:
                    # Two write batches in flight to t (its client batcher's limit), then more.
                    writes = []
                    for i in range(6):
                        writes.append(asyncio.ensure_future(client.put(_key_of(smap, write_shard.id, b"w%d-" % i), b"x")))
                        await asyncio.sleep(0.05)
                    got = await asyncio.wait_for(client.get(rkey), STUCK / 3)
                    assert got == b"before"
                    assert not any(w.done() for w in writes), [w for w in writes if w.done()]
                finally:
                    cluster.resume(paused)
                await asyncio.wait_for(asyncio.gather(*writes), STUCK)  # the chain commits them now
            finally:
                await client.close()

        asyncio.run(run())
