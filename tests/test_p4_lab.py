"""The BMv2 labs (mininet_labs/lab/p4_runner.py ``ecmp-vs-pinned-p4``, p4_ecn.py
``ecn-marking-p4``): their experiment files load and bad ones are refused, located; the labs
themselves run (marked ``mininet``) when BMv2, Mininet and the compiled program are here."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.errors import ConfigError
from mininet_labs.lab import p4_ecn, p4_runner

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = ROOT / "mininet_labs" / "experiments"
MAIN = EXPERIMENTS / "ecmp_vs_pinned_p4.yaml"
ECN = EXPERIMENTS / "ecn_marking_p4.yaml"


def test_shipped_experiments_load():
    exp = p4_runner.load_experiment(MAIN)
    assert exp.spec.kind == "ecmp-vs-pinned-p4" and exp.spec.switch == "bmv2"
    assert "6 simple_switch_grpc" in p4_runner.describe(exp)
    ecn = p4_ecn.load_experiment(ECN)
    assert ecn.spec.congested.queue_rate_pps == 400
    assert "threshold 5 packets vs none" in p4_ecn.describe(ecn)


@pytest.mark.parametrize(("old", "new", "where"), [
    ("switch: bmv2", "switch: tofino", "switch"),
    ("  bmv2_log: false", "  bmv2_log: maybe", "lab.bmv2_log"),
])
def test_bad_main_experiment_is_refused_located(tmp_path, old, new, where):
    f = tmp_path / "x.yaml"
    f.write_text(MAIN.read_text().replace(old, new)
                 .replace("../topologies", str(EXPERIMENTS.parent / "topologies"))
                 .replace("../../policies", str(ROOT / "policies")))
    with pytest.raises(ConfigError) as ei:
        p4_runner.load_experiment(f)
    assert f"{f}:" in str(ei.value) and where in str(ei.value)


@pytest.mark.parametrize(("old", "new", "msg"), [
    ("receiver: h3", "receiver: h9", "h9 is not a host"),
    ("port: 3, queue", "port: 7, queue", "leaf1 has no port 7"),
])
def test_bad_ecn_experiment_is_refused_located(tmp_path, old, new, msg):
    f = tmp_path / "x.yaml"
    f.write_text(ECN.read_text().replace(old, new)
                 .replace("../topologies", str(EXPERIMENTS.parent / "topologies"))
                 .replace("../../policies", str(ROOT / "policies")))
    with pytest.raises(ConfigError, match=msg):
        p4_ecn.load_experiment(f)


def _run(mod, path: Path, out: Path):
    """``mod.run_experiment``, waiting (up to 10 min) while another lab holds the lab lock."""
    import time

    deadline = time.monotonic() + 600
    while True:
        try:
            return mod.run_experiment(path, out)
        except RuntimeError as e:
            if "another aifabric lab" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(10)


def _missing() -> str | None:
    import os
    if os.geteuid() != 0:
        return "needs root"
    m = p4_runner.requirements_missing()
    return "; ".join(m) if m else None


@pytest.mark.mininet
@pytest.mark.skipif(_missing() is not None, reason=f"BMv2 lab unavailable: {_missing()}")
def test_ecn_lab_marks_only_with_the_threshold(tmp_path):
    res = _run(p4_ecn, ECN, tmp_path)
    off, on = res.data["runs"]
    assert off["ce_marked"] == 0 and on["ce_marked"] > 0, res.data["runs"]
    assert res.ok, res.data["runs"]


@pytest.mark.mininet
@pytest.mark.skipif(_missing() is not None, reason=f"BMv2 lab unavailable: {_missing()}")
def test_main_experiment_on_bmv2_pinned_beats_ecmp(tmp_path):
    res = _run(p4_runner, MAIN, tmp_path)
    assert res.ok, res.data["comparison"]
    pinned = [c["busbw_over_bound"] for r in res.data["runs"] if r["mode"] == "pinned"
              for c in r["collectives"]]
    assert min(pinned) >= 0.8, pinned
    assert all(r["max_flows_per_fabric_link"] is not None for r in res.data["runs"])
