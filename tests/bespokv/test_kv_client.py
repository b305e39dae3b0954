"""The client library: routing, pipelining, scans over shards, sync and asyncio; and the
server-side forwarding that lets a plain gRPC client use any node."""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import threading
import time

import grpc
import pytest

from bespokv.batcher import AutoBatcher
from bespokv.client import Client
from bespokv.config import Tuning
from bespokv.errors import DeadlineExceededError, Error, InvalidArgumentError, UnavailableError
from bespokv.proto import bespokv_pb2 as pb
from bespokv.proto import bespokv_pb2_grpc as pbg
from bespokv.testing import InProcessCluster, LocalCluster, ThreadedCluster, free_port, make_config


@pytest.fixture(scope="module")
def cluster():
    with ThreadedCluster(make_config(3, replicas=2, shards=5, mode="ms-sc")) as tc:
        yield tc


def test_sync_api(cluster):
    with cluster.client() as c:
        c.put("text-key", "text-value")  # str is encoded as UTF-8
        assert c.get(b"text-key") == b"text-value"
        c.delete("text-key")
        assert c.get("text-key") is None
        with pytest.raises(InvalidArgumentError):
            c.put(1, b"v")  # type: ignore[arg-type]
        keys = [b"s%03d" % i for i in range(200)]
        c.put_many((k, k[::-1]) for k in keys)
        assert c.get_many(keys) == [k[::-1] for k in keys]
        # scans merge all shards in key order
        assert [k for k, _ in c.scan(b"s", b"t")] == keys
        assert [k for k, _ in c.scan(b"s050", b"s060", reverse=True)] == keys[50:60][::-1]
        assert [k for k, _ in c.scan(b"s", b"t", limit=7)] == keys[:7]
        shards = {c.shard_map().shard_for(k) for k in keys}
        assert len(shards) == 5
        # a batch spanning shards is split per shard (atomic within each)
        c.write_batch([(k, None) for k in keys[:100]] + [(b"s999", b"z")])
        assert [k for k, _ in c.scan(b"s", b"t")] == keys[100:] + [b"s999"]


def test_sync_client_is_thread_safe(cluster):
    with cluster.client() as c:
        def work(t):
            for i in range(100):
                c.put(b"t%d-%d" % (t, i), b"%d" % i)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sum(1 for _ in c.scan(b"t", b"u")) == 400


def test_async_client_pipelines():
    async def main():
        cfg = make_config(3, replicas=3, shards=3, mode="aa-sc")
        async with InProcessCluster(cfg) as cl:
            async with cl.client() as c:
                n = 600
                await asyncio.gather(*(c.put(b"p%04d" % i, b"v%d" % i) for i in range(n)))
                got = await asyncio.gather(*(c.get(b"p%04d" % i) for i in range(n)))
                assert got == [b"v%d" % i for i in range(n)]
                batches = sum(b.batches for b in c._batchers.values())
                items = sum(b.items for b in c._batchers.values())
                assert items == 2 * n and batches < items / 5  # many operations per RPC
                pairs = [kv async for kv in c.scan(b"p", b"q", limit=10)]
                assert [k for k, _ in pairs] == [b"p%04d" % i for i in range(10)]

    asyncio.run(main())


def test_a_batch_that_never_answers_fails_the_call_within_its_timeout(cluster, monkeypatch):
    """Whatever goes wrong in the batching, a call ends within ``timeout`` with a bespokv
    error, an unknown outcome: it never waits forever (the failover tests' hang)."""
    import bespokv.client

    class Hung(AutoBatcher):
        async def submit(self, item):
            await asyncio.Event().wait()

    with cluster.client() as c:
        c.put(b"hung", b"before")
    monkeypatch.setattr(bespokv.client, "AutoBatcher", Hung)  # this test's clients only
    with cluster.client(timeout=0.5, retries=0) as c:
        for call in (c.aio.put(b"hung", b"v"), c.aio.get(b"hung")):
            # Without the bound this waits forever: fail after 60 s instead of hanging.
            fut = asyncio.run_coroutine_threadsafe(call, c.loop)
            with pytest.raises(DeadlineExceededError, match="no answer within 0.5 s") as info:
                fut.result(timeout=60)
            assert info.value.applied is None
    monkeypatch.undo()
    with cluster.client() as c:
        assert c.get(b"hung") == b"before"


@pytest.mark.slow
def test_the_timeout_bounds_the_whole_call_retries_included():
    """Without etcd a paused (or unreachable) head is never failed over, and every attempt
    waited its whole timeout: `bespokv put --timeout 5` took 50.8 s (8 retries) before it
    failed. The timeout is the whole call's: it fails within it, naming the attempts."""
    with LocalCluster(2, replicas=2, shards=1, mode="ms-sc") as cluster:
        with cluster.client() as c:
            c.put(b"k", b"before")
            head = c.shard_map().shards[0].replicas[0]
        os.kill(cluster.pid(head), signal.SIGSTOP)
        try:
            for batching in (True, False):
                with cluster.client(batching=batching, timeout=1.0, retries=8) as c:
                    for call in (lambda: c.put(b"k", b"after"), lambda: c.cas(b"k", b"before", b"x")):
                        start = time.monotonic()
                        with pytest.raises(DeadlineExceededError, match=r"no answer within 1 s, the whole call") as info:
                            call()
                        # 9 attempts of 1 s each took over 9 s; the bound is the call's 1 s
                        # plus its wind-down (generous for a loaded machine).
                        assert time.monotonic() - start < 3.0, info.value
                        assert "attempt" in str(info.value)
        finally:
            os.kill(cluster.pid(head), signal.SIGCONT)


def test_unbatched_client(cluster):
    with Client([n.address for n in cluster.config.nodes], batching=False) as c:
        c.put(b"u", b"1")
        assert c.get(b"u") == b"1"
        assert c.cas(b"u", b"1", b"2").succeeded
        c.write_batch([(b"u", None)])
        assert c.get(b"u") is None


def test_seeds_may_be_down(cluster):
    dead = f"127.0.0.1:{free_port()}"
    with Client([dead, cluster.config.nodes[1].address], retries=2) as c:
        c.put(b"seed", b"ok")
        assert c.get(b"seed") == b"ok"
    with pytest.raises(UnavailableError):
        Client([dead], retries=1, timeout=1.0)


def test_replica_level_reads(cluster):
    with cluster.client() as c:
        c.put(b"local", b"v")
        info = c.shard_map().shard_of_key(b"local")
        for node in info.replicas:
            assert c.get_local(node, b"local") == b"v"
            assert (b"local", b"v") in c.scan_local(node, info.id)


@pytest.mark.parametrize("mode", ["ms-sc", "ms-ec", "aa-sc", "aa-ec"])
def test_any_node_serves_any_key(mode):
    """A client that knows nothing of shards may call any node: it forwards."""
    cfg = make_config(4, replicas=2, shards=4, mode=mode)
    with ThreadedCluster(cfg) as tc:
        stubs = [pbg.KVStub(grpc.insecure_channel(n.address)) for n in cfg.nodes]
        for i in range(20):
            stubs[i % 4].Put(pb.PutRequest(key=b"f%d" % i, value=b"%d" % i))
        for i in range(20):
            for s in stubs:
                r = s.Get(pb.GetRequest(key=b"f%d" % i))
                if mode.endswith("sc"):
                    assert r.value == b"%d" % i
        for s in stubs:
            s.Batch(pb.BatchRequest(mutations=[pb.Mutation(key=b"f1", delete=True)]))
        deadline = time.monotonic() + 10
        while True:  # the eventual modes may need a moment to show every write everywhere
            keys = [kv.key for r in stubs[2].Scan(pb.ScanRequest(start=b"f", end=b"g")) for kv in r.pairs]
            if (keys == sorted(keys) and b"f1" not in keys and len(keys) == 19) or mode.endswith("sc"):
                break
            assert time.monotonic() < deadline, keys
            time.sleep(0.05)
        assert keys == sorted(keys) and b"f1" not in keys and len(keys) == 19
        if mode.startswith("ms"):
            r = stubs[3].CompareAndSet(pb.CasRequest(key=b"f2", expected=b"2", value=b"two"))
            assert r.succeeded and r.current == b"2"
        stats = [tc.call(n.node_status()) for n in tc.nodes.values()]
        assert sum(s.counters["forwarded"] for s in stats) > 0


def test_each_shard_names_its_controlet(tmp_path):
    """One cluster, four shards, the four modes; the client routes each by its mode."""
    from bespokv.config import ShardOverride

    overrides = [ShardOverride(i, mode=m) for i, m in enumerate(["ms-sc", "ms-ec", "aa-sc", "aa-ec"])]
    cfg = make_config(3, replicas=3, shards=4, mode="ms-sc", shard_overrides=overrides, base_dir=str(tmp_path))
    path = tmp_path / "cluster.toml"
    cfg.write(path)
    with ThreadedCluster(cfg) as tc, Client.from_config(str(path)) as c:
        smap = c.shard_map()
        assert [smap.shards[i].mode for i in range(4)] == ["ms-sc", "ms-ec", "aa-sc", "aa-ec"]
        keys = [b"mixed%03d" % i for i in range(100)]
        c.put_many((k, k) for k in keys)
        assert c.get_many(keys) == keys
        assert {smap.shard_for(k) for k in keys} == {0, 1, 2, 3}
        assert [k for k, _ in c.scan(b"mixed", b"mixee")] == keys
        modes = {s.mode for n in tc.nodes.values() for s in tc.call(n.node_status()).shards}
        assert modes == {"ms-sc", "ms-ec", "aa-sc", "aa-ec"}


def _gets_at_once(n: int, *, max_pending_calls: int, **client: object) -> collections.Counter[str]:
    """``n`` unbatched gets from one client to a one-node cluster, all at once, no
    retries; the count of each outcome."""

    async def main() -> collections.Counter[str]:
        cfg = make_config(1, mode="ms-sc", tuning=Tuning(max_pending_calls=max_pending_calls))
        async with InProcessCluster(cfg) as cl:
            async with cl.client(batching=False, retries=0, timeout=30.0, **client) as c:
                await c.put(b"k", b"v")
                outcomes: collections.Counter[str] = collections.Counter()

                async def one() -> None:
                    try:
                        outcomes["ok" if await c.get(b"k") == b"v" else "wrong"] += 1
                    except Error as exc:
                        outcomes[type(exc).__name__ + ": " + str(exc)[:40]] += 1

                await asyncio.gather(*(one() for _ in range(n)))
                return outcomes

    return asyncio.run(main())


def test_thousands_of_concurrent_calls_are_served_not_cancelled():
    """gRPC's server cancels the calls beyond its pending-call limit (1,000 by default):
    an unbatched get_many of more keys than that failed reads with CANCELLED. The node
    raises the limit (Tuning.max_pending_calls), and the client keeps at most
    max_calls_per_node unbatched calls in flight to a node."""
    # The node's limit alone (the client's cap out of the way):
    assert _gets_at_once(2000, max_pending_calls=16384, max_calls_per_node=1 << 20) == {"ok": 2000}
    # The client's cap alone (the node at gRPC's default):
    assert _gets_at_once(2000, max_pending_calls=1000) == {"ok": 2000}
