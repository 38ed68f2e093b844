"""The ARP responder on OpenFlow (:mod:`controller.drivers.openflow.arp`): a request for a fabric
host is answered by its edge switch, from the plan, with no controller. Encoded for 1.3 and 1.5,
decoded back from what Open vSwitch 3.1 reports (recorded bytes), executed by the flow-table
simulator for every host pair of the main lab fabric."""

from __future__ import annotations

import pytest
from os_ken.ofproto import ofproto_parser

from controller.drivers.openflow import encode
from controller.drivers.openflow.arp import decode_reply, reply_actions
from controller.drivers.openflow.dialect import DIALECTS, OF13, OF15, FlowRecord
from controller.model import load_topology
from controller.plan.build import build_plan
from controller.plan.model import (
    ETH_TYPE_ARP,
    PRIO_ARP_REPLY,
    Action,
    ArpReply,
    FlowIntent,
    Match,
    SwitchChanges,
    SwitchPlan,
    arp_request_match,
)
from controller.policy import load_policy
from controller.testing import FakeFabric, FakeOFTable
from tests.conftest import ECMP_POLICY, MAIN_TOPOLOGY

D13, D15 = OF13(), OF15()
COOKIE = encode.COOKIE


def _entry(ip: str, mac: str) -> FlowIntent:
    return FlowIntent(0, PRIO_ARP_REPLY, arp_request_match(ip), Action.answer(ArpReply(ip, mac)),
                      f"arp {ip}")


# What Open vSwitch 3.1.0 (userspace datapath) answered to a flow statistics request (OpenFlow
# 1.3) and a flow description request (1.5), cookie 0xa1fab000000001, on a bridge holding the
# responder for 10.0.0.4 (written over 1.3: NXAST_REG_MOVE) and for 10.0.0.6 (written over 1.5:
# OFPAT_COPY_FIELD). Over 1.3 the first comes back as NXAST_REG_MOVE with NXM headers, the second
# as the ONF copy-field extension; over 1.5 both as OFPAT_COPY_FIELD.
OVS31_OF13 = (
    "041301f800000002000100000000000000e800000000001d2adb11c0044c0000000000000000000000a1fab0"
    "00000001000000000000000000000000000000000001001880000a02080680002a02000180002e040a000004"
    "000400a000000000ffff00180000232000060030000000000000040600000206001900108000080602000000"
    "000400000019001080002a020002000000000000ffff00180000232000060030000000000001220600012406"
    "00190010800030060200000000040000ffff0018000023200006002000000000000020040000220400190010"
    "80002c040a0000040000000000000010fffffff8ffe5000000000000010000000000001d2acbcf80044c0000"
    "000000000000000000a1fab000000001000000000000000000000000000000000001001880000a0208068000"
    "2a02000180002e040a000006000400b800000000ffff00204f4e46000c800000003000000000000080000806"
    "8000060600000000001900108000080602000000000600000019001080002a020002000000000000ffff0020"
    "4f4e46000c800000003000000000000080003006800032060000000000190010800030060200000000060000"
    "ffff00204f4e46000c800000002000000000000080002c0480002e04000000000019001080002c040a000006"
    "0000000000000010fffffff8ffe5000000000000")
OVS31_OF15 = (
    "06130220000000020001000000000000010800000000044c000000000000000000a1fab00000000100010018"
    "80000a02080680002a02000180002e040a00000400000034800200080000001d2aea5400800202080000001d"
    "0000000080020808000000000000000080020a08000000000000000000000000000400a000000000001c0018"
    "0030000000000000800008068000060600000000001900108000080602000000000400000019001080002a02"
    "0002000000000000001c00180030000000000000800030068000320600000000001900108000300602000000"
    "00040000001c0018002000000000000080002c0480002e04000000000019001080002c040a00000400000000"
    "00000010fffffff8ffe5000000000000010800000000044c000000000000000000a1fab00000000100010018"
    "80000a02080680002a02000180002e040a00000600000034800200080000001d2adb11c0800202080000001d"
    "0000000080020808000000000000000080020a08000000000000000000000000000400a000000000001c0018"
    "0030000000000000800008068000060600000000001900108000080602000000000600000019001080002a02"
    "0002000000000000001c00180030000000000000800030068000320600000000001900108000300602000000"
    "00060000001c0018002000000000000080002c0480002e04000000000019001080002c040a00000600000000"
    "00000010fffffff8ffe5000000000000")


def _parse(version: int, hexdump: str) -> list:
    d = DIALECTS[version]
    buf = bytes.fromhex(hexdump)
    msg = ofproto_parser.msg(d.desc, buf[0], buf[1], len(buf), 2, buf)
    assert msg is not None, "os-ken could not parse the reply"
    return d.flow_records(msg.body)


@pytest.mark.parametrize("version,hexdump", [(4, OVS31_OF13), (6, OVS31_OF15)],
                         ids=["of13", "of15"])
def test_what_open_vswitch_reports_decodes_to_the_plan(version, hexdump):
    """Every spelling of a field copy OVS 3.1 answers with (NXM reg-move, ONF copy-field, 1.5
    copy-field) decodes to the entry we wrote: a reconnect sends nothing."""
    d = DIALECTS[version]
    want = {_entry("10.0.0.4", "02:00:00:00:00:04"), _entry("10.0.0.6", "02:00:00:00:00:06")}
    dec = encode.decode_state("leaf1", 3, _parse(version, hexdump), [], d)
    assert dec.plan.flows == want and dec.stale == ()
    changes = SwitchChanges("leaf1")  # nothing to change: nothing is encoded
    assert encode.encode_changes(changes, dec.plan, dec.groups, d, dec.stale).messages == ()


@pytest.mark.parametrize("d", [D13, D15], ids=["of13", "of15"])
def test_encode_serialise_parse_decode_round_trip(d):
    """Our own flow-mod, through the wire format and os-ken's parser (patched for 1.5's
    copy-field), decodes back to the intent; 1.3 copies with Nicira's reg-move (OVS refuses it
    on 1.5), 1.5 with OFPAT_COPY_FIELD."""
    fi = _entry("10.0.0.3", "02:00:00:00:00:03")
    mod = encode.flow_add(fi, None, d)
    kinds = [type(a).__name__ for a in mod.instructions[0].actions]
    move = "NXActionRegMove" if d.version == 4 else "OFPActionCopyField"
    assert kinds == [move, "OFPActionSetField", "OFPActionSetField", move, "OFPActionSetField",
                     move, "OFPActionSetField", "OFPActionOutput"]
    buf = d.serialize(mod, 7)
    back = ofproto_parser.msg(d.desc, buf[0], buf[1], len(buf), 7, buf)
    assert encode.decode_match(back.match) == fi.match
    assert encode.decode_action(back.instructions, {}, d) == fi.action


@pytest.mark.parametrize("d", [D13, D15], ids=["of13", "of15"])
def test_a_responder_that_is_not_ours_exactly_is_not_decoded(d):
    good = reply_actions(ArpReply("10.0.0.3", "02:00:00:00:00:03"), d)
    assert decode_reply(good, d) == ArpReply("10.0.0.3", "02:00:00:00:00:03")
    p = d.parser
    assert decode_reply(good[:-1], d) is None                       # no output
    assert decode_reply(good[:-1] + [p.OFPActionOutput(3)], d) is None  # not back
    assert decode_reply([good[1], good[0], *good[2:]], d) is None   # set before move
    swapped = [*good[:5], d.copy_field("arp_tpa", "arp_spa", 32), *good[6:]]
    assert decode_reply(swapped, d) is None
    bad_ip = [*good[:6], p.OFPActionSetField(arp_spa="10.0.0.9"), good[7]]
    # a well-formed reply for 10.0.0.9 on the match of 10.0.0.3 is not one of our entries
    rec = FlowRecord(0, PRIO_ARP_REPLY, COOKIE, encode.encode_match(
        arp_request_match("10.0.0.3"), d),
        (p.OFPInstructionActions(d.ofp.OFPIT_APPLY_ACTIONS, bad_ip),))
    dec = encode.decode_state("leaf1", 3, [rec], [], d)
    assert dec.plan.flows == frozenset() and dec.stale == (rec,)


def test_arp_match_needs_the_arp_ethertype():
    with pytest.raises(encode.EncodeError, match="ARP fields need eth_type 0x0806"):
        encode.encode_match(Match(arp_tpa="10.0.0.1"))
    with pytest.raises(encode.EncodeError, match="arp_op=70000 does not fit"):
        encode.encode_match(Match(eth_type=ETH_TYPE_ARP, arp_op=70000))


@pytest.mark.parametrize("version", [4, 6], ids=["of13", "of15"])
def test_every_host_resolves_every_other_from_its_edge_switch(version):
    """The main lab fabric's plan in the simulator: each host's broadcast request for any fabric
    address comes back from its own edge switch, out of the port it came in by, as the RFC 826
    reply; nothing reaches the controller; an address the fabric does not hold is dropped;
    switches without hosts hold no ARP entry."""
    fabric = load_topology(MAIN_TOPOLOGY)
    policy = load_policy(ECMP_POLICY, fabric)
    if version == 4:  # OpenFlow 1.3: no group selection properties; each switch hashes its way
        routing = policy.routing.model_copy(update={"ecmp": policy.routing.ecmp.model_copy(
            update={"selection": "switch_default"})})
        policy = policy.model_copy(update={"routing": routing})
    plan = build_plan(fabric, policy).plan
    ff = FakeFabric.empty(fabric)
    for name, sp in plan.switches.items():
        ff.tables[name].apply(encode.encode_full(sp, DIALECTS[version]))
    edges = {h.leaf for h in fabric.hosts}
    for sw in fabric.switches:
        arp = [f for f in plan.switches[sw.name].flows if f.match.eth_type == ETH_TYPE_ARP]
        assert len(arp) == (len(fabric.hosts) if sw.name in edges else 0)
    for src in fabric.hosts:
        for dst in fabric.hosts:
            reply = ff.arp(src.name, dst.ipv4)
            assert reply == {"eth_type": ETH_TYPE_ARP, "eth_src": dst.mac, "eth_dst": src.mac,
                             "arp_op": 2, "arp_sha": dst.mac, "arp_spa": dst.ipv4,
                             "arp_tha": src.mac, "arp_tpa": src.ipv4}, (src.name, dst.name)
        assert ff.arp(src.name, "10.0.9.9") is None
        # a reply or an announcement is not turned around
        leaf = ff.tables[src.leaf]
        announce = {"eth_type": ETH_TYPE_ARP, "arp_op": 2, "arp_tpa": src.ipv4,
                    "in_port": src.port}
        assert leaf.lookup(announce) == set()


def test_the_simulator_refuses_what_it_does_not_simulate():
    t = FakeOFTable("s")
    p = D13.parser
    mod = encode.flow_add(_entry("10.0.0.3", "02:00:00:00:00:03"), None, D13)
    mod.instructions[0].actions[0] = p.NXActionRegMove(src_field="eth_src", dst_field="arp_spa",
                                                       n_bits=48)
    t.apply([mod])
    pkt = {"eth_type": ETH_TYPE_ARP, "arp_op": 1, "arp_tpa": "10.0.0.3", "eth_src": "x",
           "in_port": 1}
    from controller.testing import FakeOFError

    with pytest.raises(FakeOFError, match="not simulated"):
        t.execute(pkt)
    sp = SwitchPlan("s", 1, frozenset({_entry("10.0.0.3", "02:00:00:00:00:03")}))
    t2 = FakeOFTable("s")
    t2.apply(encode.encode_full(sp, D13))
    with pytest.raises(FakeOFError, match="lacks"):
        t2.execute({"eth_type": ETH_TYPE_ARP, "arp_op": 1, "arp_tpa": "10.0.0.3", "in_port": 1})
