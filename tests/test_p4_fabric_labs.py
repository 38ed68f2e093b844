"""The BMv2 twins of the link-failure, adaptive re-routing and telemetry labs
(``link-failure-p4``, ``adaptive-reroute-p4``, ``telemetry-p4``, driven by ``aifabric controller
--p4-targets``): the experiment files
load and bad ones are refused, located; the background's UDP source port is one fabric.p4's
ECMP hash sends out of the collective's uplink; the labs themselves run (marked ``mininet``) when
BMv2, Mininet and the compiled program are here, and skip naming what is missing otherwise."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from controller.errors import ConfigError
from controller.runtime.p4process import intended_state
from controller.testing.p4model import Packet, forward_hashed
from mininet_labs.lab.p4net import hashed_src_port
from mininet_labs.lab.runner import load, run_experiment
from tests.test_p4_lab import _missing

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = ROOT / "mininet_labs" / "experiments"
LINK = EXPERIMENTS / "link_failure_p4.yaml"
ADAPTIVE = EXPERIMENTS / "adaptive_reroute_p4.yaml"
TELEMETRY = EXPERIMENTS / "telemetry_p4.yaml"


def _copy(tmp_path, src: Path, old: str, new: str) -> Path:
    f = tmp_path / src.name
    f.write_text(src.read_text().replace(old, new)
                 .replace("../topologies", str(EXPERIMENTS.parent / "topologies"))
                 .replace("../policies", str(ROOT / "policies")))
    return f


def test_shipped_experiments_load_with_the_controller_flags():
    lab, exp = load(LINK)
    assert exp.spec.kind == "link-failure-p4" and lab.network == "bmv2"
    assert ("6 simple_switch_grpc, LLDP liveness 6 x 20 ms, data plane 3 x 20 ms"
            in lab.describe(exp))
    assert "uplink-flap (leaf1-spine1, fast failover, 5 flaps)" in lab.describe(exp)
    by_case = {v.name: v.controller for v in lab.variants(exp)}
    ff = by_case["uplink-fast-failover"]
    assert ff.southbound == "p4runtime" and ff.telemetry
    assert ff.args == ("--fast-failover", "--p4-liveness-interval", "0.02",
                       "--p4-liveness-misses", "6", "--p4-liveness-hold", "10",
                       "--p4-dataplane-misses", "3")
    assert "--fast-failover" not in by_case["uplink-repin"].args
    # a case starts once the last one's link is out of the data plane's hold-down (10 s) and
    # one window (3 x 20 ms) after it came back; an Open vSwitch port is used at once
    assert lab.settle_s(exp) == pytest.approx(10.06)
    ovs_lab, ovs_exp = load(EXPERIMENTS / "link_failure.yaml")
    assert ovs_lab.settle_s(ovs_exp) == 0.0
    assert exp.spec.expect.max_gap == pytest.approx(0.1)
    lab, exp = load(ADAPTIVE)
    assert exp.spec.kind == "adaptive-reroute-p4" and lab.network == "bmv2"
    by_mode = {v.name: v.controller for v in lab.variants(exp)}
    assert by_mode["static"].args == () and by_mode["static"].southbound == "p4runtime"
    args = by_mode["adaptive"].args
    assert args[args.index("--rebalance-queue-depth") + 1] == "8"
    assert args[args.index("--rebalance-margin") + 1] == "0.25"
    lab, exp = load(TELEMETRY)
    assert exp.spec.kind == "telemetry-p4" and lab.network == "bmv2"
    (v,) = lab.variants(exp)
    assert v.controller.southbound == "p4runtime" and v.controller.args == (
        "--p4-liveness-interval", "0.1", "--p4-liveness-misses", "10")


@pytest.mark.parametrize(("src", "old", "new", "where"), [
    (LINK, "liveness: {interval: 20ms", "liveness: {interval: 1ms", "liveness.interval"),
    (LINK, "misses: 6,", "misses: 0,", "liveness.misses"),
    (LINK, "dataplane_misses: 3", "dataplane_misses: 0", "liveness.dataplane_misses"),
    (LINK, "times: 5}", "times: 0}", "cases[3].flap.times"),
    (ADAPTIVE, "queued_fraction: 0.5}", "queued_fraction: 2}", "controller.queued_fraction"),
    (ADAPTIVE, "switch: bmv2", "switch: ovs", "switch"),
])
def test_bad_experiments_are_refused_located(tmp_path, src, old, new, where):
    f = _copy(tmp_path, src, old, new)
    with pytest.raises(ConfigError) as ei:
        load(f)
    assert f"{f}:" in str(ei.value) and where in str(ei.value)


def test_the_background_port_hashes_onto_the_victims_uplink():
    _, exp = load(ADAPTIVE)
    leaf, spine = exp.victim_path[1], exp.victim_path[2]
    uplink = exp.fabric.port_towards(leaf, spine)  # the victim's: one of the two below
    state = intended_state(exp.fabric, exp.policy)[leaf]
    bg = exp.spec.background
    s, d = exp.fabric.host_by_name[bg.src], exp.fabric.host_by_name[bg.dst]
    outs = {exp.fabric.port_towards(leaf, sp) for sp in ("spine1", "spine2")}
    assert uplink in outs
    for out in outs:
        sport = hashed_src_port(exp.fabric, exp.policy, leaf, bg.src, bg.dst, 9100, out)
        pkt = Packet(0x0800, int(ipaddress.IPv4Address(s.ipv4)),
                     int(ipaddress.IPv4Address(d.ipv4)), 17, 0, sport, 9100,
                     int(s.mac.replace(":", ""), 16), int(d.mac.replace(":", ""), 16))
        assert forward_hashed(state, pkt) == out
    with pytest.raises(ValueError, match="no UDP source port"):
        hashed_src_port(exp.fabric, exp.policy, leaf, bg.src, bg.dst, 9100, 1)  # h1's port


@pytest.mark.mininet
@pytest.mark.p4
@pytest.mark.skipif(_missing(LINK) is not None, reason=f"BMv2 lab unavailable: {_missing(LINK)}")
def test_link_failure_on_bmv2_is_seen_by_liveness_and_repinned(tmp_path):
    # What the Open vSwitch lab checks (tests/test_lab_link_failure.py), on BMv2: the failure is
    # seen without a port status (LLDP liveness), the probe's flow leaves the failed link, the
    # probe comes back; the data plane moved packets itself where it protects the hop (the
    # gaps' bound is the lab's timing verdict, not checked here); a flapping link moved the
    # controller's path once, and no port came back within the hold-down.
    res = run_experiment(LINK, tmp_path)
    data = res.data
    assert [c["case"] for c in data["runs"]] == ["uplink-fast-failover", "downlink-bounce",
                                                 "uplink-repin", "uplink-flap"]
    by = {c["case"]: c for c in data["runs"]}
    for c in data["runs"]:
        assert all(x["correct"] for x in c["collectives"]), c["collectives"]
        assert c["controller_liveness_events"], "LLDP liveness never took a port down"
        assert c["controller_port_events"], "the controller never heard of the failure"
        assert c["resumed_after_failure_ms"] is not None, c["probe"]
        assert c["controller_cpu"]["cpu_s"] > 0
    assert any(k.startswith("leaf1 failover_used") for k in by["uplink-fast-failover"][
        "dataplane_moved"]), by["uplink-fast-failover"]["dataplane_moved"]
    assert any(k.startswith("spine1 bounced") for k in by["downlink-bounce"][
        "dataplane_moved"]), by["downlink-bounce"]["dataplane_moved"]
    assert not by["uplink-repin"]["dataplane_moved"]  # nothing protected: the controller only
    assert len(by["uplink-flap"]["flaps"]) == 11 and by["uplink-flap"]["controller_ups"] == 0
    v = res.verdicts
    assert v["all_correct"] and v["probe_intact"] and v["repinned_off_failed_link"], \
        data["verdicts"]
    assert v["paths_do_not_flap"], data["verdicts"]["paths_do_not_flap"]
    assert data["teardown_removed"] == []


@pytest.mark.mininet
@pytest.mark.p4
@pytest.mark.skipif(_missing(ADAPTIVE) is not None,
                    reason=f"BMv2 lab unavailable: {_missing(ADAPTIVE)}")
def test_adaptive_reroute_on_bmv2_moves_the_squeezed_flow(tmp_path):
    res = run_experiment(ADAPTIVE, tmp_path)
    data = res.data
    by_mode = {m["mode"]: m for m in data["runs"]}
    ad, st = by_mode["adaptive"], by_mode["static"]
    assert ad["collective"]["correct"] and st["collective"]["correct"]
    # the background was hashed onto the victim's links: it squeezed the victim flow
    assert st["victim_rx_during_bps"] < 0.6 * st["victim_rx_before_bps"], st
    # the controller moved exactly the squeezed flow, from P4 counters, and said why
    assert len(ad["controller_moves"]) == 1, ad["controller_moves"]
    assert "moved ring-a h1->h3" in ad["controller_moves"][0]
    assert ad["moved_to_port"] not in (None, ad["series"][0]["output"])
    assert st["controller_moves"] == [] and res.verdicts["static_never_moved"]
    assert data["teardown_removed"] == []


@pytest.mark.mininet
@pytest.mark.p4
@pytest.mark.skipif(_missing(TELEMETRY) is not None,
                    reason=f"BMv2 lab unavailable: {_missing(TELEMETRY)}")
def test_telemetry_on_bmv2_counters_match_the_pinned_paths(tmp_path):
    res = run_experiment(TELEMETRY, tmp_path)
    (run,) = res.data["runs"]
    v = res.verdicts
    assert v["ring_correct"] and v["registered_in_force"] and v["bmv2_matches_getpaths"], \
        res.data["verdicts"]
    assert run["counters"]["bmv2"]["max_error_of_flow"] <= 0.05, run["counters"]["bmv2"]
    assert run["counters"]["controller"]["max_error_of_flow"] <= 0.05, run["counters"]
    # fabric.p4's queue-depth histogram counted the run's packets (per port and queue)
    assert sum(run["queues"]["depth_packets_bucket"].values()) > 0, run["queues"]
    assert v["repinned_off_failed_link"], res.data["verdicts"]


def test_bmv2_links_serve_lldp_before_the_data():
    # P4Runtime has no port status: the liveness probes must not wait behind a saturated link's
    # data (mininet_labs/lab/net.py shaped_intf_class). The tc commands: unclassified traffic to
    # the data class 5:3, LLDP (EtherType 0x88cc, IEEE 802.1AB) to 5:2 at HTB prio 0.
    pytest.importorskip("mininet")
    from mininet_labs.lab.net import shaped_intf_class

    cls = shaped_intf_class(lldp_first=True)
    intf = object.__new__(cls)
    intf.node = type("Node", (), {"name": "leaf1"})()
    cmds, parent = intf.bwCmds(bw=15.0)
    qdiscs, _ = intf.delayCmds(parent, max_queue_size=20)
    text = [c % ("tc", "x") for c in (*cmds, *qdiscs)]
    assert "tc qdisc add dev x root handle 5:0 htb default 3" in text
    assert any("classid 5:2 htb" in c and " prio 0 " in c for c in text)
    assert any("classid 5:3 htb" in c and " prio 1 " in c for c in text)
    assert any("protocol 0x88cc" in c and "flowid 5:2" in c for c in text)
    assert any("parent 5:3" in c and "pfifo limit 20" in c for c in text)
    assert any("parent 5:2" in c and "pfifo limit 20" in c for c in text)
    plain = object.__new__(shaped_intf_class())
    plain.node = intf.node
    cmds, parent = plain.bwCmds(bw=15.0)
    assert parent.strip() == "parent 5:1" and not any("0x88cc" in c for c in cmds)
