"""A small HTTP/1.1 server on the controller's asyncio event loop, for the live view.

Standard library only (:func:`asyncio.start_server` streams): one coroutine per connection, no
thread. It serves one request per connection (every response says ``Connection: close``), or
one long response (a server-sent event stream, which the handler writes piece by piece).

What one client can make it hold (:class:`HTTPLimits`):

* connections: at most ``max_connections`` at once, TLS handshakes excepted; one more is
  answered ``503`` and closed at once;
* time: a TLS handshake must finish within ``read_timeout_s`` (asyncio's
  ``ssl_handshake_timeout``), the whole request (line, headers, body) must arrive within
  ``read_timeout_s`` of the connection (a client sending one byte a second gets ``408``), and
  every write must drain within ``write_timeout_s`` (a client that stops reading is closed);
* memory: the request line and headers at most ``max_header_bytes`` (``431``), at most
  :data:`MAX_HEADER_FIELDS` header fields, a body at most ``max_body_bytes`` (``413``), no
  chunked request bodies (``501``); what a response may queue is bounded by the transport's
  write buffer (asyncio's 64 KiB high-water mark) and the write timeout.

Parsing follows RFC 9112 (HTTP/1.1 message syntax) §2-3 and §6 for the subset used here:
request-line ``METHOD SP request-target SP HTTP-version``, field lines ``name: value``
(no whitespace before the colon, §5.1), ``Content-Length`` framing; a
``Transfer-Encoding`` request is refused rather than parsed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, unquote

LOG = logging.getLogger("aifabric.view")

#: header field lines a request may carry (the browser sends about 15)
MAX_HEADER_FIELDS = 64
#: headers every response carries: no caching of live data, no sniffing, no framing, no
#: referrer; scripts, styles and connections from this origin only (W3C CSP Level 3)
SECURITY_HEADERS: tuple[tuple[str, str], ...] = (
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; "
     "img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; "
     "frame-ancestors 'none'"),
)


@dataclass(frozen=True)
class HTTPLimits:
    """What one client may make the server hold (module docstring); defaults in brackets.

    ``max_connections`` [64] open connections; ``read_timeout_s`` [10] for the TLS handshake
    and for the whole request; ``write_timeout_s`` [10] for each write to drain;
    ``max_header_bytes`` [16 KiB] request line and headers; ``max_body_bytes`` [4 KiB].
    """

    max_connections: int = 64
    read_timeout_s: float = 10.0
    write_timeout_s: float = 10.0
    max_header_bytes: int = 16 * 1024
    max_body_bytes: int = 4 * 1024

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {self.max_connections}")
        if not (self.read_timeout_s > 0 and self.write_timeout_s > 0):
            raise ValueError("read_timeout_s and write_timeout_s must be positive")


class Throttled:
    """A warning a hostile client could repeat at will, logged at most once per ``every_s``
    with the count of those not logged in between (so it cannot flood the log)."""

    def __init__(self, logger: logging.Logger, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log = logger
        self.every_s = every_s
        self.clock = clock
        self._last = -float("inf")
        self.suppressed = 0

    def warning(self, msg: str, *args: object) -> None:
        now = self.clock()
        if now - self._last < self.every_s:
            self.suppressed += 1
            return
        more = f" ({self.suppressed} more like it not logged)" if self.suppressed else ""
        self.log.warning(msg + more, *args)
        self._last, self.suppressed = now, 0


class HTTPError(Exception):
    """A request answered with ``status`` and a one-line ``message`` (then closed)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Request:
    """One parsed request. ``path``: percent-decoded, starts with ``/``; ``query``: the last
    value of each name; ``headers``: lower-case names (repeated fields joined with ``, ``,
    ``cookie`` with ``; ``)."""

    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes = b""

    def cookie(self, name: str) -> str | None:
        """The value of cookie ``name`` (RFC 6265 §5.4 ``Cookie`` header), or None."""
        for part in self.headers.get("cookie", "").split(";"):
            k, sep, v = part.strip().partition("=")
            if sep and k == name:
                return v
        return None


def parse_head(head: bytes) -> tuple[str, str, dict[str, str], dict[str, str]]:
    """(method, path, query, headers) of a request head (up to, not including, the empty
    line). Raises :class:`HTTPError` 400/431/505."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[0].isupper():
        raise HTTPError(400, "malformed request line")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HTTPError(505, f"{version[:16]!r} is not HTTP/1.1")
    if not target.startswith("/"):
        raise HTTPError(400, "the request target must be an absolute path")
    if len(lines) - 1 > MAX_HEADER_FIELDS:
        raise HTTPError(431, f"more than {MAX_HEADER_FIELDS} header fields")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or " " in name:
            raise HTTPError(400, "malformed header field")
        key = name.lower()
        value = value.strip(" \t")
        if key in headers:
            value = headers[key] + ("; " if key == "cookie" else ", ") + value
        headers[key] = value
    raw_path, _, raw_query = target.partition("?")
    query = dict(parse_qsl(raw_query, keep_blank_values=True)) if raw_query else {}
    return method, unquote(raw_path), query, headers


async def read_request(reader: asyncio.StreamReader, limits: HTTPLimits) -> Request | None:
    """The next request from ``reader``; None when the client closed before sending a byte.
    The caller bounds the time (:class:`HTTPServer`). Raises :class:`HTTPError`."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise HTTPError(400, "the connection closed in the middle of the request") from None
    except asyncio.LimitOverrunError:
        raise HTTPError(431, f"request head over {limits.max_header_bytes} bytes") from None
    if len(head) > limits.max_header_bytes:
        raise HTTPError(431, f"request head over {limits.max_header_bytes} bytes")
    method, path, query, headers = parse_head(head[:-4])
    if "transfer-encoding" in headers:
        raise HTTPError(501, "chunked request bodies are not accepted")
    length_text = headers.get("content-length", "0")
    if not length_text.isdigit() or len(length_text) > 12:
        raise HTTPError(400, "malformed Content-Length")
    length = int(length_text)
    if length > limits.max_body_bytes:
        raise HTTPError(413, f"request body over {limits.max_body_bytes} bytes")
    try:
        body = await reader.readexactly(length) if length else b""
    except asyncio.IncompleteReadError:
        raise HTTPError(400, "the connection closed in the middle of the body") from None
    return Request(method, path, query, headers, body)


def render_response(status: int, body: bytes = b"", content_type: str | None = None,
                    headers: Iterable[tuple[str, str]] = (), *, length: bool = True) -> bytes:
    """The bytes of a response head (and ``body``): status line, :data:`SECURITY_HEADERS`,
    ``Connection: close``, ``Content-Length`` unless ``length`` is False (a stream)."""
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", "Connection: close"]
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    if length:
        lines.append(f"Content-Length: {len(body)}")
    lines += [f"{k}: {v}" for k, v in (*SECURITY_HEADERS, *headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Exchange:
    """The response side of one connection: :meth:`send` raw bytes (each write drains within
    ``write_timeout_s`` or raises TimeoutError), :meth:`respond` with a whole response, and
    :meth:`closed_by_peer` to learn that the client went away (a stream's reader)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 limits: HTTPLimits) -> None:
        self.reader = reader
        self.writer = writer
        self.limits = limits
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.tls = writer.get_extra_info("sslcontext") is not None

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await asyncio.wait_for(self.writer.drain(), self.limits.write_timeout_s)

    async def respond(self, status: int, body: bytes = b"", content_type: str | None = None,
                      headers: Iterable[tuple[str, str]] = ()) -> None:
        await self.send(render_response(status, body, content_type, headers))

    async def closed_by_peer(self) -> None:
        """Return once the client closed its side (or sent more than it should: also an end)."""
        with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
            await self.reader.read(1)


Handler = Callable[[Request, Exchange], Awaitable[None]]


def _error_body(status: int, message: str) -> bytes:
    return f"{status} {HTTPStatus(status).phrase}: {message}\n".encode()


class HTTPServer:
    """Serve ``handler`` on ``host:port`` (module docstring). ``ssl_context``: TLS (None: plain
    text; the caller decided it may). :attr:`active` counts open connections."""

    def __init__(self, handler: Handler, limits: HTTPLimits = HTTPLimits(),
                 ssl_context: ssl.SSLContext | None = None, *, name: str = "view",
                 logger: logging.Logger = LOG) -> None:
        self.handler = handler
        self.limits = limits
        self.ssl_context = ssl_context
        self.name = name
        self.log = logger
        self.active = 0
        self.refused = 0
        self._refused_log = Throttled(logger)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.port = 0

    async def start(self, host: str, port: int) -> int:
        """Listen; returns the port. Raises OSError (taken, bad address)."""
        self._server = await asyncio.start_server(
            self._connection, host, port, ssl=self.ssl_context,
            ssl_handshake_timeout=self.limits.read_timeout_s if self.ssl_context else None,
            limit=self.limits.max_header_bytes, reuse_address=True)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def close(self) -> None:
        """Stop listening and end every connection (streams included)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=2.0)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        ex = Exchange(reader, writer, self.limits)
        if self.active >= self.limits.max_connections:
            self.refused += 1
            self._refused_log.warning("[%s] refused %s: %d connections open (limit %d)",
                                      self.name, ex.peer, self.active,
                                      self.limits.max_connections)
            with contextlib.suppress(Exception):
                await ex.respond(503, _error_body(503, "too many connections"), "text/plain",
                                 (("Retry-After", "5"),))
            await self._close(writer)
            return
        task = asyncio.current_task()
        assert task is not None
        self.active += 1
        self._tasks.add(task)
        try:
            await self._serve(ex)
        except asyncio.CancelledError:
            pass
        finally:
            self.active -= 1
            self._tasks.discard(task)
            await self._close(writer)

    async def _serve(self, ex: Exchange) -> None:
        try:
            try:
                req = await asyncio.wait_for(read_request(ex.reader, self.limits),
                                             self.limits.read_timeout_s)
            except TimeoutError:
                raise HTTPError(408, f"no complete request within "
                                     f"{self.limits.read_timeout_s:g} s") from None
            if req is None:
                return
            await self.handler(req, ex)
        except HTTPError as exc:
            self.log.debug("[%s] %s: %d %s", self.name, ex.peer, exc.status, exc.message)
            with contextlib.suppress(ConnectionError, TimeoutError, ssl.SSLError, OSError):
                await ex.respond(exc.status, _error_body(exc.status, exc.message),
                                 "text/plain; charset=utf-8")
        except (ConnectionError, TimeoutError, ssl.SSLError, OSError) as exc:
            # a client that went away, or stopped reading for write_timeout_s
            self.log.debug("[%s] %s: connection ended: %s", self.name, ex.peer,
                           type(exc).__name__)

    @staticmethod
    async def _close(writer: asyncio.StreamWriter) -> None:
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 1.0)
