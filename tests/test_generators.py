import pytest

from controller.errors import ConfigError
from controller.model import build_fat_tree, load_topology
from controller.model.generators import build_rail_optimized, oversubscription, server_groups

RAIL = ("name: r\nkind: rail-optimized\nservers: 4\nrails: 8\nservers_per_leaf: 2\nspines: {sp}\n"
        "links:\n  host: {{rate: 400Gbps, latency: 1us}}\n  fabric: {{rate: 400Gbps, latency: 1us}}\n")


def test_rail_optimized_layout(write):
    f = load_topology(write(RAIL.format(sp=2)))
    assert f.kind == "rail-optimized" and len(f.hosts) == 32 and len(f.switches) == 2 + 16
    groups = server_groups(f)
    assert len(groups) == 4 and all(len(g) == 8 for g in groups)
    for s, g in enumerate(groups):  # NIC i of every server on rail i's leaf
        assert [f.host_by_name[h].leaf for h in g] == [f"r{i}l{s // 2}" for i in range(8)]
    assert oversubscription(f)["leaf"] == 1.0


@pytest.mark.parametrize(("text", "expected"), [
    (RAIL.format(sp=1), "6:9: spines: rail leaves must be non-blocking"),
    (RAIL.format(sp=2).replace("servers_per_leaf: 2", "servers_per_leaf: 3"),
     "5:19: servers_per_leaf: servers_per_leaf must divide servers (4)"),
    (RAIL.format(sp=2).replace("rails: 8\n", ""), "rails: required field is missing"),
    (RAIL.format(sp=2) + "pods: 2\n", "10:1: pods: unknown key"),
])
def test_rail_optimized_errors(write, text, expected):
    path = write(text)
    with pytest.raises(ConfigError) as ei:
        load_topology(path)
    assert str(path) + ":" in str(ei.value) and expected in str(ei.value), str(ei.value)


def test_rail_builder_rejects_bad_counts():
    with pytest.raises(ValueError, match="must be >= 1"):
        build_rail_optimized("r", 0, 8, 1, 1, 1, 1, 1.0, 1.0)


def test_fat_tree_oversubscription():
    full = build_fat_tree("ft", 8, 10**9, 10**9, 1.0, 1.0)
    thin = build_fat_tree("ft", 8, 10**9, 10**9, 1.0, 1.0, core_uplinks=2)
    assert [s.name for s in full.switches] == [s.name for s in build_fat_tree(
        "ft", 8, 10**9, 10**9, 1.0, 1.0, core_uplinks=4).switches]
    assert sum(s.role == "core" for s in thin.switches) == 8
    assert oversubscription(full)["agg"] == 1.0 and oversubscription(thin)["agg"] == 2.0
    assert oversubscription(build_fat_tree("ft", 4, 4 * 10**9, 10**9, 1.0, 1.0))["edge"] == 4.0
    with pytest.raises(ValueError, match="core_uplinks"):
        build_fat_tree("ft", 8, 1, 1, 1.0, 1.0, core_uplinks=5)
