"""The sub-flow failure lab (issue 15): its experiment file and policies, the pure analysis (the
placement bound, the verdicts), and (as root, with Open vSwitch and Mininet) a small run with
leaf1-spine1 down, pinned with 1 and 2 connections per peer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.errors import ConfigError
from controller.model import build_leaf_spine
from controller.plan.build import build_plan
from controller.policy.load import policy_from_document
from controller.yamlsrc import parse_document
from mininet_labs.analysis import subflows
from mininet_labs.lab.runner import load
from mininet_labs.labs.subflow_failure import SubflowExperiment
from tests.test_lab_mininet import REASON, _our_processes

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
POLICY = ROOT / "policies" / "pinned_two_rings.yaml"
SHIPPED = ROOT / "mininet_labs" / "experiments" / "subflow_failure.yaml"
FABRIC = build_leaf_spine("ls", 2, 4, 2, 15 * 10**6, 15 * 10**6, 1.0, 1.0)


def test_shipped_experiment_bounds_and_policies():
    lab, loaded = load(SHIPPED)
    assert isinstance(loaded, SubflowExperiment)
    exp = loaded
    assert exp.link == ("leaf1", "spine1")
    # controller.sim.optimum.fluid_busbw_bound_bps: leaf1 keeps one 15 Mbit/s uplink for the
    # two ring flows that leave it (one per ring), so 7.5 Mbit/s each; intact the host rate
    assert exp.fluid_bps == pytest.approx(7.5e6) and exp.intact_fluid_bps == pytest.approx(15e6)
    assert list(exp.policies) == ["ecmp", "pinned-1", "pinned-2"]
    assert "leaf1-spine1 down" in lab.describe(exp)
    pol = policy_from_document(parse_document(exp.policies["pinned-2"], "p2"), exp.fabric)
    assert [c.connections_per_peer for c in pol.collectives] == [2, 2]
    # every sub-flow pinned on its own path, matched by source port base_port + j and its ring's
    # destination port (mininet_labs.lab.collectives.DEFAULT_DST_PORT + index)
    pin = build_plan(exp.fabric, pol).pinning
    assert pin is not None and len(pin.paths) == 16
    assert {(d.l4_src, d.l4_dst) for d in pin.paths} == {
        (40000, 5201), (40001, 5201), (40000, 5202), (40001, 5202)}


def test_experiment_errors_are_located(tmp_path):
    text = (SHIPPED.read_text().replace("../topologies/", f"{TOPO.parent}/")
            .replace("../policies/", f"{POLICY.parent}/"))
    bad = tmp_path / "sf.yaml"
    bad.write_text(text.replace("failed_link: [leaf1, spine1]", "failed_link: [leaf1, leaf2]"))
    with pytest.raises(ConfigError) as ei:
        load(bad)
    assert "sf.yaml:" in str(ei.value) and "leaf1-leaf2 is not a switch-switch link" in str(ei.value)
    bad.write_text(text.replace("connections_per_peer: [1, 2]", "connections_per_peer: [2, 2]"))
    with pytest.raises(ConfigError) as ei:
        load(bad)
    assert "connections_per_peer" in str(ei.value) and "listed twice" in str(ei.value)


def test_placement_bound_of_one_path_and_split_placements():
    # with leaf1-spine1 down both flows out of leaf1 share leaf1->spine2: 15/2 Mbit/s
    one = [(["h1", "leaf1", "spine2", "leaf2", "h3"], 1.0),
           (["h2", "leaf1", "spine2", "leaf2", "h4"], 1.0)]
    assert subflows.placement_bound_bps(FABRIC, one) == pytest.approx(7.5e6)
    # three flows over two uplinks (3 hosts per leaf): one path each puts 2 on one uplink
    # (7.5 Mbit/s), halves put 1.5 on each (10 Mbit/s): where sub-flows gain
    f3 = build_leaf_spine("ls3", 2, 2, 3, 15 * 10**6, 15 * 10**6, 1.0, 1.0)
    three = [["h1", "leaf1", "spine1", "leaf2", "h4"], ["h2", "leaf1", "spine1", "leaf2", "h5"],
             ["h3", "leaf1", "spine2", "leaf2", "h6"]]
    assert subflows.placement_bound_bps(f3, [(p, 1.0) for p in three]) == pytest.approx(7.5e6)
    other = {"spine1": "spine2", "spine2": "spine1"}
    halves = [(p, 0.5) for p in three] + [([other.get(x, x) for x in p], 0.5) for p in three]
    assert subflows.placement_bound_bps(f3, halves) == pytest.approx(10e6)
    with pytest.raises(ValueError):
        subflows.placement_bound_bps(FABRIC, [])
    assert subflows.crosses(["h1", "leaf1", "spine1"], ("spine1", "leaf1"))
    assert not subflows.crosses(["h1", "leaf1", "spine2"], ("spine1", "leaf1"))


def _record(variant, ratios, correct=True, cross=False, flows=8, expected=8, bound=7.5e6):
    return {"variant": variant, "seed": 1, "pinned_flows": flows, "expected_pinned_flows": expected,
            "paths_in_force": [{}] if variant != "ecmp" else [], "paths_cross_failed_link": cross,
            "placement_bound_bps": bound if variant != "ecmp" else None,
            "collectives": [{"collective": f"ring-{i}", "busbw_over_bound": r, "correct": correct,
                             "cct_s": 1.0, "busbw_bps": None if r is None else r * 7.5e6}
                            for i, r in enumerate(ratios)]}


def _verdicts(records):
    s = subflows.summarize(records, 7.5e6, 15e6, 15e6, 0.05, 0.85)
    return s, {v.name: v for v in subflows.verdicts(records, s)}


def test_verdicts_follow_the_measurement():
    recs = [_record("ecmp", [0.7, 0.6]), _record("pinned-1", [0.86, 0.90]),
            _record("pinned-2", [0.95, 0.97], flows=16, expected=16)]
    s, v = _verdicts(recs)
    assert s["gain"] == {"of": "pinned-2", "over": "pinned-1", "mean_ratio_difference": 0.08}
    assert v["all_correct"].held and v["pinned_off_failed_link"].held
    assert v["pinned_near_fluid_bound"].held and v["subflows_gain"].held
    assert v["subflows_gain"].timing_sensitive
    # equal means: no gain, whatever the threshold's sign of noise
    recs[2] = _record("pinned-2", [0.88, 0.88], flows=16, expected=16)
    s, v = _verdicts(recs)
    assert s["gain"]["mean_ratio_difference"] == 0.0 and not v["subflows_gain"].held
    # a pinned path on the down link, or a sub-flow without its own entry, is a failed run
    recs[1] = _record("pinned-1", [0.86, 0.90], cross=True)
    assert not _verdicts(recs)[1]["pinned_off_failed_link"].held
    recs[1] = _record("pinned-1", [0.86, 0.90])
    recs[2] = _record("pinned-2", [0.88, 0.88], flows=8, expected=16)
    assert not _verdicts(recs)[1]["pinned_off_failed_link"].held
    recs[2] = _record("pinned-2", [0.80, None], correct=False, flows=16, expected=16)
    s, v = _verdicts(recs)
    assert not v["all_correct"].held and not v["pinned_near_fluid_bound"].held


@pytest.mark.mininet
@pytest.mark.skipif(REASON is not None, reason=f"Mininet lab unavailable: {REASON}")
def test_subflow_failure_lab_small(tmp_path):
    from mininet_labs.lab.runner import run_experiment

    exp = tmp_path / "sf.yaml"
    exp.write_text(f"""\
kind: subflow-failure
name: sf-test
topology: {TOPO}
policy: {POLICY}
failed_link: [leaf1, spine1]
connections_per_peer: [1, 2]
ecmp: false
warmup: false
seeds: [1]
workload: {{kind: ring-allreduce, bytes: 2MB}}
lab: {{queue_packets: 20, htb_burst: 90KB}}
""")
    res = run_experiment(exp, tmp_path / "out")
    data = json.loads(res.results_path.read_text())
    runs = {r["variant"]: r for r in data["runs"]}
    assert list(runs) == ["pinned-1", "pinned-2"]
    for name, r in runs.items():
        cpp = r["connections_per_peer"]
        for c in r["collectives"]:
            assert c["correct"] and c["digests_equal"], c["errors"]
            # busbw over the fluid bound of the failed fabric, not the 15 Mbit/s link rate
            assert c["bound_bps"] == pytest.approx(7.5e6)
            assert c["busbw_over_bound"] == pytest.approx(c["busbw_bps"] / 7.5e6, abs=1e-4)
            # with 2 connections per peer every rank sent over both, half the buffer each
            if cpp > 1:
                for per_conn in c["bytes_sent_per_connection"]:
                    assert len(per_conn) == cpp and all(b > 0 for b in per_conn), (name, c)
                    assert max(per_conn) == min(per_conn), per_conn
        # the controller heard of the failure and its pinned paths left the link, one entry
        # per sub-flow
        assert any(" down: " in ln for ln in r["controller_decisions"]), r["controller_decisions"]
        assert r["pinned_flows"] == 8 * cpp and not r["paths_cross_failed_link"]
        assert all(p["hops"][1] != "leaf1" or p["hops"][2] == "spine2"
                   for p in r["paths_in_force"])
        # one path per sub-flow reaches the fluid optimum on this failure (module docstring of
        # mininet_labs.analysis.subflows): leaf1's one uplink carries one flow of each ring
        assert r["placement_bound_bps"] == pytest.approx(7.5e6)
    s = data["summary"]
    assert s["fluid_bound_bps"] == pytest.approx(7.5e6)
    assert s["gain"]["of"] == "pinned-2" and s["gain"]["over"] == "pinned-1"
    v = data["verdicts"]
    assert v["all_correct"]["held"] and v["pinned_off_failed_link"]["held"], v
    assert "subflows_gain" in v and v["subflows_gain"]["timing_sensitive"]
    assert _our_processes() == []
