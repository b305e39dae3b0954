"""MotoServer: moto's in-memory S3 server as a child process (the fallback local S3).

moto's server mode (``python -m moto.server``, from ``moto[server]``) speaks the S3 REST
API over HTTP, including ranged GETs, ListObjectsV2 and conditional PUTs, and keeps
everything in memory. It evaluates ``If-None-Match`` and ``If-Match`` check-then-act,
so neither is atomic between racing writers::

    with MotoServer() as moto:
        store = open_store("s3://bucket/db", create_bucket=True, **moto.store_options())
"""

from __future__ import annotations

import http.client
import sys

from cloudtier.testing.child_server import ChildServer, ConditionalPuts
from cloudtier.testing.ports import free_port

__all__ = ["MotoServer"]


class MotoServer(ChildServer):
    """moto's S3 server on ``host`` (127.0.0.1) and a free port; starts in under a second.

    Accepts any credentials; :meth:`store_options` supplies fake ones.
    """

    kind = "moto server"
    conditional_puts = ConditionalPuts(if_none_match_atomic=False, if_match_atomic=False)

    def _command(self) -> tuple[list[str], dict[str, str] | None]:
        self.port = self._requested_port or free_port(self.host)
        return [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)], None

    def _probe(self) -> bool:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=1.0)
        try:
            conn.request("GET", "/moto-api/")
            conn.getresponse().read()
            return True  # any HTTP answer means it is serving
        finally:
            conn.close()

    def reset(self) -> None:
        """Drop every bucket and object (moto's ``/moto-api/reset``)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            conn.request("POST", "/moto-api/reset")
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise RuntimeError(f"moto reset failed: HTTP {resp.status}")
        finally:
            conn.close()
