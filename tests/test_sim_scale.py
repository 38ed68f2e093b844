"""The flow-level comparison at scale: strategies by port tables, the splittable optimum, job
mixes, priorities and fairness (controller.sim.strategies/optimum/jobs/scale, fluid)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.sparse import csr_matrix

from controller.model import build_fat_tree, build_leaf_spine
from controller.sim.compare import ecmp_paths, static_paths
from controller.sim.fluid import prioritised_max_min_rates, simulate
from controller.sim.jobs import JobMix, intensity_priorities, jain_index, job_mix
from controller.sim.optimum import fluid_busbw_bound_bps, makespan_bound, min_time_s
from controller.sim.scale import ecmp_summary, evaluate_routing
from controller.sim.strategies import ClosRouter, spray_links, static_rows
from controller.te.collectives import FlowDemand
from controller.te.pathindex import PathIndex
from controller.te.patterns import (
    all_to_all,
    demand_rates_bps,
    pipeline,
    point_to_point,
    ring_allreduce,
    with_subflows,
)
from controller.te.placer import place
from controller.te.reroute import switch_links

G = 10**9


def _ring(f, seed=1, size=1e6):
    hs = [h.name for h in f.hosts]
    random.Random(seed).shuffle(hs)
    return ring_allreduce("ring", hs, size)


@pytest.mark.parametrize("down", ["none", "link", "agg"])
def test_static_equals_the_reference_and_ecmp_draws_candidates(down):
    f = build_fat_tree("ft", 8, G, G, 1.0, 1.0)
    dl = {"none": frozenset(), "link": frozenset({frozenset(("p0a0", "c1"))}),
          "agg": switch_links(f, "p0a0")}[down]
    idx = PathIndex(f, dl)
    ring = _ring(f)
    ref = static_paths(idx, ring.flows)
    got = static_rows(idx, ring.flows)
    assert all(np.array_equal(ref[d], got[d]) for d in ring.flows)
    draw = ClosRouter(idx, ring.flows).ecmp(3)
    for d in ring.flows:
        c = idx.candidates(d.src, d.dst)
        assert (c == draw[d]).all(axis=1).any()  # one of its candidates


def test_ecmp_draw_is_uniform_over_candidates():
    """Ideal hashing: each candidate equally likely (chi-square over many draws of one flow)."""
    f = build_fat_tree("ft", 4, G, G, 1.0, 1.0)
    idx = PathIndex(f)
    d = FlowDemand("x", 0, "h1", "h16")
    flows = [FlowDemand("x", i, "h1", "h16") for i in range(4000)]
    rows = ClosRouter(idx, flows).ecmp(7)
    c = idx.candidates(d.src, d.dst)
    counts = np.zeros(len(c))
    for r in rows.values():
        counts[np.flatnonzero((c == r).all(axis=1))[0]] += 1
    exp = len(flows) / len(c)
    chi2 = float(((counts - exp) ** 2 / exp).sum())
    assert chi2 < 16.3  # 3 degrees of freedom, p = 0.001


@pytest.mark.parametrize("down", ["none", "agg"])
def test_spraying_splits_evenly_and_conserves_each_flow(down):
    """Intact: the per-hop even split equals the even split over all candidates; always each
    flow's bytes leave its source once and reach its destination once (conservation)."""
    f = build_fat_tree("ft", 8, G, G, 1.0, 1.0)
    dl = switch_links(f, "p0a0") if down == "agg" else frozenset()
    idx = PathIndex(f, dl)
    ring = _ring(f, 4)
    ids, w = spray_links(idx, ring.flows)
    load = np.zeros(len(idx.links))
    load[ids] = w
    if down == "none":
        ref = np.zeros(len(idx.links))
        for d in ring.flows:
            c = idx.candidates(d.src, d.dst)
            np.add.at(ref, c.ravel(), 1.0 / c.shape[0])
        assert np.allclose(load, ref)
    tail, head, _, names = idx.link_ends()
    n_sw = len(f.switches)
    for sw in range(n_sw):  # flow conservation at every switch
        inflow = load[head == sw].sum()
        outflow = load[tail == sw].sum()
        assert inflow == pytest.approx(outflow)


def test_strict_priority_serves_the_higher_queue_first():
    """Two sessions on one unit link: priority 1 takes it all, priority 0 what is left; with
    a cap on the first the second gets the rest (strict priority, work-conserving)."""
    inc = csr_matrix(np.array([[1.0], [1.0]]))
    r = prioritised_max_min_rates(inc, np.array([1.0]), np.array([np.inf, np.inf]),
                                  np.array([1, 0]))
    assert np.allclose(r, [1.0, 0.0])
    r = prioritised_max_min_rates(inc, np.array([1.0]), np.array([0.25, np.inf]),
                                  np.array([1, 0]))
    assert np.allclose(r, [0.25, 0.75])


def test_a_starved_group_finishes_after_the_higher_priority():
    f = build_leaf_spine("ls", 1, 2, 2, G, G, 1.0, 1.0)
    idx = PathIndex(f)
    a = point_to_point("a", [("h1", "h3", 1e6)])
    b = point_to_point("b", [("h2", "h4", 1e6)])
    paths = {d: idx.candidates(d.src, d.dst)[0] for d in a.flows + b.flows}
    res = simulate(idx, [a, b], paths, priority={"a": 1, "b": 0})
    t = 1e6 * 8 / G
    assert res.cct_s["a"] == pytest.approx(t) and res.cct_s["b"] == pytest.approx(2 * t)


def test_jain_index_textbook_values():
    """Jain, Chiu & Hawe 1984: equal shares give 1, one of n gets everything gives 1/n."""
    assert jain_index([2.0, 2.0, 2.0]) == pytest.approx(1.0)
    assert jain_index([1.0, 1e-12, 1e-12, 1e-12]) == pytest.approx(0.25)
    with pytest.raises(ValueError):
        jain_index([])


def test_fluid_busbw_bound_of_the_main_fabric_with_a_spine_link_down():
    """The main experiment's fabric (2 spines, 4 leaves, 15 Mbit/s): intact, both rings can
    run at the link rate; with leaf1–spine1 down, leaf1's two outgoing ring flows share one
    uplink, so no routing gives more than 7.5 Mbit/s of busbw."""
    f = build_leaf_spine("ls", 2, 4, 2, 15 * 10**6, 15 * 10**6, 1.0, 1.0)
    rings = [["h1", "h3", "h5", "h7"], ["h2", "h4", "h6", "h8"]]
    assert fluid_busbw_bound_bps(f, rings) == pytest.approx(15e6)
    assert fluid_busbw_bound_bps(f, rings, [frozenset({"leaf1", "spine1"})]) \
        == pytest.approx(7.5e6)
    with pytest.raises(ValueError, match="at least 2 ranks"):
        fluid_busbw_bound_bps(f, [["h1"]])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6), st.sampled_from(["none", "link", "agg"]))
def test_no_routing_beats_the_splittable_optimum(seed, down):
    """T* is a lower bound: the fluid makespan of aifabric, ECMP, spraying and static is never
    below it; the cut bound never exceeds the LP (Raghavan & Thompson 1987: LP ≤ any routing)."""
    f = build_fat_tree("ft", 4, G, G, 1.0, 1.0)
    rng = random.Random(seed)
    dl = {"none": frozenset(), "link": frozenset({frozenset(("p0a0", "c1"))}),
          "agg": switch_links(f, "p0a1")}[down]
    idx = PathIndex(f, dl)
    hs = [h.name for h in f.hosts]
    rng.shuffle(hs)
    tr = [ring_allreduce("r", hs[:10], 1e6), all_to_all("a", hs[10:14], 4e5, coflow=True)]
    bound = makespan_bound(idx, tr)
    vol = {fl: 1.0 for t in tr for fl in t.flows}
    lp, m1 = min_time_s(idx, vol)
    cut, m2 = min_time_s(idx, vol, lp_max_variables=0)
    assert (m1, m2) == ("lp", "cut") and cut <= lp + 1e-9
    rates = demand_rates_bps(f, tr)
    pin = place(f, rates, index=idx)
    assert pin.placement is not None
    paths = {d: pin.placement.links(i) for i, d in enumerate(pin.placement.flows)}
    ideal = {t.name: 1.0 for t in tr}
    rows = [evaluate_routing(idx, tr, bound, ideal, paths=paths),
            evaluate_routing(idx, tr, bound, ideal, paths=ClosRouter(idx, [
                d for t in tr for d in t.flows]).static())]
    rows += list(ecmp_summary(idx, tr, bound, ideal, [0, 1])[:2])
    for r in rows:
        assert r.vs_optimum >= 1 - 1e-9


def test_subflows_and_patterns():
    f = build_fat_tree("ft", 4, G, G, 1.0, 1.0)
    r = ring_allreduce("r", ["h1", "h5", "h9"], 3e6)
    s = with_subflows(r, 3)
    assert len(s.flows) == 9 and len(s.phases[0]) == 3
    assert s.phases[0][0].bytes_per_flow == pytest.approx(r.phases[0][0].bytes_per_flow / 3)
    assert {d.subflow for d in s.phases[0][2].flows} == {2}
    rates = demand_rates_bps(f, [s])
    assert set(rates.values()) == {G / 3}
    p = pipeline("p", [["h1", "h2"], ["h5", "h6"], ["h9", "h10"]], 1e6)
    assert [(d.src, d.dst) for d in p.flows] == [("h1", "h5"), ("h2", "h6"), ("h5", "h9"),
                                                 ("h6", "h10")]
    with pytest.raises(ValueError, match="equal size"):
        pipeline("p", [["h1"], ["h2", "h3"]], 1.0)
    a = all_to_all("a", ["h1", "h2", "h3"], 3e6, coflow=True)
    assert len(a.phases[0]) == 1 and len(a.flows) == 6
    with pytest.raises(ValueError, match="itself"):
        point_to_point("x", [("h1", "h1", 1.0)])


def test_job_mix_and_intensity_priorities():
    """The mix places every job on distinct hosts; more GPU-intense jobs (more computation per
    second of traffic on their busiest link; Crux, SIGCOMM 2024, Def. 2) get higher queues,
    never more than the queues given."""
    f = build_fat_tree("ft", 8, G, G, 1.0, 1.0)
    mix = JobMix(2, 32, 1e6, 16, 1e6, 2, 2, 8, 1e6)
    tr = job_mix(f, mix, seed=1)
    hosts = [{d.src for d in t.flows} | {d.dst for d in t.flows} for t in tr]
    assert sum(map(len, hosts)) == len(set().union(*hosts)) == mix.hosts_needed
    idx = PathIndex(f)
    pin = place(f, demand_rates_bps(f, tr), index=idx)
    assert pin.placement is not None
    paths = {d: pin.placement.links(i) for i, d in enumerate(pin.placement.flows)}
    compute = {t.name: float(i + 1) for i, t in enumerate(tr)}
    prio = intensity_priorities(idx, tr, paths, compute, queues=3)
    assert set(prio.values()) <= {0, 1, 2} and len(prio) == len(tr)
    # the same traffic with more computation is never in a lower queue
    more = dict(compute, dp0=1e6)
    assert intensity_priorities(idx, tr, paths, more, queues=3)["dp0"] == 2
    with pytest.raises(ValueError, match="1..8"):
        intensity_priorities(idx, tr, paths, compute, queues=9)
    with pytest.raises(ValueError, match="needs"):
        job_mix(f, JobMix(10, 32, 1, 0, 1, 0, 2, 1, 1))


def test_ecmp_rows_fall_back_on_fabrics_that_are_not_clos():
    from controller.model import load_topology
    from controller.sim.strategies import ecmp_rows
    from tests.conftest import ROOT

    f = load_topology(ROOT / "mininet_labs" / "topologies" / "two_dc.yaml")
    idx = PathIndex(f)
    flows = [FlowDemand("x", 0, "h1", "h3")]  # within one site
    assert np.array_equal(ecmp_rows(idx, flows, 2)[flows[0]], ecmp_paths(idx, flows, 2)[flows[0]])
