"""bespokv's errors and their gRPC status codes.

Every error bespokv raises on purpose is a subclass of :class:`Error`, bespokv's own root:
the framework serves any datalet, so it must import (and be installable) without the
rocksmash engine. Each class carries the gRPC status code it travels as; the client turns a
status back into the same class.

=========================  ====================  =========  ===============================
class                      gRPC status           retriable  meaning / what to do
=========================  ====================  =========  ===============================
``InvalidArgumentError``   INVALID_ARGUMENT      no         bad key/value/request: fix it
``UnknownShardError``      NOT_FOUND             no         the shard id does not exist
``WrongShardError``        FAILED_PRECONDITION   yes*       stale shard map: refresh, retry
``FencedError``            ABORTED               no         a newer epoch took over
``UnavailableError``       UNAVAILABLE           yes        node/replica/quorum down, node
                                                            starting or recovering; *not
                                                            applied* when the server says so
``DeadlineExceededError``  DEADLINE_EXCEEDED     reads      timed out; a write may or may
                                                            not have been applied
``OverloadedError``        RESOURCE_EXHAUSTED    yes        replication backlog full; not
                                                            applied; back off and retry
``UnauthenticatedError``   UNAUTHENTICATED       no         missing or wrong token
``UnsupportedError``       UNIMPLEMENTED         no         operation not offered by this
                                                            shard's controlet (e.g. CAS in
                                                            the active-active modes)
``CorruptionError``        DATA_LOSS             no         the datalet returned corrupt data
``InternalError``          INTERNAL              no         a bug; see the node's log
``ClosedError``            (client side only)    no         the client was closed
=========================  ====================  =========  ===============================

(*) the client refreshes its shard map before retrying.

Errors coming out of a datalet are mapped by :func:`from_exception`: rocksmash's classes by
their meaning (``InvalidArgumentError`` -> INVALID_ARGUMENT, ``CorruptionError`` ->
DATA_LOSS, ``UnavailableError``/``ClosedError`` -> UNAVAILABLE, ``LockedError`` ->
FAILED_PRECONDITION, ``FencedError`` -> ABORTED), a plain ``TypeError``/``ValueError`` as
INVALID_ARGUMENT, anything else as INTERNAL. The engine's classes are looked up only when
the engine is loaded (an exception can only be one of them if it is), so this module never
imports rocksmash.
"""

from __future__ import annotations

import sys
from typing import Any

import grpc

__all__ = [
    "Error",
    "InvalidArgumentError",
    "UnknownShardError",
    "WrongShardError",
    "FencedError",
    "UnavailableError",
    "DeadlineExceededError",
    "OverloadedError",
    "UnauthenticatedError",
    "UnsupportedError",
    "CorruptionError",
    "InternalError",
    "ClosedError",
    "from_exception",
    "from_status",
    "status_code",
]


class Error(Exception):
    """Root of every error bespokv raises on purpose."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN
    retriable: bool = False
    #: False when the operation is known not to have been applied (the request never
    #: reached a node); None when unknown.
    applied: bool | None = None


class InvalidArgumentError(Error, ValueError):
    """The request is malformed or out of bounds (empty/oversized key, oversized value).
    Also a ``ValueError``, as the engine's class of the same name is."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class UnknownShardError(Error):
    """A request named a shard that does not exist in the shard map."""

    code = grpc.StatusCode.NOT_FOUND


class WrongShardError(Error):
    """The key does not belong to the named shard, or this node does not serve it."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    retriable = True


class FencedError(Error):
    """A newer epoch (failover) fenced the one this request was made under."""

    code = grpc.StatusCode.ABORTED


class UnavailableError(Error):
    """A node, a replica, a chain link or a quorum is not reachable right now."""

    code = grpc.StatusCode.UNAVAILABLE
    retriable = True


class DeadlineExceededError(Error):
    """The operation did not finish in time. A write may or may not have been applied."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED
    retriable = True  # for reads; clients retry writes only when told to


class OverloadedError(Error):
    """The node refused the operation (replication backlog or lag bound); not applied."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    retriable = True


class UnauthenticatedError(Error):
    """The call carried no token or a wrong one."""

    code = grpc.StatusCode.UNAUTHENTICATED


class UnsupportedError(Error):
    """This shard's controlet does not offer the operation."""

    code = grpc.StatusCode.UNIMPLEMENTED


class CorruptionError(Error):
    """The datalet reported corrupt data."""

    code = grpc.StatusCode.DATA_LOSS


class InternalError(Error):
    """An unexpected failure inside a node."""

    code = grpc.StatusCode.INTERNAL


class ClosedError(Error):
    """The client (or node) was closed."""

    code = grpc.StatusCode.CANCELLED


_BY_CODE: dict[grpc.StatusCode, type[Error]] = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        UnknownShardError,
        WrongShardError,
        FencedError,
        UnavailableError,
        DeadlineExceededError,
        OverloadedError,
        UnauthenticatedError,
        UnsupportedError,
        CorruptionError,
        InternalError,
    )
}


def from_exception(exc: BaseException) -> Error:
    """Map any exception raised while serving a request to a bespokv :class:`Error`."""
    if isinstance(exc, Error):
        return exc
    msg = str(exc) or type(exc).__name__
    engine = sys.modules.get("rocksmash.errors")
    if engine is not None and isinstance(exc, engine.Error):
        return _from_engine(exc, engine, msg)
    if isinstance(exc, (TypeError, ValueError)):
        return InvalidArgumentError(msg)
    if isinstance(exc, TimeoutError):
        return DeadlineExceededError(msg)
    if isinstance(exc, (ConnectionError, OSError)):
        return UnavailableError(f"datalet I/O failed: {msg}")
    return InternalError(f"{type(exc).__name__}: {msg}")


def _from_engine(exc: BaseException, engine: Any, msg: str) -> Error:
    """A rocksmash engine error (raised by the rocksmash datalet) as its bespokv class."""
    if isinstance(exc, engine.InvalidArgumentError):  # InvalidTypeError is one too
        return InvalidArgumentError(msg)
    if isinstance(exc, engine.CorruptionError):
        return CorruptionError(msg)
    if isinstance(exc, (engine.UnavailableError, engine.ClosedError)):
        return UnavailableError(msg)
    if isinstance(exc, engine.LockedError):
        return WrongShardError(f"datalet locked: {msg}")
    if isinstance(exc, engine.FencedError):
        return FencedError(msg)
    return InternalError(f"{type(exc).__name__}: {msg}")


def from_status(code: grpc.StatusCode, details: str | None) -> Error:
    """Turn a gRPC status received by a client back into the matching :class:`Error`."""
    cls = _BY_CODE.get(code)
    msg = details or code.name
    if cls is None:
        if code == grpc.StatusCode.CANCELLED:
            return UnavailableError(msg)
        err = Error(f"{code.name}: {msg}")
        err.code = code
        return err
    return cls(msg)


_CODES = {c.value[0]: c for c in grpc.StatusCode}


def status_code(value: int) -> grpc.StatusCode:
    """The :class:`grpc.StatusCode` with numeric ``value`` (UNKNOWN if there is none)."""
    return _CODES.get(value, grpc.StatusCode.UNKNOWN)
