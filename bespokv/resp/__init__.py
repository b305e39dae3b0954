"""The Redis front end of a bespokv node: RESP2/RESP3 with Redis Cluster's slots.

``RespServer(node, port=P, cluster_port=Q)`` serves redis-cli, redis-py and
redis-benchmark on 127.0.0.1: ``protocol.py`` (the wire), ``table.py`` (the command
table), ``keys.py`` (string commands), ``admin.py`` (connection and server commands),
``cluster.py`` (slots, CLUSTER replies, -MOVED), ``backend.py`` (the node's request path),
``server.py`` (connections, pipelining, MULTI/EXEC). See docs/bespokv.md, "Redis clients".
"""

from bespokv.resp.server import RespServer, Session

__all__ = ["RespServer", "Session"]
