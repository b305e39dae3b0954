"""The RESP front end through redis-py (sync, asyncio, pipelines, RedisCluster) and raw
sockets, against an in-process 3-node cluster in each mode (one cluster per mode for the
whole module)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import hiredis
import pytest
import redis
import redis.asyncio
from hypothesis import given, settings
from hypothesis import strategies as st
from resp_cluster import Raw, RespCluster, resp_cluster

from bespokv.slots import key_slot
from bespokv.testing import wait_until

MODES = ["ms-sc", "ms-ec", "aa-sc", "aa-ec"]
CAS_MODES = ("ms-sc", "ms-ec")


@pytest.fixture(scope="module", params=MODES)
def rc(request: pytest.FixtureRequest) -> Iterator[RespCluster]:
    with resp_cluster(request.param) as c:
        c.mode = request.param  # type: ignore[attr-defined]
        yield c


@pytest.fixture
def r(rc: RespCluster) -> Iterator[redis.Redis]:
    client = rc.redis("n1")
    yield client
    client.close()


def test_string_commands(rc: RespCluster, r: redis.Redis) -> None:
    assert r.ping() and r.echo("hi") == b"hi" and r.execute_command("SELECT", 0)
    assert r.set("s:a", "1") and r.get("s:a") == b"1" and r.get("s:none") is None
    assert r.mset({"s:{t}x": "X", "s:{t}y": "Y", "s:z": "Z"})
    assert r.mget("s:{t}x", "s:none", "s:{t}y", "s:z") == [b"X", None, b"Y", b"Z"]
    assert r.exists("s:a", "s:none", "s:a") == 2
    assert r.strlen("s:z") == 1 and r.strlen("s:none") == 0
    assert r.type("s:a") == b"string" and r.type("s:none") == b"none"
    assert r.ttl("s:a") == -1 and r.ttl("s:none") == -2 and r.pttl("s:a") == -1 and r.persist("s:a") is False
    assert r.delete("s:a", "s:none", "s:z") == 2 and r.unlink("s:{t}x") == 1
    assert r.mget("s:a", "s:z", "s:{t}x") == [None, None, None]
    assert r.set("s:big", b"\x00\xff" * 1000) and r.get("s:big") == b"\x00\xff" * 1000
    # Every other node answers the same (it forwards; aa-ec's replicas converge).
    other = rc.redis("n3")
    wait_until(lambda: other.get("s:{t}y") == b"Y" and other.get("s:big") == b"\x00\xff" * 1000, 10, "n3's answers")
    other.close()


def test_read_modify_write_commands_need_compare_and_set(rc: RespCluster, r: redis.Redis) -> None:
    if rc.mode not in CAS_MODES:  # type: ignore[attr-defined]
        for call in (lambda: r.incr("m:n"), lambda: r.append("m:a", "x"), lambda: r.setnx("m:a", "1"),
                     lambda: r.getset("m:a", "1"), lambda: r.set("m:a", "1", nx=True)):
            with pytest.raises(redis.ResponseError, match="needs compare-and-set"):
                call()
        return
    assert r.incr("m:n") == 1 and r.incrby("m:n", 41) == 42 and r.decr("m:n") == 41 and r.decrby("m:n", 40) == 1
    assert r.append("m:a", "ab") == 2 and r.append("m:a", "c") == 3 and r.get("m:a") == b"abc"
    assert r.setnx("m:a", "x") is False and r.setnx("m:b", "x") is True
    assert r.getset("m:b", "y") == b"x" and r.get("m:b") == b"y"
    assert r.set("m:c", "1", nx=True) is True and r.set("m:c", "2", nx=True) is None
    assert r.set("m:c", "3", xx=True) is True and r.set("m:d", "3", xx=True) is None and r.get("m:d") is None
    assert r.set("m:c", "4", get=True) == b"3" and r.get("m:c") == b"4"
    r.set("m:s", "x")
    with pytest.raises(redis.ResponseError, match="not an integer"):
        r.incr("m:s")
    r.set("m:max", str((1 << 63) - 1))
    with pytest.raises(redis.ResponseError, match="overflow"):
        r.incr("m:max")


def test_concurrent_incr_from_asyncio_clients_loses_nothing(rc: RespCluster) -> None:
    """Attacks the compare-and-set loop: 8 connections on 3 nodes increment one key."""
    if rc.mode not in CAS_MODES:  # type: ignore[attr-defined]
        pytest.skip("INCR needs compare-and-set (master-slave modes)")

    async def run() -> int:
        clients = [redis.asyncio.Redis(host="127.0.0.1", port=rc.port(f"n{i % 3 + 1}")) for i in range(8)]
        try:
            async def worker(c: redis.asyncio.Redis) -> None:
                for _ in range(25):
                    await c.incr("a:counter")

            await asyncio.gather(*(worker(c) for c in clients))
            return int(await clients[0].get("a:counter"))
        finally:
            for c in clients:
                await c.aclose()

    assert asyncio.run(run()) == 200


def test_pipeline_replies_in_order_and_keeps_each_keys_order(rc: RespCluster, r: redis.Redis) -> None:
    p = r.pipeline(transaction=False)
    for i in range(60):
        p.set(f"p:{i % 7}", i)
        p.get(f"p:{i % 7}")
        p.echo(f"e{i}")
    res = p.execute()
    for i in range(60):
        assert res[3 * i : 3 * i + 3] == [True, str(i).encode(), f"e{i}".encode()]
    # Runs of SETs of one key (and of GETs) share a batch; the order still holds.
    cas = rc.mode in CAS_MODES  # type: ignore[attr-defined]
    p = r.pipeline(transaction=False)
    for i in range(40):
        p.set("p:same", i)
    p.get("p:same").get("p:same")
    if cas:
        p.append("p:same", "x")
    p.get("p:same")
    for i in range(5):
        p.set("p:same", f"late{i}")
    p.get("p:same")
    want = [True] * 40 + [b"39", b"39"] + ([3, b"39x"] if cas else [b"39"]) + [True] * 5 + [b"late4"]
    assert p.execute() == want


def test_asyncio_pipeline_and_resp3(rc: RespCluster) -> None:
    async def run() -> None:
        c = redis.asyncio.Redis(host="127.0.0.1", port=rc.port("n2"), protocol=3)
        try:
            async with c.pipeline(transaction=False) as p:
                for i in range(20):
                    p.set(f"r3:{i}", i)
                p.get("r3:none")
                p.mget("r3:1", "r3:none")
                res = await p.execute()
            assert res == [True] * 20 + [None, [b"1", None]]
            hello = await c.execute_command("HELLO", "3")
            assert hello[b"proto"] == 3 and hello[b"server"] == b"redis"
        finally:
            await c.aclose()

    asyncio.run(run())


def test_multi_exec_is_one_batch_of_one_shard(rc: RespCluster, r: redis.Redis) -> None:
    with r.pipeline(transaction=True) as p:
        p.set("{tx}a", "1").mset({"{tx}b": "2", "{tx}c": "3"})
        assert p.execute() == [True, True]
    with r.pipeline(transaction=True) as p:
        p.get("{tx}a").mget("{tx}b", "{tx}c", "{tx}none")
        assert p.execute() == [b"1", [b"2", b"3", None]]
    cross = ("tx:a", next(f"tx:{i}" for i in range(1000) if rc.shard_map().shard_for(f"tx:{i}".encode())
                          != rc.shard_map().shard_for(b"tx:a")))
    with pytest.raises(redis.ResponseError, match="one shard"):
        r.pipeline(transaction=True).set(cross[0], "1").set(cross[1], "2").execute()
    with pytest.raises(redis.ResponseError, match="mix reads and writes"):
        r.pipeline(transaction=True).set("{tx}a", "1").get("{tx}a").execute()
    assert r.get(cross[0]) is None
    with pytest.raises(redis.ResponseError, match="WATCH is not supported"):
        r.execute_command("WATCH", "{tx}a")


def test_expiry_is_refused(r: redis.Redis) -> None:
    for call in (lambda: r.set("x:a", "1", ex=10), lambda: r.set("x:a", "1", px=10), lambda: r.expire("x:a", 10),
                 lambda: r.execute_command("SETEX", "x:a", 10, "1")):
        with pytest.raises(redis.ResponseError, match="does not expire keys"):
            call()
    assert r.get("x:a") is None
    assert r.set("x:a", "1", keepttl=True) and r.get("x:a") == b"1"


def test_scan_keys_dbsize_flushdb(rc: RespCluster, r: redis.Redis) -> None:
    assert r.flushdb()
    assert r.dbsize() == 0
    keys = {f"scan:{i}".encode() for i in range(120)} | {b"other:1", b"other:2"}
    r.mset({k: b"v" for k in keys})
    assert set(r.scan_iter(count=7)) == keys
    assert sorted(r.scan_iter(match="scan:1*", count=5)) == sorted(k for k in keys if k.startswith(b"scan:1"))
    assert len(list(r.scan_iter(match="scan:*"))) == 120  # each key once
    assert sorted(r.keys("other:*")) == [b"other:1", b"other:2"]
    assert r.dbsize() == len(keys)
    # The cluster ports each cover the slots their node leads: together, each key once.
    seen: list[bytes] = []
    for n in ("n1", "n2", "n3"):
        c = redis.Redis(host="127.0.0.1", port=rc.cluster_port(n))
        seen += list(c.scan_iter(count=50))
        c.close()
    assert sorted(seen) == sorted(keys)
    with pytest.raises(redis.ResponseError, match="invalid cursor"):
        r.scan(cursor=12345)
    cursor, first = r.scan(match="scan:*", count=20)
    again = r.scan(cursor, match="scan:*", count=20)[1]
    assert again == r.scan(cursor, match="scan:*", count=20)[1] and not set(again) & set(first)  # repeatable


def test_admin_commands_as_clients_use_them(rc: RespCluster, r: redis.Redis) -> None:
    info = r.info()
    assert info["redis_version"].startswith("7.") and info["role"] == "master" and "db0" in info
    assert r.info("stats")["total_commands_processed"] > 0
    assert r.client_setname("tester") and r.client_getname() == "tester" and r.client_id() > 0
    # (redis-py parses every COMMAND reply as COMMAND's own: the subcommands go raw)
    with Raw(rc.port("n1")) as raw:
        count, docs, keys = raw.send(b"COMMAND COUNT\r\nCOMMAND DOCS GET\r\nCOMMAND GETKEYS MSET a 1 b 2\r\n").replies(3)
    assert count == len(r.command()) > 30
    assert docs[0] == b"get" and b"summary" in docs[1]  # a map: a flat array in RESP2
    assert keys == [b"a", b"b"]
    assert r.config_get("appendonly") == {"appendonly": "no"}
    assert r.execute_command("CLUSTER", "KEYSLOT", "{user1}.a") == key_slot(b"user1")


def test_cluster_client_routes_by_slot(rc: RespCluster) -> None:
    c = rc.cluster_client()
    try:
        for i in range(50):
            c.set(f"rc:{i}", i)
        assert [c.get(f"rc:{i}") for i in range(50)] == [str(i).encode() for i in range(50)]
        assert c.mset_nonatomic({"{u}.a": "1", "{u}.b": "2"}) and c.mget("{u}.a", "{u}.b") == [b"1", b"2"]
        assert sorted(c.scan_iter(match="rc:*")) == sorted(f"rc:{i}".encode() for i in range(50))
        slots = c.cluster_slots()
        covered = sorted((a, b) for a, b in slots)
        assert covered[0][0] == 0 and covered[-1][1] == 16383
        assert sum(b - a + 1 for a, b in covered) == 16384
    finally:
        c.close()


def test_cluster_port_redirects_and_refuses_cross_slot(rc: RespCluster) -> None:
    smap = rc.shard_map()
    key = b"mv:1"
    info = smap.shard_of_key(key)
    master = info.replicas[0]
    other = next(n for n in ("n1", "n2", "n3") if n != master)
    c = redis.Redis(host="127.0.0.1", port=rc.cluster_port(other))
    try:
        with pytest.raises(redis.exceptions.MovedError, match=f"{key_slot(key)} 127.0.0.1:{rc.cluster_port(master)}"):
            c.get(key)
        with pytest.raises(redis.ResponseError, match="hash to the same slot"):
            c.mget("{a}x", "{b}x")
    finally:
        c.close()
    c = redis.Redis(host="127.0.0.1", port=rc.cluster_port(master))
    assert c.set(key, "v") and c.get(key) == b"v"
    c.close()


def test_bad_input_gets_redis_errors_and_the_node_survives(rc: RespCluster) -> None:
    port = rc.port("n2")
    with Raw(port) as s:  # unknown command and wrong arity: errors, the connection goes on
        out = s.send(b"*2\r\n$4\r\nFROB\r\n$1\r\nx\r\n*1\r\n$3\r\nGET\r\nPING\r\n").replies(3)
        assert isinstance(out[0], hiredis.ReplyError) and "unknown command 'FROB'" in str(out[0])
        assert isinstance(out[1], hiredis.ReplyError) and "wrong number of arguments for 'get'" in str(out[1])
        assert out[2] == b"PONG"
    with Raw(port) as s:  # a 512 MiB bulk: refused at its header, the connection closed
        out = s.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$536870912\r\nxx").replies(1)
        assert "Protocol error: invalid bulk length" in str(out[0]) and s.closed()
    with Raw(port) as s:  # malformed RESP
        out = s.send(b"*2\r\n$3\r\nGET\r\n:5\r\n").replies(1)
        assert "Protocol error: expected '$'" in str(out[0]) and s.closed()
    with Raw(port) as s:  # a key over the limit and an empty key: errors from the node
        out = s.send(b"*2\r\n$3\r\nGET\r\n$0\r\n\r\n").replies(1)
        assert "key is empty" in str(out[0])
    c = rc.redis("n2")
    assert c.set("bad:after", "ok") and c.get("bad:after") == b"ok"
    c.close()


commands = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from("abcdef"), st.binary(max_size=5)),
        st.tuples(st.just("get"), st.sampled_from("abcdef")),
        st.tuples(st.just("del"), st.lists(st.sampled_from("abcdef"), min_size=1, max_size=3)),
        st.tuples(st.just("mset"), st.dictionaries(st.sampled_from("abcdef"), st.binary(max_size=5), min_size=1)),
        st.tuples(st.just("mget"), st.lists(st.sampled_from("abcdef"), min_size=1, max_size=4)),
        st.tuples(st.just("exists"), st.lists(st.sampled_from("abcdef"), min_size=1, max_size=3)),
        st.tuples(st.just("append"), st.sampled_from("abcdef"), st.binary(max_size=3)),
    ),
    max_size=25,
)


@settings(max_examples=25)
@given(batches=st.lists(commands, min_size=1, max_size=3), node=st.sampled_from(["n1", "n2", "n3"]))
def test_pipelines_match_a_dict_model(rc: RespCluster, batches: list, node: str) -> None:
    """Random pipelines on one connection against a dict: every reply, and the state."""
    cas = rc.mode in CAS_MODES  # type: ignore[attr-defined]
    model: dict[str, bytes] = {}
    c = rc.redis(node)
    try:
        c.delete(*"abcdef")
        for batch in batches:
            p = c.pipeline(transaction=False)
            want: list = []
            for cmd in batch:
                op = cmd[0]
                if op == "set":
                    p.set(cmd[1], cmd[2])
                    model[cmd[1]] = cmd[2]
                    want.append(True)
                elif op == "get":
                    p.get(cmd[1])
                    want.append(model.get(cmd[1]))
                elif op == "del":
                    p.delete(*cmd[1])
                    want.append(sum(k in model for k in set(cmd[1])))
                    for k in cmd[1]:
                        model.pop(k, None)
                elif op == "mset":
                    p.mset(cmd[1])
                    model.update(cmd[1])
                    want.append(True)
                elif op == "mget":
                    p.mget(cmd[1])
                    want.append([model.get(k) for k in cmd[1]])
                elif op == "exists":
                    p.exists(*cmd[1])
                    want.append(sum(k in model for k in cmd[1]))
                elif op == "append" and cas:
                    p.append(cmd[1], cmd[2])
                    model[cmd[1]] = model.get(cmd[1], b"") + cmd[2]
                    want.append(len(model[cmd[1]]))
            assert p.execute() == want
        assert c.mget(*"abcdef") == [model.get(k) for k in "abcdef"]
    finally:
        c.close()


def test_ms_ec_reads_go_to_the_master_so_a_connection_reads_its_writes(rc: RespCluster) -> None:
    """An ms-ec replica serves reads from its own copy (it may lag); the front end sends
    them to the master, as the client library does by default."""
    if rc.mode != "ms-ec":  # type: ignore[attr-defined]
        pytest.skip("ms-ec only")
    info = rc.shard_map().shard_of_key(b"ryw:1")
    replica = info.replicas[1]
    nodes = rc.tc.nodes
    before = {n: rc.tc.run(lambda n=n: nodes[n].counters["get"]) for n in nodes}
    c = rc.redis(replica)
    try:
        for i in range(20):
            c.set("ryw:1", i)
            assert c.get("ryw:1") == str(i).encode()
    finally:
        c.close()
    after = {n: rc.tc.run(lambda n=n: nodes[n].counters["get"]) for n in nodes}
    assert after[info.head] - before[info.head] >= 20 and after[replica] == before[replica]


def test_auth_takes_the_client_token_never_the_peer_token() -> None:
    with resp_cluster("ms-sc", token="client-secret", peer_token="peer-secret") as c:
        port = c.port("n1")
        with Raw(port) as s:
            out = s.send(b"GET k\r\nAUTH peer-secret\r\nAUTH default peer-secret\r\nHELLO 3\r\n").replies(4)
            assert [str(o).split()[0] for o in out] == ["NOAUTH", "WRONGPASS", "WRONGPASS", "NOAUTH"]
            out = s.send(b"AUTH client-secret\r\nSET k v\r\nGET k\r\n").replies(3)
            assert out == [b"OK", b"OK", b"v"]
        with Raw(port) as s:  # before AUTH, Redis's tight request limits
            out = s.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$20000\r\n").replies(1)
            assert "unauthenticated" in str(out[0]) or "invalid bulk length" in str(out[0])
            assert s.closed()
        r = redis.Redis(host="127.0.0.1", port=port, password="client-secret", protocol=3)
        assert r.get("k") == b"v"
        r.close()
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(host="127.0.0.1", port=port, password="peer-secret").get("k")
        rc = c.cluster_client(password="client-secret")
        assert rc.get("k") == b"v"
        rc.close()


def test_flushdb_is_refused_unless_the_config_allows_it(rc: RespCluster) -> None:
    if rc.mode != "ms-sc":  # type: ignore[attr-defined]
        pytest.skip("one mode is enough")
    srv = rc.servers["n1"]
    srv.allow_flushdb = False
    try:
        with pytest.raises(redis.ResponseError, match="FLUSHDB is disabled"):
            rc.redis("n1").flushdb()
    finally:
        srv.allow_flushdb = True


def test_mset_and_mget_of_one_hash_tag_are_atomic(rc: RespCluster) -> None:
    """Attacks MSET/MGET atomicity within a shard: a reader on another node never sees
    one key of an MSET without the other (master-slave modes: one batch, one datalet read)."""
    if rc.mode not in CAS_MODES:  # type: ignore[attr-defined]
        pytest.skip("per key in the active-active modes")

    async def run() -> list[list[bytes | None]]:
        w = redis.asyncio.Redis(host="127.0.0.1", port=rc.port("n1"))
        rd = redis.asyncio.Redis(host="127.0.0.1", port=rc.port("n2"))
        seen: list[list[bytes | None]] = []
        done = asyncio.Event()
        try:
            async def writer() -> None:
                for i in range(150):
                    await w.mset({"{at}a": i, "{at}b": i, "{at}c": i})
                done.set()

            async def reader() -> None:
                while not done.is_set():
                    seen.append(await rd.mget("{at}a", "{at}b", "{at}c"))

            await asyncio.gather(writer(), reader())
            return seen
        finally:
            await w.aclose()
            await rd.aclose()

    seen = asyncio.run(run())
    assert len(seen) > 10
    assert all(len(set(v)) == 1 for v in seen), [v for v in seen if len(set(v)) != 1][:3]
