"""botocore exception -> cloudtier error, case by case."""

from __future__ import annotations

import pytest
from botocore import exceptions as bce

from cloudtier import (
    NotFoundError,
    PreconditionFailedError,
    StoreError,
    StoreTimeoutError,
    TransientError,
)
from cloudtier.s3_errors import map_botocore_error


def client_error(code: str, status: int) -> bce.ClientError:
    return bce.ClientError(
        {
            "Error": {"Code": code, "Message": f"msg for {code}"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "GetObject",
    )


@pytest.mark.parametrize(
    ("code", "status", "expected", "retriable"),
    [
        ("NoSuchKey", 404, NotFoundError, False),
        ("404", 404, NotFoundError, False),  # HEAD has no body, so no code but the status
        ("", 404, NotFoundError, False),
        ("NoSuchBucket", 404, StoreError, False),  # setup problem, not a missing object
        ("PreconditionFailed", 412, PreconditionFailedError, False),
        ("ConditionalRequestConflict", 409, TransientError, True),
        ("SlowDown", 503, TransientError, True),
        ("Throttling", 400, TransientError, True),
        ("TooManyRequests", 429, TransientError, True),
        ("", 429, TransientError, True),
        ("InternalError", 500, TransientError, True),
        ("ServiceUnavailable", 503, TransientError, True),
        ("", 502, TransientError, True),
        ("RequestTimeout", 400, TransientError, True),
        ("BadDigest", 400, TransientError, True),
        ("AccessDenied", 403, StoreError, False),
        ("InvalidAccessKeyId", 403, StoreError, False),
        ("SignatureDoesNotMatch", 403, StoreError, False),
        ("BucketAlreadyExists", 409, StoreError, False),
        ("InvalidArgument", 400, StoreError, False),
    ],
)
def test_client_errors(code: str, status: int, expected: type, retriable: bool) -> None:
    err = map_botocore_error(client_error(code, status), "get 'k'")
    assert type(err) is expected
    assert err.retriable is retriable
    assert "get 'k'" in str(err)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (bce.ReadTimeoutError(endpoint_url="http://x"), StoreTimeoutError),
        (bce.ConnectTimeoutError(endpoint_url="http://x"), StoreTimeoutError),
        (bce.EndpointConnectionError(endpoint_url="http://x"), TransientError),
        (bce.ConnectionClosedError(endpoint_url="http://x"), TransientError),
        (bce.ResponseStreamingError(error="reset"), TransientError),
        (bce.IncompleteReadError(actual_bytes=1, expected_bytes=2), TransientError),
        (ConnectionResetError(104, "reset"), TransientError),
        (bce.NoCredentialsError(), StoreError),
        (bce.ParamValidationError(report="bad"), StoreError),
    ],
)
def test_transport_and_client_side_errors(exc: BaseException, expected: type) -> None:
    err = map_botocore_error(exc, "put 'k'")
    assert type(err) is expected
    assert err.retriable is (expected in (TransientError, StoreTimeoutError))


def test_no_credentials_message_says_what_to_set() -> None:
    err = map_botocore_error(bce.NoCredentialsError(), "put 'k'")
    assert "AWS_ACCESS_KEY_ID" in str(err) and "access_key=" in str(err)
