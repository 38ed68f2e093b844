"""Telemetry: counters from the flow-table simulator (through the OpenFlow driver's statistics
requests and replies) and from a fake P4 target → per-link bytes, utilisation, loss, microbursts,
per-collective bytes and collisions, the traffic matrix, alerts, events and Prometheus."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from controller.drivers.southbound import PortStatus
from controller.model.topology import load_topology
from controller.plan.model import ETH_TYPE_IPV4
from controller.policy import load_policy
from controller.runtime.intent import intended_plan
from controller.runtime.metrics import METRICS, metric_names, registry_for
from controller.runtime.placement import initial_placement
from controller.te.collectives import FlowDemand
from controller.telemetry import (
    AlertRules,
    EventBus,
    PortCounters,
    QueueCounters,
    Telemetry,
    poll,
)
from controller.telemetry.derive import (
    LinkTap,
    collisions,
    counter_delta,
    host_pair_of_entry,
    link_interval,
    link_taps,
)
from controller.testing import FakeFabric
from controller.testing.rig import Rig
from tests.conftest import ECMP_POLICY, MAIN_TOPOLOGY, PINNED_POLICY

FABRIC = load_topology(MAIN_TOPOLOGY)
MB = 1_000_000


def _ip(h: str) -> str:
    return FABRIC.host_by_name[h].ipv4


def _pkt(src: str, dst: str, sport: int = 40000) -> dict:
    return {"eth_type": ETH_TYPE_IPV4, "ipv4_src": _ip(src), "ipv4_dst": _ip(dst),
            "ip_proto": 6, "l4_src": sport, "l4_dst": 5201}


@pytest.fixture
def lab():
    """A pinned controller (runtime + telemetry + events + driver) on fake switches."""
    tel = Telemetry(FABRIC, AlertRules(window_s=2.0, hold_s=1.0))
    bus = EventBus(clock=lambda: 1000.0)
    ff = FakeFabric.empty(FABRIC, hash_fields=("ipv4_src", "ipv4_dst", "l4_src"))
    rig = Rig(FABRIC, load_policy(PINNED_POLICY, FABRIC), telemetry=tel, events=bus, ff=ff,
              options={"stats_interval_s": 1.0})
    rig.connect()
    yield SimpleNamespace(rig=rig, ctl=rig.ctl, rt=_Paths(rig), tel=tel, bus=bus, ff=ff)
    rig.close()


class _Paths:
    def __init__(self, rig):
        self.rig = rig

    @property
    def paths(self):
        return self.rig.ctl.state.placement


def _sample(lab, now_s: float) -> None:
    """Every switch answers port, flow and queue statistics (through the driver) at now_s."""
    lab.rig.sample(now_s)


def _port(lab, a: str, b: str, up: bool) -> None:
    """Both ends of a–b report their port (as Open vSwitch does)."""
    lab.rig.fail_link(a, b, up)


def test_link_taps_cover_every_direction():
    taps = link_taps(FABRIC)
    assert len(taps) == 2 * len(FABRIC.links)
    up = taps[("leaf1", "spine1")]
    assert (up.switch, up.side, up.far) == ("leaf1", "tx", ("spine1", FABRIC.port_towards(
        "spine1", "leaf1")))
    h = FABRIC.host_by_name["h1"]
    assert taps[("h1", "leaf1")] == LinkTap(("h1", "leaf1"), "leaf1", h.port, "rx", None, 15e6)
    assert taps[("leaf1", "h1")].side == "tx"


def test_link_interval_rate_loss_and_reset():
    tap = LinkTap(("a", "b"), "a", 1, "tx", ("b", 2), 10e6)
    prev = {("a", 1): (0.0, PortCounters(1, 0, 0, tx_packets=0)),
            ("b", 2): (0.0, PortCounters(2, 0, 0))}
    cur = {("a", 1): (0.5, PortCounters(1, 0, 625_000, tx_packets=990, tx_dropped=5)),
           ("b", 2): (0.5, PortCounters(2, 0, 0, rx_dropped=5))}
    iv = link_interval(tap, prev, cur)
    assert iv.rate_bps == pytest.approx(10e6) and iv.utilisation == pytest.approx(1.0)
    assert iv.dropped == 10 and iv.loss_ratio == pytest.approx(0.01)
    back = {("a", 1): (1.0, PortCounters(1, 0, 10))}
    assert link_interval(tap, cur, back) is None  # counter went backwards
    assert counter_delta(5, 3) is None and counter_delta(3, 5) == 2


def test_collisions_and_host_pairs():
    a, b = FlowDemand("r", 0, "h1", "h3"), FlowDemand("s", 0, "h2", "h4")
    p = {a: ("h1", "leaf1", "spine1", "leaf2", "h3"), b: ("h2", "leaf1", "spine1", "leaf2", "h4")}
    assert set(collisions(p)) == {("leaf1", "spine1"), ("spine1", "leaf2")}
    assert collisions(p, heavy={"r"}) == {}
    p[b] = ("h2", "leaf1", "spine2", "leaf2", "h4")
    assert collisions(p) == {}
    from controller.plan.model import Match

    pinned = Match(eth_type=ETH_TYPE_IPV4, ipv4_src=_ip("h1"), ipv4_dst=_ip("h3"))
    assert host_pair_of_entry(FABRIC, "leaf1", pinned) == ("h1", "h3")
    assert host_pair_of_entry(FABRIC, "spine1", pinned) is None  # counted once, at the source leaf
    route = Match(eth_type=ETH_TYPE_IPV4, ipv4_dst=_ip("h3"))
    assert host_pair_of_entry(FABRIC, "leaf1", route) == ("leaf1/*", "h3")
    assert host_pair_of_entry(FABRIC, "leaf2", route) is None  # local destination: mixed sources


def test_simulator_counters_give_link_bytes_of_the_pinned_paths(lab):
    """Traffic of every pinned flow crosses the simulator; the statistics replies, through the
    app, must give exactly the bytes of the pinned paths on every fabric link."""
    _sample(lab, 0.0)
    sent = {}
    for i, (d, path) in enumerate(sorted(lab.rt.paths.items())):
        nbytes = (i + 1) * 100_000
        got = lab.ff.send(d.src, _pkt(d.src, d.dst), nbytes, npackets=nbytes // 1000)
        assert got == path  # the pinned entries carry it
        sent[d] = nbytes
    # plus ECMP traffic between hosts whose flow is not pinned
    ecmp_path = lab.ff.send("h1", _pkt("h1", "h4"), 50_000, 50)
    _sample(lab, 1.0)
    expect = {}
    for d, nbytes in sent.items():
        p = lab.rt.paths[d]
        for link in zip(p, p[1:], strict=False):
            expect[link] = expect.get(link, 0) + nbytes
    for link in zip(ecmp_path, ecmp_path[1:], strict=False):
        expect[link] = expect.get(link, 0) + 50_000
    by = {s.link: s for s in lab.tel.link_status()}
    for link, st in by.items():
        assert st.bytes_total == expect.get(link, 0), link
        assert st.rate_bps == pytest.approx(8 * expect.get(link, 0) / 1.0)
        assert st.utilisation == pytest.approx(8 * expect.get(link, 0) / 15e6)
    colls = {c.name: c for c in lab.tel.collective_status()}
    assert colls["ring-a"].bytes_total == sum(n for d, n in sent.items() if d.collective == "ring-a")
    assert colls["ring-a"].collision_links == () and colls["ring-b"].collision_links == ()
    for d, path, nbytes in colls["ring-b"].flows:
        assert nbytes == sent[d] and path == lab.rt.paths[d]
    tm = lab.tel.traffic_matrix()
    assert tm[("h1", "h3")] == sent[next(d for d in sent if d.label == "ring-a h1->h3")]
    assert tm[("leaf1/*", "h4")] == 50_000  # ECMP: per-destination entry on a 2-host leaf


def test_real_replies_and_queue_stats(lab):
    lab.ff.send("h1", _pkt("h1", "h3"), 9000, 1)
    port = FABRIC.host_by_name["h1"].port
    lab.rig.switches["leaf1"].queues = [(port, 1, 777, 3, 2)]
    _sample(lab, 5.0)
    assert lab.tel.ports[("leaf1", port)][1].rx_bytes == 9000
    ((_, q),) = [v for k, v in lab.tel.queues.items() if k[0] == "leaf1"]
    assert q == QueueCounters(port, 1, 777, 3, 2)
    # the statistics round asks for queues too when telemetry is on
    lab.rig.tick(6.0)  # arms the timer
    lab.rig.clear()
    lab.rig.tick(7.0)
    assert [k for k in lab.rig.switches["leaf1"].sent_kinds() if k.endswith("Request")] == [
        "OFPPortStatsRequest", "OFPFlowStatsRequest", "OFPQueueStatsRequest"]


class FakeP4Target:
    """A polled target (the CounterSource protocol): per-port counters like P4 indirect
    counters, derived from the simulator table of the same switch; ``fail`` makes it time out."""

    def __init__(self, switch: str, ff: FakeFabric):
        self.switch = switch
        self.table = ff.tables[switch]
        self.fail = False
        self.depth = 4096

    def read_port_counters(self):
        if self.fail:
            raise TimeoutError("no answer within 1 s")
        return [PortCounters(p, c[2], c[3], c[0], c[1], c[4], c[5])
                for p, c in self.table.port_counters.items()]

    def read_queue_counters(self):
        return [QueueCounters(p, 0, c[3], c[1], 0, depth_bytes=self.depth, ecn_marked_packets=0)
                for p, c in self.table.port_counters.items()]


def test_fake_p4_target_polled_into_telemetry():
    ff = FakeFabric.empty(FABRIC, hash_fields=("ipv4_src", "ipv4_dst"))
    pol = load_policy(PINNED_POLICY, FABRIC)
    from controller.drivers.openflow import encode
    from controller.runtime.state import PolicyInForce, RuntimeSettings, initial_state

    st = initial_state(FABRIC, PolicyInForce(pol), RuntimeSettings(),
                       placement=initial_placement(FABRIC, pol))
    for name, sp in intended_plan(st).switches.items():
        ff.tables[name].apply(encode.encode_full(sp))
    tel = Telemetry(FABRIC)
    rt = SimpleNamespace(paths=st.placement)
    tel.set_paths(rt.paths)
    targets = [FakeP4Target(s.name, ff) for s in FABRIC.switches]
    assert poll(targets, tel, 0.0) == []
    d = next(d for d in rt.paths if d.label == "ring-b h2->h4")
    path = ff.send("h2", _pkt("h2", "h4"), 1_875_000, 1250)  # 15 Mbit in 1 s
    targets[-1].fail = True
    failed = poll(targets, tel, 1.0)
    assert failed == [f"{targets[-1].switch}: TimeoutError: no answer within 1 s"]
    assert path == rt.paths[d]
    by = {s.link: s for s in tel.link_status()}
    for link in zip(path, path[1:], strict=False):
        if link[0] == targets[-1].switch or (link[1] == "leaf1" and link[0] == "h2"):
            continue
        if by[link].measured_at_s is None:  # measured at the silent switch
            continue
        assert by[link].utilisation == pytest.approx(1.0), link
        assert by[link].bytes_total == 1_875_000
    assert tel.microbursts[(path[1], path[2])] == 1  # one interval above 0.95
    assert any(v[1].depth_bytes == 4096 for v in tel.queues.values())


def test_link_failure_alerts_events_and_metric(lab):
    sub = lab.bus.subscribe()
    d = next(d for d in lab.rt.paths if d.label == "ring-a h1->h3")
    old = lab.rt.paths[d]
    _before = dict(lab.rt.paths)
    a, b = old[1], old[2]
    _port(lab, a, b, False)
    kinds = []
    while (ev := sub.get(0)) is not None:
        kinds.append((ev.kind, ev.link or ev.flow))
    link = "-".join(sorted((a, b)))
    assert ("link-down", link) in kinds
    assert ("alert-raised", link) in kinds and ("alert-raised", "ring-a h1->h3") in kinds
    assert ("repin", "ring-a h1->h3") in kinds
    active = {(x.kind, x.subject) for x in lab.tel.active_alerts()}
    assert ("link_down", link) in active and ("pinned_path_lost_link", "ring-a h1->h3") in active
    text = generate_latest(registry_for(lab.ctl, 1.0)).decode()
    assert f'aifabric_alert_active{{alert="link_down",subject="{link}"}} 1.0' in text
    assert f'aifabric_link_up{{link="{link}"}} 0.0' in text
    # the flow is re-pinned, so once the hold time passed its alert clears; the link's stays
    t = max(x.since_s for x in lab.tel.active_alerts()) + 1.5
    raised, cleared = lab.ctl.alert_round(t)
    lost = {dd.label for dd, pp in _before.items() if frozenset((a, b)) in {
            frozenset(e) for e in zip(pp, pp[1:], strict=False)}}
    assert {c.kind for c in cleared} == {"pinned_path_lost_link"}
    assert {c.subject for c in cleared} == lost and "ring-a h1->h3" in lost
    assert ("link_down", link) in {(x.kind, x.subject) for x in lab.tel.active_alerts()}
    _port(lab, a, b, True)
    _, cleared = lab.ctl.alert_round(t + 1)
    assert [c.kind for c in cleared] == ["link_down"]
    assert lab.tel.alerts.raised_total["link_down"] == 1


def test_utilisation_and_loss_alerts():
    tel = Telemetry(FABRIC, AlertRules(utilisation_ceiling=0.8, utilisation_peak=0.95,
                                       window_s=3.0, loss_ratio=0.01, min_packets=10))
    port = FABRIC.port_towards("leaf1", "spine1")
    far = FABRIC.port_towards("spine1", "leaf1")
    tx = rx_drop = pk = 0
    for t in range(4):
        rx_drop += 30 if t >= 3 else 0  # the receiver drops 30 frames in the last second
        # the receiver's drops count at the sender's sample (a round later if it came first)
        tel.record_ports("spine1", [PortCounters(far, 0, 0, rx_dropped=rx_drop)], float(t))
        tel.record_ports("leaf1", [PortCounters(port, 0, tx, tx_packets=pk)], float(t))
        tx += int(0.9 * 15e6 / 8)  # 90 % every second
        pk += 1500
    raised, _ = tel.evaluate(3.0)
    got = {(a.kind, a.subject) for a in raised}
    assert ("link_utilisation_high", "leaf1->spine1") in got
    assert ("link_utilisation_peak", "leaf1->spine1") not in got  # 0.90 < 0.95
    assert ("link_loss_high", "leaf1->spine1") in got  # 30 of 1530 = 0.0196
    # traffic stops: after the window nothing is judged high any more
    tel.record_ports("leaf1", [PortCounters(port, 0, tx, tx_packets=pk)], 8.0)
    tel.record_ports("spine1", [PortCounters(far, 0, 0, rx_dropped=rx_drop)], 8.0)
    _, cleared = tel.evaluate(8.0)
    assert {a.kind for a in cleared} == {"link_utilisation_high", "link_loss_high"}


def test_alert_rules_reject_bad_thresholds():
    with pytest.raises(ValueError, match="utilisation_ceiling"):
        AlertRules(utilisation_ceiling=0)
    with pytest.raises(ValueError, match="window_s"):
        AlertRules(window_s=0)


def test_prometheus_scrape_has_every_documented_metric(lab):
    _sample(lab, 0.0)
    for d in lab.rt.paths:
        lab.ff.send(d.src, _pkt(d.src, d.dst), 10_000, 10)
    _sample(lab, 1.0)
    port = FABRIC.host_by_name["h1"].port
    lab.rig.switches["leaf1"].queues = [(port, 0, 1, 1, 0)]
    _sample(lab, 1.5)
    lab.rig.ctl.handle(PortStatus("leaf1", FABRIC.port_towards("leaf1", "spine2"), False))
    lab.rig.settle()
    text = generate_latest(registry_for(lab.ctl, 1.0)).decode()
    samples = {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}
    missing = set(metric_names()) - samples
    assert not missing, missing
    assert all(m.name.startswith("aifabric_") for m in METRICS)
    fam = {f.name: f for f in text_string_to_metric_families(text)}
    coll = {s.labels["collective"]: s.value for s in fam["aifabric_collective_bytes"].samples}
    assert coll == {"ring-a": 40_000, "ring-b": 40_000}
    paths = {s.labels["flow"]: s.labels["path"] for s in fam["aifabric_flow_path_info"].samples
             if s.labels["collective"] == "ring-b"}
    assert paths == {f"{d.src}->{d.dst}": " ".join(p) for d, p in lab.rt.paths.items()
                     if d.collective == "ring-b"}


def test_ecmp_runtime_has_no_pinned_traffic():
    tel = Telemetry(FABRIC)
    rig = Rig(FABRIC, load_policy(ECMP_POLICY, FABRIC), telemetry=tel)
    try:
        assert tel.collective_status() == [] and rig.ctl.state.placement == {}
    finally:
        rig.close()


def test_p4_queue_counters_become_ce_and_depth_histogram_metrics(lab):
    """A P4 switch's queue sample (fabric.p4: ecn_marked, ecn_ce_tx, queue_depth_hist with
    buckets [0,1), [1,2), [2,4), ... [64, inf) packets) becomes Prometheus counters and a
    histogram whose ``le`` is each bucket's largest depth (Prometheus exposition format:
    cumulative buckets ending in +Inf)."""
    from controller.drivers.p4runtime.pipeline import QDEPTH_BUCKETS_CELLS, QDEPTH_BUCKETS_PKTS
    from controller.telemetry.samples import QueueCounters

    hist = (5, 1, 0, 2, 0, 0, 0, 1)
    lab.tel.record_queues("leaf1", [
        QueueCounters(3, 0, 9000, 9, ecn_marked_packets=2, ce_packets=4, depth_hist=hist,
                      depth_bounds=QDEPTH_BUCKETS_PKTS),
        QueueCounters(4, 1, 9000, 9, ecn_marked_packets=0, ce_packets=None, depth_hist=hist,
                      depth_bounds=QDEPTH_BUCKETS_CELLS, depth_unit="cells")], 1.0)
    text = generate_latest(registry_for(lab.ctl, 1.0)).decode()
    fam = {f.name: f for f in text_string_to_metric_families(text)}
    ce = {(s.labels["port"], s.name): s.value for s in fam["aifabric_queue_ce_packets"].samples}
    assert ce == {("3", "aifabric_queue_ce_packets_total"): 4}
    marked = {s.labels["port"]: s.value for s in fam["aifabric_queue_ecn_marked_packets"].samples
              if s.name.endswith("_total")}
    assert marked == {"3": 2, "4": 0}
    for port in ("3", "4"):  # cells map onto the same packet buckets (p4/fabric/tna/README.md)
        buckets = [(s.labels["le"], s.value) for s in fam["aifabric_queue_depth_packets"].samples
                   if s.name.endswith("_bucket") and s.labels["port"] == port]
        assert buckets == [("0", 5), ("1", 6), ("3", 6), ("7", 8), ("15", 8), ("31", 8),
                           ("63", 8), ("+Inf", 9)]
    assert set(metric_names(with_p4=True)) - set(metric_names()) == {
        "aifabric_queue_ecn_marked_packets_total", "aifabric_queue_ce_packets_total",
        "aifabric_queue_depth_packets_bucket"}
