"""The key commands: strings only (every bespokv value is a byte string).

What each mode makes of them (decision 0060, docs/bespokv.md "Redis clients"):

* GET, SET, MGET, MSET, DEL, EXISTS, STRLEN: every mode, with its consistency. MSET and
  MGET are one batch per shard: atomic within a shard (a ``{tag}`` keeps keys together) in
  the master-slave modes, per key in the active-active modes.
* Read-modify-write commands (INCR/INCRBY/DECR/DECRBY, APPEND, SETNX, GETSET, SET with
  NX/XX/GET) run as compare-and-set loops, which the master-slave modes have (atomic at
  the head; linearizable in ms-sc). The active-active modes have no compare-and-set, so
  these commands are refused there with an error that says so.
* No expiry: SET EX/PX, EXPIRE and friends are refused (decision 0060 says why); TTL
  answers -1 for a key that exists (no key ever has a deadline) and -2 otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from bespokv.datalets.base import RESERVED_PREFIX
from bespokv.proto import bespokv_pb2 as pb
from bespokv.resp.protocol import OK, array_of_bulks, bulk, encode, integer
from bespokv.resp.table import CommandError, arg, command, wrong_arity
from bespokv.routing import ACTIVE_ACTIVE

if TYPE_CHECKING:
    from bespokv.resp.server import Session

__all__ = ["glob_to_regex", "literal_prefix", "make_get", "make_put"]

#: Keys a KEYS command may examine before it gives up (use SCAN beyond).
KEYS_LIMIT = 100_000
#: Keys per scan request of KEYS and FLUSHDB.
PAGE = 1000

NO_EXPIRY = (
    "ERR bespokv does not expire keys (EX, PX, EXPIRE...): a deadline cannot be kept "
    "consistently across replicas here; see docs/bespokv.md, Redis clients"
)
NOT_INT = "ERR value is not an integer or out of range"
SYNTAX = "ERR syntax error"
INT64 = (-(1 << 63), (1 << 63) - 1)


def make_get(key: bytes) -> Callable[[int], pb.Op]:
    """The GET of ``key`` for a shard id (what the backend's batches carry)."""
    return lambda s: pb.Op(get=pb.GetRequest(key=key, shard=s))


def make_put(key: bytes, value: bytes) -> Callable[[int], pb.Op]:
    return lambda s: pb.Op(put=pb.PutRequest(key=key, value=value, shard=s))


def parse_int(b: bytes, message: str = NOT_INT) -> int:
    """A signed 64-bit decimal as Redis accepts it (no sign '+', spaces or leading zeros)."""
    digits = b[1:] if b[:1] == b"-" else b
    if not digits.isdigit() or len(b) > 20 or (len(digits) > 1 and digits[:1] == b"0") or b == b"-0":
        raise CommandError(message)
    v = int(b)
    if not INT64[0] <= v <= INT64[1]:
        raise CommandError(message)
    return v


def need_cas(s: Session, key: bytes, name: str) -> None:
    mode = s.backend.mode_of(key)
    if mode in ACTIVE_ACTIVE:
        raise CommandError(
            f"ERR {name} needs compare-and-set, which {mode} shards do not have; "
            "use a master-slave mode (ms-sc, ms-ec) for this key's shard"
        )


async def read_modify_write(
    s: Session, key: bytes, change: Callable[[bytes | None], bytes | None]
) -> tuple[bytes | None, bytes | None]:
    """Apply ``change(old) -> new | None`` (None: leave the key alone) by compare-and-set
    until it lands: ``(old, new)``. ``change`` may raise :class:`CommandError`."""
    b = s.backend
    old = await b.get(key)
    while True:
        new = change(old)
        if new is None:
            return old, None
        ok, current = await b.cas(key, old, new)
        if ok:
            return old, new
        old = current


# -- GET, SET and friends ----------------------------------------------------------------------


@command("get", 2, "readonly fast", (1, 1, 1), summary="Returns the string value of a key.",
         arguments=(arg("key", "key"),))
async def cmd_get(s: Session, args: list[bytes]) -> bytes:
    v = await s.backend.get(args[1])
    s.server.stats.hit(v is not None)
    return s.null if v is None else bulk(v)


@command("set", -3, "write denyoom", (1, 1, 1), summary="Sets the string value of a key.",
         arguments=(arg("key", "key"), arg("value"), arg("condition", "oneof", "optional", sub=(arg("nx", "pure-token", token="NX"), arg("xx", "pure-token", token="XX"))),
                    arg("get", "pure-token", "optional", token="GET")))
async def cmd_set(s: Session, args: list[bytes]) -> bytes:
    key, value = args[1], args[2]
    nx = xx = get = False
    i = 3
    while i < len(args):
        o = args[i].upper()
        if o == b"NX" and not xx:
            nx = True
        elif o == b"XX" and not nx:
            xx = True
        elif o == b"GET":
            get = True
        elif o == b"KEEPTTL":
            pass  # no key has a time to live to keep
        elif o in (b"EX", b"PX", b"EXAT", b"PXAT"):
            if i + 1 >= len(args):
                raise CommandError(SYNTAX)
            raise CommandError(NO_EXPIRY)
        else:
            raise CommandError(SYNTAX)
        i += 1
    if not (nx or xx or get):
        await s.backend.put(key, value)
        return OK
    need_cas(s, key, "SET with NX, XX or GET")
    if nx and not get:
        ok, _ = await s.backend.cas(key, None, value)
        return OK if ok else s.null
    old, new = await read_modify_write(
        s, key, lambda old: None if (nx and old is not None) or (xx and old is None) else value
    )
    if get:
        return s.null if old is None else bulk(old)
    return OK if new is not None else s.null


@command("setnx", 3, "write denyoom fast", (1, 1, 1), summary="Set the string value of a key only when the key doesn't exist.",
         arguments=(arg("key", "key"), arg("value")))
async def cmd_setnx(s: Session, args: list[bytes]) -> bytes:
    need_cas(s, args[1], "SETNX")
    ok, _ = await s.backend.cas(args[1], None, args[2])
    return integer(int(ok))


@command("getset", 3, "write denyoom fast", (1, 1, 1), summary="Returns the previous string value of a key after setting it to a new value.",
         arguments=(arg("key", "key"), arg("value")))
async def cmd_getset(s: Session, args: list[bytes]) -> bytes:
    need_cas(s, args[1], "GETSET")
    old, _ = await read_modify_write(s, args[1], lambda old: args[2])
    return s.null if old is None else bulk(old)


@command("mget", -2, "readonly fast", (1, -1, 1), summary="Atomically returns the string values of one or more keys (atomic within a shard).",
         arguments=(arg("key", "key", "multiple"),))
async def cmd_mget(s: Session, args: list[bytes]) -> bytes:
    values = await s.backend.get_many(args[1:])
    for v in values:
        s.server.stats.hit(v is not None)
    return array_of_bulks(values, s.resp3)


@command("mset", -3, "write denyoom", (1, -1, 2), summary="Atomically creates or modifies the string values of one or more keys (atomic within a shard).",
         arguments=(arg("data", "block", "multiple", sub=(arg("key", "key"), arg("value"))),))
async def cmd_mset(s: Session, args: list[bytes]) -> bytes:
    if len(args) % 2 != 1:
        raise wrong_arity("mset")
    await s.backend.write_many(list(zip(args[1::2], args[2::2])))
    return OK


async def _delete(s: Session, keys: list[bytes]) -> int:
    """Delete ``keys`` (one batch per shard); how many existed, read just before."""
    unique = list(dict.fromkeys(keys))
    values = await s.backend.get_many(unique)
    await s.backend.write_many([(k, None) for k in unique])
    return sum(v is not None for v in values)


@command("del", -2, "write", (1, -1, 1), summary="Deletes one or more keys.", arguments=(arg("key", "key", "multiple"),))
async def cmd_del(s: Session, args: list[bytes]) -> bytes:
    return integer(await _delete(s, args[1:]))


@command("unlink", -2, "write fast", (1, -1, 1), since="4.0.0", summary="Deletes one or more keys (as DEL).",
         arguments=(arg("key", "key", "multiple"),))
async def cmd_unlink(s: Session, args: list[bytes]) -> bytes:
    return integer(await _delete(s, args[1:]))


@command("exists", -2, "readonly fast", (1, -1, 1), summary="Determines whether one or more keys exist.",
         arguments=(arg("key", "key", "multiple"),))
async def cmd_exists(s: Session, args: list[bytes]) -> bytes:
    values = await s.backend.get_many(args[1:])
    return integer(sum(v is not None for v in values))


@command("type", 2, "readonly fast", (1, 1, 1), group="generic", summary="Determines the type of value stored at a key.",
         arguments=(arg("key", "key"),))
async def cmd_type(s: Session, args: list[bytes]) -> bytes:
    return b"+string\r\n" if await s.backend.get(args[1]) is not None else b"+none\r\n"


@command("strlen", 2, "readonly fast", (1, 1, 1), summary="Returns the length of a string value.",
         arguments=(arg("key", "key"),))
async def cmd_strlen(s: Session, args: list[bytes]) -> bytes:
    v = await s.backend.get(args[1])
    return integer(len(v) if v is not None else 0)


@command("append", 3, "write denyoom fast", (1, 1, 1), summary="Appends a string to the value of a key.",
         arguments=(arg("key", "key"), arg("value")))
async def cmd_append(s: Session, args: list[bytes]) -> bytes:
    need_cas(s, args[1], "APPEND")
    _, new = await read_modify_write(s, args[1], lambda old: (old or b"") + args[2])
    return integer(len(new or b""))


async def _incr(s: Session, key: bytes, by: int, name: str) -> bytes:
    need_cas(s, key, name)

    def change(old: bytes | None) -> bytes:
        v = 0 if old is None else parse_int(old)
        n = v + by
        if not INT64[0] <= n <= INT64[1]:
            raise CommandError("ERR increment or decrement would overflow")
        return b"%d" % n

    _, new = await read_modify_write(s, key, change)
    return integer(int(new or b"0"))


@command("incr", 2, "write denyoom fast", (1, 1, 1), summary="Increments the integer value of a key by one.",
         arguments=(arg("key", "key"),))
async def cmd_incr(s: Session, args: list[bytes]) -> bytes:
    return await _incr(s, args[1], 1, "INCR")


@command("decr", 2, "write denyoom fast", (1, 1, 1), summary="Decrements the integer value of a key by one.",
         arguments=(arg("key", "key"),))
async def cmd_decr(s: Session, args: list[bytes]) -> bytes:
    return await _incr(s, args[1], -1, "DECR")


@command("incrby", 3, "write denyoom fast", (1, 1, 1), summary="Increments the integer value of a key by a number.",
         arguments=(arg("key", "key"), arg("increment", "integer")))
async def cmd_incrby(s: Session, args: list[bytes]) -> bytes:
    return await _incr(s, args[1], parse_int(args[2]), "INCRBY")


@command("decrby", 3, "write denyoom fast", (1, 1, 1), summary="Decrements a number from the integer value of a key.",
         arguments=(arg("key", "key"), arg("decrement", "integer")))
async def cmd_decrby(s: Session, args: list[bytes]) -> bytes:
    by = parse_int(args[2])
    if by == INT64[0]:
        raise CommandError("ERR decrement would overflow")
    return await _incr(s, args[1], -by, "DECRBY")


# -- expiry: refused, and what follows from no key having a deadline ----------------------------


@command("ttl", 2, "readonly fast", (1, 1, 1), group="generic", summary="Returns the expiration time in seconds of a key (-1: none; keys never expire here).",
         arguments=(arg("key", "key"),))
async def cmd_ttl(s: Session, args: list[bytes]) -> bytes:
    return integer(-1 if await s.backend.get(args[1]) is not None else -2)


@command("pttl", 2, "readonly fast", (1, 1, 1), group="generic", since="2.6.0", summary="Returns the expiration time in milliseconds of a key (-1: none).",
         arguments=(arg("key", "key"),))
async def cmd_pttl(s: Session, args: list[bytes]) -> bytes:
    return await cmd_ttl(s, args)


@command("persist", 2, "write fast", (1, 1, 1), group="generic", since="2.2.0", summary="Removes the expiration time of a key (none here: 0).",
         arguments=(arg("key", "key"),))
async def cmd_persist(s: Session, args: list[bytes]) -> bytes:
    return integer(0)


async def _no_expiry(s: Session, args: list[bytes]) -> bytes:
    raise CommandError(NO_EXPIRY)


for _name, _arity in (("expire", -3), ("pexpire", -3), ("expireat", -3), ("pexpireat", -3), ("setex", 4), ("psetex", 4)):
    command(_name, _arity, "write fast", (1, 1, 1), group="generic", summary="Refused: bespokv does not expire keys.")(_no_expiry)


# -- SCAN, KEYS, DBSIZE, FLUSHDB -------------------------------------------------------------------


def glob_to_regex(pattern: bytes) -> re.Pattern[bytes]:
    """Redis's glob (``*``, ``?``, ``[abc]``, ``[^a-z]``, ``\\x``) as a regex on bytes."""
    out = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i : i + 1]
        i += 1
        if c == b"*":
            out.append(b".*")
        elif c == b"?":
            out.append(b".")
        elif c == b"\\" and i < n:
            out.append(re.escape(pattern[i : i + 1]))
            i += 1
        elif c == b"[":
            j = pattern.find(b"]", i + 1 if pattern[i : i + 1] in (b"^", b"!") else i)
            if j < 0:
                out.append(re.escape(c))
                continue
            body = pattern[i:j]
            neg = body[:1] in (b"^", b"!")
            if neg:
                body = body[1:]
            body = body.replace(b"\\", b"\\\\").replace(b"]", b"\\]")
            out.append(b"[" + (b"^" if neg else b"") + body + b"]")
            i = j + 1
        else:
            out.append(re.escape(c))
    return re.compile(b"".join(out) + rb"\Z", re.DOTALL)


def literal_prefix(pattern: bytes) -> bytes:
    """The bytes every key matching ``pattern`` starts with (where the scan can begin)."""
    m = re.match(rb"[^*?\[\\]*", pattern)
    return m.group(0) if m else b""


def _scan_options(args: list[bytes], i: int) -> tuple[bytes | None, int, bytes | None]:
    match: bytes | None = None
    count = 10
    kind: bytes | None = None
    while i < len(args):
        o = args[i].upper()
        if i + 1 >= len(args):
            raise CommandError(SYNTAX)
        if o == b"MATCH":
            match = args[i + 1]
        elif o == b"COUNT":
            count = parse_int(args[i + 1])
            if count < 1:
                raise CommandError(SYNTAX)
        elif o == b"TYPE":
            kind = args[i + 1].lower()
        else:
            raise CommandError(SYNTAX)
        i += 2
    return match, count, kind


@command("scan", -2, "readonly", group="generic", since="2.8.0",
         summary="Iterates over the key names (of the whole cluster; on the cluster port, of the slots this node serves).",
         arguments=(arg("cursor", "integer"), arg("pattern", "pattern", "optional", token="MATCH"),
                    arg("count", "integer", "optional", token="COUNT"), arg("type", "string", "optional", token="TYPE")))
async def cmd_scan(s: Session, args: list[bytes]) -> bytes:
    cursor = parse_int(args[1], "ERR invalid cursor")
    match, count, kind = _scan_options(args, 2)
    if cursor == 0:
        state = (tuple(s.scope()), 0, None)
    else:
        got = s.server.cursors.get(cursor)
        if got is None:
            raise CommandError("ERR invalid cursor")
        state = got
    shards, idx, after = state
    regex = glob_to_regex(match) if match is not None else None
    prefix = literal_prefix(match) if match is not None else b""
    keys: list[bytes] = []
    examined = 0
    while idx < len(shards) and examined < count:
        start = max(prefix, after + b"\x00") if after is not None else prefix
        want = count - examined
        page = await s.backend.scan_keys(start, limit=want, shard=shards[idx])
        inside = [k for k in page if k.startswith(prefix)]
        examined += len(page)
        keys.extend(k for k in inside if not k.startswith(RESERVED_PREFIX) and (regex is None or regex.match(k)))
        if len(page) < want or len(inside) < len(page):  # this shard is done
            idx, after = idx + 1, None
        else:
            after = page[-1]
    if kind is not None and kind != b"string":
        keys = []
    nxt = 0 if idx >= len(shards) else s.server.cursors.put((shards, idx, after))
    return encode([b"%d" % nxt, keys], s.resp3)


@command("keys", 2, "readonly", group="generic",
         summary=f"Returns all key names that match a pattern (refused beyond {KEYS_LIMIT} keys examined: use SCAN).",
         arguments=(arg("pattern", "pattern"),))
async def cmd_keys(s: Session, args: list[bytes]) -> bytes:
    regex = glob_to_regex(args[1])
    prefix = literal_prefix(args[1])
    out: list[bytes] = []
    examined = 0
    for shard in s.scope():
        start = prefix
        while True:
            page = await s.backend.scan_keys(start, limit=PAGE, shard=shard)
            inside = [k for k in page if k.startswith(prefix)]
            examined += len(inside)
            if examined > KEYS_LIMIT:
                raise CommandError(f"ERR KEYS examined more than {KEYS_LIMIT} keys; use SCAN")
            out.extend(k for k in inside if not k.startswith(RESERVED_PREFIX) and regex.match(k))
            if len(page) < PAGE or len(inside) < len(page):
                break
            start = page[-1] + b"\x00"
    return encode(out, s.resp3)


@command("dbsize", 1, "readonly fast", group="server",
         summary="Returns the number of keys (approximate: the datalets' own counts where they keep one).")
async def cmd_dbsize(s: Session, args: list[bytes]) -> bytes:
    return integer(await s.server.approximate_keys(s.scope()))


@command("flushdb", -1, "write", group="server",
         summary="Removes all keys (only where the cluster's config allows it; not atomic).",
         arguments=(arg("flush-type", "oneof", "optional", sub=(arg("async", "pure-token", token="ASYNC"), arg("sync", "pure-token", token="SYNC"))),))
async def cmd_flushdb(s: Session, args: list[bytes]) -> bytes:
    if len(args) > 2 or (len(args) == 2 and args[1].upper() not in (b"ASYNC", b"SYNC")):
        raise CommandError(SYNTAX)
    if not s.server.allow_flushdb:
        raise CommandError("ERR FLUSHDB is disabled on this cluster (set [redis] flushdb = true in its config)")
    for shard in s.scope():
        while True:
            page = await s.backend.scan_keys(b"", limit=PAGE, shard=shard)
            keys = [k for k in page if not k.startswith(RESERVED_PREFIX)]
            if not keys:
                break
            await s.backend.write_many([(k, None) for k in keys])
    return OK

