"""A gRPC server interceptor that checks the bearer token of every call against the role its
method needs (:mod:`controller.security.tokens`), for ``grpc`` and ``grpc.aio`` servers.

* no ``authorization`` metadata, not ``Bearer ...``, or an unknown token → ``UNAUTHENTICATED``;
* a known token whose role is below the method's → ``PERMISSION_DENIED``;
* a method missing from the table → ``PERMISSION_DENIED`` (fail closed);
* mutual TLS: a client certificate whose subject OU names a role (``aifabric certs init``
  writes ``client-read-only`` with OU ``read-only``) caps the call at that role, whatever the
  token says: an operator token sent over a read-only certificate is ``PERMISSION_DENIED``
  for operator methods. A certificate without a role OU leaves the token's role.

The handler of an allowed call runs with :func:`current_principal` set to its caller (the
northbound server counts event streams per role with it). Use::

    table = TokenTable.load(Path("tokens"))
    server = grpc.aio.server(interceptors=[AioTokenAuthInterceptor(table)])      # or
    server = grpc.server(pool, interceptors=[TokenAuthInterceptor(table)])

Tokens travel in clear text unless the channel is TLS: use both (see docs/operator/tls.md).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import grpc
import grpc.aio
from cryptography import x509
from cryptography.x509.oid import NameOID

from controller.security.tokens import NORTHBOUND_METHOD_ROLES, Principal, Role, TokenTable

LOG = logging.getLogger("aifabric.security")
Metadata = Sequence[tuple[str, str | bytes]]
AuthContext = Mapping[str, Any]
"""A call's ``auth_context()``: property name → the property's values (a list of bytes; grpc's
type stubs disagree between the sync and asyncio APIs)."""

_CALLER: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "aifabric_caller", default=None)


def current_principal() -> Principal | None:
    """The caller of the call being handled (its token's principal, its role capped by its
    client certificate's), as the token interceptor let it in; None when no interceptor
    checks tokens."""
    return _CALLER.get()


@functools.lru_cache(maxsize=256)
def certificate_role(pem: bytes) -> Role | None:
    """The role a client certificate (PEM) names in its subject's OU, or None (no OU that is
    a role label; unreadable). Cached by the certificate's bytes (one parse per client)."""
    try:
        cert = x509.load_pem_x509_certificate(pem)
    except ValueError:
        return None
    for attr in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME):
        value = attr.value if isinstance(attr.value, str) else attr.value.decode(errors="replace")
        try:
            return Role.parse(value)
        except ValueError:
            continue
    return None


@functools.lru_cache(maxsize=256)
def certificate_subject(pem: bytes) -> str:
    """The subject of a client certificate (PEM) as RFC 4514 text (``CN=alice,OU=operator``),
    "" when it cannot be read. Cached by the certificate's bytes."""
    try:
        return x509.load_pem_x509_certificate(pem).subject.rfc4514_string()
    except ValueError:
        return ""


def peer_certificate_subject(auth: Mapping[str, Iterable[bytes]]) -> str:
    """The subject of the client certificate in a call's ``auth_context()`` ("" none)."""
    pem = next(iter(auth.get("x509_pem_cert") or ()), None)
    return certificate_subject(bytes(pem)) if pem else ""


def peer_certificate_role(auth: AuthContext) -> Role | None:
    """The role of the client certificate in a call's ``auth_context()`` (None: no client
    certificate, or one that names no role)."""
    pems = list(auth.get("x509_pem_cert") or ())
    return certificate_role(bytes(pems[0])) if pems else None


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

    def capped(self, method: str, principal: Principal, auth: AuthContext) -> AccessDecision:
        """The decision for an allowed ``principal`` once its client certificate is known
        (``auth``: the call's ``auth_context()``): its role capped by the certificate's."""
        cert_role = peer_certificate_role(auth)
        if cert_role is None or cert_role >= principal.role:
            return AccessDecision(None, principal=principal)
        needed = self.method_roles.get(method, Role.OPERATOR)
        if cert_role < needed:
            return AccessDecision(grpc.StatusCode.PERMISSION_DENIED,
                                  f"{method[:128]} needs role {needed.label}; this client "
                                  f"certificate is {cert_role.label} (its OU), whatever the "
                                  "token")
        return AccessDecision(None, principal=Principal(cert_role, principal.name))


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


def _behavior(handler: grpc.RpcMethodHandler) -> Callable[..., Any]:
    """The function a method handler runs (whichever of its four kinds it is)."""
    for b in (handler.unary_unary, handler.unary_stream, handler.stream_unary,
              handler.stream_stream):
        if callable(b):
            fn: Callable[..., Any] = b
            return fn
    raise ValueError("a method handler without behavior")


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
        method = handler_call_details.method
        decision = self.policy.decide(method, handler_call_details.invocation_metadata)
        if decision.code is not None or decision.principal is None:
            return _refusing_handler(handler, decision.code or grpc.StatusCode.INTERNAL,
                                     decision.details)
        inner, principal, policy = _behavior(handler), decision.principal, self.policy

        def checked(request: Any, context: grpc.ServicerContext) -> Any:
            capped = policy.capped(method, principal, context.auth_context())
            if capped.code is not None:
                context.abort(capped.code, capped.details)
            token = _CALLER.set(capped.principal)
            try:
                return inner(request, context)
            finally:
                _CALLER.reset(token)

        return _handler_like(handler, checked)


class AioTokenAuthInterceptor(grpc.aio.ServerInterceptor):
    """Token check for a ``grpc.aio.server`` (see the module docstring)."""

    def __init__(self, tokens: TokenTable | AccessPolicy):
        self.policy = tokens if isinstance(tokens, AccessPolicy) else AccessPolicy(tokens)

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails],
                                         Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
            handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        decision = self.policy.decide(method, handler_call_details.invocation_metadata)
        if decision.code is not None or decision.principal is None:
            return _aio_refusing_handler(handler, decision.code or grpc.StatusCode.INTERNAL,
                                         decision.details)
        inner, principal, policy = _behavior(handler), decision.principal, self.policy

        async def admit(context: grpc.aio.ServicerContext[Any, Any]) -> Principal:
            capped = policy.capped(method, principal, context.auth_context())
            if capped.code is not None:
                await context.abort(capped.code, capped.details)
            assert capped.principal is not None
            return capped.principal

        if inspect.isasyncgenfunction(inner):
            async def streamed(request: Any, context: grpc.aio.ServicerContext[Any, Any]
                               ) -> AsyncIterator[Any]:
                _CALLER.set(await admit(context))   # this call's own context
                async for item in inner(request, context):
                    yield item

            return _handler_like(handler, streamed)

        async def checked(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            _CALLER.set(await admit(context))   # this call's task and the tasks it starts
            return await inner(request, context)

        return _handler_like(handler, checked)
