"""run_controller as a real process: listens, exits 0 on SIGTERM; bad input → 2, never listens."""

from __future__ import annotations

import random
import signal
import socket
import subprocess
import sys
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
    code = ("import sys; from controller.runtime.process import run_controller; "
            f"sys.exit(run_controller({str(topology)!r}, {str(policy)!r}, {host!r}, {port}))")
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def test_listens_and_exits_cleanly_on_sigterm():
    host, port = _free_addr()
    proc = _start(MAIN_TOPOLOGY, PINNED_POLICY, host, port)
    try:
        deadline = time.monotonic() + 20
        while not _connects(host, port):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "controller never listened"
            time.sleep(0.1)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=5)
        assert time.monotonic() - t0 < 4
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "8 hosts" in out and "pinned" in out
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
