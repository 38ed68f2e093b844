import networkx as nx
import pytest

from controller.model import build_fat_tree, build_leaf_spine, load_topology
from controller.policy.model import Collective, L4Match
from controller.te.collectives import FlowDemand, expand_collective
from controller.te.ecmp import ecmp_next_hops
from controller.te.invariants import check_routes
from controller.te.paths import candidate_paths
from tests.conftest import MAIN_TOPOLOGY


def test_leaf_spine_sets():
    f = load_topology(MAIN_TOPOLOGY)
    nh = ecmp_next_hops(f)
    assert set(nh) == {s.name for s in f.switches}
    # leaf to a remote host: every uplink; to a local host: its port
    assert nh["leaf1"]["h3"] == (3, 4)
    assert nh["leaf1"]["h1"] == (1,) and nh["leaf1"]["h2"] == (2,)
    # spine to a host: the one downlink to that host's leaf
    for h in f.hosts:
        leaf_no = int(h.leaf.removeprefix("leaf"))
        assert nh["spine1"][h.name] == (leaf_no,)
        assert nh["spine2"][h.name] == (leaf_no,)
    check_routes(f, nh)


def test_fat_tree_sets():
    k = 4
    f = build_fat_tree("ft", k, 10**9, 10**9, 1.0, 1.0)
    nh = ecmp_next_hops(f)
    half = k // 2
    for h in f.hosts:
        pod = f.switch_by_name[h.leaf].pod
        for s in f.switches:
            ports = nh[s.name][h.name]
            if s.role == "core":
                assert ports == (pod + 1,)  # one port per pod
            elif s.role == "edge" and s.pod != pod:
                assert ports == tuple(range(half + 1, k + 1))  # k/2 uplinks
            elif s.role == "agg" and s.pod != pod:
                assert ports == tuple(range(half + 1, k + 1))
            elif s.role == "agg":
                assert ports == (int(h.leaf.split("e")[1]) + 1,)
            elif s.name == h.leaf:
                assert ports == (h.port,)
            else:  # another edge of the same pod: up to any aggregation switch
                assert ports == tuple(range(half + 1, k + 1))
    check_routes(f, nh)


def _reference(fabric, down):
    """Next hops from networkx shortest path lengths (the slow, obvious way)."""
    g = fabric.without_links(down).graph()
    sw = g.subgraph([s.name for s in fabric.switches])
    out = {s.name: {} for s in fabric.switches}
    for h in fabric.hosts:
        if frozenset((h.name, h.leaf)) in down:
            continue
        dist = nx.single_source_shortest_path_length(sw, h.leaf)
        for s in fabric.switches:
            if s.name not in dist:
                continue
            if s.name == h.leaf:
                out[s.name][h.name] = (h.port,)
                continue
            out[s.name][h.name] = tuple(sorted(
                fabric.port_towards(s.name, n) for n in sw.neighbors(s.name)
                if dist.get(n) == dist[s.name] - 1
            ))
    return out


@pytest.mark.parametrize("down", [
    frozenset(),
    frozenset({frozenset({"leaf1", "spine1"})}),
    frozenset({frozenset({"leaf1", "spine1"}), frozenset({"leaf2", "spine2"})}),
    frozenset({frozenset({"leaf1", "spine1"}), frozenset({"leaf1", "spine2"})}),
    frozenset({frozenset({"h1", "leaf1"})}),
])
def test_matches_networkx_reference_with_failures(down):
    f = build_leaf_spine("ls", 2, 3, 2, 10**9, 10**9, 1.0, 1.0)
    nh = ecmp_next_hops(f, down)
    assert nh == _reference(f, down)
    check_routes(f, nh, down)


def test_fat_tree_reference_with_failures():
    f = build_fat_tree("ft", 4, 10**9, 10**9, 1.0, 1.0)
    down = frozenset({frozenset({"p0a0", "c1"}), frozenset({"p1e0", "p1a1"}),
                      frozenset({"p2a1", "c4"})})
    nh = ecmp_next_hops(f, down)
    assert nh == _reference(f, down)
    check_routes(f, nh, down)


def test_unreachable_destinations_are_absent():
    f = build_leaf_spine("ls", 1, 2, 1, 10**9, 10**9, 1.0, 1.0)
    nh = ecmp_next_hops(f, {frozenset({"leaf2", "spine1"})})
    assert "h2" not in nh["leaf1"] and "h2" not in nh["spine1"]
    assert nh["leaf2"] == {"h2": (1,)}


def test_unknown_down_link_is_an_error():
    f = build_leaf_spine("ls", 1, 2, 1, 10**9, 10**9, 1.0, 1.0)
    with pytest.raises(ValueError, match="leaf1-leaf2 is not a link"):
        ecmp_next_hops(f, {frozenset({"leaf1", "leaf2"})})


def test_candidates_are_the_ecmp_dag_paths_when_intact():
    f = build_fat_tree("ft", 4, 10**9, 10**9, 1.0, 1.0)
    nh = ecmp_next_hops(f)
    for src, dst in [("h1", "h2"), ("h1", "h3"), ("h1", "h16"), ("h7", "h5")]:
        walked = set()

        def walk(path, dst=dst, walked=walked):
            node = path[-1]
            if node == dst:
                walked.add(path)
                return
            for p in nh[node][dst]:
                walk(path + (f.port_map[(node, p)][0],))

        walk((src, f.host_by_name[src].leaf))
        cands = candidate_paths(f, src, dst)
        assert set(cands) == walked
        assert len(cands) == len(set(cands))
    assert len(candidate_paths(f, "h1", "h16")) == 4  # (k/2)^2 across pods


def test_expand_ring():
    c = Collective(name="r", algorithm="ring", ranks=("h1", "h2", "h3"), bidirectional=True,
                   dscp=26, l4=L4Match(proto="udp", dst_port=4791))
    ds = expand_collective(c)
    assert [(d.src, d.dst) for d in ds] == [
        ("h1", "h2"), ("h2", "h3"), ("h3", "h1"), ("h2", "h1"), ("h3", "h2"), ("h1", "h3")]
    assert [d.index for d in ds] == list(range(6))
    assert ds[0] == FlowDemand("r", 0, "h1", "h2", 26, 17, None, 4791)
    two = Collective(name="t", algorithm="ring", ranks=("h1", "h2"), bidirectional=True)
    assert [(d.src, d.dst) for d in expand_collective(two)] == [("h1", "h2"), ("h2", "h1")]


def test_unknown_algorithm():
    c = Collective.model_construct(name="x", algorithm="tree", ranks=("h1", "h2"),
                                   bidirectional=False, dscp=None, l4=None)
    with pytest.raises(ValueError, match="unknown algorithm 'tree'"):
        expand_collective(c)
