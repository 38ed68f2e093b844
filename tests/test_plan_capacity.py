"""Switch table capacity (controller.plan.capacity): P4Info sizes, policy overrides, merging
and ECMP fallback when a switch would overflow, and ``plan show``'s table."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from controller.cli import main
from controller.errors import ConfigError
from controller.model import load_topology
from controller.plan.build import build_plan, pinned_match
from controller.plan.capacity import (
    TableCapacity,
    capacity_from_openflow,
    capacity_from_p4info,
    p4info_table_sizes,
    pinned_entries_per_switch,
)
from controller.plan.model import PRIO_PINNED
from controller.policy import load_policy
from tests.conftest import MAIN_TOPOLOGY, ROOT
from tests.test_plan_build import trace

P4INFO = ROOT / "p4" / "fabric" / "build" / "fabric.p4info.txtpb"

POLICY = """\
version: 1
routing: {mode: pinned}
%s
collectives:
  - name: ring-a
    algorithm: ring
    ranks: [h1, h3, h5, h7]
    l4: {proto: tcp, dst_port: 5201}
    connections_per_peer: 2
    subflows: {by: l4_src_range, base_port: 40000}
  - name: ring-b
    algorithm: ring
    ranks: [h2, h4, h6, h8]
"""


def _load(tmp_path, tables: str = ""):
    p = tmp_path / "p.yaml"
    p.write_text(POLICY % tables)
    fabric = load_topology(MAIN_TOPOLOGY)
    return fabric, load_policy(p, fabric), p


def test_p4info_sizes_are_read_from_the_committed_program():
    """P4Runtime spec v1.3 §6.4: a table's ``size`` in P4Info; fabric.p4 declares 4096 for
    pinned and routes (p4/fabric/fabric.p4)."""
    sizes = p4info_table_sizes(P4INFO.read_text())
    assert sizes["FabricIngress.pinned"] == 4096 and sizes["FabricIngress.routes"] == 4096
    cap = capacity_from_p4info(P4INFO.read_text())
    assert cap.pinned_entries == 4096 and cap.route_entries == 4096
    with pytest.raises(ValueError, match="no table FabricIngress.pinned"):
        capacity_from_p4info('tables { preamble { name: "x" } size: 1 }')
    with pytest.raises(ValueError, match="unbalanced"):
        p4info_table_sizes("tables { preamble { name: \"x\" }")


def test_openflow_table_features_count_every_entry():
    cap = capacity_from_openflow({"leaf1": 100})["leaf1"]
    assert cap.pinned_room(routes=8, control=2) == 90
    assert TableCapacity().pinned_room(8, 2) is None


def test_without_limits_nothing_changes(tmp_path):
    fabric, pol, _ = _load(tmp_path)
    res = build_plan(fabric, pol)
    assert res.tables is not None and not res.tables.fallback and not res.tables.notes
    pins = {name: [f for f in sp.flows if f.priority == PRIO_PINNED]
            for name, sp in res.plan.switches.items()}
    assert sum(map(len, pins.values())) == sum(len(p) - 2 for p in res.pinning.paths.values())


def test_overflow_drops_route_redundant_entries_first_and_still_forwards(tmp_path):
    """leaf1 may hold 4 pinned entries (6 − headroom 2): the entries towards its own hosts
    repeat its route entries and go; every pinned flow still follows its planned path."""
    fabric, pol, _ = _load(tmp_path, "tables: {pinned_entries: 100, headroom: 2, "
                                      "switches: {leaf1: {pinned_entries: 6}}}")
    res = build_plan(fabric, pol)
    t = res.tables
    assert t is not None and not t.fallback
    assert t.switches["leaf1"].pinned_needed > 4 >= t.switches["leaf1"].pinned
    assert any("switch leaf1" in n for n in t.notes)
    for d, path in res.pinning.paths.items():
        assert trace(fabric, res.plan, d.src, pinned_match(fabric, d).fields()) == path


def test_still_too_many_entries_fall_back_to_ecmp_least_important_first(tmp_path):
    """With room for 1 entry on leaf1, ring-b (listed second) falls back first; the note
    names the switch, the entries and the flows; fallen-back flows have no pinned entry left
    anywhere, and every switch fits."""
    fabric, pol, _ = _load(tmp_path, "tables: {headroom: 0, switches: {leaf1: "
                                      "{pinned_entries: 1}}}")
    res = build_plan(fabric, pol)
    t = res.tables
    assert t is not None and t.fallback
    assert all(t.switches[s].fits for s in t.switches)
    fell = set(t.fallback)
    assert {d.collective for d in fell} <= {"ring-a", "ring-b"}
    order = [d.collective for d in t.fallback]
    assert order[0] == "ring-b"
    note = next(n for n in t.notes if "switch leaf1" in n)
    assert "fall back to ECMP" in note and "room for 1" in note
    matches = {pinned_match(fabric, d) for d in fell}
    for sp in res.plan.switches.values():
        assert not [f for f in sp.flows if f.priority == PRIO_PINNED and f.match in matches]


def test_policy_tables_name_unknown_switches_at_their_key(tmp_path):
    with pytest.raises(ConfigError) as ei:
        _load(tmp_path, "tables: {switches: {leaf9: {pinned_entries: 1}}}")
    (p,) = ei.value.problems
    assert p.field == "tables.switches.leaf9" and "no switch 'leaf9'" in p.message
    assert (p.line, p.column) == (3, 21)  # the key leaf9, 1-based


def test_entries_per_switch_from_a_placement_match_the_plan(tmp_path):
    from controller.te.collectives import expand_policy
    from controller.te.pathindex import PathIndex
    from controller.te.placer import place

    fabric, pol, _ = _load(tmp_path)
    demands = {d: 1e6 for d in expand_policy(pol, fabric)}
    idx = PathIndex(fabric)
    pin = place(fabric, demands, index=idx)
    counts = pinned_entries_per_switch(pin.placement)
    per_switch = {s.name: 0 for s in fabric.switches}
    for path in pin.paths.values():
        for node in path[1:-1]:
            per_switch[node] += 1
    assert counts.tolist() == [per_switch[s.name] for s in fabric.switches]
    up = pinned_entries_per_switch(pin.placement, up_only=True)
    assert (up <= counts).all() and up.sum() == len(demands)  # one climbing hop per flow here
    assert np.count_nonzero(up) > 0


def test_plan_show_prints_entries_against_capacity(tmp_path):
    _, _, path = _load(tmp_path)
    res = CliRunner().invoke(main, ["plan", "show", "-t", str(MAIN_TOPOLOGY), "-p", str(path),
                                    "--p4info", str(P4INFO)])
    assert res.exit_code == 0, res.output
    assert "pinned room" in res.output and "4088" in res.output  # 4096 − headroom 8
    assert "#1" in res.output  # sub-flow numbers in the paths table
    small = tmp_path / "small.yaml"
    small.write_text(POLICY % "tables: {headroom: 0, switches: {leaf1: {pinned_entries: 1}}}")
    res = CliRunner().invoke(main, ["plan", "show", "-t", str(MAIN_TOPOLOGY), "-p", str(small)])
    assert res.exit_code == 0 and "fall back to ECMP" in res.output
    bad = tmp_path / "bad.txtpb"
    bad.write_text("tables {")
    res = CliRunner().invoke(main, ["plan", "show", "-t", str(MAIN_TOPOLOGY), "-p", str(path),
                                    "--p4info", str(bad)])
    assert res.exit_code == 2 and "unbalanced" in res.output + res.stderr
