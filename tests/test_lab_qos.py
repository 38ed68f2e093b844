"""The qos-priority lab under Mininet: the controller applies the policy's traffic classes to
Open vSwitch and the collective gets its configured share of a shared uplink.

Needs root, a running Open vSwitch and Mininet (skipped with the reason otherwise); CI runs it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.test_lab_mininet import REASON, _our_processes

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = ROOT / "mininet_labs" / "experiments" / "qos_priority.yaml"

pytestmark = [pytest.mark.mininet,
              pytest.mark.skipif(REASON is not None, reason=f"Mininet lab unavailable: {REASON}")]


def _aifabric_qos_rows() -> list[str]:
    out = subprocess.run(["ovs-vsctl", "--format=json", "--columns=external_ids", "list", "QoS"],
                         capture_output=True, text=True, check=True).stdout
    rows = json.loads(out)["data"]
    return [str(r) for r in rows if "aifabric-switch" in str(r)]


def test_qos_lab_gives_the_collective_its_configured_share(tmp_path):
    from mininet_labs.lab.runner import run_experiment

    exp = tmp_path / "qos.yaml"
    text = EXPERIMENT.read_text()
    text = text.replace("../topologies/", f"{EXPERIMENT.parent.parent}/topologies/")
    text = text.replace("../policies/", f"{ROOT}/policies/")
    text = text.replace("repeats: 2", "repeats: 1").replace("bytes: 6MB", "bytes: 8MB")
    exp.write_text(text)
    res = run_experiment(exp, tmp_path / "out")
    s = res.data["summary"]
    fifo, qos = s["variants"]["fifo"], s["variants"]["qos"]
    assert fifo is not None and qos is not None, res.data["runs"]
    assert all(r["correct"] for r in res.data["runs"]), res.data["runs"]
    # with the policy: the configured 0.8 of the uplink, within 10 %
    assert s["qos_share_within_tolerance"], s
    assert abs(qos["port_share"] - 0.8) <= 0.08, s
    # without it, TCP's per-connection sharing leaves the collective much less
    assert fifo["port_share"] < qos["port_share"] - 0.2, s
    assert qos["cct_s"] < fifo["cct_s"], s
    # the port really ran at the link rate in both variants (the shaper is in force)
    for r in res.data["runs"]:
        assert 0.85 <= r["switch_side"]["port_tx_bps"] / 15e6 <= 1.05, r
    assert res.verdicts["all_correct"] and res.verdicts["qos_faster_than_fifo"], res.data["verdicts"]
    assert res.plot_path is not None and res.plot_path.stat().st_size > 0
    assert "ecn_marking" in s["not_exercised"]
    # the controller's OVSDB rows went with the bridges; no process is left
    assert _aifabric_qos_rows() == []
    assert _our_processes() == []
