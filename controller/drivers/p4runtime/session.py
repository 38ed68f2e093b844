"""One P4Runtime session with one switch: the gRPC channel, the StreamChannel and client
arbitration as the P4Runtime specification says (v1.3 §5), on finsy's gRPC client and
protobufs, without finsy's own arbitration.

**Arbitration (§5, "Client Arbitration and Controller Replication").** The session sends one
``MasterArbitrationUpdate`` (``device_id``, ``role`` name, ``election_id``) when it opens and
follows the server's notifications. It is **primary** only when the server says so *and* no
election id higher than ours was ever seen for the device and role: the specification makes
the primary "the client that has the highest ``election_id`` that the device has ever
received" (§5; ``election_id_past`` in §5.4), so a backup is not promoted when the primary
goes away, and becomes primary only by sending a higher election id (which the runtime does
when its mastership, e.g. an etcd lease, says so). Otherwise it is a **backup**: it reads, it
never writes, and it never bids by itself — unlike finsy's arbitrator, which bids for primary
as soon as the server reports no primary.

What BMv2 (PI's P4Runtime server, ``proto/server/pi_server.cpp``) does differently, and what
the session does about it (docs/p4.md lists these too):

* it promotes the highest *live* backup when the primary disconnects (it notifies it "Is
  primary"): the session stays backup, logs the deviation, and writes nothing;
* it ignores the role: all clients of a device share one arbitration whatever their role
  name, and every role has full pipeline access;
* it accepts a client without an election id (0) and makes a lone one primary: the session
  never opens without an election id ≥ 1;
* a client that re-bids on its open stream with an election id another client holds is
  refused, but BMv2 has then already removed the bidder from its set, and aborts
  (``assert`` in ``cleanup_connection``) when that stream closes: the session never re-bids on
  an open stream; a new election id means a new stream (a new session).

A duplicate election id at open is refused by the server (``INVALID_ARGUMENT``, §5.4) and
raised as :class:`ElectionIdInUse`. A write refused with ``PERMISSION_DENIED`` after another
client took over is a **demotion**: the session turns backup, calls ``on_role`` with the
reason, and raises :class:`Demoted`.

The channel's metadata limit is raised from finsy's 64 KiB (hard limit 80 KiB = 81,920 B,
the one BMv2's per-update error details exceeded beyond ~690 failed updates of one request)
to :data:`MAX_METADATA_BYTES`, so a whole batch's per-update errors arrive.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Literal, cast

import finsy as fy
from finsy.grpcutil import GRPCCredentialsTLS, GRPCOptions, grpc_channel
from finsy.p4client import P4Client, P4ClientError
from finsy.proto import U128, p4r, p4r_grpc

LOG = logging.getLogger("aifabric.p4runtime")

SessionRole = Literal["primary", "backup"]
#: Largest gRPC metadata (trailers with per-update error details) the session accepts.
MAX_METADATA_BYTES = 8 * 1024 * 1024
#: Seconds a unary request may take (BMv2 under load can be slow with big batches).
RPC_TIMEOUT_S = 60.0


class SessionError(RuntimeError):
    """The session failed; the message names the switch."""


class ElectionIdInUse(SessionError):
    """The server refused our election id: another live client of the device and role holds
    it (P4Runtime spec §5.4, INVALID_ARGUMENT)."""


class NotPrimary(SessionError):
    """We are a backup: nothing was sent."""


class Demoted(NotPrimary):
    """The server refused a write because another client became primary (PERMISSION_DENIED):
    we were demoted to backup."""


class _Client(P4Client):
    """finsy's client with a larger metadata limit (module docstring)."""

    async def open(self, *, schema: Any = None, complete_request: Any = None) -> None:
        assert self._channel is None
        self._channel = grpc_channel(
            self._address, credentials=self._credentials,
            options=GRPCOptions(max_metadata_size=MAX_METADATA_BYTES,
                                max_reconnect_backoff_ms=2000),
            client_type="P4Client")
        self._stub = p4r_grpc.P4RuntimeStub(self._channel)
        self._schema = schema
        self._complete_request = complete_request


def _code(exc: P4ClientError) -> str:
    return str(exc.code.name)


class P4Session:
    """One arbitrated P4Runtime session (module docstring).

    Parameters
    ----------
    name : str
        The switch's name (messages and logs).
    address : str
        gRPC target: ``host:port`` or ``unix:PATH``.
    device_id : int
        P4Runtime device id (≥ 1, §5.2).
    election_id : int
        Our election id, 1 ≤ id < 2**128 (§5). A client never opens without one.
    role_name : str
        P4Runtime role ("" = the default role: full pipeline access, §5.2).
    credentials : finsy.GRPCCredentialsTLS, optional
        TLS for the channel (None: plain text; the caller decides whether that is allowed).
    on_role : callable, optional
        ``on_role(role, reason)`` after every change of our role once open (demotion,
        promotion by a higher bid of ours, a BMv2 promotion we refused).
    arbitration_timeout_s : float
        How long to wait for the server's first arbitration answer.

    Raises
    ------
    ValueError
        ``election_id`` or ``device_id`` out of range.
    """

    def __init__(self, name: str, address: str, device_id: int, *, election_id: int,
                 role_name: str = "", credentials: GRPCCredentialsTLS | None = None,
                 on_role: Callable[[SessionRole, str], None] | None = None,
                 arbitration_timeout_s: float = 10.0) -> None:
        if not 1 <= election_id < 1 << 128:
            raise ValueError(f"{name}: election_id must be 1..2**128-1 (P4Runtime spec §5: a "
                             f"client without one never becomes primary), got {election_id}")
        if device_id < 1:
            raise ValueError(f"{name}: device_id must be >= 1 (P4Runtime spec §5.2)")
        self.name, self.address, self.device_id = name, address, device_id
        self.election_id = election_id
        self.role_name = role_name
        self.role: SessionRole = "backup"
        self.primary_id: int | None = None   # election id of the primary the server reports
        self.highest_seen = election_id      # the highest election id ever seen (§5.4)
        self.on_role = on_role
        self.arbitration_timeout_s = arbitration_timeout_s
        self.packets: asyncio.Queue[p4r.PacketIn | None] = asyncio.Queue()
        self.closed = asyncio.Event()
        self.close_reason = ""
        self.requests = 0
        self.deviations: list[str] = []
        self._client = _Client(address, credentials, wait_for_ready=False)
        self._stub: Any = None
        self._write_bytes: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._send_lock = asyncio.Lock()
        self._role_msg = p4r.Role(name=role_name) if role_name else None
        self._eid = U128.encode(election_id)

    # -- lifecycle -------------------------------------------------------------------------------
    async def open(self) -> SessionRole:
        """Open the channel and the stream, arbitrate, and return our role.

        Raises
        ------
        ElectionIdInUse
            Another live client holds our election id.
        SessionError
            The switch does not answer, or ends the stream.
        """
        await self._client.open()
        ch = self._client.channel
        assert ch is not None
        self._stub = p4r_grpc.P4RuntimeStub(ch)
        # the Write RPC for a request serialized already (no request serializer: the bytes go
        # out as they are; the answer is decoded as the stub's is)
        self._write_bytes = ch.unary_unary("/p4.v1.P4Runtime/Write",
                                           response_deserializer=p4r.WriteResponse.FromString)
        try:
            await self._client.send(p4r.StreamMessageRequest(arbitration=p4r.MasterArbitrationUpdate(
                device_id=self.device_id, role=self._role_msg, election_id=self._eid)))
            while True:
                msg = await asyncio.wait_for(self._client.receive(), self.arbitration_timeout_s)
                if msg.WhichOneof("update") == "arbitration":
                    break
                if msg.WhichOneof("update") == "packet":
                    self.packets.put_nowait(msg.packet)
        except P4ClientError as exc:
            await self._client.close()
            if _code(exc) == "INVALID_ARGUMENT" and "lection" in exc.message:
                raise ElectionIdInUse(
                    f"{self.name}: election_id {self.election_id} refused: another client of "
                    f"device {self.device_id} holds it ({exc.message}; P4Runtime spec §5.4)"
                ) from None
            raise SessionError(f"{self.name}: arbitration with {self.address} failed: "
                               f"{_code(exc)}: {exc.message}") from None
        except (TimeoutError, OSError, RuntimeError) as exc:
            await self._client.close()
            raise SessionError(f"{self.name}: no arbitration answer from {self.address} "
                               f"({type(exc).__name__}: {exc})") from None
        self._arbitration(msg.arbitration, initial=True)
        self._reader = asyncio.create_task(self._read_stream(), name=f"p4rt stream {self.name}")
        return self.role

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None
        await self._client.close()
        if not self.closed.is_set():
            self.close_reason = self.close_reason or "closed by us"
            self.closed.set()
            self.packets.put_nowait(None)

    async def __aenter__(self) -> P4Session:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def is_primary(self) -> bool:
        return self.role == "primary"

    # -- the stream -----------------------------------------------------------------------------
    async def _read_stream(self) -> None:
        reason = "stream ended"
        try:
            while True:
                msg = await self._client.receive()
                kind = msg.WhichOneof("update")
                if kind == "packet":
                    self.packets.put_nowait(msg.packet)
                elif kind == "arbitration":
                    self._arbitration(msg.arbitration)
                elif kind == "error":
                    LOG.warning("[%s] stream error from the switch: %s", self.name,
                                msg.error.message)
        except asyncio.CancelledError:
            reason = "closed by us"
            raise
        except P4ClientError as exc:
            reason = f"{_code(exc)}: {exc.message}"
        except Exception as exc:  # noqa: BLE001 - finsy raises RuntimeError on EOF
            reason = str(exc) or type(exc).__name__
        finally:
            self.close_reason = self.close_reason or reason
            self.closed.set()
            self.packets.put_nowait(None)

    def _arbitration(self, a: p4r.MasterArbitrationUpdate, initial: bool = False) -> None:
        """Our role after a notification (module docstring)."""
        code = a.status.code
        eid = U128.decode(a.election_id) if a.HasField("election_id") else None
        if eid is not None:
            self.highest_seen = max(self.highest_seen, eid)
        self.primary_id = eid if code == 0 else (eid if code == 6 else None)  # OK / ALREADY_EXISTS
        says_primary = code == 0 and eid == self.election_id
        role: SessionRole = ("primary" if says_primary and self.election_id >= self.highest_seen
                             else "backup")
        reason = ""
        if says_primary and role == "backup":
            reason = (f"the switch made us primary (election_id {self.election_id}) though it "
                      f"had seen election_id {self.highest_seen}; P4Runtime spec §5 keeps the "
                      "highest election id ever seen as primary (BMv2 promotes the next live "
                      "backup when the primary leaves): staying backup, writing nothing")
            self.deviations.append(reason)
            LOG.warning("[%s] %s", self.name, reason)
        elif role == "backup" and self.role == "primary":
            reason = (f"demoted: election_id {eid} > ours {self.election_id}" if eid
                      else "demoted: the switch reports no primary")
        elif role == "primary" and self.role == "backup" and not initial:
            reason = f"primary with election_id {self.election_id}"
        changed = role != self.role
        self.role = role
        if initial:
            LOG.info("[%s] P4Runtime %s (election_id %d%s%s)", self.name, role,
                     self.election_id, f", role {self.role_name}" if self.role_name else "",
                     "" if role == "primary" or eid is None else f" < primary's {eid}")
        elif changed or reason:
            LOG.warning("[%s] P4Runtime %s: %s", self.name, role, reason or "role changed")
            if self.on_role is not None:
                self.on_role(role, reason)

    # -- requests --------------------------------------------------------------------------------
    def _require_primary(self, what: str) -> None:
        if self.role != "primary":
            raise NotPrimary(f"{self.name}: backup (election_id {self.election_id}; primary "
                             f"{self.primary_id}): {what} not sent")

    def write_request(self) -> p4r.WriteRequest:
        """An empty WriteRequest of ours (device, role, election id) to fill and
        :meth:`write`."""
        return p4r.WriteRequest(device_id=self.device_id, role=self.role_name,
                                election_id=self._eid)

    async def write(self, updates: Sequence[p4r.Update] | p4r.WriteRequest | bytes) -> None:
        """One WriteRequest of ``updates``, or ``updates`` itself when it is a WriteRequest
        from :meth:`write_request`, or one serialized (``bytes``: sent as they are,
        :meth:`~.wire.WireCodec.write_request_bytes`) (CONTINUE_ON_ERROR, §12.2).

        Raises
        ------
        NotPrimary
            We are a backup (nothing sent).
        Demoted
            The switch refused it: another client is primary now.
        finsy.P4ClientError
            The switch refused updates (``details``: update index → error).
        """
        self._require_primary("write")
        req: p4r.WriteRequest | bytes
        if isinstance(updates, p4r.WriteRequest | bytes):
            req = updates
        else:
            req = self.write_request()
            req.updates.extend(updates)
        self.requests += 1
        try:
            if isinstance(req, bytes):
                await self._write_bytes(req, timeout=RPC_TIMEOUT_S)
            else:
                await self._stub.Write(req, timeout=RPC_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - a gRPC status: the drivers import no grpc
            if not hasattr(exc, "trailing_metadata"):
                raise
            msg = p4r.WriteRequest.FromString(req) if isinstance(req, bytes) else req
            err = P4ClientError(cast(Any, exc), "Write", msg=msg)  # a grpc.RpcError
            if _code(err) == "PERMISSION_DENIED":
                self._demote(err.message)
                raise Demoted(f"{self.name}: write refused, we were demoted ({err.message}); "
                              "no update of it applied") from None
            raise err from None

    def _demote(self, why: str) -> None:
        if self.role == "primary":
            self.role = "backup"
            reason = f"demoted: the switch refused our write ({why})"
            LOG.warning("[%s] P4Runtime backup: %s", self.name, reason)
            if self.on_role is not None:
                self.on_role("backup", reason)

    async def read(self, entities: Sequence[p4r.Entity]) -> AsyncIterator[p4r.Entity]:
        """Every entity the switch returns for the wildcard/keyed ``entities`` (§11)."""
        req = p4r.ReadRequest(device_id=self.device_id, role=self.role_name, entities=entities)
        try:
            async for reply in self._stub.Read(req, timeout=RPC_TIMEOUT_S):
                for e in reply.entities:
                    yield e
        except Exception as exc:  # noqa: BLE001 - a gRPC status: the drivers import no grpc
            if not hasattr(exc, "trailing_metadata"):
                raise
            raise P4ClientError(cast(Any, exc), "Read") from None  # a grpc.RpcError

    async def packet_out(self, packet: p4r.PacketOut) -> None:
        """Send a packet-out (only the primary may, §16.1)."""
        self._require_primary("packet-out")
        # one write at a time on the stream (gRPC's asyncio streams refuse a write while
        # another is pending, and BMv2 then ends the stream with INTERNAL); and never on a
        # closed stream (finsy's send would open a new, unarbitrated one)
        async with self._send_lock:
            if self.closed.is_set():
                raise SessionError(f"{self.name}: stream closed ({self.close_reason}): "
                                   "packet-out not sent")
            await self._client.send(p4r.StreamMessageRequest(packet=packet))

    async def pipeline_cookie(self) -> int | None:
        """The cookie of the switch's pipeline (None: it has none)."""
        try:
            reply = await self._client.request(p4r.GetForwardingPipelineConfigRequest(
                device_id=self.device_id,
                response_type=p4r.GetForwardingPipelineConfigRequest.COOKIE_ONLY))
        except P4ClientError as exc:
            if exc.is_pipeline_missing:
                return None
            raise
        return int(reply.config.cookie.cookie) if reply.config.HasField("cookie") else None

    async def set_pipeline(self, schema: fy.P4Schema) -> None:
        """SetForwardingPipelineConfig (VERIFY_AND_COMMIT) with ``schema``'s P4Info, device
        config and cookie (§7); the primary only."""
        self._require_primary("SetForwardingPipelineConfig")
        await self._client.request(p4r.SetForwardingPipelineConfigRequest(
            device_id=self.device_id, role=self.role_name, election_id=self._eid,
            action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
            config=schema.get_pipeline_config()))
