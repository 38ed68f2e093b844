"""Encoders: plan objects → os-ken OpenFlow 1.3 messages (no datapath)."""

from __future__ import annotations

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller.drivers.openflow import encode
from controller.plan.model import (
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    PRIO_PINNED,
    Action,
    FlowIntent,
    GroupIntent,
    Match,
    SwitchChanges,
    SwitchPlan,
)


class _Dp:
    ofproto = ofp
    ofproto_parser = parser


def _serializes(msg) -> bytes:
    msg.datapath = _Dp()
    msg.set_xid(1)
    msg.serialize()
    return bytes(msg.buf)


def test_match_full_tcp():
    m = Match(eth_type=ETH_TYPE_IPV4, ipv4_src="10.0.0.1", ipv4_dst="10.0.0.3", ip_proto=6,
              ip_dscp=26, l4_src=1000, l4_dst=5201)
    assert dict(encode.encode_match(m).items()) == {
        "eth_type": 0x0800, "ipv4_src": "10.0.0.1", "ipv4_dst": "10.0.0.3", "ip_proto": 6,
        "ip_dscp": 26, "tcp_src": 1000, "tcp_dst": 5201,
    }


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


def test_flow_add_output_group_controller_drop():
    m = Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.3")
    out = encode.flow_add(FlowIntent(0, 100, m, Action("output", 3)))
    assert out.command == ofp.OFPFC_ADD and out.priority == 100 and out.table_id == 0
    assert out.cookie == encode.COOKIE and out.buffer_id == ofp.OFP_NO_BUFFER
    (ins,) = out.instructions
    assert ins.type == ofp.OFPIT_APPLY_ACTIONS
    assert [(type(a), a.port) for a in ins.actions] == [(parser.OFPActionOutput, 3)]

    grp = encode.flow_add(FlowIntent(0, 100, m, Action("group", 6)))
    assert [a.group_id for a in grp.instructions[0].actions] == [6]

    ctl = encode.flow_add(FlowIntent(0, 1000, Match(eth_type=ETH_TYPE_ARP), Action("controller")))
    (a,) = ctl.instructions[0].actions
    assert a.port == ofp.OFPP_CONTROLLER and a.max_len == ofp.OFPCML_NO_BUFFER

    drop = encode.flow_add(FlowIntent(0, 1, Match(), Action("drop")))
    assert drop.instructions == []
    for msg in (out, grp, ctl, drop):
        assert _serializes(msg)


def test_modify_and_delete_are_strict_by_key():
    f = FlowIntent(0, PRIO_PINNED, Match(eth_type=ETH_TYPE_IPV4, ipv4_src="10.0.0.1",
                                         ipv4_dst="10.0.0.3"), Action("output", 4))
    mod, dele = encode.flow_modify(f), encode.flow_delete(f)
    assert mod.command == ofp.OFPFC_MODIFY_STRICT and dele.command == ofp.OFPFC_DELETE_STRICT
    for msg in (mod, dele):
        assert msg.priority == PRIO_PINNED and msg.table_id == 0
        assert msg.out_port == ofp.OFPP_ANY and msg.out_group == ofp.OFPG_ANY
        assert dict(msg.match.items())["ipv4_src"] == "10.0.0.1"
    assert dele.instructions == []


def test_group_select_buckets_watch_their_port():
    g = encode.group_add(GroupIntent(0b1100, (3, 4)))
    assert g.command == ofp.OFPGC_ADD and g.type == ofp.OFPGT_SELECT and g.group_id == 12
    assert [(b.weight, b.watch_port, b.actions[0].port) for b in g.buckets] == [(1, 3, 3),
                                                                                (1, 4, 4)]
    assert encode.group_modify(GroupIntent(12, (3, 4))).command == ofp.OFPGC_MODIFY
    d = encode.group_delete(12)
    assert d.command == ofp.OFPGC_DELETE and d.group_id == 12
    assert encode.delete_all_groups().group_id == ofp.OFPG_ALL
    assert _serializes(g)


def test_encode_changes_safe_order():
    m = Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.3")
    ch = SwitchChanges(
        "leaf1",
        add_groups=(GroupIntent(12, (3, 4)),),
        modify_groups=(GroupIntent(6, (2, 3)),),
        delete_groups=(GroupIntent(3, (1, 2)),),
        add_flows=(FlowIntent(0, 100, m, Action("group", 12)),),
        modify_flows=(FlowIntent(0, 100, Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.4"),
                                 Action("output", 3)),),
        delete_flows=(FlowIntent(0, 100, Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.5"),
                                 Action("group", 3)),),
    )
    assert [encode.describe(x) for x in encode.encode_changes(ch)] == [
        "group-add", "group-modify", "flow-add", "flow-modify", "flow-delete", "group-delete",
    ]
    assert encode.encode_changes(SwitchChanges("leaf1")) == []


def test_encode_full_wipes_then_adds_then_barrier():
    m = Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.3")
    plan = SwitchPlan("leaf1", 3, frozenset({FlowIntent(0, 100, m, Action("group", 12))}),
                      frozenset({GroupIntent(12, (3, 4))}))
    msgs = encode.encode_full(plan)
    assert [encode.describe(x) for x in msgs] == [
        "flow-delete", "group-delete", "group-add", "flow-add", "barrier"]
    wipe = msgs[0]
    assert wipe.command == ofp.OFPFC_DELETE and wipe.table_id == ofp.OFPTT_ALL
    assert dict(wipe.match.items()) == {}
    assert msgs[1].group_id == ofp.OFPG_ALL
    assert all(x.datapath is None for x in msgs)
    for x in msgs:
        assert _serializes(x)


def test_packet_out():
    po = encode.packet_out(3, b"\x00" * 60)
    assert po.in_port == ofp.OFPP_CONTROLLER and po.buffer_id == ofp.OFP_NO_BUFFER
    assert [a.port for a in po.actions] == [3]
    assert _serializes(po)
