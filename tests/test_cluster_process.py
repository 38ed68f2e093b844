"""Mastership of ``aifabric controller --cluster ... --replica NAME`` processes over real Open
vSwitch bridges (issue 14, "done means": mastership balance with 1/2/3 replicas).

Six netdev bridges with the dpids of the main fabric (no ports: the controller programs them all
the same), each with one Controller row per replica (OVS connects to every target; a bridge holds
one master per OpenFlow 1.3.5 §6.3.7). Replicas are started and stopped one after another; at each
step every switch must have exactly one master, the replicas' loads must differ by at most one
(ONOS's balance: :mod:`controller.cluster.balance`), what ``aifabric status`` says (GetStatus of
any replica) must match what Open vSwitch says (the ``role`` column of its Controller rows,
ovs-vswitchd.conf.db(5)), and a replica that takes a switch over sends no flow-mod or group-mod
(it reads the switch back and finds the plan it computes from etcd's intent).

Needs root, Open vSwitch and etcd; the bridges have names of their own (``c14`` + pid) and are
removed afterwards. Waits are bounded generously; nothing here asserts how fast (the
``ha_failover`` lab measures that).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from controller.model.topology import load_topology
from controller.northbound.client import FabricClient
from controller.testing.etcd import free_loopback_ports
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY

pytestmark = [
    pytest.mark.mininet,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ovs-vsctl") is None,
                       reason="needs root and Open vSwitch"),
]

ROOT = Path(__file__).resolve().parent.parent
NAMES = ("r1", "r2", "r3")


def _vsctl(*args: str) -> str:
    return subprocess.run(["ovs-vsctl", "--timeout=20", *args], check=True, text=True,
                          capture_output=True).stdout


@pytest.fixture
def fabric_bridges():
    """(bridge → switch name, replica → (OpenFlow, gRPC, metrics) ports)."""
    fabric = load_topology(MAIN_TOPOLOGY)
    tag = f"c14{os.getpid() % 100000}"
    bridges = {f"{tag}s{i}": sw for i, sw in enumerate(fabric.switches)}
    ports = free_loopback_ports(3 * len(NAMES))
    rep_ports = {n: tuple(ports[3 * i:3 * i + 3]) for i, n in enumerate(NAMES)}
    args: list[str] = []
    for i, (br, sw) in enumerate(bridges.items()):
        ids = []
        for j, n in enumerate(NAMES):
            ids.append(f"@c{i}_{j}")
            args += ["--", f"--id=@c{i}_{j}", "create", "Controller",
                     f'target="tcp:127.0.0.1:{rep_ports[n][0]}"', "max_backoff=1000"]
        args += ["--", "--may-exist", "add-br", br, "--", "set", "Bridge", br,
                 "datapath_type=netdev", "fail_mode=secure", "protocols=OpenFlow13",
                 f"other-config:datapath-id={sw.dpid:016x}", f"controller=[{','.join(ids)}]"]
    try:
        _vsctl(*args)
        yield {br: sw.name for br, sw in bridges.items()}, rep_ports
    finally:
        for br in bridges:
            subprocess.run(["ovs-vsctl", "--if-exists", "del-br", br], check=False, timeout=20)


class Replicas:
    def __init__(self, etcd_url: str, ports: dict[str, tuple[int, ...]], log_dir: Path):
        self.etcd_url = etcd_url
        self.ports = ports
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str) -> None:
        of, gp, mp = self.ports[name]
        cmd = [sys.executable, "-m", "controller.cli", "controller", "-t", str(MAIN_TOPOLOGY),
               "-p", str(PINNED_POLICY), "--listen", f"127.0.0.1:{of}", "--grpc-listen",
               f"127.0.0.1:{gp}", "--metrics-listen", f"127.0.0.1:{mp}", "--insecure",
               "--cluster", self.etcd_url, "--replica", name]
        log = open(self.log_dir / f"{name}.log", "a")  # noqa: SIM115 - closed with the process
        self.procs[name] = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        log.close()

    def signal(self, name: str, sig: int) -> None:
        p = self.procs.pop(name)
        p.send_signal(sig)
        p.wait(30)

    def live(self) -> list[str]:
        return sorted(self.procs)

    def status(self, name: str):
        with FabricClient(f"127.0.0.1:{self.ports[name][1]}", 2.0, insecure=True) as c:
            return c.status()

    def sent(self) -> int:
        """Flow-mods and group-mods the live replicas sent so far (their metrics)."""
        total = 0
        for n in self.procs:
            url = f"http://127.0.0.1:{self.ports[n][2]}/metrics"
            with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - loopback
                text = r.read().decode()
            for m in re.finditer(r'^aifabric_southbound_messages_total\{([^}]*)\} (\S+)$', text,
                                 re.M):
                if re.search(r'kind="(flow-mod|group-mod)"', m.group(1)):
                    total += int(float(m.group(2)))
        return total

    def close(self) -> None:
        for n in list(self.procs):
            p = self.procs.pop(n)
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _ovs_masters(bridges: dict[str, str], ports: dict[str, tuple[int, ...]]
                 ) -> dict[str, list[str]]:
    """Switch → the replicas whose Controller row Open vSwitch holds as master."""
    by_port = {p[0]: n for n, p in ports.items()}
    ctl = json.loads(_vsctl("-f", "json", "--columns=_uuid,target,role,is_connected", "list",
                            "Controller"))
    rows = {}
    for uuid, target, role, connected in ctl["data"]:
        rows[uuid[1]] = (target, role, connected)
    brs = json.loads(_vsctl("-f", "json", "--columns=name,controller", "list", "Bridge"))
    out: dict[str, list[str]] = {}
    for name, ctrls in brs["data"]:
        if name not in bridges:
            continue
        uuids = [u[1] for u in ctrls[1]] if ctrls[0] == "set" else [ctrls[1]]
        masters = []
        for u in uuids:
            target, role, connected = rows[u]
            if role == "master" and connected is True:
                masters.append(by_port[int(target.rsplit(":", 1)[1])])
        out[bridges[name]] = masters
    return out


def _view(rs: Replicas, bridges, ports) -> tuple[bool, str]:
    """Balanced and agreed: every live replica's status names one live master per switch (the
    same one), Open vSwitch agrees, loads differ by at most one."""
    live = rs.live()
    views = []
    for n in live:
        try:
            st = rs.status(n)
        except Exception as exc:  # noqa: BLE001 - not answering yet
            return False, f"{n}: {exc}"
        if sorted(st.cluster.replicas) != live:
            return False, f"{n} sees replicas {list(st.cluster.replicas)}"
        views.append({s.name: s.master for s in st.switches})
    if any(v != views[0] for v in views):
        return False, f"replicas disagree: {views}"
    ovs = _ovs_masters(bridges, ports)
    for sw, m in views[0].items():
        if m not in live or ovs.get(sw) != [m]:
            return False, f"{sw}: status says {m!r}, Open vSwitch {ovs.get(sw)}"
    loads = [sum(1 for m in views[0].values() if m == n) for n in live]
    if max(loads) - min(loads) > 1:
        return False, f"unbalanced {dict(zip(live, loads, strict=True))}"
    return True, ""


def _until(pred: Callable[[], tuple[bool, str]], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    why = ""
    while time.monotonic() < deadline:
        ok, why = pred()
        if ok:
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} not reached within {timeout_s:g} s: {why}")


def test_mastership_balanced_over_one_two_three_replica_processes(etcd_cluster, fabric_bridges,
                                                                  tmp_path):
    bridges, ports = fabric_bridges
    rs = Replicas(etcd_cluster.url, ports, tmp_path)
    try:
        rs.start("r1")
        _until(lambda: _view(rs, bridges, ports), "r1 masters all six switches")
        loads = {n: 0 for n in rs.live()}
        for s in rs.status("r1").switches:
            loads[s.master] += 1
        assert loads == {"r1": 6}
        # the first replica programmed the empty bridges; wait for it to settle
        _until(lambda: (rs.sent() > 0, "nothing sent yet"), "r1 programmed the bridges")
        time.sleep(2.0)
        first = rs.sent()
        rs.start("r2")
        _until(lambda: _view(rs, bridges, ports), "balanced over r1, r2")
        rs.start("r3")
        _until(lambda: _view(rs, bridges, ports), "balanced over r1, r2, r3")
        st = rs.status("r2")
        loads = {n: 0 for n in NAMES}
        for s in st.switches:
            loads[s.master] += 1
        assert sorted(loads.values()) == [2, 2, 2]
        tokens = {s.name: s.master_token for s in st.switches}
        # switches changed hands twice: the new masters read them back and sent nothing
        time.sleep(1.0)
        assert _sent_by(rs, ("r2", "r3")) == 0
        assert rs.sent() == first
        rs.signal("r3", signal.SIGTERM)
        _until(lambda: _view(rs, bridges, ports), "balanced over r1, r2 after SIGTERM of r3")
        rs.signal("r2", signal.SIGKILL)
        _until(lambda: _view(rs, bridges, ports), "r1 masters all after kill -9 of r2")
        after = {s.name: s.master_token for s in rs.status("r1").switches}
        moved = [sw for sw in after if _master_of(st, sw) != "r1"]
        assert moved and all(after[sw] > tokens[sw] for sw in moved)
    finally:
        rs.close()


def _master_of(st, switch: str) -> str:
    return next(s.master for s in st.switches if s.name == switch)


def _sent_by(rs: Replicas, names: tuple[str, ...]) -> int:
    keep = rs.procs
    rs.procs = {n: p for n, p in keep.items() if n in names}
    try:
        return rs.sent()
    finally:
        rs.procs = keep
