"""An in-process 3-node cluster (memory datalets) with the RESP front end on every node,
for the RESP tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bespokv.resp import RespServer
from bespokv.testing import ThreadedCluster, make_config


class RespCluster:
    def __init__(self, tc: ThreadedCluster, servers: dict[str, RespServer]) -> None:
        self.tc = tc
        self.servers = servers

    def port(self, node: str = "n1") -> int:
        return self.servers[node].port

    def cluster_port(self, node: str = "n1") -> int:
        return self.servers[node].cluster_port

    def redis(self, node: str = "n1", **kw: Any) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port(node), socket_timeout=20, **kw)

    def cluster_client(self, **kw: Any) -> Any:
        from redis.cluster import RedisCluster

        return RedisCluster(host="127.0.0.1", port=self.port("n1"), socket_timeout=20, **kw)

    def shard_map(self) -> Any:
        return self.tc.nodes["n1"].shard_map


@contextmanager
def resp_cluster(mode: str = "ms-sc", **config: Any) -> Iterator[RespCluster]:
    cfg = make_config(3, mode=mode, **config)
    with ThreadedCluster(cfg) as tc:
        servers: dict[str, RespServer] = {}
        try:
            for nid, node in tc.nodes.items():  # they find each other's ports by NodeStats
                servers[nid] = tc.call(RespServer(node, allow_flushdb=True).start())
            yield RespCluster(tc, servers)
        finally:
            for srv in servers.values():
                tc.call(srv.stop())


class Raw:
    """A plain socket to a RESP port: send bytes, read whole replies (hiredis parses
    them; error replies come back as ``hiredis.ReplyError``), see whether it was closed."""

    def __init__(self, port: int, timeout: float = 20.0) -> None:
        import hiredis

        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.reader = hiredis.Reader()

    def send(self, data: bytes) -> Raw:
        self.sock.sendall(data)
        return self

    def replies(self, n: int = 1) -> list[Any]:
        out: list[Any] = []
        while len(out) < n:
            got = self.reader.gets()
            if got is not False:
                out.append(got)
                continue
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError(f"closed after {len(out)} of {n} replies")
            self.reader.feed(data)
        return out

    def closed(self) -> bool:
        """True once the server has closed the connection (waits up to the timeout)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
