"""RESP on the wire: requests in, replies out (RESP2, and RESP3 after ``HELLO 3``).

Requests are arrays of bulk strings (``*2\\r\\n$3\\r\\nGET\\r\\n$1\\r\\nk\\r\\n``) or inline
commands (``GET k\\r\\n``, what a person types into telnet). A read that holds only whole
arrays is parsed by hiredis (C; about a tenth of the Python parser's time per command);
anything else, a command split across reads, an inline command, a malformed one, goes
through :func:`parse`, which also enforces the limits before it buffers anything: a bulk
longer than ``max_bulk`` (the largest key or value the cluster accepts) or more
than ``max_args`` arguments is a protocol error at once, so a client announcing a
512 MiB bulk gets ``-ERR Protocol error: invalid bulk length`` instead of a server
holding 512 MiB for it. As in Redis, a protocol error ends the connection after its reply;
before AUTH the limits are Redis's unauthenticated ones (10 arguments of 16 KiB).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import hiredis

__all__ = [
    "NULL", "OK", "PONG", "ProtocolError", "RequestReader", "Simple", "Verbatim", "array_of_bulks",
    "bulk", "encode", "error", "integer", "parse",
]

#: Longest ``*N`` or ``$N`` header line, or inline command, waited for (Redis: 64 KiB).
MAX_INLINE = 64 * 1024
#: Redis's limits on a connection that has not authenticated.
UNAUTH_MAX_ARGS = 10
UNAUTH_MAX_BULK = 16 * 1024


class ProtocolError(Exception):
    """The request is not RESP the server accepts; the reply is ``-ERR Protocol error:
    <message>`` and the connection is closed."""


def parse(
    buf: bytes | bytearray, *, max_bulk: int, max_args: int
) -> tuple[list[list[bytes]], int]:
    """The whole commands at the start of ``buf`` and how many bytes they took; the rest
    is an incomplete command. Raises :class:`ProtocolError`."""
    out: list[list[bytes]] = []
    pos = 0
    n = len(buf)
    find = buf.find
    while pos < n:
        if buf[pos] != 42:  # not '*': an inline command, one line
            e = find(b"\n", pos)
            if e < 0:
                if n - pos > MAX_INLINE:
                    raise ProtocolError("too big inline request")
                break
            args = bytes(buf[pos:e]).split()
            if len(args) > max_args:
                raise ProtocolError("invalid multibulk length")
            if any(len(a) > max_bulk for a in args):
                raise ProtocolError("invalid bulk length")
            pos = e + 1
            if args:
                out.append(args)
            continue
        e = find(b"\r\n", pos)
        if e < 0:
            if n - pos > MAX_INLINE:
                raise ProtocolError("too big mbulk count string")
            break
        try:
            count = int(buf[pos + 1 : e])
        except ValueError:
            raise ProtocolError("invalid multibulk length") from None
        if count > max_args:
            raise ProtocolError("invalid multibulk length")
        p = e + 2
        if count <= 0:  # "*0" and "*-1": nothing to run (as Redis)
            pos = p
            continue
        args = []
        for _ in range(count):
            if p >= n:
                break
            if buf[p] != 36:  # '$'
                raise ProtocolError(f"expected '$', got '{chr(buf[p])}'")
            e = find(b"\r\n", p)
            if e < 0:
                if n - p > MAX_INLINE:
                    raise ProtocolError("too big bulk count string")
                break
            try:
                length = int(buf[p + 1 : e])
            except ValueError:
                raise ProtocolError("invalid bulk length") from None
            if length < 0 or length > max_bulk:
                raise ProtocolError("invalid bulk length")
            s = e + 2
            if s + length + 2 > n:
                break
            if buf[s + length : s + length + 2] != b"\r\n":
                raise ProtocolError("bulk string not followed by CRLF")
            args.append(bytes(buf[s : s + length]))
            p = s + length + 2
        if len(args) < count:
            break
        out.append(args)
        pos = p
    return out, pos


class RequestReader:
    """Turns the bytes of one connection into commands (lists of byte strings)."""

    def __init__(self, *, max_bulk: int, max_args: int, max_request: int) -> None:
        self.max_bulk = max_bulk
        self.max_args = max_args
        self.max_request = max_request
        #: Redis's tighter limits until the connection authenticates (set by the server)
        self.unauthenticated = False
        self._hiredis = hiredis.Reader()
        self._tail = bytearray()  # the start of an incomplete command (slow path)

    def feed(self, data: bytes) -> list[list[bytes]]:
        """The commands completed by ``data``. Raises :class:`ProtocolError`."""
        if not self._tail and data[:1] == b"*" and not self.unauthenticated:
            fast = self._whole_arrays(data)
            if fast is not None:
                return fast
        self._tail += data
        if self.unauthenticated:
            cmds, used = parse(self._tail, max_bulk=UNAUTH_MAX_BULK, max_args=UNAUTH_MAX_ARGS)
        else:
            cmds, used = parse(self._tail, max_bulk=self.max_bulk, max_args=self.max_args)
        del self._tail[:used]
        if len(self._tail) > self.max_request:
            raise ProtocolError(f"request over {self.max_request} bytes")
        return cmds

    def _whole_arrays(self, data: bytes) -> list[list[bytes]] | None:
        """hiredis's parse of ``data`` if it is whole arrays of bulk strings, else None
        (the reader is then reset: the Python parser starts over on the same bytes)."""
        r = self._hiredis
        r.feed(data)
        out: list[Any] = []
        try:
            while (c := r.gets()) is not False:
                out.append(c)
            # Whether hiredis stopped between two commands: it says nothing of a partial
            # one, so probe with an empty array, which reads back as [] only there
            # (inside a command it is an error, part of a bulk, or an element).
            r.feed(b"*0\r\n")
            whole = r.gets() == [] and r.gets() is False
        except hiredis.ProtocolError:
            whole = False
        if whole and all(type(c) is list and len(c) <= self.max_args and all(type(a) is bytes for a in c) for c in out):
            return out
        self._hiredis = hiredis.Reader()
        return None


# -- replies ---------------------------------------------------------------------------------


class Simple(str):
    """A simple string reply (``+OK``); plain ``str`` values are sent as bulk strings."""


class Verbatim(str):
    """A verbatim text reply (RESP3 ``=``; a bulk string in RESP2): INFO's reply."""


OK = b"+OK\r\n"
PONG = b"+PONG\r\n"
NULL = {False: b"$-1\r\n", True: b"_\r\n"}


def error(message: str) -> bytes:
    """``-<message>``: the message starts with its code (``ERR``, ``WRONGTYPE``, ``MOVED``...)."""
    return b"-" + message.replace("\r", " ").replace("\n", " ").encode() + b"\r\n"


def integer(i: int) -> bytes:
    return b":%d\r\n" % i


def bulk(b: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(b), b)


def encode(value: Any, resp3: bool) -> bytes:
    """One reply: bytes and str (bulk), :class:`Simple`, int (bool as 0/1, or RESP3
    booleans), float (RESP3 double, bulk in RESP2), None (null), list/tuple (array), set
    (RESP3 set), dict (RESP3 map, a flat array in RESP2), :class:`Verbatim`."""
    out: list[bytes] = []
    _encode(value, resp3, out)
    return b"".join(out)


def _encode(v: Any, resp3: bool, out: list[bytes]) -> None:
    if isinstance(v, bytes):
        out.append(b"$%d\r\n%s\r\n" % (len(v), v))
    elif isinstance(v, Simple):
        out.append(b"+" + v.encode() + b"\r\n")
    elif isinstance(v, Verbatim):
        b = v.encode()
        out.append(b"=%d\r\ntxt:%s\r\n" % (len(b) + 4, b) if resp3 else b"$%d\r\n%s\r\n" % (len(b), b))
    elif isinstance(v, str):
        b = v.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    elif isinstance(v, bool):
        out.append((b"#t\r\n" if v else b"#f\r\n") if resp3 else (b":1\r\n" if v else b":0\r\n"))
    elif isinstance(v, int):
        out.append(b":%d\r\n" % v)
    elif isinstance(v, float):
        b = repr(v).encode()
        out.append(b",%s\r\n" % b if resp3 else b"$%d\r\n%s\r\n" % (len(b), b))
    elif v is None:
        out.append(NULL[resp3])
    elif isinstance(v, dict):
        out.append((b"%%%d\r\n" if resp3 else b"*%d\r\n") % (len(v) if resp3 else 2 * len(v)))
        for k, x in v.items():
            _encode(k, resp3, out)
            _encode(x, resp3, out)
    elif isinstance(v, (set, frozenset)):
        out.append((b"~%d\r\n" if resp3 else b"*%d\r\n") % len(v))
        for x in v:
            _encode(x, resp3, out)
    elif isinstance(v, (list, tuple)):
        out.append(b"*%d\r\n" % len(v))
        for x in v:
            _encode(x, resp3, out)
    else:
        raise TypeError(f"cannot encode {type(v).__name__} as RESP")


def array_of_bulks(items: Iterable[bytes | None], resp3: bool) -> bytes:
    """An array of bulk strings or nulls (MGET's reply), without the generic encoder."""
    out = []
    null = NULL[resp3]
    for v in items:
        out.append(null if v is None else b"$%d\r\n%s\r\n" % (len(v), v))
    return b"*%d\r\n" % len(out) + b"".join(out)
