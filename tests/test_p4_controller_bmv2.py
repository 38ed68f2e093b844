"""``aifabric controller`` with one real BMv2 leaf behind the P4Runtime driver (simple_switch_grpc
in a network namespace; the other switches of the main fabric speak OpenFlow and stay
unconnected): the leaf is programmed from the plan, an entry of another application (a QoS
table aifabric's routing does not own) survives start, kill -9 and restart, the restarted
controller writes nothing, and an ARP request is answered through the runtime (PacketIn →
runtime → packet-out). Skips without BMv2 or root."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from controller.drivers import frames
from controller.drivers.p4runtime.client import P4Switch
from controller.drivers.p4runtime.encode import qos_entries
from controller.drivers.p4runtime.reconcile import Update
from controller.model import load_topology
from mininet_labs.lab.bmv2 import NetnsSwitch, bmv2_missing_reason
from mininet_labs.lab.processes import free_port
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY
from tests.test_p4_bmv2 import Ports, arp_request

_why = bmv2_missing_reason()
pytestmark = [pytest.mark.p4, pytest.mark.skipif(_why is not None, reason=_why or "")]
ROOT = Path(__file__).resolve().parent.parent
QOS = {"tables": [{"table": "ecn_threshold", "match": {"egress_port": 3, "priority": 0},
                   "action": "mark_ecn", "params": {"threshold_pkts": 7}}]}


class _Controller:
    def __init__(self, tmp: Path, targets: Path, name: str,
                 extra: list[str] | None = None, policy: Path = PINNED_POLICY) -> None:
        self.log = tmp / f"{name}.log"
        self.metrics = free_port()
        cmd = [sys.executable, "-m", "controller.cli", "controller", "-t", str(MAIN_TOPOLOGY),
               "-p", str(policy), "--listen", f"127.0.0.1:{free_port()}",
               "--p4-targets", str(targets), "--metrics-listen", f"127.0.0.1:{self.metrics}",
               "--insecure", *(extra or [])]
        self.proc = subprocess.Popen(cmd, stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=ROOT)

    def wait(self, pattern: str, timeout_s: float = 60) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            if re.search(pattern, text):
                return text
            assert self.proc.poll() is None, f"controller exited:\n{text[-3000:]}"
            time.sleep(0.1)
        raise AssertionError(f"{pattern!r} not in the log:\n{self.log.read_text()[-3000:]}")

    def sent(self, switch: str, kind: str) -> float:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics}/metrics",
                                      timeout=5).read().decode()
        m = re.search(rf'aifabric_southbound_messages_total{{kind="{kind}",switch="{switch}"}} '
                      r"([\d.e+]+)", text)
        return float(m.group(1)) if m else 0.0

    def metric(self, pattern: str) -> float:
        """The value of the first sample matching ``pattern`` (a regex of name and labels)."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics}/metrics",
                                      timeout=5).read().decode()
        m = re.search(pattern + r" ([\d.e+]+)", text)
        return float(m.group(1)) if m else 0.0

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


async def _read(address: str) -> tuple[int, bool]:
    """(entries of the tables aifabric routes with, the foreign QoS entry is there); read by
    another client while no controller runs (it becomes primary for the moment)."""
    async with P4Switch("leaf1", address, 3, election_id=5) as sw:
        state = await sw.read_state()
    ours = sum(1 for e in state.entries if e.table in ("punt", "routes", "pinned"))
    foreign = any(e.table == "ecn_threshold" for e in state.entries)
    return ours, foreign


def test_controller_programs_a_bmv2_leaf_without_wiping_and_answers_arp(tmp_path):
    fabric = load_topology(MAIN_TOPOLOGY)
    with NetnsSwitch(ports=4, device_id=3, workdir=tmp_path) as bmv2:
        async def foreign() -> None:  # another application's entry, written before we start
            async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=5) as sw:
                await sw.write_batch([Update("insert", e) for e in qos_entries("leaf1", QOS)])

        asyncio.run(foreign())
        targets = tmp_path / "targets.json"
        targets.write_text(json.dumps({"leaf1": bmv2.grpc_address}))
        a = _Controller(tmp_path, targets, "a")
        try:
            a.wait(r"\[leaf1 dpid=0x3\] reconciled: read 0 entries of ours, sent \+\d+")
            assert a.sent("leaf1", "p4-update") > 0
            # ARP through the runtime: h1 asks for h3's MAC on port 1, the reply comes back out
            # of port 1 (PacketIn → runtime → packet-out)
            ports = Ports(bmv2)
            time.sleep(0.3)
            ports.drain()
            ports.send(1, arp_request(fabric.host_by_name["h1"].ipv4,
                                      fabric.host_by_name["h3"].ipv4))
            got = ports.recv_all(2.0)
            replies = [a for a in map(frames.parse_arp, got[1]) if a is not None and a.oper == 2]
            assert replies, got
            assert replies[0].sender_mac == fabric.host_by_name["h3"].mac
            assert replies[0].sender_ip == fabric.host_by_name["h3"].ipv4
            # P4 telemetry through the runtime: the leaf's counters (read every 1 s over
            # P4Runtime) reach Prometheus: the ARP request counted on port 1
            deadline = time.monotonic() + 15
            rx = 0.0
            while time.monotonic() < deadline and rx < 1:
                rx = a.metric(r'aifabric_port_rx_packets_total\{peer="h1",port="1",'
                              r'switch="leaf1"\}')
                time.sleep(0.3)
            assert rx >= 1
        finally:
            a.stop(signal.SIGKILL)  # kill -9
        ours, kept = asyncio.run(_read(bmv2.grpc_address))
        assert ours > 0 and kept
        b = _Controller(tmp_path, targets, "b")
        try:
            b.wait(r"\[leaf1 dpid=0x3\] reconciled: read \d+ entries of ours, all as intended: "
                   r"nothing sent")
            assert b.sent("leaf1", "p4-update") == 0
        finally:
            b.stop()
        assert asyncio.run(_read(bmv2.grpc_address)) == (ours, True)
