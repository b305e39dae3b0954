"""Connection and server commands: PING, ECHO, HELLO, AUTH, SELECT, QUIT, CLIENT, INFO,
COMMAND, CONFIG GET.

AUTH takes the cluster's *client* token (``[cluster] token``), compared in constant time;
the peer token (``peer_token``), which lets a caller feed replicas, is never accepted here,
even where a client presents it.
"""

from __future__ import annotations

import hmac
import os
import platform
import time
from typing import TYPE_CHECKING, Any

from bespokv.resp.protocol import OK, PONG, Verbatim, bulk, encode, integer
from bespokv.resp.table import COMMANDS, CommandError, arg, command, wrong_arity

if TYPE_CHECKING:
    from bespokv.resp.server import Session

__all__ = ["REDIS_VERSION", "check_token"]

#: The Redis version the front end reports (HELLO, INFO): the command set and replies
#: follow Redis 7; clients pick features by it.
REDIS_VERSION = "7.2.0"

NOAUTH = "NOAUTH Authentication required."
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."


def check_token(s: Session, user: bytes | None, password: bytes) -> None:
    """Authenticate ``s`` or raise the Redis error for why not."""
    token = s.server.token
    if token is None:
        raise CommandError(
            "ERR AUTH <password> called without any password configured for the default user. "
            "Are you sure your configuration is correct?"
        )
    if user not in (None, b"default") or not hmac.compare_digest(password, token.encode()):
        raise CommandError(WRONGPASS)
    s.authenticate()


@command("ping", -1, "fast stale", group="connection", summary="Returns the server's liveliness response.",
         arguments=(arg("message", "string", "optional"),))
async def cmd_ping(s: Session, args: list[bytes]) -> bytes:
    if len(args) > 2:
        raise wrong_arity("ping")
    return PONG if len(args) == 1 else bulk(args[1])


@command("echo", 2, "fast", group="connection", summary="Returns the given string.", arguments=(arg("message"),))
async def cmd_echo(s: Session, args: list[bytes]) -> bytes:
    return bulk(args[1])


@command("auth", -2, "no_auth fast stale", group="connection", summary="Authenticates the connection (the cluster's client token).",
         arguments=(arg("username", "string", "optional"), arg("password")))
async def cmd_auth(s: Session, args: list[bytes]) -> bytes:
    if len(args) > 3:
        raise CommandError("ERR syntax error")
    check_token(s, args[1] if len(args) == 3 else None, args[-1])
    return OK


@command("hello", -1, "no_auth fast stale", group="connection", since="6.0.0",
         summary="Handshakes with the server (protocol 2 or 3, AUTH, SETNAME).",
         arguments=(arg("protover", "integer", "optional"),))
async def cmd_hello(s: Session, args: list[bytes]) -> bytes:
    proto = None
    if len(args) > 1:
        try:
            proto = int(args[1])
        except ValueError:
            raise CommandError("ERR Protocol version is not an integer or out of range") from None
        if proto not in (2, 3):
            raise CommandError("NOPROTO unsupported protocol version")
    i = 2
    name = None
    while i < len(args):
        o = args[i].upper()
        if o == b"AUTH" and i + 2 < len(args):
            check_token(s, args[i + 1], args[i + 2])
            i += 3
        elif o == b"SETNAME" and i + 1 < len(args):
            name = args[i + 1]
            i += 2
        else:
            raise CommandError(f"ERR Syntax error in HELLO option '{args[i].decode(errors='replace')}'")
    if not s.authed:
        raise CommandError(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
            "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
            "select the RESP protocol version at the same time"
        )
    if name is not None:
        s.set_name(name)
    if proto is not None:
        s.resp3 = proto == 3
    return encode({
        "server": "redis", "version": REDIS_VERSION, "proto": 3 if s.resp3 else 2, "id": s.id,
        "mode": "cluster" if s.cluster else "standalone", "role": "master", "modules": [],
    }, s.resp3)


@command("select", 2, "loading stale fast", group="connection", summary="Changes the selected database (only 0 exists).",
         arguments=(arg("index", "integer"),))
async def cmd_select(s: Session, args: list[bytes]) -> bytes:
    if args[1] != b"0":
        raise CommandError("ERR DB index is out of range")
    return OK


@command("quit", -1, "fast no_auth", group="connection", summary="Closes the connection.")
async def cmd_quit(s: Session, args: list[bytes]) -> bytes:
    s.quit = True
    return OK


@command("client", -2, "stale", group="connection", summary="CLIENT SETNAME, GETNAME, ID, SETINFO, INFO, LIST.",
         arguments=(arg("subcommand"),))
async def cmd_client(s: Session, args: list[bytes]) -> bytes:
    sub = args[1].upper()
    if sub == b"SETNAME" and len(args) == 3:
        if any(c <= 32 or c > 126 for c in args[2]):
            raise CommandError("ERR Client names cannot contain spaces, newlines or special characters.")
        s.set_name(args[2])
        return OK
    if sub == b"GETNAME" and len(args) == 2:
        return bulk(s.name) if s.name else s.null
    if sub == b"ID" and len(args) == 2:
        return integer(s.id)
    if sub == b"SETINFO" and len(args) == 4:
        what = args[2].upper()
        if what not in (b"LIB-NAME", b"LIB-VER"):
            raise CommandError(f"ERR Unrecognized option '{args[2].decode(errors='replace')}'")
        s.lib[what.decode().lower()] = args[3]
        return OK
    if sub == b"INFO" and len(args) == 2:
        return encode(Verbatim(s.describe() + "\n"), s.resp3)
    if sub == b"LIST" and len(args) == 2:
        return encode(Verbatim("".join(x.describe() + "\n" for x in s.server.sessions.values())), s.resp3)
    if sub in (b"NO-EVICT", b"NO-TOUCH") and len(args) == 3:
        return OK
    raise CommandError(
        f"ERR unknown subcommand or wrong number of arguments for '{args[1].decode(errors='replace')}'. Try CLIENT HELP."
    )


@command("command", -1, "loading stale", group="server", summary="COMMAND, COUNT, INFO, DOCS, LIST, GETKEYS.",
         arguments=(arg("subcommand", "string", "optional"),))
async def cmd_command(s: Session, args: list[bytes]) -> bytes:
    if len(args) == 1:
        return encode([c.info() for c in COMMANDS.values()], s.resp3)
    sub = args[1].upper()
    if sub == b"COUNT" and len(args) == 2:
        return integer(len(COMMANDS))
    if sub == b"LIST" and len(args) == 2:
        return encode([c.name for c in COMMANDS.values()], s.resp3)
    if sub == b"INFO":
        return encode([c.info() if (c := COMMANDS.get(n.upper())) else None for n in args[2:]]
                      if len(args) > 2 else [c.info() for c in COMMANDS.values()], s.resp3)
    if sub == b"DOCS":
        chosen = [COMMANDS[n.upper()] for n in args[2:] if n.upper() in COMMANDS] if len(args) > 2 else list(COMMANDS.values())
        return encode({c.name: c.docs() for c in chosen}, s.resp3)
    if sub == b"GETKEYS" and len(args) > 2:
        c = COMMANDS.get(args[2].upper())
        if c is None:
            raise CommandError("ERR Invalid command specified")
        if not c.arity_ok(len(args) - 2):
            raise CommandError("ERR Invalid number of arguments specified for command")
        keys = c.keys(args[2:])
        if not keys:
            raise CommandError("ERR The command has no key arguments")
        return encode(keys, s.resp3)
    raise CommandError(
        f"ERR unknown subcommand or wrong number of arguments for '{args[1].decode(errors='replace')}'. Try COMMAND HELP."
    )


@command("config", -2, "admin loading stale", group="server", summary="CONFIG GET (a few read-only values), RESETSTAT.",
         arguments=(arg("subcommand"),))
async def cmd_config(s: Session, args: list[bytes]) -> bytes:
    sub = args[1].upper()
    if sub == b"GET" and len(args) >= 3:
        from bespokv.resp.keys import glob_to_regex

        values = s.server.config_values(s)
        out: dict[str, str] = {}
        for pattern in args[2:]:
            rx = glob_to_regex(pattern.lower())
            out.update((k, v) for k, v in values.items() if rx.match(k.encode()))
        return encode(out, s.resp3)
    if sub == b"RESETSTAT" and len(args) == 2:
        s.server.stats.reset()
        return OK
    if sub == b"SET":
        raise CommandError("ERR CONFIG SET is not supported: bespokv nodes are configured by their config file")
    raise CommandError(
        f"ERR unknown subcommand or wrong number of arguments for '{args[1].decode(errors='replace')}'. Try CONFIG HELP."
    )


@command("info", -1, "loading stale", group="server", summary="Returns information and statistics about the server.",
         arguments=(arg("section", "string", "optional multiple"),))
async def cmd_info(s: Session, args: list[bytes]) -> bytes:
    wanted = {a.decode(errors="replace").lower() for a in args[1:]} or {"default"}
    srv = s.server
    sections: dict[str, dict[str, Any]] = {}
    up = time.monotonic() - srv.started
    sections["server"] = {
        "redis_version": REDIS_VERSION, "bespokv_node": srv.node.node_id,
        "redis_mode": "cluster" if s.cluster else "standalone", "os": f"{platform.system()} {platform.release()}",
        "arch_bits": 64, "process_id": os.getpid(), "run_id": srv.run_id, "tcp_port": srv.port_of(s),
        "uptime_in_seconds": int(up), "uptime_in_days": int(up // 86400),
    }
    sections["clients"] = {"connected_clients": len(srv.sessions)}
    replication: dict[str, Any] = {"role": "master", "connected_slaves": 0}
    for sid, c in sorted(srv.node.controlets.items()):
        info = c.ctx.shard
        replication[f"bespokv_shard{sid}"] = (
            f"mode={info.mode},replicas={'|'.join(info.replicas)},ready={int(c.ready())}"
        )
    sections["replication"] = replication
    st = srv.stats
    sections["stats"] = {
        "total_connections_received": st.connections, "total_commands_processed": st.commands,
        "keyspace_hits": st.hits, "keyspace_misses": st.misses, "rejected_connections": 0,
        "expired_keys": 0, "evicted_keys": 0,
    }
    sections["cluster"] = {"cluster_enabled": int(s.cluster)}
    if wanted & {"keyspace", "all", "everything", "default"}:
        sections["keyspace"] = {"db0": f"keys={await srv.approximate_keys(s.scope())},expires=0,avg_ttl=0"}
    if not wanted & {"all", "everything", "default"}:
        sections = {k: v for k, v in sections.items() if k in wanted}
    text = "\r\n".join(
        f"# {name.capitalize()}\r\n" + "".join(f"{k}:{v}\r\n" for k, v in fields.items())
        for name, fields in sections.items()
    )
    return encode(Verbatim(text), s.resp3)

