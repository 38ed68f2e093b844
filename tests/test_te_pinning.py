import pytest

from controller.model import build_fat_tree, build_leaf_spine, load_topology
from controller.policy import load_policy
from controller.te.collectives import FlowDemand, expand_policy
from controller.te.exact import min_congestion_exact
from controller.te.invariants import check_path
from controller.testing.pinning_oracle import pin_flows
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY


def ring(name, hosts, start=0):
    n = len(hosts)
    return [FlowDemand(name, start + i, hosts[i], hosts[(i + 1) % n]) for i in range(n)]


def recount(pinning):
    out = {}
    for path in pinning.paths.values():
        for uv in zip(path, path[1:], strict=False):
            out[uv] = out.get(uv, 0) + 1
    return out


def test_main_fabric_two_rings_collision_free():
    f = load_topology(MAIN_TOPOLOGY)
    demands = expand_policy(load_policy(PINNED_POLICY, f))
    p = pin_flows(f, demands)
    assert p.max_link_flows == 1 == p.lower_bound and p.optimal
    assert dict(p.link_flows) == recount(p)
    for d, path in p.paths.items():
        check_path(f, path, src=d.src, dst=d.dst)
    # every leaf's two outgoing flows use different spines
    ups = [(path[1], path[2]) for path in p.paths.values()]
    assert len(set(ups)) == len(ups) == 8
    assert p.optimal


def test_deterministic():
    f = build_fat_tree("ft", 4, 10**9, 10**9, 1.0, 1.0)
    hosts = [h.name for h in f.hosts]
    ds = ring("a", hosts[::3]) + ring("b", hosts[1::2], 100)
    a, b = pin_flows(f, ds), pin_flows(f, ds)
    assert a == b


def test_congested_leaf_spine_meets_cut_bound():
    # 1 spine: every inter-leaf flow shares the leaf's single uplink
    f = build_leaf_spine("ls", 1, 2, 3, 10**9, 10**9, 1.0, 1.0)
    ds = [FlowDemand("x", i, f"h{i + 1}", f"h{i + 4}") for i in range(3)]
    p = pin_flows(f, ds)
    assert p.max_link_flows == 3 == p.lower_bound


def test_down_links_are_avoided():
    f = load_topology(MAIN_TOPOLOGY)
    down = frozenset({frozenset({"leaf1", "spine1"})})
    demands = expand_policy(load_policy(PINNED_POLICY, f))
    p = pin_flows(f, demands, down)
    for path in p.paths.values():
        assert ("leaf1", "spine1") not in zip(path, path[1:], strict=False)
        assert ("spine1", "leaf1") not in zip(path, path[1:], strict=False)
    # two flows leave leaf1 and two enter it, over one uplink now
    assert p.max_link_flows == 2 == p.lower_bound


def test_no_path_names_the_flow():
    f = build_leaf_spine("ls", 1, 2, 1, 10**9, 10**9, 1.0, 1.0)
    d = FlowDemand("ring-a", 0, "h1", "h2")
    with pytest.raises(ValueError, match="flow ring-a h1->h2: no valley-free path"):
        pin_flows(f, [d], {frozenset({"leaf2", "spine1"})})
    with pytest.raises(ValueError, match="flow ring-a h1->h9: 'h9' is not a host"):
        pin_flows(f, [FlowDemand("ring-a", 0, "h1", "h9")])
    with pytest.raises(ValueError, match="listed twice"):
        pin_flows(f, [d, d])


def test_valley_paths_are_never_candidates():
    # leaf1 only reaches spine1, leaf2 only spine2: the sole path is a valley via leaf3
    f = build_leaf_spine("ls", 2, 3, 1, 10**9, 10**9, 1.0, 1.0)
    down = {frozenset({"leaf1", "spine2"}), frozenset({"leaf2", "spine1"})}
    with pytest.raises(ValueError, match="no valley-free path"):
        pin_flows(f, [FlowDemand("r", 0, "h1", "h2")], down)


def test_empty():
    f = build_leaf_spine("ls", 1, 2, 1, 10**9, 10**9, 1.0, 1.0)
    p = pin_flows(f, [])
    assert p.max_link_flows == 0 == p.lower_bound and not p.paths and not p.link_flows


@pytest.mark.parametrize("case", range(6))
def test_matches_exact_milp(case):
    fabrics = [
        build_leaf_spine("ls", 2, 4, 2, 10**9, 10**9, 1.0, 1.0),
        build_leaf_spine("ls", 3, 4, 3, 10**9, 10**9, 1.0, 1.0),
        build_fat_tree("ft", 4, 10**9, 10**9, 1.0, 1.0),
    ]
    f = fabrics[case % 3]
    hosts = [h.name for h in f.hosts]
    ds = ring("a", hosts[case % 2::2]) + ring("b", hosts[::-1][: 4 + case], 100)
    if case >= 3:
        ds += ring("c", hosts[1::3], 200)
    ds = list(dict.fromkeys(ds))
    p = pin_flows(f, ds)
    opt, paths = min_congestion_exact(f, ds)
    assert p.max_link_flows == opt
    assert p.lower_bound <= opt
    assert set(paths) == set(ds)
