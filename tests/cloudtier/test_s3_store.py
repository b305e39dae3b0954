"""s3:// specifics against each session server, SeaweedFS and moto (and a proxy for timeouts)."""

from __future__ import annotations

import base64
import hashlib
import time
import uuid
from typing import Any

import pytest
from cloudtier_testutil import BUCKET

from cloudtier import (
    NotFoundError,
    RetryingStore,
    RetryPolicy,
    StoreError,
    StoreTimeoutError,
    TransientError,
    open_store,
)
from cloudtier.proxy import DelayProxy
from cloudtier.s3_store import S3Store
from cloudtier.testing import ChildServer, free_port

pytestmark = pytest.mark.server


def test_prefix_scopes_keys_within_the_bucket(s3_options: dict[str, Any]) -> None:
    tag = uuid.uuid4().hex[:8]
    with S3Store(BUCKET, f"{tag}/one", **s3_options) as one, S3Store(
        BUCKET, f"{tag}/two/", **s3_options
    ) as two, S3Store(BUCKET, tag, **s3_options) as parent:
        one.put("k", b"1")
        two.put("k", b"2")
        assert one.get("k") == b"1" and two.get("k") == b"2"
        assert [o.key for o in parent.list()] == ["one/k", "two/k"]
        assert [o.key for o in one.list()] == ["k"]


def test_missing_bucket_is_a_setup_error_not_a_missing_object(s3_options: dict[str, Any]) -> None:
    with S3Store("no-such-bucket-here", **s3_options) as store:
        with pytest.raises(StoreError) as info:
            store.get("k")
    assert not isinstance(info.value, NotFoundError)
    assert not info.value.retriable
    assert "NoSuchBucket" in str(info.value)


def test_create_bucket_is_idempotent(s3_options: dict[str, Any]) -> None:
    name = f"ct-{uuid.uuid4().hex[:12]}"
    S3Store(name, create_bucket=True, **s3_options).close()
    with S3Store(name, create_bucket=True, **s3_options) as store:
        store.put("k", b"v")
        assert store.get("k") == b"v"


def test_refused_connection_is_transient() -> None:
    port = free_port()  # nothing listens here
    with S3Store(
        BUCKET, endpoint_url=f"http://127.0.0.1:{port}", access_key="x", secret_key="y", connect_timeout=1
    ) as store:
        with pytest.raises(TransientError) as info:
            store.head("k")
    assert info.value.retriable
    assert isinstance(info.value.__cause__, Exception)  # botocore's error stays attached


def test_slow_server_raises_store_timeout(s3_server: ChildServer, s3_options: dict[str, Any]) -> None:
    with DelayProxy(s3_server.endpoint_url, response_delay_ms=1500) as slow:
        options = {**s3_options, "endpoint_url": slow.endpoint_url, "read_timeout": 0.3}
        with S3Store(BUCKET, **options) as store:
            t0 = time.monotonic()
            with pytest.raises(StoreTimeoutError):
                store.head("anything")
            assert time.monotonic() - t0 < 1.4  # gave up at the timeout, not the answer
            retrying = RetryingStore(store, RetryPolicy(max_attempts=2, base_delay_s=0.01))
            with pytest.raises(StoreTimeoutError) as info:
                retrying.head("anything")
            assert "gave up after 2 attempts" in "".join(info.value.__notes__)


def test_credentials_and_endpoint_from_standard_env_vars(
    s3_server: ChildServer, s3_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_options["access_key"])  # SeaweedFS checks them
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_options["secret_key"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with open_store(f"s3://{BUCKET}/env-{uuid.uuid4().hex[:8]}") as store:
        store.put("k", b"via env")
        assert store.get("k") == b"via env"
        assert store._client.meta.config.s3["addressing_style"] == "path"  # type: ignore[attr-defined]


def _text_headers(headers: Any) -> dict[str, str]:
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in headers.items()}


def test_upload_carries_content_md5_and_no_checksum_trailer(s3_options: dict[str, Any]) -> None:
    seen: list[dict[str, str]] = []
    with S3Store(BUCKET, "md5", **s3_options) as store:
        store._client.meta.events.register(  # type: ignore[attr-defined]
            "before-send.s3.PutObject", lambda request, **_: seen.append(_text_headers(request.headers))
        )
        store.put("k", b"payload")
    (headers,) = seen
    assert headers["Content-MD5"] == base64.b64encode(hashlib.md5(b"payload").digest()).decode()
    # Older MinIO/Ceph reject botocore's default CRC trailers; we must not send them.
    assert not any(h.lower().startswith("x-amz-checksum") for h in headers)
    assert "x-amz-trailer" not in {h.lower() for h in headers}


def test_key_plus_prefix_over_the_limit_is_refused(s3_options: dict[str, Any]) -> None:
    from cloudtier import InvalidKeyError

    with S3Store(BUCKET, "p" * 100, **s3_options) as store:
        with pytest.raises(InvalidKeyError):
            store.put("k" * 1000, b"x")


def test_conditional_put_check_passes_on_a_server_that_enforces_them(s3_options: dict[str, Any]) -> None:
    with S3Store(BUCKET, "probe-ok", check_conditional_puts=True, **s3_options) as store:
        assert list(store.list()) == []  # the probe cleaned up after itself


def test_conditional_put_check_catches_a_server_that_ignores_them(
    s3_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = S3Store(BUCKET, "probe-old-server", **s3_options)

    def strip_conditions(params: dict[str, Any], **_: Any) -> None:
        params.pop("IfNoneMatch", None)  # what an old server effectively does
        params.pop("IfMatch", None)

    store._client.meta.events.register("provide-client-params.s3.PutObject", strip_conditions)  # type: ignore[attr-defined]
    with pytest.raises(StoreError, match="does not support conditional"):
        store.check_conditional_puts()
    assert list(store.list()) == []
    store.close()
