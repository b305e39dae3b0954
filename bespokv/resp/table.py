"""The command table: every RESP command the front end knows, as COMMAND describes it.

A :class:`Command` carries what Redis's ``COMMAND`` and ``COMMAND DOCS`` report (arity,
flags, key positions, group, summary), which cluster clients use to find a command's keys
(redis-py asks ``COMMAND`` once), and the handler that runs it. Handlers register with
:func:`command` from the modules that implement them (``keys.py``, ``admin.py``,
``cluster.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bespokv.resp.server import Session

__all__ = ["COMMANDS", "Command", "CommandError", "command", "wrong_arity"]

Handler = Callable[["Session", list[bytes]], Awaitable[bytes]]


class CommandError(Exception):
    """A Redis error reply; the message starts with its code (``ERR syntax error``)."""


def wrong_arity(name: str) -> CommandError:
    return CommandError(f"ERR wrong number of arguments for '{name}' command")


@dataclass(frozen=True)
class Command:
    name: str  # lower case, as COMMAND reports it
    arity: int  # Redis's convention: N exactly N arguments (name included), -N at least N
    flags: tuple[str, ...]
    first_key: int
    last_key: int
    step: int
    handler: Handler
    group: str
    summary: str
    since: str
    arguments: tuple[dict[str, Any], ...] = field(default=())

    @property
    def keyed(self) -> bool:
        return self.first_key > 0

    @property
    def write(self) -> bool:
        return "write" in self.flags

    def arity_ok(self, n: int) -> bool:
        return n == self.arity if self.arity > 0 else n >= -self.arity

    def keys(self, args: list[bytes]) -> list[bytes]:
        """The keys among ``args`` (the command's name is ``args[0]``)."""
        if not self.first_key:
            return []
        last = self.last_key if self.last_key >= 0 else len(args) + self.last_key
        return args[self.first_key : last + 1 : self.step]

    def info(self) -> list[Any]:
        """This command's entry in ``COMMAND``'s reply (Redis 7's ten fields)."""
        from bespokv.resp.protocol import Simple

        return [
            self.name, self.arity, {Simple(f) for f in self.flags}, self.first_key, self.last_key, self.step,
            {Simple("@" + self.group)}, [], [], [],
        ]

    def docs(self) -> dict[str, Any]:
        """This command's entry in ``COMMAND DOCS``'s reply."""
        d: dict[str, Any] = {"summary": self.summary, "since": self.since, "group": self.group}
        if self.arguments:
            d["arguments"] = [dict(a) for a in self.arguments]
        return d


#: Upper-case command name -> command.
COMMANDS: dict[bytes, Command] = {}


def arg(
    name: str, type: str = "string", *flags: str, token: str | None = None, sub: tuple[dict[str, Any], ...] = ()
) -> dict[str, Any]:
    """One argument of COMMAND DOCS (``flags``: optional, multiple; ``sub``: the
    arguments of a oneof or block, which redis-cli requires of those)."""
    a: dict[str, Any] = {"name": name, "type": type}
    if token:
        a["token"] = token
    if sub:
        a["arguments"] = list(sub)
    if flags:
        from bespokv.resp.protocol import Simple

        a["flags"] = [Simple(f) for f in flags]  # redis-cli asserts they are status replies
    return a


def command(
    name: str,
    arity: int,
    flags: str,
    keys: tuple[int, int, int] = (0, 0, 0),
    *,
    group: str = "string",
    summary: str = "",
    since: str = "1.0.0",
    arguments: tuple[dict[str, Any], ...] = (),
) -> Callable[[Handler], Handler]:
    """Register the decorated handler as ``name``."""

    def register(fn: Handler) -> Handler:
        COMMANDS[name.upper().encode()] = Command(
            name, arity, tuple(flags.split()), *keys, handler=fn, group=group, summary=summary, since=since,
            arguments=arguments,
        )
        return fn

    return register
