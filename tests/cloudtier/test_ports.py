"""Test ports are never in the range the kernel gives outgoing connections (the CI flake:
a gRPC node's port, free when picked, taken by a client socket before the node bound it)."""

from __future__ import annotations

import socket

from cloudtier.testing import free_port, free_ports
from cloudtier.testing.ports import _ephemeral_range, free_port_pair


def test_ports_avoid_the_ephemeral_range_and_never_repeat():
    lo, hi = _ephemeral_range()
    seen = set()
    for _ in range(50):
        for p in free_ports(4):
            assert not lo <= p <= hi, p
            assert p not in seen
            seen.add(p)
    assert len(seen) == 200


def test_a_port_is_bindable_and_a_bound_one_is_skipped():
    p = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", p))  # free as promised
        s.listen()
        assert p not in free_ports(100)


def test_outgoing_connections_never_take_a_picked_port():
    """Open many outgoing connections: none of their local ports is one we would pick."""
    lo, hi = _ephemeral_range()
    with socket.socket() as server:
        server.bind(("127.0.0.1", free_port()))
        server.listen(200)
        clients = [socket.create_connection(server.getsockname()) for _ in range(100)]
        try:
            local = {c.getsockname()[1] for c in clients}
            assert all(lo <= p <= hi for p in local)
            assert not local & set(free_ports(20))
        finally:
            for c in clients:
                c.close()


def test_a_pair_is_offset_and_both_free():
    p, q = free_port_pair(10000)
    assert q == p + 10000
    for port in (p, q):
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
