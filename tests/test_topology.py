import ipaddress

import pytest

from controller.errors import ConfigError
from controller.model import build_fat_tree, load_topology
from controller.model.topology import require_edge_attrs
from tests.conftest import FATTREE_K4, MAIN_TOPOLOGY


def test_main_leaf_spine():
    f = load_topology(MAIN_TOPOLOGY)
    assert [s.name for s in f.switches] == ["spine1", "spine2", "leaf1", "leaf2", "leaf3", "leaf4"]
    assert len(f.hosts) == 8 and len(f.links) == 8 + 4 * 2
    g = f.graph()
    require_edge_attrs(g)
    assert g.edges["h1", "leaf1"]["capacity_bps"] == 15_000_000
    # leaf ports: hosts 1..2, uplinks 3..4 in spine order; spine port i+1 -> leaf i
    assert f.port_towards("leaf1", "h2") == 2
    assert f.port_towards("leaf3", "spine2") == 4
    assert f.port_towards("spine2", "leaf3") == 3


def test_fat_tree_counts_and_ports():
    for k in (2, 4, 6, 8):
        f = build_fat_tree("ft", k, 10**9, 10**9, 1.0, 1.0)
        assert len(f.hosts) == k**3 // 4
        assert len(f.switches) == 5 * k * k // 4
        g = f.graph()
        for s in f.switches:
            assert g.degree(s.name) == k, s
        # every port number of a switch is used once, 1..k
        for s in f.switches:
            ports = sorted(g.edges[s.name, n]["ports"][s.name] for n in g.neighbors(s.name))
            assert ports == list(range(1, k + 1))
    f = load_topology(FATTREE_K4)
    assert f.kind == "fat-tree" and len(f.hosts) == 16


def test_address_plan_is_deterministic_and_unique():
    a = build_fat_tree("ft", 8, 10**9, 10**9, 1.0, 1.0)
    b = build_fat_tree("ft", 8, 10**9, 10**9, 1.0, 1.0)
    assert a == b
    ips = [h.ipv4 for h in a.hosts]
    macs = [h.mac for h in a.hosts]
    dpids = [s.dpid for s in a.switches]
    assert len(set(ips)) == len(ips) and len(set(macs)) == len(macs)
    assert len(set(dpids)) == len(dpids) and min(dpids) >= 1
    for ip in ips:
        assert ipaddress.IPv4Address(ip) in ipaddress.IPv4Network("10.0.0.0/8")
    for mac in macs:
        first = int(mac.split(":")[0], 16)
        assert first & 0x02 and not first & 0x01  # locally administered, unicast


def test_missing_attributes_are_errors_not_defaults():
    f = build_fat_tree("ft", 4, 10**9, 10**9, 1.0, 1.0)
    g = f.graph()
    del g.edges["h1", "p0e0"]["latency_us"]
    with pytest.raises(ValueError, match="latency_us"):
        require_edge_attrs(g)


BAD = [
    ("name: x\nkind: ring\n", "2:7: kind: unknown topology kind 'ring'"),
    ("name: x\nspines: 1\n", "1:1: kind: required field is missing"),
    (
        "name: x\nkind: leaf-spine\nspines: 2\nleaves: 2\nhosts_per_leaf: 1\n"
        "links:\n  host: {rate: 10Mbps, latency: 1us}\n  fabric: {rate: 10, latency: 1us}\n",
        "8:18: links.fabric.rate: 10 has no unit",
    ),
    (
        "name: x\nkind: leaf-spine\nspines: 2\nleaves: 2\nhosts_per_leaf: 1\n"
        "links:\n  host: {rate: 10Mbps, latency: 1us}\n  fabric: {rate: 10Mbps}\n",
        "8:11: links.fabric.latency: required field is missing",
    ),
    (
        "name: x\nkind: fat-tree\nk: 5\nlinks:\n  host: {rate: 1Gbps, latency: 1us}\n"
        "  fabric: {rate: 1Gbps, latency: 1us}\n",
        "3:4: k: Value error, k must be even",
    ),
    (
        "name: x\nkind: leaf-spine\nspines: 2\nspines: 3\n",
        "4:1: duplicate key",
    ),
    (
        "name: x\nkind: leaf-spine\nspines: 2\nleaves: 2\nhosts_per_leaf: 1\nuplinks: 4\n"
        "links:\n  host: {rate: 10Mbps, latency: 1us}\n  fabric: {rate: 10Mbps, latency: 1us}\n",
        "6:1: uplinks: unknown key",
    ),
    ("- a\n- b\n", "1:1: the document must be a YAML mapping"),
    ("name: [x\n", "invalid YAML"),
]


@pytest.mark.parametrize(("text", "expected"), BAD)
def test_bad_topologies_name_file_line_col(write, text, expected):
    path = write(text, "topo.yaml")
    with pytest.raises(ConfigError) as ei:
        load_topology(path)
    rendered = str(ei.value)
    assert rendered.startswith(str(path) + ":")
    assert expected.replace("Value error, ", "") in rendered, rendered


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read file"):
        load_topology(tmp_path / "nope.yaml")
