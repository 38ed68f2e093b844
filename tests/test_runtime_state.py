"""The pure runtime core: port events → the intended plan and only the changed switches; repairs
adopted by generation; LLDP comparison. No loop, no driver: ``core.step`` on values.

Every test runs with the ECMP and the pinned policy of the main lab fabric.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from controller.drivers import frames
from controller.drivers.openflow import encode
from controller.drivers.openflow.dialect import DIALECTS, OF15
from controller.drivers.southbound import (
    PacketIn,
    PortStatus,
    SwitchConnected,
    SwitchFeatures,
    SwitchState,
)
from controller.model.topology import load_topology
from controller.plan.model import ETH_TYPE_ARP, ETH_TYPE_IPV4, ETH_TYPE_LLDP, diff_plans
from controller.policy import load_policy
from controller.runtime import core, writes
from controller.runtime.batching import BatchWindow
from controller.runtime.events import (
    BatchAnswered,
    Compute,
    Log,
    PlacementReady,
    Publish,
    ReadBackDone,
    RoleAssigned,
    SendPacket,
    Tick,
)
from controller.runtime.intent import intended_plan
from controller.runtime.lldp import compare_links
from controller.runtime.placement import (
    PlacementInput,
    initial_placement,
    reoptimise_moves,
    repair_moved,
)
from controller.runtime.state import PolicyInForce, RuntimeSettings, initial_state
from controller.testing import FakeFabric
from tests.conftest import ECMP_POLICY, MAIN_TOPOLOGY, PINNED_POLICY

FABRIC = load_topology(MAIN_TOPOLOGY)
OF15_DIALECT = DIALECTS[OF15.version]
HASH = ("ipv4_src", "ipv4_dst", "ip_proto", "l4_src", "l4_dst")
PLANNERS = ["ecmp", "pinned"]


def _state(kind: str, **settings):
    path = PINNED_POLICY if kind == "pinned" else ECMP_POLICY
    pol = load_policy(path, FABRIC)
    return initial_state(FABRIC, PolicyInForce(pol), RuntimeSettings(**settings),
                         placement=initial_placement(FABRIC, pol))


def _load(plan, **kw) -> FakeFabric:
    """The plan in the simulator, encoded for OpenFlow 1.5 (its ECMP sets carry each switch's
    hash: a select group picks one bucket)."""
    ff = FakeFabric.empty(FABRIC, **kw)
    for name, sp in plan.switches.items():
        ff.tables[name].apply(encode.encode_full(sp, OF15_DIALECT))
    return ff


def _ip_packet(a, b, sport=40000):
    return {"eth_type": ETH_TYPE_IPV4, "ipv4_src": a.ipv4, "ipv4_dst": b.ipv4, "ip_proto": 6,
            "l4_src": sport, "l4_dst": 5201}


def assert_full_reachability(ff: FakeFabric, avoid: frozenset = frozenset()) -> None:
    for a, b in itertools.permutations(ff.fabric.hosts, 2):
        paths = ff.trace(a.name, _ip_packet(a, b))
        assert paths, f"{a.name} cannot reach {b.name}"
        for p in paths:
            assert p[-1] == b.name
            for u, v in zip(p, p[1:], strict=False):
                assert frozenset((u, v)) not in avoid, f"{p} uses dead link {u}-{v}"


def run(state, ev, now=0.0):
    """``core.step`` plus the repairs and re-optimisations it asks for, computed at once (as
    the process does off the loop; a re-optimisation adopted whole). Returns (final state,
    [changes of each step], effects)."""
    st = core.step(state, ev, now)
    changes, effects = [core.plan_diff(state, st.state)], list(st.effects)
    todo = [fx for fx in st.effects if isinstance(fx, Compute) and fx.kind != "rebalance"]
    state = st.state
    while todo:
        fx = todo.pop(0)
        inp = PlacementInput(state.fabric, state.effective_policy, state.placement,
                             state.down_links, frozenset())
        dec = (repair_moved if fx.kind == "repair" else reoptimise_moves)(inp)
        st = core.step(state, PlacementReady(fx.kind, fx.generation,
                                             None if dec is None else dec.paths, dec), now)
        changes.append(core.plan_diff(state, st.state))
        state = st.state
        effects += st.effects
        todo += [e for e in st.effects if isinstance(e, Compute) and e.kind != "rebalance"]
    return state, changes, effects


def _apply(ff, changes):
    for ch_by_switch in changes:
        for name, ch in ch_by_switch.items():
            t = ff.tables[name]
            grp = {}  # the simulator needs group ids: give each new set a fresh one
            for f in (*ch.add_flows, *ch.modify_flows):
                nhs = f.action.next_hops
                if nhs is not None and nhs not in grp:
                    gid = max([encode.GROUP_ID_BASE + 1000, *t.groups]) + 1
                    t.apply([encode.group_add(gid, nhs, OF15_DIALECT)])
                    grp[nhs] = gid
            for f in ch.add_flows:
                t.apply([encode.flow_add(f, grp.get(f.action.next_hops), OF15_DIALECT)])
            for f in ch.modify_flows:
                t.apply([encode.flow_modify(f, grp.get(f.action.next_hops), OF15_DIALECT)])
            for f in ch.delete_flows:
                t.apply([encode.flow_delete(f, OF15_DIALECT)])


@pytest.mark.parametrize("kind", PLANNERS)
def test_initial_plan_reaches_everyone_traps_lldp_and_answers_arp(kind):
    ff = _load(intended_plan(_state(kind)))
    assert_full_reachability(ff)
    for sw in FABRIC.switches:
        t = ff.tables[sw.name]
        assert t.lookup({"eth_type": ETH_TYPE_ARP, "in_port": 1}) == set()  # never punted
        assert t.lookup({"eth_type": ETH_TYPE_LLDP, "in_port": 1}) == {"controller"}
    for src in FABRIC.hosts:  # the edge switches answer, with no controller
        for dst in FABRIC.hosts:
            reply = ff.arp(src.name, dst.ipv4)
            assert reply is not None and (reply["arp_sha"], reply["eth_dst"]) == (dst.mac,
                                                                                  src.mac)


@pytest.mark.parametrize("kind", PLANNERS)
def test_leaf_uplink_down_then_up(kind):
    s0 = _state(kind)
    plan0 = intended_plan(s0)
    ff = _load(plan0)
    port = FABRIC.port_towards("leaf1", "spine1")
    s1, changes, fx = run(s0, PortStatus("leaf1", port, False))
    assert any(changes), "a dead uplink must change something"
    dead = frozenset({"leaf1", "spine1"})
    assert s1.down_links == frozenset({dead})
    assert s1.generation > s0.generation and s1.plan_generation > s0.plan_generation
    assert [e.kind for e in fx if isinstance(e, Publish)][0] == "link-down"
    # only switches whose plan changed, and each really changed
    after = intended_plan(s1)
    total = {n for c in changes for n in c}
    assert total == {n for n in plan0.switches if plan0.switches[n] != after.switches[n]}
    ff.set_link("leaf1", "spine1", False)
    _apply(ff, changes)
    assert_full_reachability(ff, avoid=frozenset({dead}))
    # the other end reporting the same link is a no-op
    far = FABRIC.port_towards("spine1", "leaf1")
    s2, changes, _ = run(s1, PortStatus("spine1", far, False))
    assert changes == [{}] and s2.down_links == s1.down_links
    # one end up while the other is still down: the link stays down
    s3, changes, _ = run(s2, PortStatus("leaf1", port, True))
    assert changes == [{}] and s3.down_links == frozenset({dead})
    s4, back, _ = run(s3, PortStatus("spine1", far, True))
    # restored (nothing moves), then re-optimised: as good as before the failure
    assert s4.down_links == frozenset()
    if kind == "ecmp":
        assert diff_plans(plan0, intended_plan(s4)) == {}
    else:
        assert _max_link_flows(s4.placement) == _max_link_flows(s0.placement) == 1
    ff.set_link("leaf1", "spine1", True)
    _apply(ff, back)
    assert_full_reachability(ff)
    assert ff.tables["leaf1"].dump(True) == _load(intended_plan(s4)).tables["leaf1"].dump(True)


def _max_link_flows(placement) -> int:
    """The most pinned flows on one directed fabric link."""
    n: dict = {}
    for p in placement.values():
        for e in zip(p[1:-2], p[2:-1], strict=True):
            n[e] = n.get(e, 0) + 1
    return max(n.values(), default=0)


def test_before_the_repair_pinned_traffic_falls_back_to_routes_that_avoid_the_link():
    s0 = _state("pinned")
    port = FABRIC.port_towards("leaf1", "spine1")
    st = core.step(s0, PortStatus("leaf1", port, False), 0.0)
    (rep,) = [e for e in st.effects if isinstance(e, Compute)]
    assert rep.kind == "repair" and rep.generation == st.state.generation
    ff = _load(intended_plan(st.state))
    ff.set_link("leaf1", "spine1", False)
    assert_full_reachability(ff, avoid=frozenset({frozenset({"leaf1", "spine1"})}))
    # a repair computed for an older generation is dropped, and asked for again
    newer = core.step(st.state, PortStatus("leaf2", FABRIC.port_towards("leaf2", "spine2"),
                                           False), 0.0).state
    late = core.step(newer, PlacementReady("repair", rep.generation, {}), 0.0)
    assert late.state == newer and core.plan_diff(newer, late.state) == {}
    assert [e for e in late.effects if isinstance(e, Compute)][0].generation == newer.generation


def test_stale_up_from_the_far_end_does_not_revive_a_dead_link():
    """Open vSwitch order seen in the failover lab: spine1 "up" (stale), spine1 down, leaf1 "up"
    (stale), leaf1 down. The link goes down once and never comes back in between."""
    s = _state("pinned")
    near = FABRIC.port_towards("leaf1", "spine1")
    far = FABRIC.port_towards("spine1", "leaf1")
    dead = frozenset({"leaf1", "spine1"})
    s, ch, _ = run(s, PortStatus("spine1", far, True))
    assert ch == [{}]
    s, ch, _ = run(s, PortStatus("spine1", far, False))
    assert any(ch)
    s, ch, _ = run(s, PortStatus("leaf1", near, True))
    assert ch == [{}] and s.down_links == frozenset({dead})
    s, ch, _ = run(s, PortStatus("leaf1", near, False))
    assert ch == [{}] and s.down_links == frozenset({dead})
    s, ch, _ = run(s, PortStatus("spine1", far, True))
    assert ch == [{}]
    s, ch, _ = run(s, PortStatus("leaf1", near, True))
    assert any(ch) and s.down_links == frozenset()


def test_host_port_and_unknown_port_change_nothing():
    s = _state("ecmp")
    s1, ch, _ = run(s, PortStatus("leaf1", 1, False))
    assert ch == [{}] and s1.down_host_ports == frozenset({("leaf1", 1)})
    s2, ch, _ = run(s1, PortStatus("leaf1", 1, True))
    assert ch == [{}] and s2.down_host_ports == frozenset()
    s3, ch, fx = run(s2, PortStatus("leaf1", 99, False))
    assert ch == [{}] and s3 == s2
    assert any("not a fabric port" in e.text for e in fx if isinstance(e, Log))


def test_pinned_flows_follow_their_paths_and_hash_picks_one_path():
    s = _state("pinned")
    assert s.placement, "pinned mode must pin the ring flows"
    plan = intended_plan(s)
    ff = _load(plan)
    hashed = _load(plan, hash_fields=HASH, seed=7)
    for demand, path in s.placement.items():
        src, dst = FABRIC.host_by_name[demand.src], FABRIC.host_by_name[demand.dst]
        pkt = {**_ip_packet(src, dst), "ip_dscp": demand.dscp}
        if demand.ip_proto is not None:
            pkt.update(ip_proto=demand.ip_proto, l4_src=demand.l4_src, l4_dst=demand.l4_dst)
        assert ff.trace(src.name, pkt) == [tuple(path)], f"{demand} does not follow {path}"
        assert hashed.trace(src.name, pkt) == [tuple(path)]
    for a, b in itertools.permutations(FABRIC.hosts, 2):
        for sport in (40000, 40001, 40002):
            assert len(hashed.trace(a.name, _ip_packet(a, b, sport))) == 1


def test_connect_takes_a_role_then_reconciles_and_arp_is_answered():
    s = _state("ecmp")
    feats = SwitchFeatures("openflow", 3, "OpenFlow 1.3")
    st = core.step(s, SwitchConnected("leaf1", feats, 7), 1.0)
    assert [type(e).__name__ for e in st.effects] == ["ForgetCounters", "TakeRole", "Log"]
    # no ecmp_hash capability: said before leaf1 is programmed (issue 29); its sets unhashed
    (warn,) = [e for e in st.effects if isinstance(e, Log)]
    assert warn.level == "warning" and warn.switch == "leaf1"
    assert "it speaks OpenFlow 1.3, without group selection properties" in warn.text
    assert all(n.hash is None for n in intended_plan(st.state).switches["leaf1"].next_hop_sets())
    assert all(n.hash is not None for n in intended_plan(st.state).switches["leaf2"].next_hop_sets())
    st = core.step(st.state, RoleAssigned("leaf1", "master", 7), 1.0)
    assert [type(e).__name__ for e in st.effects] == ["ReadBack"]
    assert st.state.writable() == frozenset({"leaf1"})
    h1, h3 = FABRIC.host_by_name["h1"], FABRIC.host_by_name["h3"]
    req = frames.arp_frame(frames.Arp(1, h1.mac, h1.ipv4, "00:00:00:00:00:00", h3.ipv4),
                           "ff:ff:ff:ff:ff:ff", h1.mac)
    out = core.step(st.state, PacketIn("leaf1", h1.port, req), 1.0)
    (po,) = [e for e in out.effects if isinstance(e, SendPacket)]
    assert po.port == h1.port  # back out of the asking port only; nothing floods
    rep = frames.parse_arp(po.data)
    assert (rep.oper, rep.sender_ip, rep.sender_mac) == (frames.ARP_REPLY, h3.ipv4, h3.mac)
    grat = frames.arp_frame(frames.Arp(1, h1.mac, h1.ipv4, "00:00:00:00:00:00", h1.ipv4),
                            "ff:ff:ff:ff:ff:ff", h1.mac)
    assert not [e for e in core.step(st.state, PacketIn("leaf1", 1, grat), 1.0).effects
                if isinstance(e, SendPacket)]


def test_lldp_round_probes_writable_switches_and_reports_plainly():
    s = _state("ecmp", lldp_interval_s=5.0, lldp_grace_s=10.0)
    for sw in FABRIC.switches:
        s = core.step(s, SwitchConnected(sw.name, SwitchFeatures("openflow", sw.dpid, "x"), 1),
                      0.0).state
        s = core.step(s, RoleAssigned(sw.name, "master", 1), 0.0).state
        # read back holding its plan (LLDP waits while a switch is being programmed)
        s = core.step(s, ReadBackDone(sw.name, 1, SwitchState(writes.target_of(s, sw.name))),
                      0.0).state
    s = core.step(s, Tick(0.0), 0.0).state  # arms the timers
    st = core.step(s, Tick(5.0), 5.0)
    probes = [e for e in st.effects if isinstance(e, SendPacket)]
    assert len(probes) == 2 * sum(1 for ln in FABRIC.links
                                  if not FABRIC.is_host(ln.a) and not FABRIC.is_host(ln.b))
    # deliver every probe through the declared wiring, except over leaf1-spine1
    s = st.state
    cut = {(n, FABRIC.port_towards(n, m)) for n, m in (("leaf1", "spine1"), ("spine1", "leaf1"))}
    for p in probes:
        if (p.switch, p.port) in cut:
            continue
        peer, peer_port = FABRIC.port_map[(p.switch, p.port)]
        s = core.step(s, PacketIn(peer, peer_port, p.data), 6.0).state
    st = core.step(s, Tick(10.0), 10.0)
    warn = [e.text for e in st.effects if isinstance(e, Log) and e.level == "warning"]
    assert len(warn) == 1 and "not seen: no LLDP probe sent from either end has arrived" in \
        warn[0] and "leaf1 (dpid=0x3) port 3" in warn[0]
    # the link shows up: the resolved line says so plainly
    s = st.state
    for p in [e for e in st.effects if isinstance(e, SendPacket) and (e.switch, e.port) in cut]:
        peer, peer_port = FABRIC.port_map[(p.switch, p.port)]
        s = core.step(s, PacketIn(peer, peer_port, p.data), 11.0).state
    st = core.step(s, Tick(15.0), 15.0)
    info = [e.text for e in st.effects if isinstance(e, Log) and e.level == "info"]
    assert any("LLDP probes now arrive over declared link" in t and "up as declared" in t
               for t in info), info


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


def test_state_is_a_value_and_the_plan_a_function_of_it():
    a, b = _state("pinned"), _state("pinned")
    assert intended_plan(a) == intended_plan(b)
    moved = replace(a, placement={})
    assert intended_plan(moved) != intended_plan(a)


def test_the_batching_window_is_state_folded_from_the_batches_answered():
    """The northbound's gathering window is part of the state value: each answered batch
    folds in as an event, the plan is untouched and no switch gets anything."""
    st = _state("pinned")
    assert st.batching == BatchWindow()
    out = core.step(st, BatchAnswered(63, 0.4, 37), 1.0)
    assert out.state.batching == BatchWindow().after(63, 0.4, 37)
    assert out.state.batching.expected == 100 and out.state.batching.window == 0.2
    assert out.effects == () and intended_plan(out.state) == intended_plan(st)
    again = core.step(out.state, BatchAnswered(1, 0.01, 0), 2.0).state.batching
    assert again.expected == 0 and again.window == BatchWindow().window_s


def test_a_commit_takes_over_the_plan_its_preview_made_and_only_that():
    """The service previews a commit off the loop (its plan computed there); the commit
    coming back to the loop takes that plan over instead of computing it a second time — when
    its inputs are the preview's. A preview of another change, or made at another generation
    (a link went down since), is not taken; the plan is the same either way."""
    from controller.runtime.intentstore import IntentUpdate, synced
    from controller.runtime.service import _preview

    st = _state("pinned")
    intended_plan(st)
    moved = dict(list(st.placement.items())[1:])          # one pinned flow unplaced
    update = IntentUpdate(placement=moved)
    planned, changes, _ = _preview(st, update, 0.0, 0.0)
    assert changes                                          # the plan changes
    plain = core.adopt(st, synced(st, update, st.intent_generation + 1, 0.0), 0.0)
    taken = core.adopt(st, synced(st, update, st.intent_generation + 1, 0.0, planned), 0.0)
    assert taken.memo is planned.memo and plain.memo is not planned.memo
    assert intended_plan(taken) == intended_plan(plain)
    # another change's preview, or one from another generation: not taken
    other, _, _ = _preview(st, IntentUpdate(placement={}), 0.0, 0.0)
    later = replace(st, generation=st.generation + 1)
    for hint in (other, planned):
        base = st if hint is other else later
        got = core.adopt(base, synced(base, update, st.intent_generation + 1, 0.0, hint), 0.0)
        assert got.memo is not hint.memo
        assert intended_plan(got) == intended_plan(plain)


def test_placed_matches_are_carried_over_and_only_new_flows_matched(monkeypatch):
    """A registration batch checks its flows against every placed flow's match: a new
    generation computes the matches of its new flows only (the others carried over), and the
    result is the whole computation's."""
    from controller.plan import build
    from controller.runtime import intent

    st = _state("pinned")
    placed = dict(st.placement)
    first = dict(list(placed.items())[:-2])
    a = replace(st, placement=first)
    assert intent.placed_by_match(a) == {build.pinned_match(FABRIC, d): d for d in first}
    calls: list[object] = []
    real = intent.pinned_match
    monkeypatch.setattr(intent, "pinned_match", lambda f, d: calls.append(d) or real(f, d))
    b = a.bump(placement=placed)                  # two flows more, one generation on
    assert intent.placed_by_match(b) == {build.pinned_match(FABRIC, d): d for d in placed}
    assert sorted(map(str, calls)) == sorted(str(d) for d in placed if d not in first)


def test_the_effective_policy_is_made_once_per_policy_and_registrations():
    """Every registration request asks for the policy with the registered collectives
    appended (a copy of a policy with a thousand collectives): made once while the policy and
    the registrations are the same objects, again when they change."""
    from controller.policy.model import Collective
    from controller.runtime.state import Registered

    st = _state("pinned")
    base = st.policy.policy
    extra = Collective.model_validate({"name": "extra", "algorithm": "ring",
                                       "ranks": ["h1", "h3"]})
    reg = replace(st, registered={"extra": Registered(extra, "job", None, 0.0)})
    first = reg.effective_policy
    assert reg.effective_policy is first
    assert [c.name for c in first.collectives] == [*(c.name for c in base.collectives), "extra"]
    other = replace(reg, registered=dict(reg.registered))
    assert other.effective_policy is not first and other.effective_policy == first


def test_the_pinned_entry_cache_is_pruned_only_when_it_doubles(monkeypatch):
    """Each generation's pinned entries come from a cache by (flow, path) carried between
    generations; pruning it to the placed flows on every generation hashed every flow and
    path (~25 ms per registration batch at k = 16). Flows gone stay until the cache holds
    twice the placed flows (plus a slack): bounded, and every plan is the one computed
    afresh."""
    from controller.runtime import intent

    monkeypatch.setattr(intent, "ENTRY_CACHE_SLACK", 0)
    st = _state("pinned")
    placed = list(st.placement.items())
    assert len(placed) >= 4
    intended_plan(st)
    sizes = []
    for i in range(1, len(placed)):
        st = st.bump(placement=dict(placed[i:]))        # one flow fewer each generation
        fresh = replace(_state("pinned"), placement=dict(placed[i:]))
        assert intended_plan(st) == intended_plan(fresh)
        cache = st.memo.entries[1]
        live = len(placed) - i
        assert len(cache) <= 2 * live and set(dict(placed[i:]).items()) <= set(cache)
        sizes.append(len(cache))
    assert len(placed) in sizes[:2]                      # flows gone were kept at first
