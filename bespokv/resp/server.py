"""The RESP front end of a node: asyncio servers on its client and cluster ports.

One :class:`Session` per connection. Commands of a connection are answered in order.
Pipelined key commands whose keys differ run concurrently (their single reads and writes
join the node-wide batches in ``backend.py``), so a pipeline of 16 SETs is one grouped
write, not 16 round trips. A connection's commands on one key take effect in order: GETs
of one key share a group, so do plain SETs of one key (one batch in flight per shard and
direction keeps them in order); any other command on a key the group touched waits for
the group. As in Redis Cluster, there is no order between keys of different shards.
Other commands (SCAN, INFO, AUTH...) run alone, after everything before them.

MULTI/EXEC (decision 0060): EXEC runs the queued commands as one batch when they are all
plain writes (SET without options, MSET) of one shard, or all reads (GET, MGET) of one
shard: atomic on every replica in the master-slave modes, per key in the active-active
ones. Anything else is refused at EXEC, since bespokv has no transactions across reads
and writes. WATCH is refused.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import os
import random
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from bespokv.datalets.base import RESERVED_PREFIX
from bespokv.errors import (
    DeadlineExceededError,
    Error,
    OverloadedError,
    UnauthenticatedError,
    UnavailableError,
    WrongShardError,
    from_exception,
)
from bespokv.resp import admin  # with keys and cluster below: the commands register on import
from bespokv.resp.backend import Backend
from bespokv.resp.cluster import Directory, Endpoint, Lookup, master_of, redirect, stats_lookup
from bespokv.resp.keys import make_get, make_put
from bespokv.resp.protocol import NULL, OK, ProtocolError, RequestReader, bulk, encode, error
from bespokv.resp.table import COMMANDS, Command, CommandError, wrong_arity

if TYPE_CHECKING:
    from bespokv.server import Node

__all__ = ["RespServer", "Session"]

log = logging.getLogger(__name__)

READ_SIZE = 64 * 1024
#: Reply bytes a connection may have queued before the server waits for the client.
WRITE_HIGH = 1 << 20
#: DBSIZE counts a shard by a scan when its datalet reports fewer keys than this.
EXACT_BELOW = 10_000
#: SCAN cursors kept per node (the oldest are forgotten: ``ERR invalid cursor``).
MAX_CURSORS = 10_000

TRANSACTION = (b"MULTI", b"EXEC", b"DISCARD", b"WATCH", b"UNWATCH")


def reply_error(exc: BaseException) -> bytes:
    """A bespokv error as a Redis error reply (the message keeps bespokv's text)."""
    if isinstance(exc, CommandError):
        return error(str(exc))
    err = from_exception(exc)
    if isinstance(err, UnauthenticatedError):
        return error("NOAUTH " + str(err))
    if isinstance(err, OverloadedError):
        return error(f"TRYAGAIN {err} (not applied)")
    if isinstance(err, (UnavailableError, DeadlineExceededError, WrongShardError)):
        return error(f"CLUSTERDOWN {err}")
    return error(f"ERR {err}")


class Stats:
    def __init__(self) -> None:
        self.connections = 0
        self.reset()

    def reset(self) -> None:
        self.commands = 0
        self.hits = 0
        self.misses = 0

    def hit(self, found: bool) -> None:
        if found:
            self.hits += 1
        else:
            self.misses += 1


class Cursors:
    """SCAN cursors: random 62-bit numbers naming where a scan goes on (bounded, LRU)."""

    def __init__(self) -> None:
        self._states: OrderedDict[int, Any] = OrderedDict()

    def put(self, state: Any) -> int:
        cursor = random.getrandbits(62) | 1
        self._states[cursor] = state
        while len(self._states) > MAX_CURSORS:
            self._states.popitem(last=False)
        return cursor

    def get(self, cursor: int) -> Any:
        """The state of ``cursor`` (None: unknown or forgotten). A cursor stays valid, so a
        client may repeat a SCAN whose reply it lost."""
        state = self._states.get(cursor)
        if state is not None:
            self._states.move_to_end(cursor)
        return state


class Session:
    """One client connection's state."""

    def __init__(self, server: RespServer, sid: int, *, cluster: bool, peer: str) -> None:
        self.server = server
        self.backend = server.backend
        self.id = sid
        self.cluster = cluster
        self.peer = peer
        self.resp3 = False
        self.authed = server.token is None
        limits = server.node.limits
        self.reader = RequestReader(
            max_bulk=max(limits.max_key_bytes, limits.max_value_bytes),
            max_args=2 * limits.max_batch_ops + 2,
            max_request=limits.max_request_bytes,
        )
        self.reader.unauthenticated = not self.authed
        self.name = b""
        self.lib: dict[str, bytes] = {}
        self.readonly = False
        self.quit = False
        self.multi: list[list[bytes]] | None = None
        self.multi_failed = False
        self.created = time.monotonic()

    @property
    def null(self) -> bytes:
        return NULL[self.resp3]

    def authenticate(self) -> None:
        self.authed = True
        self.reader.unauthenticated = False

    def set_name(self, name: bytes) -> None:
        self.name = name

    def scope(self) -> list[int | None]:
        """The shards SCAN, KEYS, DBSIZE and FLUSHDB cover: all (None: merged) on the
        client port; on the cluster port, those this node is the master of."""
        if not self.cluster:
            return [None]
        node = self.server.node
        down = node.coordinator.down()
        return [sid for sid, info in node.shard_map.shards.items() if master_of(info, down) == node.node_id]

    def describe(self) -> str:
        lib = " ".join(f"{k}={v.decode(errors='replace')}" for k, v in self.lib.items())
        return (
            f"id={self.id} addr={self.peer} laddr=127.0.0.1:{self.server.port_of(self)} "
            f"name={self.name.decode(errors='replace')} age={int(time.monotonic() - self.created)} db=0 "
            f"multi={-1 if self.multi is None else len(self.multi)} resp={3 if self.resp3 else 2} {lib}"
        ).rstrip()


class RespServer:
    """RESP on ``host``: any command on ``port``, Redis Cluster behaviour on
    ``cluster_port`` (0: any free port). ``token``: what AUTH accepts (default: the
    cluster's client token; None: no AUTH needed)."""

    def __init__(
        self,
        node: Node,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        cluster_port: int = 0,
        allow_flushdb: bool = False,
        token: str | None | bool = True,
        lookup: Lookup | None = None,
    ) -> None:
        self.node = node
        self.host = host
        self.port = port
        self.cluster_port = cluster_port
        self.allow_flushdb = allow_flushdb
        self.token: str | None = node.config.token if token is True else (token or None)
        self.backend = Backend(node)
        self.stats = Stats()
        self.cursors = Cursors()
        self.sessions: dict[int, Session] = {}
        self.started = time.monotonic()
        self.run_id = os.urandom(20).hex()
        self._ids = itertools.count(1)
        self._lookup = lookup
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self.directory: Directory

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def cluster_address(self) -> str:
        return f"{self.host}:{self.cluster_port}"

    def port_of(self, s: Session) -> int:
        return self.cluster_port if s.cluster else self.port

    async def start(self) -> RespServer:
        for cluster_side in (False, True):
            srv = await asyncio.start_server(
                functools.partial(self._serve, cluster=cluster_side), self.host,
                self.cluster_port if cluster_side else self.port, limit=READ_SIZE,
            )
            self._servers.append(srv)
            port = srv.sockets[0].getsockname()[1]
            if cluster_side:
                self.cluster_port = port
            else:
                self.port = port
        self.node.resp = self  # its NodeStats name the ports (cluster.stats_lookup, bespokv status)
        me = Endpoint(self.host, self.port, self.cluster_port)
        self.directory = Directory(self.node.node_id, me, self._lookup or stats_lookup(self.node))
        self._follow = asyncio.ensure_future(self.directory.follow(self.node))
        log.info("node %s serves RESP on %s (cluster port %d)", self.node.node_id, self.address, self.cluster_port)
        return self

    async def stop(self) -> None:
        if self.node.resp is self:
            self.node.resp = None
        self._follow.cancel()
        for srv in self._servers:
            srv.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.backend.close()

    # -- connections ------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, cluster: bool) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        s = Session(self, next(self._ids), cluster=cluster, peer="%s:%s" % writer.get_extra_info("peername")[:2])
        self.sessions[s.id] = s
        self.stats.connections += 1
        try:
            while not s.quit:
                data = await reader.read(READ_SIZE)
                if not data:
                    break
                try:
                    cmds = s.reader.feed(data)
                except ProtocolError as exc:
                    writer.write(error(f"ERR Protocol error: {exc}"))
                    break
                if cmds:
                    writer.write(await self.execute(s, cmds))
                    if writer.transport.get_write_buffer_size() > WRITE_HIGH:
                        await writer.drain()
        except (ConnectionError, OSError):
            pass
        except asyncio.CancelledError:  # stop(): end quietly (the stream's callback logs a raise)
            pass
        except Exception:  # a bug outside a command: this connection ends, the node goes on
            log.exception("RESP connection %s failed", s.peer)
        finally:
            self.sessions.pop(s.id, None)
            if task is not None:
                self._tasks.discard(task)
            writer.close()

    # -- running commands -------------------------------------------------------------------------

    def _groupable(self, s: Session, args: list[bytes]) -> Command | None:
        c = COMMANDS.get(args[0].upper())
        if c is None or not c.keyed or not c.arity_ok(len(args)) or not s.authed or s.multi is not None:
            return None
        return c

    async def execute(self, s: Session, cmds: list[list[bytes]]) -> bytes:
        """The replies to ``cmds``, in order."""
        out: list[bytes] = []
        i, n = 0, len(cmds)
        while i < n and not s.quit:
            j = i
            # Keys the group reads (GET), writes blindly (plain SET), or touches otherwise.
            # GETs of one key may share a group, and so may SETs of one key (they ride in
            # one batcher, applied in order: one batch in flight per shard and direction);
            # any other mix on one key waits for the group before it.
            reads: set[bytes] = set()
            writes: set[bytes] = set()
            other: set[bytes] = set()
            while j < n and (c := self._groupable(s, cmds[j])) is not None:
                args = cmds[j]
                if c.name == "get":
                    if args[1] in writes or args[1] in other:
                        break
                    reads.add(args[1])
                elif c.name == "set" and len(args) == 3:
                    if args[1] in reads or args[1] in other:
                        break
                    writes.add(args[1])
                else:
                    ks = c.keys(args)
                    if not (reads.isdisjoint(ks) and writes.isdisjoint(ks) and other.isdisjoint(ks)):
                        break
                    other.update(ks)
                j += 1
            if j - i >= 2:
                out.extend(await self._run_group(s, cmds[i:j]))
                i = j
            else:
                out.append(await self._run_one(s, cmds[i]))
                i += 1
        return b"".join(out)

    async def _run_one(self, s: Session, args: list[bytes]) -> bytes:
        self.stats.commands += 1
        name = args[0].upper()
        c = COMMANDS.get(name)
        if name in TRANSACTION:
            return await self._transaction(s, name, args)
        if c is None:
            if s.multi is not None:
                s.multi_failed = True
            shown = " ".join(f"'{a.decode(errors='replace')[:128]}'" for a in args[1:4])
            return error(f"ERR unknown command '{args[0].decode(errors='replace')[:128]}', with args beginning with: {shown}")
        if not s.authed and "no_auth" not in c.flags:
            return error(admin.NOAUTH)
        if not c.arity_ok(len(args)):
            if s.multi is not None:
                s.multi_failed = True
            return reply_error(wrong_arity(c.name))
        if s.multi is not None and c.name != "quit":
            s.multi.append(args)
            return b"+QUEUED\r\n"
        return await self._call(s, c, args)

    async def _call(self, s: Session, c: Command, args: list[bytes], *, routed: bool = False) -> bytes:
        try:
            if s.cluster and c.keyed and not routed:
                moved = redirect(s, c, c.keys(args))
                if moved is not None:
                    return moved
            return await c.handler(s, args)
        except (CommandError, Error) as exc:
            return reply_error(exc)
        except Exception as exc:  # a bug: the connection and the node go on
            log.exception("RESP command %s failed", c.name)
            return reply_error(exc)

    async def _run_group(self, s: Session, group: list[list[bytes]]) -> list[bytes]:
        """Key commands with distinct keys, run concurrently; GET and plain SET go straight
        into the batches (no task each)."""
        b = self.backend
        pending: list[Any] = []
        for args in group:
            self.stats.commands += 1
            c = COMMANDS[args[0].upper()]
            if s.cluster:
                moved = redirect(s, c, c.keys(args))
                if moved is not None:
                    pending.append(moved)
                    continue
            if c.name == "get":
                make = make_get(args[1])
                pending.append((args[1], make, False, b.start(args[1], make, False)))
            elif c.name == "set" and len(args) == 3:
                make = make_put(args[1], args[2])
                pending.append((args[1], make, True, b.start(args[1], make, True)))
            else:
                pending.append(asyncio.ensure_future(self._call(s, c, args, routed=True)))
        out: list[bytes] = []
        for p in pending:
            if isinstance(p, bytes):
                out.append(p)
            elif isinstance(p, tuple):
                key, make, write, fut = p
                if fut.done() and not fut.cancelled() and fut.exception() is None and not fut.result().status.code:
                    res = fut.result()  # the usual case: the batch answered them all at once
                else:
                    try:
                        res = await b.finish(fut, key, make, write)
                    except Error as exc:
                        out.append(reply_error(exc))
                        continue
                if write:
                    out.append(OK)
                else:
                    found = res.get.found
                    self.stats.hit(found)
                    out.append(bulk(res.get.value) if found else s.null)
            else:
                out.append(await p)
        return out

    async def _transaction(self, s: Session, name: bytes, args: list[bytes]) -> bytes:
        if not s.authed:
            return error(admin.NOAUTH)
        if name == b"MULTI":
            if s.multi is not None:
                return error("ERR MULTI calls can not be nested")
            s.multi, s.multi_failed = [], False
            return OK
        if name == b"DISCARD":
            if s.multi is None:
                return error("ERR DISCARD without MULTI")
            s.multi = None
            return OK
        if name == b"UNWATCH":
            return OK
        if name == b"WATCH":
            return error("ERR WATCH is not supported by bespokv (no optimistic transactions); use a master-slave "
                         "mode's compare-and-set commands (SET NX/XX, INCR)")
        if s.multi is None:
            return error("ERR EXEC without MULTI")
        queued, failed = s.multi, s.multi_failed
        s.multi = None
        if failed:
            return error("EXECABORT Transaction discarded because of previous errors.")
        if not queued:
            return encode([], s.resp3)
        try:
            return await self._exec(s, queued)
        except (CommandError, Error) as exc:
            return reply_error(exc)

    async def _exec(self, s: Session, queued: list[list[bytes]]) -> bytes:
        """EXEC: all plain writes, or all reads, of one shard, as one batch (module doc)."""
        writes: list[tuple[bytes, bytes]] = []
        reads: list[bytes] = []
        shape: list[int] = []  # per command: number of keys read (-1: a write)
        for args in queued:
            name = args[0].upper()
            if name == b"SET" and len(args) == 3:
                writes.append((args[1], args[2]))
                shape.append(-1)
            elif name == b"MSET" and len(args) % 2 == 1:
                writes.extend(zip(args[1::2], args[2::2]))
                shape.append(-1)
            elif name in (b"GET", b"MGET"):
                reads.extend(args[1:])
                shape.append(len(args) - 1 if name == b"MGET" else 0)
            else:
                raise CommandError(
                    f"ERR bespokv runs MULTI/EXEC only as one batch of plain writes (SET, MSET) or of reads "
                    f"(GET, MGET) in one shard; {name.decode(errors='replace')} cannot be part of it"
                )
        if writes and reads:
            raise CommandError("ERR bespokv cannot mix reads and writes in MULTI/EXEC (no transactions)")
        keys = [k for k, _ in writes] or reads
        smap = self.node.shard_map
        if len({smap.shard_for(k) for k in keys}) > 1:
            raise CommandError("CROSSSLOT MULTI/EXEC keys must be in one shard (use a {hash tag})")
        if s.cluster:
            moved = redirect(s, COMMANDS[b"MSET" if writes else b"MGET"], [keys[0]])
            if moved is not None:
                return moved
        if writes:
            await self.backend.write_group(writes)
            return b"*%d\r\n" % len(queued) + OK * len(queued)
        values = await self.backend.read_group(reads)
        replies: list[Any] = []
        it = iter(values)
        for n in shape:
            replies.append(next(it) if n == 0 else [next(it) for _ in range(n)])
        return encode(replies, s.resp3)

    # -- server-wide values -----------------------------------------------------------------------

    def config_values(self, s: Session) -> dict[str, str]:
        limits = self.node.limits
        return {
            "save": "", "appendonly": "no", "databases": "1", "maxmemory": "0",
            "cluster-enabled": "yes" if s.cluster else "no",
            "proto-max-bulk-len": str(max(limits.max_key_bytes, limits.max_value_bytes)),
            "port": str(self.port_of(s)), "bind": self.host,
        }

    async def approximate_keys(self, scope: list[int | None]) -> int:
        """Keys in the ``scope`` shards (None: all). A shard whose datalet reports a count
        of ``EXACT_BELOW`` or more contributes that count (it includes bespokv's own
        entries and, in the aa modes, tombstones: approximate); smaller ones, and those
        that report none, are counted by a scan (exact)."""
        smap = self.node.shard_map
        shards = list(smap.shards) if scope == [None] else [sid for sid in scope if sid is not None]
        status = await self.node.cluster_status()
        reported: dict[tuple[str, int], float] = {}
        for st in status.nodes:
            for sid in shards:
                for name in (f"shard{sid}.datalet.keys", f"shard{sid}.datalet.estimated_keys"):
                    if st.up and name in st.counters:
                        reported[st.id, sid] = st.counters[name]
        total = 0
        for sid in shards:
            got = next((reported[r, sid] for r in smap.shards[sid].replicas if (r, sid) in reported), None)
            total += int(got) if got is not None and got >= EXACT_BELOW else await self._count(sid)
        return total

    async def _count(self, shard: int) -> int:
        n, start = 0, b""
        while True:
            page = await self.backend.scan_keys(start, limit=1000, shard=shard)
            n += sum(not k.startswith(RESERVED_PREFIX) for k in page)
            if len(page) < 1000:
                return n
            start = page[-1] + b"\x00"

