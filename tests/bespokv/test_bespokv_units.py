"""Unit tests: config, hash ring, shard map, versions, clock, batcher, replication log,
error mapping."""

from __future__ import annotations

import asyncio
import collections
import subprocess
import sys

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bespokv import errors, versioned
from bespokv.batcher import AutoBatcher
from bespokv.config import ClusterConfig, Limits, Tuning, dump_toml, load, normalize_mode
from bespokv.controlets.replog import ReplicationLog, Restart
from bespokv.hashring import HashRing
from bespokv.hlc import HybridClock, physical_ms
from bespokv.routing import read_node, write_node
from bespokv.shardmap import ShardMap
from bespokv.testing import make_config
from rocksmash import errors as rm_errors

# -- config ----------------------------------------------------------------------------------------

EXAMPLE = """
[cluster]
name = "demo"
mode = "ms-sc"
shards = 8
replicas = 3
token_file = "token.txt"

[cluster.limits]
max_value_bytes = 65536

[tuning]
request_timeout = 2.5

[datalet]
kind = "rocksdb"
path = "data/{node}"

[[nodes]]
id = "n1"
address = "127.0.0.1:7001"

[[nodes]]
id = "n2"
address = "127.0.0.1:7002"

[[nodes]]
id = "n3"
address = "127.0.0.1:7003"
[nodes.datalet]
kind = "redis"
url = "redis://127.0.0.1:6379/0"

[[shards]]
id = 3
mode = "aa-ec"
"""


def test_config_file(tmp_path):
    (tmp_path / "token.txt").write_text("tok\n")
    p = tmp_path / "cluster.toml"
    p.write_text(EXAMPLE)
    cfg = load(p)
    assert cfg.name == "demo" and cfg.shards == 8 and cfg.replicas == 3 and cfg.token == "tok"
    assert cfg.limits.max_value_bytes == 65536 and cfg.tuning.request_timeout == 2.5
    assert cfg.datalet_for("n1").kind == "rocksdb" and cfg.datalet_for("n3").options["url"].startswith("redis://")
    smap = ShardMap.from_config(cfg)
    assert smap.shards[3].mode == "aa-ec" and smap.shards[0].mode == "ms-sc"
    # round trip through the writer
    p2 = tmp_path / "again.toml"
    cfg.write(p2)
    again = load(p2)
    assert again.to_dict() == cfg.to_dict()


def test_docs_example_config_parses(tmp_path):
    """The config example in docs/bespokv.md is valid."""
    import pathlib
    import re

    doc = pathlib.Path(__file__).resolve().parents[2] / "docs" / "bespokv.md"
    if not doc.exists():
        pytest.skip("docs/bespokv.md not written yet")
    blocks = re.findall(r"```toml\n(.*?)```", doc.read_text(), re.S)
    assert blocks, "docs/bespokv.md has no toml example"
    for block in blocks:
        (tmp_path / "c.toml").write_text(block)
        ShardMap.from_config(load(tmp_path / "c.toml"))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[cluster]\nmode='paxos'\n[[nodes]]\nid='a'\n", "unknown mode"),
        ("[cluster]\nreplicas=2\n[[nodes]]\nid='a'\n", "replicas=2"),
        ("[[nodes]]\nid='a'\n[[nodes]]\nid='a'\n", "duplicate node"),
        ("[cluster]\nshards=2\n[[nodes]]\nid='a'\n[[shards]]\nid=5\n", "outside"),
        ("[cluster]\n[[nodes]]\nid='a'\n[[shards]]\nid=0\nreplicas=['b']\n", "unknown node"),
        ("[cluster]\nbogus=1\n[[nodes]]\nid='a'\n", "unknown"),
        ("not toml [", "not valid TOML"),
        ("[cluster]\n", "at least one node"),
    ],
)
def test_bad_configs(tmp_path, text, match):
    p = tmp_path / "c.toml"
    p.write_text(text)
    with pytest.raises(errors.InvalidArgumentError, match=match):
        load(p)


def test_mode_aliases():
    assert normalize_mode("chain") == "ms-sc" and normalize_mode("LWW") == "aa-ec"
    assert normalize_mode("active-active/strong") == "aa-sc"


def test_dump_toml_quotes():
    import tomllib

    d = {"a": {"s": 'x"y\\z', "l": [1, 2], "t": {"k": True}}, "arr": [{"x": 1}, {"x": 2}]}
    assert tomllib.loads(dump_toml(d)) == d


@given(st.text())
def test_dump_toml_round_trips_any_string(text):
    """Control characters (\\r, \\x00, \\x7f, ...) once made TOML that tomllib rejects."""
    import tomllib

    d = {"cluster": {"name": text, "token": "\r\x00\x7f" + text}, "nodes": [{"id": text}]}
    assert tomllib.loads(dump_toml(d)) == d


def test_a_config_with_a_token_is_readable_by_its_owner_only(tmp_path):
    import stat

    make_config(3, token="secret").write(tmp_path / "t.toml")
    assert stat.S_IMODE((tmp_path / "t.toml").stat().st_mode) == 0o600
    assert load(tmp_path / "t.toml").token == "secret"


def test_config_with_control_characters_round_trips(tmp_path):
    cfg = make_config(3).replace(name="a\rb\x00c\x7fd", token="t\r\x00\x7f")
    cfg.write(tmp_path / "c.toml")
    back = load(tmp_path / "c.toml")
    assert back.name == cfg.name and back.token == cfg.token


# -- hashing and shard map --------------------------------------------------------------------------


def test_ring_is_balanced_and_stable():
    ring = HashRing([f"n{i}" for i in range(4)], vnodes=128)
    counts = collections.Counter(ring.lookup(b"key%d" % i) for i in range(20000))
    assert set(counts) == {"n0", "n1", "n2", "n3"}
    assert max(counts.values()) < 1.35 * min(counts.values())
    # adding a member moves about 1/5 of the keys, all of them to the new member
    bigger = HashRing([f"n{i}" for i in range(5)], vnodes=128)
    moved = [i for i in range(20000) if ring.lookup(b"key%d" % i) != bigger.lookup(b"key%d" % i)]
    assert 0.1 < len(moved) / 20000 < 0.3
    assert all(bigger.lookup(b"key%d" % i) == "n4" for i in moved)


@given(st.binary(min_size=1, max_size=20), st.integers(1, 5))
def test_preference_list(key, n):
    ring = HashRing(["a", "b", "c", "d"], vnodes=16)
    pl = ring.preference_list(key, n)
    assert len(pl) == min(n, 4) and len(set(pl)) == len(pl)
    assert pl[0] == ring.lookup(key)


def test_shard_map_routing():
    cfg = make_config(5, replicas=3, shards=10, ports=range(7001, 7006))
    smap = ShardMap.from_config(cfg)
    assert all(len(s.replicas) == 3 and len(set(s.replicas)) == 3 for s in smap.shards.values())
    heads = collections.Counter(s.head for s in smap.shards.values())
    assert sorted(heads.values()) == [2, 2, 2, 2, 2]  # heads are spread evenly
    small = ShardMap.from_config(make_config(3, replicas=3, shards=3, ports=range(7001, 7004)))
    assert sorted(s.head for s in small.shards.values()) == ["n1", "n2", "n3"]
    assert sorted(s.tail for s in small.shards.values()) == ["n1", "n2", "n3"]
    assert smap.shard_for(b"x") == smap.shard_for(b"x")
    with pytest.raises(errors.UnknownShardError):
        smap.shard(10)
    info = smap.shards[0]
    assert write_node(info) == info.head and read_node(info) == info.tail
    aa = info.__class__(0, "aa-sc", info.replicas)
    assert {write_node(aa, h) for h in range(3)} == set(info.replicas)
    ec = info.__class__(0, "ms-ec", info.replicas)
    assert read_node(ec) == ec.head and read_node(ec, 1, read_from="any") == ec.replicas[1]


# -- versions and clocks ---------------------------------------------------------------------------


def test_versioned_encoding():
    a = versioned.encode(5, 1, b"v")
    b = versioned.encode(5, 2, None)
    assert versioned.decode(a) == ((5, 1), b"v") and versioned.decode(b) == ((5, 2), None)
    assert versioned.newer(b, a) and not versioned.newer(a, b) and versioned.newer(a, None)
    assert versioned.version_of(None) == versioned.ZERO
    with pytest.raises(errors.CorruptionError):
        versioned.decode(b"\x01abc")
    with pytest.raises(errors.CorruptionError):
        versioned.decode(b"\x07" + bytes(12))


@given(st.integers(0, 2**63), st.integers(0, 2**32 - 1), st.integers(0, 2**63), st.integers(0, 2**32 - 1))
def test_version_order_is_tuple_order(t1, w1, t2, w2):
    assert versioned.newer(versioned.encode(t1, w1, b"x"), versioned.encode(t2, w2, None)) == ((t1, w1) > (t2, w2))


def test_hybrid_clock():
    wall = [1000]
    c = HybridClock(lambda: wall[0])
    a, b = c.now(), c.now()
    assert b > a and physical_ms(a) == 1000
    wall[0] = 900  # the wall clock steps back: readings still increase
    assert c.now() > b
    c.observe((5000 << 16) + 7)  # a peer is ahead
    d = c.now()
    assert d > (5000 << 16) + 7 and physical_ms(d) == 5000
    wall[0] = 6000
    assert physical_ms(c.now()) == 6000


# -- batcher --------------------------------------------------------------------------------------


def test_autobatcher_coalesces_and_isolates_errors():
    async def main():
        calls = []

        async def send(items):
            calls.append(list(items))
            await asyncio.sleep(0.01)
            return [ValueError(i) if i == 3 else i * 10 for i in items]

        b = AutoBatcher(send, max_batch=4, max_inflight=1)
        results = await asyncio.gather(*(b.submit(i) for i in range(10)), return_exceptions=True)
        assert results[:3] == [0, 10, 20] and isinstance(results[3], ValueError)
        assert results[4:] == [40, 50, 60, 70, 80, 90]
        assert [len(c) for c in calls] == [4, 4, 2]

        async def broken(items):
            raise ConnectionError("down")

        b2 = AutoBatcher(broken)
        with pytest.raises(ConnectionError):
            await b2.submit(1)

    asyncio.run(main())


def test_autobatcher_abort_right_after_a_flush_answers_everyone_and_frees_the_slot():
    """The client's hang in the failover tests: ``abort()`` (a node reported down) ran in the
    loop iteration between the flush that created a batch's task and that task's first step.
    A task cancelled before it starts never runs its body, so the batch's waiters were never
    answered and its in-flight slot never freed: with ``max_inflight`` such batches, every
    later call to that node waited forever."""

    async def main():
        async def send(items):
            return [i * 10 for i in items]

        b = AutoBatcher(send, max_inflight=1)
        loop = asyncio.get_running_loop()
        first = asyncio.ensure_future(b.submit(1))
        await asyncio.sleep(0)  # ``first`` ran: the flush is scheduled, the batch not created
        loop.call_soon(b.abort, ConnectionAbortedError("node down"))  # runs right after it
        with pytest.raises(ConnectionAbortedError):
            await asyncio.wait_for(first, 10)
        assert await asyncio.wait_for(b.submit(2), 10) == 20  # the slot was freed
        assert b.batches == 2

        # A submitter that gave up (cancelled) before its batch was sent is not sent.
        sent = []

        async def slow(items):
            sent.extend(items)
            await asyncio.sleep(0.01)
            return list(items)

        b2 = AutoBatcher(slow, max_inflight=1)
        busy = asyncio.ensure_future(b2.submit("busy"))
        await asyncio.sleep(0)
        queued = asyncio.ensure_future(b2.submit("queued"))
        await asyncio.sleep(0)
        queued.cancel()
        assert await asyncio.wait_for(busy, 10) == "busy"
        assert await asyncio.wait_for(b2.submit("next"), 10) == "next"
        assert sent == ["busy", "next"]

    asyncio.run(main())


# -- replication log --------------------------------------------------------------------------------


def test_replication_log():
    log = ReplicationLog(retain=5)
    log.reset(10)
    assert log.first == 11 and log.covers(10) and not log.covers(9) and log.after(10, 100) == []
    for s in range(11, 41):
        log.append(s, [(b"k%d" % s, b"v")])
    assert log.after(38, 1 << 20) == [(39, [(b"k39", b"v")]), (40, [(b"k40", b"v")])]
    assert len(log.after(10, 1)) == 1  # at least one entry even above max_bytes
    log.pin("reader", 20)
    log.trim()
    assert log.covers(20) and not log.covers(10)
    log.unpin("reader")
    log.trim()
    assert log.first == 36 and log.covers(35) and not log.covers(34)
    with pytest.raises(Restart):
        log.after(20, 100)
    with pytest.raises(AssertionError):
        log.append(50, [])


# -- errors --------------------------------------------------------------------------------------


def test_error_mapping():
    assert errors.from_exception(rm_errors.InvalidTypeError("x")).code == grpc.StatusCode.INVALID_ARGUMENT
    assert errors.from_exception(rm_errors.CorruptionError("x")).code == grpc.StatusCode.DATA_LOSS
    assert errors.from_exception(rm_errors.UnavailableError("x")).code == grpc.StatusCode.UNAVAILABLE
    assert errors.from_exception(rm_errors.ClosedError("x")).code == grpc.StatusCode.UNAVAILABLE
    assert errors.from_exception(rm_errors.LockedError("x")).code == grpc.StatusCode.FAILED_PRECONDITION
    assert errors.from_exception(rm_errors.FencedError("x")).code == grpc.StatusCode.ABORTED
    assert errors.from_exception(TypeError("x")).code == grpc.StatusCode.INVALID_ARGUMENT
    assert errors.from_exception(rm_errors.Error("x")).code == grpc.StatusCode.INTERNAL
    assert errors.from_exception(KeyError("x")).code == grpc.StatusCode.INTERNAL
    for cls in (errors.InvalidArgumentError, errors.UnknownShardError, errors.WrongShardError,
                errors.UnavailableError, errors.OverloadedError, errors.UnsupportedError, errors.CorruptionError):
        back = errors.from_status(cls.code, "m")
        assert type(back) is cls and str(back) == "m"
        assert isinstance(back, errors.Error) and not isinstance(back, rm_errors.Error)  # bespokv's own root
    assert errors.status_code(14) == grpc.StatusCode.UNAVAILABLE
    assert errors.from_status(grpc.StatusCode.CANCELLED, "x").retriable


def test_framework_imports_without_the_engine():
    """bespokv serves any datalet: importing it (server, client, CLI) must not load rocksmash."""
    code = (
        "import sys; import bespokv, bespokv.server, bespokv.cli, bespokv.testing; "
        "assert not [m for m in sys.modules if m.split('.')[0] in ('rocksmash', 'cloudtier')], "
        "sorted(m for m in sys.modules if m.startswith(('rocksmash', 'cloudtier')))"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_limits_and_tuning_validate():
    with pytest.raises(errors.InvalidArgumentError):
        Limits(max_key_bytes=0)
    with pytest.raises(errors.InvalidArgumentError):
        Tuning(request_timeout=0)
    with pytest.raises(errors.InvalidArgumentError):
        ClusterConfig(nodes=())


def test_writer_ids_differ_per_incarnation():
    from bespokv.shardmap import writer_id

    assert writer_id("n1", b"\x00" * 8) != writer_id("n1", b"\x01" + b"\x00" * 7)
    assert writer_id("n1", b"x") != writer_id("n2", b"x")
