"""The bounded OpenFlow accept stage, attacked by hostile clients on loopback (bounded in count:
500 connections, and in time: seconds): idle connections cost no thread and are closed after the
HELLO deadline, a connection beyond the cap evicts the oldest still without its HELLO (and is
refused only when every slot is past its HELLO), a non-OpenFlow client is closed at its first
bytes, a client that stalls after its HELLO is closed after the handshake deadline, a churning
client never keeps a switch out (issue 23), an unknown source gets a bounded number of
handshakes; and the same against the controller process, counting its threads."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from controller.drivers.openflow.listener import HelloGate, ListenerLimits, bind_listener
from mininet_labs.lab.processes import free_port
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY

HELLO_13 = struct.pack("!BBHI", 4, 0, 8, 1)  # OpenFlow 1.3.5 §7.5.1: version, OFPT_HELLO, len, xid


def _connect(port: int, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.settimeout(0.01)
        out.append(s)
    return out


def _closed_by_peer(s: socket.socket) -> bool:
    """True once the peer closed (whatever it sent before is read and dropped)."""
    try:
        while True:
            if s.recv(4096) == b"":
                return True
    except (BlockingIOError, TimeoutError):
        return False
    except OSError:
        return True


def _wait(pred, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def _gate(limits: ListenerLimits):
    handed: list[tuple[socket.socket, object]] = []
    spawned: list[threading.Thread] = []

    def spawn(fn, *args):
        handed.append(args)
        t = threading.Thread(target=lambda: None)
        spawned.append(t)
        return t

    gate = HelloGate(bind_listener("127.0.0.1", 0), lambda s, a: None, spawn, limits)
    th = threading.Thread(target=gate.serve_forever, daemon=True)
    th.start()
    return gate, th, handed


def test_idle_connections_cost_no_thread_and_close_after_the_hello_deadline():
    gate, th, handed = _gate(ListenerLimits(hello_timeout_s=1.0, handshake_timeout_s=1.0,
                                            max_unfinished=600))
    before = set(threading.enumerate())
    clients = _connect(gate.port, 500)
    try:
        assert _wait(lambda: gate.stats.accepted == 500, 5)
        # one selector thread serves them all: no thread started for any of the 500 (compared
        # by identity, so a thread of an earlier test ending meanwhile does not count)
        assert set(threading.enumerate()) - before == set()
        assert handed == []
        assert _wait(lambda: all(_closed_by_peer(c) for c in clients), 6)
        assert gate.stats.closed_no_hello == 500 and gate.unfinished() == 0
    finally:
        for c in clients:
            c.close()
        gate.close()
        th.join(2)


def test_cap_garbage_and_a_stalled_handshake():
    gate, th, handed = _gate(ListenerLimits(hello_timeout_s=5.0, handshake_timeout_s=0.5,
                                            max_unfinished=20, max_handshakes_per_source=40))
    try:
        idle = _connect(gate.port, 20)
        assert _wait(lambda: gate.unfinished() == 20, 3)
        # beyond the cap a new connection closes the oldest still without its HELLO
        extra = _connect(gate.port, 30)
        assert _wait(lambda: all(_closed_by_peer(c) for c in idle + extra[:10]), 3)
        assert not any(_closed_by_peer(c) for c in extra[10:])
        assert gate.stats.evicted_waiting == 30 and gate.unfinished() == 20
        for c in extra:
            c.close()
        assert _wait(lambda: gate.unfinished() == 0, 3)
        # connections past their HELLO are never closed for another: the new one is refused
        stalled = _connect(gate.port, 20)
        for c in stalled:
            c.sendall(HELLO_13)
        assert _wait(lambda: len(handed) == 20, 3)
        late = _connect(gate.port, 1)
        assert _wait(lambda: _closed_by_peer(late[0]), 3)
        assert gate.stats.refused_over_cap == 1
        assert _wait(lambda: gate.stats.closed_no_handshake == 20, 3)
        for c in stalled + late:
            c.close()
        handed.clear()
        assert _wait(lambda: gate.unfinished() == 0, 3)
        junk = socket.create_connection(("127.0.0.1", gate.port))
        junk.sendall(b"GET / HTTP/1.1\r\n\r\n")
        junk.settimeout(0.01)
        assert _wait(lambda: _closed_by_peer(junk), 3)
        assert gate.stats.closed_not_openflow == 1 and handed == []
        # a HELLO is handed over; never finishing the handshake, it is shut down at 0.5 s
        ok = socket.create_connection(("127.0.0.1", gate.port))
        ok.sendall(HELLO_13)
        assert _wait(lambda: len(handed) == 1, 3)
        assert _wait(lambda: gate.stats.closed_no_handshake == 21, 3)
        ok.close()
        junk.close()
    finally:
        gate.close()
        th.join(2)


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_500_idle_connections_to_the_controller_leave_no_thread_behind(tmp_path):
    port = free_port()
    log = tmp_path / "c.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller.cli", "controller", "-t", str(MAIN_TOPOLOGY), "-p",
         str(PINNED_POLICY), "--listen", f"127.0.0.1:{port}", "--hello-timeout", "1",
         "--handshake-timeout", "2", "--max-unfinished", "64", "--insecure"],
        stdout=open(log, "w"), stderr=subprocess.STDOUT,
        cwd=Path(__file__).resolve().parent.parent)
    try:
        assert _wait(lambda: "listening for OpenFlow" in log.read_text(), 30), log.read_text()
        time.sleep(0.5)
        base = _threads(proc.pid)
        clients = _connect(port, 500)
        peak = max(_threads(proc.pid) for _ in range(5) if not time.sleep(0.1))
        assert peak <= base + 1, (base, peak)
        # everything is closed: 436 evicted by newer ones at the cap, the rest at the HELLO deadline
        assert _wait(lambda: all(_closed_by_peer(c) for c in clients), 10)
        assert _threads(proc.pid) <= base + 1
        for c in clients:
            c.close()
        # hostile HELLOs that never finish the handshake: handed over, then shut down
        stall = _connect(port, 20)
        for c in stall:
            c.sendall(HELLO_13)
        assert _wait(lambda: all(_closed_by_peer(c) for c in stall), 10)
        assert _wait(lambda: _threads(proc.pid) <= base + 1, 10), (base, _threads(proc.pid))
        for c in stall:
            c.close()
        assert proc.poll() is None
        assert "handshake within" in log.read_text()
    finally:
        proc.terminate()
        proc.wait(10)
    assert proc.returncode == 0, log.read_text()[-2000:]


class _Churner:
    """Connects from ``source`` to the gate as fast as it can and keeps every connection
    open (the oldest ``keep`` of its own at most): issue 23's attacker (247k connects in 23 s),
    which kept a reconnecting switch out for 20 s when the gate refused new connections at
    its cap."""

    def __init__(self, port: int, source: str, keep: int = 300) -> None:
        self.port, self.source, self.keep = port, source, keep
        self.connects = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from collections import deque

        held: deque[socket.socket] = deque()
        while not self._stop.is_set():
            s = socket.socket()
            try:
                s.bind((self.source, 0))
                s.connect(("127.0.0.1", self.port))
                self.connects += 1
            except OSError:
                s.close()
                continue
            held.append(s)
            if len(held) > self.keep:
                held.popleft().close()
        for s in held:
            s.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def test_a_churning_client_does_not_keep_a_switch_out():
    """Two churning clients, one on the switch's own address: every one of the switch's
    reconnects is handed over (its HELLO arrives with its connection; the churners only evict
    their own connections), and a source of a known switch is evicted from last."""
    handled: list[object] = []
    gate = HelloGate(bind_listener("127.0.0.1", 0), lambda s, a: None,
                     lambda fn, conn, addr: handled.append(addr),
                     ListenerLimits(hello_timeout_s=5.0, handshake_timeout_s=5.0))
    th = threading.Thread(target=gate.serve_forever, daemon=True)
    th.start()
    churners = [_Churner(gate.port, "127.0.0.2"), _Churner(gate.port, "127.0.0.1")]
    switch_conns: list[socket.socket] = []
    try:
        # the attack in full swing: the 64 slots full, new connections evicting old ones
        assert _wait(lambda: gate.stats.evicted_waiting >= 2000, 30), gate.stats
        for _ in range(5):   # a switch on 127.0.0.1 reconnects, again and again
            sw = socket.create_connection(("127.0.0.1", gate.port))
            sw.sendall(HELLO_13)
            switch_conns.append(sw)
            me = sw.getsockname()
            assert _wait(lambda me=me: me in handled, 10), (gate.stats, me)
            gate.established(me, known=True)
        assert gate.known_source(("127.0.0.1", 1)) and not gate.known_source(("127.0.0.2", 1))
        assert gate.stats.refused_over_cap == 0
        assert all(c.connects > 100 for c in churners)
    finally:
        for c in churners:
            c.stop()
        for s in switch_conns:
            s.close()
        gate.close()
        th.join(2)


def test_an_unknown_source_gets_a_bounded_number_of_handshakes():
    """A source that sends HELLOs and stalls holds at most max_handshakes_per_source
    handshakes (a thread each in os-ken); its other HELLOs wait without a thread. A known
    source has no such bound."""
    handled: list[object] = []
    gate = HelloGate(bind_listener("127.0.0.1", 0), lambda s, a: None,
                     lambda fn, conn, addr: handled.append(addr),
                     ListenerLimits(hello_timeout_s=5.0, handshake_timeout_s=5.0,
                                    max_unfinished=64, max_handshakes_per_source=4))
    th = threading.Thread(target=gate.serve_forever, daemon=True)
    th.start()
    try:
        stalls = _connect(gate.port, 10)
        for c in stalls:
            c.sendall(HELLO_13)
        assert _wait(lambda: gate.unfinished() == 10 and len(handled) == 4, 5), gate.stats
        time.sleep(0.3)
        assert len(handled) == 4   # the 6 others wait without a thread
        gate.established(handled[0], known=True)   # one finishes: a fabric datapath
        assert _wait(lambda: len(handled) == 10, 5)  # the source is known: no bound
        for c in stalls:
            c.close()
    finally:
        gate.close()
        th.join(2)


def test_a_churning_client_does_not_keep_a_tls_switch_out(pki):
    """Over TLS (the switch presents its certificate): churning clients on the switch's own
    address and another never keep it out; connections silent since their accept are
    evicted before a handshake that has received its ClientHello."""
    import ssl

    from controller.runtime.channels import openflow_context
    from controller.security.transport import TLSFiles

    handled: list[object] = []
    gate = HelloGate(bind_listener("127.0.0.1", 0), lambda s, a: None,
                     lambda fn, conn, addr: handled.append(addr),
                     ListenerLimits(hello_timeout_s=5.0, handshake_timeout_s=5.0),
                     tls=openflow_context(TLSFiles.from_dir(pki.directory, "controller")))
    th = threading.Thread(target=gate.serve_forever, daemon=True)
    th.start()
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    ctx.check_hostname = False
    ctx.load_cert_chain(str(pki.switch_cert), str(pki.switch_key))
    churners = [_Churner(gate.port, "127.0.0.2"), _Churner(gate.port, "127.0.0.1")]
    switch_conns: list[socket.socket] = []
    try:
        assert _wait(lambda: gate.stats.evicted_waiting >= 1000, 30), gate.stats
        for _ in range(5):
            raw = socket.create_connection(("127.0.0.1", gate.port), timeout=10)
            sw = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
            sw.sendall(HELLO_13)
            switch_conns.append(sw)
            me = sw.getsockname()
            assert _wait(lambda me=me: me in handled, 10), (gate.stats, me)
        assert gate.stats.refused_over_cap == 0 and gate.stats.closed_tls_failed == 0
    finally:
        for c in churners:
            c.stop()
        for s in switch_conns:
            s.close()
        gate.close()
        th.join(2)


def _recv_exactly(s: socket.socket, n: int, timeout_s: float = 5.0) -> bytes:
    s.settimeout(timeout_s)
    got = b""
    while len(got) < n:
        chunk = s.recv(n - len(got))
        if not chunk:
            break
        got += chunk
    return got


@pytest.mark.parametrize("over_tls", [False, True], ids=["tcp", "tls"])
def test_our_hello_goes_at_once_though_the_runtime_is_not_ready(pki, over_tls):
    """A switch's version negotiation finishes without the runtime: the accept stage sends our
    HELLO the moment a connection is established (plain: accepted; TLS: handshake done), while
    the gate is still closed (a restarting controller building its plan). Open vSwitch drops
    a connection whose peer's HELLO has not come within its backoff (1 s at first): a HELLO
    sent by the loop only once it ran cost a restarted k = 16 fabric 131 switches backing off
    8 s. The connection is then handed over once, its HELLO not sent twice."""
    import ssl

    from controller.runtime.channels import openflow_context
    from controller.security.transport import TLSFiles

    greeting = struct.pack("!BBHI", 6, 0, 8, 1)
    tls = openflow_context(TLSFiles.from_dir(pki.directory, "controller")) if over_tls \
        else None
    ready = threading.Event()
    handed: list[object] = []
    gate = HelloGate(bind_listener("127.0.0.1", 0), lambda s, a: None,
                     lambda fn, conn, addr: handed.append(conn),
                     ListenerLimits(hello_timeout_s=5.0), ready, tls=tls,
                     greeting=greeting)
    th = threading.Thread(target=gate.serve_forever, daemon=True)
    th.start()
    try:
        sw = socket.create_connection(("127.0.0.1", gate.port), timeout=5)
        if tls is not None:
            ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
            ctx.check_hostname = False
            ctx.load_cert_chain(str(pki.switch_cert), str(pki.switch_key))
            sw = ctx.wrap_socket(sw, server_hostname="127.0.0.1")
        assert _recv_exactly(sw, 8) == greeting   # before ours, before ready
        sw.sendall(HELLO_13)
        time.sleep(0.3)
        assert handed == []                        # held while not ready
        ready.set()
        assert _wait(lambda: len(handed) == 1, 5)
        sw.settimeout(0.3)
        try:
            extra: bytes | None = sw.recv(64)
        except (TimeoutError, ssl.SSLWantReadError):
            extra = None
        assert extra is None                       # nothing more from the gate
        sw.close()
    finally:
        gate.close()
        th.join(2)
