"""The flow-table simulator: OpenFlow semantics, and tracing across a fabric."""

from __future__ import annotations

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller.drivers.openflow import encode
from controller.model.topology import build_leaf_spine
from controller.plan.build import build_plan
from controller.plan.model import (
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    ETH_TYPE_LLDP,
    Action,
    FlowIntent,
    Match,
    NextHopSet,
)
from controller.policy import load_policy
from controller.policy.model import EcmpSettings, Routing
from controller.testing import BlackHole, FakeFabric, FakeOFError, FakeOFTable, ForwardingLoop
from tests.conftest import ECMP_POLICY

IP3 = Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.3")
PKT3 = {"eth_type": ETH_TYPE_IPV4, "ipv4_src": "10.0.0.1", "ipv4_dst": "10.0.0.3",
        "ip_proto": 6, "l4_src": 40000, "l4_dst": 5201}


def _flow(prio, match, action, table=0):
    return FlowIntent(table, prio, match, action)


def test_highest_priority_wins_and_miss_drops():
    t = FakeOFTable("s")
    t.apply([encode.flow_add(_flow(100, IP3, Action("output", 1))),
             encode.flow_add(_flow(500, Match(eth_type=ETH_TYPE_IPV4, ipv4_src="10.0.0.1",
                                              ipv4_dst="10.0.0.3"), Action("output", 2)))])
    assert t.lookup(PKT3) == {2}
    assert t.lookup({**PKT3, "ipv4_src": "10.0.0.2"}) == {1}
    assert t.lookup({**PKT3, "ipv4_dst": "10.0.0.9"}) == set()


def test_l4_fields_need_matching_proto():
    t = FakeOFTable("s")
    m = Match(eth_type=ETH_TYPE_IPV4, ip_proto=6, l4_dst=5201)
    t.apply([encode.flow_add(_flow(100, m, Action("output", 1)))])
    assert t.lookup(PKT3) == {1}
    assert t.lookup({**PKT3, "ip_proto": 17}) == set()
    assert t.lookup({**PKT3, "l4_dst": 80}) == set()


def test_add_replaces_same_key_and_modify_strict_never_adds():
    t = FakeOFTable("s")
    t.apply([encode.flow_add(_flow(100, IP3, Action("output", 1))),
             encode.flow_add(_flow(100, IP3, Action("output", 2)))])
    assert len(t.flows) == 1 and t.lookup(PKT3) == {2}
    t.apply([encode.flow_modify(_flow(100, IP3, Action("output", 3)))])
    assert t.lookup(PKT3) == {3}
    t.apply([encode.flow_modify(_flow(200, IP3, Action("output", 4)))])  # other priority
    assert len(t.flows) == 1 and t.lookup(PKT3) == {3}


def test_delete_strict_only_removes_exact_entry():
    t = FakeOFTable("s")
    wide = Match(eth_type=ETH_TYPE_IPV4)
    t.apply([encode.flow_add(_flow(100, IP3, Action("output", 1))),
             encode.flow_add(_flow(10, wide, Action("output", 9))),
             encode.flow_add(_flow(200, IP3, Action("output", 2)))])
    t.apply([encode.flow_delete(_flow(100, IP3, Action("drop")))])
    assert len(t.flows) == 2 and t.lookup(PKT3) == {2}
    t.apply([encode.flow_delete(_flow(200, wide, Action("drop")))])  # no exact match
    assert len(t.flows) == 2


ECMP12 = NextHopSet("ecmp", (1, 2))


def _via(nhs):
    return Action.via(nhs)


def test_delete_our_flows_leaves_foreign_cookies():
    t = FakeOFTable("s")
    foreign = parser.OFPFlowMod(None, cookie=0x77, table_id=0, command=ofp.OFPFC_ADD,
                                priority=100, match=parser.OFPMatch(eth_type=0x800,
                                                                    ipv4_dst="10.0.0.9"),
                                instructions=[])
    t.apply([encode.group_add(3, ECMP12), foreign,
             encode.flow_add(_flow(100, IP3, _via(ECMP12)), 3),
             encode.flow_add(_flow(1000, Match(eth_type=ETH_TYPE_ARP), Action("controller")))])
    t.apply([encode.delete_our_flows()])
    assert [f.cookie for f in t.flows] == [0x77] and 3 in t.groups
    t.apply([encode.group_delete(3)])
    assert t.groups == {}


def test_groups_all_live_buckets_or_one_by_hash():
    msgs = [encode.group_add(7, NextHopSet("ecmp", (1, 2, 3))),
            encode.flow_add(_flow(100, IP3, _via(NextHopSet("ecmp", (1, 2, 3)))), 7)]
    t = FakeOFTable("s")
    t.apply(msgs)
    assert t.lookup(PKT3) == {1, 2, 3}
    t.set_port_up(2, False)
    assert t.lookup(PKT3) == {1, 3}
    h = FakeOFTable("s", hash_fields=("ipv4_src", "ipv4_dst", "ip_proto", "l4_src", "l4_dst"))
    h.apply(msgs)
    chosen = {frozenset(h.lookup({**PKT3, "l4_src": sp})) for sp in range(40000, 40064)}
    assert all(len(c) == 1 for c in chosen)
    assert set().union(*chosen) == {1, 2, 3}  # the hash spreads flows over every bucket
    assert h.lookup(PKT3) == h.lookup(dict(PKT3))  # deterministic


def test_group_errors_and_group_delete_removes_its_flows():
    t = FakeOFTable("s")
    with pytest.raises(FakeOFError, match="missing group 7"):
        t.apply([encode.flow_add(_flow(100, IP3, _via(ECMP12)), 7)])
    t.apply([encode.group_add(3, ECMP12)])
    with pytest.raises(FakeOFError, match="GROUP_EXISTS"):
        t.apply([encode.group_add(3, ECMP12)])
    t.apply([encode.flow_add(_flow(100, IP3, _via(ECMP12)), 3)])
    assert t.lookup(PKT3) == {1, 2}
    t.apply([encode.group_delete(3)])
    assert t.flows == []


def test_failover_group_uses_first_live_bucket_and_ports_are_checked():
    ff = NextHopSet("failover", (40, 3, 33))
    t = FakeOFTable("s", ports=(3, 33, 40))
    t.apply([encode.group_add(9, ff), encode.flow_add(_flow(100, IP3, _via(ff)), 9)])
    assert t.lookup(PKT3) == {40}
    t.set_port_up(40, False)
    assert t.lookup(PKT3) == {3}
    t.set_port_up(3, False)
    assert t.lookup(PKT3) == {33}
    with pytest.raises(FakeOFError, match="BAD_OUT_PORT"):
        t.apply([encode.flow_add(_flow(200, IP3, Action("output", 7)))])
    full = FakeOFTable("s", max_flows=1)
    full.apply([encode.flow_add(_flow(100, IP3, Action("output", 1)))])
    with pytest.raises(FakeOFError, match="TABLE_FULL"):
        full.apply([encode.flow_add(_flow(200, IP3, Action("output", 1)))])
    snap = full.snapshot()
    full.apply([encode.flow_delete(_flow(100, IP3, Action("drop")))])
    full.restore(snap)
    assert len(full.flows) == 1


def test_never_back_out_of_in_port_and_controller():
    t = FakeOFTable("s")
    t.apply([encode.flow_add(_flow(100, IP3, Action("output", 1))),
             encode.flow_add(_flow(1000, Match(eth_type=ETH_TYPE_LLDP), Action("controller")))])
    assert t.lookup({**PKT3, "in_port": 1}) == set()
    assert t.lookup({"eth_type": ETH_TYPE_LLDP, "in_port": 4}) == {"controller"}


# -- tracing a fabric ----------------------------------------------------------------------------
FABRIC = build_leaf_spine("t", 2, 4, 2, 40_000_000, 40_000_000, 1.0, 1.0)
# plain select groups (the switches' default hash): the simulator yields every ECMP branch
ECMP = load_policy(ECMP_POLICY, FABRIC).model_copy(update={"routing": Routing(
    mode="ecmp", ecmp=EcmpSettings(selection="switch_default"))})


def _loaded(plan, **kw) -> FakeFabric:
    ff = FakeFabric.empty(FABRIC, **kw)
    for name, sp in plan.switches.items():
        ff.tables[name].apply(encode.encode_full(sp))
    return ff


def test_trace_all_ecmp_branches_hand_plan():
    ff = _loaded(build_plan(FABRIC, ECMP).plan)
    paths = ff.trace("h1", PKT3)
    assert paths == [("h1", "leaf1", "spine1", "leaf2", "h3"),
                     ("h1", "leaf1", "spine2", "leaf2", "h3")]
    assert ff.trace("h1", {**PKT3, "ipv4_dst": "10.0.0.2"}) == [("h1", "leaf1", "h2")]


def test_trace_reports_black_hole_and_loop():
    ff = _loaded(build_plan(FABRIC, ECMP).plan)
    ff.set_link("spine1", "leaf2", False)
    ff.tables["spine1"].set_port_up(2, True)  # pretend the switch did not notice
    res = ff.trace_all("h1", PKT3)
    assert not res.ok and res.paths == [("h1", "leaf1", "spine2", "leaf2", "h3")]
    with pytest.raises(BlackHole):
        ff.trace("h1", PKT3)

    loopy = FakeFabric.empty(FABRIC)
    loopy.tables["leaf1"].apply([encode.flow_add(_flow(100, IP3, Action("output", 3)))])
    loopy.tables["spine1"].apply([encode.flow_add(_flow(100, IP3, Action("output", 3)))])
    loopy.tables["leaf3"].apply([encode.flow_add(_flow(100, IP3, Action("output", 4)))])
    loopy.tables["spine2"].apply([encode.flow_add(_flow(100, IP3, Action("output", 1)))])
    with pytest.raises(ForwardingLoop):
        loopy.trace("h1", PKT3)
