"""systemd integration at the process edge: sd_notify datagrams to a fake NOTIFY_SOCKET (a unix
datagram socket the test reads), READY after the deadline or once every switch is reconciled,
RELOADING/READY around SIGHUP, STOPPING; and ``--log-format json``, one event per line."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from controller.model.topology import load_topology
from controller.runtime.logjson import FIELDS, JsonFormatter
from controller.runtime.notify import Notifier, missing_switches, wait_ready
from mininet_labs.lab.processes import free_port
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def notify_socket(tmp_path):
    path = tmp_path / "notify.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(path))
    s.settimeout(60)
    yield str(path), s
    s.close()


def _fields(datagram: bytes) -> dict[str, str]:
    return dict(line.split("=", 1) for line in datagram.decode().split("\n"))


def test_notifier_sends_what_sd_notify_sends(notify_socket):
    path, s = notify_socket
    n = Notifier.from_env({"NOTIFY_SOCKET": path})
    assert n.ready("up")
    assert _fields(s.recv(4096)) == {"READY": "1", "STATUS": "up"}
    assert n.reloading()
    got = _fields(s.recv(4096))
    assert got["RELOADING"] == "1" and int(got["MONOTONIC_USEC"]) > 0
    assert n.stopping() and _fields(s.recv(4096))["STOPPING"] == "1"


def test_abstract_socket_names_and_no_socket(tmp_path):
    name = f"aifabric-test-{os.getpid()}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("\0" + name)
    s.settimeout(10)
    try:
        assert Notifier.from_env({"NOTIFY_SOCKET": "@" + name}).status("hi")
        assert s.recv(100) == b"STATUS=hi"
    finally:
        s.close()
    off = Notifier.from_env({})
    assert not off.enabled and not off.ready("x") and off.sent == []
    gone = Notifier.from_env({"NOTIFY_SOCKET": str(tmp_path / "nobody")})
    assert not gone.ready("x")  # a failed send never raises


def test_watchdog_only_for_this_process():
    assert Notifier.from_env({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "2000000"}).watchdog_usec \
        == 2_000_000
    assert Notifier.from_env({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "2000000",
                              "WATCHDOG_PID": "1"}).watchdog_usec is None


def test_ready_waits_for_every_switch_or_the_deadline(notify_socket):
    path, s = notify_socket
    n = Notifier(path)
    done: set[str] = set()
    names = ["leaf1", "spine1"]

    async def run() -> list[str]:
        changed = asyncio.Event()
        task = asyncio.create_task(wait_ready(n, lambda: missing_switches(names, done, None), 30,
                                              changed))
        await asyncio.sleep(0.05)
        assert not task.done()          # nothing reconciled yet: no READY
        done.update(names)
        changed.set()                   # the runtime says what the switches hold changed
        return await task

    assert asyncio.run(run()) == []
    assert _fields(s.recv(4096)) == {"READY": "1", "STATUS": "running; every switch reconciled"}
    assert asyncio.run(wait_ready(n, lambda: ["leaf1"], 0.01)) == ["leaf1"]
    assert "waiting for 1 switch(es): leaf1" in _fields(s.recv(4096))["STATUS"]


def test_a_replica_waits_only_for_the_switches_it_writes():
    assert missing_switches(["a", "b", "c"], {"a"}, {"a", "b"}) == ["b"]
    assert missing_switches(["a", "b"], {"a"}, None) == ["b"]


def test_json_lines_carry_switch_generation_digest_collective():
    fab = load_topology(MAIN_TOPOLOGY)
    fmt = JsonFormatter(s.name for s in fab.switches)

    def line(msg: str, *args: object, **extra: object) -> dict:
        rec = logging.LogRecord("aifabric.runtime", logging.INFO, __file__, 1, msg, args, None)
        rec.__dict__.update(extra)
        out = fmt.format(rec)
        assert "\n" not in out
        return json.loads(out)

    a = line("%s reconciled: read %d entries", "[leaf1 dpid=0x3]", 5)
    assert a["switch"] == "leaf1" and a["level"] == "INFO" and a["event"].endswith("read 5 entries")
    b = line("[fabric f] policy generation 3 applied from p.yaml (sha256 %s): ok", "ab" * 32)
    assert b["switch"] is None and b["generation"] == 3 and b["digest"] == "ab" * 32
    c = line("[fabric f] northbound: registered ring-a (job) with 4 flows")
    assert c["collective"] == "ring-a"
    d = line("anything", switch="spine2", collective="x", generation=9, digest="d")
    assert {k: d[k] for k in FIELDS} == {"switch": "spine2", "collective": "x", "generation": 9,
                                         "digest": "d"}
    assert line("[cluster] replica r1 registered")["switch"] is None


def test_the_controller_process_notifies_systemd_and_logs_json(notify_socket, tmp_path):
    """Started as systemd would (NOTIFY_SOCKET set, no switch connecting): READY once the
    deadline passes, RELOADING then READY around SIGHUP, STOPPING on SIGTERM, exit 0; every
    stderr line a JSON object."""
    path, s = notify_socket
    port = free_port()
    conf = tmp_path / "aifabric.yaml"
    conf.write_text(f"topology: {MAIN_TOPOLOGY}\npolicy: {PINNED_POLICY}\n"
                    f"openflow: {{listen: '127.0.0.1:{port}'}}\nlog: {{format: json}}\n"
                    "runtime: {ready_timeout_s: 1}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIFABRIC_")}
    env.update(NOTIFY_SOCKET=path, AIFABRIC_TLS_INSECURE="true", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "controller", "--config",
                             str(conf)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        ready = _fields(s.recv(4096))
        assert ready["READY"] == "1" and "waiting for 6 switch(es)" in ready["STATUS"]
        proc.send_signal(signal.SIGHUP)
        assert _fields(s.recv(4096))["RELOADING"] == "1"
        assert _fields(s.recv(4096))["READY"] == "1"
        proc.send_signal(signal.SIGTERM)
        assert _fields(s.recv(4096))["STOPPING"] == "1"
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    events = [json.loads(ln) for ln in err.splitlines() if ln.strip()]
    assert events and all(set(FIELDS) <= set(e) for e in events)
    assert any(e["generation"] == 2 and e["digest"] for e in events), "policy reload not logged"
