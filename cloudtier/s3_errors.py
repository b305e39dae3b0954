"""Translate boto3/botocore and obstore exceptions into :mod:`cloudtier.errors`.

The rule: whatever a retry could fix is retriable (5xx, throttling, timeouts, dropped or
refused connections, a body cut short, a checksum mismatch in transit); whatever needs a
human (credentials, permissions, a missing bucket, a malformed request) is a plain
non-retriable :class:`StoreError`. The codes come from the S3 error-code list and the
codes botocore's own retry handler treats as transient or throttling. Both clients' errors
go through one classification (:func:`classify`) of the S3 error code and HTTP status, so a
GET (obstore) and a PUT (botocore) that meet the same answer raise the same class.
"""

from __future__ import annotations

import re

from botocore import exceptions as bce

from cloudtier.errors import (
    NotFoundError,
    PreconditionFailedError,
    StoreError,
    StoreTimeoutError,
    TransientError,
)

__all__ = ["classify", "error_code", "map_botocore_error", "map_obstore_error", "obstore_answer"]

_NOT_FOUND = frozenset({"NoSuchKey", "NotFound", "404"})
_PRECONDITION = frozenset({"PreconditionFailed", "412"})
# Throttling: the request was refused, retry after backing off.
_THROTTLING = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequests",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "ProvisionedThroughputExceededException",
        "PriorRequestNotComplete",
    }
)
# Transient server-side conditions reported with a 4xx status.
_TRANSIENT_4XX = frozenset(
    {
        "RequestTimeout",  # S3: the socket went idle mid-upload
        "RequestTimeoutException",
        "ConditionalRequestConflict",  # 409: a concurrent conditional write; retry
        "OperationAborted",  # 409: a conflicting operation is in progress
        "BadDigest",  # Content-MD5 mismatch: the body was damaged in transit
        "XAmzContentSHA256Mismatch",
        "IncompleteBody",
    }
)
# Codes that mean "fix your setup", even when their status is 404.
_SETUP = frozenset({"NoSuchBucket"})


def error_code(exc: bce.ClientError) -> tuple[str, int]:
    """The S3 error code and HTTP status of a ``ClientError`` (``("", 0)`` if absent)."""
    err = exc.response.get("Error", {}) or {}
    meta = exc.response.get("ResponseMetadata", {}) or {}
    return str(err.get("Code", "")), int(meta.get("HTTPStatusCode", 0) or 0)


def map_botocore_error(exc: BaseException, what: str) -> StoreError:
    """Return the :class:`StoreError` for ``exc``; ``what`` names the call ("get 'k'").

    The caller raises the result ``from exc`` so the botocore exception stays attached.
    """
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, bce.ClientError):
        return _map_client_error(exc, what)
    # Timeouts before connection errors: botocore's timeouts subclass its ConnectionError.
    if isinstance(exc, (bce.ConnectTimeoutError, bce.ReadTimeoutError, TimeoutError)):
        return StoreTimeoutError(f"{what}: timed out: {exc}")
    if isinstance(
        exc,
        (
            bce.EndpointConnectionError,
            bce.ConnectionClosedError,
            bce.ConnectionError,
            bce.ResponseStreamingError,
            bce.IncompleteReadError,
            bce.HTTPClientError,
            OSError,  # socket-level failures botocore did not wrap (reset, unreachable)
        ),
    ):
        return TransientError(f"{what}: connection failed: {exc}")
    if isinstance(exc, (bce.NoCredentialsError, bce.PartialCredentialsError)):
        return StoreError(
            f"{what}: no usable AWS credentials ({exc}); set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY or pass access_key= and secret_key="
        )
    if isinstance(exc, bce.BotoCoreError):
        return StoreError(f"{what}: {exc}")
    return StoreError(f"{what}: unexpected {type(exc).__name__}: {exc}")


def _map_client_error(exc: bce.ClientError, what: str) -> StoreError:
    code, status = error_code(exc)
    message = (exc.response.get("Error", {}) or {}).get("Message", "")
    return classify(code, status, message, what)


def classify(code: str, status: int, message: str, what: str) -> StoreError:
    """The :class:`StoreError` for an S3 error answer: its ``code`` (``""`` if the answer
    had no body), HTTP ``status`` and ``message``."""
    text = f"{what}: {code or 'HTTP'} ({status}){': ' + message if message else ''}"
    if code in _SETUP:
        return StoreError(text)
    if code in _NOT_FOUND or (status == 404 and not code):
        return NotFoundError(text)
    if code in _PRECONDITION or status == 412:
        return PreconditionFailedError(text)
    if code in _THROTTLING or code in _TRANSIENT_4XX or status == 429 or status >= 500:
        return TransientError(text)
    return StoreError(text)


# obstore (object_store) states an error answer in its message, body included:
# "... Server returned non-2xx status code: 404 Not Found: <?xml ...><Code>NoSuchKey</Code>..."
_OBSTORE_STATUS = re.compile(r"status code: (\d{3})")
_XML_CODE = re.compile(r"<Code>([^<]*)</Code>")
_XML_MESSAGE = re.compile(r"<Message>([^<]*)</Message>")


def obstore_answer(exc: BaseException) -> tuple[str, int]:
    """The S3 error code and HTTP status an obstore error reports (``("", 0)`` if the
    server did not answer: a refused, dropped or timed-out request)."""
    text = str(exc)
    status = _OBSTORE_STATUS.search(text)
    code = _XML_CODE.search(text)
    return (code.group(1) if code else ""), (int(status.group(1)) if status else 0)


def map_obstore_error(exc: BaseException, what: str) -> StoreError:
    """Return the :class:`StoreError` for an exception from an obstore call.

    An answer from the server is classified by its code and status, as botocore's are.
    Without an answer: a timeout (obstore retries nothing, ``max_retries=0``) is a
    :class:`StoreTimeoutError`, another HTTP failure (refused, reset, a body cut short)
    is transient, and a credentials failure needs a human.
    """
    if isinstance(exc, StoreError):
        return exc
    import obstore.exceptions as oe

    code, status = obstore_answer(exc)
    if status:
        message = _XML_MESSAGE.search(str(exc))
        return classify(code, status, message.group(1) if message else "", what)
    first_line = str(exc).split("\n", 1)[0]
    if isinstance(exc, (oe.UnauthenticatedError, oe.PermissionDeniedError)):
        return StoreError(f"{what}: no usable AWS credentials: {first_line}")
    if isinstance(exc, FileNotFoundError):  # a 404 whose status the message did not carry
        return NotFoundError(f"{what}: {first_line}")
    if isinstance(exc, oe.GenericError) and "HTTP error" in first_line:
        if "Timeout" in str(exc) or "TimedOut" in str(exc):
            return StoreTimeoutError(f"{what}: timed out: {first_line}")
        return TransientError(f"{what}: connection failed: {first_line}")
    return StoreError(f"{what}: {type(exc).__name__}: {first_line}")
