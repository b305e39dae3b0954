"""Free loopback ports for test servers, chosen where outgoing connections never go.

A port the OS hands out for ``bind(("127.0.0.1", 0))`` comes from the ephemeral range
(Linux: ``/proc/sys/net/ipv4/ip_local_port_range``, usually 32768-60999). Every outgoing
TCP connection also takes its local port from that range, so between the moment a test
learns "port P was free" and the moment its server binds P, any client socket in the
process (a gRPC channel, a boto3 connection, an etcd watch) may take P, and the bind
fails with "Address already in use". That is a real flake, seen in CI.

So these helpers pick from below the ephemeral range (or above it, if it starts low),
where the kernel never assigns a port on its own: only an explicit bind can take one.
Each candidate is checked by binding it; a process never hands out the same port twice
(until it has used up the whole range), so two servers in one test run never collide.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import threading
from pathlib import Path

__all__ = ["free_port", "free_port_pair", "free_ports"]

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10000  # below this live well-known and registered services
_handed_out: set[int] = set()
_lock = threading.Lock()


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in _RANGE_FILE.read_text().split())
        return lo, hi
    except (OSError, ValueError):
        return 49152, 65535  # the IANA range, which macOS and Windows use


def _candidates() -> range:
    lo, hi = _ephemeral_range()
    if lo - _LOWEST >= 1000:
        return range(_LOWEST, lo)
    return range(hi + 1, 65536)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago and outside the ephemeral range."""
    return free_ports(1, host)[0]


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct TCP ports on ``host``, each free when checked, outside the ephemeral
    range, and never before returned by this process (see the module docstring)."""
    pool = _candidates()
    rng = random.Random(os.getpid() ^ int.from_bytes(os.urandom(4), "little"))
    with _lock:
        if len(_handed_out) + n > len(pool) // 2:
            _handed_out.clear()  # a long-lived process: reuse ports from long ago
        ports: list[int] = []
        for _ in range(len(pool)):
            port = pool[rng.randrange(len(pool))]
            if port in _handed_out or not _bindable(host, port):
                continue
            _handed_out.add(port)
            ports.append(port)
            if len(ports) == n:
                return ports
    raise OSError(f"no {n} free TCP ports on {host} in {pool.start}-{pool.stop - 1}")


def free_port_pair(offset: int, host: str = "127.0.0.1") -> tuple[int, int]:
    """A free port ``p`` whose ``p + offset`` is free too, both outside the ephemeral
    range (for servers that derive a second port from the first, as SeaweedFS's gRPC
    port is its HTTP port + 10000)."""
    pool = _candidates()
    for _ in range(200):
        (p,) = free_ports(1, host)
        q = p + offset
        if q in pool and q not in _handed_out and _bindable(host, q):
            with _lock:
                _handed_out.add(q)
            return p, q
    raise OSError(f"no free port pair {offset} apart on {host} in {pool.start}-{pool.stop - 1}")


def _bindable(host: str, port: int) -> bool:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True
