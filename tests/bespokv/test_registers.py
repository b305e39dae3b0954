"""The versioned registers' local machinery, on one replica without peers: group commit of
store-if-newer, which digest buckets anti-entropy exchanges, and which replicas a quorum
phase asks (fake calls)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from bespokv import versioned
from bespokv.controlets.base import ShardContext
from bespokv.controlets.quorum import QuorumControlet
from bespokv.config import Tuning
from bespokv.controlets.registers import DIGEST_BUCKETS, QuorumError, VersionedControlet
from bespokv.datalets.memory import MemoryDatalet
from bespokv.datalets.worker import DataletWorker
from bespokv.hlc import HybridClock
from bespokv.shardmap import ShardInfo


class CountingGate(MemoryDatalet):
    """Counts write batches; the first write waits on ``gate`` (so the test can queue
    calls behind it)."""

    blocking = True

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.blocked = threading.Event()
        self.batches: list[int] = []

    def write(self, ops):
        if not self.batches:
            self.blocked.set()
            assert self.gate.wait(60), "the test never released the gate"
        self.batches.append(len(ops))
        super().write(ops)


FORCE = Tuning().anti_entropy_force_rounds


def _controlet(datalet: MemoryDatalet, **tuning: object) -> VersionedControlet:
    ctx = ShardContext(
        node_id="n1", node_number=1, writer_id=1, shard=ShardInfo(0, "aa-sc", ("n1",)),
        datalet=DataletWorker(datalet, "t"), peers=None, clock=HybridClock(),  # type: ignore[arg-type]
        tuning=Tuning(**tuning),  # type: ignore[arg-type]
    )
    return QuorumControlet(ctx)


def _v(ts: int, value: bytes) -> bytes:
    return versioned.encode(ts, 1, value)


def test_concurrent_stores_share_one_datalet_write_and_the_newest_version_wins():
    async def run() -> None:
        d = CountingGate()
        c = _controlet(d)
        first = asyncio.ensure_future(c.store_if_newer([(b"a", _v(1, b"a1"))]))
        while not d.blocked.is_set():  # the first group is on the worker, waiting
            await asyncio.sleep(0.001)
        calls = [
            c.store_if_newer([(b"k", _v(5, b"five")), (b"x", _v(1, b"x"))]),
            c.store_if_newer([(b"k", _v(7, b"seven"))]),
            c.store_if_newer([(b"k", _v(6, b"six")), (b"y", _v(1, b"y"))]),
            c.store_if_newer([(b"a", _v(0, b"older"))]),  # older than what the first stores
        ]
        queued = [asyncio.ensure_future(x) for x in calls]
        await asyncio.sleep(0.01)
        queued[1].cancel()  # its caller gives up: the write happens all the same
        d.gate.set()
        assert await first == 1
        results = await asyncio.gather(*queued, return_exceptions=True)
        assert results[0] == 1 and results[2] == 1 and results[3] == 0  # x; y; nothing
        assert isinstance(results[1], asyncio.CancelledError)
        assert d.batches == [1, 3]  # one batch for the whole group: k (seven), x, y
        assert versioned.decode(d.get(b"k"))[1] == b"seven"
        assert versioned.decode(d.get(b"a"))[1] == b"a1"
        digests = list(c.digests)
        c._rebuild_digests()  # what the stored values give: the digests followed every write
        assert c.digests == digests
        assert c.stats["store_calls"] == 5 and c.stats["store_groups"] == 2
        await c.datalet.close()

    asyncio.run(run())


def test_anti_entropy_exchanges_a_bucket_only_once_its_difference_has_settled():
    c = _controlet(MemoryDatalet())
    same = [0] * DIGEST_BUCKETS
    ours = list(same)
    ours[3] = 1  # differs, and stays so: a write the peer missed
    ours[5] = 1
    assert c.settled_differences("n2", list(ours), list(same)) == []  # first sight: wait
    ours[5] = 2  # bucket 5 is being written: it differs, but not settled
    assert c.settled_differences("n2", list(ours), list(same)) == [3]
    # A bucket that changes every round is exchanged after FORCE rounds anyway.
    picked = []
    for r in range(FORCE * 2):
        ours[5] = 10 + r
        picked.append(5 in c.settled_differences("n2", list(ours), list(same)))
    # (it had differed in the two rounds above already)
    assert picked.count(True) == 2 and picked.index(True) == FORCE - 3
    # Equal digests reset the count, and every peer is judged on its own.
    assert c.settled_differences("n3", list(ours), list(same)) == []
    # anti_entropy_force_rounds=1: every differing bucket, every round (the old way).
    old = _controlet(MemoryDatalet(), anti_entropy_force_rounds=1)
    assert old.settled_differences("n2", list(ours), list(same)) == [3, 5]


class Calls:
    """Fake replica calls for ``quorum``: per node, answer at once, fail, or never answer."""

    def __init__(self, behaviour: dict[str, str]) -> None:
        self.behaviour = behaviour
        self.started: list[str] = []
        self.never = asyncio.Event()  # set by nobody: a paused replica

    def calls(self) -> dict:
        def call(node: str):
            async def run() -> str:
                self.started.append(node)
                how = self.behaviour[node]
                if how == "fail":
                    raise ConnectionError(f"{node} is down")
                if how == "hang":
                    await self.never.wait()
                return node

            return run

        return {node: call(node) for node in self.behaviour}


def _quorum(c: VersionedControlet, behaviour: dict[str, str], **kw: object) -> tuple[set[str], list[str]]:
    calls = Calls(behaviour)

    async def run() -> dict:
        return await asyncio.wait_for(c.quorum(calls.calls(), 2, "read", **kw), 60)  # type: ignore[arg-type]

    return set(asyncio.run(run())), calls.started


def test_a_read_phase_asks_a_majority_first_and_a_spare_only_when_needed():
    c = _controlet(MemoryDatalet(), quorum_spare_after=3600.0)
    ok = {"n1": "ok", "n2": "ok", "n3": "ok"}
    assert _quorum(c, ok, spares=True) == ({"n1", "n2"}, ["n1", "n2"])  # itself first
    assert _quorum(c, ok)[1] == ["n1", "n2", "n3"]  # a write phase: all
    # A failed call is replaced at once (no wait for quorum_spare_after), and the failed
    # peer is asked last for a while.
    assert _quorum(c, {"n1": "ok", "n2": "fail", "n3": "ok"}, spares=True) == ({"n1", "n3"}, ["n1", "n2", "n3"])
    assert _quorum(c, ok, spares=True) == ({"n1", "n3"}, ["n1", "n3"])
    assert c.stats["quorum_spares"] == 0


def test_a_read_phase_asks_the_spares_when_a_replica_keeps_it_waiting():
    c = _controlet(MemoryDatalet(), quorum_spare_after=0.01)
    answered, started = _quorum(c, {"n1": "ok", "n2": "hang", "n3": "ok"}, spares=True)
    assert answered == {"n1", "n3"} and started == ["n1", "n2", "n3"]
    assert c.stats["quorum_spares"] == 1
    assert _quorum(c, {"n1": "ok", "n2": "ok", "n3": "ok"}, spares=True)[1] == ["n1", "n3"]


def test_a_read_phase_never_answers_with_less_than_its_majority():
    c = _controlet(MemoryDatalet(), quorum_spare_after=3600.0, request_timeout=0.2)
    for behaviour in ({"n1": "ok", "n2": "fail", "n3": "fail"}, {"n1": "fail", "n2": "ok", "n3": "hang"}):
        with pytest.raises(QuorumError):
            _quorum(c, behaviour, spares=True)
