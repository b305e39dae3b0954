"""DelayProxy: a TCP proxy that adds per-request delay and caps bandwidth.

This machine's kernel has no netem, so network conditions are emulated in user space: the
proxy listens on 127.0.0.1, forwards every connection to a target (an S3 endpoint), and

* delays the first bytes of each client->server *burst* by ``delay_ms``. A burst starts
  on a connection's first bytes, when the conversation turns (the server sent something
  since the client's last bytes), or after the client side was quiet for ``quiet_ms``
  (the proxy measures how long it *waited* for the data, so its own delays and
  back-pressure never count as quiet). For HTTP that is one delay per request: the
  turn catches back-to-back requests on a kept-alive connection however fast the
  server answers, and a request body streamed in many reads stays one burst. With
  ``Expect: 100-continue`` a PUT is two bursts (headers, then the body after the
  server's go-ahead), as it is two round trips on a real network. The quiet period is
  10 ms by default, above Python's 5 ms GIL switch interval, so thread scheduling in
  a busy client does not split a burst;
* counts each client->server burst by the HTTP request line it starts with
  (:data:`REQUEST_KINDS`, S3's request classes: ``get``, ``put``, ``head``, ``delete``,
  ``list`` for a GET of a bucket, ``post``, ``other``), and counts a burst that starts
  without a request line (the body of a PUT sent after ``100 Continue``, or a request
  split by a quiet gap) as ``continuation``: the per-kind counts are the HTTP requests
  themselves, comparable with what a client's own meter counted, where ``requests``
  counts bursts (delays);
* optionally delays the first bytes of each server->client burst by ``response_delay_ms``;
* caps throughput at ``bandwidth`` bytes/s per direction, shared by all connections
  (one emulated link), by pacing each chunk to the time the link would need to send it;
* can cut the link (:meth:`DelayProxy.cut`, a network partition) and heal it again
  (:meth:`DelayProxy.heal`). While cut, no byte passes in either direction and a new
  connection is accepted but not connected to the target: the peers see silence, not a
  refusal or a reset, as when packets are dropped. Bytes sent meanwhile wait (in the
  proxy's current read and the kernels' socket buffers, then the sender blocks) and pass
  after the heal, as TCP retransmission would deliver them. A peer's own timeouts and
  keep-alives decide whether its connection survives the cut.

Every engine in a comparison should talk to its endpoint through the same proxy.

Library use (a background thread runs an asyncio loop)::

    with DelayProxy("127.0.0.1:9000", profile="s3") as proxy:
        store = open_store("s3://b/p", endpoint_url=proxy.endpoint_url, ...)

Command line: ``python -m cloudtier.proxy --target 127.0.0.1:9000 --delay-ms 20
--bandwidth 100MB`` (``--help`` for all options).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import re
import signal
import sys
import threading
from collections.abc import Sequence
from types import TracebackType

from cloudtier.units import parse_rate

__all__ = ["DelayProxy", "ProxyProfile", "PROFILES", "REQUEST_KINDS", "parse_bandwidth",
           "parse_hostport", "request_kind", "main"]

_CHUNK = 64 * 1024  # bytes read per socket read; pacing granularity at a bandwidth cap

#: What :meth:`DelayProxy.stats` counts client->server bursts by (``http_<kind>``).
REQUEST_KINDS = ("get", "put", "head", "delete", "list", "post", "other", "continuation")
_METHODS = {b"GET": "get", b"PUT": "put", b"HEAD": "head", b"DELETE": "delete", b"POST": "post"}
_REQUEST_LINE = re.compile(rb"([A-Z]+) (\S+) HTTP/1\.[01]\r?\n")


def request_kind(first: bytes) -> str:
    """The kind of request a client->server burst starting with ``first`` is.

    ``continuation`` when it does not start with an HTTP/1 request line; ``list`` for a
    GET of a path with one segment (``/bucket?list-type=2...``: S3's path-style
    ListObjects), ``get`` for any other GET; ``put``, ``head``, ``delete``, ``post`` by
    method; ``other`` for another method.
    """
    m = _REQUEST_LINE.match(first)
    if m is None:
        return "continuation"
    kind = _METHODS.get(m.group(1), "other")
    if kind == "get":
        path = m.group(2).split(b"?", 1)[0].strip(b"/")
        if b"/" not in path:
            kind = "list"
    return kind


@dataclasses.dataclass(frozen=True)
class ProxyProfile:
    """Named network conditions."""

    delay_ms: float = 0.0
    response_delay_ms: float = 0.0
    bandwidth: float | None = None  #: bytes/s per direction; None = unlimited


#: ``none``: pass-through; ``lan``: 1 ms per request (a rack away); ``s3``: 20 ms per
#: request, a stand-in for a regional S3 endpoint (real S3 varies, and is often slower).
PROFILES: dict[str, ProxyProfile] = {
    "none": ProxyProfile(),
    "lan": ProxyProfile(delay_ms=1.0),
    "s3": ProxyProfile(delay_ms=20.0),
}


class _Direction:
    """One direction of the emulated link: its delay, pacer and counters (loop thread)."""

    def __init__(self, delay_s: float, bandwidth: float | None) -> None:
        self.delay_s = delay_s
        self.bandwidth = bandwidth
        self._free_at = 0.0  # when the link finishes sending what it has accepted
        self.bursts = 0
        self.bytes = 0
        #: Bursts by :func:`request_kind` (counted for the client->server direction).
        self.kinds = dict.fromkeys(REQUEST_KINDS, 0)

    async def pace(self, n: int) -> None:
        """Wait until a link of ``bandwidth`` bytes/s would have sent ``n`` more bytes."""
        if not self.bandwidth:
            return
        now = asyncio.get_running_loop().time()
        self._free_at = max(now, self._free_at) + n / self.bandwidth
        if self._free_at > now:
            await asyncio.sleep(self._free_at - now)


class _Turn:
    """Which direction of one connection forwarded data last."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: _Direction | None = None


class DelayProxy:
    """A delaying, throttling TCP proxy from ``host:port`` (127.0.0.1, a free port by
    default) to ``target``; see the module docstring.

    ``profile`` picks defaults from :data:`PROFILES`; explicit ``delay_ms``,
    ``response_delay_ms`` and ``bandwidth`` (bytes/s per direction) override them.
    ``start()``/``stop()`` or a ``with`` block; ``stats()`` reports counters.
    """

    def __init__(
        self,
        target: str | tuple[str, int],
        *,
        profile: str = "none",
        delay_ms: float | None = None,
        response_delay_ms: float | None = None,
        bandwidth: float | None = None,
        quiet_ms: float = 10.0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; use one of {', '.join(PROFILES)}")
        base = PROFILES[profile]
        self.target = parse_hostport(target) if isinstance(target, str) else target
        self.delay_ms = base.delay_ms if delay_ms is None else delay_ms
        self.response_delay_ms = (
            base.response_delay_ms if response_delay_ms is None else response_delay_ms
        )
        self.bandwidth = base.bandwidth if bandwidth is None else bandwidth
        if self.delay_ms < 0 or self.response_delay_ms < 0 or quiet_ms < 0:
            raise ValueError("delays must be >= 0")
        if self.bandwidth is not None and self.bandwidth <= 0:
            raise ValueError(f"bandwidth must be > 0 bytes/s, got {self.bandwidth}")
        self.quiet_s = quiet_ms / 1000.0
        self.host = host
        self.port = 0
        self._requested_port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections = 0
        self._up = _Direction(self.delay_ms / 1000.0, self.bandwidth)
        self._down = _Direction(self.response_delay_ms / 1000.0, self.bandwidth)
        self._cut = False
        self._healed: asyncio.Event | None = None  # set while the link is up (loop thread)

    @property
    def endpoint_url(self) -> str:
        """``http://host:port`` of the proxy, for an HTTP client such as boto3."""
        if not self.port:
            raise RuntimeError("DelayProxy is not running")
        return f"http://{self.host}:{self.port}"

    def describe(self) -> str:
        bw = "unlimited" if not self.bandwidth else f"{self.bandwidth / 1e6:g} MB/s"
        return (
            f"request delay {self.delay_ms:g} ms, response delay {self.response_delay_ms:g} ms, "
            f"bandwidth {bw} per direction"
        )

    @property
    def is_cut(self) -> bool:
        return self._cut

    def cut(self) -> None:
        """Drop the link: from now on no byte passes either way (see the module doc)."""
        self._set_cut(True)

    def heal(self) -> None:
        """Restore the link: held bytes and connections go on."""
        self._set_cut(False)

    def _set_cut(self, value: bool) -> None:
        loop = self._loop
        if loop is None or not loop.is_running():
            raise RuntimeError("DelayProxy is not running")

        async def apply() -> None:
            assert self._healed is not None
            self._cut = value
            if value:
                self._healed.clear()
            else:
                self._healed.set()

        # Returns once the loop thread has applied it: no byte is forwarded after cut().
        asyncio.run_coroutine_threadsafe(apply(), loop).result(timeout=10)

    def stats(self) -> dict[str, int]:
        """Counters: connections, requests/responses (bursts), bytes_up/bytes_down, and
        ``http_<kind>`` for each of :data:`REQUEST_KINDS` (client->server bursts by the
        request line they start with; they add up to ``requests``).

        Every burst and byte is counted before it is forwarded, so everything a client
        has received (or a server has been sent) is already included."""
        out = {
            "connections": self._connections,
            "requests": self._up.bursts,
            "responses": self._down.bursts,
            "bytes_up": self._up.bytes,
            "bytes_down": self._down.bytes,
        }
        out.update({f"http_{k}": n for k, n in self._up.kinds.items()})
        return out

    def start(self) -> DelayProxy:
        """Bind and start serving in a background thread; returns once listening."""
        if self._thread is not None:
            raise RuntimeError("DelayProxy already started")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(
            target=loop.run_forever, name=f"DelayProxy->{self.target[0]}:{self.target[1]}", daemon=True
        )
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._open(), loop).result(timeout=10)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Close the listener and every open connection, and end the thread. Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._close(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        self._loop = self._thread = None
        self.port = 0

    def __enter__(self) -> DelayProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f"{self.host}:{self.port}" if self.port else "stopped"
        return f"DelayProxy({where} -> {self.target[0]}:{self.target[1]}, {self.describe()})"

    # --- the loop thread --------------------------------------------------------------

    async def _open(self) -> None:
        self._healed = asyncio.Event()
        if not self._cut:
            self._healed.set()
        self._server = await asyncio.start_server(self._handle, self.host, self._requested_port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._connections += 1
        server_w: asyncio.StreamWriter | None = None
        try:
            assert self._healed is not None
            await self._healed.wait()  # a cut link connects nothing
            try:
                server_r, server_w = await asyncio.open_connection(*self.target)
            except OSError:
                return  # target down: the client sees its connection closed
            turn = _Turn()
            pumps = [
                asyncio.create_task(self._pump(client_r, server_w, self._up, turn)),
                asyncio.create_task(self._pump(server_r, client_w, self._down, turn)),
            ]
            try:
                await asyncio.gather(*pumps)
            except (OSError, asyncio.CancelledError):
                # One side broke (or we are stopping): drop both, as a real link would.
                for p in pumps:
                    p.cancel()
                client_w.transport.abort()
                server_w.transport.abort()
        finally:
            for w in (client_w, server_w):
                if w is not None:
                    w.close()
            self._tasks.discard(task)

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        d: _Direction,
        turn: _Turn,
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            waited_from = loop.time()
            data = await reader.read(_CHUNK)
            if not data:
                break
            # New burst: first data or the other side spoke last (turn.last is not d), or
            # we had to wait a while for it. Bytes that queued up while we slept or paced
            # arrive without waiting and belong to the burst in progress.
            if turn.last is not d or loop.time() - waited_from >= self.quiet_s:
                turn.last = d
                d.bursts += 1
                if d is self._up:
                    d.kinds[request_kind(data)] += 1
                if d.delay_s:
                    await asyncio.sleep(d.delay_s)
            assert self._healed is not None
            await self._healed.wait()  # a cut link forwards nothing (the bytes wait here)
            await d.pace(len(data))
            # Counted before it is forwarded: once the peer holds these bytes, stats()
            # includes them (counting after drain() let a reader see the reply but not
            # its count: the 64 == 96 flake of issue 9).
            d.bytes += len(data)
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            with contextlib.suppress(OSError):
                writer.write_eof()  # half-close: pass the EOF on, keep the other way open


# --- parsing and the command line -------------------------------------------------------

#: ``"100MB"`` -> 100e6 bytes/s: :func:`cloudtier.units.parse_rate` (B, KB/MB/GB,
#: KiB/MiB/GiB, Kbit/Mbit/Gbit, an optional ``/s``).
parse_bandwidth = parse_rate


def parse_hostport(text: str) -> tuple[str, int]:
    """``"127.0.0.1:9000"`` or ``"http://127.0.0.1:9000"`` -> ``("127.0.0.1", 9000)``."""
    rest = re.sub(r"^[a-z]+://", "", text.strip()).rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cloudtier.proxy",
        description=(
            "TCP proxy that adds per-request delay and caps bandwidth between a client and\n"
            "an S3 endpoint (or any TCP server). A request is a client->server burst: it\n"
            "starts on a new connection, after the server has answered, or after the\n"
            "client was quiet for --quiet-ms. Runs until Ctrl-C or SIGTERM."
        ),
        epilog=(
            "profiles: "
            + "; ".join(
                f"{name} = {p.delay_ms:g} ms/request" for name, p in PROFILES.items()
            )
            + "\n\nexamples:\n"
            "  python -m cloudtier.proxy --target 127.0.0.1:9000 --delay-ms 20 --bandwidth 100MB\n"
            "  python -m cloudtier.proxy --target 127.0.0.1:9000 --profile lan --port 9100\n"
            "then point the client at the printed address,\n"
            "  e.g. AWS_ENDPOINT_URL=http://127.0.0.1:9100"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--target", required=True, metavar="HOST:PORT", help="where to forward connections")
    add("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    add("--port", type=int, default=0, help="port to listen on (default: a free one, printed)")
    add("--profile", choices=sorted(PROFILES), default="none", help="named conditions (default: none)")
    add("--delay-ms", type=float, metavar="MS", help="delay added to each request (client->server burst)")
    add("--response-delay-ms", type=float, metavar="MS", help="delay added to each response (server->client)")
    add(
        "--bandwidth",
        type=parse_bandwidth,
        metavar="RATE",
        help="cap per direction in bytes/s: 100MB, 12.5MiB, 1Gbit, 500000",
    )
    add("--quiet-ms", type=float, default=10.0, metavar="MS", help="quiet gap that starts a request (10)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the proxy until SIGINT or SIGTERM."""
    args = _build_parser().parse_args(argv)
    try:
        target = parse_hostport(args.target)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    proxy = DelayProxy(
        target,
        profile=args.profile,
        delay_ms=args.delay_ms,
        response_delay_ms=args.response_delay_ms,
        bandwidth=args.bandwidth,
        quiet_ms=args.quiet_ms,
        host=args.host,
        port=args.port,
    )
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    proxy.start()
    print(
        f"cloudtier.proxy listening on {proxy.host}:{proxy.port} -> "
        f"{target[0]}:{target[1]} ({proxy.describe()})",
        flush=True,
    )
    try:
        while not done.wait(0.5):  # a timed wait keeps the main thread responsive to signals
            pass
    finally:
        proxy.stop()
    print(f"cloudtier.proxy stopped: {proxy.stats()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
