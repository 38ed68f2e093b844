"""Two-phase failure handling (controller.te.recovery) and the Placement value it works on."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest

from controller.model import build_fat_tree, build_leaf_spine
from controller.te.collectives import FlowDemand
from controller.te.pathindex import PathIndex
from controller.te.placement import Placement
from controller.te.placer import place
from controller.te.recovery import order_moves, reoptimise, repair, restore
from controller.te.reroute import switch_links

G = 10**9


def _ring_plan(seed: int = 1, k: int = 8):
    f = build_fat_tree("ft", k, G, G, 1.0, 1.0)
    hs = [h.name for h in f.hosts]
    random.Random(seed).shuffle(hs)
    ds = {FlowDemand("r", i, hs[i], hs[(i + 1) % len(hs)]): 1e9 for i in range(len(hs))}
    idx = PathIndex(f)
    return f, ds, idx, place(f, ds, index=idx)


def _uses(path, link) -> bool:
    a, b = sorted(link)
    return any({u, v} == {a, b} for u, v in zip(path, path[1:], strict=False))


def test_placement_round_trips_paths_and_loads():
    f, ds, idx, pin = _ring_plan()
    p = pin.placement
    assert p is not None
    assert p.paths() == dict(pin.paths)
    assert p.link_load() == pytest.approx(dict(pin.link_load_bps))
    again = Placement.from_paths(idx, pin.paths, ds)
    assert np.array_equal(again.ids, p.ids) and np.array_equal(again.starts, p.starts)
    d0 = p.flows[3]
    other = idx.link_ids(pin.paths[p.flows[4]])  # any valid row
    q = p.replace({3: other})
    assert q.path(3) == idx.path_of(other) and q.paths(range(4)) == {
        d: (idx.path_of(other) if d == d0 else pin.paths[d]) for d in p.flows[:4]}
    assert p.path(3) == pin.paths[d0]  # the original is unchanged (immutable value)


def _fresh(p: Placement) -> Placement:
    return Placement(p.index, p.flows, p.rate_bps, p.ids, p.starts, p.base_bps)


def test_carried_caches_equal_recomputed_ones_through_repair_reoptimise_restore():
    """replace() carries ``owner`` and ``pinned_bps`` over (updated by the moved flows only):
    after a chain of events they equal what a placement built from the same arrays computes."""
    f, ds, idx, pin = _ring_plan(seed=3)
    p = pin.placement
    assert p is not None
    _ = p.pinned_bps
    rep = repair(p, [frozenset(("p0a0", "c1"))])
    ro = reoptimise(rep.placement)
    rep2 = repair(ro.placement, switch_links(f, "p1a1"))
    back = restore(rep2.placement, [frozenset(("p0a0", "c1"))])
    for q in (rep.placement, ro.placement, rep2.placement, back):
        ref = _fresh(q)
        assert np.array_equal(q.owner, ref.owner)
        assert np.allclose(q.pinned_bps, ref.pinned_bps, rtol=0, atol=1e-3)
        assert np.allclose(q.load_bps(), ref.load_bps(), rtol=0, atol=1e-3)
    assert len(ro.moves) > 0 or len(rep.moves) > 0


@pytest.mark.parametrize("which", ["link", "agg"])
def test_repair_moves_exactly_the_flows_on_dead_links(which):
    f, ds, idx, pin = _ring_plan()
    down = (frozenset({frozenset(("p0a0", "c1"))}) if which == "link"
            else switch_links(f, "p0a0"))
    res = repair(pin.placement, down)
    hit = {d for d, p in pin.paths.items() if any(_uses(p, ln) for ln in down)}
    assert set(res.moved) == hit and hit
    new = res.placement.paths()
    for d, p in pin.paths.items():
        if d not in hit:
            assert new[d] == p
        assert not any(_uses(new[d], ln) for ln in down)
    for m in res.moves:
        assert m.old_path == pin.paths[m.flow] and m.new_path == new[m.flow]
    assert res.max_utilisation_after >= res.lower_bound - 1e-9
    assert res.placement.index.down == frozenset(down)


def _applied_peak(placement, moves_rows, order):
    """Largest utilisation after each prefix of the moves (the make-before-break property)."""
    load = placement.load_bps().copy()
    cap = placement.index.capacity_bps
    peaks = []
    for i in order:
        np.subtract.at(load, placement.links(i), placement.rate_bps[i])
        np.add.at(load, moves_rows[i], placement.rate_bps[i])
        peaks.append(float((load / cap)[placement.index.is_up].max()))
    return peaks


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_reoptimise_reaches_the_lower_bound_and_orders_moves(seed):
    """After a repair leaves two flows on one link, the re-optimisation brings the maximum
    utilisation to its lower bound (1.0 here: a k=8 ring with one aggregation–core link down),
    moves only flows whose path changes, and applying its moves in order never takes a link
    above max(before, after) — so each move can be made before the old path is broken."""
    f, ds, idx, pin = _ring_plan(seed)
    rep = repair(pin.placement, frozenset({frozenset(("p0a0", "c1"))}))
    res = reoptimise(rep.placement)
    assert res.converged and res.max_utilisation_after <= res.lower_bound + 1e-9
    assert res.max_utilisation_after <= res.max_utilisation_before + 1e-9
    before = rep.placement.paths()
    after = res.placement.paths()
    changed = {d for d in before if before[d] != after[d]}
    assert {m.flow for m in res.moves} == changed
    pos = rep.placement.pos
    rows = {pos[m.flow]: idx.link_ids(m.new_path) for m in res.moves}
    peaks = _applied_peak(rep.placement, rows, [pos[m.flow] for m in res.moves])
    limit = max(res.max_utilisation_before, res.max_utilisation_after) + 1e-9
    assert all(p <= limit for p in peaks)
    assert res.transient_max_utilisation <= limit


def test_reoptimise_of_an_optimal_placement_moves_nothing():
    f, ds, idx, pin = _ring_plan(4)
    res = reoptimise(pin.placement)
    assert res.moves == () and res.converged and res.placement.paths() == dict(pin.paths)


def test_order_moves_breaks_a_swap_cycle_at_the_lowest_peak():
    """Two flows swapping spines: whichever moves first shares a spine with the other for a
    moment; the order reports that transient (2 flows on one link)."""
    f = build_leaf_spine("ls", 2, 2, 2, G, G, 1.0, 1.0)
    idx = PathIndex(f)
    a, b = FlowDemand("x", 0, "h1", "h3"), FlowDemand("x", 1, "h2", "h4")
    paths = {a: ("h1", "leaf1", "spine1", "leaf2", "h3"), b: ("h2", "leaf1", "spine2", "leaf2", "h4")}
    p = Placement.from_paths(idx, paths, {a: 1e9, b: 1e9})
    rows = {0: idx.link_ids(paths[b][:2] + ("spine2",) + paths[a][3:]).copy(),
            1: idx.link_ids(("h2", "leaf1", "spine1", "leaf2", "h4"))}
    rows[0] = idx.link_ids(("h1", "leaf1", "spine2", "leaf2", "h3"))
    order, transient = order_moves(p, rows)
    assert sorted(order) == [0, 1] and transient == pytest.approx(2.0)


def test_restore_keeps_paths_and_brings_the_link_back():
    f, ds, idx, pin = _ring_plan()
    down = frozenset({frozenset(("p0a0", "c1"))})
    rep = repair(pin.placement, down)
    back = restore(rep.placement, down)
    assert back.paths() == rep.placement.paths() and back.index.down == frozenset()
    with pytest.raises(ValueError, match="not down"):
        restore(back, down)


def test_repair_and_reoptimise_are_safe_in_threads():
    """Both are pure over immutable values and the index caches fill under a lock: run at
    the same time from several threads they give what they give one at a time."""
    f, ds, idx, pin = _ring_plan(2)
    downs = [frozenset({frozenset((f"p{p}a0", "c1"))}) for p in range(4)]
    alone = [repair(pin.placement, d).placement.paths() for d in downs]
    opt = reoptimise(repair(pin.placement, downs[0]).placement).placement.paths()
    got: dict[int, object] = {}

    def work(i: int) -> None:
        if i < len(downs):
            got[i] = repair(pin.placement, downs[i]).placement.paths()
        else:
            got[i] = reoptimise(repair(pin.placement, downs[0]).placement).placement.paths()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(downs) + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[i] for i in range(len(downs))] == alone and got[len(downs)] == opt


def test_repair_of_a_flow_without_a_path_names_it():
    f = build_leaf_spine("ls", 1, 2, 1, G, G, 1.0, 1.0)
    d = FlowDemand("x", 0, "h1", "h2")
    idx = PathIndex(f)
    pin = place(f, {d: 1e9}, index=idx)
    with pytest.raises(ValueError, match="x h1->h2"):
        repair(pin.placement, frozenset({frozenset(("leaf1", "spine1"))}))
