"""One place that knows the shape of a ``pb.Op``: which operation it carries, which unary
RPC and response go with it, and how its outcome rides in a ``pb.OpResult``.

An ``Op`` is the oneof ``{get, put, delete, batch, cas}`` that ``Multi`` batches carry and
that nodes forward; the client sends single operations either batched (in an ``Op``) or as
the matching unary call. ``get`` and ``cas`` answer with a response message (carried in
``OpResult.get`` / ``OpResult.cas``), the writes with nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from bespokv.errors import InvalidArgumentError
from bespokv.proto import bespokv_pb2 as pb

__all__ = ["WRITES", "kind_of", "is_write", "request_of", "ok_result", "call_unary", "Handlers", "dispatch"]

#: Operations that change data (``cas`` too, but it answers like a read).
WRITES = frozenset({"put", "delete", "batch"})
#: The unary ``KV`` method for each operation.
UNARY = {"get": "Get", "put": "Put", "delete": "Delete", "batch": "Batch", "cas": "CompareAndSet"}
#: Operations whose response travels in the ``OpResult`` (the field of the same name).
ANSWERED = frozenset({"get", "cas"})

OK = pb.OpStatus(code=0)


def kind_of(op: pb.Op) -> str:
    """``"get"``, ``"put"``, ``"delete"``, ``"batch"`` or ``"cas"``; INVALID_ARGUMENT for an
    empty operation."""
    kind = op.WhichOneof("op")
    if kind is None:
        raise InvalidArgumentError("empty operation (no get, put, delete, batch or cas)")
    return kind


def is_write(op: pb.Op) -> bool:
    """Changes data and may wait for replication (``cas`` included)."""
    return op.WhichOneof("op") != "get"


def request_of(op: pb.Op) -> Any:
    """The request message inside ``op`` (a GetRequest, PutRequest, ...)."""
    return getattr(op, kind_of(op))


def ok_result(kind: str, response: Any = None) -> pb.OpResult:
    """A successful ``OpResult`` for ``kind``, carrying ``response`` where it has one."""
    res = pb.OpResult(status=OK)
    if kind in ANSWERED:
        getattr(res, kind).CopyFrom(response)
    return res


async def call_unary(kv: Any, op: pb.Op, *, timeout: float, metadata: Any) -> pb.OpResult:
    """Send ``op`` as its unary ``KV`` call on the stub ``kv``; the answer as an OpResult."""
    kind = kind_of(op)
    resp = await getattr(kv, UNARY[kind])(getattr(op, kind), timeout=timeout, metadata=metadata)
    return ok_result(kind, resp)


#: kind -> ``handler(request, hops)`` returning the response (or None for the writes)
Handlers = dict[str, Callable[[Any, int], Awaitable[Any]]]


async def dispatch(handlers: Handlers, op: pb.Op, hops: int) -> pb.OpResult:
    """Run ``op`` with the handler for its kind (errors propagate)."""
    kind = kind_of(op)
    return ok_result(kind, await handlers[kind](getattr(op, kind), hops))
