"""The Prometheus endpoint: prometheus_client's registry served on 127.0.0.1 by default, over
HTTPS and with HTTP basic authentication (RFC 7617) when asked.

Binding anything but a loopback address without TLS follows the plain-text rule
(:func:`controller.security.transport.require_tls`: refused unless ``insecure=True``, then
logged). Basic auth without TLS off loopback is refused the same way (the password would cross
the network in clear). The password is kept as a SHA-256 digest and compared in constant time.

Bounded (:class:`MetricsLimits`; issue 23: 300 idle connections held 316 threads of
``http.server``'s thread-per-connection server until their clients closed, the TLS handshake in
each): connections live on the controller's one asyncio loop, whatever their number; the TLS
handshake (``handshake_timeout_s``) and the request head (``read_timeout_s``,
``max_request_bytes``) are awaited there, not in a thread; at most ``max_connections`` are open
and a new one beyond closes the oldest that has not sent a whole request (an idle client never
locks Prometheus out); the exposition text is rendered in an executor the process gives
(``workers`` threads). One
request per connection (HTTP/1.0 style, ``Connection: close``), ``GET`` or ``HEAD``, any path,
``name[]`` query parameters and gzip as prometheus_client's own server
(:func:`prometheus_client.exposition.choose_encoder`).
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import hmac
import logging
import socket
import ssl
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import Collector

from controller.security.transport import LOG, TLSFiles, is_loopback, require_tls

DEFAULT_HOST = "127.0.0.1"


@dataclass(frozen=True)
class BasicAuth:
    """One user and the SHA-256 of their password (:meth:`from_password` makes it)."""

    username: str
    password_sha256: bytes

    @classmethod
    def from_password(cls, username: str, password: str) -> BasicAuth:
        if not username or ":" in username:
            raise ValueError("basic-auth user name must be non-empty and without ':'")
        if len(password) < 12:
            raise ValueError("basic-auth password must have at least 12 characters")
        return cls(username, hashlib.sha256(password.encode()).digest())

    def check(self, header: str | None) -> bool:
        """True when ``header`` (the Authorization header) carries this user and password."""
        if not header or not header.lower().startswith("basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        ok_user = hmac.compare_digest(user.encode(), self.username.encode())
        ok_pw = hmac.compare_digest(hashlib.sha256(password.encode()).digest(), self.password_sha256)
        return ok_user and ok_pw


@dataclass(frozen=True)
class MetricsLimits:
    """Bounds of the endpoint (module docstring; defaults in brackets): connections open at
    once [64], seconds for the TLS handshake [5], for the request head [10] and for writing the
    answer [30], bytes of the request head [8192], threads rendering the registry [2]."""

    max_connections: int = 64
    handshake_timeout_s: float = 5.0
    read_timeout_s: float = 10.0
    write_timeout_s: float = 30.0
    max_request_bytes: int = 8192
    workers: int = 2

    def __post_init__(self) -> None:
        for name in ("max_connections", "handshake_timeout_s", "read_timeout_s",
                     "write_timeout_s", "max_request_bytes", "workers"):
            if not getattr(self, name) > 0:
                raise ValueError(f"MetricsLimits.{name} must be positive")


DEFAULT_METRICS_LIMITS = MetricsLimits()


@dataclass
class MetricsStats:
    """What the endpoint did since it started."""

    accepted: int = 0
    answered: int = 0
    evicted_idle: int = 0      # closed to make room for a new connection
    refused_full: int = 0      # closed on accept: every open one had sent its request
    timed_out: int = 0         # no TLS handshake / request head / drain in time
    failed: int = 0            # TLS refused, bad request, closed early


class _Connection(asyncio.Protocol):
    """One connection: admitted at accept (counted from the TCP connection on, handshake
    included), TLS started with :meth:`asyncio.loop.start_tls` (reading paused until then, so
    no byte of the ClientHello is read in plain), the request head gathered with a deadline,
    the answer rendered by the pool, written, closed."""

    def __init__(self, server: MetricsServer) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.opened_s = time.monotonic()
        self.requested = False      # its whole request head arrived: it is being answered
        self.closed = False
        self.buf = bytearray()
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._respond_task: asyncio.Task[None] | None = None
        # set once self.transport is the one to answer on (the TLS one, after the handshake:
        # the request may be read before the handshake's coroutine resumes)
        self._ready = asyncio.Event()

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.transport is not None:
            return   # start_tls does not call it again; no second admission in any case
        assert isinstance(transport, asyncio.Transport)   # a TCP connection
        self.transport = transport
        srv = self.server
        srv.stats.accepted += 1
        if not srv._admit(self):
            self.closed = True
            transport.abort()
            return
        if srv.tls is not None:
            transport.pause_reading()   # start_tls resumes it under the TLS protocol
            self._task = self.loop.create_task(self._handshake())
        else:
            self._ready.set()
            self._await_request()

    def data_received(self, data: bytes) -> None:
        if self.requested or self.closed:
            return
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        most = self.server.limits.max_request_bytes
        if (end < 0 and len(self.buf) > most) or end + 4 > most:
            self._give_up("failed")
            return
        if end < 0:
            return
        self.requested = True
        self._cancel_timer()
        self._respond_task = self.loop.create_task(self._respond(bytes(self.buf[:end + 4])))

    def eof_received(self) -> bool | None:
        if not self.requested:
            self._give_up("failed")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._cancel_timer()
        for task in (self._task, self._respond_task):
            if task is not None and not task.done():
                task.cancel()
        self.server._conns.pop(id(self), None)

    # -- the steps ---------------------------------------------------------------------------
    async def _handshake(self) -> None:
        srv, lim = self.server, self.server.limits
        assert srv.tls is not None and self.transport is not None
        try:
            # our deadline first (asyncio's own, later, is a backstop)
            tls = await asyncio.wait_for(self.loop.start_tls(
                self.transport, self, srv.tls, server_side=True,
                ssl_handshake_timeout=lim.handshake_timeout_s + 1.0), lim.handshake_timeout_s)
        except TimeoutError:
            self._give_up("timed_out")
            return
        except (ConnectionError, ssl.SSLError, OSError) as exc:
            LOG.debug("metrics: TLS handshake failed: %r", exc)
            self._give_up("failed")
            return
        if tls is None or self.closed:
            return
        self.transport = tls
        self._ready.set()
        if not self.requested:
            self._await_request()

    def _await_request(self) -> None:
        self._timer = self.loop.call_later(self.server.limits.read_timeout_s, self._give_up,
                                           "timed_out")

    async def _respond(self, head: bytes) -> None:
        srv = self.server
        status, headers, body = await srv._answer(head)
        await self._ready.wait()
        t = self.transport
        if self.closed or t is None:
            return
        t.write(_response(status, headers, body))
        srv.stats.answered += 1
        # a client that does not read its answer is cut after write_timeout_s
        self._timer = self.loop.call_later(srv.limits.write_timeout_s, self._give_up,
                                           "timed_out")
        t.close()   # once the buffered answer is sent

    def _give_up(self, why: str) -> None:
        if self.closed:
            return
        setattr(self.server.stats, why, getattr(self.server.stats, why) + 1)
        self.abort()

    def abort(self) -> None:
        self.closed = True
        self._cancel_timer()
        self.server._conns.pop(id(self), None)
        if self.transport is not None:
            self.transport.abort()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class MetricsServer:
    """An endpoint (module docstring) on the event loop that calls :meth:`listen` (the
    controller's one loop): ``url``, ``host``, ``port``, ``stats``, ``open_connections()`` and
    :meth:`aclose`. Rendering runs in ``render`` (an executor its owner made: the process edge
    creates threads, this module none)."""

    def __init__(self, registry: Collector, *, tls: ssl.SSLContext | None,
                 basic_auth: BasicAuth | None, limits: MetricsLimits,
                 render: Executor) -> None:
        self.registry = registry
        self.tls = tls
        self.auth = basic_auth
        self.limits = limits
        self.stats = MetricsStats()
        self._conns: dict[int, _Connection] = {}
        self._pool = render
        self._server: asyncio.Server | None = None
        self.host, self.port, self.url = "", 0, ""

    async def listen(self, host: str, port: int) -> MetricsServer:
        """Bind ``host:port`` (0: a free port) on the running loop. Raises OSError."""
        self._server = await self._listen(host, port)
        sockname = self._server.sockets[0].getsockname()
        self.host, self.port = str(sockname[0]), int(sockname[1])
        scheme = "https" if self.tls is not None else "http"
        shown = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"{scheme}://{shown}:{self.port}/metrics"
        return self

    async def _listen(self, host: str, port: int) -> asyncio.Server:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return await asyncio.get_running_loop().create_server(
            lambda: _Connection(self), host, port, family=family, reuse_address=True,
            backlog=128)

    def open_connections(self) -> int:
        """Connections open now (any state)."""
        return len(self._conns)

    # -- admission and answers -----------------------------------------------------------------
    def _admit(self, conn: _Connection) -> bool:
        """Room for ``conn``: under ``max_connections``, or by closing the oldest connection
        that has not sent its whole request (False: every open one is being answered)."""
        if len(self._conns) >= self.limits.max_connections:
            idle = [c for c in self._conns.values() if not c.requested]
            if not idle:
                self.stats.refused_full += 1
                return False
            min(idle, key=lambda c: c.opened_s).abort()
            self.stats.evicted_idle += 1
        self._conns[id(conn)] = conn
        return True

    async def _answer(self, head: bytes) -> tuple[str, list[tuple[str, str]], bytes]:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return "400 Bad Request", [], b""
        method, target = parts[0], parts[1]
        hdrs: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                hdrs[name.strip().lower()] = value.strip()
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", [("Allow", "GET, HEAD")], b""
        if self.auth is not None and not self.auth.check(hdrs.get("authorization")):
            return "401 Unauthorized", [("WWW-Authenticate", 'Basic realm="aifabric metrics"')], b""
        params = parse_qs(urlsplit(target).query)
        status, headers, body = await asyncio.get_running_loop().run_in_executor(
            self._pool, _render, self.registry, hdrs.get("accept", ""),
            hdrs.get("accept-encoding", ""), params)
        return status, headers, b"" if method == "HEAD" else body

    # -- stopping ------------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Stop listening and close every connection (the render executor is its owner's)."""
        if self._server is None:
            return
        self._server.close()
        for c in list(self._conns.values()):
            c.abort()
        await self._server.wait_closed()
        self._server = None



def _render(registry: Collector, accept: str, accept_encoding: str,
            params: dict[str, list[str]]) -> tuple[str, list[tuple[str, str]], bytes]:
    """In a worker thread: the exposition of ``registry`` as prometheus_client's own server
    makes it (format by ``Accept``, ``name[]`` filters, gzip)."""
    encoder, content_type = choose_encoder(accept)
    if "name[]" in params and isinstance(registry, CollectorRegistry):
        registry = registry.restricted_registry(params["name[]"])
    output = encoder(registry)
    headers = [("Content-Type", content_type)]
    if gzip_accepted(accept_encoding):
        output = gzip.compress(output)
        headers.append(("Content-Encoding", "gzip"))
    return "200 OK", headers, output


def _response(status: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    lines = [f"HTTP/1.0 {status}", *(f"{k}: {v}" for k, v in headers),
             f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body


async def serve_metrics(registry: Collector = REGISTRY, *, render: Executor,
                        host: str = DEFAULT_HOST, port: int = 0, tls: TLSFiles | None = None,
                        basic_auth: BasicAuth | None = None, insecure: bool = False,
                        logger: logging.Logger = LOG,
                        limits: MetricsLimits = DEFAULT_METRICS_LIMITS) -> MetricsServer:
    """Serve ``registry`` at ``/metrics`` (any path answers, as prometheus_client's own server)
    on the running loop, rendering in ``render``.

    ``tls``: the server's certificate and key (``tls.ca`` set → clients must present a
    certificate signed by it). ``basic_auth``: answer 401 to requests without these credentials.
    ``limits``: :class:`MetricsLimits`. Raises InsecureChannelRefused (see the module
    docstring), OSError when the port is taken.
    """
    if not is_loopback(host):
        require_tls(f"metrics endpoint on {host}:{port}", tls, insecure=insecure, logger=logger)
    ctx = None
    if tls is not None:
        if tls.cert is None or tls.key is None:
            raise ValueError("the metrics endpoint over TLS needs a certificate and its key")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(str(tls.cert), str(tls.key))
        if tls.ca is not None:
            ctx.load_verify_locations(str(tls.ca))
            ctx.verify_mode = ssl.CERT_REQUIRED
    srv = MetricsServer(registry, tls=ctx, basic_auth=basic_auth, limits=limits, render=render)
    return await srv.listen(host, port)
