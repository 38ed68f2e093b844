"""The bounded OpenFlow accept stage, attacked by hostile clients on loopback (bounded in count:
500 connections, and in time: seconds): idle connections cost no thread and are closed after the
HELLO deadline, connections beyond the cap are closed at once, a non-OpenFlow client is closed
at its first bytes, a client that stalls after its HELLO is closed after the handshake deadline;
and the same against the controller process, counting its threads."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

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
                                            max_unfinished=20))
    try:
        idle = _connect(gate.port, 20)
        assert _wait(lambda: gate.unfinished() == 20, 3)
        extra = _connect(gate.port, 30)  # beyond the cap: closed on accept
        assert _wait(lambda: all(_closed_by_peer(c) for c in extra), 3)
        assert gate.stats.refused_over_cap == 30
        for c in idle:
            c.close()
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
        assert _wait(lambda: gate.stats.closed_no_handshake == 1, 3)
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
        # everything is closed: 436 beyond the cap at once, the rest at the HELLO deadline
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
