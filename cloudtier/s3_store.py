"""``s3://bucket/prefix``: an object store on S3 or any S3-compatible server, via boto3
(GETs via obstore, :mod:`cloudtier.s3_reads`).

The same settings work unchanged against AWS S3, MinIO, Ceph RGW and moto's server:

* Endpoint, region and credentials come from the explicit options, else from boto3's usual
  sources (``AWS_ENDPOINT_URL[_S3]``, ``AWS_REGION``/``AWS_DEFAULT_REGION``,
  ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, profiles, instance
  roles). Without any region, ``us-east-1`` (what MinIO and moto expect by default).
* With a custom endpoint, path-style addressing (``http://host/bucket/key``), since a
  local server has no wildcard DNS for ``bucket.host``; AWS itself gets boto3's default.
* Checksums only where the API requires them (``when_required``): botocore >= 1.36 sends
  CRC trailers by default, which older MinIO and Ceph releases reject. Integrity of
  uploads is instead checked with ``Content-MD5``, which every S3 implementation honours.
* GETs (whole and ranged) go through obstore, configured from the same resolved settings
  (endpoint, region, credentials, addressing, TLS, timeouts): about 5x less client CPU per
  GET than botocore, and its I/O releases the GIL (decision 0030). The other calls stay
  on botocore.
* No retries inside botocore or obstore (one attempt per call): retrying is
  :class:`cloudtier.retrying.RetryingStore`'s job, so that deadlines hold and metering
  sees every attempt.

Conditional puts map to ``If-None-Match: *`` and ``If-Match: "<etag>"``, which AWS S3 (since
2024), recent MinIO and Ceph evaluate atomically. moto evaluates them check-then-act, which
is enough for tests without concurrent writers.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
import uuid
from collections.abc import Callable
from typing import Any

import boto3
import botocore.session
from botocore import exceptions as bce
from botocore.config import Config

from cloudtier.errors import InvalidKeyError, NotFoundError, PreconditionFailedError, StoreError
from cloudtier.s3_errors import error_code, map_botocore_error
from cloudtier.s3_reads import S3Reader, usable_here
from cloudtier.store import (
    DEFAULT_PAGE_SIZE,
    MAX_KEY_BYTES,
    BytesLike,
    ClosableMixin,
    ListPage,
    ObjectInfo,
    ObjectStore,
    check_key,
    check_prefix,
    check_put_args,
    check_range,
    normalize_prefix,
)

__all__ = ["S3Store"]

_DEFAULT_REGION = "us-east-1"
# What a boto3 call raises when the store (not our code) failed; anything else is a bug
# and propagates unchanged.
_BOTO_ERRORS = (bce.BotoCoreError, bce.ClientError, OSError)


_loader_lock = threading.Lock()
_shared_loader: Any = None


def _botocore_session() -> botocore.session.Session:
    """A fresh botocore session (fresh credential and region lookup) that shares one
    parsed copy of the service models: parsing them costs ~60 ms per session, sharing
    makes a new store ~10 ms. The loader only caches immutable JSON, so sharing is safe.
    """
    global _shared_loader
    session = botocore.session.get_session()
    with _loader_lock:
        if _shared_loader is None:
            _shared_loader = session.get_component("data_loader")
        else:
            session.register_component("data_loader", _shared_loader)
    return session


class S3Store(ClosableMixin, ObjectStore):
    """An :class:`ObjectStore` on bucket ``bucket`` under key prefix ``prefix``.

    Options (all keyword-only, all optional):

    ``endpoint_url``  e.g. ``http://127.0.0.1:9000`` for MinIO; default: AWS (or env)
    ``region``        default: env/config, else ``us-east-1``
    ``access_key``, ``secret_key``, ``session_token``  explicit credentials
    ``create_bucket`` create the bucket if it does not exist (tests, local servers)
    ``check_conditional_puts``  at open, prove that the server enforces
                      ``If-None-Match`` and ``If-Match`` (see :meth:`check_conditional_puts`);
                      worth it for any store that fences writers
    ``max_pool_connections``  HTTP connections kept per store; size it to the number
                      of threads that call the store at once
    ``connect_timeout``, ``read_timeout``  seconds, per attempt
    ``addressing_style``  ``"path"``, ``"virtual"`` or ``"auto"`` (see module docstring)
    ``verify``        TLS verification: False, or a CA bundle path (self-signed MinIO)
    ``page_size``     objects per LIST request (S3 caps it at 1000)

    boto3 clients and obstore stores are thread-safe, so one store serves many threads.
    botocore's pool bounds how many of its requests are in flight at once; obstore's GETs
    are bounded by the calling threads, and ``max_pool_connections`` of their connections
    are kept open between calls.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        session_token: str | None = None,
        create_bucket: bool = False,
        check_conditional_puts: bool = False,
        max_pool_connections: int = 16,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        addressing_style: str | None = None,
        verify: bool | str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        if not bucket or "/" in bucket:
            raise ValueError(f"bad bucket name {bucket!r}")
        if (access_key is None) != (secret_key is None):
            raise ValueError("access_key and secret_key go together")
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        if addressing_style not in (None, "auto", "path", "virtual"):
            raise ValueError(f"addressing_style must be auto, path or virtual, not {addressing_style!r}")
        self._bucket = bucket
        self._prefix = normalize_prefix(prefix)
        self._page_size = page_size
        # boto3 sessions are not thread-safe, so each store makes its own; the client it
        # makes is thread-safe and shared by every thread using this store.
        session = boto3.session.Session(
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            aws_session_token=session_token,
            region_name=region,
            botocore_session=_botocore_session(),
        )
        self._region = session.region_name or _DEFAULT_REGION
        custom_endpoint = (
            endpoint_url
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
        )
        style = addressing_style or ("path" if custom_endpoint else "auto")
        config = Config(
            region_name=self._region,
            max_pool_connections=max_pool_connections,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"total_max_attempts": 1, "mode": "standard"},
            s3={"addressing_style": style},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            tcp_keepalive=True,
            user_agent_extra="cloudtier",
        )
        self._new_client: Callable[[], Any] = lambda: session.client(
            "s3", endpoint_url=endpoint_url, config=config, verify=verify
        )
        self._boto = self._new_client()
        self._pid = os.getpid()
        try:
            self._reader = S3Reader(
                bucket,
                self._client,
                session.get_credentials(),
                addressing_style=style,
                custom_endpoint=bool(custom_endpoint),
                verify=verify,
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                max_pool_connections=max_pool_connections,
            )
            if create_bucket:
                self._create_bucket()
            if check_conditional_puts:
                self.check_conditional_puts()
        except BaseException:
            self._client.close()
            raise

    @property
    def _client(self) -> Any:
        """The botocore client of this process. A forked child makes its own: the pooled
        keep-alive connections are shared with the parent, and two processes sending on
        one connection could each read the other's answer."""
        if self._pid != os.getpid():
            self._boto, self._pid = self._new_client(), os.getpid()
        return self._boto

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def prefix(self) -> str:
        """The key prefix, ``""`` or ending in ``/``."""
        return self._prefix

    def __repr__(self) -> str:
        return f"S3Store('s3://{self._bucket}/{self._prefix}', endpoint={self._client.meta.endpoint_url!r})"

    # --- ObjectStore ------------------------------------------------------------------

    def put(
        self,
        key: str,
        data: BytesLike,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
    ) -> str:
        self._check_open()
        full = self._full_key(key)
        check_put_args(data, if_none_match, if_match)
        body = data if isinstance(data, bytes) else bytes(data)
        params: dict[str, Any] = {
            "Bucket": self._bucket,
            "Key": full,
            "Body": body,
            # S3 rejects the upload (BadDigest) if the body arrives damaged.
            "ContentMD5": base64.b64encode(
                hashlib.md5(body, usedforsecurity=False).digest()
            ).decode("ascii"),
        }
        if if_none_match:
            params["IfNoneMatch"] = "*"
        if if_match is not None:
            params["IfMatch"] = f'"{if_match}"'  # RFC 7232: entity tags are quoted
        what = f"put {key!r}"
        try:
            resp = self._client.put_object(**params)
        except bce.ClientError as e:
            err = map_botocore_error(e, what)
            # S3 answers If-Match on a missing object with 404; to the caller that is the
            # same lost compare-and-swap as a stale etag.
            if if_match is not None and isinstance(err, NotFoundError):
                raise PreconditionFailedError(f"{what}: no such object (if_match)") from e
            raise err from e
        except _BOTO_ERRORS as e:
            raise map_botocore_error(e, what) from e
        return str(resp["ETag"]).strip('"')

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        self._check_open()
        full = self._full_key(key)
        lo, hi = check_range(start, end)
        if hi is not None and lo >= hi:
            self.head(key)  # HTTP has no empty range; still report a missing object
            return b""
        if usable_here():
            return self._reader.get(full, lo, hi, f"get {key!r}")
        return self._get_by_botocore(full, lo, hi, f"get {key!r}")

    def _get_by_botocore(self, full: str, lo: int, hi: int | None, what: str) -> bytes:
        """A GET in a process forked from one that used obstore (s3_reads.usable_here)."""
        params: dict[str, Any] = {"Bucket": self._bucket, "Key": full}
        if lo > 0 or hi is not None:
            params["Range"] = f"bytes={lo}-{'' if hi is None else hi - 1}"
        try:
            resp = self._client.get_object(**params)
            body = resp["Body"]
            try:
                return bytes(body.read())
            finally:
                body.close()
        except bce.ClientError as e:
            if error_code(e)[0] == "InvalidRange":
                return b""  # the object exists; lo is at or past its end
            raise map_botocore_error(e, what) from e
        except _BOTO_ERRORS as e:
            raise map_botocore_error(e, what) from e

    def head(self, key: str) -> ObjectInfo:
        self._check_open()
        full = self._full_key(key)
        resp = self._call(f"head {key!r}", self._client.head_object, Bucket=self._bucket, Key=full)
        return ObjectInfo(
            key,
            int(resp["ContentLength"]),
            str(resp["ETag"]).strip('"'),
            resp["LastModified"].timestamp(),
        )

    def delete(self, key: str) -> None:
        self._check_open()
        full = self._full_key(key)
        # S3 answers 204 for absent keys as well: idempotent without a HEAD.
        self._call(f"delete {key!r}", self._client.delete_object, Bucket=self._bucket, Key=full)

    def list_page(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> ListPage:
        self._check_open()
        check_prefix(prefix)
        limit = self._page_size if limit is None else limit
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        params: dict[str, Any] = {
            "Bucket": self._bucket,
            "Prefix": self._prefix + prefix,
            "MaxKeys": limit,
        }
        # StartAfter rather than a continuation token: the page boundary is then a key,
        # which lets list_page be stateless and each page be retried on its own.
        if start_after is not None:
            params["StartAfter"] = self._prefix + start_after
        resp = self._call(f"list {prefix!r}", self._client.list_objects_v2, **params)
        cut = len(self._prefix)
        objects = [
            ObjectInfo(
                o["Key"][cut:],
                int(o["Size"]),
                str(o["ETag"]).strip('"'),
                o["LastModified"].timestamp(),
            )
            for o in resp.get("Contents", ())
        ]
        return ListPage(objects, bool(resp.get("IsTruncated")))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._client.close()

    def check_conditional_puts(self) -> None:
        """Prove that the server enforces conditional puts, or raise ``StoreError``.

        An S3-compatible server that predates conditional writes ignores the
        ``If-None-Match``/``If-Match`` headers and overwrites silently, which would break
        fencing without any error. This writes a probe object under
        ``<prefix>.cloudtier-probe/``, checks that both conditions are refused when they
        should be, and deletes it: four requests.
        """
        probe = f".cloudtier-probe/{uuid.uuid4().hex}"
        etag = self.put(probe, b"probe")
        try:
            for condition in ({"if_none_match": True}, {"if_match": "0" * 32}):
                try:
                    self.put(probe, b"overwrite", **condition)
                except PreconditionFailedError:
                    continue
                raise StoreError(
                    f"s3://{self._bucket}/{self._prefix} at {self._client.meta.endpoint_url} "
                    f"ignored {next(iter(condition))!r}: the server does not support conditional "
                    "PUTs (upgrade MinIO/Ceph), so writers cannot be fenced"
                )
            if self.head(probe).etag != etag:  # pragma: no cover - caught by the loop above
                raise StoreError("conditional PUT probe was overwritten")
        finally:
            self.delete(probe)

    # --- helpers ----------------------------------------------------------------------

    def _full_key(self, key: str) -> str:
        full = self._prefix + check_key(key)
        if len(full.encode("utf-8")) > MAX_KEY_BYTES:
            raise InvalidKeyError(f"{full!r} is longer than S3's {MAX_KEY_BYTES}-byte limit")
        return full

    def _call(self, what: str, fn: Callable[..., Any], **params: Any) -> Any:
        try:
            return fn(**params)
        except _BOTO_ERRORS as e:
            raise map_botocore_error(e, what) from e

    def _create_bucket(self) -> None:
        params: dict[str, Any] = {"Bucket": self._bucket}
        if self._region != _DEFAULT_REGION:  # us-east-1 refuses an explicit constraint
            params["CreateBucketConfiguration"] = {"LocationConstraint": self._region}
        try:
            self._client.create_bucket(**params)
        except bce.ClientError as e:
            code, _ = error_code(e)
            if code == "BucketAlreadyOwnedByYou":
                return
            if code == "BucketAlreadyExists":
                # Maybe ours, maybe someone else's: HEAD tells (403 if not ours).
                self._call(f"head bucket {self._bucket!r}", self._client.head_bucket, Bucket=self._bucket)
                return
            raise map_botocore_error(e, f"create bucket {self._bucket!r}") from e
        except _BOTO_ERRORS as e:
            raise map_botocore_error(e, f"create bucket {self._bucket!r}") from e
