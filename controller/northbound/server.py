"""The gRPC server of ``aifabric.v1.Northbound`` (:file:`aifabric.proto`) on ``grpc.aio``: it
runs on the controller's asyncio event loop, parses and bounds requests, awaits the
:class:`~controller.northbound.model.NorthboundService`, and maps errors to status codes.

Status codes: :class:`~controller.northbound.model.FieldError` → ``INVALID_ARGUMENT``
(``"field: message"``; also a string too long, a repeated field too long, a string that is not
UTF-8), :class:`~controller.northbound.model.NotFound` → ``NOT_FOUND``,
:class:`~controller.northbound.model.Unavailable` → ``FAILED_PRECONDITION``,
:class:`~controller.northbound.model.Busy` → ``RESOURCE_EXHAUSTED``,
:class:`~controller.northbound.model.NotConfirmed` → ``UNAVAILABLE``; any other exception of the
service is logged with its traceback and answered ``INTERNAL "internal error (see the
controller log)"``, never with the traceback.

Resources (:class:`~controller.northbound.limits.NorthboundLimits`):

* ``WatchEvents`` streams and unary calls are counted apart: open streams never make a
  registration fail, however many there are (at most ``max_streams``, then
  ``RESOURCE_EXHAUSTED`` for streams only). Read-only callers (the token interceptor's
  :func:`~controller.security.interceptor.current_principal`) hold at most
  ``max_streams - operator_streams`` of them together: an operator's stream always finds a
  slot they cannot take.
* A watcher is dropped with ``RESOURCE_EXHAUSTED "too slow: N events not read"`` when its queue
  of ``subscriber_queue_len`` events overflows (the event bus drops it without blocking the
  publisher or other watchers) or one event waited ``max_write_wait_s`` for it to read. The
  events gRPC already accepted for it reach it before the status; N counts those it will never
  get.
* Requests are read as bytes and parsed here (:func:`~controller.northbound.limits.
  parse_request`), so a bad request is an ``INVALID_ARGUMENT`` naming the field and not the
  ``INTERNAL`` "Exception deserializing request!" of gRPC's own deserializer.
* A unary call whose client left (deadline, cancel) does not cancel the service's work: the
  coroutine is shielded and keeps its place among ``max_unary_calls`` until it finishes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import Message

from controller.northbound.convert import (
    apply_result_to_proto,
    audit_page_to_proto,
    confirmation_to_proto,
    drift_to_proto,
    event_to_proto,
    flow_to_proto,
    ina_grant_to_proto,
    ina_request_from_proto,
    registration_to_proto,
    request_from_proto,
    status_to_proto,
)
from controller.northbound.limits import DEFAULT_LIMITS, NorthboundLimits, parse_request
from controller.northbound.model import (
    Busy,
    Caller,
    FieldError,
    NorthboundService,
    NotConfirmed,
    NotFound,
    Unavailable,
)
from controller.northbound.v1 import aifabric_pb2 as pb
from controller.security.interceptor import current_principal, peer_certificate_subject
from controller.security.tokens import Role
from controller.telemetry.events import SlowSubscriber, Subscription

LOG = logging.getLogger("aifabric.northbound")
SERVICE_NAME = "aifabric.v1.Northbound"
#: characters of an error message sent as status details (a service message is clipped to it)
MAX_DETAILS_CHARS = 1024
INTERNAL_DETAILS = "internal error (see the controller log)"

_STATUS: dict[type[Exception], grpc.StatusCode] = {
    FieldError: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    Unavailable: grpc.StatusCode.FAILED_PRECONDITION,
    Busy: grpc.StatusCode.RESOURCE_EXHAUSTED,
    NotConfirmed: grpc.StatusCode.UNAVAILABLE,
    SlowSubscriber: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def caller_of(context: grpc.aio.ServicerContext[Any, Any]) -> Caller:
    """Who makes the call being handled (the audit trail's "who"): the token the interceptor
    let in (:func:`~controller.security.interceptor.current_principal`: its name and role),
    the subject of the client's certificate (mutual TLS), and the client's address."""
    p = current_principal()
    try:
        auth = context.auth_context()
    except (AttributeError, RuntimeError):
        auth = {}
    return Caller("grpc", p.name if p is not None else "",
                  p.role.label if p is not None else "", peer_certificate_subject(auth),
                  str(context.peer() or ""))


Work = Callable[[Any, Caller], Awaitable[Message]]
"""A unary method's work: (the parsed request, its caller) → the reply."""


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status code and details for an exception of the service."""
    for cls, code in _STATUS.items():
        if isinstance(exc, cls):
            text = str(exc)
            if len(text) > MAX_DETAILS_CHARS:
                text = text[:MAX_DETAILS_CHARS] + f"… ({len(text)} characters)"
            return code, text
    return grpc.StatusCode.INTERNAL, INTERNAL_DETAILS


class _Handlers:
    """The RPCs of ``aifabric.v1.Northbound`` over a service, with the counters of the
    limits (all on the server's event loop: plain integers suffice)."""

    def __init__(self, service: NorthboundService, limits: NorthboundLimits) -> None:
        self.service = service
        self.limits = limits
        self.unary_active = 0
        self.streams_open = 0
        self.read_only_streams_open = 0
        self.watchers_dropped_total = 0
        self.subscriptions: set[Subscription] = set()

    # -- unary calls -----------------------------------------------------------------------------
    def unary(self, method: str, req_cls: type[Message], work: Work
              ) -> Callable[[bytes, grpc.aio.ServicerContext[Any, Any]], Awaitable[Message]]:
        """A handler: count the call against ``max_unary_calls``, parse the request, await
        ``work(request, caller)`` shielded from the client's cancellation, map errors."""

        async def handle(data: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Message:
            if self.unary_active >= self.limits.max_unary_calls:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                    f"busy: {self.unary_active} calls in progress, at most "
                                    f"{self.limits.max_unary_calls}; retry later")
            self.unary_active += 1
            task = asyncio.ensure_future(self._run(method, req_cls, work, data,
                                                   caller_of(context)))
            task.add_done_callback(self._unary_done)
            code, details = await asyncio.shield(task)
            if code is None:
                done: Message = details
                return done
            await context.abort(code, details)

        return handle

    async def _run(self, method: str, req_cls: type[Message], work: Work, data: bytes,
                   caller: Caller) -> tuple[Any, Any]:
        """(None, reply) or (status code, details); never raises."""
        try:
            return None, await work(parse_request(req_cls, data, self.limits), caller)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status
            code, details = status_of(exc)
            if code == grpc.StatusCode.INTERNAL:
                LOG.exception("[northbound] %s failed", method)
            return code, details

    def _unary_done(self, task: asyncio.Future[Any]) -> None:
        self.unary_active -= 1

    async def register(self, req: pb.RegisterCollectiveRequest, caller: Caller) -> Message:
        return registration_to_proto(await self.service.register(request_from_proto(req),
                                                                 caller))

    async def unregister(self, req: pb.UnregisterCollectiveRequest, caller: Caller) -> Message:
        if not req.collective:
            raise FieldError("collective", "must not be empty")
        conf, gen = await self.service.unregister(req.collective, caller)
        return pb.UnregisterCollectiveResponse(confirmation=confirmation_to_proto(conf),
                                               plan_generation=gen)

    async def paths(self, req: pb.GetPathsRequest, caller: Caller) -> Message:
        flows = await self.service.paths(req.collective)
        return pb.GetPathsResponse(flows=[flow_to_proto(f) for f in flows])

    async def status(self, req: pb.GetStatusRequest, caller: Caller) -> Message:
        return status_to_proto(await self.service.status())

    async def apply_policy(self, req: pb.ApplyPolicyRequest, caller: Caller) -> Message:
        source = req.source_name or "<northbound>"
        res = await self.service.apply_policy(req.document, source, req.dry_run, caller)
        return apply_result_to_proto(res, self.limits)

    async def create_ina_job(self, req: pb.CreateInaJobRequest, caller: Caller) -> Message:
        return ina_grant_to_proto(await self.service.create_ina_job(ina_request_from_proto(req)))

    async def delete_ina_job(self, req: pb.DeleteInaJobRequest, caller: Caller) -> Message:
        if not req.name:
            raise FieldError("name", "must not be empty")
        await self.service.delete_ina_job(req.name)
        return pb.DeleteInaJobResponse()
    async def list_audit(self, req: pb.ListAuditRequest, caller: Caller) -> Message:
        most = self.limits.max_audit_records
        limit = most if req.limit == 0 else min(req.limit, most)
        return audit_page_to_proto(await self.service.audit(req.after_sequence, limit))

    async def check_drift(self, req: pb.CheckDriftRequest, caller: Caller) -> Message:
        return drift_to_proto(await self.service.drift(tuple(req.switches)), self.limits)

    # -- the event stream ------------------------------------------------------------------------
    async def watch_events(self, data: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """Stream events until the client leaves, the server stops (OK) or the watcher is too
        slow (``RESOURCE_EXHAUSTED``)."""
        caller = current_principal()
        read_only = caller is not None and caller.role < Role.OPERATOR
        if self.streams_open >= self.limits.max_streams:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"too many event streams: {self.streams_open} open, at most "
                                f"{self.limits.max_streams}")
        if read_only and self.read_only_streams_open >= self.limits.read_only_streams:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"too many read-only event streams: "
                                f"{self.read_only_streams_open} open, at most "
                                f"{self.limits.read_only_streams} ({self.limits.operator_streams}"
                                f" of {self.limits.max_streams} are kept for operators)")
        try:
            req = parse_request(pb.WatchEventsRequest, data, self.limits)
            sub = self.service.subscribe(frozenset(req.kinds) or None)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status
            code, details = status_of(exc)
            if code == grpc.StatusCode.INTERNAL:
                LOG.exception("[northbound] WatchEvents failed")
            await context.abort(code, details)
        self.streams_open += 1
        self.read_only_streams_open += read_only
        self.subscriptions.add(sub)
        try:
            slow = await self._stream(sub, context)
        finally:
            self.streams_open -= 1
            self.read_only_streams_open -= read_only
            self.subscriptions.discard(sub)
            self.service.unsubscribe(sub)
        if slow is not None:
            self.watchers_dropped_total += 1
            LOG.warning("[northbound] event watcher %s dropped: %s", context.peer(), slow)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(slow))

    async def _stream(self, sub: Subscription, context: grpc.aio.ServicerContext[Any, Any]
                      ) -> SlowSubscriber | None:
        """Write ``sub``'s events; the reason to drop the watcher, or None when ``sub`` ended.
        A write waits for the watcher's HTTP/2 window at most ``max_write_wait_s``, and no
        longer than until the bus drops ``sub`` (its queue overflowed meanwhile)."""
        closed = asyncio.ensure_future(sub.wait_closed())
        try:
            async for ev in sub:
                write = asyncio.ensure_future(context.write(event_to_proto(ev)))
                write.add_done_callback(_consume)  # also when this handler is cancelled
                done, _ = await asyncio.wait((write, closed), return_when=asyncio.FIRST_COMPLETED,
                                             timeout=self.limits.max_write_wait_s)
                if write in done:
                    write.result()  # a write that failed ends the stream with its error
                    continue
                write.cancel()
                # the event being written still reaches the watcher if it ever reads (gRPC
                # keeps a message it accepted); the queued ones never will
                if sub.dropped is not None:
                    return sub.dropped
                if sub.closed:  # the server stops
                    return None
                return SlowSubscriber(sub.close())
        except SlowSubscriber as exc:
            return exc
        finally:
            closed.cancel()
        return None


def _consume(task: asyncio.Future[Any]) -> None:
    """Retrieve a write's outcome, so that a write given up on (it fails once the stream
    ends) is not reported as an exception never retrieved."""
    if not task.cancelled():
        task.exception()


class NorthboundServer:
    """A running northbound server: the bound ``port``, its ``limits`` and counters
    (``unary_active``, ``streams_open``, ``watchers_dropped_total``); :meth:`stop` ends it."""

    def __init__(self, server: grpc.aio.Server, handlers: _Handlers, port: int) -> None:
        self._server = server
        self._handlers = handlers
        self.port = port
        self.limits = handlers.limits

    @property
    def unary_active(self) -> int:
        return self._handlers.unary_active

    @property
    def streams_open(self) -> int:
        return self._handlers.streams_open

    @property
    def read_only_streams_open(self) -> int:
        return self._handlers.read_only_streams_open

    @property
    def watchers_dropped_total(self) -> int:
        return self._handlers.watchers_dropped_total

    async def stop(self, grace_s: float | None = 1.0) -> None:
        """End every event stream (status OK), refuse new calls, let running calls finish for
        up to ``grace_s`` seconds (None: until they do), then cancel what remains."""
        for sub in list(self._handlers.subscriptions):
            sub.close()
        await self._server.stop(grace_s)


async def start_northbound(service: NorthboundService, host: str, port: int, *,
                           limits: NorthboundLimits = DEFAULT_LIMITS,
                           credentials: grpc.ServerCredentials | None = None,
                           interceptors: Sequence[grpc.aio.ServerInterceptor] = ()
                           ) -> NorthboundServer:
    """Serve ``service`` on ``host:port`` (0: any free port) on the running event loop.

    ``credentials``: TLS server credentials (None: plaintext); ``interceptors`` go to
    ``grpc.aio.server``.

    Raises
    ------
    RuntimeError
        The address cannot be bound.
    """
    h = _Handlers(service, limits)

    def unary(method: str, req_cls: type[Message], resp_cls: type[Message],
              work: Work) -> grpc.RpcMethodHandler[Any, Any]:
        return grpc.unary_unary_rpc_method_handler(
            h.unary(method, req_cls, work), request_deserializer=None,
            response_serializer=resp_cls.SerializeToString)

    handler = grpc.method_handlers_generic_handler(SERVICE_NAME, {
        "RegisterCollective": unary("RegisterCollective", pb.RegisterCollectiveRequest,
                                    pb.RegisterCollectiveResponse, h.register),
        "UnregisterCollective": unary("UnregisterCollective", pb.UnregisterCollectiveRequest,
                                      pb.UnregisterCollectiveResponse, h.unregister),
        "GetPaths": unary("GetPaths", pb.GetPathsRequest, pb.GetPathsResponse, h.paths),
        "GetStatus": unary("GetStatus", pb.GetStatusRequest, pb.GetStatusResponse, h.status),
        "ApplyPolicy": unary("ApplyPolicy", pb.ApplyPolicyRequest, pb.ApplyPolicyResponse,
                             h.apply_policy),
        "CreateInaJob": unary("CreateInaJob", pb.CreateInaJobRequest, pb.CreateInaJobResponse,
                              h.create_ina_job),
        "DeleteInaJob": unary("DeleteInaJob", pb.DeleteInaJobRequest, pb.DeleteInaJobResponse,
                              h.delete_ina_job),
        "ListAudit": unary("ListAudit", pb.ListAuditRequest, pb.ListAuditResponse,
                           h.list_audit),
        "CheckDrift": unary("CheckDrift", pb.CheckDriftRequest, pb.CheckDriftResponse,
                            h.check_drift),
        "WatchEvents": grpc.unary_stream_rpc_method_handler(
            h.watch_events, request_deserializer=None,
            response_serializer=pb.Event.SerializeToString),
    })
    options = [
        ("grpc.max_receive_message_length", limits.max_receive_message_bytes),
        ("grpc.max_send_message_length", limits.max_send_message_bytes),
        # HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS: one connection holds at most what the
        # counters allow in all; a client queues beyond it instead of failing
        ("grpc.max_concurrent_streams", limits.max_streams + limits.max_unary_calls),
    ]
    server = grpc.aio.server(interceptors=list(interceptors), options=options)
    server.add_generic_rpc_handlers((handler,))
    address = f"{host}:{port}"
    try:
        bound = (server.add_secure_port(address, credentials) if credentials is not None
                 else server.add_insecure_port(address))
    except RuntimeError as exc:
        raise RuntimeError(f"cannot listen for gRPC on {address}: {exc}") from None
    if bound == 0:
        raise RuntimeError(f"cannot listen for gRPC on {address}")
    await server.start()
    return NorthboundServer(server, h, bound)
