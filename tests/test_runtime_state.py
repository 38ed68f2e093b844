"""ControllerRuntime: port events → only the changed switches; LLDP comparison.

Every test runs with the hand-made reference planner, and again with the production
``build_plan`` over the main lab fabric and both policies once that module exists.
"""

from __future__ import annotations

import itertools

import pytest

from controller.drivers.openflow import encode
from controller.model.topology import load_topology
from controller.plan.model import ETH_TYPE_ARP, ETH_TYPE_IPV4, ETH_TYPE_LLDP, diff_plans
from controller.policy import load_policy
from controller.runtime.state import ControllerRuntime, compare_links
from controller.testing import FakeFabric
from tests.conftest import ECMP_POLICY, MAIN_TOPOLOGY, PINNED_POLICY

FABRIC = load_topology(MAIN_TOPOLOGY)
HASH = ("ipv4_src", "ipv4_dst", "ip_proto", "l4_src", "l4_dst")


def _runtime(kind: str) -> ControllerRuntime:
    path = PINNED_POLICY if kind == "pinned" else ECMP_POLICY
    return ControllerRuntime(FABRIC, load_policy(path, FABRIC))


PLANNERS = ["ecmp", "pinned"]


def _load(plan, **kw) -> FakeFabric:
    ff = FakeFabric.empty(FABRIC, **kw)
    for name, sp in plan.switches.items():
        ff.tables[name].apply(encode.encode_full(sp))
    return ff


def _ip_packet(a, b, sport=40000):
    return {"eth_type": ETH_TYPE_IPV4, "ipv4_src": a.ipv4, "ipv4_dst": b.ipv4, "ip_proto": 6,
            "l4_src": sport, "l4_dst": 5201}


def assert_full_reachability(ff: FakeFabric, avoid: frozenset = frozenset()) -> None:
    for a, b in itertools.permutations(FABRIC.hosts, 2):
        paths = ff.trace(a.name, _ip_packet(a, b))
        assert paths, f"{a.name} cannot reach {b.name}"
        for p in paths:
            assert p[-1] == b.name
            for u, v in zip(p, p[1:], strict=False):
                assert frozenset((u, v)) not in avoid, f"{p} uses dead link {u}-{v}"


@pytest.mark.parametrize("kind", PLANNERS)
def test_initial_plan_reaches_everyone_and_traps_arp_lldp(kind):
    rt = _runtime(kind)
    ff = _load(rt.initial_plan())
    assert_full_reachability(ff)
    for sw in FABRIC.switches:
        t = ff.tables[sw.name]
        assert t.lookup({"eth_type": ETH_TYPE_ARP, "in_port": 1}) == {"controller"}
        assert t.lookup({"eth_type": ETH_TYPE_LLDP, "in_port": 1}) == {"controller"}


@pytest.mark.parametrize("kind", PLANNERS)
def test_leaf_uplink_down_then_up(kind):
    rt = _runtime(kind)
    plan0 = rt.initial_plan()
    ff = _load(plan0)
    port = FABRIC.port_towards("leaf1", "spine1")
    changes = rt.port_status("leaf1", port, False)
    assert changes, "a dead uplink must change something"
    dead = frozenset({"leaf1", "spine1"})
    assert rt.down_links == frozenset({dead})
    # only switches whose plan changed, and each of them really changed
    for name, ch in changes.items():
        assert not ch.empty
        assert rt.plan.switches[name] != plan0.switches[name]
    assert set(changes) == {n for n in plan0.switches
                            if plan0.switches[n] != rt.plan.switches[n]}
    ff.set_link("leaf1", "spine1", False)
    for name, ch in changes.items():
        ff.tables[name].apply(encode.encode_changes(ch))
    assert_full_reachability(ff, avoid=frozenset({dead}))
    # the other end reporting the same link is a no-op
    far = FABRIC.port_towards("spine1", "leaf1")
    assert rt.port_status("spine1", far, False) == {}
    # one end up while the other is still down: the link stays down
    assert rt.port_status("leaf1", port, True) == {}
    assert rt.down_links == frozenset({dead})
    back = rt.port_status("spine1", far, True)
    assert set(back) == set(changes)
    assert diff_plans(plan0, rt.plan) == {}
    ff.set_link("leaf1", "spine1", True)
    for name, ch in back.items():
        ff.tables[name].apply(encode.encode_changes(ch))
    assert_full_reachability(ff)
    assert ff.tables["leaf1"].dump() == _load(plan0).tables["leaf1"].dump()


def test_stale_up_from_the_far_end_does_not_revive_a_dead_link():
    """Open vSwitch order seen in the failover lab: spine1 "up" (stale), spine1 down, leaf1 "up"
    (stale), leaf1 down. The link goes down once and never comes back in between."""
    rt = _runtime("pinned")
    rt.initial_plan()
    near = FABRIC.port_towards("leaf1", "spine1")
    far = FABRIC.port_towards("spine1", "leaf1")
    dead = frozenset({"leaf1", "spine1"})
    assert rt.port_status("spine1", far, True) == {}
    assert rt.port_status("spine1", far, False) != {}
    assert rt.port_status("leaf1", near, True) == {}
    assert rt.down_links == frozenset({dead})
    assert rt.port_status("leaf1", near, False) == {}
    assert rt.down_links == frozenset({dead})
    assert rt.port_status("spine1", far, True) == {}
    assert rt.port_status("leaf1", near, True) != {}
    assert rt.down_links == frozenset()


def test_host_port_and_unknown_port_change_nothing():
    rt = _runtime("ecmp")
    rt.initial_plan()
    assert rt.port_status("leaf1", 1, False) == {}
    assert rt.down_host_ports == frozenset({("leaf1", 1)})
    assert rt.port_status("leaf1", 1, True) == {}
    assert rt.port_status("leaf1", 99, False) == {}
    with pytest.raises(KeyError):
        rt.port_status("nosuch", 1, False)


def test_pinned_flows_follow_their_paths_and_hash_picks_one_path():
    rt = _runtime("pinned")
    rt.initial_plan()
    pinning = rt.result.pinning
    assert pinning is not None, "pinned mode must pin the ring flows"
    ff = _load(rt.plan)
    hashed = _load(rt.plan, hash_fields=HASH, seed=7)
    assert pinning.paths
    for demand, path in pinning.paths.items():
        src, dst = FABRIC.host_by_name[demand.src], FABRIC.host_by_name[demand.dst]
        pkt = {**_ip_packet(src, dst), "ip_dscp": demand.dscp}
        if demand.ip_proto is not None:
            pkt.update(ip_proto=demand.ip_proto, l4_src=demand.l4_src, l4_dst=demand.l4_dst)
        # every possible branch is the pinned path, even with ECMP groups elsewhere
        assert ff.trace(src.name, pkt) == [tuple(path)], f"{demand} does not follow {path}"
        assert hashed.trace(src.name, pkt) == [tuple(path)]
    for a, b in itertools.permutations(FABRIC.hosts, 2):
        for sport in (40000, 40001, 40002):
            assert len(hashed.trace(a.name, _ip_packet(a, b, sport))) == 1


def test_compare_links():
    links = []
    for ln in FABRIC.links:
        if ln.a in FABRIC.switch_by_name and ln.b in FABRIC.switch_by_name:
            a = (FABRIC.switch_by_name[ln.a].dpid, ln.a_port)
            b = (FABRIC.switch_by_name[ln.b].dpid, ln.b_port)
            links += [(a, b), (b, a)]
    assert compare_links(FABRIC, links).ok
    leaf1, spine1, spine2 = (FABRIC.switch_by_name[n].dpid for n in ("leaf1", "spine1", "spine2"))
    p3, p4 = FABRIC.port_towards("leaf1", "spine1"), FABRIC.port_towards("leaf1", "spine2")
    s1, s2 = FABRIC.port_towards("spine1", "leaf1"), FABRIC.port_towards("spine2", "leaf1")
    # leaf1's uplinks swapped: p3 goes to spine2, p4 to spine1
    swapped = [x for x in links if (leaf1, p3) not in x and (leaf1, p4) not in x]
    swapped += [((leaf1, p3), (spine2, s2)), ((leaf1, p4), (spine1, s1)), ((0x99, 1), (leaf1, 1))]
    missing, unexpected, miswired = compare_links(FABRIC, swapped)
    assert len(missing) == 2 and len(miswired) == 2 and len(unexpected) == 1
    msgs = " | ".join(p.message for p in miswired)
    assert "spine2 (dpid=0x2) port 1 is connected to leaf1 (dpid=0x3) port 3" in msgs
    assert "leaf1 (dpid=0x3) port 3 <-> spine1 port 1" in msgs
    assert "0x99" in unexpected[0].message
    # a switch that is not connected cannot be missing anything
    m, _, _ = compare_links(FABRIC, [], connected={spine1})
    assert m == ()
