"""Sub-flow pinning: a collective's connections_per_peer and subflows in the policy (errors to
the column), their expansion into sub-flows, and their own pinned entries in the plan."""

from __future__ import annotations

import textwrap

import pytest

from controller.errors import ConfigError
from controller.model import load_topology
from controller.plan.build import build_plan, pinned_match
from controller.policy import load_policy
from controller.te.collectives import FlowDemand, expand_collective, split
from tests.conftest import MAIN_TOPOLOGY
from tests.test_plan_build import trace

HEAD = "version: 1\nrouting: {mode: pinned}\ncollectives:\n"


def _policy(tmp_path, body: str):
    p = tmp_path / "p.yaml"
    p.write_text(HEAD + textwrap.indent(textwrap.dedent(body), "  "))
    return load_policy(p, load_topology(MAIN_TOPOLOGY))


GOOD = """\
- name: ring-a
  algorithm: ring
  ranks: [h1, h3, h5, h7]
  l4: {proto: tcp, dst_port: 5201}
  connections_per_peer: 2
  subflows: {by: l4_src_range, base_port: 40000}
- name: ring-b
  algorithm: ring
  ranks: [h2, h4, h6, h8]
  connections_per_peer: 3
  subflows: {by: dscp, values: [26, 27, 28]}
"""


def test_expansion_gives_each_connection_its_own_match(tmp_path):
    pol = _policy(tmp_path, GOOD)
    a = expand_collective(pol.collectives[0])
    assert len(a) == 4 * 2
    assert [(d.src, d.dst, d.subflow, d.l4_src, d.ip_proto, d.l4_dst) for d in a[:2]] == [
        ("h1", "h3", 0, 40000, 6, 5201), ("h1", "h3", 1, 40001, 6, 5201)]
    b = expand_collective(pol.collectives[1])
    assert len(b) == 4 * 3 and [d.dscp for d in b[:3]] == [26, 27, 28]
    assert all(d.subflows == 3 for d in b) and b[0].label == "ring-b h2->h4 #0"
    assert len({d.parent for d in b}) == 4


@pytest.mark.parametrize("body,where,message", [
    ("""\
     - {name: r, algorithm: ring, ranks: [h1, h3], connections_per_peer: 2}
     """, "collectives[0].connections_per_peer", "need 'subflows'"),
    ("""\
     - {name: r, algorithm: ring, ranks: [h1, h3], subflows: {by: dscp, values: [1, 2]}}
     """, "collectives[0].connections_per_peer", "2 or more"),
    ("""\
     - {name: r, algorithm: ring, ranks: [h1, h3], connections_per_peer: 2,
        subflows: {by: l4_src_range, base_port: 40000}}
     """, "collectives[0].subflows", "needs the collective's l4"),
    ("""\
     - {name: r, algorithm: ring, ranks: [h1, h3], connections_per_peer: 3,
        subflows: {by: dscp, values: [1, 2]}}
     """, "collectives[0].connections_per_peer", "need 3 DSCP values"),
    ("""\
     - {name: r, algorithm: ring, ranks: [h1, h3], dscp: 5, connections_per_peer: 2,
        subflows: {by: dscp, values: [1, 2]}}
     """, "collectives[0].subflows", "remove the collective's dscp"),
    ("""\
     - {name: r, algorithm: ring, ranks: [h1, h3], l4: {proto: udp}, connections_per_peer: 2,
        subflows: {by: l4_src_range, base_port: 65535}}
     """, "collectives[0].connections_per_peer", "past 65535"),
    ("""\
     - {name: r, algorithm: ring, ranks: [h1, h3], connections_per_peer: 2,
        subflows: {by: dscp, values: [7, 7]}}
     """, "collectives[0].subflows", "listed twice"),
])
def test_bad_subflows_are_located(tmp_path, body, where, message):
    with pytest.raises(ConfigError) as ei:
        _policy(tmp_path, body)
    probs = ei.value.problems
    assert any(p.field == where and message in p.message for p in probs), probs
    assert all(p.line >= 4 for p in probs)  # inside the collective, not at the top


def test_split_checks_its_arguments():
    d = FlowDemand("r", 0, "h1", "h2", ip_proto=17)
    assert split(d, 1) == (d,)
    with pytest.raises(ValueError, match="past 65535"):
        split(d, 3, base_port=65534)
    with pytest.raises(ValueError, match="2 DSCP values"):
        split(d, 2, dscp_values=[1])


def test_plan_pins_every_sub_flow_on_its_own_entries(tmp_path):
    """Each sub-flow has a match of its own (source port or DSCP), entries on every switch of
    its path, and a packet with its header follows exactly its pinned path."""
    fabric = load_topology(MAIN_TOPOLOGY)
    pol = _policy(tmp_path, GOOD)
    res = build_plan(fabric, pol)
    assert res.pinning is not None
    flows = list(res.pinning.paths)
    assert len(flows) == 8 + 12 and len({pinned_match(fabric, d) for d in flows}) == 20
    for d, path in res.pinning.paths.items():
        pkt = pinned_match(fabric, d).fields()
        assert trace(fabric, res.plan, d.src, pkt) == path
    # two connections of one pair can leave by different spines (each its own path)
    a0, a1 = flows[0], flows[1]
    assert a0.parent == a1.parent and a0.l4_src != a1.l4_src
