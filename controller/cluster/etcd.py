"""Connecting to an etcd cluster: the ``--cluster etcd://HOST:PORT[,HOST:PORT...]`` URL, and one
asyncio client (aetcd) whose gRPC channel knows every member.

aetcd 1.0 dials one ``host:port``. :class:`EtcdClient` dials all members through one gRPC channel
(target ``ipv4:A:P,B:Q,...`` with gRPC's ``pick_first`` policy): when the member in use dies, the
channel moves to the next one by itself and only the calls in flight fail (aetcd raises
``ConnectionFailedError``; callers retry, see :func:`retrying`). Optional TLS (a CA, and a client
certificate for etcd's ``--client-cert-auth``) uses the same channel.

The keep-alive settings make a member that is alive on TCP but silent (paused, partitioned) count
as dead after ``keepalive_s + keepalive_timeout_s``; etcd's server refuses client pings more often
than its ``--grpc-keepalive-min-time`` (5 s by default), hence the 5 s default here.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

import aetcd
import aetcd.rpc
import grpc

from controller.cluster.watcher import OrderedWatcher

LOG = logging.getLogger("aifabric.cluster")
DEFAULT_PORT = 2379
T = TypeVar("T")

#: errors of an etcd call that say "the member or the connection failed", not "the request is bad"
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    aetcd.ConnectionFailedError, aetcd.ConnectionTimeoutError, aetcd.InternalError,
    aetcd.WatchTimeoutError, asyncio.TimeoutError)

#: gRPC codes that aetcd leaves as a plain ``ClientError`` and that say "not now": etcd answers
#: UNKNOWN "context deadline exceeded" when its own context ends first (a proposal waiting for a
#: quorum that is lost: the server's ``togRPCError`` maps only its own errors, see etcd
#: ``api/v3rpc/rpctypes``); CANCELLED when the channel closes under a call; ABORTED when a
#: member gives up a request (a leader change mid-call).
TRANSIENT_CODES = frozenset({grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED,
                             grpc.StatusCode.ABORTED})


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` from an etcd call says the cluster could not answer now (a member
    died, a call timed out, quorum is lost), so the same call may succeed later; False when the
    request itself was refused (bad argument, authentication, a compacted revision...).

    aetcd turns gRPC codes it does not know into a plain :class:`aetcd.ClientError` whose cause
    is the gRPC error: its code decides (:data:`TRANSIENT_CODES`); etcd's "too many requests"
    (RESOURCE_EXHAUSTED, its request queue full) is transient too."""
    if isinstance(exc, TRANSIENT_ERRORS):
        return True
    if type(exc) is not aetcd.ClientError:   # a subclass: aetcd knew the code (not transient)
        return False
    cause = exc.__cause__
    if not isinstance(cause, grpc.aio.AioRpcError):
        return False
    code = cause.code()
    return code in TRANSIENT_CODES or (code == grpc.StatusCode.RESOURCE_EXHAUSTED
                                       and "too many requests" in (cause.details() or ""))


class ClusterURLError(ValueError):
    """A ``--cluster`` URL that is not ``etcd://HOST:PORT[,HOST:PORT...]`` (the message says why)."""


@dataclass(frozen=True)
class EtcdTLS:
    """TLS to etcd: the CA that signed the members' certificates, and optionally this client's
    certificate and key (PEM files) for etcd's ``--client-cert-auth``.

    ``server_name``: the name every member's certificate must carry (its subjectAltNames);
    None: the host of the first endpoint. One channel reaches all members (target
    ``ipv4:A:P,B:Q,...``), whose authority is no host name: without it gRPC's hostname check
    fails for a cluster of more than one member."""

    ca_path: Path
    cert_path: Path | None = None
    key_path: Path | None = None
    server_name: str | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        cert = self.cert_path.read_bytes() if self.cert_path else None
        key = self.key_path.read_bytes() if self.key_path else None
        return grpc.ssl_channel_credentials(self.ca_path.read_bytes(), key, cert)


@dataclass(frozen=True)
class EtcdSettings:
    """How to reach the cluster.

    ``rpc_timeout_s`` bounds every unary call (a keep-alive too): a call to a member that does not
    answer fails after it, and the caller retries on the next member.
    """

    endpoints: tuple[tuple[str, int], ...]
    rpc_timeout_s: float = 0.5
    keepalive_s: float = 5.0
    keepalive_timeout_s: float = 2.0
    tls: EtcdTLS | None = None

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise ClusterURLError("no etcd endpoint given")
        if self.rpc_timeout_s <= 0:
            raise ValueError(f"rpc_timeout_s must be > 0, got {self.rpc_timeout_s}")

    @classmethod
    def from_url(cls, url: str, **kw: object) -> EtcdSettings:
        return cls(parse_cluster_url(url), **kw)  # type: ignore[arg-type]


def parse_cluster_url(url: str) -> tuple[tuple[str, int], ...]:
    """``etcd://HOST:PORT[,HOST:PORT...]`` → ((host, port), ...); the port defaults to 2379.

    IPv6 hosts are written in brackets (``etcd://[::1]:2379``). Raises ClusterURLError.
    """
    if not url.startswith("etcd://"):
        raise ClusterURLError(f"cluster URL must start with etcd://, got {url[:64]!r}")
    out: list[tuple[str, int]] = []
    for part in url[len("etcd://"):].split(","):
        part = part.strip()
        if not part:
            raise ClusterURLError(f"empty endpoint in {url[:64]!r}")
        try:
            split = urlsplit("//" + part)
            host, port = split.hostname, split.port
        except ValueError as exc:
            raise ClusterURLError(f"bad endpoint {part[:64]!r}: {exc}") from None
        if not host or split.path or split.query:
            raise ClusterURLError(f"bad endpoint {part[:64]!r}: want HOST:PORT")
        out.append((host, port or DEFAULT_PORT))
    return tuple(out)


def grpc_target(endpoints: tuple[tuple[str, int], ...]) -> str:
    """One gRPC target naming every member: ``ipv4:A:P,B:Q`` (or ``ipv6:[A]:P,...``).

    Host names are resolved now (gRPC's ``dns:`` scheme takes one name only). Raises
    ClusterURLError when a name does not resolve or the members mix IPv4 and IPv6.
    """
    addrs: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    ports: list[int] = []
    for host, port in endpoints:
        try:
            addr = ipaddress.ip_address(host)
        except ValueError:
            try:
                info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError as exc:
                raise ClusterURLError(f"etcd endpoint {host}: {exc}") from None
            addr = ipaddress.ip_address(info[0][4][0])
        addrs.append(addr)
        ports.append(port)
    versions = {a.version for a in addrs}
    if len(versions) != 1:
        raise ClusterURLError("etcd endpoints mix IPv4 and IPv6 addresses")
    if versions == {4}:
        return "ipv4:" + ",".join(f"{a}:{p}" for a, p in zip(addrs, ports, strict=True))
    return "ipv6:" + ",".join(f"[{a}]:{p}" for a, p in zip(addrs, ports, strict=True))


def channel_options(settings: EtcdSettings) -> list[tuple[str, int | str]]:
    """gRPC channel options of every channel to the cluster: keep-alive (module docstring),
    fast reconnects, and the TLS name every member's certificate carries."""
    options: list[tuple[str, int | str]] = [
        ("grpc.keepalive_time_ms", int(settings.keepalive_s * 1000)),
        ("grpc.keepalive_timeout_ms", int(settings.keepalive_timeout_s * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
    ]
    if settings.tls is not None:
        options.append(("grpc.ssl_target_name_override",
                        settings.tls.server_name or settings.endpoints[0][0]))
    return options


def sync_channel(settings: EtcdSettings) -> grpc.Channel:
    """A synchronous gRPC channel to every member (for a thread that must not depend on an
    event loop: the failure detector's heartbeats)."""
    target = grpc_target(settings.endpoints)
    if settings.tls is None:
        return grpc.insecure_channel(target, options=channel_options(settings))
    return grpc.secure_channel(target, settings.tls.credentials(),
                               options=channel_options(settings))


class EtcdClient(aetcd.Client):
    """aetcd's client on one channel to every member (see the module docstring).

    Everything else (get, put, transaction, lease, watch ...) is aetcd's own API. The connection is
    made on first use or by ``await client.connect()``; ``await client.close()`` ends it.
    """

    # aetcd's own attributes (set by aetcd.Client.__init__), typed for the override below
    _connected: asyncio.Event
    _is_connecting: bool
    _connect_wait_timeout: float
    _timeout: float | None

    def __init__(self, settings: EtcdSettings):
        host, port = settings.endpoints[0]
        super().__init__(host=host, port=port, timeout=settings.rpc_timeout_s, options=None)
        self.settings = settings
        self._target = grpc_target(settings.endpoints)
        self._sync_lock = threading.Lock()
        self._sync: grpc.Channel | None = None

    def sync_keepalive(self, lease_id: int) -> int | None:
        """One ``LeaseKeepAlive`` exchange from a thread (the lease's keep-alive thread,
        :mod:`controller.cluster.lease`), on a synchronous channel of this client's own, made on
        first use: the TTL etcd answered (<= 0: the lease is gone), or None (no answer within
        ``rpc_timeout_s``, or the channel closed)."""
        with self._sync_lock:
            if self._sync is None:
                self._sync = sync_channel(self.settings)
            channel = self._sync
        try:
            replies = aetcd.rpc.LeaseStub(channel).LeaseKeepAlive(
                iter([aetcd.rpc.LeaseKeepAliveRequest(ID=lease_id)]),
                timeout=self.settings.rpc_timeout_s)
            for reply in replies:
                replies.cancel()
                return int(reply.TTL)
        except (grpc.RpcError, ValueError) as exc:   # ValueError: the channel was closed
            LOG.debug("keep-alive of lease %x failed: %s", lease_id, exc)
        return None

    async def close(self) -> None:
        with self._sync_lock:
            sync, self._sync = self._sync, None
        if sync is not None:
            sync.close()
        await super().close()

    async def connect(self) -> None:
        # aetcd 1.0's connect() with two changes: the channel (all members, optional TLS,
        # keep-alive), and the watch multiplexer (OrderedWatcher: a watch whose creation timed
        # out can't take another's place). It fills the same attributes aetcd's methods use
        # (pinned: aetcd==1.0.0).
        if self._connected.is_set():
            return
        if self._is_connecting:
            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        try:
            self._is_connecting = True
            s = self.settings
            if s.tls is None:
                self.channel = grpc.aio.insecure_channel(self._target,
                                                         options=channel_options(s))
            else:
                self.channel = grpc.aio.secure_channel(self._target, s.tls.credentials(),
                                                       options=channel_options(s))
            self.kvstub = aetcd.rpc.KVStub(self.channel)
            self.clusterstub = aetcd.rpc.ClusterStub(self.channel)
            self.leasestub = aetcd.rpc.LeaseStub(self.channel)
            self.maintenancestub = aetcd.rpc.MaintenanceStub(self.channel)
            self._watcher = OrderedWatcher(aetcd.rpc.WatchStub(self.channel),
                                           timeout=self._timeout, metadata=self.metadata)
            self._connected.set()
        finally:
            self._is_connecting = False


async def retrying(call: Callable[[], Awaitable[T]], *, deadline_s: float,
                   what: str = "etcd call", pause_s: float = 0.05) -> T:
    """Run ``call`` until it returns, retrying transient errors (:func:`is_transient`: a member
    died, a call timed out, quorum is lost) until ``deadline_s`` seconds have passed; then the
    last error is raised.

    Only for calls that are safe to repeat (reads, or writes whose effect the caller verifies).
    """
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while True:
        try:
            return await call()
        except (*TRANSIENT_ERRORS, aetcd.ClientError) as exc:
            if not is_transient(exc) or loop.time() + pause_s >= end:
                raise
            LOG.debug("%s failed (%s), retrying", what, exc)
            await asyncio.sleep(pause_s)
