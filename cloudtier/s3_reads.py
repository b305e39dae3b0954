"""GETs of an :class:`~cloudtier.s3_store.S3Store` through obstore (Rust ``object_store``).

Why a second client (decision 0030): a tiered database's cache miss is one ranged GET,
and through botocore each costs the client about 4 ms of CPU, most of it under the GIL,
which caps one process at about 230 GETs a second whatever the concurrency. obstore signs
and sends the request and reads the body in Rust with the GIL released: about 0.8 ms of
CPU per 256 KiB ranged GET in the same run. Only GETs move; PUT (conditional), HEAD, LIST
and DELETE stay on botocore, so the conditional-write semantics and the error answers
that fencing relies on are unchanged.

The reader takes everything from the store's resolved botocore settings, so the two
clients cannot disagree: the endpoint (``client.meta.endpoint_url``, which already
honours ``AWS_ENDPOINT_URL[_S3]``), region, addressing style, TLS verification, timeouts
and pool size. Credentials come from botocore's credential chain through obstore's
``credential_provider`` callback (refreshable credentials are asked again every few
minutes; botocore refreshes them). obstore retries nothing (``max_retries=0``):
retrying stays :class:`cloudtier.retrying.RetryingStore`'s job, as for botocore.
"""

from __future__ import annotations

import datetime as _dt
import os
from typing import TYPE_CHECKING, Any

import obstore
from obstore.store import S3Store as _ObStore

from cloudtier.s3_errors import map_obstore_error, obstore_answer

if TYPE_CHECKING:
    from obstore.store import ClientConfig

__all__ = ["S3Reader", "usable_here"]

# obstore does its I/O on a tokio runtime whose threads a fork does not copy: a forked
# child that calls into obstore once its parent has hangs for ever, even through a store
# made in the child (obstore and tokio both call fork unsupported; measured here). So the
# first process to make a reader owns obstore, and in its forked children S3Store reads
# through botocore instead (usable_here). A child of a process that never made one may.
_owner: int | None = None


def usable_here() -> bool:
    """Whether this process may call into obstore: no ancestor it was forked from did."""
    return _owner is None or _owner == os.getpid()

# How long obstore may keep a credential before asking botocore again. botocore's own
# refreshable credentials renew themselves well before they expire.
_CREDENTIAL_TTL = _dt.timedelta(minutes=5)
# botocore has no limit on a whole request, only per read; a whole-object GET of a large
# table over a slow link may take long, and a stalled one is caught by the read timeout.
_REQUEST_TIMEOUT = "1h"


class S3Reader:
    """GETs of ``bucket`` through obstore, configured like the botocore ``client``."""

    def __init__(
        self,
        bucket: str,
        client: Any,
        credentials: Any,
        *,
        addressing_style: str,
        custom_endpoint: bool,
        verify: bool | str | None,
        connect_timeout: float,
        read_timeout: float,
        max_pool_connections: int,
    ) -> None:
        global _owner
        if _owner is None:
            _owner = os.getpid()  # before obstore starts its runtime
        endpoint = str(client.meta.endpoint_url)
        # As boto3's "auto": virtual-hosted on AWS unless a dotted name would break TLS.
        virtual = addressing_style == "virtual" or (
            addressing_style == "auto" and not custom_endpoint and "." not in bucket
        )
        options: ClientConfig = {
            "allow_http": endpoint.startswith("http://"),
            "connect_timeout": _dt.timedelta(seconds=connect_timeout),
            "read_timeout": _dt.timedelta(seconds=read_timeout),
            "timeout": _REQUEST_TIMEOUT,
            "pool_max_idle_per_host": str(max_pool_connections),
            "user_agent": "cloudtier",
        }
        if verify is False:
            options["allow_invalid_certificates"] = True
        elif isinstance(verify, str):
            with open(verify, "rb") as f:
                options["root_certificate"] = f.read()
        config: dict[str, Any] = {
            "region": client.meta.region_name,
            "virtual_hosted_style_request": virtual,
        }
        if custom_endpoint:
            # object_store wants the bucket in a virtual-hosted endpoint's host name.
            config["endpoint"] = _with_bucket_host(endpoint, bucket) if virtual else endpoint
        self._credentials = credentials
        self._store = _ObStore(
            bucket,
            client_options=options,
            retry_config={"max_retries": 0},
            credential_provider=self._credential,  # type: ignore[arg-type]
            **config,
        )

    def get(self, full_key: str, lo: int, hi: int | None, what: str) -> bytes:
        """Bytes ``[lo, hi)`` of ``full_key`` (``hi`` None: to the end); ``b""`` if ``lo``
        is at or past the end of an existing object. Raises :class:`StoreError`."""
        try:
            if hi is not None:
                return bytes(obstore.get_range(self._store, full_key, start=lo, end=hi))
            if lo > 0:
                return bytes(obstore.get(self._store, full_key, options={"range": {"offset": lo}}).bytes())
            return bytes(obstore.get(self._store, full_key).bytes())
        except Exception as e:
            if obstore_answer(e)[0] == "InvalidRange":
                return b""  # the object exists; lo is at or past its end
            raise map_obstore_error(e, what) from e

    def _credential(self) -> dict[str, Any]:
        if self._credentials is None:
            raise RuntimeError(
                "no usable AWS credentials; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                "or pass access_key= and secret_key="
            )
        frozen = self._credentials.get_frozen_credentials()
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token,
            "expires_at": _dt.datetime.now(_dt.timezone.utc) + _CREDENTIAL_TTL,
        }


def _with_bucket_host(endpoint: str, bucket: str) -> str:
    scheme, _, rest = endpoint.partition("://")
    return f"{scheme}://{bucket}.{rest}"
