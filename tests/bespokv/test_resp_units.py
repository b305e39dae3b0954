"""The RESP front end's pure parts: request parsing (hiredis and Python paths), reply
encoding, hash slots and their ranges, glob patterns. No servers."""

from __future__ import annotations

import fnmatch
import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bespokv.resp.keys import glob_to_regex, literal_prefix, parse_int
from bespokv.resp.protocol import ProtocolError, RequestReader, Simple, Verbatim, encode, parse
from bespokv.resp.table import CommandError
from bespokv.shardmap import ShardMap
from bespokv.slots import SLOTS, key_slot
from bespokv.testing import make_config

MiB = 1 << 20


def request(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def reader(**kw: int) -> RequestReader:
    kw.setdefault("max_bulk", MiB)
    kw.setdefault("max_args", 1000)
    kw.setdefault("max_request", 64 * MiB)
    return RequestReader(**kw)


commands = st.lists(
    st.lists(st.binary(max_size=40), min_size=1, max_size=5), min_size=1, max_size=8
)


@given(commands, st.lists(st.integers(min_value=0, max_value=400), max_size=6))
def test_any_split_of_a_stream_gives_the_same_commands(cmds: list[list[bytes]], cuts: list[int]) -> None:
    """Attacks the two parsers' hand-over: hiredis takes reads of whole arrays, Python the
    rest; wherever the reads are cut, the commands are the same, in order."""
    data = b"".join(request(*c) for c in cmds)
    r = reader()
    got: list[list[bytes]] = []
    pos = 0
    for cut in sorted(min(c, len(data)) for c in cuts) + [len(data)]:
        if cut > pos:
            got.extend(r.feed(data[pos:cut]))
            pos = cut
    assert got == cmds


def test_inline_commands_and_empty_arrays() -> None:
    r = reader()
    assert r.feed(b"PING\r\nSET k  v\n*0\r\n") == [[b"PING"], [b"SET", b"k", b"v"]]
    assert r.feed(b"\r\n") == []  # an empty line is no command


@pytest.mark.parametrize(
    "data, message",
    [
        (b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$536870912\r\n", "invalid bulk length"),  # 512 MiB, no bytes yet
        (b"*2\r\n$3\r\nGET\r\n:1\r\n", "expected '$', got ':'"),
        (b"*x\r\n", "invalid multibulk length"),
        (b"*2000\r\n", "invalid multibulk length"),
        (b"*1\r\n$-5\r\n", "invalid bulk length"),
        (b"*" + b"9" * 70000, "too big mbulk count string"),
    ],
)
def test_malformed_requests_are_refused_before_buffering(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=re.escape(message)):
        reader().feed(data)


def test_unauthenticated_connections_get_redis_limits() -> None:
    r = reader()
    r.unauthenticated = True
    with pytest.raises(ProtocolError):
        r.feed(request(b"AUTH", b"x" * 20000))
    r = reader()
    r.unauthenticated = True
    with pytest.raises(ProtocolError):
        r.feed(request(*[b"a"] * 11))
    r = reader()
    r.unauthenticated = True
    assert r.feed(request(b"AUTH", b"secret")) == [[b"AUTH", b"secret"]]


def test_a_request_over_the_size_limit_is_refused() -> None:
    r = reader(max_bulk=10 * MiB, max_request=2 * MiB)
    r.feed(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5000000\r\n")
    with pytest.raises(ProtocolError, match="request over"):
        r.feed(b"x" * (3 * MiB))


def test_the_python_parser_wants_crlf_after_a_bulk() -> None:
    # (hiredis, like Redis, skips the two bytes unchecked)
    with pytest.raises(ProtocolError, match="bulk string not followed by CRLF"):
        parse(b"*1\r\n$3\r\nGETxx", max_bulk=100, max_args=10)


def test_parse_leaves_an_incomplete_command() -> None:
    data = request(b"GET", b"a") + request(b"GET", b"bb")[:-3]
    cmds, used = parse(data, max_bulk=100, max_args=10)
    assert cmds == [[b"GET", b"a"]] and used == len(request(b"GET", b"a"))


def test_reply_encoding_resp2_and_resp3() -> None:
    v = {"a": [1, None, b"x", Simple("OK"), 1.5, True]}
    assert encode(v, False) == b"*2\r\n$1\r\na\r\n*6\r\n:1\r\n$-1\r\n$1\r\nx\r\n+OK\r\n$3\r\n1.5\r\n:1\r\n"
    assert encode(v, True) == b"%1\r\n$1\r\na\r\n*6\r\n:1\r\n_\r\n$1\r\nx\r\n+OK\r\n,1.5\r\n#t\r\n"
    assert encode(Verbatim("hi"), True) == b"=6\r\ntxt:hi\r\n"
    assert encode({Simple("write")}, False) == b"*1\r\n+write\r\n"


def test_key_slots_are_redis_clusters() -> None:
    # Values from Redis Cluster's specification and `CLUSTER KEYSLOT` of redis-server 7.
    assert key_slot(b"123456789") == 0x31C3
    assert key_slot(b"foo") == 12182 and key_slot(b"bar") == 5061 and key_slot(b"hello") == 866
    assert key_slot(b"{user1000}.following") == key_slot(b"{user1000}.followers") == key_slot(b"user1000")
    assert key_slot(b"foo{}{bar}") == key_slot(b"foo{}{bar}"[:]) != key_slot(b"bar")  # empty tag: whole key
    assert key_slot(b"foo{{bar}}zap") == key_slot(b"{bar")
    assert key_slot(b"foo{bar}{zap}") == key_slot(b"bar")


@given(st.binary(min_size=1, max_size=30))
def test_a_key_is_in_the_shard_of_its_slot_range(key: bytes) -> None:
    smap = ShardMap.from_config(make_config(3, shards=5, ports=[1, 2, 3]))
    slot = key_slot(key)
    (sid,) = [s for first, last, s in smap.slot_ranges() if first <= slot <= last]
    assert smap.shard_for(key) == sid == smap.slot_shard(slot)


def test_the_slot_table_is_the_rings_answer_for_every_slot() -> None:
    from bespokv.slots import slot_point

    smap = ShardMap.from_config(make_config(3, shards=7, ports=[1, 2, 3]))
    assert [smap.slot_shard(s) for s in range(SLOTS)] == [smap._ring.lookup_hash(slot_point(s)) for s in range(SLOTS)]


def test_slot_ranges_cover_every_slot_once_and_spread_over_shards() -> None:
    smap = ShardMap.from_config(make_config(3, shards=6, ports=[1, 2, 3]))
    ranges = smap.slot_ranges()
    assert ranges[0][0] == 0 and ranges[-1][1] == SLOTS - 1
    assert all(a[1] + 1 == b[0] and a[2] != b[2] for a, b in zip(ranges, ranges[1:]))
    owned = {s: 0 for s in smap.shards}
    for first, last, sid in ranges:
        owned[sid] += last - first + 1
    assert min(owned.values()) > SLOTS / 6 / 2  # every shard gets a fair share
    assert len(ranges) < 6 * 64 * 2  # about one range per ring point, not one per slot


@pytest.mark.parametrize("pattern", [b"*", b"user:*", b"a?c", b"[ab]x*", b"[^a]*", b"k1*", b"*1"])
def test_glob_matches_like_fnmatch_for_common_patterns(pattern: bytes) -> None:
    rx = glob_to_regex(pattern)
    fn = pattern.replace(b"[^", b"[!").decode()
    rng = random.Random(1)
    for _ in range(300):
        key = "".join(rng.choice("abcux1:") for _ in range(rng.randrange(0, 6))).encode()
        assert bool(rx.match(key)) == fnmatch.fnmatchcase(key.decode(), fn), key
    assert key_matches_prefix(pattern)


def key_matches_prefix(pattern: bytes) -> bool:
    prefix = literal_prefix(pattern)
    return pattern.startswith(prefix) and not any(c in prefix for c in b"*?[\\")


def test_glob_escapes() -> None:
    assert glob_to_regex(rb"a\*b").match(b"a*b") and not glob_to_regex(rb"a\*b").match(b"axb")
    assert literal_prefix(rb"ab\*c") == b"ab"


@pytest.mark.parametrize("text, value", [(b"0", 0), (b"-12", -12), (b"9223372036854775807", (1 << 63) - 1)])
def test_parse_int_accepts_redis_integers(text: bytes, value: int) -> None:
    assert parse_int(text) == value


@pytest.mark.parametrize("text", [b"", b"+1", b" 1", b"01", b"-0", b"1.5", b"9223372036854775808", b"x"])
def test_parse_int_refuses_what_redis_refuses(text: bytes) -> None:
    with pytest.raises(CommandError, match="not an integer"):
        parse_int(text)
