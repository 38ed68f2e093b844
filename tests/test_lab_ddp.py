"""The DDP lab under Mininet (root, Open vSwitch, torch; skipped with the reason otherwise): two
torch DistributedDataParallel jobs over gloo on the main fabric, ECMP and pinned, every rank of
the pinned run registering its process group through the northbound client.

What is checked does not depend on how fast the machine is: every job finished with
bit-identical weights on all ranks, the same weights under ECMP and pinned (the network must not
change the math), the registration was in force before training, and the controller's own link
counters show the pinned placement (at most one ring flow's bytes per fabric link direction, the
planner's collision-free placement). busbw/bound, which a loaded 2-core machine lowers, is
recorded and checked by the full experiment, not here.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.test_lab_mininet import REASON, _our_processes

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "mininet_labs" / "experiments" / "ddp_ecmp_vs_pinned.yaml"
WHY = REASON or (None if importlib.util.find_spec("torch") else "torch is not installed")


@pytest.mark.mininet
@pytest.mark.skipif(WHY is not None, reason=f"DDP lab unavailable: {WHY}")
def test_ddp_lab_registers_pins_and_keeps_the_math(tmp_path):
    from mininet_labs.lab.runner import run_experiment

    exp = tmp_path / "ddp.yaml"
    exp.write_text(SHIPPED.read_text()
                   .replace("../topologies/", f"{SHIPPED.parent.parent}/topologies/")
                   .replace("../policies/", f"{ROOT}/policies/")
                   .replace("seeds: [1, 2, 3, 4]", "seeds: [5]")
                   .replace("layers: [512, 1024, 1024, 512, 10]", "layers: [256, 512, 256, 10]")
                   .replace("steps: 3", "steps: 2"))
    res = run_experiment(exp, tmp_path / "out")
    v, data = res.verdicts, res.data
    assert v["all_correct"], data["runs"]
    assert v["weights_identical_across_ranks"] and v["weights_equal_ecmp_vs_pinned"], data["verdicts"]
    ecmp, pinned = data["runs"]
    assert (ecmp["mode"], pinned["mode"]) == ("ecmp", "pinned")
    for c in pinned["collectives"]:
        reg = c["registration"]
        assert c["registered"] and reg["in_force"], c
        assert reg["collective"] == f"ddp-ecmp-vs-pinned.{c['collective']}"
        # the ring in the direction gloo sends (rank i -> rank i-1), by host pair
        hosts = c["hosts"]
        assert sorted(reg["paths"]) == sorted(f"{hosts[i]}->{hosts[i - 1]}" for i in range(4))
    for c in ecmp["collectives"]:
        assert not c["registered"]  # the controller refuses registrations under ECMP
    assert pinned["max_flows_per_fabric_link"] < 1.5, pinned["fabric_link_load_flows"]
    assert (tmp_path / "out" / "busbw.png").stat().st_size > 1000
    assert data["teardown_removed"] == []
    assert _our_processes() == []
