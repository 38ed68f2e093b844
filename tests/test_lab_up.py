"""``aifabric lab up TOPOLOGY.yaml`` (a lab fabric held up for a controller run by hand) and
``aifabric lab exec HOST -- COMMAND`` (mininet_labs/lab/up.py).

Without root: the argument errors (exit 2, nothing built) and what ``lab exec`` refuses. Under
Mininet (root, Open vSwitch): the quickstart's "Try it on a lab fabric" as a newcomer runs it:
``lab up`` of the main fabric in one process, ``aifabric controller ... --insecure
--view-listen`` in another, every switch programmed, the live view answering, hosts reaching
each other through ``lab exec``; then SIGTERM, and nothing of the fabric is left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY, ROOT
from tests.test_lab_mininet import REASON, _our_processes


def _cli(*args: str, cwd: Path = ROOT, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "controller.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})


# -- argument errors: exit 2, nothing built (no root needed) ---------------------------------------
def test_lab_up_refuses_a_missing_file_with_its_name(tmp_path):
    r = _cli("lab", "up", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{tmp_path / 'nope.yaml'}:" in r.stderr and "cannot read" in r.stderr
    assert "building" not in r.stdout


def test_lab_up_refuses_an_invalid_topology_at_its_line(write):
    topo = write("name: bad\nkind: leaf-spine\nspines: 0\nleaves: 2\nhosts_per_leaf: 1\n"
                 "links:\n  host: {rate: 10Mbps, latency: 1us}\n  fabric: {rate: 10Mbps, latency: 1us}\n", "bad.yaml")
    r = _cli("lab", "up", str(topo))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{topo}:3:" in r.stderr and "spines" in r.stderr, r.stderr
    assert "building" not in r.stdout


def test_lab_up_refuses_p4runtime_switches_naming_each(write):
    topo = write("name: p4\nkind: leaf-spine\nspines: 1\nleaves: 2\nhosts_per_leaf: 1\n"
                 "links:\n  host: {rate: 10Mbps, latency: 1us}\n  fabric: {rate: 10Mbps, latency: 1us}\n"
                 "switches:\n  leaf1: {southbound: p4runtime, address: '127.0.0.1:9559'}\n"
                 "  leaf2: {southbound: p4runtime, address: '127.0.0.1:9560'}\n", "p4.yaml")
    r = _cli("lab", "up", str(topo))
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert [ln.split(": p4runtime")[0] for ln in lines] == [
        f"{topo}:10:23: switches.leaf1.southbound", f"{topo}:11:23: switches.leaf2.southbound"]
    assert "BMv2" in lines[0]


@pytest.mark.parametrize("target, why", [
    ("ssl:127.0.0.1:6653", "ssl: targets need switch certificates"),
    ("127.0.0.1:6653", "expected tcp:HOST:PORT"),
    ("tcp:127.0.0.1:0", "expected tcp:HOST:PORT"),
    ("tcp:127.0.0.1:65536", "expected tcp:HOST:PORT"),
    ("tcp:", "expected tcp:HOST:PORT"),
    ("tcp:a b:1", "expected tcp:HOST:PORT"),
])
def test_lab_up_refuses_a_bad_controller_target(target, why):
    r = _cli("lab", "up", str(MAIN_TOPOLOGY), "--controller", target)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"lab up: --controller {target}: {why}" in r.stderr, r.stderr


def test_controller_targets_are_normalised():
    from mininet_labs.lab.up import parse_target

    assert parse_target("tcp:127.0.0.1") == "tcp:127.0.0.1:6653"
    assert parse_target("tcp:10.1.2.3:7001") == "tcp:10.1.2.3:7001"
    assert parse_target("tcp:[::1]:7001") == "tcp:[::1]:7001"
    assert parse_target("tcp:ctl-1.example:6633") == "tcp:ctl-1.example:6633"


def test_lab_up_refuses_a_machine_that_cannot_build_it(monkeypatch, capsys):
    """Not root, Open vSwitch not running, ...: every missing requirement named, exit 2, and
    nothing touched (the lab lock is not even taken)."""
    from mininet_labs.lab import net as labnet
    from mininet_labs.lab import up
    from mininet_labs.lab.__main__ import main

    monkeypatch.setattr(up, "missing_here", lambda: [
        "not running as root (labs create namespaces and bridges)",
        "Open vSwitch is not running (ovs-vsctl show fails; make setup starts it)"])
    monkeypatch.setattr(labnet, "waiting_lab_lock", lambda *a, **k: pytest.fail("locked"))
    assert main(["up", str(MAIN_TOPOLOGY)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lab up: cannot build a lab fabric here: not running as root")
    assert "; Open vSwitch is not running" in err


def test_the_requirements_of_lab_up_are_those_of_an_ovs_lab(monkeypatch):
    from mininet_labs.lab import requirements as req
    from mininet_labs.lab import up

    monkeypatch.setattr(req.os, "geteuid", lambda: 1000)
    assert any(m.startswith("not running as root") for m in up.missing_here())


def test_bridges_speak_the_openflow_versions_a_topology_declares(write):
    from mininet_labs.lab.up import PROTOCOLS, bridge_protocols, load_fabric

    topo = write("name: t\nkind: leaf-spine\nspines: 1\nleaves: 2\nhosts_per_leaf: 1\n"
                 "links:\n  host: {rate: 10Mbps, latency: 1us}\n  fabric: {rate: 10Mbps, latency: 1us}\n"
                 "switches:\n  leaf1: {openflow_versions: [1.3]}\n"
                 "  spine1: {openflow_versions: ['1.3', '1.5']}\n")
    assert bridge_protocols(load_fabric(topo)) == {"leaf1": ("OpenFlow13",),
                                                   "spine1": ("OpenFlow13", "OpenFlow15")}
    assert PROTOCOLS == ("OpenFlow13", "OpenFlow15")


def test_target_rows_point_every_bridge_at_every_target():
    from mininet_labs.lab.net import target_rows

    text = " ".join(target_rows(["leaf1", "spine1"], ["tcp:10.0.0.9:6653", "tcp:10.0.0.10:6653"]))
    assert text.count('target="tcp:10.0.0.9:6653"') == 2
    assert text.count('target="tcp:10.0.0.10:6653"') == 2
    assert "set Bridge leaf1 controller=[@c0_0,@c0_1] fail_mode=secure" in text
    assert "set Bridge spine1 controller=[@c1_0,@c1_1] fail_mode=secure" in text


def test_lab_cleanup_tells_a_topology_from_an_experiment():
    from mininet_labs.lab.up import is_topology

    assert is_topology(MAIN_TOPOLOGY)
    assert not is_topology(ROOT / "mininet_labs" / "experiments" / "ecmp_vs_pinned.yaml")


# -- lab exec -----------------------------------------------------------------------------------------
@pytest.fixture
def sessions(tmp_path, monkeypatch):
    """A session directory of our own, root and mnexec as if present, and a fake host shell:
    a process whose command line holds ``mininet:h1`` (as Mininet's ``bash ... mininet:h1``)."""
    from mininet_labs.lab import net as labnet
    from mininet_labs.lab import up

    monkeypatch.setattr(labnet, "STATE_DIR", tmp_path)
    monkeypatch.setattr(up.os, "geteuid", lambda: 0)
    monkeypatch.setattr(up.shutil, "which", lambda name: f"/usr/bin/{name}")
    from mininet_labs.lab.wait import wait_until

    shell = subprocess.Popen(["bash", "-c", 'exec -a "bash mininet:h1" sleep 60'])
    try:
        wait_until(lambda: labnet._cmdline(shell.pid).startswith("bash mininet:h1 "), 10,
                   "the fake host shell to exec", every_s=0.01)
        yield tmp_path, shell.pid
    finally:
        shell.kill()
        shell.wait()


def _session(directory: Path, owner: int, hosts: dict[str, int]) -> None:
    (directory / f"up-{owner}.json").write_text(json.dumps({
        "pid": owner, "fabric": "leafspine-2x4x2",
        "hosts": {h: {"pid": p, "ipv4": "10.0.0.1", "mac": "x"} for h, p in hosts.items()}}))


def test_lab_exec_enters_the_namespace_of_the_hosts_shell(sessions):
    from mininet_labs.lab.up import host_command

    d, shell = sessions
    _session(d, os.getpid(), {"h1": shell, "h2": os.getpid()})
    assert host_command("h1", ["ping", "-c3", "10.0.0.3"]) == \
        ["mnexec", "-a", str(shell), "ping", "-c3", "10.0.0.3"]


def test_lab_exec_refuses_what_it_cannot_do(sessions, monkeypatch):
    from mininet_labs.lab import up
    from mininet_labs.lab.up import UpRefused, host_command

    d, shell = sessions
    with pytest.raises(UpRefused, match="no lab fabric is up on this machine"):
        host_command("h1", ["true"])
    # a session whose lab up process is gone does not count (pid 2**22 + 1 exceeds pid_max)
    _session(d, 2**22 + 1, {"h1": shell})
    with pytest.raises(UpRefused, match="no lab fabric is up"):
        host_command("h1", ["true"])
    _session(d, os.getpid(), {"h1": shell, "h2": os.getpid()})
    with pytest.raises(UpRefused, match=r"no host 'h9' in the lab fabric leafspine-2x4x2 "
                                        r"\(hosts: h1, h2\)"):
        host_command("h9", ["true"])
    with pytest.raises(UpRefused, match=rf"the shell of h2 \(pid {os.getpid()}\) is gone"):
        host_command("h2", ["true"])
    with pytest.raises(UpRefused, match="no command"):
        host_command("h1", [])
    monkeypatch.setattr(up.os, "geteuid", lambda: 1000)
    with pytest.raises(UpRefused, match="lab exec needs root"):
        host_command("h1", ["true"])


def test_lab_exec_without_a_fabric_exits_2():
    r = _cli("lab", "exec", "h1", "--", "true")
    if "no lab fabric is up" not in r.stderr and "needs root" not in r.stderr:
        pytest.skip(f"a lab fabric is up on this machine: {r.stderr.strip()}")
    assert r.returncode == 2


# -- the quickstart under Mininet -------------------------------------------------------------------
def _get(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        return dict(json.loads(r.read()))


@pytest.mark.mininet
@pytest.mark.skipif(REASON is not None, reason=f"Mininet lab unavailable: {REASON}")
@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 is missing: make setup "
                    "installs Debian's iperf3")
def test_lab_up_a_controller_and_its_live_view_then_nothing_left(tmp_path):
    from controller.model.topology import load_topology
    from controller.view import frames
    from mininet_labs.lab import net as labnet
    from mininet_labs.lab.processes import child_env, free_port, log_tail
    from mininet_labs.lab.wait import wait_until

    fabric = load_topology(MAIN_TOPOLOGY)
    names = {s.name for s in fabric.switches}
    of_port, view_port = free_port(), free_port()
    topo = MAIN_TOPOLOGY.relative_to(ROOT)
    policy = PINNED_POLICY.relative_to(ROOT)
    up_log, ctl_log = tmp_path / "up.log", tmp_path / "controller.log"
    # terminal 1
    with open(up_log, "w") as out:
        up = subprocess.Popen([sys.executable, "-m", "controller.cli", "lab", "up", str(topo),
                               "--controller", f"tcp:127.0.0.1:{of_port}"], cwd=ROOT,
                              env=child_env(), stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL)
    session = labnet.STATE_DIR / f"up-{up.pid}.json"
    ctl = server = client = None
    try:
        # another engineer's lab may hold the lab lock: lab up waits for it (up to 15 min)
        wait_until(lambda: session.exists() or up.poll() is not None, 960,
                   "lab up to build the fabric", every_s=0.5)
        assert up.poll() is None, log_tail(up_log, 40)
        text = up_log.read_text()
        assert "lab fabric leafspine-2x4x2 is up" in text, text
        for s in fabric.switches:  # every switch with its datapath id
            assert f"{s.dpid:016x}" in text
        for h in fabric.hosts:
            assert h.ipv4 in text
        doc = json.loads(session.read_text())
        assert set(doc["hosts"]) == {h.name for h in fabric.hosts}
        assert doc["targets"] == [f"tcp:127.0.0.1:{of_port}"]
        br = subprocess.run(["ovs-vsctl", "--format=json", "--columns=name,protocols,fail_mode,"
                             "other_config", "list", "Bridge"], capture_output=True, text=True,
                            check=True)
        rows = {r[0]: r for r in json.loads(br.stdout)["data"] if r[0] in names}
        assert set(rows) == names
        for name, row in rows.items():
            assert row[1] == ["set", ["OpenFlow13", "OpenFlow15"]] and row[2] == "secure"
            assert dict(row[3][1])["datapath-id"] == f"{fabric.switch_by_name[name].dpid:016x}"
        # terminal 2: the controller as the quickstart runs it
        with open(ctl_log, "w") as out:
            ctl = subprocess.Popen([sys.executable, "-m", "controller.cli", "controller", "-t",
                                    str(topo), "-p", str(policy), "--insecure", "--listen",
                                    f"127.0.0.1:{of_port}", "--view-listen",
                                    f"127.0.0.1:{view_port}"], cwd=ROOT, env=child_env(),
                                   stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_until(lambda: "all 6 switches programmed" in ctl_log.read_text(), 90,
                   "every switch programmed", every_s=0.5,
                   abort=lambda: None if ctl.poll() is None else log_tail(ctl_log, 30))
        snap = _get(f"http://127.0.0.1:{view_port}/api/snapshot")
        state = snap["state"]
        assert isinstance(state, dict)
        assert state["fabric"] == "leafspine-2x4x2"
        assert sorted(s["name"] for s in state["switches"] if s["connected"]) == sorted(names)
        assert {c["name"] for c in state["collectives"]} == {"ring-a", "ring-b"}
        # a host reaches another, on its leaf and across the spines
        for dst in ("10.0.0.2", "10.0.0.3", "10.0.0.8"):
            r = _cli("lab", "exec", "h1", "--", "ping", "-c3", "-W2", dst)
            assert r.returncode == 0 and " 0% packet loss" in r.stdout, r.stdout + r.stderr
        r = _cli("lab", "exec", "h1", "--", "ip", "-4", "-o", "addr", "show")
        assert "10.0.0.1/8" in r.stdout, r.stdout
        assert _cli("lab", "exec", "h1", "--", "false").returncode == 1
        # iperf3 between two hosts; the server is left running for the teardown to stop
        server = subprocess.Popen([sys.executable, "-m", "controller.cli", "lab", "exec", "h3",
                                   "--", "iperf3", "-s"], cwd=ROOT, env=child_env(),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: ":5201 " in _cli("lab", "exec", "h3", "--", "ss", "-ltn").stdout,
                   30, "iperf3 -s to listen on h3", every_s=0.5)
        client = subprocess.Popen([sys.executable, "-m", "controller.cli", "lab", "exec", "h1",
                                   "--", "iperf3", "-c", "10.0.0.3", "-t", "10"], cwd=ROOT,
                                  env=child_env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        # the live view sees it: h1's uplink loaded, drawn in a colour other than idle grey
        def loaded() -> dict[str, object] | None:
            st = _get(f"http://127.0.0.1:{view_port}/api/snapshot")["state"]
            assert isinstance(st, dict)
            link = st["links"]["h1->leaf1"]
            return link if link["utilisation"] > 0.3 else None

        link = wait_until(loaded, 30, "the view to show h1->leaf1 loaded", every_s=0.5)
        assert link["colour"] not in (frames.IDLE_COLOUR, frames.UNMEASURED_COLOUR), link
        out = client.communicate(timeout=60)[0]
        assert client.returncode == 0 and "receiver" in out, out
        assert server.poll() is None
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait()
        up.send_signal(signal.SIGTERM)
        try:
            up_rc = up.wait(timeout=120)
        except subprocess.TimeoutExpired:
            up.kill()
            up_rc = up.wait()
        if ctl is not None:
            ctl.send_signal(signal.SIGTERM)
            try:
                ctl.wait(timeout=30)
            except subprocess.TimeoutExpired:
                ctl.kill()
                ctl.wait()
        if server is not None:
            try:
                server.wait(timeout=10)  # lab up stopped it
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
                pytest.fail("the iperf3 server left on h3 outlived the teardown")
    text = up_log.read_text()
    assert up_rc == 0, text[-3000:]
    assert server is not None and f"stopped what was still running on the hosts: pid {server.pid} " \
        "on h3 (iperf3 -s)" in text, text[-2000:]
    assert "SIGTERM: tearing leafspine-2x4x2 down" in text
    assert "leafspine-2x4x2 torn down: no bridge, interface or host of it is left" in text
    # and independently of what it says (under the lab lock: the main fabric's switch names
    # are every other lab's too)
    with labnet.waiting_lab_lock():
        left = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True,
                              check=True).stdout.split()
        assert not names & set(left), left
        assert not [d for d in os.listdir("/sys/class/net") if d.partition("-eth")[0] in names]
    assert not session.exists()
    assert not labnet.state_file(up.pid).exists()
    assert _our_processes() == []


@pytest.mark.mininet
@pytest.mark.skipif(REASON is not None, reason=f"Mininet lab unavailable: {REASON}")
def test_lab_cleanup_of_a_topology_removes_what_a_killed_lab_up_left(tmp_path):
    """``kill -9`` of ``lab up`` leaves its bridges, veths and session file (``lab exec`` says
    no fabric is up all the same); ``aifabric lab cleanup TOPOLOGY.yaml`` removes them all."""
    from controller.model.topology import load_topology
    from mininet_labs.lab import net as labnet
    from mininet_labs.lab.processes import child_env, log_tail
    from mininet_labs.lab.up import left_behind
    from mininet_labs.lab.wait import wait_until

    topo = ROOT / "mininet_labs" / "topologies" / "leafspine_1x2x2.yaml"
    fabric = load_topology(topo)
    log = tmp_path / "up.log"
    with open(log, "w") as out:
        up = subprocess.Popen([sys.executable, "-m", "controller.cli", "lab", "up", str(topo)],
                              cwd=ROOT, env=child_env(), stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL)
    session = labnet.STATE_DIR / f"up-{up.pid}.json"
    try:
        wait_until(lambda: session.exists() or up.poll() is not None, 960,
                   "lab up to build the fabric", every_s=0.5)
        assert up.poll() is None, log_tail(log, 40)
    finally:
        up.kill()
        up.wait()
    shells = {h: int(v["pid"]) for h, v in json.loads(session.read_text())["hosts"].items()}
    left = left_behind(fabric, shells)
    assert {f"bridge {s.name}" for s in fabric.switches} <= set(left), left
    assert session.exists()  # (the host shells end by themselves: their stdin closed)
    r = _cli("lab", "exec", "h1", "--", "true")
    assert r.returncode == 2 and "no lab fabric is up" in r.stderr, r.stderr

    def cleaned() -> subprocess.CompletedProcess[str] | None:
        # the lab lock may be taken by another lab first (whose start removes the same)
        r = _cli("lab", "cleanup", str(topo))
        return r if r.returncode == 0 else None

    r = wait_until(cleaned, 960, "lab cleanup to get the lab lock", every_s=5)
    assert r.stdout.startswith("removed: "), r.stdout
    with labnet.waiting_lab_lock():  # another lab's bridges may have the same names
        assert left_behind(fabric, shells) == []
    assert not session.exists()
