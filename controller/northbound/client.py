"""A small client of the northbound API for training code and the CLI.

Register a ``torch.distributed`` process group's ranks before the first collective::

    from controller.northbound.client import FabricClient, register_process_group
    from controller.security.transport import TLSFiles

    tls = TLSFiles(ca=Path("/etc/aifabric/ca.crt"))      # verifies the controller
    with FabricClient("10.0.0.254:50051", tls=tls, token=os.environ["AIFABRIC_TOKEN"]) as fabric:
        reply = register_process_group(fabric, job="llama-7b", name="dp-allreduce")
        # every rank returns once rank 0's registration is in force

The channel is TLS (``tls``: the CA of the controller's certificate, and a client certificate
and key when the controller requires mutual TLS) and every call carries the bearer ``token``
(``authorization: Bearer TOKEN``; an operator token registers, a read-only one reads). Plain
text only with ``insecure=True`` (a WARNING is logged).

``register_process_group`` gathers each rank's IPv4 address (``all_gather_object``), lets rank
0 register them in rank order, and broadcasts the reply, so every rank starts its collectives
only after the pinned entries are installed. Without torch, call
:meth:`FabricClient.register` with the hosts (names or IPv4 addresses) in rank order.
Errors come back as :class:`NorthboundError`, a ``grpc.RpcError`` with ``code()`` and
``details()`` whose ``str()`` says what happened in words (``INVALID_ARGUMENT`` names the field;
``UNAVAILABLE`` says no controller answers at the target). Every unary call has a deadline
(``timeout_s``); a deadline that passes is ``DEADLINE_EXCEEDED`` ("no answer within 10 s").
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc

from controller.northbound.v1 import aifabric_pb2 as pb
from controller.northbound.v1 import aifabric_pb2_grpc as pb_grpc
from controller.security.interceptor import bearer_metadata
from controller.security.transport import TLSFiles

DEFAULT_TARGET = "127.0.0.1:50051"
#: largest reply the client accepts (a status of a large fabric); the server's own send limit
#: is lower by default
MAX_RECEIVE_MESSAGE_BYTES = 64 << 20
CallFn = Callable[..., Any]


class NorthboundError(grpc.RpcError):
    """A northbound call failed: ``code()`` (``grpc.StatusCode``), ``code_name``
    (``"INVALID_ARGUMENT"``), ``details()`` (the server's text), ``target``; ``str()`` says
    it in words for a person."""

    def __init__(self, code: grpc.StatusCode, details: str, target: str,
                 timeout_s: float | None, tls_problem: str | None = None) -> None:
        super().__init__(details)
        self._code = code
        self._details = details
        self.code_name: str = code.name
        self.target = target
        self.timeout_s = timeout_s
        #: what a TLS handshake of our own found wrong (:func:`tls_problem`), when gRPC only
        #: said UNAVAILABLE
        self.tls_problem = tls_problem

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def __str__(self) -> str:
        if self._code == grpc.StatusCode.UNAVAILABLE and self._details.startswith("cluster: "):
            return f"UNAVAILABLE: {self._details}"   # a cluster replica's own answer
        if self._code == grpc.StatusCode.UNAVAILABLE and self.tls_problem:
            return f"the controller at {self.target} refused the TLS connection: {self.tls_problem}"
        if self._code == grpc.StatusCode.UNAVAILABLE:
            return (f"no aifabric controller answers at {self.target} (is it running with "
                    f"--grpc-listen at that address? set it with --controller HOST:PORT; "
                    f"TLS: --ca): {self._details}")
        if self._code == grpc.StatusCode.UNAUTHENTICATED:
            return (f"UNAUTHENTICATED: {self._details} (give a token: --token or "
                    "AIFABRIC_TOKEN)")
        if self._code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return (f"the controller at {self.target} gave no answer within "
                    f"{self.timeout_s:g} s")
        return f"{self.code_name}: {self._details}"


class FabricClient:
    """A connection to the controller's northbound service at ``target`` (``host:port``);
    ``timeout_s``: deadline of every unary call (s); ``tls``, ``token``, ``insecure``: module
    docstring.

    Raises
    ------
    InsecureChannelRefused
        No ``tls`` and not ``insecure``.
    """

    def __init__(self, target: str = DEFAULT_TARGET, timeout_s: float = 10.0, *,
                 tls: TLSFiles | None = None, token: str | None = None,
                 insecure: bool = False) -> None:
        from controller.security.grpc_tls import dial

        self.target = target
        self.timeout_s = timeout_s
        self.tls = tls
        self.channel = dial(target, tls, insecure=insecure, channel="northbound client",
                            options=[("grpc.max_receive_message_length",
                                      MAX_RECEIVE_MESSAGE_BYTES)])
        self.metadata = bearer_metadata(token) if token else ()
        self.stub = pb_grpc.NorthboundStub(self.channel)

    def __enter__(self) -> FabricClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def _call(self, method: CallFn, request: Any, timeout_s: float | None = None) -> Any:
        t = self.timeout_s if timeout_s is None else timeout_s
        try:
            return method(request, timeout=t, metadata=self.metadata)
        except grpc.RpcError as exc:
            why = (tls_problem(self.target, self.tls)
                   if exc.code() == grpc.StatusCode.UNAVAILABLE and self.tls is not None
                   else None)
            raise NorthboundError(exc.code(), exc.details() or "", self.target, t,
                                  why) from None

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
        return self._call(self.stub.RegisterCollective, req)

    def unregister(self, collective: str) -> Any:
        return self._call(self.stub.UnregisterCollective,
                          pb.UnregisterCollectiveRequest(collective=collective))

    def paths(self, collective: str = "") -> Any:
        """``GetPathsResponse``: every pinned flow of ``collective`` (all when empty)."""
        return self._call(self.stub.GetPaths, pb.GetPathsRequest(collective=collective))

    def status(self) -> Any:
        return self._call(self.stub.GetStatus, pb.GetStatusRequest())

    def apply_policy(self, document: str, source_name: str, dry_run: bool = False,
                     timeout_s: float | None = None) -> Any:
        """Validate, diff and (unless ``dry_run``) apply a policy document; problems are
        located in ``source_name``. Returns ``ApplyPolicyResponse`` (``ok`` false with
        ``problems`` or ``error``: not an exception). ``timeout_s``: deadline (default the
        client's; applying waits for every switch's confirmation)."""
        return self._call(self.stub.ApplyPolicy,
                          pb.ApplyPolicyRequest(document=document, source_name=source_name,
                                                dry_run=dry_run), timeout_s)

    def create_ina_job(self, name: str, workers: Sequence[tuple[str, str, int]],
                       pool_size: int = 0, timeout_s: float | None = None) -> Any:
        """Set up an in-network aggregation job on the controller's aggregation switch:
        ``workers`` as (IPv4, MAC, UDP port) in rank order (worker id = position);
        ``pool_size`` 0: the controller's default. Returns ``CreateInaJobResponse`` (job id,
        service address, slots); a job of the same name is replaced."""
        req = pb.CreateInaJobRequest(name=name, pool_size=pool_size, workers=[
            pb.InaWorker(ipv4=ip, mac=mac, udp_port=port) for ip, mac, port in workers])
        return self._call(self.stub.CreateInaJob, req, timeout_s)

    def delete_ina_job(self, name: str) -> None:
        """Remove the aggregation job ``name``."""
        self._call(self.stub.DeleteInaJob, pb.DeleteInaJobRequest(name=name))
    def audit(self, after_sequence: int = 0, limit: int = 0) -> Any:
        """``ListAuditResponse``: the audit records after ``after_sequence``, oldest first (at
        most ``limit``; 0: the server's page size). Page with the last record's sequence."""
        return self._call(self.stub.ListAudit,
                          pb.ListAuditRequest(after_sequence=after_sequence, limit=limit))

    def drift(self, switches: Sequence[str] = (), timeout_s: float | None = None) -> Any:
        """``CheckDriftResponse``: every switch (or those named) read back against its
        intended plan; nothing changes. ``timeout_s``: deadline (default the client's; every
        switch is read)."""
        return self._call(self.stub.CheckDrift, pb.CheckDriftRequest(switches=list(switches)),
                          timeout_s)

    def watch(self, kinds: Sequence[str] = ()) -> Iterator[Any]:
        """Events as they happen (``call.cancel()`` on the returned iterator stops it). No
        deadline; iterating raises ``grpc.RpcError`` when the stream ends with an error
        (``RESOURCE_EXHAUSTED "too slow: N events not read"`` for a reader that fell behind)."""
        stream: Iterator[Any] = self.stub.WatchEvents(pb.WatchEventsRequest(kinds=list(kinds)),
                                                      metadata=self.metadata)
        return stream


def tls_problem(target: str, tls: TLSFiles, timeout_s: float = 3.0) -> str | None:
    """What is wrong with a TLS connection to ``target``, found by a handshake of our own
    (gRPC reports a refused handshake as UNAVAILABLE "Socket closed" and no more): the server
    requires a client certificate we do not present, or refused the one we do, or its own
    certificate does not verify with ``tls.ca``. None: the handshake went through, or nothing
    answers (the caller's own message stands)."""
    host, _, port = target.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        ctx = ssl.create_default_context(cafile=str(tls.ca) if tls.ca else None)
        ctx.check_hostname = False   # the name is gRPC's to check; this is about certificates
        if tls.cert is not None and tls.key is not None:
            ctx.load_cert_chain(str(tls.cert), str(tls.key))
        ctx.set_alpn_protocols(["h2"])
        with socket.create_connection((host, int(port)), timeout=timeout_s) as raw, \
                ctx.wrap_socket(raw, server_hostname=host) as conn:
            conn.settimeout(1.0)
            try:
                # TLS 1.3: the server judges our certificate after the handshake; a gRPC server
                # that accepts us sends its HTTP/2 SETTINGS at once, one that refuses closes
                closed = conn.recv(1) == b""
            except TimeoutError:
                return None
            if closed:
                return _certificate_refused(tls)
    except ssl.SSLCertVerificationError as exc:
        return (f"its certificate does not verify with the CA given ({exc.verify_message}); "
                "give the CA that signed it: --ca or AIFABRIC_CA")
    except ssl.SSLError as exc:
        reason = str(exc.reason or exc)
        if any(k in reason.upper() for k in ("CERTIFICATE", "UNKNOWN_CA", "HANDSHAKE_FAILURE")):
            return _certificate_refused(tls)
        return None
    except (OSError, ValueError):
        return None
    return None


def _certificate_refused(tls: TLSFiles) -> str:
    if tls.cert is None:
        return ("it requires a client certificate (mutual TLS) and none was given: give "
                "--cert and --key (or AIFABRIC_CERT and AIFABRIC_KEY)")
    return (f"it refused our client certificate {tls.cert} (mutual TLS): give one signed by "
            "the CA the controller trusts (its --ca)")


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
            box[0] = str(exc) if isinstance(exc, NorthboundError) else f"{exc.code().name}: {exc.details()}"
    dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0) if group else 0,
                               group=group)
    if isinstance(box[0], str):
        raise RuntimeError(f"registering {job}.{name} failed: {box[0]}")
    return pb.RegisterCollectiveResponse.FromString(box[0])
