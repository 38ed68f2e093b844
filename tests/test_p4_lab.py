"""The BMv2 labs (mininet_labs/lab/p4_runner.py ``ecmp-vs-pinned-p4``, p4_ecn.py
``ecn-marking-p4``): their experiment files load and bad ones are refused, located; the labs
themselves run (marked ``mininet``) when BMv2, Mininet and the compiled program are here."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.errors import ConfigError
from mininet_labs.lab import requirements as req
from mininet_labs.lab.runner import load, requirements_of, run_experiment

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = ROOT / "mininet_labs" / "experiments"
MAIN = EXPERIMENTS / "ecmp_vs_pinned_p4.yaml"
ECN = EXPERIMENTS / "ecn_marking_p4.yaml"


def test_shipped_experiments_load():
    lab, exp = load(MAIN)
    assert exp.spec.kind == "ecmp-vs-pinned-p4" and exp.spec.switch == "bmv2"
    assert "6 simple_switch_grpc" in lab.describe(exp)
    lab, ecn = load(ECN)
    assert ecn.spec.congested.queue_rate_pps == 400
    assert "threshold 5 packets vs none" in lab.describe(ecn)


@pytest.mark.parametrize(("old", "new", "where"), [
    ("switch: bmv2", "switch: tofino", "switch"),
    ("  bmv2_log: false", "  bmv2_log: maybe", "lab.bmv2_log"),
])
def test_bad_main_experiment_is_refused_located(tmp_path, old, new, where):
    f = tmp_path / "x.yaml"
    f.write_text(MAIN.read_text().replace(old, new)
                 .replace("../topologies", str(EXPERIMENTS.parent / "topologies"))
                 .replace("../policies", str(ROOT / "policies")))
    with pytest.raises(ConfigError) as ei:
        load(f)
    assert f"{f}:" in str(ei.value) and where in str(ei.value)


@pytest.mark.parametrize(("old", "new", "msg"), [
    ("receiver: h3", "receiver: h9", "h9 is not a host"),
    ("port: 3, queue", "port: 7, queue", "leaf1 has no port 7"),
])
def test_bad_ecn_experiment_is_refused_located(tmp_path, old, new, msg):
    f = tmp_path / "x.yaml"
    f.write_text(ECN.read_text().replace(old, new)
                 .replace("../topologies", str(EXPERIMENTS.parent / "topologies"))
                 .replace("../policies", str(ROOT / "policies")))
    with pytest.raises(ConfigError, match=msg):
        load(f)


def _missing(path: Path) -> str | None:
    m = req.missing(requirements_of(*load(path)))
    return "; ".join(m) if m else None


@pytest.mark.mininet
@pytest.mark.p4
@pytest.mark.skipif(_missing(ECN) is not None, reason=f"BMv2 lab unavailable: {_missing(ECN)}")
def test_ecn_lab_marks_only_with_the_threshold(tmp_path):
    res = run_experiment(ECN, tmp_path)
    off, on = res.data["runs"]
    assert off["ce_marked"] == 0 and on["ce_marked"] > 0, res.data["runs"]
    assert res.ok, res.data["verdicts"]


@pytest.mark.mininet
@pytest.mark.p4
@pytest.mark.skipif(_missing(MAIN) is not None, reason=f"BMv2 lab unavailable: {_missing(MAIN)}")
def test_main_experiment_on_bmv2_pinned_beats_ecmp(tmp_path):
    # What holds on a loaded machine too: correct results, ECMP collisions and the pinned
    # placement in the switches' counters, pinned faster than ECMP. busbw/bound >= 0.85 is the
    # experiment's timing-sensitive verdict (six BMv2 processes on 2 cores: pinned 0.71-0.83 of
    # the bound measured at a load average of 4-7.5, 0.86-0.95 on an idle machine), not tested.
    res = run_experiment(MAIN, tmp_path)
    assert res.verdicts["all_correct"] and res.verdicts["ecmp_collisions_seen"], res.data["verdicts"]
    runs = res.data["runs"]
    assert all(r["max_flows_per_fabric_link"] < 1.5 for r in runs if r["mode"] == "pinned"), runs
    rows = res.data["summary"]["comparison"]["rows"]
    assert all(r["pinned_busbw_over_bound"] > r["ecmp_busbw_over_bound"] for r in rows
               if r["ecmp_collision"]), rows
