"""Plan → P4 entities (controller.drivers.p4runtime.encode), checked three ways: golden files of
the entities for the shipped examples (regenerate with ``pytest --update-golden``, which prints the
diff to review), the P4 pipeline model tracing every host pair across the fabric, and refusals."""

from __future__ import annotations

import dataclasses
import ipaddress
import json

import pytest

from controller.drivers.p4runtime import encode as enc
from controller.drivers.p4runtime.entities import Exact, Lpm, Ternary, lpm, ternary
from controller.model import load_topology
from controller.plan.build import build_plan
from controller.plan.model import (
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    ETH_TYPE_LLDP,
    PRIO_PINNED,
    Action,
    FlowIntent,
    Match,
    NextHopSet,
    SwitchPlan,
)
from controller.qos.compile import compile_qos
from controller.qos.validate import load_policy_checked
from controller.qos.validate import load_valid_policy as load_policy
from controller.render.bmv2 import render_bmv2
from controller.te.collectives import expand_policy
from controller.testing.p4model import CONTROLLER, DROP, Packet, arp_reply, forward
from tests.conftest import ECMP_POLICY, MAIN_TOPOLOGY, PINNED_POLICY, ROOT

GOLDEN = ROOT / "tests" / "golden" / "bmv2" / "p4rt"


@pytest.fixture(scope="module")
def fabric():
    return load_topology(MAIN_TOPOLOGY)


def _ip(s: str) -> int:
    return int(ipaddress.IPv4Address(s))


def trace(fabric, ents, src: str, dst: str, pkt: Packet) -> set[tuple[str, ...]]:
    """Every path the packet can take from host ``src`` (all ECMP choices); asserts no
    black hole, no loop, no punt."""
    done: set[tuple[str, ...]] = set()
    todo = [(src, fabric.host_by_name[src].leaf)]
    while todo:
        path = todo.pop()
        assert len(path) == len(set(path)), f"loop {path}"
        out = forward(ents[path[-1]], pkt)
        assert out not in (DROP, CONTROLLER), f"{src}->{dst} {out} at {path[-1]} via {path}"
        for port in out:
            peer, _ = fabric.port_map[(path[-1], port)]
            if fabric.is_host(peer):
                assert peer == dst, f"{src}->{dst} delivered to {peer} via {path}"
                done.add((*path, peer))
            else:
                todo.append((*path, peer))
    return done


@pytest.mark.parametrize("policy", [ECMP_POLICY, PINNED_POLICY], ids=["ecmp", "pinned"])
def test_golden_entities(fabric, policy, golden):
    pol = load_policy(policy)
    ents = enc.encode_fabric(build_plan(fabric, pol).plan, None,
                             enc.ecmp_hash_settings(fabric, pol.routing.ecmp))
    assert sorted(ents) == sorted(s.name for s in fabric.switches)
    golden.check(GOLDEN / policy.stem,
                 {f"{name}.json": json.dumps(e.to_json(), indent=1) + "\n"
                  for name, e in ents.items()})


def test_every_host_pair_reaches_its_destination_on_all_ecmp_choices(fabric):
    ents = enc.encode_fabric(build_plan(fabric, load_policy(ECMP_POLICY)).plan)
    for a in fabric.hosts:
        for b in fabric.hosts:
            if a is b:
                continue
            paths = trace(fabric, ents, a.name, b.name,
                          Packet(ETH_TYPE_IPV4, _ip(a.ipv4), _ip(b.ipv4), 6, 0, 40000, 5001))
            same_leaf = a.leaf == b.leaf
            # leaf-spine 2x4: 2 shortest paths between leaves (one per spine), 1 within a leaf
            assert len(paths) == (1 if same_leaf else 2), (a.name, b.name, paths)


def test_pinned_flows_follow_the_planned_paths_and_others_still_use_ecmp(fabric):
    pol = load_policy(PINNED_POLICY)
    res = build_plan(fabric, pol)
    ents = enc.encode_fabric(res.plan)
    assert res.pinning is not None and res.pinning.paths
    for demand, path in res.pinning.paths.items():
        src, dst = fabric.host_by_name[demand.src], fabric.host_by_name[demand.dst]
        pkt = Packet(ETH_TYPE_IPV4, _ip(src.ipv4), _ip(dst.ipv4), demand.ip_proto or 6,
                     demand.dscp or 0, demand.l4_src or 40000, demand.l4_dst or 5001)
        assert trace(fabric, ents, demand.src, demand.dst, pkt) == {tuple(path)}
    # LLDP goes to the controller on every switch; ARP never does: an edge switch answers a
    # request for a fabric host itself (back out of the asking port), the rest is dropped
    edges = {h.leaf for h in fabric.hosts}
    for name, e in ents.items():
        assert forward(e, Packet(ETH_TYPE_ARP)) == DROP
        assert forward(e, Packet(ETH_TYPE_LLDP)) == CONTROLLER
        for h in fabric.hosts:
            req = Packet(ETH_TYPE_ARP, arp_op=1, arp_tpa=_ip(h.ipv4), in_port=7)
            if name in edges:
                assert forward(e, req) == frozenset({7})
                assert arp_reply(e, req) == int(h.mac.replace(":", ""), 16)
            else:
                assert forward(e, req) == DROP and arp_reply(e, req) is None
            assert arp_reply(e, dataclasses.replace(req, arp_op=2)) is None  # not a request
        assert arp_reply(e, Packet(ETH_TYPE_ARP, arp_op=1, arp_tpa=_ip("10.9.9.9"))) is None
        assert forward(e, Packet(0x86DD)) == DROP
        assert forward(e, Packet(ETH_TYPE_IPV4, _ip("10.0.0.1"), _ip("10.9.9.9"))) == DROP


def test_pinned_priority_keeps_plan_order_then_specificity():
    m1 = Match(eth_type=ETH_TYPE_IPV4, ipv4_src="10.0.0.1", ipv4_dst="10.0.0.3")
    m2 = Match(eth_type=ETH_TYPE_IPV4, ipv4_src="10.0.0.1", ipv4_dst="10.0.0.3", ip_dscp=26)
    e1 = enc.encode_flow("s", FlowIntent(0, PRIO_PINNED, m1, Action("output", 3)))
    e2 = enc.encode_flow("s", FlowIntent(0, PRIO_PINNED, m2, Action("output", 4)))
    e3 = enc.encode_flow("s", FlowIntent(0, PRIO_PINNED + 1, m1, Action("output", 5)))
    assert e1.priority < e2.priority < e3.priority
    assert e2.match == (("ipv4_src", Ternary(_ip("10.0.0.1"), 0xFFFFFFFF)),
                        ("ipv4_dst", Ternary(_ip("10.0.0.3"), 0xFFFFFFFF)),
                        ("dscp", Ternary(26, 0x3F)))


def test_routes_use_members_named_by_port_and_allocated_group_ids():
    route = Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.5")
    sp = SwitchPlan("leaf1", 3, frozenset({
        FlowIntent(0, 100, route, Action.via(NextHopSet("ecmp", (3, 4))), "route h5"),
        FlowIntent(0, 100, Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.1"),
                   Action("output", 1), "route h1"),
    }))
    e = enc.encode_switch(sp)
    routes = {dict(x.match)["ipv4_dst"]: x for x in e.entries}
    assert routes[Lpm(_ip("10.0.0.5"), 32)].group_id == 1  # the allocation: 1, 2, ...
    assert routes[Lpm(_ip("10.0.0.1"), 32)].member_id == 1
    assert [g.group_id for g in e.groups] == [1]
    assert next(iter(e.groups)).member_ids == (3, 4)
    assert sorted(m.member_id for m in e.members) == [1, 3, 4]
    assert e.device_id == 3
    # the driver's own allocation (read back from the switch) is used when given
    e2 = enc.encode_switch(sp, group_ids={(3, 4): 42})
    assert [g.group_id for g in e2.groups] == [42]


@pytest.mark.parametrize(("flow", "msg"), [
    (FlowIntent(0, 1, Match(eth_type=ETH_TYPE_ARP, ipv4_dst="10.0.0.1"), Action("controller")),
     "punt matches eth_type only"),
    (FlowIntent(0, 1, Match(eth_type=0x86DD), Action("output", 1)), "IPv4 only"),
    (FlowIntent(0, 1, Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.1"), Action("output", 255)),
     "CPU_PORT"),
    (FlowIntent(0, 1, Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.1"), Action("output", 600)),
     "outside 0..511"),
    (FlowIntent(0, 500, Match(eth_type=ETH_TYPE_IPV4, ipv4_src="10.0.0.1", ipv4_dst="10.0.0.2"),
                Action.via(NextHopSet("ecmp", (3, 4))), "pin x"),
     "pin x: table pinned takes output, drop or a failover pair"),
    (FlowIntent(0, 500, Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.2", l4_dst=80),
                Action("output", 1), "pin y"), "pin y: l4 ports need ip_proto"),
])
def test_refusals_name_switch_and_intent(flow, msg):
    with pytest.raises(enc.EncodeError, match=msg) as ei:
        enc.encode_flow("leaf9", flow)
    assert str(ei.value).startswith("leaf9: ")


def test_fast_failover_set_and_missing_group_id_are_refused():
    ff = FlowIntent(0, 100, Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.5"),
                    Action.via(NextHopSet("failover", (3, 4))), "route h5")
    with pytest.raises(enc.EncodeError, match="select groups only"):
        enc.encode_switch(SwitchPlan("s", 1, frozenset({ff})))
    route = FlowIntent(0, 100, Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.5"),
                       Action.via(NextHopSet("ecmp", (3, 4))), "route h5")
    with pytest.raises(enc.EncodeError, match="has no group id"):
        enc.encode_switch(SwitchPlan("s", 1, frozenset({route})), group_ids={})


def test_canonical_values():
    assert ternary(0x3F, 6) == Ternary(0x3F, 0x3F)
    assert ternary(0x1234, 16, 0xFF00) == Ternary(0x1200, 0xFF00)
    assert lpm(_ip("10.1.2.3"), 8, 32) == Lpm(_ip("10.0.0.0"), 8)
    for bad in (lambda: ternary(64, 6), lambda: ternary(1, 6, 0), lambda: lpm(1, 0, 32),
                lambda: lpm(1 << 32, 8, 32)):
        with pytest.raises(ValueError):
            bad()


def test_qos_rendering_becomes_priority_and_ecn_entries():
    topo = ROOT / "tests" / "golden" / "topo_ai_100g.yaml"
    fab = load_topology(topo)
    pol = load_policy_checked(ROOT / "tests" / "golden" / "qos_strict.yaml", fab, "bmv2").policy
    docs = render_bmv2(compile_qos(pol, fab))
    doc = docs["leaf1.json"]
    entries = enc.qos_entries("leaf1", doc)
    assert len(entries) == len(doc["tables"])
    for e, t in zip(entries, doc["tables"], strict=True):
        assert e.table == t["table"] and e.action == t["action"]
        assert dict(e.match) == {k: Exact(v) for k, v in t["match"].items()}
        assert dict(e.params) == t["params"]
    assert {e.table for e in entries} == {"dscp_to_priority", "ecn_threshold"}
    # the same switch's plan plus its QoS document: one set of entities
    plan = build_plan(fab, pol).plan
    full = enc.encode_switch(plan.switches["leaf1"], doc)
    assert set(entries) <= set(full.entries)


@pytest.mark.parametrize(("doc", "msg"), [
    ({"tables": [{"table": "nope", "match": {}, "action": "x", "params": {}}]}, "unknown table"),
    ({"tables": [{"table": "dscp_to_priority", "match": {"dscp": 64}, "action": "set_priority",
                  "params": {"priority": 1}}]}, "dscp=64 does not fit 6 bits"),
    ({"tables": [{"table": "dscp_to_priority", "match": {"dscp": 1}, "action": "set_priority",
                  "params": {"priority": 8}}]}, "priority=8 does not fit 3 bits"),
    ({"tables": [{"table": "ecn_threshold", "match": {"egress_port": 1}, "action": "mark_ecn",
                  "params": {"threshold_pkts": 8}}]}, "keys"),
])
def test_qos_refusals(doc, msg):
    with pytest.raises(enc.EncodeError, match=msg):
        enc.qos_entries("leaf1", doc)


def test_multicast_group():
    assert enc.multicast_group(7, [3, 1]).ports == (1, 3)
    with pytest.raises(enc.EncodeError, match="must be >= 1"):
        enc.multicast_group(0, [1])


def test_expand_policy_is_what_pinning_covers(fabric):
    # sanity: the pinned golden covers every demand of the policy
    pol = load_policy(PINNED_POLICY)
    assert len(build_plan(fabric, pol).pinning.paths) == len(expand_policy(pol))


def test_a_protected_pinned_hop_encodes_its_backup_and_the_switchs_liveness_and_decodes_back():
    """fabric.p4 header comment: pin_egress_protected(port, backup_port), a bounce as backup 0,
    and one liveness entry per switch with the timers its failover sets carry; the driver
    reads them back as the failover sets the plan asked for, timers included."""
    from controller.drivers.p4runtime.decode import decode_entities, decode_entry
    from controller.plan.model import LivenessTimers, SwitchPlan

    timers = LivenessTimers(60_000, 2_000_000)
    match = Match(eth_type=ETH_TYPE_IPV4, ipv4_src="10.0.0.1", ipv4_dst="10.0.0.2")
    fi = FlowIntent(0, 500, match, Action.via(NextHopSet("failover", (3, 4), liveness=timers)),
                    "pin x")
    e = enc.encode_flow("leaf1", fi)
    assert (e.table, e.action, dict(e.params)) == ("pinned", "pin_egress_protected",
                                                   {"port": 3, "backup_port": 4})
    assert decode_entry(e, liveness=timers) == dataclasses.replace(fi, origin="")
    back = FlowIntent(0, 500, dataclasses.replace(match, ipv4_src="10.0.0.5"), Action.via(
        NextHopSet("failover", (2,), bounce=True, liveness=timers)), "pin y")
    b = enc.encode_flow("spine1", back)
    assert dict(b.params) == {"port": 2, "backup_port": 0}
    plan = SwitchPlan("spine1", 0x11, frozenset({fi, back}))
    ents = enc.encode_switch(plan)
    live = [x for x in ents.entries if x.table == "liveness"]
    assert [(x.action, dict(x.params), x.match) for x in live] == [
        ("set_liveness", {"timeout_us": 60_000, "hold_us": 2_000_000}, ())]  # every frame
    assert decode_entities(ents).plan == SwitchPlan(
        "spine1", 0x11, frozenset(dataclasses.replace(f, origin="") for f in (fi, back)))
    # without timers (liveness off) the sets still encode; no liveness entry
    bare = SwitchPlan("leaf1", 3, frozenset({dataclasses.replace(fi, action=Action.via(
        NextHopSet("failover", (3, 4))))}))
    assert not [x for x in enc.encode_switch(bare).entries if x.table == "liveness"]
    # one switch judges its ports one way
    other = dataclasses.replace(back, action=Action.via(NextHopSet(
        "failover", (2,), bounce=True, liveness=LivenessTimers(30_000, 0))))
    with pytest.raises(enc.EncodeError, match="different liveness timers"):
        enc.encode_switch(SwitchPlan("spine1", 0x11, frozenset({fi, other})))
    with pytest.raises(ValueError, match="liveness timeout 0"):
        LivenessTimers(0, 0)


def test_an_arp_reply_encodes_to_the_responder_table_and_decodes_back():
    from controller.drivers.p4runtime.decode import decode_entry
    from controller.drivers.p4runtime.entities import TableEntry
    from controller.plan.model import PRIO_ARP_REPLY, ArpReply, arp_request_match

    fi = FlowIntent(0, PRIO_ARP_REPLY, arp_request_match("10.0.0.3"),
                    Action.answer(ArpReply("10.0.0.3", "02:00:00:00:00:03")), "arp h3")
    e = enc.encode_flow("leaf1", fi)
    assert (e.table, e.match, e.priority, e.action, e.params) == (
        "arp_responder", (("arp_tpa", Exact(_ip("10.0.0.3"))),), 0, "arp_reply",
        (("mac", 0x020000000003),))
    assert decode_entry(e) == dataclasses.replace(fi, origin="")
    for bad in (dataclasses.replace(e, action="send_to_cpu"),
                dataclasses.replace(e, params=()),
                dataclasses.replace(e, match=(("arp_tpa", Ternary(1, 0xFF)),)),
                TableEntry("arp_responder", (), 0, "arp_reply", (("mac", 1 << 48),))):
        assert decode_entry(bad) is None
