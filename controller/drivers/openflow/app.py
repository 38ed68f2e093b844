"""The OpenFlow listener, started: the bounded accept stage (:mod:`.listener`, one thread for
every connection not yet handed over, TLS handshakes included) feeding the transport
(:mod:`.transport`), which runs every handed-over connection on the runtime's event loop.

The process's threads do not grow with the number of switches: one accept thread, the loop.
(os-ken's application manager is not used any more; its message classes still are, as the
codec: :mod:`.dialect`.)
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller.drivers.openflow import tablefeatures
from controller.drivers.openflow.driver import OpenFlowDriver
from controller.drivers.openflow.listener import HelloGate, ListenerLimits
from controller.drivers.openflow.transport import Transport

LOG = logging.getLogger("aifabric.openflow")


@dataclass
class OpenFlowHandle:
    """A running listener: its gate (port, statistics), its transport, how to stop it."""

    gate: HelloGate
    thread: threading.Thread
    transport: Transport
    errors: list[BaseException] = field(default_factory=list)
    _stop: Callable[[], None] | None = None

    @property
    def port(self) -> int:
        return self.gate.port

    def stop(self, timeout_s: float = 2.0) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """The gate's ``spawn``: hand-over runs in the accept thread itself (it only queues the
    socket for the loop)."""
    return fn(*args)


def start_openflow(driver: OpenFlowDriver, sock: socket.socket, ready: threading.Event,
                   loop: asyncio.AbstractEventLoop, limits: ListenerLimits | None = None,
                   tls: ssl.SSLContext | None = None) -> OpenFlowHandle:
    """Accept OpenFlow switches on ``sock`` (over TLS with ``tls``) for ``driver``, whose
    connections run on ``loop``; connections are handed over once ``ready`` is set.

    The accept thread is a daemon: it never keeps the process alive.
    """
    tablefeatures.install()
    # the accept stage greets every connection (our HELLO goes before the loop runs: a
    # restarted controller's loop is busy building its plan, and a switch waits for the HELLO
    # only its backoff, :mod:`.listener`)
    transport = Transport(driver, loop, greeted=True)
    gate = HelloGate(sock, transport.adopt, _call, limits or ListenerLimits(), ready, tls=tls,
                     greeting=transport.greeting())
    transport.gate = gate
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            gate.serve_forever()
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)
            LOG.exception("[listener] the accept stage stopped")

    th = threading.Thread(target=serve, name="openflow-accept", daemon=True)
    th.start()
    handle = OpenFlowHandle(gate, th, transport, errors)

    def stop() -> None:
        gate.close()
        if transport.on_loop():
            transport.close()
        elif not loop.is_closed():
            try:
                loop.call_soon_threadsafe(transport.close)
            except RuntimeError:
                pass
        th.join(2.0)

    handle._stop = stop
    driver.on_stop.append(stop)
    return handle


__all__ = ["OpenFlowHandle", "start_openflow"]
