"""The telemetry lab: its experiment file and counter check (pure), and as root with Open vSwitch
and Mininet, one small run end to end (< 2 min): a ring registered through gRPC is pinned, the
per-link counters match GetPaths within 5 %, the metrics are served, a link failure shows in
WatchEvents and the alert metric within two sampling intervals, the heatmaps are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.errors import ConfigError
from controller.model.topology import load_topology
from mininet_labs.lab.telemetry import counter_check, describe, load_experiment
from tests.test_lab_mininet import REASON, _our_processes

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
POLICY = ROOT / "policies" / "pinned_two_rings.yaml"
SHIPPED = ROOT / "mininet_labs" / "experiments" / "telemetry.yaml"


def test_shipped_experiment_and_errors(tmp_path):
    exp = load_experiment(SHIPPED)
    assert exp.registered.name == "ring-b" and "lab.ring-b" in describe(exp)
    bad = tmp_path / "t.yaml"
    bad.write_text(SHIPPED.read_text().replace("registered: ring-b", "registered: ring-z")
                   .replace("../topologies/", f"{TOPO.parent}/")
                   .replace("../../policies/", f"{POLICY.parent}/"))
    with pytest.raises(ConfigError) as ei:
        load_experiment(bad)
    assert "t.yaml:" in str(ei.value) and "no collective 'ring-z'" in str(ei.value)


def test_counter_check_flags_a_link_off_the_paths():
    fab = load_topology(TOPO)
    paths = {("h2", "h4"): ["h2", "leaf1", "spine2", "leaf2", "h4"]}
    sent = {("h2", "h4"): 1000}
    good = counter_check(fab, paths, sent, {"leaf1->spine2": 1010, "spine2->leaf2": 1000})
    assert good["max_error_of_flow"] == pytest.approx(0.01)
    bad = counter_check(fab, paths, sent, {"leaf1->spine1": 1000, "spine1->leaf2": 1000})
    assert bad["max_error_of_flow"] == pytest.approx(1.0)


@pytest.mark.mininet
@pytest.mark.skipif(REASON is not None, reason=f"Mininet lab unavailable: {REASON}")
def test_telemetry_lab_end_to_end(tmp_path):
    from mininet_labs.lab.telemetry import run_experiment

    exp = tmp_path / "tel.yaml"
    exp.write_text(SHIPPED.read_text().replace("../topologies/", f"{TOPO.parent}/")
                   .replace("../../policies/", f"{POLICY.parent}/").replace("6MB", "3MB"))
    res = run_experiment(exp, tmp_path / "out")
    data = json.loads(res.results_path.read_text())
    v = data["verdicts"]
    assert v["ring_correct"] and v["registered_in_force"] and v["ovs_matches_getpaths"], data
    assert data["counters"]["ovs"]["max_error_of_flow"] <= 0.05, data["counters"]["ovs"]
    assert data["counters"]["controller"]["max_error_of_flow"] <= 0.05
    assert data["metrics"]["missing_mid_run"] == []
    f = data["failure"]
    assert f["event_after_s"] is not None and f["event_after_s"] <= 1.0, f
    assert f["alert_metric_after_s"] is not None and f["alert_metric_after_s"] <= 1.0, f
    assert f["paths_avoid_failed_link"]
    for png in ("link_utilisation.png", "traffic_matrix.png", "busbw_time.png"):
        assert (tmp_path / "out" / png).stat().st_size > 10_000
    assert res.ok, v
    assert data["controller_exit"] == 0
    assert _our_processes() == []
