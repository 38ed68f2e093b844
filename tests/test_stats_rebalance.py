"""Port/flow counters → per-link background load → re-balancing, without os-ken or switches.

The runtime is fed fake counters as the driver would from statistics replies; the produced
changes are pushed into the flow-table simulator and the moved flow traced across the fabric.
"""

from __future__ import annotations

import logging

import pytest

from controller.drivers.openflow import encode
from controller.drivers.openflow.app import AifabricApp
from controller.model.topology import load_topology
from controller.plan.build import pinned_match
from controller.plan.model import ETH_TYPE_IPV4, PRIO_PINNED
from controller.policy import load_policy
from controller.runtime.state import ControllerRuntime, TrafficMeter, ff_group_id
from controller.te.reroute import Hysteresis
from controller.testing import FakeFabric
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY
from tests.test_openflow_app import FakeDatapath

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


@pytest.fixture
def rt(tmp_path):
    r = ControllerRuntime(FABRIC, _one_ring_policy(tmp_path),
                          hysteresis=Hysteresis(threshold=0.9, margin=0.1, min_hold_s=5.0))
    r.initial_plan()
    return r


class Counters:
    """Cumulative byte counters of every port and pinned entry, advanced by rates (bit/s)."""

    def __init__(self, rt: ControllerRuntime):
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
        ff.tables[name].apply(encode.encode_full(sp))
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


def test_app_stats_round_requests_and_logs_the_move(rt, caplog):
    caplog.set_level(logging.INFO, logger="aifabric.openflow")
    app = AifabricApp(runtime=rt, stats_interval_s=1.0, rebalance=True)
    ff = FakeFabric.empty(FABRIC)
    dps = {s.name: FakeDatapath(s.dpid, ff.tables[s.name]) for s in FABRIC.switches}
    for dp in dps.values():
        app.switch_connected(dp, now_s=0.0)
        dp.sent.clear()
    app.stats_round(0.0)
    for name, dp in dps.items():
        kinds = [type(m).__name__ for m in dp.sent]
        assert kinds == ["OFPPortStatsRequest", "OFPFlowStatsRequest"], (name, kinds)
    # replies as the driver decodes them: OFPMatch objects from the encoder
    h1h3 = _flow(rt, "ring-a h1->h3")
    spine = rt.paths[h1h3][2]
    m = encode.encode_match(pinned_match(FABRIC, h1h3))
    up = FABRIC.port_towards("leaf1", spine)
    # 15 Mbit/s through the port, 3 of them the pinned entry's, for two rounds
    for t, (tot, pin) in enumerate([(0, 0), (1_875_000, 375_000), (3_750_000, 750_000)]):
        app.port_stats(dps["leaf1"].id, [(up, tot), (0xfffffffe, 99)], float(t))
        app.flow_stats(dps["leaf1"].id, [(PRIO_PINNED, m, pin), (100, m, 5)], float(t))
        if t == 1:
            assert app.stats_round(1.0).moves == ()
    for dp in dps.values():
        dp.sent.clear()
    out = app.stats_round(2.0)
    assert out is not None and [mv.flow for mv in out.moves] == [h1h3]
    assert "[leaf1 dpid=0x3] rebalance: moved ring-a h1->h3" in caplog.text
    assert f"leaf1->{spine} at 1.80" in caplog.text
    assert "background 12.0 Mbit/s" in caplog.text
    changed = {n for n, dp in dps.items()
               if any(type(x).__name__ == "OFPFlowMod" for x in dp.sent)}
    assert changed == set(out.changes)


def test_fast_failover_groups_protect_leaf_uplinks(rt, tmp_path):
    ffrt = ControllerRuntime(FABRIC, rt.policy, fast_failover=True)
    plan = ffrt.initial_plan()
    h1h3 = _flow(ffrt, "ring-a h1->h3")
    spine = ffrt.paths[h1h3][2]
    other = "spine2" if spine == "spine1" else "spine1"
    p1, p2 = FABRIC.port_towards("leaf1", spine), FABRIC.port_towards("leaf1", other)
    groups = {g.group_id: g for g in plan.switches["leaf1"].groups if g.kind == "fast-failover"}
    assert ff_group_id((p1, p2)) in groups
    assert groups[ff_group_id((p1, p2))].ports == (p1, p2)
    # spines have one next hop towards a leaf: no fast-failover group there
    assert not [g for g in plan.switches[spine].groups if g.kind == "fast-failover"]
    ff = FakeFabric.empty(FABRIC)
    for name, sp in plan.switches.items():
        ff.tables[name].apply(encode.encode_full(sp))
    h1, h3 = FABRIC.host_by_name["h1"], FABRIC.host_by_name["h3"]
    pkt = {"eth_type": ETH_TYPE_IPV4, "ipv4_src": h1.ipv4, "ipv4_dst": h3.ipv4, "ip_proto": 17,
           "l4_src": 40000, "l4_dst": 9000}
    assert ff.trace("h1", pkt) == [("h1", "leaf1", spine, "leaf2", "h3")]
    # the link dies; before the controller hears of it the switch already uses the backup
    ff.set_link("leaf1", spine, False)
    assert ff.trace("h1", pkt) == [("h1", "leaf1", other, "leaf2", "h3")]
    # and the re-pin on port-status keeps it there (entries without a backup use plain output)
    changes = ffrt.port_status("leaf1", p1, False)
    for name, ch in changes.items():
        ff.tables[name].apply(encode.encode_changes(ch))
    assert ff.trace("h1", pkt) == [("h1", "leaf1", other, "leaf2", "h3")]


def test_ff_group_ids():
    assert ff_group_id((3, 4)) == 0x8000_0000 | 3 << 24 | 1 << 3
    assert ff_group_id((4, 3)) != ff_group_id((3, 4))
    with pytest.raises(ValueError):
        ff_group_id((3,))
    with pytest.raises(ValueError):
        ff_group_id((3, 30))
