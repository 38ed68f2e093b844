"""A gRPC server interceptor that checks the bearer token of every call against the role its
method needs (:mod:`controller.security.tokens`), for ``grpc`` and ``grpc.aio`` servers.

* no ``authorization`` metadata, not ``Bearer ...``, or an unknown token → ``UNAUTHENTICATED``;
* a known token whose role is below the method's → ``PERMISSION_DENIED``;
* a method missing from the table → ``PERMISSION_DENIED`` (fail closed).

The handler of an allowed call runs unchanged. Use::

    table = TokenTable.load(Path("tokens"))
    server = grpc.aio.server(interceptors=[AioTokenAuthInterceptor(table)])      # or
    server = grpc.server(pool, interceptors=[TokenAuthInterceptor(table)])

Tokens travel in clear text unless the channel is TLS: use both (see README).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import grpc
import grpc.aio

from controller.security.tokens import NORTHBOUND_METHOD_ROLES, Principal, Role, TokenTable

LOG = logging.getLogger("aifabric.security")
Metadata = Sequence[tuple[str, str | bytes]]


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """The call metadata a client sends: ``(("authorization", "Bearer TOKEN"),)``."""
    return (("authorization", f"Bearer {token}"),)


class AccessDecision:
    """The outcome of checking one call: ``code`` None means allowed (``principal`` set)."""

    __slots__ = ("code", "details", "principal")

    def __init__(self, code: grpc.StatusCode | None, details: str = "",
                 principal: Principal | None = None):
        self.code = code
        self.details = details
        self.principal = principal


class AccessPolicy:
    """Which role each method needs, and the token table."""

    def __init__(self, tokens: TokenTable,
                 method_roles: Mapping[str, Role] = NORTHBOUND_METHOD_ROLES):
        self.tokens = tokens
        self.method_roles = dict(method_roles)

    def decide(self, method: str, metadata: Metadata | None) -> AccessDecision:
        """Check one call (``method`` is the full ``/package.Service/Method`` name)."""
        token = None
        for key, value in metadata or ():
            if key.lower() == "authorization":
                text = value.decode(errors="replace") if isinstance(value, bytes) else value
                scheme, _, rest = text.partition(" ")
                if scheme.lower() == "bearer" and rest.strip():
                    token = rest.strip()
                break
        if token is None:
            return AccessDecision(grpc.StatusCode.UNAUTHENTICATED,
                                  "missing 'authorization: Bearer TOKEN' metadata")
        principal = self.tokens.lookup(token)
        if principal is None:
            return AccessDecision(grpc.StatusCode.UNAUTHENTICATED, "unknown token")
        needed = self.method_roles.get(method)
        if needed is None:
            LOG.warning("refused %s for %s: method not in the access table", method, principal.name)
            return AccessDecision(grpc.StatusCode.PERMISSION_DENIED,
                                  f"{method}: method not in the access table")
        if principal.role < needed:
            return AccessDecision(grpc.StatusCode.PERMISSION_DENIED,
                                  f"{method[:128]} needs role {needed.label}; this token is "
                                  f"{principal.role.label}")
        return AccessDecision(None, principal=principal)


def _handler_like(handler: grpc.RpcMethodHandler,
                  behavior: Callable[..., Any]) -> grpc.RpcMethodHandler:
    """A handler of the same kind (unary/stream on each side) and codec as ``handler`` that runs
    ``behavior``."""
    kw = {"request_deserializer": handler.request_deserializer,
          "response_serializer": handler.response_serializer}
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(behavior, **kw)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(behavior, **kw)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(behavior, **kw)
    return grpc.unary_unary_rpc_method_handler(behavior, **kw)


def _refusing_handler(handler: grpc.RpcMethodHandler, code: grpc.StatusCode,
                      details: str) -> grpc.RpcMethodHandler:
    """A handler like ``handler`` that aborts every call with ``code`` (synchronous server)."""
    def abort(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(code, details)

    return _handler_like(handler, abort)


def _aio_refusing_handler(handler: grpc.RpcMethodHandler, code: grpc.StatusCode,
                          details: str) -> grpc.RpcMethodHandler:
    """The same for a ``grpc.aio`` server."""
    async def abort(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(code, details)

    return _handler_like(handler, abort)


class TokenAuthInterceptor(grpc.ServerInterceptor):
    """Token check for a synchronous ``grpc.server`` (see the module docstring)."""

    def __init__(self, tokens: TokenTable | AccessPolicy):
        self.policy = tokens if isinstance(tokens, AccessPolicy) else AccessPolicy(tokens)

    def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails],
                                                       grpc.RpcMethodHandler | None],
                          handler_call_details: grpc.HandlerCallDetails
                          ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        decision = self.policy.decide(handler_call_details.method,
                                      handler_call_details.invocation_metadata)
        if decision.code is None:
            return handler
        return _refusing_handler(handler, decision.code, decision.details)


class AioTokenAuthInterceptor(grpc.aio.ServerInterceptor):
    """Token check for a ``grpc.aio.server`` (see the module docstring)."""

    def __init__(self, tokens: TokenTable | AccessPolicy):
        self.policy = tokens if isinstance(tokens, AccessPolicy) else AccessPolicy(tokens)

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails],
                                                             Awaitable[grpc.RpcMethodHandler]],
                                handler_call_details: grpc.HandlerCallDetails
                                ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        decision = self.policy.decide(handler_call_details.method,
                                      handler_call_details.invocation_metadata)
        if decision.code is None:
            return handler
        return _aio_refusing_handler(handler, decision.code, decision.details)
