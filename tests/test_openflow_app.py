"""The os-ken app driven with fake datapaths whose messages land in FakeOFTables."""

from __future__ import annotations

import logging

import pytest
from os_ken.lib.packet import arp, ethernet, packet
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller.drivers.openflow import packets
from controller.drivers.openflow.app import AifabricApp
from controller.model.topology import load_topology
from controller.policy import load_policy
from controller.runtime.state import ControllerRuntime
from controller.testing import FakeFabric, FakeOFTable
from tests.conftest import ECMP_POLICY, MAIN_TOPOLOGY
from tests.test_runtime_state import assert_full_reachability

FABRIC = load_topology(MAIN_TOPOLOGY)


class FakeDatapath:
    """Serialises every message like a real connection would, then applies it to a table."""

    ofproto = ofp
    ofproto_parser = parser

    def __init__(self, dpid: int, table: FakeOFTable):
        self.id = dpid
        self.address = ("127.0.0.1", 40000 + dpid)
        self.table = table
        self.sent: list = []

    def send_msg(self, msg):
        if msg.xid is None:
            msg.set_xid(len(self.sent) + 1)
        msg.serialize()
        self.sent.append(msg)
        self.table.apply_one(msg)


@pytest.fixture
def setup():
    rt = ControllerRuntime(FABRIC, load_policy(ECMP_POLICY, FABRIC))
    rt.initial_plan()
    app = AifabricApp(runtime=rt, lldp_interval_s=5.0, lldp_grace_s=5.0)
    ff = FakeFabric.empty(FABRIC)
    dps = {s.name: FakeDatapath(s.dpid, ff.tables[s.name]) for s in FABRIC.switches}
    return rt, app, ff, dps


def test_connect_pushes_full_plan(setup, caplog):
    rt, app, ff, dps = setup
    caplog.set_level(logging.INFO, logger="aifabric.openflow")
    for dp in dps.values():
        app.switch_connected(dp, now_s=0.0)
    assert_full_reachability(ff)
    assert all(type(dp.sent[-1]).__name__ == "OFPBarrierRequest" for dp in dps.values())
    assert "[leaf1 dpid=0x3] connected from" in caplog.text


def test_unknown_dpid_left_alone(setup, caplog):
    _, app, _, _ = setup
    dp = FakeDatapath(0x99, FakeOFTable("stranger"))
    app.switch_connected(dp)
    assert dp.sent == [] and 0x99 not in app.datapaths
    assert "[dpid=0x99 unknown]" in caplog.text and "leaving it alone" in caplog.text


def _arp_request(src_mac, src_ip, dst_ip) -> bytes:
    p = packet.Packet()
    p.add_protocol(ethernet.ethernet(dst="ff:ff:ff:ff:ff:ff", src=src_mac, ethertype=0x0806))
    p.add_protocol(arp.arp(opcode=arp.ARP_REQUEST, src_mac=src_mac, src_ip=src_ip,
                           dst_mac="00:00:00:00:00:00", dst_ip=dst_ip))
    p.serialize()
    return bytes(p.data)


def test_arp_answered_from_address_plan_never_flooded(setup):
    _, app, _, dps = setup
    h1, h3 = FABRIC.host_by_name["h1"], FABRIC.host_by_name["h3"]
    dp = dps["leaf1"]
    app.switch_connected(dp)
    dp.sent.clear()
    app.packet_in(dp, h1.port, _arp_request(h1.mac, h1.ipv4, h3.ipv4))
    (po,) = dp.sent
    assert isinstance(po, parser.OFPPacketOut)
    assert [a.port for a in po.actions] == [h1.port]  # back out of the asking port only
    reply = packet.Packet(po.data).get_protocol(arp.arp)
    assert (reply.opcode, reply.src_ip, reply.src_mac, reply.dst_ip, reply.dst_mac) == (
        arp.ARP_REPLY, h3.ipv4, h3.mac, h1.ipv4, h1.mac)
    dp.sent.clear()
    app.packet_in(dp, h1.port, _arp_request(h1.mac, h1.ipv4, h1.ipv4))  # gratuitous
    app.packet_in(dp, h1.port, _arp_request(h1.mac, h1.ipv4, "192.168.1.1"))  # unknown
    assert dp.sent == []


def _deliver_lldp(app, dps, wiring):
    """Deliver every LLDP packet-out through ``wiring`` ((switch, port) -> (switch, port))."""
    by_dpid = {dp.id: (name, dp) for name, dp in dps.items()}
    for dp in dps.values():
        for msg in dp.sent:
            if isinstance(msg, parser.OFPPacketOut) and packets.parse_lldp(msg.data):
                name = by_dpid[dp.id][0]
                peer = wiring.get((name, msg.actions[0].port))
                if peer and peer[0] in dps:
                    app.packet_in(dps[peer[0]], peer[1], bytes(msg.data), now_s=10.0)
        dp.sent.clear()


def test_lldp_matches_then_reports_miswiring(setup, caplog):
    _, app, _, dps = setup
    caplog.set_level(logging.INFO, logger="aifabric.openflow")
    for dp in dps.values():
        app.switch_connected(dp, now_s=0.0)
        dp.sent.clear()
    app.lldp_round(1.0)  # within the grace period: probes only, nothing reported
    _deliver_lldp(app, dps, FABRIC.port_map)
    assert app.check_links(10.0).ok
    assert "[leaf1 dpid=0x3] LLDP discovery matches the declared topology" in caplog.text
    assert "WARNING" not in caplog.text
    # swap leaf1's two uplinks
    wiring = dict(FABRIC.port_map)
    p3, p4 = FABRIC.port_towards("leaf1", "spine1"), FABRIC.port_towards("leaf1", "spine2")
    a, b = wiring[("leaf1", p3)], wiring[("leaf1", p4)]
    wiring[("leaf1", p3)], wiring[("leaf1", p4)] = b, a
    wiring[b], wiring[a] = ("leaf1", p3), ("leaf1", p4)
    caplog.clear()
    app.lldp_round(10.0)
    _deliver_lldp(app, dps, wiring)
    report = app.check_links(10.0)
    assert len(report.miswired) == 2 and len(report.missing) == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 4
    assert all(r.getMessage().startswith("[") and "dpid=0x" in r.getMessage() for r in warnings)


def test_port_down_sends_only_changes(setup, caplog):
    rt, app, ff, dps = setup
    caplog.set_level(logging.INFO, logger="aifabric.openflow")
    for dp in dps.values():
        app.switch_connected(dp)
        dp.sent.clear()
    port = FABRIC.port_towards("leaf1", "spine1")
    ff.set_link("leaf1", "spine1", False)
    changes = app.port_changed(dps["leaf1"].id, port, False)
    assert changes
    for name, dp in dps.items():
        if name in changes:
            assert len(dp.sent) == changes[name].count + 1  # + barrier
            assert f"{name} dpid=" in caplog.text
        else:
            assert dp.sent == []
    assert_full_reachability(ff, avoid=frozenset({frozenset({"leaf1", "spine1"})}))
