"""run_controller as a real process: listens, exits 0 on SIGTERM; bad input → 2, never listens."""

from __future__ import annotations

import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY

ROOT = Path(__file__).resolve().parent.parent


def _free_addr() -> tuple[str, int]:
    host = f"127.0.0.{random.randint(2, 250)}"
    with socket.socket() as s:
        s.bind((host, 0))
        return host, s.getsockname()[1]


def _start(topology, policy, host, port) -> subprocess.Popen:
    cfg = {"topology": str(topology), "policy": str(policy),
           "openflow": {"listen": f"{host}:{port}"}, "tls": {"insecure": True}}
    code = ("import sys; from controller.runtime.process import run_controller; "
            "from controller.config.model import ServiceConfig; "
            f"sys.exit(run_controller(ServiceConfig.model_validate({cfg!r})))")
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def _stderr_lines(proc: subprocess.Popen) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in proc.stderr:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _wait_for(lines: queue.Queue, text: str, timeout_s: float, seen: list[str]) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.1)
        except queue.Empty:
            continue
        if line is None:
            return False
        seen.append(line)
        if text in line:
            return True
    return False


def test_listens_and_exits_cleanly_on_sigterm():
    """The socket is bound before the runtime is ready (switches may connect early); once the
    controller says it is listening, SIGTERM stops it within a few seconds with exit 0."""
    host, port = _free_addr()
    proc = _start(MAIN_TOPOLOGY, PINNED_POLICY, host, port)
    seen: list[str] = []
    try:
        lines = _stderr_lines(proc)
        assert _wait_for(lines, "listening for OpenFlow", 30, seen), "".join(seen)
        assert _connects(host, port)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        out = proc.stdout.read()
        proc.wait(timeout=5)
        assert time.monotonic() - t0 < 4
        _wait_for(lines, "stopped cleanly", 2, seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, "".join(seen)
    assert "8 hosts" in out and "pinned" in out
    assert any("stopped cleanly" in line for line in seen)
    assert not _connects(host, port)


def test_sigterm_while_starting_stops_with_exit_0():
    """A SIGTERM right after the socket was bound (runtime not ready yet) is not lost: the
    controller stops, exit 0, and the port is closed."""
    host, port = _free_addr()
    proc = _start(MAIN_TOPOLOGY, PINNED_POLICY, host, port)
    seen: list[str] = []
    try:
        lines = _stderr_lines(proc)
        assert _wait_for(lines, "OpenFlow socket bound", 30, seen), "".join(seen)
        proc.send_signal(signal.SIGTERM)
        proc.stdout.read()
        proc.wait(timeout=20)
        _wait_for(lines, "stopped", 2, seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, "".join(seen)
    assert any("stopped" in line for line in seen), "".join(seen)
    assert not _connects(host, port)


def test_bad_policy_exits_2_with_location_and_never_listens(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nrouting:\n  mode: teleport\n")
    host, port = _free_addr()
    proc = _start(MAIN_TOPOLOGY, bad, host, port)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert f"{bad}:3:" in err
    assert not _connects(host, port)


def test_a_start_up_failure_after_the_listener_started_stops_it(tmp_path):
    """The OpenFlow listener starts before the rest (switches may connect early); a failure
    after it (here the audit file, under a regular file, cannot be opened) exits 1 naming the
    file and stops the listener: its accept thread is gone when ``run_controller`` returns."""
    host, port = _free_addr()
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    audit = blocker / "audit.jsonl"
    cfg = {"topology": str(MAIN_TOPOLOGY), "policy": str(PINNED_POLICY),
           "openflow": {"listen": f"{host}:{port}"}, "tls": {"insecure": True},
           "audit": {"file": str(audit)}}
    code = ("import sys, threading; from controller.runtime.process import run_controller; "
            "from controller.config.model import ServiceConfig; "
            f"rc = run_controller(ServiceConfig.model_validate({cfg!r})); "
            "print('accept threads alive:', sum(t.name == 'openflow-accept' and t.is_alive() "
            "for t in threading.enumerate())); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert f"audit.file {audit}" in proc.stderr
    assert "accept threads alive: 0" in proc.stdout, proc.stdout + proc.stderr
    assert not _connects(host, port)
