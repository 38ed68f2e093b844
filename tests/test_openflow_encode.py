"""Encoders: plan intents ↔ os-ken OpenFlow 1.3/1.5 messages (no connection), group ids
allocated per switch, read-back decoded into the same intents."""

from __future__ import annotations

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser
from os_ken.ofproto import ofproto_v1_5 as ofp15

from controller.drivers.openflow import encode
from controller.drivers.openflow.dialect import (
    OF13,
    OF15,
    Bucket,
    GroupRecord,
    parse_selection_property,
    selection_property,
)
from controller.plan.model import (
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    PRIO_PINNED,
    Action,
    ArpReply,
    EcmpHash,
    FlowIntent,
    Match,
    NextHopSet,
    SwitchChanges,
    SwitchPlan,
    arp_request_match,
)
from controller.testing import FakeOFTable
from controller.testing.fakeswitch import FakeSwitch

D13, D15 = OF13(), OF15()
M3 = Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.3")


def test_match_full_tcp():
    m = Match(eth_type=ETH_TYPE_IPV4, ipv4_src="10.0.0.1", ipv4_dst="10.0.0.3", ip_proto=6,
              ip_dscp=26, l4_src=1000, l4_dst=5201)
    assert dict(encode.encode_match(m).items()) == {
        "eth_type": 0x0800, "ipv4_src": "10.0.0.1", "ipv4_dst": "10.0.0.3", "ip_proto": 6,
        "ip_dscp": 26, "tcp_src": 1000, "tcp_dst": 5201,
    }
    assert encode.decode_match(encode.encode_match(m)) == m
    assert encode.decode_match(encode.encode_match(m, D15)) == m


def test_match_udp_ports_and_arp():
    m = Match(eth_type=ETH_TYPE_IPV4, ip_proto=17, l4_dst=4791)
    assert dict(encode.encode_match(m).items()) == {"eth_type": 0x0800, "ip_proto": 17,
                                                    "udp_dst": 4791}
    assert dict(encode.encode_match(Match(eth_type=ETH_TYPE_ARP)).items()) == {"eth_type": 0x806}


@pytest.mark.parametrize("m", [
    Match(ipv4_dst="10.0.0.1"),                       # no eth_type
    Match(eth_type=ETH_TYPE_IPV4, l4_dst=80),         # l4 without ip_proto
    Match(eth_type=ETH_TYPE_IPV4, ip_proto=1, l4_dst=80),
    Match(eth_type=ETH_TYPE_IPV4, ip_dscp=64),
    Match(eth_type=ETH_TYPE_IPV4, ip_proto=6, l4_dst=70000),
])
def test_match_refuses_missing_prerequisites_and_wide_values(m):
    with pytest.raises(encode.EncodeError):
        encode.encode_match(m)


@pytest.mark.parametrize("d", [D13, D15], ids=["of13", "of15"])
def test_flow_mods_carry_our_cookie_and_modify_delete_touch_only_ours(d):
    out = encode.flow_add(FlowIntent(0, 100, M3, Action("output", 3)), None, d)
    assert out.command == d.ofp.OFPFC_ADD and out.priority == 100 and out.table_id == 0
    assert out.cookie == encode.COOKIE and out.cookie_mask == 0
    (ins,) = out.instructions
    assert ins.type == d.ofp.OFPIT_APPLY_ACTIONS
    assert [a.port for a in ins.actions] == [3]
    grp = encode.flow_add(FlowIntent(0, 100, M3, Action.via(NextHopSet("ecmp", (3, 4)))),
                          encode.GROUP_ID_BASE, d)
    assert [a.group_id for a in grp.instructions[0].actions] == [encode.GROUP_ID_BASE]
    ctl = encode.flow_add(FlowIntent(0, 1000, Match(eth_type=ETH_TYPE_ARP),
                                     Action("controller")), None, d)
    (a,) = ctl.instructions[0].actions
    assert a.port == d.ofp.OFPP_CONTROLLER and a.max_len == d.ofp.OFPCML_NO_BUFFER
    f = FlowIntent(0, PRIO_PINNED, Match(eth_type=ETH_TYPE_IPV4, ipv4_src="10.0.0.1",
                                         ipv4_dst="10.0.0.3"), Action("output", 4))
    mod, dele = encode.flow_modify(f, None, d), encode.flow_delete(f, d)
    assert mod.command == d.ofp.OFPFC_MODIFY_STRICT and dele.command == d.ofp.OFPFC_DELETE_STRICT
    # OpenFlow 1.3.5 §6.4 / §7.3.4.1: a cookie mask restricts modify/delete to our entries
    assert (mod.cookie, mod.cookie_mask) == (dele.cookie, dele.cookie_mask) == (
        encode.COOKIE, encode.COOKIE_MASK)
    assert dele.instructions == []
    for msg in (out, grp, ctl, mod, dele):
        assert d.serialize(msg, 1)


def test_select_group_buckets_watch_their_port_and_ports_above_32_are_fine():
    g = encode.group_add(encode.GROUP_ID_BASE + 5, NextHopSet("ecmp", (33, 47, 64)))
    assert g.command == ofp.OFPGC_ADD and g.type == ofp.OFPGT_SELECT
    assert [(b.weight, b.watch_port, b.actions[0].port) for b in g.buckets] == [
        (1, 33, 33), (1, 47, 47), (1, 64, 64)]
    ff = encode.group_add(encode.GROUP_ID_BASE, NextHopSet("failover", (60, 3, 49)))
    assert ff.type == ofp.OFPGT_FF
    assert [(b.watch_port, b.actions[0].port) for b in ff.buckets] == [(60, 60), (3, 3), (49, 49)]
    for m in (g, ff, encode.group_delete(encode.GROUP_ID_BASE)):
        assert D13.serialize(m, 1)


def test_hash_needs_openflow_15_and_is_programmed_as_the_ovs_selection_property():
    h = EcmpHash(("ipv4_dst", "l4_src"), 77)
    nhs = NextHopSet("ecmp", (3, 4), h)
    # OpenFlow 1.3 has no group properties: refused with the reason, never a plain select
    with pytest.raises(encode.EncodeError, match="OpenFlow 1.5 group selection"):
        encode.group_add(encode.GROUP_ID_BASE, nhs, D13)
    g = encode.group_add(encode.GROUP_ID_BASE, nhs, D15)
    (prop,) = g.properties
    # ovs-ofctl(8) Group Syntax / OVS ntr_group_prop_selection_method: experimenter NTR
    # (0x0000154d), exp_type 1, "hash", selection_method_param = seed, then the OXM headers
    assert (prop.experimenter, prop.exp_type) == (0x0000154D, 1)
    assert parse_selection_property(prop) == ("hash", h)
    raw = D15.serialize(g, 9)
    assert b"hash\x00" in raw and (77).to_bytes(8, "big") in raw
    # the 5-tuple with seed 0 is asked explicitly too: Open vSwitch's default select method is
    # not it (dp_hash, no UDP ports); a set without a hash is a plain select group
    five = EcmpHash(("ipv4_src", "ipv4_dst", "ip_proto", "l4_src", "l4_dst"), 0)
    assert NextHopSet("ecmp", (3, 4), five).hash == five
    (p5,) = encode.group_add(encode.GROUP_ID_BASE, NextHopSet("ecmp", (3, 4), five), D15).properties
    assert p5.param == 0 and p5.fields == ("ipv4_src", "ipv4_dst", "ip_proto", "tcp_src", "udp_src",
                                           "tcp_dst", "udp_dst")
    plain = NextHopSet("ecmp", (3, 4))
    assert encode.group_add(encode.GROUP_ID_BASE, plain, D13).type == ofp.OFPGT_SELECT
    assert encode.group_add(encode.GROUP_ID_BASE, plain, D15).properties == []
    # byte layout of OVS's ntr_group_prop_selection_method (include/openflow/netronome-ext.h):
    # 40-byte head, then one OXM TLV per field whose value is the field's mask (all ones,
    # lib/nx-match.c oxm_put_field_array), padded to 8; length excludes the padding
    raw = bytes(selection_property(h).serialize())
    head = (b"\xff\xff" + (60).to_bytes(2, "big") + (0x154D).to_bytes(4, "big")
            + (1).to_bytes(4, "big") + b"\0" * 4 + b"hash".ljust(16, b"\0")
            + (77).to_bytes(8, "big"))
    tlvs = (bytes.fromhex("80001804") + b"\xff" * 4 + bytes.fromhex("80001a02") + b"\xff" * 2
            + bytes.fromhex("80001e02") + b"\xff" * 2)
    assert raw == head + tlvs + b"\0" * 4


def test_encode_changes_order_allocation_and_unused_groups_deleted():
    e34, e45 = NextHopSet("ecmp", (3, 4)), NextHopSet("ecmp", (4, 5))
    old = SwitchPlan("leaf1", 3, frozenset({
        FlowIntent(0, 100, M3, Action.via(e34), "route h3"),
        FlowIntent(0, 100, Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.5"),
                   Action("output", 3), "route h5"),
    }))
    ids, _ = encode.GroupIds().with_sets({e34})
    new = SwitchPlan("leaf1", 3, frozenset({
        FlowIntent(0, 100, M3, Action.via(e45), "route h3"),
        FlowIntent(0, 100, Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.6"),
                   Action.via(e45), "route h6"),
    }))
    from controller.plan.model import diff_switch

    ch = diff_switch(old, new)
    enc = encode.encode_changes(ch, old, ids)
    assert [encode.describe(x) + ":" + str(x.command) for x in enc.messages] == [
        "group-mod:0", "flow-mod:0", "flow-mod:2", "flow-mod:4", "group-mod:2"]
    # the new set got the lowest free id (the old one is still in use until the end)
    assert enc.groups.ids == {e45: encode.GROUP_ID_BASE + 1}
    assert enc.messages[-1].group_id == encode.GROUP_ID_BASE
    assert enc.counts == {"flow-mod": 3, "group-mod": 2}
    empty = encode.encode_changes(SwitchChanges("leaf1"), old, ids)
    assert empty.messages == () and empty.groups == ids


@pytest.mark.parametrize("version", [4, 6], ids=["of13", "of15"])
def test_wire_bytes_are_os_kens_byte_for_byte(version):
    """The packed bundle of a change (controller.drivers.openflow.wire) is what os-ken
    serialises for the same messages, over every match field, action and message kind."""
    d = {4: D13, 6: D15}[version]
    e34, ff = NextHopSet("ecmp", (3, 4)), NextHopSet("failover", (5, 3, 4))
    matches = [M3, Match(eth_type=ETH_TYPE_ARP),
               Match(eth_type=ETH_TYPE_IPV4, ipv4_src="10.0.0.1", ipv4_dst="10.0.0.3",
                     ip_proto=6, ip_dscp=26, l4_src=1000, l4_dst=5201),
               Match(eth_type=ETH_TYPE_IPV4, ipv4_src="10.255.0.7", ipv4_dst="10.0.1.3",
                     ip_proto=17, l4_dst=4791),
               Match(eth_type=ETH_TYPE_IPV4, ip_proto=17, l4_src=7),
               Match(eth_type=ETH_TYPE_IPV4, ip_dscp=46, ipv4_dst="10.0.0.9")]
    actions = [Action("output", 7), Action.via(e34), Action.via(ff), Action("controller"),
               Action("drop")]
    flows = [FlowIntent(0, 100 + i, m, a, f"e{i}") for i, (m, a) in
             enumerate((m, a) for m in matches for a in actions)]
    old = SwitchPlan("leaf1", 3, frozenset(flows[::3]))
    new = SwitchPlan("leaf1", 3, frozenset(
        [FlowIntent(f.table, f.priority, f.match, Action("output", 9), f.origin)
         for f in flows[::3][:4]] + flows[1::3]))
    from controller.plan.model import diff_switch

    ids, _ = encode.GroupIds().with_sets({e34})  # the failover set is new
    enc = encode.encode_changes(diff_switch(old, new), old, ids, d,
                                orphans=(encode.GROUP_ID_BASE + 99,))
    kinds = {op.kind for op in enc.ops}
    assert {"flow-add", "flow-modify", "flow-delete", "group-add", "group-delete"} <= kinds
    xids = list(range(7, 7 + len(enc.ops)))
    want = b"".join(d.serialize(d.bundle_add(42, m), x) for m, x in zip(enc.messages, xids, strict=True))
    assert encode.bundle_wire(enc, 42, xids) == want


def test_wire_packet_out_is_os_kens_byte_for_byte():
    from controller.drivers.openflow import wire

    frame = bytes(range(60))
    assert wire.packet_out(9, 17, frame) == D13.serialize(D13.packet_out(17, frame), 9)


@pytest.mark.parametrize("version", [4, 6], ids=["of13", "of15"])
def test_read_back_decodes_to_the_plan_and_leaves_foreign_entries(version):
    d = {4: D13, 6: D15}[version]
    h = EcmpHash(("ipv4_src",), 5) if version == 6 else None
    plan = SwitchPlan("leaf1", 3, frozenset({
        FlowIntent(0, 100, M3, Action.via(NextHopSet("ecmp", (3, 40), h))),
        FlowIntent(0, 500, Match(eth_type=ETH_TYPE_IPV4, ipv4_src="10.0.0.1",
                                 ipv4_dst="10.0.0.3", ip_proto=17, l4_dst=9),
                   Action.via(NextHopSet("failover", (40, 3)))),
        FlowIntent(0, 1000, Match(eth_type=ETH_TYPE_ARP), Action("controller")),
        FlowIntent(0, 1, Match(eth_type=ETH_TYPE_IPV4), Action("drop")),
        FlowIntent(0, 1100, arp_request_match("10.0.0.3"),
                   Action.answer(ArpReply("10.0.0.3", "02:00:00:00:00:03"))),
    }))
    t = FakeOFTable("leaf1")
    t.apply(encode.encode_full(plan, d))
    foreign = d.parser.OFPFlowMod(d.desc, cookie=0x99, table_id=3, command=d.ofp.OFPFC_ADD,
                                  priority=7, match=d.parser.OFPMatch(eth_type=0x86DD),
                                  instructions=[])
    t.apply([foreign])
    sw = FakeSwitch(None, 3, t, version)
    flows = [sw._flow_body(f, "OFPFlowDescStatsRequest" if version == 6 else
                           "OFPFlowStatsRequest") for f in t.flows]
    groups = []
    for g in t.groups.values():
        if version == 6:
            groups.append(d.parser.OFPGroupDescStats(g.type_, g.group_id, g.raw_buckets,
                                                     g.properties))
        else:
            groups.append(d.parser.OFPGroupDescStats(g.type_, g.group_id, g.raw_buckets))
    dec = encode.decode_state("leaf1", 3, d.flow_records(flows), d.group_records(groups), d)
    assert dec.plan == plan
    assert dec.foreign_flows == 1 and dec.stale == () and dec.orphan_groups == ()
    assert set(dec.groups.ids) == plan.next_hop_sets()


def test_foreign_and_orphan_groups():
    ours = GroupRecord(encode.GROUP_ID_BASE + 9, ofp.OFPGT_SELECT,
                       (Bucket((3,), 3, 1), Bucket((4,), 4, 1)))
    theirs = GroupRecord(17, ofp.OFPGT_SELECT, (Bucket((1,), 1, 1),))
    dec = encode.decode_state("s", 1, [], [ours, theirs])
    assert dec.foreign_groups == 1 and dec.orphan_groups == (encode.GROUP_ID_BASE + 9,)


def test_packet_out_and_describe():
    po = D13.packet_out(3, b"\x00" * 60)
    assert po.in_port == ofp.OFPP_CONTROLLER and po.buffer_id == ofp.OFP_NO_BUFFER
    assert [a.port for a in po.actions] == [3]
    po15 = D15.packet_out(3, b"\x00" * 60)
    assert po15.match["in_port"] == ofp15.OFPP_CONTROLLER
    assert D13.serialize(po, 1) and D15.serialize(po15, 1)
    assert encode.describe(po) == "packet-out"
    assert encode.describe(D13.bundle_ctrl(1, "open")) == "bundle"
    assert encode.describe(parser.OFPBarrierRequest(None)) == "barrier"


@pytest.mark.parametrize("d", [OF13(), OF15()], ids=["of13", "of15"])
def test_the_arp_responders_flow_mods_in_a_bundle_are_os_kens_bytes_with_each_xid(d):
    """The ARP responder's entries go through os-ken (fields and actions the wire packer does
    not pack), serialised once per entry and dialect: the bundle bytes are os-ken's for every
    xid, adds and deletes, the same entry twice with two xids included."""
    from controller.plan.model import ArpReply, arp_request_match, diff_switch

    flows = [FlowIntent(0, 1100, arp_request_match(f"10.0.0.{i}"),
                        Action.answer(ArpReply(f"10.0.0.{i}", f"02:00:00:00:00:{i:02x}")))
             for i in (3, 4, 5)]
    route = FlowIntent(0, 100, Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.3"),
                       Action("output", 2))
    old = SwitchPlan("leaf1", 3, frozenset(flows[:1]))
    new = SwitchPlan("leaf1", 3, frozenset([*flows[1:], route]))
    enc = encode.encode_changes(diff_switch(old, new), old, encode.GroupIds(), d)
    assert {op.kind for op in enc.ops} >= {"flow-add", "flow-delete"}
    for first in (7, 1000):   # the second time, from the dialect's cache, with other xids
        xids = list(range(first, first + len(enc.ops)))
        want = b"".join(d.serialize(d.bundle_add(42, m), x)
                        for m, x in zip(enc.messages, xids, strict=True))
        assert encode.bundle_wire(enc, 42, xids) == want
