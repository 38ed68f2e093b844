"""The ``ddp-ina`` lab: the experiment files load (always run), and the short experiment on
Mininet with BMv2 (marked ``mininet`` and ``p4``; skips with the reason without root, Mininet,
simple_switch_grpc, the compiled p4/aggregation or torch): DDP over gloo and over the
aggregation switch, with loss, and with the switch killed mid-run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.errors import ConfigError
from mininet_labs.lab import requirements as req
from mininet_labs.lab.runner import load, requirements_of
from mininet_labs.workloads.ddp_ina import n_params

ROOT = Path(__file__).resolve().parents[1]
FULL = ROOT / "mininet_labs" / "experiments" / "ddp_ina.yaml"
SHORT = ROOT / "mininet_labs" / "experiments" / "ddp_ina_short.yaml"


def test_full_experiment_trains_a_million_parameters_on_four_ranks():
    exp = load(FULL)[1]
    assert exp.spec.ranks == 4 and n_params(exp.spec.model.hidden) >= 1_000_000
    assert exp.spec.loss == 0.01 and exp.spec.kill_after_step < exp.spec.steps - 1
    assert [h.name for h in exp.fabric.hosts] == ["h1", "h2", "h3", "h4", "ina"]
    short = load(SHORT)[1]
    assert short.spec.kill_after_step < short.spec.steps - 1


def test_bad_experiment_is_located(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("kind: ddp-ina\nname: x\nranks: 1\nloss: 2\n")
    with pytest.raises(ConfigError) as ei:
        load(f)
    text = " ".join(str(p) for p in ei.value.problems)
    assert "ranks" in text and "loss" in text


_why = "; ".join(req.missing(requirements_of(*load(SHORT)))) or None


@pytest.mark.mininet
@pytest.mark.p4
@pytest.mark.skipif(_why is not None, reason=f"ddp-ina lab unavailable: {_why}")
def test_short_lab_holds_every_verdict(tmp_path):
    from mininet_labs.lab.runner import run_experiment

    res = run_experiment(SHORT, tmp_path)  # waits for the lab lock like every lab
    print(json.dumps(res.data["verdicts"], indent=1))
    s = res.data["summary"]
    for run in ("gloo", "ina", "lossy", "kill"):
        assert s[run]["ok"] and s[run]["ranks_equal_every_step"], s[run]
    assert s["ina"]["fallback_steps"] == [] and s["ina"]["within_bound"]
    assert s["lossy"]["within_bound"]
    assert s["kill"]["fallback_steps"] == list(range(1, 3))
    assert s["ina"]["tx_bytes_ratio_vs_gloo"] < 1.0
    assert res.ok, res.data["verdicts"]
