"""A switch's southbound, address, device id and P4 target are declared with the switch in the
topology (``switches:``), and the controller takes them from there (``--p4-targets`` only adds
to them, deprecated)."""

from __future__ import annotations

import json

import pytest

from controller.errors import ConfigError
from controller.model.topology import load_topology
from controller.runtime.process import ControllerOptions, declared_p4_target, load_southbound

BASE = """\
name: t
kind: leaf-spine
spines: 1
leaves: 2
hosts_per_leaf: 1
links:
  host:   {rate: 10Mbps, latency: 1us}
  fabric: {rate: 10Mbps, latency: 1us}
"""


@pytest.fixture
def topo(tmp_path):
    def write(extra: str):
        p = tmp_path / "topo.yaml"
        p.write_text(BASE + extra)
        return p
    return write


def test_declarations_reach_the_switches_and_the_southbound(topo):
    f = topo("switches:\n  leaf1: {southbound: p4runtime, address: '10.0.0.9:9559', device_id: 7,"
             " target: bmv2}\n  spine1: {address: 'unix:/run/ovs-spine1.mgmt'}\n")
    fab = load_topology(f)
    leaf1, spine1, leaf2 = (fab.switch_by_name[n] for n in ("leaf1", "spine1", "leaf2"))
    assert (leaf1.southbound, leaf1.address, leaf1.p4_device_id, leaf1.target) == \
        ("p4runtime", "10.0.0.9:9559", 7, "bmv2")
    assert spine1.southbound == "openflow" and spine1.address == "unix:/run/ovs-spine1.mgmt"
    assert leaf2.southbound == "openflow" and leaf2.p4_device_id == leaf2.dpid
    kinds, addresses = load_southbound(fab, None)
    assert kinds == {"spine1": "openflow", "leaf1": "p4runtime", "leaf2": "openflow"}
    assert addresses == {"leaf1": "10.0.0.9:9559"}


def test_the_deprecated_targets_file_adds_p4_switches(topo, tmp_path):
    fab = load_topology(topo("switches:\n  leaf1: {southbound: p4runtime, address: 'a:1'}\n"))
    t = tmp_path / "targets.json"
    t.write_text(json.dumps({"leaf2": "b:2"}))
    kinds, addresses = load_southbound(fab, str(t))
    assert kinds["leaf2"] == "p4runtime" and addresses == {"leaf1": "a:1", "leaf2": "b:2"}


def test_a_declared_target_wins_over_the_configured_one(topo):
    fab = load_topology(topo("switches:\n  leaf1: {southbound: p4runtime, address: 'a:1', "
                             "target: tofino}\n"))
    assert declared_p4_target(fab, ControllerOptions(p4_target="bmv2")).p4_target == "tofino"
    plain = load_topology(topo(""))
    assert declared_p4_target(plain, ControllerOptions(p4_target="bmv2")).p4_target == "bmv2"


@pytest.mark.parametrize("extra,where,says", [
    ("switches:\n  leaf9: {}\n", "10:3: switches.leaf9", "no switch 'leaf9' in t"),
    ("switches:\n  leaf1: {southbound: p4runtime}\n", "10:10: switches.leaf1",
     "needs its address"),
    ("switches:\n  leaf1: {southbound: p4, address: 'a:1'}\n", "10:23: switches.leaf1.southbound",
     "Input should be 'openflow' or 'p4runtime'"),
    ("switches:\n  leaf1: {address: 'a:99999'}\n", "10:20: switches.leaf1.address",
     "expected host:port"),
    ("switches:\n  leaf1: {target: tofino}\n", "10:10: switches.leaf1",
     "target and device_id are P4Runtime's"),
    ("switches:\n  leaf1: {colour: red}\n", "10:11: switches.leaf1.colour", "unknown key"),
    ("switches:\n  leaf1: {southbound: p4runtime, address: 'a:1'}\n"
     "  leaf2: {southbound: p4runtime, address: 'a:1'}\n", "11:43: switches.leaf2.address",
     "leaf1's address too"),
    ("switches:\n  leaf1: {southbound: p4runtime, address: 'a:1', target: bmv2}\n"
     "  leaf2: {southbound: p4runtime, address: 'b:1', target: tofino}\n",
     "10:58: switches.leaf1.target", "different targets"),
])
def test_bad_declarations_are_located(topo, extra, where, says):
    f = topo(extra)
    with pytest.raises(ConfigError) as e:
        load_topology(f)
    got = [str(p) for p in e.value.problems]
    assert any(s.startswith(f"{f}:{where}: ") and says in s for s in got), got
