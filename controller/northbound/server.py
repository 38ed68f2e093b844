"""The gRPC server of ``aifabric.v1.Northbound`` (:file:`aifabric.proto`): converts messages and
maps errors to status codes; the work is done by a service object
(:class:`controller.runtime.service.FabricService`, duck-typed here: this package sits below
the runtime).

Status codes: :class:`~controller.northbound.model.FieldError` → ``INVALID_ARGUMENT``
(``"field: message"``), :class:`~controller.northbound.model.NotFound` → ``NOT_FOUND``,
:class:`~controller.northbound.model.Unavailable` → ``FAILED_PRECONDITION``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc

from controller.northbound.model import (
    CollectiveRequest,
    FieldError,
    L4Request,
    NotFound,
    Unavailable,
)
from controller.northbound.v1 import aifabric_pb2 as pb
from controller.northbound.v1 import aifabric_pb2_grpc as pb_grpc

LOG = logging.getLogger("aifabric.northbound")
WATCH_POLL_S = 0.25


def request_from_proto(msg: pb.RegisterCollectiveRequest) -> CollectiveRequest:
    """The request as plain values (no validation beyond types; the service validates)."""
    l4 = None
    if msg.HasField("l4"):
        l4 = L4Request(msg.l4.proto, msg.l4.src_port, msg.l4.dst_port)
    return CollectiveRequest(
        job=msg.job, name=msg.name, algorithm=msg.algorithm, ranks=tuple(msg.ranks),
        bidirectional=msg.bidirectional, dscp=msg.dscp if msg.HasField("dscp") else None,
        l4=l4, expected_bytes=msg.expected_bytes if msg.HasField("expected_bytes") else None)


def flow_to_proto(f: Any) -> pb.FlowPath:
    d = f.flow
    return pb.FlowPath(collective=d.collective, index=d.index, src=d.src, dst=d.dst,
                       hops=list(f.path), bytes=int(f.bytes), match=f.match)


def confirmation_to_proto(c: Any) -> pb.Confirmation:
    return pb.Confirmation(in_force=c.in_force, in_force_unix_s=c.in_force_unix_s,
                           apply_ms=c.apply_ms, switches_updated=list(c.switches_updated),
                           switches_pending=list(c.switches_pending))


def event_to_proto(ev: Any) -> pb.Event:
    return pb.Event(kind=ev.kind, time_unix_s=ev.time_s, message=ev.message, switch=ev.switch,
                    link=ev.link, collective=ev.collective, flow=ev.flow,
                    old_path=list(ev.old_path), new_path=list(ev.new_path), alert=ev.alert)


def status_to_proto(st: dict[str, Any]) -> pb.GetStatusResponse:
    return pb.GetStatusResponse(
        fabric=st["fabric"], routing_mode=st["routing_mode"],
        sample_interval_s=st["sample_interval_s"], plan_generation=st["plan_generation"],
        switches=[pb.SwitchStatus(**s) for s in st["switches"]],
        links=[pb.LinkStatus(src=ln.link[0], dst=ln.link[1], up=ln.up,
                             fabric_link=ln.fabric_link, capacity_bps=ln.capacity_bps,
                             rate_bps=ln.rate_bps, utilisation=ln.utilisation,
                             loss_ratio=ln.loss_ratio, bytes_total=ln.bytes_total,
                             dropped_total=ln.dropped_total, microbursts=ln.microbursts,
                             pinned_flows=ln.pinned_flows) for ln in st["links"]],
        collectives=[pb.CollectiveStatus(**c) for c in st["collectives"]],
        alerts=[pb.AlertStatus(**a) for a in st["alerts"]],
        traffic=[pb.HostPairBytes(src=s, dst=d, bytes=b) for (s, d), b in st["traffic"].items()])


class NorthboundServicer(pb_grpc.NorthboundServicer):
    """``aifabric.v1.Northbound`` over a service object; ``stop`` ends open event streams."""

    def __init__(self, service: Any, stop: threading.Event | None = None) -> None:
        self.service = service
        self.stop = stop or threading.Event()

    @staticmethod
    def _fail(context: grpc.ServicerContext, exc: Exception) -> None:
        code = {FieldError: grpc.StatusCode.INVALID_ARGUMENT, NotFound: grpc.StatusCode.NOT_FOUND,
                Unavailable: grpc.StatusCode.FAILED_PRECONDITION}[type(exc)]
        context.abort(code, str(exc))

    def RegisterCollective(self, request: Any, context: Any) -> Any:  # noqa: N802
        try:
            reg = self.service.register(request_from_proto(request))
        except (FieldError, NotFound, Unavailable) as exc:
            self._fail(context, exc)
        return pb.RegisterCollectiveResponse(
            collective=reg.collective, flows=[flow_to_proto(f) for f in reg.flows],
            confirmation=confirmation_to_proto(reg.confirmation),
            plan_generation=reg.plan_generation)

    def UnregisterCollective(self, request: Any, context: Any) -> Any:  # noqa: N802
        if not request.collective:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "collective: must not be empty")
        try:
            conf, gen = self.service.unregister(request.collective)
        except (FieldError, NotFound, Unavailable) as exc:
            self._fail(context, exc)
        return pb.UnregisterCollectiveResponse(confirmation=confirmation_to_proto(conf),
                                               plan_generation=gen)

    def GetPaths(self, request: Any, context: Any) -> Any:  # noqa: N802
        try:
            flows = self.service.paths(request.collective)
        except (FieldError, NotFound, Unavailable) as exc:
            self._fail(context, exc)
        return pb.GetPathsResponse(flows=[flow_to_proto(f) for f in flows])

    def GetStatus(self, request: Any, context: Any) -> Any:  # noqa: N802
        return status_to_proto(self.service.status())

    def WatchEvents(self, request: Any, context: Any) -> Iterator[Any]:  # noqa: N802
        try:
            sub = self.service.subscribe(frozenset(request.kinds) or None)
        except FieldError as exc:
            self._fail(context, exc)
        try:
            while context.is_active() and not self.stop.is_set():
                ev = sub.get(WATCH_POLL_S)
                if ev is not None:
                    yield event_to_proto(ev)
        finally:
            self.service.unsubscribe(sub)


UNARY_RESERVE = 16  # worker threads no number of open WatchEvents streams can take


def start_server(service: Any, host: str, port: int, max_workers: int = 64
                 ) -> tuple[grpc.Server, int, NorthboundServicer]:
    """Serve ``service`` on ``host:port`` (0: any free port). Returns the server, the bound port
    and the servicer (``servicer.stop.set()`` ends event streams before ``server.stop``).

    Every open WatchEvents stream holds a worker thread, so at most ``max_workers`` −
    ``UNARY_RESERVE`` RPCs run at once; beyond that gRPC answers RESOURCE_EXHAUSTED, and
    registrations are never starved by idle event streams.

    Raises
    ------
    RuntimeError
        The address cannot be bound.
    """
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers,
                                                    thread_name_prefix="northbound"),
                         maximum_concurrent_rpcs=max(1, max_workers - UNARY_RESERVE))
    servicer = NorthboundServicer(service)
    pb_grpc.add_NorthboundServicer_to_server(servicer, server)
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as exc:
        raise RuntimeError(f"cannot listen for gRPC on {host}:{port}: {exc}") from None
    if bound == 0:
        raise RuntimeError(f"cannot listen for gRPC on {host}:{port}")
    server.start()
    return server, bound, servicer
