"""``aifabric controller --metrics-listen --grpc-listen`` as a process: both endpoints answer,
SIGTERM stops it with exit 0; a malformed address is refused with exit 2."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.request

from controller.northbound.client import FabricClient
from controller.runtime.metrics import metric_names
from mininet_labs.lab.processes import free_port
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY


def _start(*extra):
    return subprocess.Popen(
        [sys.executable, "-m", "controller.cli", "controller", "-t", str(MAIN_TOPOLOGY), "-p",
         str(PINNED_POLICY), "--listen", f"127.0.0.1:{free_port()}", "--stats-interval", "0.2", "--insecure",
         *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_metrics_and_grpc_endpoints_then_sigterm():
    p = _start("--metrics-listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0")
    lines = []
    try:
        deadline = time.monotonic() + 30
        metrics = grpc_at = None
        while time.monotonic() < deadline and not (metrics and grpc_at):
            line = p.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
            if m := re.search(r"metrics: (http://\S+/metrics)", line):
                metrics = m.group(1)
            if m := re.search(r"gRPC aifabric.v1.Northbound on (\S+)", line):
                grpc_at = m.group(1)
        assert "counters every 0.2 s" in "".join(lines)
        text = urllib.request.urlopen(metrics, timeout=5).read().decode()
        for name in ("aifabric_link_utilisation_ratio", "aifabric_flow_path_info",
                     "aifabric_alerts_raised_total", "aifabric_link_up"):
            assert name in text
        assert all(n.split("_total")[0] in text for n in metric_names() if "port" not in n)
        with FabricClient(grpc_at, insecure=True) as c:
            st = c.status()
            assert st.fabric == "leafspine-2x4x2" and st.sample_interval_s == 0.2
            assert {f.collective for f in c.paths().flows} == {"ring-a", "ring-b"}
    finally:
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=20)
    assert p.returncode == 0, "".join(lines) + out


def test_bad_listen_address_exits_2():
    p = _start("--grpc-listen", "nohost")
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 2 and "--grpc-listen: " in out and "expected HOST:PORT" in out
