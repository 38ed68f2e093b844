"""The os-ken edge of the OpenFlow driver: one os-ken application that hands every connection and
message to :class:`~controller.drivers.openflow.driver.OpenFlowDriver`, and
:func:`start_openflow`, which runs os-ken (its own threads) behind the bounded accept stage of
:mod:`.listener`.

Nothing here decides anything: the app forwards, the driver encodes and tracks replies, the
runtime decides. Handlers run on os-ken's event thread and only post to the driver (which hops
onto the runtime's asyncio loop).
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_3, ofproto_v1_5

from controller.drivers.openflow import tablefeatures
from controller.drivers.openflow.driver import OpenFlowDriver
from controller.drivers.openflow.listener import HelloGate, ListenerLimits

LOG = logging.getLogger("aifabric.openflow")
APP_NAME = "OsKenBridge"

_FORWARDED = [
    ofp_event.EventOFPErrorMsg, ofp_event.EventOFPBarrierReply, ofp_event.EventOFPPortStatus,
    ofp_event.EventOFPPacketIn, ofp_event.EventOFPFlowStatsReply,
    ofp_event.EventOFPFlowDescStatsReply, ofp_event.EventOFPGroupDescStatsReply,
    ofp_event.EventOFPPortStatsReply, ofp_event.EventOFPQueueStatsReply,
    ofp_event.EventOFPRoleReply, ofp_event.EventOFPRoleStatus,
    ofp_event.EventOFPBundleCtrlMsg, ofp_event.EventONFBundleCtrlMsg,
    ofp_event.EventOFPTableFeaturesStatsReply,
]


class DatapathConnection:
    """An os-ken ``Datapath`` as a :class:`~.driver.Connection`.

    ``send`` never blocks the caller: os-ken's send queue holds 16 buffers and ``Datapath.send``
    waits for room, which would stall the runtime's loop behind a switch that stops reading;
    buffers that do not fit wait here, in order, and are retried from ``schedule``.
    """

    def __init__(self, dp: Any, schedule: Callable[[float, Callable[[], None]], Any]) -> None:
        self.dp = dp
        self.dpid = int(dp.id)
        self.version = int(dp.ofproto.OFP_VERSION)
        host, port = dp.address[:2]
        self.address = f"{host}:{port}"
        self._schedule = schedule
        self._backlog: deque[bytes] = deque()
        self._retry = False

    def ports(self) -> frozenset[int] | None:
        ports = getattr(self.dp, "ports", None)
        if not ports:
            return None
        return frozenset(p for p in ports if p <= self.dp.ofproto.OFPP_MAX)

    def send(self, data: bytes, msgs: Sequence[Any] = ()) -> None:
        self._backlog.append(data)
        self._flush()

    def _flush(self) -> None:
        self._retry = False
        dp = self.dp
        while self._backlog:
            q = dp.send_q
            if q is None:  # connection ending: drop, the switch is gone
                self._backlog.clear()
                return
            if not dp._send_q_sem.acquire(blocking=False):  # noqa: SLF001 - see class docstring
                break
            q.put((self._backlog.popleft(), False))
        if self._backlog and not self._retry:
            self._retry = True
            self._schedule(0.01, self._flush)

    def close(self) -> None:
        try:
            self.dp.close()
            self.dp.socket.shutdown(socket.SHUT_RDWR)
        except Exception:  # noqa: BLE001 - best effort
            pass


class OsKenBridge(app_manager.OSKenApp):
    """Forwards os-ken's datapaths and messages to the driver (OpenFlow 1.3 and 1.5)."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION, ofproto_v1_5.OFP_VERSION]
    LOGGER_NAME = "aifabric.openflow.os-ken"

    def __init__(self, *args: Any, driver: OpenFlowDriver | None = None,
                 gate: HelloGate | None = None,
                 schedule: Callable[[float, Callable[[], None]], Any] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if driver is None or schedule is None:
            raise ValueError("OsKenBridge needs driver= and schedule=")
        self.driver = driver
        self.gate = gate
        self.schedule = schedule
        self._conns: dict[int, DatapathConnection] = {}  # id(datapath) -> connection
        self._lock = threading.Lock()

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _state(self, ev: Any) -> None:
        dp = ev.datapath
        if ev.state == MAIN_DISPATCHER:
            conn = DatapathConnection(dp, self.schedule)
            with self._lock:
                self._conns[id(dp)] = conn
            if self.gate is not None:   # a datapath of the fabric: its source is known
                self.gate.established(dp.address, known=dp.id in self.driver.names)
            self.driver.connection_up(conn)
        elif ev.state == DEAD_DISPATCHER:
            if self.gate is not None:
                self.gate.closed(dp.address)
            with self._lock:
                gone = self._conns.pop(id(dp), None)
            if gone is not None:
                self.driver.connection_down(gone, "connection closed")

    @set_ev_cls(_FORWARDED, MAIN_DISPATCHER)
    def _message(self, ev: Any) -> None:
        with self._lock:
            conn = self._conns.get(id(ev.msg.datapath))
        if conn is not None:
            self.driver.message(conn, ev.msg)

    def close_all(self) -> None:
        with self._lock:
            conns = list(self._conns.values())
        for c in conns:
            c.close()


def serve_connection(sock: Any, address: Any) -> None:
    """os-ken's ``datapath_connection_factory``, minus a thread leak.

    With os-ken's native hub (plain threads), ``hub.kill`` does nothing, so when a connection
    ends, ``Datapath.serve`` waits forever for its send thread, which waits forever on an empty
    send queue: every connection that ever closed left its threads behind, and the
    ``DEAD_DISPATCHER`` state (the driver's "switch gone") never came. Here the end of the
    receive loop marks the datapath dead and wakes the send loop with a closing sentinel.
    """
    # isort: off
    from os_ken.base import app_manager as _am  # noqa: F401 - import order of os-ken
    from os_ken.controller.controller import Datapath
    # isort: on
    import contextlib
    import queue

    dp = Datapath(sock, address)
    recv = dp._recv_loop  # noqa: SLF001

    def recv_then_wake() -> None:
        try:
            recv()
        finally:
            dp.set_state(DEAD_DISPATCHER)
            q = dp.send_q
            if q is not None:
                try:
                    q.put_nowait((b"", True))
                except queue.Full:
                    pass  # the send loop is busy with a dead socket: it ends by itself

    dp._recv_loop = recv_then_wake  # noqa: SLF001
    with contextlib.closing(dp):
        try:
            dp.serve()
        except Exception:  # noqa: BLE001 - a malformed message ends only this connection
            LOG.exception("[listener] connection from %s ended with an error", address)


@dataclass
class OsKenHandle:
    """A running os-ken: its gate (port, stats) and how to stop it."""

    gate: HelloGate
    thread: threading.Thread
    errors: list[BaseException] = field(default_factory=list)
    _stop: Callable[[], None] | None = None

    @property
    def port(self) -> int:
        return self.gate.port

    def stop(self, timeout_s: float = 2.0) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None


def start_openflow(driver: OpenFlowDriver, sock: socket.socket, ready: threading.Event,
                   schedule: Callable[[float, Callable[[], None]], Any],
                   limits: ListenerLimits | None = None,
                   tls: ssl.SSLContext | None = None) -> OsKenHandle:
    """Run os-ken with :class:`OsKenBridge` feeding ``driver``, accepting on ``sock`` through a
    :class:`~.listener.HelloGate` that hands connections over once ``ready`` is set (over TLS
    with ``tls``).

    os-ken's threads all start from one daemon thread (threads inherit the daemon flag), so none
    keeps the process alive. One os-ken per process (its application manager is a singleton).
    ``schedule(delay_s, fn)`` runs ``fn`` on the runtime's loop later (``loop.call_later``,
    made thread-safe by the caller).

    Raises
    ------
    RuntimeError
        os-ken failed to start its applications.
    """
    # isort: off
    # app_manager must be imported before os_ken.controller.controller (an import cycle).
    from os_ken.base.app_manager import AppManager
    import os_ken.controller.controller as of_controller  # registers the ofp-* options
    from os_ken import cfg
    from os_ken.lib import hub
    # isort: on

    tablefeatures.install()
    gates: list[HelloGate] = []

    def server_factory(listen_info: Any, handle: Any = None, **_: Any) -> HelloGate:
        gate = HelloGate(sock, serve_connection, hub.spawn, limits or ListenerLimits(), ready,
                         tls=tls)
        gates.append(gate)
        # The bridge must know its gate before the gate serves a connection: switches retrying
        # a restarted controller connect at once, and a handshake finished while ``gate`` was
        # still None never reached ``established``, so the gate closed the working connection
        # at its handshake deadline (seen in the controller_restart lab: every switch dropped
        # 10 s after the restart and reconnected).
        bridge = app_mgr.applications.get(APP_NAME)
        if bridge is not None:
            bridge.gate = gate
        return gate

    host, port = sock.getsockname()[:2]
    cfg.CONF(args=[f"--ofp-listen-host={host}", f"--ofp-tcp-listen-port={port}"],
             project="os_ken", default_config_files=[])
    original = of_controller.StreamServer
    of_controller.StreamServer = server_factory
    app_mgr = AppManager.get_instance()
    errors: list[BaseException] = []
    booted = threading.Event()
    try:
        app_mgr.load_apps([__name__])
        contexts = app_mgr.create_contexts()
    except BaseException:
        of_controller.StreamServer = original
        AppManager._instance = None
        raise

    def boot() -> None:
        try:
            services = app_mgr.instantiate_apps(driver=driver, schedule=schedule,
                                                gate=None, **contexts)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)
            booted.set()
            return
        booted.set()
        hub.joinall(services)

    th = threading.Thread(target=boot, name="os-ken", daemon=True)
    th.start()
    booted.wait(10.0)
    # the gate is created by os-ken's OpenFlowController in its own thread
    for _ in range(100):
        if gates:
            break
        threading.Event().wait(0.05)
    if errors or not gates:
        of_controller.StreamServer = original
        AppManager._instance = None
        raise RuntimeError(f"os-ken did not start: {errors[0] if errors else 'no listener'}")
    app = app_mgr.applications.get(APP_NAME)
    if app is not None:
        app.gate = gates[0]
    handle = OsKenHandle(gates[0], th, errors)

    def stop() -> None:
        for g in gates:
            g.close()
        of_controller.StreamServer = original
        bridge = app_mgr.applications.get(APP_NAME)
        if bridge is not None:
            bridge.close_all()
        closer = threading.Thread(target=app_mgr.close, name="os-ken-close", daemon=True)
        closer.start()
        closer.join(2.0)
        AppManager._instance = None

    handle._stop = stop
    driver.on_stop.append(stop)
    return handle
