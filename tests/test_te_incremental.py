"""The incremental and vectorised structures behind planning and repair speed agree with the
straightforward computations they replace (which serve as oracles here)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.model import build_fat_tree, build_leaf_spine
from controller.model.generators import build_rail_optimized
from controller.te.bounds import load_lower_bound
from controller.te.collectives import FlowDemand
from controller.te.greedy import greedy
from controller.te.loadstate import BATCH_FLOWS, LoadState
from controller.te.pathindex import PathIndex
from controller.te.placer import place
from controller.te.reroute import repair, switch_links


def _fabrics():
    yield build_fat_tree("ft4", 4, 10**9, 10**9, 1.0, 1.0)
    yield build_fat_tree("ft4o", 4, 10**9, 10**9, 1.0, 1.0, core_uplinks=2)
    yield build_leaf_spine("ls", 3, 4, 2, 10**9, 4 * 10**9, 1.0, 1.0)
    yield build_rail_optimized("rail", 4, 2, 2, 2, 10**9, 10**9, 1.0, 1.0)


def _switch_links(fabric):
    return sorted(sorted((ln.a, ln.b)) for ln in fabric.links if ln.a not in fabric.host_by_name
                  and ln.b not in fabric.host_by_name)


@st.composite
def fabric_and_failures(draw):
    fabric = draw(st.sampled_from(list(_fabrics())))
    links = _switch_links(fabric)
    first = frozenset(frozenset(x) for x in draw(st.lists(st.sampled_from(links), max_size=2)))
    more = frozenset(frozenset(x) for x in draw(st.lists(st.sampled_from(links), max_size=3)))
    return fabric, first, more


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabric_and_failures())
def test_with_down_equals_a_fresh_index(case):
    fabric, first, more = case
    base = PathIndex(fabric, first)
    hosts = [h.name for h in fabric.hosts]
    for a in hosts[::2]:  # fill the parent's caches (cones, pairs, join memo) first
        for b in hosts[1::3]:
            if a != b:
                base.candidates(a, b)
    derived = base.with_down(more)
    fresh = PathIndex(fabric, first | more)
    assert derived.down == fresh.down
    assert (derived.is_up == fresh.is_up).all()
    for a in hosts:
        for b in hosts:
            if a != b:
                assert np.array_equal(derived.candidates(a, b), fresh.candidates(a, b)), (a, b)
    # the parent is untouched
    assert base.down == first and base.is_up.sum() == PathIndex(fabric, first).is_up.sum()


def test_with_down_rejects_unknown_links():
    fabric = build_leaf_spine("ls", 2, 2, 1, 10**9, 10**9, 1.0, 1.0)
    with pytest.raises(ValueError, match="not a link"):
        PathIndex(fabric).with_down({frozenset(("leaf1", "leaf2"))})


def test_link_ids_flat_matches_per_path_ids():
    fabric = build_fat_tree("ft4", 4, 10**9, 10**9, 1.0, 1.0)
    index = PathIndex(fabric)
    paths = [p for a, b in (("h1", "h16"), ("h2", "h3"), ("h5", "h6")) for p in index.paths(a, b)]
    paths.append(("h1",))  # a one-node path has no hop
    ids, starts = index.link_ids_flat(paths)
    assert len(starts) == len(paths) + 1
    for j, p in enumerate(paths):
        assert ids[starts[j]:starts[j + 1]].tolist() == index.link_ids(p).tolist()
    assert index.link_ids_flat([])[0].size == 0
    with pytest.raises(KeyError, match="h1->p1e0 is not a link"):
        index.link_ids_flat([("h1", "p1e0")])
    rows = np.stack([index.link_ids(p) for p in paths[:4]])
    assert index.paths_of_rows(rows) == paths[:4]


def _lower_bound_reference(state: LoadState) -> float:
    """The per-link, per-flow loop this module's vectorised bound replaced."""
    idx = state.index
    base = state.base_bps
    mand = base.copy()
    for i, w in enumerate(state.rate_bps):
        up, down = state.access[i]
        mand[up] += w
        mand[down] += w
        if state.cands[i].shape[0] == 1:
            mand[state.cands[i][0]] += w
    best = float((mand / idx.capacity_bps).max())
    fabric = idx.fabric
    pod_of = {s.name: s.pod for s in fabric.switches if s.pod is not None}
    leaf_of = {h.name: h.leaf for h in fabric.hosts}
    by_leaf: dict[str, object] = {lf: lf for lf in leaf_of.values()}
    by_leaf.update(leaf_of)
    by_pod: dict[str, object] = dict(pod_of)
    by_pod.update({h: pod_of[lf] for h, lf in leaf_of.items() if lf in pod_of})
    for part in (by_leaf, by_pod):
        cap: dict[tuple[str, object], float] = {}
        load: dict[tuple[str, object], float] = {}
        for lid, (u, v) in enumerate(idx.links):
            gu, gv = part.get(u), part.get(v)
            if gu == gv or not idx.is_up[lid]:
                continue
            for side, g in (("out", gu), ("in", gv)):
                if g is not None:
                    cap[(side, g)] = cap.get((side, g), 0.0) + idx.capacity_bps[lid]
                    load[(side, g)] = load.get((side, g), 0.0) + base[lid]
        for d, w in zip(state.flows, state.rate_bps, strict=True):
            gs, gd = part.get(d.src), part.get(d.dst)
            if gs != gd:
                for side, g in (("out", gs), ("in", gd)):
                    if g is not None:
                        load[(side, g)] = load.get((side, g), 0.0) + w
        for key, c in cap.items():
            if c > 0:
                best = max(best, load.get(key, 0.0) / c)
    return best


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabric_and_failures(), st.integers(0, 10**6))
def test_vectorised_lower_bound_equals_the_loop(case, seed):
    fabric, first, _ = case
    rng = random.Random(seed)
    index = PathIndex(fabric, first)
    base = np.asarray([rng.choice([0.0, 0.0, 1e8, 5e8]) for _ in index.links]) * index.is_up
    state = LoadState(index, base)
    hosts = [h.name for h in fabric.hosts]
    for i in range(rng.randint(1, 12)):
        a, b = rng.sample(hosts, 2)
        try:
            state.add(FlowDemand("x", i, a, b), rng.choice([1e8, 3e8, 1e9]))
        except ValueError:
            continue  # no path over the links that are up
    ref = _lower_bound_reference(state)
    assert load_lower_bound(state, integral=False) == pytest.approx(ref, rel=1e-12)
    # the pigeonhole term only strengthens it (flows do not split)
    assert load_lower_bound(state) >= ref * (1 - 1e-12)


def test_repair_with_the_planning_index_equals_repair_from_the_fabric():
    fabric = build_fat_tree("ft8", 8, 10**9, 10**9, 1.0, 1.0)
    hosts = [h.name for h in fabric.hosts]
    random.Random(2).shuffle(hosts)
    rates = {FlowDemand("r", i, hosts[i], hosts[(i + 1) % len(hosts)]): 1e9 * (1 + i % 3)
             for i in range(len(hosts))}
    index = PathIndex(fabric)
    pin = place(fabric, rates, index=index)
    for down in ({frozenset(("p0a0", "c1"))}, switch_links(fabric, "p1a1")):
        a = repair(fabric, pin.paths, rates, down)
        b = repair(fabric, pin.paths, rates, down, index=index)
        assert a == b
        assert set(a.moved) == {d for d, p in pin.paths.items()
                                if any(frozenset(h) in down for h in zip(p, p[1:], strict=False))}
    with pytest.raises(ValueError, match="index is of fabric"):
        repair(fabric, pin.paths, rates, set(), index=PathIndex(build_fat_tree(
            "other", 4, 10**9, 10**9, 1.0, 1.0)))
    with pytest.raises(ValueError, match="no demand given"):
        repair(fabric, pin.paths, {}, set(), index=index)


@pytest.mark.parametrize("fabric", list(_fabrics()), ids=lambda f: f.name)
def test_prefetch_builds_the_same_candidates_as_one_pair_at_a_time(fabric):
    leaves = sorted({h.leaf for h in fabric.hosts})
    pairs = [(a, b) for a in leaves for b in leaves]
    batched, single = PathIndex(fabric), PathIndex(fabric)
    batched.prefetch(pairs + pairs[:3])  # repeats are skipped
    for a, b in pairs:
        got = batched.leaf_candidates(a, b)
        assert np.array_equal(got, single.leaf_candidates(a, b)), (a, b)
        assert not got.flags.writeable
    down = {frozenset(_switch_links(fabric)[0])}
    failed = batched.with_down(down)
    failed.prefetch(pairs)
    for a, b in pairs:
        assert np.array_equal(failed.leaf_candidates(a, b),
                              PathIndex(fabric, down).leaf_candidates(a, b)), (a, b)


def _pigeonhole_reference(link_group, cap, base, flow_group, rate, n_groups) -> float:
    """The pigeonhole cut bound by enumeration: per qualifying group (one flow rate w, one link
    capacity c), the lowest level L (in flows) that is the busiest link's background or a
    breakpoint β_e + k with Σ_e max(0, ⌊L − β_e⌋) ≥ n."""
    best = 0.0
    for g in range(n_groups):
        links = [e for e in range(len(link_group)) if link_group[e] == g]
        flows = [f for f in range(len(flow_group)) if flow_group[f] == g]
        if not links or not flows or len({rate[f] for f in flows}) > 1 \
                or len({cap[e] for e in links}) > 1:
            continue
        w, c, n = rate[flows[0]], cap[links[0]], len(flows)
        beta = [base[e] / w for e in links]
        top = max(beta)
        levels = sorted({top} | {b + k for b in beta for k in range(1, n + 2)})
        level = next(x for x in levels if x >= top and sum(
            max(0, int(np.floor(x - b + 1e-9))) for b in beta) >= n)
        best = max(best, level * w / c)
    return best


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6))
def test_pigeonhole_bound_equals_enumeration(seed):
    """``bounds._integral_cut`` (bisection over all groups at once: over integers where the
    backgrounds are whole flows, else stopped at ``_RESOLUTION`` and snapped to a breakpoint)
    equals the enumeration over breakpoints."""
    from controller.te.bounds import _integral_cut

    rng = random.Random(seed)
    n_groups = rng.randint(1, 6)
    n_links, n_flows = rng.randint(1, 24), rng.randint(1, 40)
    link_group = np.asarray([rng.randrange(n_groups) for _ in range(n_links)], dtype=np.int64)
    flow_group = np.asarray([rng.randrange(n_groups) for _ in range(n_flows)], dtype=np.int64)
    cap = np.asarray([rng.choice([1e9, 1e9, 1e9, 4e9]) for _ in range(n_links)])
    w = rng.choice([1e8, 1e9 / 12, 2.5e8])
    rate = np.asarray([w if rng.random() < 0.9 else 3e8 for _ in range(n_flows)])
    # half the draws whole flows of background only (whole breakpoints: integer bisection)
    kinds = ([0.0, w, 3 * w, 7 * w] if rng.random() < 0.5
             else [0.0, w, 2.5 * w, rng.uniform(0, 8) * w, 1e9])
    base = np.asarray([rng.choice(kinds) for _ in range(n_links)])
    got = _integral_cut(link_group, cap, base, flow_group, rate, n_groups)
    want = _pigeonhole_reference(link_group, cap, base, flow_group, rate, n_groups)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_greedy_in_batches_equals_the_one_by_one_greedy(seed, monkeypatch):
    """The greedy chooses the flows of a window together and places them up to the first
    whose choice shares a link with an earlier one's, where the next window starts
    (``controller.te.greedy._greedy_in_order``): the paths equal those of choosing every flow alone, in
    the same order, whatever the window sizes (k=8 fat-tree, a fragmented ring with 4
    sub-flows per flow, random background, an aggregation switch down)."""
    import controller.te.greedy as lp

    fabric = build_fat_tree("ft8", 8, 10**9, 10**9, 1.0, 1.0)
    rng = random.Random(seed)
    index = PathIndex(fabric).with_down(switch_links(fabric, "p0a0"))
    hosts = [h.name for h in fabric.hosts]
    rng.shuffle(hosts)
    base = np.asarray([rng.choice([0.0, 0.0, 1e8, 2.5e8]) for _ in index.links]) * index.is_up
    flows = [(FlowDemand("r", 4 * i + j, hosts[i], hosts[(i + 1) % len(hosts)]), 2.5e8)
             for i in range(len(hosts)) for j in range(4)]
    assert len(flows) >= lp.BATCH_FLOWS and 2.5e8 / 1e9 > lp.SMALL_FLOW  # the batched path

    def rows(batch: int, most: int) -> list[list[int]]:
        monkeypatch.setattr(lp, "IN_ORDER_BATCH", batch)
        monkeypatch.setattr(lp, "IN_ORDER_MAX_BATCH", most)
        state = LoadState(index, base.copy())
        state.add_many(flows)
        assert state.tables is not None
        greedy(state, range(len(state.flows)))
        return [state.links_of(i).tolist() for i in range(len(state.flows))]

    one_by_one = rows(1, 1)
    assert rows(lp.IN_ORDER_BATCH, lp.IN_ORDER_MAX_BATCH) == one_by_one
    assert rows(64, 64) == one_by_one
    assert rows(2, 8) == one_by_one


@pytest.mark.parametrize("uneven", [False, True], ids=["one-capacity", "uneven-capacity"])
def test_port_table_greedy_chooses_a_best_candidate_every_time(uneven):
    """The greedy over port tables (``controller.te.greedy._choose`` in windows; with one fabric capacity
    it orders candidates by their bottleneck before the flow is added) puts every flow, in
    greedy order, on a candidate of its list with the lowest bottleneck after placement and,
    among those, the lowest total utilisation (replayed flow by flow; k=8 fat-tree, an
    aggregation switch down, random background, 384 flows of three demands; every fabric
    link at one capacity, or a third of them slower)."""
    fabric = build_fat_tree("ft8", 8, 10**11, 10**11, 1.0, 1.0)
    rng = random.Random(5)
    index = PathIndex(fabric)
    if uneven:
        host_names = {h.name for h in fabric.hosts}
        fabric_links = [j for j in range(0, len(index.links), 2)
                        if not set(index.links[j]) & host_names]
        cap = index.capacity_bps.copy()
        for j in rng.sample(fabric_links, len(fabric_links) // 3):
            cap[j] = cap[j + 1] = 4e10
        index.capacity_bps = cap
    index = index.with_down(switch_links(fabric, "p0a0"))
    base = np.asarray([rng.choice([0.0, 0.0, 1e10, 2.5e10]) for _ in index.links]) * index.is_up
    hosts = [h.name for h in fabric.hosts]
    rng.shuffle(hosts)
    flows = [(FlowDemand("r", 3 * i + j, hosts[i], hosts[(i + 1) % len(hosts)]),
              rng.choice([1e10, 2.5e10, 4e10])) for i in range(len(hosts)) for j in range(3)]
    assert len(flows) >= BATCH_FLOWS  # port tables are used from this many flows on
    state = LoadState(index, base.copy())
    state.add_many(flows)
    assert state.tables is not None and (state.fabric_inv_cap is None) == uneven
    greedy(state, range(len(flows)))
    replay = LoadState(index, base.copy())
    replay.add_many(flows)
    order = sorted(range(len(flows)), key=lambda i: (-flows[i][1], replay.n_cands[i], i))
    for i in order:
        c = replay.cands[i]
        if c.shape[1] == 0:  # within one leaf: one empty candidate
            replay.place(i, 0)
            continue
        after = (replay.util[c] + flows[i][1] * replay.inv_cap[c]).max(axis=1)
        total = replay.util[c].sum(axis=1)
        (k,) = np.flatnonzero((c == state.rows[i]).all(axis=1))
        assert after[k] <= after.min() + 1e-9, flows[i][0].label
        assert total[k] <= total[after <= after.min() + 1e-9].min() + 1e-9, flows[i][0].label
        replay.place(i, int(k))


def test_a_flow_keeps_its_hash_but_does_not_pickle_it():
    """``FlowDemand`` computes its hash once and keeps it; a pickled flow carries no hash (a
    string's hash differs between processes), and equal flows hash alike either way."""
    import pickle

    d = FlowDemand("r", 3, "h1", "h2", dscp=26, subflow=1, subflows=2)
    h = hash(d)
    assert d.__dict__["_hash"] == h == hash(d)
    back = pickle.loads(pickle.dumps(d))
    assert "_hash" not in back.__dict__ and back == d and hash(back) == h
    assert hash(FlowDemand("r", 3, "h1", "h2", dscp=26, subflow=1, subflows=2)) == h
    assert {d: 1}[back] == 1 and d != FlowDemand("r", 3, "h1", "h2", dscp=26)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6))
def test_replace_many_equals_a_placement_built_afresh(seed):
    """``Placement.replace_many`` (one CSR block of new paths, some longer or shorter, some the
    same length) gives the ids, offsets and pinned load of a placement built from scratch with
    those paths, and leaves the original unchanged."""
    from controller.te.placement import Placement

    rng = np.random.default_rng(seed)
    index = PathIndex(build_leaf_spine("ls", 2, 3, 2, 10**9, 10**9, 1.0, 1.0))
    n_flows, n_links = int(rng.integers(1, 30)), len(index.links)
    flows = [FlowDemand("r", i, "h1", "h2") for i in range(n_flows)]
    rate = rng.uniform(1e6, 1e8, n_flows)
    rows = [rng.integers(0, n_links, int(rng.integers(2, 7))) for _ in range(n_flows)]
    old = Placement.from_rows(index, flows, rate, rows, np.zeros(n_links))
    _ = old.pinned_bps  # cached, so replace_many carries it over
    keep_ids, keep_starts = old.ids.copy(), old.starts.copy()
    moved = rng.choice(n_flows, int(rng.integers(0, n_flows + 1)), replace=False)
    same = bool(rng.integers(0, 2))
    new_rows = {int(i): rng.integers(0, n_links, len(rows[i]) if same else int(rng.integers(2, 7)))
                for i in moved}
    lengths = [len(new_rows[int(i)]) for i in moved]
    got = old.replace_many(moved, np.concatenate([new_rows[int(i)] for i in moved] or [[]]),
                           np.concatenate(([0], np.cumsum(lengths))).astype(np.int64))
    want = Placement.from_rows(index, flows, rate,
                               [new_rows.get(i, rows[i]) for i in range(n_flows)],
                               np.zeros(n_links))
    assert np.array_equal(got.ids, want.ids) and np.array_equal(got.starts, want.starts)
    assert np.allclose(got.pinned_bps, want.pinned_bps, rtol=1e-12, atol=1e-3)
    assert np.array_equal(got.owner, want.owner)
    assert np.array_equal(old.ids, keep_ids) and np.array_equal(old.starts, keep_starts)
