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
* ``max_unfinished``: at most this many connections may be waiting for a HELLO or a handshake.
  When they are that many, a new connection closes the oldest one *still waiting for its
  HELLO* (or its TLS handshake) of the source that holds the most such — sources of no known
  switch first — and takes its place: a client churning connections only ever evicts its own,
  and a switch connecting meanwhile is admitted (issue 23: 247k connects in 23 s kept a
  reconnecting switch out 20 s when new connections were refused at the cap). A connection
  whose HELLO already arrived is taken, not closed; one past its HELLO or with a verified TLS
  client certificate is never closed for another. Only when none can be closed is the new one
  refused (and counted);
* ``max_handshakes_per_source``: connections of one unknown source handed to os-ken (a thread
  each) at once; beyond, their HELLO waits in the accept stage without a thread.

**Known switches** take a fast path: a source from which a datapath of the fabric finished the
handshake (the driver says so: :meth:`HelloGate.established` with ``known=True``) is evicted
from last and has no handshake limit; over TLS, a connection whose client certificate verified
(a switch of our CA) is never evicted and has no handshake limit either.

**TLS** (``tls``: an ``ssl.SSLContext``; Open vSwitch ``ssl:`` targets): the accept stage also
does the TLS handshake, without a thread and within ``hello_timeout_s`` (a client that fails
it — no certificate, one of another CA, plain TCP — is closed and counted), then reads the first
8 decrypted bytes (a TLS socket cannot peek) and hands os-ken a
:class:`~.tls.TLSConnection` that returns them first.

**Our HELLO** (``greeting``): the gate sends it on every connection the moment it is
established (accepted; over TLS, its handshake done), before the switch's HELLO is read
(OpenFlow 1.3.5 §6.3.1: each side sends its HELLO at once), so the switch's version
negotiation finishes without the event loop. Open vSwitch drops a connection whose peer's
HELLO has not come within its backoff (1 s at first) and backs off further: when the HELLO
waited for the loop, a controller restarted at k = 16 (its loop busy building the plan for
3 s) lost 131 of 320 switches to the back-off, 8 s each. A connection the greeting cannot be
sent on is closed; every connection handed over has been greeted.

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


#: connections accepted per round of the selector loop before it reads the ones it holds
ACCEPT_BATCH = 64
#: known sources remembered (the oldest forgotten first)
MAX_KNOWN_SOURCES = 4096


@dataclass(frozen=True)
class ListenerLimits:
    """Bounds of the accept stage (module docstring); seconds and counts."""

    hello_timeout_s: float = 5.0
    handshake_timeout_s: float = 10.0
    max_unfinished: int = 64
    max_handshakes_per_source: int = 8


@dataclass
class ListenerStats:
    """What the gate did since it started."""

    accepted: int = 0
    handed_over: int = 0
    refused_over_cap: int = 0
    evicted_waiting: int = 0   # closed before its HELLO to admit a newer connection
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


def _source(addr: Any) -> str:
    """The source of a connection: the host of its peer address."""
    return str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)


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
    greeting : bytes
        Our HELLO, sent on every connection once established (module docstring); b"": none.
    """

    def __init__(self, sock: socket.socket, handle: Callable[[Any, Any], Any],
                 spawn: Callable[..., Any], limits: ListenerLimits = ListenerLimits(),
                 ready: threading.Event | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 tls: ssl.SSLContext | None = None, greeting: bytes = b"") -> None:
        self.sock = sock
        self.tls = tls
        self.greeting = greeting
        self._tls_pending: dict[int, bytes | None] = {}  # fd -> None: handshaking; bytes: read
        self._tls_active: set[int] = set()   # handshakes that have received bytes
        self.handle = handle
        self.spawn = spawn
        self.limits = limits
        self.ready = ready
        self.clock = clock
        self.stats = ListenerStats()
        self._sel = selectors.DefaultSelector()
        self._waiting: dict[int, tuple[Any, Any, float]] = {}  # fd -> sock, addr, due
        # HELLO seen, not handed over yet (gate closed, or its source's handshakes all busy)
        self._held: dict[int, tuple[Any, Any, float, bool]] = {}  # fd -> sock, addr, due, proven
        self._handed: dict[Any, tuple[Any, float, bool]] = {}  # addr -> sock, due, fast path
        self._known: dict[str, None] = {}   # sources of known switches, oldest first
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._opened_at: float | None = None
        self._last_cap_warning = -1e9

    # -- bookkeeping from the driver -----------------------------------------------------------
    def established(self, addr: Any, known: bool = False) -> None:
        """The connection from ``addr`` finished its handshake; ``known``: it is a datapath of
        the fabric (its source takes the fast path from now on)."""
        with self._lock:
            self._handed.pop(addr, None)
            if known:
                src = _source(addr)
                self._known.pop(src, None)
                self._known[src] = None
                while len(self._known) > MAX_KNOWN_SOURCES:
                    del self._known[next(iter(self._known))]

    def closed(self, addr: Any) -> None:
        """The connection from ``addr`` is gone."""
        with self._lock:
            self._handed.pop(addr, None)

    def unfinished(self) -> int:
        with self._lock:
            return len(self._waiting) + len(self._held) + len(self._handed)

    def known_source(self, addr: Any) -> bool:
        """True when a datapath of the fabric finished its handshake from ``addr``'s host."""
        with self._lock:
            return _source(addr) in self._known

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
        for _ in range(ACCEPT_BATCH):   # then the loop reads what it holds before more
            try:
                conn, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            self.stats.accepted += 1
            if self.unfinished() >= self.limits.max_unfinished and not self._evict_one(now):
                self.stats.refused_over_cap += 1
                if now - self._last_cap_warning > 10.0:
                    self._last_cap_warning = now
                    LOG.warning("[listener] %d connections have not finished the OpenFlow "
                                "handshake (limit %d), none still waiting for its HELLO: "
                                "closing new ones (%s, ...)", self.unfinished(),
                                self.limits.max_unfinished, addr)
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
            if self.tls is None and not self._greet(fd, conn):
                continue
            self._peek(conn, now)   # its HELLO (or ClientHello) is often there already

    def _greet(self, fd: int, conn: Any) -> bool:
        """Send our HELLO on a connection just established (module docstring); False (and
        the connection closed) when it cannot be sent whole."""
        if not self.greeting:
            return True
        try:
            sent = conn.send(self.greeting)
        except (OSError, ssl.SSLError):
            sent = 0
        if sent == len(self.greeting):
            return True
        self._drop(fd, "our HELLO could not be sent", None)
        return False

    def _progress(self, fd: int) -> int:
        """How far a waiting connection got: 0 silent (nothing ever received), 1 on its way
        (part of a HELLO, or a TLS handshake that has received its ClientHello), 2 its HELLO
        is buffered (take it), 3 TLS-verified (never evicted)."""
        if fd in self._tls_pending:
            if self._tls_pending[fd] is not None:
                return 3
            return 1 if fd in self._tls_active or _raw_pending(self._waiting[fd][0]) else 0
        try:
            head = self._waiting[fd][0].recv(8, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:
            return 0   # broken: closing it costs nothing
        return 2 if len(head) >= 8 else 1 if head else 0

    def _evict_one(self, now: float) -> bool:
        """Close the oldest silent waiting connection of the source holding the most waiting
        connections (sources of no known switch first), else the oldest silent one of any,
        else one on its way; a connection whose HELLO arrived is taken on the way. True when
        one was closed. Linear in the connections held (at most ``max_unfinished``):
        ``_waiting`` is in accept order."""
        counts: dict[str, int] = {}
        for _, addr, _ in self._waiting.values():
            src = _source(addr)
            counts[src] = counts.get(src, 0) + 1
        if not counts:
            return False
        known = self._known
        top = max(counts, key=lambda src: (src not in known, counts[src]))
        entries = list(self._waiting.items())
        ordered = ([e for e in entries if _source(e[1][1]) == top]
                   + [e for e in entries if _source(e[1][1]) != top])
        for most in (0, 1):   # silent ones first, then those on their way
            for fd, (conn, _addr, _) in ordered:
                if fd not in self._waiting:
                    continue
                got = self._progress(fd)
                if got <= most:
                    self.stats.evicted_waiting += 1
                    self._drop(fd, "closed before its HELLO to admit a newer connection "
                               f"(limit {self.limits.max_unfinished})", None)
                    return True
                if got == 2:   # its HELLO is there: take it, look further
                    self._peek(conn, now)
        return False

    def _peek(self, conn: Any, now: float) -> None:
        fd = conn.fileno()
        entry = self._waiting.get(fd)
        if entry is None:
            return
        _, addr, due = entry
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
        proven = fd in self._tls_pending   # a client certificate of our CA verified
        self._tls_active.discard(fd)
        if proven:
            from controller.drivers.openflow.tls import TLSConnection

            conn = TLSConnection(conn, self._tls_pending.pop(fd) or b"")
        with self._lock:
            del self._waiting[fd]
            self._held[fd] = (conn, addr, due, proven)
        self._release_held(now)

    def _tls_read(self, fd: int, conn: ssl.SSLSocket) -> bytes | None:
        """Advance the TLS handshake, then read up to the first 8 bytes; the bytes so far
        (b"": closed or failed), or None while waiting for the peer."""
        if self._tls_pending[fd] is None:
            if fd not in self._tls_active and _raw_pending(conn):
                self._tls_active.add(fd)   # its ClientHello (or more) arrived
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
            if not self._greet(fd, conn):
                return None
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
        """Hand the held connections over (the gate open), an unknown source's only while it
        has fewer than ``max_handshakes_per_source`` handshakes in os-ken."""
        if not self._held or not self._gate_open(now):
            return
        most = self.limits.max_handshakes_per_source
        go: list[tuple[Any, Any, bool]] = []
        with self._lock:
            busy: dict[str, int] = {}
            for a, (_, _, fast) in self._handed.items():
                if not fast:
                    busy[_source(a)] = busy.get(_source(a), 0) + 1
            for fd, (conn, addr, _, proven) in list(self._held.items()):
                src = _source(addr)
                fast = proven or src in self._known
                if not fast and busy.get(src, 0) >= most:
                    continue
                if not fast:
                    busy[src] = busy.get(src, 0) + 1
                del self._held[fd]
                self._handed[addr] = (conn, now + self.limits.handshake_timeout_s, fast)
                go.append((conn, addr, fast))
        for conn, addr, _ in go:
            conn.setblocking(True)  # a TLSConnection stays non-blocking inside
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
            stale = [(fd, c, a) for fd, (c, a, due, _) in self._held.items()
                     if start is not None and now >= max(due, start + self.limits.hello_timeout_s)]
            for fd, _, _ in stale:
                del self._held[fd]
            late = [(a, c) for a, (c, due, _) in self._handed.items() if now >= due]
            for a, _ in late:
                del self._handed[a]
        for _, c, a in stale:   # waited for a handshake slot of its source past the deadline
            self.stats.closed_no_handshake += 1
            LOG.info("[listener] %s: no handshake slot of its source within %g s; closing", a,
                     self.limits.hello_timeout_s)
            _close(c)
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
        self._tls_active.discard(fd)
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
            waiting = [c for c, _, _ in self._waiting.values()]
            held = [c for c, _, _, _ in self._held.values()]
            self._waiting.clear()
            self._held.clear()
        for conn in (*waiting, *held):
            _close(conn)
        try:
            self._sel.close()
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass


def _raw_pending(conn: Any) -> bool:
    """Bytes wait on the TCP connection under a TLS socket (peeked below the TLS layer)."""
    try:
        return bool(socket.socket.recv(conn, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except (BlockingIOError, InterruptedError):
        return False
    except (OSError, ValueError):
        return False


def _close(conn: socket.socket) -> None:
    try:
        conn.close()
    except OSError:
        pass
