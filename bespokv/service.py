"""gRPC plumbing of a node: handler registration, request decoding, error mapping.

Handlers are registered from the proto descriptor (not with the generated ``add_*`` helpers)
so that a request that does not decode gets INVALID_ARGUMENT with the reason, instead of
gRPC's generic INTERNAL, and so that every handler maps exceptions the same way: a
bespokv :class:`~bespokv.errors.Error` travels as its status code, anything else through
:func:`~bespokv.errors.from_exception` (unexpected ones are logged).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from bespokv.errors import Error, InvalidArgumentError, from_exception
from bespokv.proto import bespokv_pb2 as pb

__all__ = ["Malformed", "generic_handler", "check_stream"]

log = logging.getLogger(__name__)


class Malformed:
    """Stands in for a request message that failed to decode."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _deserializer(cls: Any) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except (DecodeError, RuntimeError, ValueError) as exc:
            return Malformed(f"malformed {cls.DESCRIPTOR.full_name}: {exc}")

    return parse


def _to_error(exc: BaseException, method: str) -> Error:
    err = from_exception(exc)
    if not isinstance(exc, Error):
        if err.code == grpc.StatusCode.INTERNAL:
            log.exception("unexpected error in %s", method, exc_info=exc)
    return err


def _wrap_unary_response(fn: Callable[..., Any], method: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def handler(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
        try:
            return await fn(request, context)
        except (grpc.aio.AbortError, asyncio.CancelledError):
            raise
        except BaseException as exc:  # every error becomes a status
            err = _to_error(exc, method)
            await context.abort(err.code, str(err))

    return handler


def _wrap_bidi(fn: Callable[..., Any], method: str) -> Callable[..., Any]:
    """A stream-stream handler; a stream cancelled by its peer ends quietly (the peer went
    away, there is nobody to answer), other errors become statuses."""

    @functools.wraps(fn)
    async def handler(request_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await fn(request_iterator, context)
        except grpc.aio.AbortError:
            raise
        except asyncio.CancelledError:
            return None
        except BaseException as exc:  # every error becomes a status
            err = _to_error(exc, method)
            await context.abort(err.code, str(err))

    return handler


def _wrap_stream_response(fn: Callable[..., Any], method: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def handler(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
        try:
            async for item in fn(request, context):
                yield item
        except (grpc.aio.AbortError, asyncio.CancelledError):
            raise
        except BaseException as exc:  # every error becomes a status
            err = _to_error(exc, method)
            await context.abort(err.code, str(err))

    return handler


async def check_stream(request_iterator: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """Re-yield a request stream, raising INVALID_ARGUMENT at the first malformed message."""
    async for msg in request_iterator:
        if isinstance(msg, Malformed):
            raise InvalidArgumentError(msg.reason)
        yield msg


def generic_handler(service_name: str, servicer: Any) -> grpc.GenericRpcHandler:
    """Handlers for every method of ``bespokv.v1.<service_name>`` implemented by ``servicer``."""
    svc = pb.DESCRIPTOR.services_by_name[service_name]
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for m in svc.methods:
        req_cls = getattr(pb, m.input_type.name)
        resp_cls = getattr(pb, m.output_type.name)
        fn = getattr(servicer, m.name)
        method = f"/{svc.full_name}/{m.name}"
        deser = _deserializer(req_cls)
        ser = resp_cls.SerializeToString
        if m.client_streaming and m.server_streaming:
            handlers[m.name] = grpc.stream_stream_rpc_method_handler(
                _wrap_bidi(fn, method), request_deserializer=deser, response_serializer=ser
            )
        elif m.server_streaming:
            handlers[m.name] = grpc.unary_stream_rpc_method_handler(
                _wrap_stream_response(fn, method), request_deserializer=deser, response_serializer=ser
            )
        elif m.client_streaming:
            handlers[m.name] = grpc.stream_unary_rpc_method_handler(
                _wrap_unary_response(fn, method), request_deserializer=deser, response_serializer=ser
            )
        else:
            handlers[m.name] = grpc.unary_unary_rpc_method_handler(
                _wrap_unary_response(fn, method), request_deserializer=deser, response_serializer=ser
            )
    return grpc.method_handlers_generic_handler(svc.full_name, handlers)
