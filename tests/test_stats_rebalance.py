"""Port/flow counters → per-link background load → re-balancing.

The pure parts (meter, link loads, the re-balancing round, adopted by ``core.step``) are fed
fake counters as the driver would from statistics replies; the produced changes are pushed into
the flow-table simulator and the moved flow traced across the fabric. The last tests run the
whole controller on fake switches whose counters come from traffic sent through the simulator.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from controller.drivers.openflow import encode
from controller.drivers.openflow.dialect import DIALECTS, OF15
from controller.model.topology import load_topology
from controller.plan.build import pinned_match
from controller.plan.model import ETH_TYPE_IPV4, PRIO_PINNED, NextHopSet
from controller.policy import load_policy
from controller.runtime import core
from controller.runtime.events import PlacementReady
from controller.runtime.intent import intended_plan
from controller.runtime.meter import TrafficMeter, link_loads
from controller.runtime.placement import initial_placement, pinned_demands_bps
from controller.runtime.rebalance import rebalance_round
from controller.runtime.state import PolicyInForce, RuntimeSettings, initial_state
from controller.te.reroute import Hysteresis
from controller.testing import FakeFabric
from controller.testing.rig import Rig
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY

FABRIC = load_topology(MAIN_TOPOLOGY)
MBPS = 1e6
CAP = 15 * MBPS


def _one_ring_policy(tmp_path):
    """The main pinned policy with ring-a only: every leaf has one spare uplink."""
    text = PINNED_POLICY.read_text()
    head, _, _ = text.partition("  - name: ring-b")
    p = tmp_path / "ring_a.yaml"
    p.write_text(head)
    return load_policy(p, FABRIC)


class RT:
    """The re-balancing parts of the runtime over a state value and a meter, as the controller
    process composes them (counters → meter → loads → round → ``core.step``)."""

    def __init__(self, policy, hysteresis=None, **settings):
        self.state = initial_state(FABRIC, PolicyInForce(policy),
                                   RuntimeSettings(rebalance=hysteresis, **settings),
                                   placement=initial_placement(FABRIC, policy))
        self.meter = TrafficMeter()

    @property
    def paths(self):
        return self.state.placement

    @property
    def plan(self):
        return intended_plan(self.state)

    def port_counters(self, sw, tx, now):
        self.meter.ports(sw, tx, now)

    def entry_counters(self, sw, counts, now):
        self.meter.entries(sw, {m: b for (prio, m), b in counts.items() if prio == PRIO_PINNED},
                           now)

    def link_loads(self, now):
        st = self.state
        return link_loads(FABRIC, self.meter, st.placement, pinned_demands_bps(FABRIC,
                          st.placement), st.down_links, st.rebalance.changed_at_s, now)

    def link_loads_depth(self, now, depth):
        st = self.state
        return link_loads(FABRIC, self.meter, st.placement, pinned_demands_bps(FABRIC,
                          st.placement), st.down_links, st.rebalance.changed_at_s, now,
                          standing_depth=depth)

    def rebalance(self, now):
        st = self.state
        demands = pinned_demands_bps(FABRIC, st.placement)
        out = rebalance_round(st, self.link_loads_depth(now, st.settings.standing_depth),
                              demands, now)
        step = core.step(st, PlacementReady("rebalance", out.generation, out.placement, out), now)
        self.state = step.state
        return SimpleNamespace(**vars(out), changes=core.plan_diff(st, step.state))


@pytest.fixture
def rt(tmp_path):
    return RT(_one_ring_policy(tmp_path), Hysteresis(threshold=0.9, margin=0.1, min_hold_s=5.0))


class Counters:
    """Cumulative byte counters of every port and pinned entry, advanced by rates (bit/s)."""

    def __init__(self, rt: RT):
        self.rt = rt
        self.port = {}  # (switch, port) -> bytes
        self.entry = {}  # (switch, Match) -> bytes
        self.t = 0.0

    def step(self, dt_s: float, flow_rate_bps: dict, background_bps: dict) -> None:
        """Advance by ``dt_s``: every pinned flow at its rate along its current path, plus
        background on directed links; then report every switch's counters to the runtime."""
        self.t += dt_s
        rt = self.rt
        for d, path in rt.paths.items():
            r = flow_rate_bps.get(d.label, 0.0)
            m = pinned_match(FABRIC, d)
            for u, v in zip(path[1:-1], path[2:], strict=True):
                key = (u, FABRIC.port_towards(u, v))
                self.port[key] = self.port.get(key, 0) + int(r * dt_s / 8)
                self.entry[(u, m)] = self.entry.get((u, m), 0) + int(r * dt_s / 8)
        for (u, v), r in background_bps.items():
            key = (u, FABRIC.port_towards(u, v))
            self.port[key] = self.port.get(key, 0) + int(r * dt_s / 8)
        for sw in FABRIC.switches:
            ports = {p: b for (s, p), b in self.port.items() if s == sw.name}
            for ln in FABRIC.links:
                if sw.name in (ln.a, ln.b):
                    ports.setdefault(ln.port_of(sw.name), 0)
            rt.port_counters(sw.name, ports, self.t)
            live = {(m) for d, p in rt.paths.items() for m in [pinned_match(FABRIC, d)]
                    if sw.name in p}
            rt.entry_counters(sw.name, {(PRIO_PINNED, m): b for (s, m), b in self.entry.items()
                                        if s == sw.name and m in live}, self.t)


def _flow(rt, label):
    return next(d for d in rt.paths if d.label == label)


def test_meter_rates_and_counter_reset():
    m = TrafficMeter()
    m.ports("leaf1", {3: 0}, 0.0)
    assert m.port_rate_bps == {}
    m.ports("leaf1", {3: 1_875_000}, 1.0)  # 15 Mbit in 1 s
    assert m.port_rate_bps[("leaf1", 3)] == (pytest.approx(15e6), 0.0, 1.0)
    m.ports("leaf1", {3: 10}, 2.0)  # went backwards: no rate
    assert ("leaf1", 3) not in m.port_rate_bps


def test_background_on_a_pinned_link_moves_only_that_flow(rt):
    c = Counters(rt)
    h1h3 = _flow(rt, "ring-a h1->h3")
    spine = rt.paths[h1h3][2]
    other = "spine2" if spine == "spine1" else "spine1"
    rates = {d.label: CAP for d in rt.paths}
    c.step(1.0, rates, {})
    for _ in range(3):
        c.step(1.0, rates, {})
        quiet = rt.rebalance(c.t)
        assert quiet.moves == () and quiet.changes == {} and quiet.hot == ()
    # a 12 Mbit/s background flow arrives on leaf1 -> spine -> leaf2; TCP squeezes h1->h3 to 3
    rates[h1h3.label] = 3 * MBPS
    bg = {("leaf1", spine): 12 * MBPS, (spine, "leaf2"): 12 * MBPS}
    c.step(1.0, rates, bg)
    # one round is not enough: a background must persist for two rounds
    first = rt.rebalance(c.t)
    assert first.moves == () and first.hot == ()
    c.step(1.0, rates, bg)
    loads = rt.link_loads(c.t)
    hot = loads[("leaf1", spine)]
    assert hot.total_bps == pytest.approx(15 * MBPS, rel=1e-3)
    assert hot.pinned_bps == pytest.approx(3 * MBPS, rel=1e-3)
    assert hot.background_bps == pytest.approx(12 * MBPS, rel=1e-3)
    assert hot.utilisation == pytest.approx(1.8, rel=1e-3)  # (12 + 15) / 15
    before = dict(rt.paths)
    out = rt.rebalance(c.t)
    assert [m.flow for m in out.moves] == [h1h3]
    assert rt.paths[h1h3][2] == other
    assert {d: p for d, p in rt.paths.items() if d != h1h3} == {
        d: p for d, p in before.items() if d != h1h3}
    assert out.max_utilisation_before == pytest.approx(1.8, rel=1e-3)
    assert out.max_utilisation_after == pytest.approx(1.0, rel=1e-3)
    # only leaf1 (new output), the old spine (entry removed) and the new spine (entry added)
    assert set(out.changes) == {"leaf1", spine, other}
    assert [f.match for f in out.changes["leaf1"].modify_flows] == [pinned_match(FABRIC, h1h3)]
    assert out.changes[spine].delete_flows and out.changes[other].add_flows
    # the changed plan forwards h1 -> h3 through the new spine in the simulator
    ff = FakeFabric.empty(FABRIC)
    for name, sp in rt.plan.switches.items():
        ff.tables[name].apply(encode.encode_full(sp, DIALECTS[OF15.version]))  # hashed ECMP
    h1, h3 = FABRIC.host_by_name["h1"], FABRIC.host_by_name["h3"]
    paths = ff.trace("h1", {"eth_type": ETH_TYPE_IPV4, "ipv4_src": h1.ipv4, "ipv4_dst": h3.ipv4,
                            "ip_proto": 6, "l4_src": 40000, "l4_dst": 5201})
    assert paths == [("h1", "leaf1", other, "leaf2", "h3")]


def test_hysteresis_no_flap_no_move_for_small_background(rt):
    c = Counters(rt)
    h1h3 = _flow(rt, "ring-a h1->h3")
    spine = rt.paths[h1h3][2]
    rates = {d.label: CAP for d in rt.paths}
    c.step(1.0, rates, {})
    # 1 Mbit/s of background (ACKs, ARP, ...) is below the 0.1 margin: nothing moves
    small = {("leaf1", spine): 1 * MBPS}
    rates[h1h3.label] = 14 * MBPS
    for _ in range(3):
        c.step(1.0, rates, small)
        assert rt.rebalance(c.t).moves == ()
    # a one-round spike (counters out of step) moves nothing
    c.step(1.0, rates, {("leaf1", spine): 12 * MBPS})
    assert rt.rebalance(c.t).moves == ()
    c.step(1.0, rates, small)
    assert rt.rebalance(c.t).moves == ()
    # a big background that persists moves it once ...
    big = {("leaf1", spine): 12 * MBPS}
    rates[h1h3.label] = 3 * MBPS
    moved_at = None
    for _ in range(2):
        c.step(1.0, rates, big)
        if rt.rebalance(c.t).moves:
            moved_at = c.t
    assert moved_at is not None
    new_spine = rt.paths[h1h3][2]
    # ... and when the background follows it, it stays put for the hold time (5 s)
    follow = {("leaf1", new_spine): 12 * MBPS}
    moved_back = None
    for _ in range(10):
        c.step(1.0, rates, follow)
        out = rt.rebalance(c.t)
        if out.moves:
            moved_back = c.t
            break
        if out.hot:
            assert "hold time" in out.reason
    assert rt.paths[h1h3][2] == spine  # moved back once the hold time was over
    assert moved_back - moved_at >= 5.0


def test_new_entry_without_rate_is_not_taken_for_background(rt):
    c = Counters(rt)
    h1h3 = _flow(rt, "ring-a h1->h3")
    spine = rt.paths[h1h3][2]
    rates = {d.label: CAP for d in rt.paths}
    c.step(1.0, rates, {})
    for _ in range(2):
        c.step(1.0, rates, {("leaf1", spine): 12 * MBPS})
        rt.rebalance(c.t)
    new_spine = rt.paths[h1h3][2]
    assert new_spine != spine
    c.step(1.0, rates, {})
    # rates spanning the move are not used, and the new spine's entry for h1->h3 has one
    # sample only: the links are left out, not taken for background
    assert rt.link_loads(c.t) == {}
    c.step(1.0, rates, {})
    assert rt.link_loads(c.t)[(new_spine, "leaf2")].background_bps == pytest.approx(0, abs=1e3)


def _send(ff, src, dst, nbytes, sport=40000):
    a, b = FABRIC.host_by_name[src], FABRIC.host_by_name[dst]
    return ff.send(src, {"eth_type": ETH_TYPE_IPV4, "ipv4_src": a.ipv4, "ipv4_dst": b.ipv4,
                         "ip_proto": 6, "l4_src": sport, "l4_dst": 5201}, nbytes)


def test_controller_requests_counters_and_moves_a_flow_off_a_hot_link(tmp_path, caplog):
    """The whole loop on fake switches: statistics requests, replies assembled from the
    simulator's counters (traffic sent through it), a background persisting for two rounds,
    the move logged with its reason, only the changed switches written."""
    caplog.set_level(logging.INFO)
    pol = _one_ring_policy(tmp_path)
    rig = Rig(FABRIC, pol, options={"stats_interval_s": 1.0, "rebalance": Hysteresis(
        threshold=0.9, margin=0.1, min_hold_s=5.0)})
    try:
        rig.connect()
        rig.tick(0.0)  # arms the timers
        d = next(d for d in rig.ctl.state.placement if d.label == "ring-a h1->h3")
        spine = rig.ctl.state.placement[d][2]
        other = "spine2" if spine == "spine1" else "spine1"
        m = pinned_match(FABRIC, d)
        for t in range(1, 5):
            # per second: 15 Mbit/s on leaf1->spine, 3 of it the pinned flow h1->h3
            pkt = {"eth_type": ETH_TYPE_IPV4, "ipv4_src": FABRIC.host_by_name["h1"].ipv4,
                   "ipv4_dst": FABRIC.host_by_name["h3"].ipv4, **{k: v for k, v in
                                                                m.fields().items()
                                                                if k.startswith("ip_")}}
            rig.ff.send("h1", {**pkt, "ip_proto": 6, "l4_src": 1, "l4_dst": 2}, 375_000)
            # background: h2 -> h4 forced over the same spine (a foreign entry of ours)
            up = FABRIC.port_towards("leaf1", spine)
            rig.ff.tables["leaf1"].port_counters[up][3] += 1_500_000
            rig.clear()
            rig.tick(float(t))
            kinds = [k for k in rig.switches["leaf2"].sent_kinds() if k.endswith("Request")]
            assert kinds == ["OFPPortStatsRequest", "OFPFlowStatsRequest"], kinds
            if rig.ctl.state.placement[d][2] == other:
                break
        assert rig.ctl.state.placement[d][2] == other, caplog.text[-2000:]
        assert "[leaf1 dpid=0x3] rebalance: moved ring-a h1->h3" in caplog.text
        assert f"leaf1->{spine} at" in caplog.text and "background" in caplog.text
        changed = {n for n, w in rig.writes().items() if w}
        assert changed == {"leaf1", spine, other}
        paths = _send_trace(rig.ff, "h1", "h3")
        assert paths == [("h1", "leaf1", other, "leaf2", "h3")]
    finally:
        rig.close()


def _send_trace(ff, src, dst):
    a, b = FABRIC.host_by_name[src], FABRIC.host_by_name[dst]
    return ff.trace(src, {"eth_type": ETH_TYPE_IPV4, "ipv4_src": a.ipv4, "ipv4_dst": b.ipv4,
                          "ip_proto": 6, "l4_src": 40000, "l4_dst": 5201})


def test_fast_failover_sets_protect_leaf_uplinks(tmp_path):
    pol = _one_ring_policy(tmp_path)
    rig = Rig(FABRIC, pol, options={"fast_failover": True})
    try:
        rig.connect()
        plan = intended_plan(rig.ctl.state)
        d = next(d for d in rig.ctl.state.placement if d.label == "ring-a h1->h3")
        spine = rig.ctl.state.placement[d][2]
        other = "spine2" if spine == "spine1" else "spine1"
        p1, p2 = FABRIC.port_towards("leaf1", spine), FABRIC.port_towards("leaf1", other)
        ff_sets = {s for s in plan.switches["leaf1"].next_hop_sets() if s.kind == "failover"}
        assert NextHopSet("failover", (p1, p2)) in ff_sets
        # spines have one next hop towards a leaf: no failover set there
        assert not [s for s in plan.switches[spine].next_hop_sets() if s.kind == "failover"]
        h1, h3 = FABRIC.host_by_name["h1"], FABRIC.host_by_name["h3"]
        pkt = {"eth_type": ETH_TYPE_IPV4, "ipv4_src": h1.ipv4, "ipv4_dst": h3.ipv4,
               "ip_proto": 17, "l4_src": 40000, "l4_dst": 9000}
        assert rig.ff.trace("h1", pkt) == [("h1", "leaf1", spine, "leaf2", "h3")]
        # the link dies; before the controller hears of it the switch already uses the backup
        rig.ff.set_link("leaf1", spine, False)
        assert rig.ff.trace("h1", pkt) == [("h1", "leaf1", other, "leaf2", "h3")]
        # and the repair on port-status keeps it there
        rig.ff.set_link("leaf1", spine, True)
        rig.fail_link("leaf1", spine)
        assert rig.ff.trace("h1", pkt) == [("h1", "leaf1", other, "leaf2", "h3")]
        assert rig.ctl.state.placement[d][2] == other
    finally:
        rig.close()


# -- queue depth (P4 switches: fabric.p4's queue_depth_hist) -----------------------------------
BOUNDS = (0, 1, 2, 4, 8, 16, 32, 64)  # fabric.p4's buckets (controller/drivers/p4runtime/pipeline.py)


def _queues(port, hist_by_prio):
    from controller.telemetry.samples import QueueCounters

    return [QueueCounters(port, prio, 0, sum(h), depth_hist=tuple(h), depth_bounds=BOUNDS)
            for prio, h in hist_by_prio.items()]


def test_meter_queue_depth_is_the_interval_histogram_summed_over_queues():
    m = TrafficMeter()
    m.queues("leaf1", _queues(3, {0: [10, 0, 0, 0, 0, 0, 0, 0]}), 0.0)
    assert m.port_depth == {}  # one sample: no interval yet
    m.queues("leaf1", _queues(3, {0: [16, 0, 0, 0, 2, 0, 0, 0], 1: [0, 0, 0, 0, 0, 1, 1, 0]}),
             1.0)
    qd = m.port_depth[("leaf1", 3)]
    # interval: priority 0 gave 6 at depth 0 and 2 at >= 8; priority 1 (new) 1 each at 16, 32
    assert qd.packets == (6, 0, 0, 0, 2, 1, 1, 0) and (qd.t0_s, qd.t1_s) == (0.0, 1.0)
    assert qd.fraction_at_least(8) == pytest.approx(0.4)
    assert qd.fraction_at_least(0) == 1.0
    m.queues("leaf1", _queues(3, {0: [1, 0, 0, 0, 0, 0, 0, 0]}), 2.0)  # counters reset
    assert ("leaf1", 3) not in m.port_depth
    m.forget_switch("leaf1")
    assert m.port_depth == {} and m._depth == {}


def _depth_step(rt, c, port_queued):
    """Queue-depth histograms at ``c.t``: every switch–switch port enqueued 100 packets in the
    interval, ``port_queued[(u, v)]`` of them (default 0) at depth >= 16."""
    for sw in FABRIC.switches:
        qs = []
        for ln in FABRIC.links:
            if sw.name not in (ln.a, ln.b) or FABRIC.is_host(ln.a) or FABRIC.is_host(ln.b):
                continue
            peer = ln.b if ln.a == sw.name else ln.a
            port = ln.port_of(sw.name)
            deep = port_queued.get((sw.name, peer), 0)
            total = rt.depth_totals.setdefault((sw.name, port), [0] * len(BOUNDS))
            total[0] += 100 - deep
            total[5] += deep
            qs += _queues(port, {0: list(total)})
        rt.meter.queues(sw.name, qs, c.t)


def test_a_standing_queue_makes_a_link_hot_in_the_first_round(tmp_path):
    # With queue depth (P4), a background that shows as a standing queue at the link's egress
    # moves the flow at once; without a standing queue (or without depth: OpenFlow) the same
    # background must persist a second round (controller/runtime/rebalance.py docstring).
    for depth, moves_in_round in ((8, 1), (None, 2)):
        rt = RT(_one_ring_policy(tmp_path), Hysteresis(threshold=0.9, margin=0.1, min_hold_s=5.0),
                standing_depth=depth, queued_fraction=0.5)
        rt.depth_totals = {}
        c = Counters(rt)
        h1h3 = _flow(rt, "ring-a h1->h3")
        spine = rt.paths[h1h3][2]
        rates = {d.label: CAP for d in rt.paths}
        c.step(1.0, rates, {})
        _depth_step(rt, c, {})
        c.step(1.0, rates, {})
        _depth_step(rt, c, {})
        assert rt.rebalance(c.t).moves == ()
        rates[h1h3.label] = 3 * MBPS
        bg = {("leaf1", spine): 12 * MBPS, (spine, "leaf2"): 12 * MBPS}
        moved = None
        for rnd in (1, 2):
            c.step(1.0, rates, bg)
            _depth_step(rt, c, {("leaf1", spine): 80})
            if depth is not None:
                (ld,) = [x for k, x in rt.link_loads_depth(c.t, depth).items()
                         if k == ("leaf1", spine)]
                assert ld.queued_fraction == pytest.approx(0.8)
            out = rt.rebalance(c.t)
            if out.moves:
                moved = rnd
                assert [m.flow for m in out.moves] == [h1h3]
                break
        assert moved == moves_in_round, depth


def test_a_queue_without_background_moves_nothing(tmp_path):
    # TCP fills its own bottleneck queue: a standing queue on a link that carries only its
    # pinned flow at line rate is no reason to move it.
    rt = RT(_one_ring_policy(tmp_path), Hysteresis(threshold=0.9, margin=0.1, min_hold_s=5.0),
            standing_depth=8)
    rt.depth_totals = {}
    c = Counters(rt)
    h1h3 = _flow(rt, "ring-a h1->h3")
    spine = rt.paths[h1h3][2]
    rates = {d.label: CAP for d in rt.paths}
    for _ in range(4):
        c.step(1.0, rates, {})
        _depth_step(rt, c, {("leaf1", spine): 100})
        assert rt.rebalance(c.t).moves == ()


def test_rebalancing_asks_p4_switches_for_queue_counters(tmp_path):
    from controller.drivers.southbound import SwitchConnected, SwitchFeatures, SwitchState
    from controller.runtime import writes
    from controller.runtime.events import ReadBackDone, RequestCounters, RoleAssigned, Tick

    for depth, want in ((8, {"ports", "entries", "queues"}), (None, {"ports", "entries"})):
        rt = RT(_one_ring_policy(tmp_path), Hysteresis(), stats_interval_s=1.0,
                standing_depth=depth)
        st = rt.state
        for sw in FABRIC.switches:
            caps = frozenset({"queue_depth"}) if sw.name == "leaf1" else frozenset()
            st = core.step(st, SwitchConnected(sw.name, SwitchFeatures(
                "p4runtime" if sw.name == "leaf1" else "openflow", sw.dpid, "x",
                capabilities=caps)), 0.0).state
            # ours to write, holding its plan: counters are asked of the switches we write,
            # once they are programmed
            st = core.step(st, RoleAssigned(sw.name, "master"), 0.0).state
            st = core.step(st, ReadBackDone(sw.name, 0, SwitchState(
                writes.target_of(st, sw.name))), 0.0).state
        st = core.step(st, Tick(0.0), 0.0).state
        fx = core.step(st, Tick(1.5), 1.5).effects
        kinds = {r.switch: set(r.kinds) for r in fx if isinstance(r, RequestCounters)}
        assert kinds["leaf1"] == want and kinds["leaf2"] == {"ports", "entries"}, kinds
