"""``aifabric doctor``: one line per check, exit 0/1; a test per check that fails it (and the
same checks passing against fakes: an etcd HTTP endpoint, an OpenFlow passive listener, a
P4Runtime server; and Open vSwitch's own management socket when it runs here)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import socket
import struct
import subprocess
import threading
import time
from concurrent import futures
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner
from finsy.proto import p4r, p4r_grpc

from controller.cli import main
from controller.config.model import ServiceConfig
from controller.doctor import (
    TIME_ERROR,
    check_audit,
    check_bridges,
    check_certificates,
    check_clock,
    check_etcd,
    check_switches,
    run_checks,
)
from controller.drivers.ovs.bridges import BridgeInfo, parse_bridges
from controller.model.topology import load_topology
from controller.security.certs import init_dev_pki, load_certificate
from mininet_labs.lab.processes import free_port
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY

NOW = dt.datetime.now(dt.UTC)


def _status(lines, name):
    return [c.status for c in lines if c.name == name]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    init_dev_pki(d)
    return d


def _cfg(**sections) -> ServiceConfig:
    return ServiceConfig.model_validate({"topology": str(MAIN_TOPOLOGY),
                                         "policy": str(PINNED_POLICY), **sections})


# -- config ----------------------------------------------------------------------------------
def test_config_check_fails_on_an_invalid_file_and_the_command_exits_1(tmp_path):
    f = tmp_path / "aifabric.yaml"
    f.write_text("openflow: {lisen: x}\n")
    r = CliRunner().invoke(main, ["doctor", "--config", str(f)])
    assert r.exit_code == 1
    assert r.stdout.splitlines() == [f"FAIL config: {f}:1:12: openflow.lisen: unknown key"]


def test_config_check_fails_on_a_policy_that_does_not_fit_the_topology(tmp_path):
    lines = run_checks(None, lambda: _cfg(policy=str(tmp_path / "missing.yaml"),
                                          tls={"insecure": True}),
                       clock_state=lambda: 0)
    assert lines[0].status == "FAIL" and "missing.yaml" in lines[0].detail


def test_a_good_standalone_config_passes(pki, tmp_path):
    f = tmp_path / "aifabric.yaml"
    f.write_text(f"topology: {MAIN_TOPOLOGY}\npolicy: {PINNED_POLICY}\n"
                 f"tls: {{certs_dir: {pki}}}\n")
    lines = run_checks(str(f), lambda: _cfg(tls={"certs_dir": str(pki)},
                                            audit={"file": str(tmp_path / "a" / "audit.jsonl")}),
                       clock_state=lambda: 0,
                       bridges=lambda: None)  # this machine's bridges are other tests'
    assert {c.status for c in lines} <= {"PASS", "SKIP"}, [str(c) for c in lines]
    assert [c.name for c in lines][:3] == ["config", "certificates", "etcd"]
    assert sum(c.name.startswith("switch ") for c in lines) == 6  # one line per switch


# -- certificates ------------------------------------------------------------------------------
def test_certificates_missing(pki):
    lines = check_certificates(_cfg(tls={"certs_dir": str(pki), "ca": str(pki / "nope.crt")}), NOW)
    assert _status(lines, "certificates") == ["FAIL"] and "nope.crt" in lines[0].detail


def test_certificates_key_not_matching(pki):
    lines = check_certificates(_cfg(tls={"certs_dir": str(pki), "key": str(pki / "switch.key")}),
                               NOW)
    assert any(c.status == "FAIL" and "does not match" in c.detail for c in lines)


def test_certificates_not_issued_by_the_ca(pki, tmp_path):
    other = tmp_path / "other"
    init_dev_pki(other)
    lines = check_certificates(_cfg(tls={"certs_dir": str(pki), "ca": str(other / "ca.crt")}),
                               NOW)
    assert any(c.status == "FAIL" and "not issued by" in c.detail for c in lines)


def test_certificates_expiring_within_30_days(tmp_path):
    short = tmp_path / "short"
    init_dev_pki(short, days=40)
    cfg = _cfg(tls={"certs_dir": str(short)})
    assert [c.status for c in check_certificates(cfg, NOW)] == ["PASS"]
    end = load_certificate(short / "controller.crt").not_valid_after_utc
    later = check_certificates(cfg, end - dt.timedelta(days=24, hours=12))
    assert later and all(c.status == "FAIL" and "expires in 24 day(s)" in c.detail
                         for c in later), [str(c) for c in later]


def test_no_tls_material_without_insecure_fails():
    assert _status(check_certificates(_cfg(), NOW), "certificates") == ["FAIL"]
    assert _status(check_certificates(_cfg(tls={"insecure": True}), NOW), "certificates") == \
        ["SKIP"]


# -- etcd and clocks (a fake etcd HTTP endpoint) -------------------------------------------------
class _FakeEtcd(BaseHTTPRequestHandler):
    healthy = True
    skew_s = 0.0

    def do_GET(self):  # noqa: N802
        body = ({"etcdserver": "3.4.99", "etcdcluster": "3.4.0"} if self.path == "/version"
                else {"health": "true" if self.healthy else "false", "reason": "NOSPACE"})
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def date_time_string(self, timestamp=None):
        return formatdate(time.time() + self.skew_s, usegmt=True)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_etcd():
    def start(healthy=True, skew_s=0.0):
        handler = type("H", (_FakeEtcd,), {"healthy": healthy, "skew_s": skew_s})
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"127.0.0.1:{srv.server_address[1]}"
    servers: list = []
    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def _cluster(addr: str) -> ServiceConfig:
    return _cfg(cluster={"url": f"etcd://{addr}", "replica": "r1"})


def test_etcd_reachable_with_version_and_health(fake_etcd):
    lines, skews = check_etcd(_cluster(fake_etcd()))
    assert [c.status for c in lines] == ["PASS"] and "etcd 3.4.99 (cluster 3.4.0), healthy" in \
        lines[0].detail
    assert len(skews) == 1 and abs(skews[0][1]) <= 1.5
    assert all(c.status == "PASS" for c in check_clock(skews, 0))


def test_etcd_unreachable_fails():
    lines, _ = check_etcd(_cluster(f"127.0.0.1:{free_port()}"))
    assert [c.status for c in lines] == ["FAIL"] and "unreachable" in lines[0].detail


def test_etcd_unhealthy_fails(fake_etcd):
    lines, _ = check_etcd(_cluster(fake_etcd(healthy=False)))
    assert [c.status for c in lines] == ["FAIL"] and "NOT healthy" in lines[0].detail


def test_audit_file_appendable_missing_or_not_a_file(tmp_path):
    ok = check_audit(_cfg(audit={"file": str(tmp_path / "new" / "audit.jsonl")}))
    assert [c.status for c in ok] == ["PASS"] and "will be created" in ok[0].detail
    (tmp_path / "audit.jsonl").write_text("")
    assert [c.status for c in check_audit(_cfg(audit={"file": str(tmp_path / "audit.jsonl")}))] \
        == ["PASS"]
    bad = check_audit(_cfg(audit={"file": str(tmp_path)}))
    assert [c.status for c in bad] == ["FAIL"] and "not a regular file" in bad[0].detail
    under_a_file = check_audit(_cfg(audit={"file": str(tmp_path / "audit.jsonl" / "x")}))
    assert [c.status for c in under_a_file] == ["FAIL"]
    assert "cannot be created" in under_a_file[0].detail
    unset = check_audit(_cfg())
    assert [c.status for c in unset] == ["WARN"] and "lost at a restart" in unset[0].detail
    assert [c.status for c in check_audit(_cfg(cluster={"url": "etcd://127.0.0.1:2379",
                                                        "replica": "r1"}))] == ["SKIP"]


def test_etcd_skipped_when_standalone():
    assert [c.status for c in check_etcd(_cfg())[0]] == ["SKIP"]


def test_clock_skew_against_etcd_fails(fake_etcd):
    _, skews = check_etcd(_cluster(fake_etcd(skew_s=3600)))
    lines = check_clock(skews, 0)
    assert [c.status for c in lines] == ["PASS", "FAIL"]
    assert 3590 < skews[0][1] < 3610 and "at most ±2 s" in lines[1].detail


def test_an_unsynchronised_kernel_clock_warns():
    assert [c.status for c in check_clock([], TIME_ERROR)] == ["WARN"]


# -- switches ------------------------------------------------------------------------------------
def _openflow_listener(dpid: int) -> str:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve():
        conn, _ = srv.accept()
        with conn, srv:
            conn.recv(8)                                            # HELLO
            conn.sendall(struct.pack("!BBHI", 4, 0, 8, 1))
            conn.recv(8)                                            # FEATURES_REQUEST
            conn.sendall(struct.pack("!BBHIQIBBxxII", 4, 6, 32, 2, dpid, 0, 254, 0, 0, 0))

    threading.Thread(target=serve, daemon=True).start()
    return f"127.0.0.1:{srv.getsockname()[1]}"


class _P4Server(p4r_grpc.P4RuntimeServicer):
    def __init__(self, device_id: int):
        self.device_id = device_id

    def Capabilities(self, request, context):  # noqa: N802
        return p4r.CapabilitiesResponse(p4runtime_api_version="1.3.0")

    def GetForwardingPipelineConfig(self, request, context):  # noqa: N802
        if request.device_id != self.device_id:
            context.abort(grpc.StatusCode.NOT_FOUND, "Invalid device id")
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "No forwarding pipeline config set")


@pytest.fixture
def p4_server():
    servers = []

    def start(device_id: int) -> str:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        p4r_grpc.add_P4RuntimeServicer_to_server(_P4Server(device_id), server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"
    yield start
    for s in servers:
        s.stop(0)


def _fabric(tmp_path, switches: str):
    f = tmp_path / "topo.yaml"
    f.write_text(Path(MAIN_TOPOLOGY).read_text() + "switches:\n" + switches)
    return load_topology(f)


def _insecure() -> ServiceConfig:
    return _cfg(tls={"insecure": True})


def test_switches_reachable_and_speaking_their_protocol(tmp_path, p4_server):
    leaf2_dpid = load_topology(MAIN_TOPOLOGY).switch_by_name["leaf2"].dpid
    fab = _fabric(tmp_path, f"  leaf1: {{southbound: p4runtime, address: '{p4_server(5)}', "
                            f"device_id: 5}}\n  leaf2: {{address: '{_openflow_listener(leaf2_dpid)}'}}\n")
    lines = {c.name: c for c in check_switches(_insecure(), fab)}
    assert lines["switch leaf1"].status == "PASS" and "P4Runtime 1.3.0, device_id 5" in \
        lines["switch leaf1"].detail
    assert lines["switch leaf2"].status == "PASS" and f"datapath id {leaf2_dpid:#x}" in \
        lines["switch leaf2"].detail
    assert lines["switch spine1"].status == "SKIP"


def test_a_p4runtime_switch_that_does_not_answer_fails(tmp_path):
    fab = _fabric(tmp_path, f"  leaf1: {{southbound: p4runtime, address: '127.0.0.1:{free_port()}'}}\n")
    line = {c.name: c for c in check_switches(_insecure(), fab)}["switch leaf1"]
    assert line.status == "FAIL" and "no P4Runtime answer" in line.detail


def test_a_p4runtime_switch_with_another_device_id_fails(tmp_path, p4_server):
    fab = _fabric(tmp_path, f"  leaf1: {{southbound: p4runtime, address: '{p4_server(9)}', "
                            "device_id: 5}\n")
    line = {c.name: c for c in check_switches(_insecure(), fab)}["switch leaf1"]
    assert line.status == "FAIL" and "device_id 5: NOT_FOUND" in line.detail


def test_an_openflow_switch_with_another_datapath_id_fails(tmp_path):
    fab = _fabric(tmp_path, f"  leaf1: {{address: '{_openflow_listener(0xABC)}'}}\n")
    line = {c.name: c for c in check_switches(_insecure(), fab)}["switch leaf1"]
    assert line.status == "FAIL" and "datapath id 0xabc, the topology says" in line.detail


def test_an_address_that_is_not_openflow_fails(tmp_path, p4_server):
    fab = _fabric(tmp_path, f"  leaf1: {{address: '127.0.0.1:{free_port()}'}}\n")
    line = {c.name: c for c in check_switches(_insecure(), fab)}["switch leaf1"]
    assert line.status == "FAIL" and "OpenFlow" in line.detail


def _ovs_reason() -> str | None:
    import os

    if os.geteuid() != 0 or shutil.which("ovs-vsctl") is None:
        return "needs root and Open vSwitch"
    r = subprocess.run(["ovs-vsctl", "--timeout=3", "show"], capture_output=True)
    return None if r.returncode == 0 else "Open vSwitch is not running"


@pytest.mark.mininet
@pytest.mark.skipif(_ovs_reason() is not None, reason=f"{_ovs_reason()}")
def test_open_vswitch_management_socket_answers_with_the_bridge_dpid(tmp_path):
    import os

    bridge = f"doc{os.getpid() % 100000}"
    dpid = load_topology(MAIN_TOPOLOGY).switch_by_name["leaf3"].dpid
    try:
        subprocess.run(["ovs-vsctl", "add-br", bridge, "--", "set", "bridge", bridge,
                        "datapath_type=netdev", "fail_mode=secure", "protocols=OpenFlow13",
                        f"other-config:datapath-id={dpid:016x}"], check=True, timeout=30)
        mgmt = Path(f"/var/run/openvswitch/{bridge}.mgmt")
        deadline = time.monotonic() + 10
        while not mgmt.exists():
            assert time.monotonic() < deadline, f"{mgmt} never appeared"
            time.sleep(0.1)
        fab = _fabric(tmp_path, f"  leaf3: {{address: 'unix:{mgmt}'}}\n")
        line = {c.name: c for c in check_switches(_insecure(), fab)}["switch leaf3"]
        deadline = time.monotonic() + 10
        while "datapath id" in line.detail and line.status == "FAIL" and \
                time.monotonic() < deadline:  # the dpid is applied a moment after add-br
            time.sleep(0.2)
            line = {c.name: c for c in check_switches(_insecure(), fab)}["switch leaf3"]
        assert line.status == "PASS", str(line)
    finally:
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", bridge], timeout=30)


# -- Open vSwitch bridges (issue 23, point 9) --------------------------------------------------------
_BRIDGES_JSON = ('{"data":[["leaf1","0000000000000003",["set",[]],"secure"],'
                 '["leaf2","0000000000000004",["uuid","6b0e"],["set",[]]],'
                 '["other","00000000000000aa",["set",[["uuid","6b0f"],["uuid","6b10"]]],'
                 '"secure"]],"headings":["name","datapath_id","controller","fail_mode"]}')
_CONTROLLERS_JSON = ('{"data":[[["uuid","6b0e"],"tcp:127.0.0.1:6653"],[["uuid","6b0f"],'
                     '"ssl:10.0.0.9:6653"],[["uuid","6b10"],"tcp:10.0.0.8:6653"]],'
                     '"headings":["_uuid","target"]}')


def test_bridges_are_read_from_ovs_vsctl_json():
    assert parse_bridges(_BRIDGES_JSON, _CONTROLLERS_JSON) == [
        ("leaf1", 3, (), "secure"), ("leaf2", 4, ("tcp:127.0.0.1:6653",), ""),
        ("other", 0xAA, ("ssl:10.0.0.9:6653", "tcp:10.0.0.8:6653"), "secure")]
    with pytest.raises(ValueError):
        parse_bridges("not json", _CONTROLLERS_JSON)


def test_a_bridge_that_would_be_flushed_or_would_flood_warns():
    fab = load_topology(MAIN_TOPOLOGY)
    kinds = {s.name: "openflow" for s in fab.switches}
    d = {s.name: s.dpid for s in fab.switches}
    bridges = [BridgeInfo("br1", d["leaf1"], (), "secure", 5, 1),       # entries, no controller
               BridgeInfo("br2", d["leaf2"], ("tcp:127.0.0.1:6653",), "", 0, 0),  # standalone
               BridgeInfo("br3", d["leaf3"], ("tcp:127.0.0.1:6653",), "secure", 40, 2),
               BridgeInfo("br4", d["leaf4"], (), "secure", 0, 0),       # empty: nothing to lose
               BridgeInfo("brx", 0xBEEF, (), "", 9, 9)]                 # not a fabric switch
    lines = check_bridges(fab, kinds, bridges)
    got = {c.name: (c.status, c.detail) for c in lines}
    assert sorted(got) == ["bridge br1", "bridge br2", "bridge br3", "bridge br4"]
    assert got["bridge br1"][0] == "WARN" and "5 flow entries and 1 group(s)" in \
        got["bridge br1"][1] and "first Controller row" in got["bridge br1"][1]
    assert got["bridge br2"][0] == "WARN" and "fail_mode=standalone" in got["bridge br2"][1]
    assert got["bridge br3"][0] == "PASS" and got["bridge br4"][0] == "PASS"
    # a P4Runtime switch with that dpid is not a bridge of ours; no local Open vSwitch: skipped
    assert check_bridges(fab, {**kinds, "leaf1": "p4runtime"}, bridges[:1])[0].status == "SKIP"
    assert [c.status for c in check_bridges(fab, kinds, None)] == ["SKIP"]


@pytest.mark.mininet
@pytest.mark.skipif(_ovs_reason() is not None, reason=f"{_ovs_reason()}")
def test_open_vswitch_flushes_a_bridge_at_its_first_controller_and_doctor_warns_before(tmp_path):
    """What point 9 of issue 23 documents, on the real Open vSwitch: entries added to a bridge
    without a controller are gone once it gets one (doctor warns before); a changed target
    keeps them."""
    import os

    from controller.drivers.ovs.bridges import read_bridges

    bridge = f"fl{os.getpid() % 100000}"
    fab = load_topology(MAIN_TOPOLOGY)
    dpid = fab.switch_by_name["leaf4"].dpid
    kinds = {s.name: "openflow" for s in fab.switches}

    def ours():
        got = [b for b in read_bridges() or [] if b.name == bridge]
        return got[0] if got else None

    def of(*args):
        return subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", *args], capture_output=True,
                              text=True, check=True, timeout=30).stdout
    try:
        subprocess.run(["ovs-vsctl", "add-br", bridge, "--", "set", "bridge", bridge,
                        "datapath_type=netdev", "fail_mode=secure", "protocols=OpenFlow13",
                        f"other-config:datapath-id={dpid:016x}"], check=True, timeout=30)
        deadline = time.monotonic() + 10
        while (b := ours()) is None or b.dpid != dpid:
            assert time.monotonic() < deadline, "the bridge never got its datapath id"
            time.sleep(0.2)
        of("add-flow", bridge, "cookie=0xbeef,priority=7,ip,actions=drop")
        of("add-group", bridge, "group_id=77,type=select,bucket=output:1")
        b = ours()
        assert b is not None and (b.flows, b.groups, b.targets) == (1, 1, ())
        (line,) = [c for c in check_bridges(fab, kinds, [b]) if c.name == f"bridge {bridge}"]
        assert line.status == "WARN" and "first Controller row" in line.detail
        subprocess.run(["ovs-vsctl", "set-controller", bridge, "tcp:127.0.0.1:9"], check=True,
                       timeout=30)
        deadline = time.monotonic() + 10
        while (b := ours()) is None or b.flows or b.groups:
            assert time.monotonic() < deadline, f"not flushed: {b}"
            time.sleep(0.2)
        of("add-flow", bridge, "cookie=0xbeef,priority=7,ip,actions=drop")
        # ovs-vsctl returns once ovs-vswitchd has applied the change (it waits for cur_cfg):
        # a flush would have happened by then
        subprocess.run(["ovs-vsctl", "set-controller", bridge, "tcp:127.0.0.1:10"], check=True,
                       timeout=30)
        b = ours()
        assert b is not None and b.flows == 1 and b.targets == ("tcp:127.0.0.1:10",)
        assert [c.status for c in check_bridges(fab, kinds, [b])] == ["PASS"]
    finally:
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", bridge], timeout=30)
