"""The ``ina-allreduce`` lab: the experiment file and the expected bytes (always run), and the lab
itself on Mininet with one BMv2 switch (marked ``mininet``; skips with the reason without root,
Mininet, simple_switch_grpc or the compiled program)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from controller.errors import ConfigError
from mininet_labs.analysis.ina import expected_bytes
from mininet_labs.lab import requirements as req
from mininet_labs.lab.runner import load, requirements_of

EXPERIMENT = Path(__file__).resolve().parents[1] / "mininet_labs" / "experiments" / "ina_allreduce.yaml"


def load_experiment(path):
    return load(path)[1]


def test_experiment_file_gives_four_workers_on_one_switch():
    exp = load_experiment(EXPERIMENT)
    assert [s.name for s in exp.fabric.switches] == ["s1"]
    assert [(h.name, h.port, h.ipv4) for h in exp.fabric.hosts] == [
        (f"h{i}", i, f"10.0.0.{i}") for i in range(1, 5)]
    assert all(ln.capacity_bps == 10**9 for ln in exp.fabric.links)


def test_expected_bytes_follow_the_derivation():
    exp = load_experiment(EXPERIMENT)
    x = expected_bytes(exp)
    e, n, s = exp.mlp.n_params, exp.spec.workers, exp.spec.pool_size
    c = math.ceil(e / 64)
    assert x["ina_bytes"] == (c + min(s, c)) * 310
    assert x["ring_payload_bytes"] == round(2 * (n - 1) * 4 * e / n)
    assert x["payload_ratio"] == pytest.approx(n / (2 * (n - 1)), abs=1e-4)
    headers = (310 / 256) / (1 + 66 / x["mss_bytes"])
    assert x["ratio"] == pytest.approx(x["payload_ratio"] * headers * (c + min(s, c)) / c, rel=5e-3)


def test_bad_experiment_is_located(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("kind: ina-allreduce\nname: x\nlink_rate: fast\nworkers: 40\n")
    with pytest.raises(ConfigError) as ei:
        load_experiment(f)
    text = " ".join(str(p) for p in ei.value.problems)
    assert "workers" in text and "link_rate" in text


_why = "; ".join(req.missing(requirements_of(*load(EXPERIMENT)))) or None


@pytest.mark.mininet
@pytest.mark.p4
@pytest.mark.skipif(_why is not None, reason=f"ina-allreduce lab unavailable: {_why}")
def test_lab_all_reduces_exactly_with_and_without_loss(tmp_path):
    from mininet_labs.lab.runner import run_experiment

    res = run_experiment(EXPERIMENT, tmp_path)  # waits for the lab lock like every lab
    runs = {r["run"]: r for r in res.data["runs"]}
    print(json.dumps(res.data["summary"], indent=1))
    for v in ("clean", "lossy"):
        r = runs[v]
        assert r["correct"], r["errors"]
        assert r["within_bound_rate"] == 1.0 and r["exact_rate"] == 1.0
        assert r["same_parameters_on_all_workers"]
    assert runs["lossy"]["injected_drops_tx"] + runs["lossy"]["injected_drops_rx"] > 0
    assert runs["lossy"]["retransmitted"] > 0
    assert runs["ring"]["correct"], runs["ring"]["errors"]
    assert res.data["summary"]["clean"]["measured_ratio_vs_ring"] < 1.0
    assert res.ok
