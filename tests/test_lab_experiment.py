"""Experiment files (errors at FILE:LINE:COL) and the pure result helpers of the lab."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.errors import ConfigError
from controller.model.topology import load_topology
from controller.qos.validate import load_valid_policy as load_policy
from mininet_labs.lab.experiment import load_experiment
from mininet_labs.lab.results import (
    flows_per_link,
    link_loads,
    parse_dump_ports,
    plot_busbw,
    ring_bound_bps,
)
from mininet_labs.lab.runner import collective_ports, policy_for_mode

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = ROOT / "mininet_labs" / "experiments" / "ecmp_vs_pinned.yaml"
TOPO = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
POLICY = ROOT / "policies" / "pinned_two_rings.yaml"

GOOD = f"""\
name: t
topology: {TOPO}
policy: {POLICY}
modes: [ecmp, pinned]
seeds: [1, 2]
workload:
  kind: ring-allreduce
  bytes: 1MB
"""


def _problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as ei:
        load_experiment(path)
    return [str(p) for p in ei.value.problems]


def test_the_shipped_experiment_is_valid():
    exp = load_experiment(EXPERIMENT)
    assert exp.spec.modes == ("ecmp", "pinned")
    assert len(exp.spec.seeds) >= 3
    assert exp.fabric.kind == "leaf-spine" and len(exp.fabric.hosts) == 8
    assert [c.ranks for c in exp.policy.collectives] == [
        ("h1", "h3", "h5", "h7"), ("h2", "h4", "h6", "h8")]


def test_good_experiment(write):
    exp = load_experiment(write(GOOD))
    assert exp.spec.workload.bytes == 1_000_000
    assert exp.spec.lab.mtu_bytes == 9000


@pytest.mark.parametrize(
    "old,new,where,msg",
    [
        ("bytes: 1MB", "bytes: 1000", "8:10", "has no unit"),
        ("bytes: 1MB", "bytes: 1XB", "8:10", "unknown size unit"),
        ("modes: [ecmp, pinned]", "modes: [ecmp, wcmp]", "4:15", "modes[1]"),
        ("seeds: [1, 2]", "seeds: [1, 1]", "5:8", "listed twice"),
        ("  kind: ring-allreduce", "  kind: all-to-all", "7:9", "workload.kind"),
        ("name: t", "name: t\nbogus: 1", "2:1", "unknown key"),
    ],
)
def test_errors_are_located(write, old, new, where, msg):
    probs = _problems(write(GOOD.replace(old, new)))
    assert len(probs) == 1, probs
    assert f"f.yaml:{where}:" in probs[0] and msg in probs[0], probs


def test_missing_field_and_missing_file(write):
    probs = _problems(write(GOOD.replace("seeds: [1, 2]\n", "")))
    assert any(":1:1: seeds: required field is missing" in p for p in probs), probs
    probs = _problems(write(GOOD.replace(f"policy: {POLICY}", "policy: nowhere.yaml")))
    assert len(probs) == 1 and "f.yaml:3:9: policy: no such file" in probs[0], probs


def test_relative_paths_and_policy_errors_point_into_the_policy(tmp_path):
    (tmp_path / "p.yaml").write_text(POLICY.read_text().replace("h7]", "h99]"))
    (tmp_path / "e.yaml").write_text(
        GOOD.replace(str(POLICY), "p.yaml").replace(str(TOPO), str(TOPO)))
    probs = _problems(tmp_path / "e.yaml")
    assert len(probs) == 1 and "p.yaml:" in probs[0] and "h99" in probs[0], probs


def test_policy_copy_per_mode(tmp_path):
    exp = load_experiment(EXPERIMENT)
    for mode in ("ecmp", "pinned"):
        p = policy_for_mode(exp, mode, tmp_path)
        pol = load_policy(p, exp.fabric)
        assert pol.routing.mode == mode
        assert pol.collectives == exp.policy.collectives


def test_seed_fixes_ports():
    exp = load_experiment(EXPERIMENT)
    a, b = collective_ports(exp, 1), collective_ports(exp, 1)
    assert a == b
    assert collective_ports(exp, 2) != a
    assert {dst for _, dst in a.values()} == {5201, 5202}


def test_ring_bound_is_slowest_link():
    fab = load_topology(TOPO)
    pol = load_policy(POLICY, fab)
    assert ring_bound_bps(fab, pol.collectives[0]) == 15_000_000


DUMP = """OFPST_PORT reply (OF1.3) (xid=0x2): 3 ports
  port LOCAL: rx pkts=0, bytes=0, drop=0, errs=0, frame=0, over=0, crc=0
           tx pkts=0, bytes=0, drop=0, errs=0, coll=0
           duration=12.1s
  port  3: rx pkts=10, bytes=1000, drop=0, errs=0, frame=0, over=0, crc=0
           tx pkts=20, bytes=5000, drop=0, errs=0, coll=0
  port  1: rx pkts=1, bytes=100, drop=0, errs=0, frame=0, over=0, crc=0
           tx pkts=2, bytes=300, drop=0, errs=0, coll=0
"""


def test_port_counters_to_flows_per_link():
    fab = load_topology(TOPO)
    assert parse_dump_ports(DUMP) == {3: 5000, 1: 300}
    loads = link_loads(fab, {"leaf1": {3: 1000}}, {"leaf1": parse_dump_ports(DUMP)})
    assert loads == {"leaf1->spine1": 4000, "leaf1->h1": 300}
    assert flows_per_link(loads, 2000, fab) == {"leaf1->spine1": 2.0}


def test_plot_is_written(tmp_path):
    runs = [{"mode": m, "seed": s, "collectives": [
        {"collective": c, "busbw_over_bound": 0.5 + 0.1 * s} for c in ("a", "b")]}
        for m in ("ecmp", "pinned") for s in (1, 2)]
    plot_busbw(runs, tmp_path / "x.png", "t")
    assert (tmp_path / "x.png").stat().st_size > 1000
