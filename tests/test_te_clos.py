"""Port-level Clos tables (controller.te.clos) against PathIndex, the reference enumeration,
and the equitable colouring built on them (controller.te.closcolour)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.model import build_fat_tree, build_leaf_spine
from controller.model.generators import build_rail_optimized
from controller.te.clos import ClosTables, heights_and_counts, pick_alive
from controller.te.closcolour import colour_clos, euler_colour
from controller.te.colouring import _kempe
from controller.te.pathindex import PathIndex
from controller.te.reroute import switch_links

G = 10**9


@st.composite
def fabric_state(draw):
    kind = draw(st.sampled_from(["ft", "ls", "ro"]))
    if kind == "ft":
        f = build_fat_tree("ft", draw(st.sampled_from([4, 6])), G, G, 1.0, 1.0,
                           core_uplinks=draw(st.sampled_from([None, 1])))
    elif kind == "ls":
        f = build_leaf_spine("ls", draw(st.integers(1, 4)), draw(st.integers(2, 5)),
                             draw(st.integers(1, 2)), G, G, 1.0, 1.0)
    else:
        f = build_rail_optimized("ro", 4, draw(st.integers(1, 3)), 2, 2, G, G, 1.0, 1.0)
    sw = sorted(tuple(sorted((ln.a, ln.b))) for ln in f.links if ln.a in f.switch_by_name
                and ln.b in f.switch_by_name)
    down = draw(st.lists(st.sampled_from(sw), max_size=3, unique=True))
    return f, frozenset(frozenset(x) for x in down)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabric_state(), st.data())
def test_tables_of_a_failure_derived_from_the_intact_ones_equal_built_ones(state, data):
    """Invariant: the tables of ``index.with_down(links)`` derived from ``index``'s (only the
    rows that climb to a newly dead link recomputed) equal tables built from scratch for the
    failed state, at every height, also for a second failure derived from the first."""
    f, down = state
    sw = sorted(tuple(sorted((ln.a, ln.b))) for ln in f.links if ln.a in f.switch_by_name
                and ln.b in f.switch_by_name)
    more = data.draw(st.lists(st.sampled_from(sw), max_size=2, unique=True))
    idx = PathIndex(f, down)
    t = ClosTables.of(idx)
    assert t is not None
    for r in range(1, t.max_height + 1):  # the parent's rows exist: derivation applies
        t.chains(r), t.reach(r), t.classes(r)
    steps = [frozenset(frozenset(x) for x in more[:1]), frozenset(frozenset(x) for x in more[1:])]
    cur = idx
    for extra in steps:
        nxt = cur.with_down(extra - cur.down)
        got = ClosTables.of(nxt)
        ref = ClosTables(PathIndex(f, nxt.down))
        assert got is not None and got._parent is ClosTables.of(cur)
        for r in range(1, t.max_height + 1):
            assert np.array_equal(got.chains(r), ref.chains(r)), r
            assert np.array_equal(got.reach(r), ref.reach(r)), r
            assert np.array_equal(got.classes(r)[0], ref.classes(r)[0]), r
        cur = nxt


@pytest.mark.parametrize("steps", [
    [{("p0a0", "c1")}],  # leaves below p0a0 climb through it: their rows change too
    [{("p0e0", "p0a0")}, {("p1a1", "c4")}],
    [set(switch_links(build_fat_tree("ft", 4, G, G, 1.0, 1.0), "p0a1"))],
])
def test_derived_tables_of_named_fat_tree_failures(steps):
    f = build_fat_tree("ft", 4, G, G, 1.0, 1.0)
    cur = PathIndex(f)
    t = ClosTables.of(cur)
    assert t is not None
    t.warm()
    t.classes(1), t.classes(2)
    held = [cur]  # a state derives from the one it failed from while that is alive (in use)
    for links in steps:
        cur = cur.with_down(frozenset(frozenset(x) for x in links))
        held.append(cur)
        got, ref = ClosTables.of(cur), ClosTables(PathIndex(f, cur.down))
        assert got is not None and got._parent is not None
        for r in (2, 1):
            assert np.array_equal(got.chains(r), ref.chains(r))
            assert np.array_equal(got.reach(r), ref.reach(r))
            assert np.array_equal(got.classes(r)[0], ref.classes(r)[0])
            assert np.array_equal(got.classes(r)[1], ref.classes(r)[1])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabric_state(), st.integers(0, 10**6))
def test_candidates_heights_counts_and_ranks_equal_pathindex(state, seed):
    """Invariant: the port tables name exactly PathIndex's candidates, in its order, so a
    candidate's row number means the same to both (module docstring of controller.te.clos)."""
    f, down = state
    idx = PathIndex(f, down)
    t = ClosTables(idx)
    leaves = sorted({h.leaf for h in f.hosts})
    rng = random.Random(seed)
    u, v, ranks, rows = [], [], [], []
    for a in leaves:
        for b in leaves:
            ref = idx.leaf_candidates(a, b)
            got = t.candidates(t.leaf_ids([a])[0], t.leaf_ids([b])[0])
            assert np.array_equal(ref, got) or (ref.shape[0] == got.shape[0] == 0)
            h, n = heights_and_counts(t, t.leaf_ids([a]), t.leaf_ids([b]))
            assert n[0] == ref.shape[0]
            assert h[0] == (ref.shape[1] // 2 if ref.shape[0] else -1)
            if ref.shape[0] and ref.shape[1]:
                r = rng.randrange(ref.shape[0])
                u.append(t.leaf_ids([a])[0])
                v.append(t.leaf_ids([b])[0])
                ranks.append(r)
                rows.append(ref[r])
    if not u:
        return
    uu, vv = np.asarray(u), np.asarray(v)
    h, _ = heights_and_counts(t, uu, vv)
    seq = pick_alive(t, uu, vv, h, np.asarray(ranks))
    for i, row in enumerate(rows):
        got = t.walk(uu[i:i + 1], vv[i:i + 1], seq[i:i + 1, :h[i]])[0]
        assert np.array_equal(got, row)
        assert np.array_equal(t.columns(row), seq[i, :h[i]])


def test_multi_site_and_odd_fabrics_are_not_mirrored():
    from controller.model import load_topology
    from tests.conftest import ROOT

    f = load_topology(ROOT / "mininet_labs" / "topologies" / "two_dc.yaml")
    assert ClosTables.of(PathIndex(f)) is None  # WAN links: the PathIndex path is used


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 12), st.integers(0, 10**6))
def test_euler_colouring_is_proper(log_d, nodes, seed):
    """A proper edge colouring with D = 2^m colours of any bipartite multigraph of max
    degree ≤ D (Gabow 1976): no two edges at one node share a colour."""
    d = 2 ** log_d
    rng = random.Random(seed)
    left, right = [], []
    deg_l, deg_r = [0] * nodes, [0] * nodes
    for _ in range(rng.randrange(nodes * d + 1)):
        a, b = rng.randrange(nodes), rng.randrange(nodes)
        if deg_l[a] < d and deg_r[b] < d:
            left.append(a)
            right.append(b)
            deg_l[a] += 1
            deg_r[b] += 1
    col = euler_colour(np.asarray(left, dtype=np.int64), np.asarray(right, dtype=np.int64),
                       nodes, nodes, d)
    assert ((0 <= col) & (col < d)).all()
    for side in (left, right):
        pairs = list(zip(side, col.tolist(), strict=True))
        assert len(set(pairs)) == len(pairs)


def test_euler_colour_rejects_bad_degrees():
    with pytest.raises(ValueError, match="power of two"):
        euler_colour(np.zeros(1, np.int64), np.zeros(1, np.int64), 1, 1, 3)
    with pytest.raises(ValueError, match="more than 2 edges"):
        euler_colour(np.zeros(3, np.int64), np.arange(3), 1, 3, 2)


def test_kempe_extends_a_partial_colouring_with_restricted_colours():
    every = (0, 1, 2)
    edges = [(0, 10, every, frozenset(every)), (1, 10, every, frozenset(every)),
             (1, 11, every, frozenset(every)), (0, 11, (0, 1), frozenset((0, 1)))]
    col = _kempe(edges, [0, 1, None, None])
    assert None not in col
    for node in (0, 1, 10, 11):
        used = [c for (a, b, _, _), c in zip(edges, col, strict=True) if node in (a, b)]
        assert len(used) == len(set(used))
    assert col[3] in (0, 1)


def _ring(f, seed):
    hosts = [h.name for h in f.hosts]
    random.Random(seed).shuffle(hosts)
    return hosts


@pytest.mark.parametrize("down_kind", ["none", "link", "agg"])
def test_colouring_a_permutation_ring_leaves_no_link_with_two(down_kind):
    """A fragmented ring on a k=8 fat-tree: among the flows the colouring places, no fabric
    link carries two, intact or with an aggregation–core link down (König; next-level swaps);
    with an aggregation switch down its pod's edges have 4 flows for 3 uplinks, so one carries
    ⌈4/3⌉ = 2 (equitable, de Werra 1971)."""
    f = build_fat_tree("ft", 8, G, G, 1.0, 1.0)
    down = {"none": frozenset(), "link": frozenset({frozenset(("p0a0", "c1"))}),
            "agg": switch_links(f, "p0a0")}[down_kind]
    idx = PathIndex(f, down)
    t = ClosTables(idx)
    hosts = _ring(f, 2)
    leaf = {h.name: h.leaf for h in f.hosts}
    u = t.leaf_ids([leaf[hosts[i]] for i in range(len(hosts))])
    v = t.leaf_ids([leaf[hosts[(i + 1) % len(hosts)]] for i in range(len(hosts))])
    h, _ = heights_and_counts(t, u, v)
    seq = colour_clos(t, u, v, h)
    if down_kind == "none":
        assert not ((seq[:, 0] < 0) & (h > 0)).any()
    load = np.zeros(len(idx.links))
    for r in (1, 2):
        sel = np.flatnonzero((h == r) & (seq[:, 0] >= 0))
        np.add.at(load, t.walk(u[sel], v[sel], seq[sel, :r]).ravel(), 1)
    assert load.max() == (2 if down_kind == "agg" else 1)


@pytest.mark.parametrize("seed", range(6))
def test_place_meets_its_lower_bound_on_failed_fat_trees(seed):
    """Colouring + greedy + local search reach the (pigeonhole) lower bound for a fragmented
    ring with a link or an aggregation switch down: the plan is optimal, not just good."""
    from controller.te.collectives import FlowDemand
    from controller.te.placer import place

    f = build_fat_tree("ft", 8, G, G, 1.0, 1.0)
    hs = _ring(f, seed)
    ds = {FlowDemand("r", i, hs[i], hs[(i + 1) % len(hs)]): 1e9 for i in range(len(hs))}
    for down in ([frozenset(("p0a0", "c1"))], switch_links(f, "p0a0")):
        pin = place(f, ds, down)
        assert pin.optimal, (pin.max_utilisation, pin.lower_bound)


def test_equitable_colouring_spreads_sub_flows():
    """Three sub-flows per flow: at every edge switch each uplink carries exactly 3 (the
    equitable colouring of de Werra 1971: ⌈d/c⌉ with d = 3·4 sub-flows over c = 4 ports), and
    the sub-flows of one flow mostly take different uplinks."""
    f = build_fat_tree("ft", 8, G, G, 1.0, 1.0)
    idx = PathIndex(f)
    t = ClosTables(idx)
    hosts = _ring(f, 5)
    leaf = {h.name: h.leaf for h in f.hosts}
    n = len(hosts)
    src = [hosts[i] for i in range(n) for _ in range(3)]
    dst = [hosts[(i + 1) % n] for i in range(n) for _ in range(3)]
    key = np.tile(np.arange(3), n)
    u, v = t.leaf_ids([leaf[x] for x in src]), t.leaf_ids([leaf[x] for x in dst])
    h, _ = heights_and_counts(t, u, v)
    seq = colour_clos(t, u, v, h, key)
    load = np.zeros(len(idx.links))
    for r in (1, 2):
        sel = np.flatnonzero(h == r)
        np.add.at(load, t.walk(u[sel], v[sel], seq[sel, :r]).ravel(), 1)
    assert load.max() == 3
    spread = [len({int(seq[3 * i + j, 0]) for j in range(3)}) for i in range(n) if h[3 * i] > 0]
    # a flow's sub-flows spread like independent picks (3 of 4 ports: 2.31 different on
    # average); coloured copy by copy alike they would all share one (1.0)
    assert np.mean(spread) > 2.0


def test_patched_rows_read_like_the_array_they_stand_for():
    """PatchedRows (a failed state's tables over its parent's): every gather along the first
    axis — 1-D, 2-D, scalar — equals the same gather on the materialised array, also for a
    patch of a patch; the base is never written."""
    from controller.te.clos import PatchedRows

    rng = np.random.default_rng(7)
    base = rng.integers(-1, 50, size=(40, 6, 2)).astype(np.int32)
    keep = base.copy()
    rows1 = np.array([3, 17, 30])
    p1 = PatchedRows.patch(base, rows1, np.full((3, 6, 2), -1, np.int32))
    rows2 = np.array([5, 17])
    p2 = PatchedRows.patch(p1, rows2, np.full((2, 6, 2), 99, np.int32))
    want1 = base.copy()
    want1[rows1] = -1
    want2 = want1.copy()
    want2[rows2] = 99
    for p, want in ((p1, want1), (p2, want2)):
        assert np.array_equal(np.asarray(p), want)
        for key in (rng.integers(0, 40, size=25), rng.integers(0, 40, size=(7, 3)),
                    np.arange(40)):
            assert np.array_equal(p[key], want[key])
        assert all(np.array_equal(p[i], want[i]) for i in range(40))
        assert p.shape == want.shape and len(p) == 40
    assert np.array_equal(base, keep)
    assert p2.base is base and list(p2.rows) == [3, 5, 17, 30]
