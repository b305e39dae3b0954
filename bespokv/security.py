"""Transport security: TLS credentials, the token checks, and channel options.

* TLS (optional): every node serves with ``[cluster.tls] cert``/``key``; clients and peers
  verify the server against ``ca``. With ``mutual = true`` the server also requires a client
  certificate signed by ``ca``.
* Node identities (optional, ``[cluster.tls] node_identities``): each node has its own
  certificate whose common name is its id; the Peer service serves only callers whose
  certificate names a node of the map, and a replication stream only from the node its
  certificate names, so a node (or a stolen client certificate) cannot pose as another.
* Tokens (optional, :class:`Credentials`): a call carries ``authorization: Bearer <token>``
  metadata; every check is constant-time. Two tokens (decision 0052):

  - the *client token* (``[cluster] token``) opens the client services (``KV``,
    ``Admin``); without one they are open;
  - the *peer token* (``[cluster] peer_token``) opens every service, the replication
    service (``bespokv.v1.Peer``) only with it. Nodes send it on all their calls to each
    other (forwarded requests and status calls too), so a holder of the client token
    cannot forge replication traffic. Without a peer token the client token serves for
    both (``bespokv cluster up`` always generates one).

  The standard health service is exempt so load balancers and orchestrators can probe a
  node without a secret.
* A refused call is refused before gRPC reads its request: the denying handler never asks
  for a message, so an unauthenticated caller cannot make a node buffer one (decision 0052).
* Servers bind 127.0.0.1 unless the config gives another address.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc

from bespokv.config import Limits, TlsConfig, Tuning, check_backoff

__all__ = [
    "AUTH_HEADER",
    "Credentials",
    "call_metadata",
    "TokenAuthInterceptor",
    "certificate_name",
    "server_credentials",
    "channel_credentials",
    "channel_options",
    "open_channel",
]

#: The default reconnect backoff, as Tuning's (milliseconds).
RECONNECT_BACKOFF_MS = Tuning.reconnect_backoff_ms
MAX_RECONNECT_BACKOFF_MS = Tuning.max_reconnect_backoff_ms

AUTH_HEADER = "authorization"
EXEMPT_PREFIXES = ("/grpc.health.v1.Health/",)


def call_metadata(token: str | None) -> tuple[tuple[str, str], ...] | None:
    """The metadata to send with every call (None without a token)."""
    return ((AUTH_HEADER, f"Bearer {token}"),) if token else None


PEER_PREFIX = "/bespokv.v1.Peer/"


def _bearer(token: str | None) -> bytes | None:
    return f"Bearer {token}".encode() if token else None


def _same(got: bytes, want: bytes | None) -> bool:
    return want is not None and hmac.compare_digest(got, want)


class Credentials:
    """What a node's gRPC services accept (decision 0052): the peer token everywhere, the
    client token everywhere but the Peer service. Without a peer token the client token
    is both; without a client token the client services are open. (The RESP front end's
    AUTH takes the client token only: bespokv/resp/admin.py.)"""

    def __init__(self, token: str | None, peer_token: str | None = None) -> None:
        self._client = _bearer(token)
        self._peer = _bearer(peer_token) or self._client

    def accepts(self, method: str, header: bytes) -> bool:
        """Does the ``authorization`` header value ``header`` (``Bearer <token>``, b"" when
        absent) open the gRPC method ``method`` (``/package.Service/Method``)?"""
        if method.startswith(PEER_PREFIX):
            return _same(header, self._peer)
        if self._client is None:
            return True
        return _same(header, self._client) | _same(header, self._peer)


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls whose ``authorization`` metadata does not carry a token that opens the
    method (:class:`Credentials`), with UNAUTHENTICATED, before reading their requests."""

    def __init__(self, token: str | None, peer_token: str | None = None) -> None:
        self.credentials = Credentials(token, peer_token)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = handler_call_details.method or ""
        if method.startswith(EXEMPT_PREFIXES):
            return await continuation(handler_call_details)
        got = b""
        for key, value in handler_call_details.invocation_metadata or ():
            if key == AUTH_HEADER:
                got = value.encode() if isinstance(value, str) else bytes(value)
                break
        if self.credentials.accepts(method, got):
            return await continuation(handler_call_details)
        handler = await continuation(handler_call_details)
        reason = "missing authorization token" if not got else "invalid authorization token"
        return _denying_handler(handler, reason)


def _denying_handler(handler: grpc.RpcMethodHandler | None, message: str) -> grpc.RpcMethodHandler:
    """A handler that refuses the call before it reads a byte of the request: every kind
    is served as request-streaming (on the wire a unary request is a stream of one
    message), so gRPC does not receive and buffer the whole message for a call it refuses."""

    async def unary(request_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def streaming(request_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield  # pragma: no cover - makes this an async generator

    if handler is not None and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(streaming)
    return grpc.stream_unary_rpc_method_handler(unary)


def certificate_name(context: grpc.aio.ServicerContext) -> str | None:
    """The common name of the caller's TLS certificate, verified against ``ca`` by the
    handshake (``mutual``); None for a caller without one."""
    names = context.auth_context().get("x509_common_name") or []
    return names[0].decode() if names else None


def server_credentials(tls: TlsConfig) -> grpc.ServerCredentials:
    cert, key, ca = tls.read()
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=bool(tls.mutual and ca)
    )


def channel_credentials(tls: TlsConfig) -> grpc.ChannelCredentials:
    cert, key, ca = tls.read()
    if tls.mutual:
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
    return grpc.ssl_channel_credentials(root_certificates=ca)


def channel_options(
    limits: Limits | None = None,
    tls: TlsConfig | None = None,
    *,
    reconnect_backoff_ms: float = RECONNECT_BACKOFF_MS,
    max_reconnect_backoff_ms: float = MAX_RECONNECT_BACKOFF_MS,
) -> list[tuple[str, Any]]:
    """gRPC channel options for calls to a node. The reconnect backoff (Tuning's two
    ``*reconnect_backoff_ms`` settings; gRPC's defaults back off to two minutes) decides
    how soon a restarted node is reachable again through a channel that saw it die."""
    limits = limits or Limits()
    check_backoff(reconnect_backoff_ms, max_reconnect_backoff_ms)
    initial = max(1, round(reconnect_backoff_ms))
    opts: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", limits.max_request_bytes),
        ("grpc.max_send_message_length", limits.max_request_bytes),
        ("grpc.initial_reconnect_backoff_ms", initial),
        ("grpc.min_reconnect_backoff_ms", initial),
        ("grpc.max_reconnect_backoff_ms", max(initial, round(max_reconnect_backoff_ms))),
        ("grpc.keepalive_time_ms", 10_000),
        ("grpc.keepalive_timeout_ms", 5_000),
        ("grpc.enable_retries", 0),
        # Do not share connections (and their reconnect backoff) with other channels to
        # the same address: a node restarted on its port must be reachable at once.
        ("grpc.use_local_subchannel_pool", 1),
    ]
    if tls is not None and tls.server_name:
        opts.append(("grpc.ssl_target_name_override", tls.server_name))
    return opts


def open_channel(
    address: str,
    *,
    tls: TlsConfig | None = None,
    limits: Limits | None = None,
    extra_options: Sequence[tuple[str, Any]] = (),
    reconnect_backoff_ms: float = RECONNECT_BACKOFF_MS,
    max_reconnect_backoff_ms: float = MAX_RECONNECT_BACKOFF_MS,
) -> grpc.aio.Channel:
    """An aio channel to ``address`` with the cluster's TLS settings, message limits and
    reconnect backoff."""
    opts = channel_options(
        limits, tls, reconnect_backoff_ms=reconnect_backoff_ms, max_reconnect_backoff_ms=max_reconnect_backoff_ms
    ) + list(extra_options)
    if tls is not None:
        return grpc.aio.secure_channel(address, channel_credentials(tls), options=opts)
    return grpc.aio.insecure_channel(address, options=opts)
