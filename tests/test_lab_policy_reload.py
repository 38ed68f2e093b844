"""The policy-reload lab (issue 12): the experiment file and its errors, how changed entries
are told apart, and (as root, with Open vSwitch and Mininet) the run: SIGHUP with ring-a
re-ordered changes only ring-a's entries, as many as the plan diff, with ring-b's probe losing
nothing; SIGHUP with a broken policy is located, published as apply-failed, and changes
nothing on any switch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.errors import ConfigError
from mininet_labs.lab.runner import load
from mininet_labs.labs.policy_reload import _entry_hosts, _located
from tests.test_lab_mininet import REASON, _our_processes

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "mininet_labs" / "experiments" / "policy_reload.yaml"


def _copy(tmp_path: Path, old: str, new: str) -> Path:
    p = tmp_path / "pr.yaml"
    p.write_text(SHIPPED.read_text().replace(old, new)
                 .replace("../topologies/", f"{SHIPPED.parent.parent}/topologies/")
                 .replace("../policies/", f"{ROOT}/policies/"))
    return p


def test_shipped_experiment():
    lab, exp = load(SHIPPED)
    assert exp.probe_flow[0].label == "ring-b h2->h4"
    assert "ranks: [h1, h5, h3, h7]" in exp.reordered_text
    assert exp.broken_text.splitlines()[exp.broken_line - 1].strip() == "algorithm: rnig"
    assert "line 14" in lab.describe(exp)


@pytest.mark.parametrize(("old", "new", "says"), [
    ("ranks: [h1, h5, h3, h7]", "ranks: [h1, h5, h3, h2]", "list its ranks in a new order"),
    ("probe: {src: h2, dst: h4", "probe: {src: h1, dst: h3", "a collective the reload keeps"),
    ('find: "algorithm: ring"', 'find: "algorithm: tree"', "is not in the re-ordered policy"),
])
def test_errors_are_located(tmp_path, old, new, says):
    with pytest.raises(ConfigError) as ei:
        load(_copy(tmp_path, old, new))
    assert "pr.yaml:" in str(ei.value) and says in str(ei.value)


def test_changed_entries_are_attributed_to_collectives():
    moved, kept = {"10.0.0.1", "10.0.0.5"}, {"10.0.0.2"}
    changed = {"leaf1": ["ip,nw_dst=10.0.0.5,nw_src=10.0.0.1,priority=500",
                         "ip,nw_dst=10.0.0.2,nw_src=10.0.0.1,priority=500",
                         "priority=0"],
               "leaf1 groups": ["groups differ"]}
    assert _entry_hosts(changed, moved, kept) == {"moved": 1, "kept": 1, "other": 1}


def test_location_must_be_the_broken_line():
    log = "ERROR /o/policy-reload.yaml:14:14: collectives.0.algorithm: Input should be 'ring'\n"
    assert _located(log, "/o/policy-reload.yaml", 14).startswith("/o/policy-reload.yaml:14:14")
    assert _located(log, "/o/policy-reload.yaml", 13) is None


@pytest.mark.mininet
@pytest.mark.skipif(REASON is not None, reason=f"Mininet lab unavailable: {REASON}")
def test_policy_reload_changes_only_what_the_plan_diff_says(tmp_path):
    from mininet_labs.lab.runner import run_experiment

    res = run_experiment(SHIPPED, tmp_path / "out")
    data = json.loads(res.results_path.read_text())
    (run,) = data["runs"]
    for x in run["collectives"]:
        assert x["correct"] and x["digests_equal"], x["errors"]
    ro, br = run["reorder"], run["broken"]
    assert ro["flow_entries_changed"] > 0
    assert ro["flow_entries_changed"] == run["plan_entries_changed"], (ro, run["plan_diff"])
    assert run["reorder_entry_hosts"]["kept"] == 0 and run["reorder_entry_hosts"]["other"] == 0
    assert run["probe"]["sent"] > 1000 and run["probe"]["corrupt"] == 0, run["probe"]
    assert br["changed"] == {} and br["flow_mods_sent"] == 0 and br["group_mods_sent"] == 0
    assert run["broken_located"] is not None and br["event"] == "apply-failed"
    v = res.verdicts
    assert all(held for name, held in v.items() if name != "kept_probe_loss"), data["verdicts"]
    assert _our_processes() == []
    # Target (issue 12): ring-b's probe loses 0. It holds once Open vSwitch's one AF_PACKET
    # send socket is large (Makefile target ``ovs``): with the default 208 KiB, the ring's frames
    # queued in the shapers fill it and ovs-vswitchd drops the probe's packets (13 %).
    assert v["kept_probe_loss"], (
        f"{data['verdicts']['kept_probe_loss']['detail']} — check `ss -0 -m -p | grep "
        "ovs-vswitchd` shows tb>=16777216 (run `make setup` with no bridge present)")
