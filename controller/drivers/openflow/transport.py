"""OpenFlow connections on the runtime's event loop: no thread per switch.

os-ken gave every connection a receive thread and a send thread (two per switch: 649 threads
for a k = 16 fat-tree) and parsed every message into objects in them; here every connection is
a non-blocking socket watched by the one asyncio loop the runtime runs on (``add_reader`` /
``add_writer``), plain or TLS (an ``ssl.SSLSocket`` whose handshake the accept stage did,
:mod:`.listener`), and the thread count does not depend on the number of switches. os-ken is
still the message codec: its parser reads what the driver consumes as objects, except flow
statistics on OpenFlow 1.3, which are read straight from the bytes
(:meth:`~.dialect.OF13.wire_flow_stats`: a switch's whole read-back, ~1,000 entries at
k = 16, in milliseconds).

A connection (:class:`WireConnection`, the driver's :class:`~.driver.Connection`):

1. sends HELLO with the highest version the driver speaks (1.5) and no version bitmap (or
   the accept stage sent it already: :attr:`Transport.greeted`), and
   negotiates on the switch's HELLO as os-ken does (OpenFlow 1.3.5 §6.3.1: with the switch's
   version bitmap, the highest version both speak; without, the smaller of the two versions,
   which must be one the driver speaks) — a failure is an ``OFPET_HELLO_FAILED`` error and
   the connection closes;
2. asks for the switch's features (its datapath id) and its port description (OpenFlow 1.3+
   ``OFPMP_PORT_DESC``), then is handed to the driver (:meth:`~.driver.OpenFlowDriver.
   on_up`) and marked established at the accept stage (which closes it if this does not
   happen within its handshake deadline);
3. from then on answers echo requests itself and hands every other message to the driver
   (:meth:`~.driver.OpenFlowDriver.on_message`), in the order it arrived; a message os-ken
   cannot parse ends this connection only.

Writes never block the loop: what the socket does not take is kept, in order, and written
when it becomes writable.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import struct
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

from os_ken.ofproto import ofproto_parser

from controller.drivers.openflow.dialect import DIALECTS

LOG = logging.getLogger("aifabric.openflow")

OFPT_HELLO, OFPT_ERROR, OFPT_ECHO_REQUEST, OFPT_ECHO_REPLY = 0, 1, 2, 3
OFPT_FEATURES_REPLY, OFPT_PORT_STATUS, OFPT_MULTIPART_REPLY = 6, 12, 19
OFPHET_VERSIONBITMAP = 1
OFPET_HELLO_FAILED, OFPHFC_INCOMPATIBLE = 0, 0
OFPMP_FLOW, OFPMP_PORT_DESC = 1, 13
OFPMPF_REPLY_MORE = 1
OFPPR_DELETE = 1
OFPP_MAX = 0xFFFFFF00
#: bytes read per call, and written per call (a TLS record is at most 16 KiB)
READ_CHUNK = 256 * 1024
WRITE_CHUNK = 256 * 1024
_HEADER = struct.Struct("!BBHI")


def _negotiate(frame: bytes, ours: Sequence[int]) -> tuple[int | None, str]:
    """(version, "") agreed from the switch's HELLO ``frame`` (module docstring), or (None,
    why)."""
    version = frame[0]
    supported = set(ours)
    switch_versions: set[int] = set()
    off = 8
    while off + 4 <= len(frame):
        etype, elen = struct.unpack_from("!HH", frame, off)
        if elen < 4:
            break
        if etype == OFPHET_VERSIONBITMAP:
            for i in range((elen - 4) // 4):
                (bits,) = struct.unpack_from("!I", frame, off + 4 + 4 * i)
                switch_versions |= {32 * i + b for b in range(32) if bits >> b & 1}
        off += (elen + 7) // 8 * 8
    if switch_versions:
        usable = switch_versions & supported
        negotiated = {v for v in switch_versions if v <= max(supported)}
        if not usable or (negotiated and max(negotiated) != max(usable)):
            return None, (f"no compatible version: the switch speaks {sorted(switch_versions)},"
                          f" the controller {sorted(supported)}")
        return max(usable), ""
    usable = {v for v in supported if v <= version}
    if not usable or max(usable) != min(version, max(supported)):
        return None, (f"unsupported version {version:#x}: the controller speaks "
                      f"{sorted(supported)} (set the switch's protocols to one of them)")
    return max(usable), ""


class WireConnection:
    """One switch connection on the loop (module docstring; the driver's ``Connection``)."""

    wire_only = True

    def __init__(self, transport: Transport, sock: Any, addr: Any, prefix: bytes) -> None:
        self.transport = transport
        self.sock = sock
        self.addr = addr
        host, port = addr[:2]
        self.address = f"{host}:{port}"
        self.fd = sock.fileno()
        self.tls = isinstance(sock, ssl.SSLSocket)
        self.dpid = 0
        self.version = 0
        self.state = "hello"
        self._ports: set[int] = set()
        self._rbuf = bytearray(prefix)
        self._wbuf: deque[memoryview] = deque()
        self._writing = False
        self._closed = False
        self._xid = 1

    # -- the driver's Connection ---------------------------------------------------------------
    def ports(self) -> frozenset[int] | None:
        return frozenset(self._ports) if self._ports else None

    def send(self, data: bytes, msgs: Sequence[Any] = ()) -> None:
        """Queue ``data`` (whole messages) for the switch; never blocks (module docstring)."""
        if self._closed or not data:
            return
        if not self.transport.on_loop():
            self.transport.loop.call_soon_threadsafe(self.send, data, msgs)
            return
        self._wbuf.append(memoryview(data))
        if not self._writing:
            self._flush()

    def close(self) -> None:
        if not self.transport.on_loop():
            self.transport.loop.call_soon_threadsafe(self.close)
            return
        self._end("closed by the controller")

    # -- reading -----------------------------------------------------------------------------------
    def _readable(self) -> None:
        """Read what the socket has (a TLS socket: until OpenSSL has nothing buffered either),
        then handle every whole message."""
        eof = False
        while True:
            try:
                chunk = self.sock.recv(READ_CHUNK)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
                break
            except ssl.SSLWantWriteError:
                break  # renegotiation: the next readable event retries
            except (OSError, ssl.SSLError) as exc:
                self._frames()
                self._end(f"read failed: {exc}")
                return
            if not chunk:
                eof = True
                break
            self._rbuf += chunk
            if not self.tls and len(chunk) < READ_CHUNK:
                break
        self._frames()
        if eof:
            self._end("connection closed")

    def _frames(self) -> None:
        buf = self._rbuf
        off, n = 0, len(buf)
        while not self._closed and n - off >= 8:
            length = (buf[off + 2] << 8) | buf[off + 3]
            if length < 8:
                self._end(f"malformed message (length {length})")
                return
            if n - off < length:
                break
            frame = bytes(buf[off:off + length])
            off += length
            try:
                self._message(frame)
            except Exception:  # noqa: BLE001 - one bad message ends this connection only
                LOG.exception("[dpid=%#x] message (type %d) not understood; closing the "
                              "connection from %s", self.dpid, frame[1], self.address)
                self._end("message not understood")
                return
        if off:
            del buf[:off]

    def _message(self, frame: bytes) -> None:
        version, mtype, _, xid = _HEADER.unpack_from(frame)
        if mtype == OFPT_ECHO_REQUEST:
            self._raw(_HEADER.pack(version, OFPT_ECHO_REPLY, len(frame), xid) + frame[8:])
            return
        if mtype == OFPT_ECHO_REPLY:
            return
        if self.state == "main":
            self._main(frame, version, mtype, xid)
            return
        if self.state == "hello":
            if mtype != OFPT_HELLO:
                self._end(f"expected HELLO, got message type {mtype}")
                return
            agreed, why = _negotiate(frame, self.transport.versions)
            if agreed is None:
                LOG.error("[listener] %s: %s; closing", self.address, why)
                self._raw(_HEADER.pack(frame[0], OFPT_ERROR, 12 + len(why), 0)
                          + struct.pack("!HH", OFPET_HELLO_FAILED, OFPHFC_INCOMPATIBLE)
                          + why.encode())
                self._end(why, flush=True)
                return
            self.version = agreed
            self.state = "features"
            d = DIALECTS[agreed]
            self._request(d.parser.OFPFeaturesRequest(d.desc))
            return
        msg = ofproto_parser.msg(DIALECTS[self.version].desc, version, mtype, len(frame), xid,
                                 frame)
        name = type(msg).__name__
        if name == "OFPErrorMsg":
            LOG.error("[listener] %s: error during the handshake: type %d code %d; closing",
                      self.address, msg.type, msg.code)
            self._end("error during the handshake")
        elif self.state == "features" and mtype == OFPT_FEATURES_REPLY:
            self.dpid = int(msg.datapath_id)
            self.state = "ports"
            d = DIALECTS[self.version]
            self._request(d.parser.OFPPortDescStatsRequest(d.desc, 0))
        elif self.state == "ports" and name == "OFPPortDescStatsReply":
            self._ports |= {p.port_no for p in msg.body if p.port_no <= OFPP_MAX}
            if not msg.flags & OFPMPF_REPLY_MORE:
                self.state = "main"
                self.transport.established(self)
        # anything else before the handshake ends is dropped (as os-ken did)

    def _main(self, frame: bytes, version: int, mtype: int, xid: int) -> None:
        d = DIALECTS[self.version]
        if mtype == OFPT_MULTIPART_REPLY and self.version in (4, 6) and \
                struct.unpack_from("!H", frame, 8)[0] == OFPMP_FLOW:
            # 1.3's OFPMP_FLOW and 1.5's OFPMP_FLOW_DESC (both 1): the read-back
            msg: Any = d.wire_flow_stats(xid, frame)  # type: ignore[attr-defined]
        else:
            msg = ofproto_parser.msg(d.desc, version, mtype, len(frame), xid, frame)
            if mtype == OFPT_PORT_STATUS:
                no = msg.desc.port_no
                if msg.reason == OFPPR_DELETE:
                    self._ports.discard(no)
                elif no <= OFPP_MAX:
                    self._ports.add(no)
        self.transport.driver.on_message(self, msg)

    # -- writing -----------------------------------------------------------------------------------
    def _request(self, msg: Any) -> None:
        self._xid += 1
        self._raw(DIALECTS[self.version].serialize(msg, self._xid))

    def _raw(self, data: bytes) -> None:
        self._wbuf.append(memoryview(data))
        if not self._writing:
            self._flush()

    def _flush(self) -> None:
        buf = self._wbuf
        while buf and not self._closed:
            head = buf[0]
            try:
                n = self.sock.send(head[:WRITE_CHUNK])
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError,
                    ssl.SSLWantReadError):
                break
            except (OSError, ssl.SSLError) as exc:
                self._end(f"write failed: {exc}")
                return
            if n >= len(head):
                buf.popleft()
            else:
                buf[0] = head[n:]
        loop = self.transport.loop
        if buf and not self._closed and not self._writing:
            self._writing = True
            loop.add_writer(self.fd, self._flush)
        elif not buf and self._writing:
            self._writing = False
            loop.remove_writer(self.fd)

    # -- ending ------------------------------------------------------------------------------------
    def _end(self, reason: str, flush: bool = False) -> None:
        if self._closed:
            return
        if flush:
            self._flush()
        self._closed = True
        loop = self.transport.loop
        loop.remove_reader(self.fd)
        if self._writing:
            loop.remove_writer(self.fd)
        self._wbuf.clear()
        try:
            if not self.tls:
                self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
        self.transport.ended(self, reason)


class Transport:
    """Every OpenFlow connection of one driver, on ``loop`` (module docstring).

    Parameters
    ----------
    driver
        An :class:`~.driver.OpenFlowDriver` (``on_up``, ``on_down``, ``on_message``).
    loop : asyncio.AbstractEventLoop
        The runtime's loop.
    gate : optional
        The accept stage (:class:`~.listener.HelloGate`): told when a handshake finished
        (``established``) and when a connection ended (``closed``).
    versions : sequence of int
        OpenFlow wire versions spoken (4: 1.3, 6: 1.5).
    greeted : bool
        The accept stage sends our HELLO (:meth:`greeting`) on every connection it hands over
        (:mod:`.listener`, ``greeting``): a connection does not send it again.
    """

    def __init__(self, driver: Any, loop: asyncio.AbstractEventLoop, gate: Any = None,
                 versions: Sequence[int] = (4, 6), greeted: bool = False) -> None:
        self.driver = driver
        self.loop = loop
        self.gate = gate
        self.versions = tuple(versions)
        self.greeted = greeted
        self.connections: set[WireConnection] = set()
        self._thread: int | None = None
        self._closing = False
        loop.call_soon_threadsafe(self._mark_thread)

    def _mark_thread(self) -> None:
        self._thread = threading.get_ident()

    def on_loop(self) -> bool:
        return self._thread == threading.get_ident()

    def adopt(self, sock: Any, addr: Any) -> None:
        """Take a connection whose HELLO arrived (the accept stage's ``handle``; any
        thread). ``sock``: a socket, or a :class:`~.tls.TLSConnection` (its TLS socket and
        the bytes the accept stage read are taken over)."""
        prefix = b""
        detach = getattr(sock, "detach_tls", None)
        if detach is not None:
            sock, prefix = detach()
        sock.setblocking(False)
        self.loop.call_soon_threadsafe(self._start, sock, addr, prefix)

    def _start(self, sock: Any, addr: Any, prefix: bytes) -> None:
        if self._closing:
            try:
                sock.close()
            except OSError:
                pass
            return
        conn = WireConnection(self, sock, addr, prefix)
        self.connections.add(conn)
        self.loop.add_reader(conn.fd, conn._readable)  # noqa: SLF001 - its own callback
        if not self.greeted:
            conn._raw(self.greeting())  # noqa: SLF001
        # the rest of the HELLO may already sit in OpenSSL's buffer, where no readable event
        # will announce it: read now
        conn._readable()  # noqa: SLF001

    def greeting(self) -> bytes:
        """Our HELLO (module docstring): the highest version the driver speaks, xid 1; the
        accept stage sends it when :attr:`greeted` (:mod:`.listener`)."""
        d = DIALECTS[max(self.versions)]
        return d.serialize(d.parser.OFPHello(d.desc), 1)

    def established(self, conn: WireConnection) -> None:
        if self.gate is not None:   # a datapath of the fabric: its source is known
            self.gate.established(conn.addr, known=conn.dpid in self.driver.names)
        self.driver.on_up(conn)

    def ended(self, conn: WireConnection, reason: str) -> None:
        self.connections.discard(conn)
        if self.gate is not None:
            self.gate.closed(conn.addr)
        if conn.state == "main":
            self.driver.on_down(conn, reason)

    def close(self) -> None:
        """Close every connection (on the loop)."""
        self._closing = True
        for conn in list(self.connections):
            conn._end("controller stopping")  # noqa: SLF001


__all__ = ["Transport", "WireConnection"]
