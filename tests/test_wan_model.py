"""Multi-site topologies (wan_links), the policy's wan section, its OpenFlow rendering, and
pinning across DCI links."""

from __future__ import annotations

import pytest

from controller.errors import ConfigError, PlanInvariantError
from controller.model import load_topology
from controller.plan.build import build_plan
from controller.qos.compile import compile_qos
from controller.qos.validate import load_valid_policy as load_policy
from controller.render.openflow import STRICT_FLOOR, render_openflow
from controller.te.collectives import expand_policy
from controller.te.invariants import check_path
from controller.te.paths import candidate_paths
from tests.conftest import ROOT

TWO_DC = ROOT / "mininet_labs" / "topologies" / "two_dc.yaml"
POLICY = ROOT / "policies" / "cross_dc.yaml"

SITE = """    spines: {spines}
    leaves: 2
    hosts_per_leaf: 2
    links:
      host:   {{rate: 20Mbps, latency: 1us}}
      fabric: {{rate: 20Mbps, latency: 1us}}
"""


def _two_sites(spines: int = 2, wan: str | None = None) -> str:
    wan = wan or """  - between: [dc1-spine1, dc2-spine1]
    rate: 4Mbps
    delay: 10ms
    loss: 0.5%
  - between: [dc1-spine2, dc2-spine2]
    rate: 4Mbps
    delay: 12ms
    loss: 0%
"""
    return ("name: t\nkind: multi-site\nsites:\n  - name: dc1\n" + SITE.format(spines=spines)
            + "  - name: dc2\n" + SITE.format(spines=spines) + "wan_links:\n" + wan)


def test_two_dc_model_knows_its_wan_links():
    f = load_topology(TWO_DC)
    assert f.kind == "multi-site" and f.sites == ("dc1", "dc2")
    (w,) = f.wan_links
    assert (w.a, w.a_port, w.b, w.b_port) == ("dc1-spine1", 3, "dc2-spine1", 3)
    assert w.capacity_bps == 4_000_000 and w.latency_us == 10_000 and w.loss_percent == 0
    assert sum(ln.wan for ln in f.links) == 1
    assert f.graph().edges["dc1-spine1", "dc2-spine1"]["wan"] is True
    assert [h.site for h in f.hosts] == ["dc1"] * 4 + ["dc2"] * 4
    assert f.host_by_name["h5"].leaf == "dc2-leaf1" and f.host_by_name["h5"].ipv4 == "10.0.0.5"
    assert [s.dpid for s in f.switches] == list(range(1, 7))


def test_wan_links_units_and_ports(write):
    f = load_topology(write(_two_sites()))
    a, b = f.wan_links
    assert (a.a_port, b.a_port) == (3, 3)  # spines have 2 leaf ports; the WAN takes the next
    assert a.loss_percent == 0.5 and b.latency_us == 12_000


@pytest.mark.parametrize("wan,where", [
    ("  - between: [dc1-spine1, dc1-spine2]\n    rate: 1Mbps\n    delay: 1ms\n    loss: 0%\n",
     "19:14: wan_links[0].between: dc1-spine1 and dc1-spine2 are both in site 'dc1'"),
    ("  - between: [dc1-leaf1, dc2-spine1]\n    rate: 1Mbps\n    delay: 1ms\n    loss: 0%\n",
     "19:15: wan_links[0].between[0]: 'dc1-leaf1' is not a spine of any site"),
    ("  - between: [dc1-spine1, dc2-spine1]\n    rate: 1Mbps\n    delay: 1ms\n",
     "19:5: wan_links[0].loss: required field is missing"),
    ("  - between: [dc1-spine1, dc2-spine1]\n    rate: 1Mbps\n    delay: 1\n    loss: 0%\n",
     "21:12: wan_links[0].delay: 1 has no unit"),
    ("  - between: [dc1-spine1, dc2-spine1]\n    rate: 1Mbps\n    delay: 1ms\n    loss: 100%\n",
     "22:11: wan_links[0].loss: loss must be in [0%, 100%), got 100%"),
])
def test_bad_wan_links_are_located(write, wan, where):
    path = write(_two_sites(wan=wan))
    with pytest.raises(ConfigError) as ei:
        load_topology(path)
    assert f"{path}:{where}" in str(ei.value)


def test_cross_site_paths_cross_one_wan_link_at_the_peak(write):
    f = load_topology(write(_two_sites()))
    paths = candidate_paths(f, "h1", "h5")
    assert paths == [("h1", "dc1-leaf1", "dc1-spine1", "dc2-spine1", "dc2-leaf1", "h5"),
                     ("h1", "dc1-leaf1", "dc1-spine2", "dc2-spine2", "dc2-leaf1", "h5")]
    for p in paths:
        check_path(f, p)
    # inside a site nothing changes: the DCI is never a shortcut
    assert all(len(p) == 5 for p in candidate_paths(f, "h1", "h3"))
    with pytest.raises(PlanInvariantError, match="after going down"):
        check_path(f, ("h1", "dc1-leaf1", "dc1-spine1", "dc1-leaf2", "dc1-spine2", "dc2-spine2",
                       "dc2-leaf1", "h5"))
    # with one DCI down, cross-site flows use the other
    assert len(candidate_paths(f, "h1", "h5", {frozenset(("dc1-spine1", "dc2-spine1"))})) == 1


def test_pinning_spreads_cross_site_flows_over_dci_links(write):
    f = load_topology(write(_two_sites()))
    pol = write("version: 1\nrouting: {mode: pinned}\ncollectives:\n"
                "  - {name: x, algorithm: ring, ranks: [h1, h2, h3, h4, h5, h6, h7, h8], "
                "bidirectional: true}\n", "p.yaml")
    res = build_plan(f, load_policy(pol, f))
    assert res.pinning is not None
    wan = {(ln.a, ln.b) for ln in f.wan_links} | {(ln.b, ln.a) for ln in f.wan_links}
    on_wan = {k: v for k, v in res.pinning.link_flows.items() if k in wan}
    # 2 flows each way cross the sites (h4<->h5, h8<->h1): one per DCI link and direction
    assert sorted(on_wan.values()) == [1, 1, 1, 1]


def test_hierarchical_expansion_follows_the_policy():
    f = load_topology(TWO_DC)
    pol = load_policy(POLICY, f)
    demands = expand_policy(pol, f)
    pairs = {(d.src, d.dst) for d in demands}
    assert {("h1", "h5"), ("h5", "h1"), ("h2", "h6"), ("h6", "h2"), ("h3", "h7")} <= pairs
    assert ("h3", "h5") not in pairs  # the flat ring's crossing is gone
    assert all(d.dscp == 26 for d in demands)
    flat = {(d.src, d.dst) for d in expand_policy(pol)}
    assert ("h3", "h5") in flat and ("h7", "h1") in flat


def test_wan_section_errors_are_located(write):
    f = load_topology(TWO_DC)
    text = POLICY.read_text()
    bad = text.replace("{class: bulk, share: 20%}", "{class: bulky, share: 30%}")
    bad = bad.replace("rate: 3800kbps", "rate: 5Mbps")
    path = write(bad, "bad.yaml")
    with pytest.raises(ConfigError) as ei:
        load_policy(path, f)
    msg = str(ei.value)
    assert f"{path}:43:15: wan.classes[1].class: no traffic class 'bulky'" in msg
    assert "wan.classes: the shares sum to 110%" in msg
    assert f"{path}:40:49: wan.links[0].rate: shaper 5Mbps is above the link rate 4Mbps" in msg
    uneven = text.replace("ranks: [h1, h2, h3, h5, h6, h7]", "ranks: [h1, h2, h3, h5, h6]")
    with pytest.raises(ConfigError, match=r"collectives\[0\].ranks: a hierarchical all-reduce "
                                          r"needs the same number of ranks in every site"):
        load_policy(write(uneven, "u.yaml"), f)
    other = text.replace("between: [dc1-spine1, dc2-spine1]", "between: [dc1-leaf1, dc1-spine1]")
    with pytest.raises(ConfigError, match="is not a WAN link of topology"):
        load_policy(write(other, "o.yaml"), f)


def test_dci_ports_render_the_wan_shaper_and_shares():
    f = load_topology(TWO_DC)
    pol = load_policy(POLICY, f)
    docs = render_openflow(compile_qos(pol, f))
    for sw in ("dc1-spine1", "dc2-spine1"):
        port = docs[f"{sw}.json"]["ports"]["3"]
        assert port["wan"] is True and port["peer"] != sw
        q = port["ovsdb_qos"]
        assert q["other_config"]["max-rate"] == "3800000"
        assert q["queues"]["1"]["other_config"]["min-rate"] == str(int(3_800_000 * 0.8))
        assert q["queues"]["0"]["other_config"]["min-rate"] == str(int(3_800_000 * 0.2))
        assert [x["limit_bytes"] for x in port["leaf_qdiscs"]] == [32_000, 32_000]
    # fabric ports inside a site keep the DWRR weights at the link rate
    inner = docs["dc1-spine1.json"]["ports"]["1"]
    assert "wan" not in inner and inner["ovsdb_qos"]["other_config"]["max-rate"] == "20000000"


def test_classes_not_listed_are_held_to_the_floor_on_the_dci(write):
    f = load_topology(TWO_DC)
    text = POLICY.read_text().replace("    - {class: bulk, share: 20%}\n", "")
    pol = load_policy(write(text, "p.yaml"), f)
    port = render_openflow(compile_qos(pol, f))["dc2-spine1.json"]["ports"]["3"]
    bulk = port["ovsdb_qos"]["queues"]["0"]["other_config"]
    assert bulk["max-rate"] == str(int(3_800_000 * STRICT_FLOOR)) and bulk["min-rate"] == "1"
