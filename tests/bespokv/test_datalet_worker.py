"""Datalet calls run off the event loop, one thread per shard replica, in submission order.

A stalled datalet (here: a write that blocks until the test releases it) must stall only
its own shard: the node keeps serving the other shards and answers health checks."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bespokv.controlets.replstore import POSITION_KEY, ReplicatedStore
from bespokv.config import Tuning
from bespokv.datalets.memory import MemoryDatalet
from bespokv.datalets.worker import DataletWorker
from bespokv.testing import ThreadedCluster, make_config


class GateDatalet(MemoryDatalet):
    """A memory datalet whose writes of keys starting with ``b"stall"`` block on ``gate``."""

    blocking = True  # as a disk or network store would declare

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate
        self.blocked = threading.Event()  # set once a write is waiting on the gate
        self.threads: set[str] = set()

    def write(self, ops):
        self.threads.add(threading.current_thread().name)
        if any(k.startswith(b"stall") for k, _ in ops):
            self.blocked.set()
            assert self.gate.wait(60), "the test never released the gate"
        super().write(ops)


def test_calls_run_in_submission_order_on_one_thread():
    async def run() -> None:
        d = GateDatalet(threading.Event())
        w = DataletWorker(d, "t")
        writes = [asyncio.ensure_future(w.write([(b"k", b"%d" % i)])) for i in range(50)]
        read = asyncio.ensure_future(w.get(b"k"))  # submitted after every write
        await asyncio.gather(*writes)
        assert await read == b"49"
        assert len(d.threads) == 1 and threading.current_thread().name not in d.threads
        assert [kv async for kv in w.export(7)] == [[(b"k", b"49")]]
        await w.close()

    asyncio.run(run())


def test_a_cancelled_write_still_updates_the_position_and_log():
    """The datalet write cannot be interrupted once on its thread, so the in-memory
    position and log must follow it even when the caller gives up."""

    async def run() -> None:
        gate = threading.Event()
        d = GateDatalet(gate)
        store = ReplicatedStore(DataletWorker(d, "t"), Tuning())
        first = asyncio.ensure_future(store.append_local([(b"stall1", b"a")]))
        second = asyncio.ensure_future(store.append_local([(b"k", b"b")]))
        await asyncio.sleep(0)  # both submitted: the first is blocked on its thread
        first.cancel()
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert await second == 2
        assert store.seq == 2 and store.log.last == 2
        assert [seq for seq, _ in store.log.after(0, 1 << 20)] == [1, 2]
        assert d.get(b"stall1") == b"a" and d.get(POSITION_KEY) is not None
        await store.datalet.close()

    asyncio.run(run())


@pytest.mark.parametrize("mode", ["ms-sc", "aa-ec"])
def test_a_stalled_datalet_stalls_only_its_shard(mode):
    gate = threading.Event()
    stalled: dict[int, GateDatalet] = {}

    def factory(node: str, shard: int):
        d = stalled[shard] = GateDatalet(gate)
        return d

    cfg = make_config(1, replicas=1, shards=2, mode=mode, tuning=Tuning(request_timeout=30.0))
    with ThreadedCluster(cfg, datalet_factory=factory) as tc, tc.client(retries=0, timeout=30.0) as c:
        smap = c.shard_map()
        stall_key = next(b"stall%d" % i for i in range(100) if smap.shard_for(b"stall%d" % i) == 0)
        other = [b"o%d" % i for i in range(200) if smap.shard_for(b"o%d" % i) == 1][:20]
        done = threading.Event()
        errors: list[BaseException] = []

        def blocked_write() -> None:
            try:
                c.put(stall_key, b"v")
            except BaseException as exc:  # reported below
                errors.append(exc)
            done.set()

        t = threading.Thread(target=blocked_write)
        t.start()
        try:
            # Wait for the write to block on shard 0's thread (and so to have left the
            # client alone in its batch: ops sent together share one Multi's fate).
            assert stalled[0].blocked.wait(30)
            # The stalled write is on shard 0's thread; shard 1 and health checks go on.
            for k in other:
                c.put(k, b"x")
            assert c.get_many(other) == [b"x"] * len(other)
            with grpc.insecure_channel(cfg.nodes[0].address) as ch:
                resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING
            assert not done.is_set()  # still blocked: the gate is closed
        finally:
            gate.set()
            t.join(60)
        assert not errors, errors
        assert c.get(stall_key) == b"v"
