"""The adaptive-reroute lab: its experiment file, the pure measurement helpers, and (as root,
with Open vSwitch and Mininet) a small shaped run under the real controller."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.errors import ConfigError
from mininet_labs.analysis.adaptive import phases, series
from mininet_labs.lab.runner import load
from tests.test_lab_mininet import REASON, _our_processes

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
POLICY = ROOT / "policies" / "pinned_two_rings.yaml"
SHIPPED = ROOT / "mininet_labs" / "experiments" / "adaptive_reroute.yaml"


def _exp(tmp_path: Path, extra: str = "", bg: str = "{src: h2, dst: h4, rate: 12Mbps, "
         "start_after: 2s, duration: 60s}", modes: str = "[adaptive]",
         nbytes: str = "20MB") -> Path:
    p = tmp_path / "ar.yaml"
    p.write_text(f"""\
kind: adaptive-reroute
name: ar-test
topology: {TOPO}
policy: {POLICY}
collective: ring-a
modes: {modes}
workload: {{kind: ring-allreduce, bytes: {nbytes}}}
background: {bg}
controller: {{stats_interval: 1s, margin: 0.25, hold: 5s}}
expect: {{move_within: 5s, recovered_busbw_over_bound: 0.8, recover_within: 8s}}
lab: {{queue_packets: 20, htb_burst: 90KB}}
{extra}""")
    return p


def load_experiment(path):
    return load(path)[1]


def describe(exp):
    return load(SHIPPED)[0].describe(exp)


def test_shipped_experiment_is_valid():
    exp = load_experiment(SHIPPED)
    assert exp.victim.label == "ring-a h1->h3"
    assert exp.victim_path[1] == "leaf1" and exp.victim_path[3] == "leaf2"
    assert "background h2->h4 12 Mbit/s" in describe(exp)
    assert [c.name for c in exp.policy.collectives] == ["ring-a"]


def test_errors_are_located(tmp_path):
    with pytest.raises(ConfigError) as ei:
        load_experiment(_exp(tmp_path, extra="colour: red\n"))
    assert "ar.yaml:12:1: colour: unknown key" in str(ei.value)
    with pytest.raises(ConfigError) as ei:
        load_experiment(_exp(tmp_path, bg="{src: h1, dst: h4, rate: 12Mbps, start_after: 2s, "
                                          "duration: 10s}"))
    assert "ar.yaml:8:" in str(ei.value) and "h1 is a rank of ring-a" in str(ei.value)
    with pytest.raises(ConfigError) as ei:
        load_experiment(_exp(tmp_path, bg="{src: h2, dst: h4, rate: 12, start_after: 2s, "
                                          "duration: 10s}"))
    assert "background.rate" in str(ei.value)
    with pytest.raises(ConfigError) as ei:  # same leaf pair as no ring flow: shares no link
        load_experiment(_exp(tmp_path, bg="{src: h4, dst: h2, rate: 12Mbps, start_after: 2s, "
                                          "duration: 10s}"))
    assert "would share no link" in str(ei.value)


def test_series_and_phases_from_counters():
    # 4 ranks at 15 Mbit/s, squeezed to 3 from t=2 s, moved at t=4 s, recovered at t=5 s;
    # rank 2 receives the squeezed (victim) flow itself: 1 Mbit/s while the others keep 3
    rates = [15, 15, 15, 15, 3, 3, 3, 3, 6, 15, 15, 15, 15, 15]
    victim = [15, 15, 15, 15, 1, 1, 1, 1, 6, 15, 15, 15, 15, 15]
    outs = [3] * 8 + [4] * 6
    samples, tot, vic = [(0.0, ([0, 0, 0, 0], 0, 3))], 0, 0
    for i, (r, v, o) in enumerate(zip(rates, victim, outs, strict=True)):
        tot += int(r * 1e6 * 0.5 / 8)
        vic += int(v * 1e6 * 0.5 / 8)
        samples.append((0.5 * (i + 1), ([tot, tot, vic, tot], 0, o)))
    rows = series(samples, 0.0)
    assert [round(r["rank_rx_bps"][2] / 1e6) for r in rows] == victim
    for r in rows:  # the busbw phases below: all ranks at the others' rate
        r["busbw_bps"] = r["rank_rx_bps"][0]
    ph = phases(rows, 2.0, 20.0, 7.0, 3, 0.5, 12e6, victim_rank=2)
    assert ph["victim_rx_before_bps"] == pytest.approx(15e6, rel=1e-3)
    assert ph["victim_rx_during_bps"] == pytest.approx((1 * 4 + 6) / 5 * 1e6, rel=1e-2)
    assert ph["move_s"] == 4.5 and ph["move_after_background_s"] == 2.5
    assert ph["recovered_s"] == 5.0 and ph["recovered_after_relief_s"] == 0.5
    assert ph["busbw_before_bps"] == pytest.approx(15e6, rel=1e-3)
    assert ph["busbw_during_bps"] == pytest.approx((3 * 4 + 6) / 5 * 1e6, rel=1e-3)
    assert ph["busbw_after_bps"] == pytest.approx(15e6, rel=1e-3)
    never = phases(rows, 2.0, 20.0, 7.0, None, 0.5, 12e6)
    assert never["move_s"] == 2.5  # any change of output after the background starts counts


@pytest.mark.mininet
@pytest.mark.skipif(REASON is not None, reason=f"Mininet lab unavailable: {REASON}")
def test_background_load_moves_the_collective_and_busbw_recovers(tmp_path):
    from mininet_labs.lab.runner import run_experiment

    res = run_experiment(_exp(tmp_path), tmp_path / "out")
    data = json.loads(res.results_path.read_text())
    (m,) = data["runs"]
    c = m["collective"]
    bound = c["bound_bps"]
    assert c["correct"] and c["digests_equal"], c["errors"]
    # the controller moved exactly the squeezed flow, and said why
    assert len(m["controller_moves"]) == 1, m["controller_moves"]
    assert "moved ring-a h1->h3" in m["controller_moves"][0]
    assert "background" in m["controller_moves"][0]
    # the lab saw the pinned entry change within 5 s of the background starting
    assert m["move_after_background_s"] is not None and m["move_after_background_s"] <= 5.0
    assert m["moved_to_port"] not in (None, m["series"][0]["output"])
    # the background squeezed the victim flow (its receiver's rate), and after the move busbw
    # came back near the link rate although the background never stopped: the move did it.
    # The ring refills its pipeline after the move: 0.5-4.5 s measured on the 2-core machine.
    assert m["busbw_before_bps"] > 0.85 * bound
    assert m["victim_rx_during_bps"] < 0.5 * m["victim_rx_before_bps"]
    assert m["background_end_s"] > m["first_rank_end_s"]
    assert m["recovered_after_relief_s"] is not None and m["recovered_after_relief_s"] <= 8.0
    assert m["busbw_after_bps"] > 0.8 * bound
    assert res.verdicts["all_correct"] and res.verdicts["adaptive_recovered"], data["verdicts"]
    assert data["teardown_removed"] == []
    assert res.plot_path.stat().st_size > 5000
    assert _our_processes() == []
