"""botocore and obstore exceptions -> cloudtier error, case by case."""

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


#: (S3 error code, HTTP status, the class it maps to, retriable)
ANSWERS = [
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
]


@pytest.mark.parametrize(("code", "status", "expected", "retriable"), ANSWERS)
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


# obstore (GETs) reports an answer in its message; the same codes map to the same classes.
def obstore_answer_error(code: str, status: int) -> BaseException:
    import obstore.exceptions as oe

    body = f"<Error><Code>{code}</Code><Message>msg for {code}</Message></Error>" if code else ""
    text = (
        "Generic S3 error: Error performing GET http://127.0.0.1:1/b/k in 2ms - "
        f"Server returned non-2xx status code: {status} Whatever: {body}"
    )
    return FileNotFoundError(text) if status == 404 else oe.GenericError(text)


@pytest.mark.parametrize(("code", "status", "expected", "retriable"), ANSWERS)
def test_obstore_answers_map_like_botocore_answers(
    code: str, status: int, expected: type, retriable: bool
) -> None:
    from cloudtier.s3_errors import map_obstore_error

    via_obstore = map_obstore_error(obstore_answer_error(code, status), "get 'k'")
    via_botocore = map_botocore_error(client_error(code, status), "get 'k'")
    assert type(via_obstore) is type(via_botocore) is expected
    assert via_obstore.retriable is via_botocore.retriable is retriable
    if code:  # an answer without a body has no message either
        assert str(via_obstore) == str(via_botocore)
