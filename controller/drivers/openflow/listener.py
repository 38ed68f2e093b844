"""The OpenFlow listening socket, bounded: a selector-based accept stage in one thread.

os-ken gives every accepted socket its own threads (receive, send, echo) at once, so idle or
hostile TCP clients cost threads for as long as they stay (500 idle connections left 1,000
threads behind). Here a connection stays in one :mod:`selectors` loop — no thread — until its
first 8 bytes are an OpenFlow ``OFPT_HELLO`` header (peeked, not read: os-ken reads the HELLO
itself, OpenFlow 1.3.5 §6.3.1); only then is it handed to os-ken. Bounds
(:class:`ListenerLimits`):

* ``hello_timeout_s``: a connection that has not sent a HELLO by then is closed;
* ``handshake_timeout_s``: a connection handed over that has not finished the handshake
  (features reply, port description: the driver calls :meth:`HelloGate.established`) by then
  is shut down;
* ``max_unfinished``: at most this many connections may be waiting for a HELLO or a handshake;
  beyond that, new ones are closed on accept (and counted).

**TLS** (``tls``: an ``ssl.SSLContext``; Open vSwitch ``ssl:`` targets): the accept stage also
does the TLS handshake, without a thread and within ``hello_timeout_s`` (a client that fails
it — no certificate, one of another CA, plain TCP — is closed and counted), then reads the first
8 decrypted bytes (a TLS socket cannot peek) and hands os-ken a
:class:`~.tls.TLSConnection` that returns them first.

The socket is bound before the controller is ready (``ready`` event unset): switches that
connect early are held — their HELLO waits in the socket — and handed over the moment the
runtime is ready, so a restarted controller is reachable as soon as it listens. The deadlines
of held connections start when the gate opens. ``SO_REUSEADDR`` lets a restarted controller
bind at once even while the old connections sit in TIME_WAIT.
"""

from __future__ import annotations

import logging
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LOG = logging.getLogger("aifabric.openflow.listener")
OFPT_HELLO = 0
MAX_OFP_VERSION = 0x06


@dataclass(frozen=True)
class ListenerLimits:
    """Bounds of the accept stage (module docstring); seconds and counts."""

    hello_timeout_s: float = 5.0
    handshake_timeout_s: float = 10.0
    max_unfinished: int = 64


@dataclass
class ListenerStats:
    """What the gate did since it started."""

    accepted: int = 0
    handed_over: int = 0
    refused_over_cap: int = 0
    closed_no_hello: int = 0
    closed_not_openflow: int = 0
    closed_no_handshake: int = 0
    closed_tls_failed: int = 0


def bind_listener(host: str, port: int, backlog: int = 128) -> socket.socket:
    """A listening TCP socket on ``host:port`` with ``SO_REUSEADDR`` (0: any free port).

    Raises
    ------
    OSError
        The address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class HelloGate:
    """The accept stage (module docstring).

    Parameters
    ----------
    sock : socket.socket
        A bound, listening socket (:func:`bind_listener`); the gate owns it from now on.
    handle : callable
        ``handle(sock, addr)`` takes over a connection whose HELLO arrived (os-ken's
        ``datapath_connection_factory``); called in a new thread from ``spawn``.
    spawn : callable
        ``spawn(fn, *args)`` starts ``fn`` in a thread (os-ken's ``hub.spawn``).
    limits : ListenerLimits
    ready : threading.Event, optional
        Connections are handed over only once it is set (None: at once).
    clock : callable
        Monotonic seconds.
    tls : ssl.SSLContext, optional
        Server-side TLS for every connection (module docstring); None: plain TCP.
    """

    def __init__(self, sock: socket.socket, handle: Callable[[Any, Any], Any],
                 spawn: Callable[..., Any], limits: ListenerLimits = ListenerLimits(),
                 ready: threading.Event | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 tls: ssl.SSLContext | None = None) -> None:
        self.sock = sock
        self.tls = tls
        self._tls_pending: dict[int, bytes | None] = {}  # fd -> None: handshaking; bytes: read
        self.handle = handle
        self.spawn = spawn
        self.limits = limits
        self.ready = ready
        self.clock = clock
        self.stats = ListenerStats()
        self._sel = selectors.DefaultSelector()
        self._waiting: dict[int, tuple[socket.socket, Any, float]] = {}  # fd -> sock, addr, due
        self._held: dict[int, tuple[Any, Any]] = {}  # HELLO seen, gate closed
        self._handed: dict[Any, tuple[Any, float]] = {}  # addr -> sock, due
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._opened_at: float | None = None
        self._last_cap_warning = -1e9

    # -- bookkeeping from the driver -----------------------------------------------------------
    def established(self, addr: Any) -> None:
        """The connection from ``addr`` finished its handshake."""
        with self._lock:
            self._handed.pop(addr, None)

    def closed(self, addr: Any) -> None:
        """The connection from ``addr`` is gone."""
        with self._lock:
            self._handed.pop(addr, None)

    def unfinished(self) -> int:
        with self._lock:
            return len(self._waiting) + len(self._held) + len(self._handed)

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    # -- the loop ------------------------------------------------------------------------------
    def serve_forever(self) -> None:
        self._sel.register(self.sock, selectors.EVENT_READ, None)
        try:
            while not self._closing.is_set():
                try:
                    events = self._sel.select(timeout=0.1)
                except OSError:
                    if self._closing.is_set():
                        return
                    raise
                now = self.clock()
                for key, _ in events:
                    if key.fileobj is self.sock:
                        self._accept(now)
                    else:
                        self._peek(key.fileobj, now)
                self._release_held(now)
                self._expire(now)
        finally:
            self._close_all()

    def _gate_open(self, now: float) -> bool:
        if self.ready is not None and not self.ready.is_set():
            return False
        if self._opened_at is None:
            self._opened_at = now
        return True

    def _accept(self, now: float) -> None:
        while True:
            try:
                conn, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            self.stats.accepted += 1
            if self.unfinished() >= self.limits.max_unfinished:
                self.stats.refused_over_cap += 1
                if now - self._last_cap_warning > 10.0:
                    self._last_cap_warning = now
                    LOG.warning("[listener] %d connections have not finished the OpenFlow "
                                "handshake (limit %d): closing new ones (%s, ...)",
                                self.unfinished(), self.limits.max_unfinished, addr)
                _close(conn)
                continue
            conn.setblocking(False)
            due = now + self.limits.hello_timeout_s
            fd = conn.fileno()
            if self.tls is not None:
                try:
                    conn = self.tls.wrap_socket(conn, server_side=True,
                                                do_handshake_on_connect=False)
                except (ssl.SSLError, OSError) as exc:
                    self.stats.closed_tls_failed += 1
                    LOG.info("[listener] %s: TLS refused (%s); closed", addr, exc)
                    _close(conn)
                    continue
                self._tls_pending[fd] = None
            with self._lock:
                self._waiting[fd] = (conn, addr, due)
            self._sel.register(conn, selectors.EVENT_READ, addr)

    def _peek(self, conn: Any, now: float) -> None:
        fd = conn.fileno()
        entry = self._waiting.get(fd)
        if entry is None:
            return
        _, addr, _ = entry
        if fd in self._tls_pending:
            head = self._tls_read(fd, conn)
            if head is None:
                return
        else:
            try:
                head = conn.recv(8, socket.MSG_PEEK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                head = b""
        if not head:
            self._drop(fd, "closed before HELLO", None)
            return
        if len(head) < 8:
            return
        if head[0] == 0 or head[0] > MAX_OFP_VERSION or head[1] != OFPT_HELLO:
            self.stats.closed_not_openflow += 1
            self._drop(fd, f"not an OpenFlow HELLO (first bytes {head[:8].hex()})",
                       logging.INFO)
            return
        self._sel.unregister(conn)
        if fd in self._tls_pending:
            from controller.drivers.openflow.tls import TLSConnection

            conn = TLSConnection(conn, self._tls_pending.pop(fd) or b"")
        with self._lock:
            del self._waiting[fd]
            self._held[fd] = (conn, addr)
        self._release_held(now)

    def _tls_read(self, fd: int, conn: ssl.SSLSocket) -> bytes | None:
        """Advance the TLS handshake, then read up to the first 8 bytes; the bytes so far
        (b"": closed or failed), or None while waiting for the peer."""
        if self._tls_pending[fd] is None:
            try:
                conn.do_handshake()
            except ssl.SSLWantReadError:
                self._sel.modify(conn, selectors.EVENT_READ, self._waiting[fd][1])
                return None
            except ssl.SSLWantWriteError:
                self._sel.modify(conn, selectors.EVENT_WRITE, self._waiting[fd][1])
                return None
            except (ssl.SSLError, OSError) as exc:
                self.stats.closed_tls_failed += 1
                LOG.info("[listener] %s: TLS handshake failed (%s); closed",
                         self._waiting[fd][1], getattr(exc, "reason", None) or exc)
                self._tls_pending.pop(fd, None)
                self._drop(fd, "TLS handshake failed", None)
                return None
            self._tls_pending[fd] = b""
            self._sel.modify(conn, selectors.EVENT_READ, self._waiting[fd][1])
        buf = self._tls_pending[fd] or b""
        while len(buf) < 8:
            try:
                chunk = conn.recv(8 - len(buf))
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except (ssl.SSLError, OSError):
                chunk = b""
            if not chunk:
                self._tls_pending.pop(fd, None)
                return b""
            buf += chunk
        self._tls_pending[fd] = buf
        return buf if len(buf) >= 8 else None

    def _release_held(self, now: float) -> None:
        if not self._held or not self._gate_open(now):
            return
        with self._lock:
            held, self._held = self._held, {}
        for conn, addr in held.values():
            conn.setblocking(True)  # a TLSConnection stays non-blocking inside
            with self._lock:
                self._handed[addr] = (conn, now + self.limits.handshake_timeout_s)
            self.stats.handed_over += 1
            self.spawn(self.handle, conn, addr)

    def _expire(self, now: float) -> None:
        opened = self._gate_open(now)
        start = self._opened_at if opened and self._opened_at is not None else None
        for fd, (_, _addr, due) in list(self._waiting.items()):
            if start is None:
                continue
            if now >= max(due, start + self.limits.hello_timeout_s):
                self.stats.closed_no_hello += 1
                self._drop(fd, f"no HELLO within {self.limits.hello_timeout_s:g} s", None)
        with self._lock:
            late = [(a, c) for a, (c, due) in self._handed.items() if now >= due]
            for a, _ in late:
                del self._handed[a]
        for addr, c in late:
            self.stats.closed_no_handshake += 1
            LOG.info("[listener] %s did not finish the OpenFlow handshake within %g s; closing",
                     addr, self.limits.handshake_timeout_s)
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _drop(self, fd: int, why: str, level: int | None) -> None:
        self._tls_pending.pop(fd, None)
        with self._lock:
            entry = self._waiting.pop(fd, None)
        if entry is None:
            return
        conn, addr, _ = entry
        try:
            self._sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        _close(conn)
        LOG.log(level if level is not None else logging.DEBUG, "[listener] %s: %s; closed",
                addr, why)

    def close(self) -> None:
        """Stop accepting, close the listening socket and every connection not handed over."""
        self._closing.set()
        try:
            self.sock.close()
        except OSError:
            pass

    def _close_all(self) -> None:
        with self._lock:
            waiting, held = list(self._waiting.values()), list(self._held.values())
            self._waiting.clear()
            self._held.clear()
        for conn, _, _ in waiting:
            _close(conn)
        for conn, _ in held:
            _close(conn)
        try:
            self._sel.close()
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass


def _close(conn: socket.socket) -> None:
    try:
        conn.close()
    except OSError:
        pass
