"""The controller-restart lab (issue 12): the experiment file and its errors, the metric
reading, and (as root, with Open vSwitch and Mininet) the run: kill -9 and SIGTERM restarts of
the controller under both rings lose no probe packet and send no flow-mod or group-mod."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.errors import ConfigError
from mininet_labs.lab.runner import load
from mininet_labs.lab.switchstate import southbound_counts
from tests.test_lab_mininet import REASON, _our_processes

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "mininet_labs" / "experiments" / "controller_restart.yaml"


def test_shipped_experiment_and_errors(tmp_path):
    lab, exp = load(SHIPPED)
    assert [d.label for d, _ in exp.probe_flows] == ["ring-a h1->h3", "ring-b h2->h4"]
    assert exp.spec.restart_after == 3.0 and exp.spec.expect.max_gap == pytest.approx(5e-3)
    assert "kill -9" in lab.describe(exp)
    bad = tmp_path / "cr.yaml"
    bad.write_text(SHIPPED.read_text().replace("{src: h2, dst: h4}", "{src: h2, dst: h3}")
                   .replace("../topologies/", f"{SHIPPED.parent.parent}/topologies/")
                   .replace("../policies/", f"{ROOT}/policies/"))
    with pytest.raises(ConfigError) as ei:
        load(bad)
    assert "cr.yaml:" in str(ei.value) and "no pinned flow h2->h3" in str(ei.value)


def test_southbound_counts_reads_the_controllers_exposition():
    # Prometheus text exposition format: a counter family's sample is NAME_total
    # (https://prometheus.io/docs/instrumenting/exposition_formats/)
    text = """\
# HELP aifabric_southbound_messages Messages the controller sent to a switch, by kind.
# TYPE aifabric_southbound_messages counter
aifabric_southbound_messages_total{switch="leaf1",kind="flow-mod"} 3.0
aifabric_southbound_messages_total{switch="leaf2",kind="flow-mod"} 4.0
aifabric_southbound_messages_total{switch="leaf2",kind="bundle"} 1.0
# HELP aifabric_reconciles Switches read back and reconciled.
# TYPE aifabric_reconciles counter
aifabric_reconciles_total 6.0
"""
    got = southbound_counts(text)
    assert got["flow-mod"] == 7 and got["bundle"] == 1 and "group-mod" not in got
    assert got["aifabric_reconciles_total"] == 6


def _verdict_lab():
    return load(SHIPPED)


def test_verdicts_come_from_the_measurements():
    lab, exp = _verdict_lab()
    step = {"step": "after-kill", "signal": "SIGKILL", "down_s": 3.0, "reconnect_s": 0.4,
            "reconciled_after_start_s": 3.0, "reconciled_after_ready_s": 0.2,
            "reconciles": 6, "flow_mods": 0, "group_mods": 0}
    probe = {"flow": "ring-a h1->h3", "sent": 9000, "lost": 0, "max_gap_ms": 0.0,
             "lost_in_windows": 0, "sent_in_windows": 3000, "lost_elsewhere": 0,
             "sent_elsewhere": 6000,
             "max_arrival_spacing_ms": 3.0}
    rec = {"steps": [step, {**step, "step": "after-term"}],
           "collectives": [{"correct": True}, {"correct": True}],
           "collectives_running_after_restarts": [True, True], "probes": [probe, probe]}
    ok = {v.name: v.held for v in lab.verdicts(exp, [rec], {})}
    assert all(ok.values()), ok
    rec2 = {**rec, "steps": [step, {**step, "flow_mods": 2, "reconciled_after_ready_s": 5.9}],
            "probes": [probe, {**probe, "lost": 6, "max_gap_ms": 6.0}]}
    bad = {v.name: v.held for v in lab.verdicts(exp, [rec2], {})}
    assert not bad["nothing_sent_at_reconnect"] and not bad["probe_loss"]
    assert not bad["probe_gap"] and bad["all_correct"]
    assert not bad["reconnected_within"]  # 5.9 s > the 1 s bound (issue 12)


@pytest.mark.mininet
@pytest.mark.skipif(REASON is not None, reason=f"Mininet lab unavailable: {REASON}")
def test_controller_restart_loses_nothing_and_sends_nothing(tmp_path):
    from mininet_labs.lab.runner import run_experiment

    res = run_experiment(SHIPPED, tmp_path / "out")
    data = json.loads(res.results_path.read_text())
    (run,) = data["runs"]
    for x in run["collectives"]:
        assert x["correct"] and x["digests_equal"], x["errors"]
    assert [s["signal"] for s in run["steps"]] == ["SIGKILL", "SIGTERM"]
    assert run["steps"][0]["exit_code"] == -9 and run["steps"][1]["exit_code"] == 0
    for s in run["steps"]:
        assert s["reconciles"] == 6 and s["flow_mods"] == 0 and s["group_mods"] == 0, s
        assert s["reconcile_entries_sent"] == 0, s
    for p in run["probes"]:
        assert p["corrupt"] == 0 and p["duplicates"] == 0 and p["sent"] > 5000, p
    v = res.verdicts
    assert v["all_correct"] and v["restarted_under_traffic"], data["verdicts"]
    assert v["nothing_sent_at_reconnect"], data["verdicts"]
    assert v["reconnected_within"], data["verdicts"]["reconnected_within"]["detail"]
    assert _our_processes() == []
    # Targets (issue 12): probe loss 0, longest gap <= 5 ms. They hold once Open vSwitch's one
    # AF_PACKET send socket is large (Makefile target ``ovs``): with the default 208 KiB, frames
    # queued in any port's shaper fill it and ovs-vswitchd drops the probe's packets (5-13 %).
    assert v["probe_loss"] and v["probe_gap"], (
        f"{data['verdicts']['probe_loss']['detail']}; {data['verdicts']['probe_gap']['detail']}"
        " — check `ss -0 -m -p | grep ovs-vswitchd` shows tb>=16777216 (run `make setup` with "
        "no bridge present; it raises net.core.wmem_default and restarts ovs-vswitchd)")
