"""A small client of the northbound API for training code and the CLI.

Register a ``torch.distributed`` process group's ranks before the first collective::

    from controller.northbound.client import FabricClient, register_process_group

    with FabricClient("10.0.0.254:50051") as fabric:
        reply = register_process_group(fabric, job="llama-7b", name="dp-allreduce")
        # every rank returns once rank 0's registration is in force

``register_process_group`` gathers each rank's IPv4 address (``all_gather_object``), lets rank
0 register them in rank order, and broadcasts the reply, so every rank starts its collectives
only after the pinned entries are installed. Without torch, call
:meth:`FabricClient.register` with the hosts (names or IPv4 addresses) in rank order.
Errors come back as ``grpc.RpcError`` (``INVALID_ARGUMENT`` with the field named).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Sequence
from typing import Any

import grpc

from controller.northbound.v1 import aifabric_pb2 as pb
from controller.northbound.v1 import aifabric_pb2_grpc as pb_grpc

DEFAULT_TARGET = "127.0.0.1:50051"


class FabricClient:
    """A connection to the controller's northbound service at ``target`` (``host:port``)."""

    def __init__(self, target: str = DEFAULT_TARGET, timeout_s: float = 10.0) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self.channel = grpc.insecure_channel(target)
        self.stub = pb_grpc.NorthboundStub(self.channel)

    def __enter__(self) -> FabricClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def register(self, job: str, name: str, ranks: Sequence[str], *, algorithm: str = "ring",
                 bidirectional: bool = False, dscp: int | None = None,
                 l4: tuple[str, int, int] | None = None,
                 expected_bytes: int | None = None) -> Any:
        """Register a collective (ranks: host names or IPv4 addresses in rank order; ``l4``:
        (proto, src_port, dst_port), 0 = any). Returns ``RegisterCollectiveResponse``."""
        req = pb.RegisterCollectiveRequest(job=job, name=name, algorithm=algorithm,
                                           ranks=list(ranks), bidirectional=bidirectional)
        if dscp is not None:
            req.dscp = dscp
        if l4 is not None:
            req.l4.CopyFrom(pb.L4Match(proto=l4[0], src_port=l4[1], dst_port=l4[2]))
        if expected_bytes is not None:
            req.expected_bytes = expected_bytes
        return self.stub.RegisterCollective(req, timeout=self.timeout_s)

    def unregister(self, collective: str) -> Any:
        return self.stub.UnregisterCollective(
            pb.UnregisterCollectiveRequest(collective=collective), timeout=self.timeout_s)

    def paths(self, collective: str = "") -> Any:
        """``GetPathsResponse``: every pinned flow of ``collective`` (all when empty)."""
        return self.stub.GetPaths(pb.GetPathsRequest(collective=collective),
                                  timeout=self.timeout_s)

    def status(self) -> Any:
        return self.stub.GetStatus(pb.GetStatusRequest(), timeout=self.timeout_s)

    def watch(self, kinds: Sequence[str] = ()) -> Iterator[Any]:
        """Events as they happen (``call.cancel()`` on the returned iterator stops it)."""
        return self.stub.WatchEvents(pb.WatchEventsRequest(kinds=list(kinds)))


def local_ipv4(towards: str = "10.255.255.255") -> str:
    """This host's IPv4 address on the route towards ``towards`` (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((towards, 9))
        return str(s.getsockname()[0])


def register_process_group(client: FabricClient, job: str, name: str, group: Any = None,
                           address: str | None = None, **kwargs: Any) -> Any:
    """Register the ranks of a ``torch.distributed`` process group (collective: every rank of
    ``group`` must call it). ``address``: this rank's IPv4 address (default
    :func:`local_ipv4`). Returns rank 0's ``RegisterCollectiveResponse`` on every rank;
    raises ``RuntimeError`` on every rank if rank 0's registration failed."""
    import torch.distributed as dist  # optional dependency of the training code

    mine = address or local_ipv4()
    addrs: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(addrs, mine, group=group)
    box: list[Any] = [None]
    if dist.get_rank(group) == 0:
        try:
            box[0] = client.register(job, name, addrs, **kwargs).SerializeToString()
        except grpc.RpcError as exc:
            box[0] = f"{exc.code().name}: {exc.details()}"
    dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0) if group else 0,
                               group=group)
    if isinstance(box[0], str):
        raise RuntimeError(f"registering {job}.{name} failed: {box[0]}")
    return pb.RegisterCollectiveResponse.FromString(box[0])
