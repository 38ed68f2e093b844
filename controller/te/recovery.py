"""Two-phase failure handling for pinned flows: an immediate repair, then a background
re-optimisation applied make-before-break.

How the runtime uses it (pure functions of values; no clock, no I/O, no shared mutable state,
so both may run in a worker thread while the event loop keeps going):

1. Keep the current :class:`~controller.te.placement.Placement` (``controller.te.placer.place(...).placement``
   after planning; every call below returns the next one).
2. **Port or switch down** → call :func:`repair` *on the event loop* with the links now down
   (a switch: :func:`controller.te.reroute.switch_links`). Only flows whose path crossed a dead
   link move (one path per flow: ≤ 30 ms of CPU on a k = 32 fat-tree, ≤ 100 ms at 65,536
   GPUs; with 12 sub-flows per flow under 200 ms there, bench/te_scale.py and docs/te-at-scale.md); their
   old paths are dead, so program ``moves`` at once (order does not matter) and adopt
   ``result.placement``. The repaired placement may be worse than the fabric allows (two flows
   on one link where a re-arrangement would give each its own).
3. Then submit :func:`reoptimise` of that placement to a worker thread (e.g.
   ``loop.run_in_executor``), ``search_budget`` bounding its local search. It moves as few
   flows as it can to reach the lower bound (or ``target``); a k = 32 ring after one link
   failure converges in under a second of CPU. When it returns, check that the placement it
   started from is still the current one (no event arrived meanwhile; otherwise drop the
   result and re-submit from the new current placement), then apply ``result.moves`` **in
   order**, each make-before-break: (a) add the new path's entries on every switch after the
   switch where old and new path diverge, downstream first; (b) replace the entry at the
   divergence switch (traffic shifts atomically there); (c) delete the old path's entries after
   the divergence switch. The order is chosen so that after every completed move no link
   exceeds ``max(max_utilisation_before, max_utilisation_after)``
   (``transient_max_utilisation`` says what the order achieved). Adopt ``result.placement``
   once all moves are applied.
4. **Port up** → :func:`restore` (no flow moves; the capacity is back) and re-optimise as in 3.

Table capacity: during a move both paths' entries exist on the switches after the divergence
point, one extra entry per switch per move in flight: apply moves one (or a bounded batch) at a
time, as :mod:`controller.plan.capacity` reserves that headroom.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import numpy as np

from controller.te.bounds import load_lower_bound
from controller.te.clos import ClosTables
from controller.te.closcolour import colour_clos
from controller.te.collectives import FlowDemand
from controller.te.greedy import greedy
from controller.te.loadstate import LoadState
from controller.te.localsearch import DEFAULT_CHAIN_DEPTH, local_search
from controller.te.pathindex import Path, PathIndex
from controller.te.placement import Placement, concat_ranges

REPAIR_BUDGET = 20_000
"""Candidate evaluations the repair's local search may spend (bounds its time)."""
REOPTIMISE_BUDGET = 1_000_000
"""Candidate evaluations a re-optimisation may spend by default."""
QUICK_BUDGET = 200_000
"""Candidate evaluations of the first, local-search-only pass of :func:`reoptimise`."""
RECOLOUR_MAX_FLOWS = 200_000
"""Above this many flows in the class, :func:`reoptimise` re-colours only whole flows (sub-flows
of one flow together; the Kempe insertions over 786,432 sub-flows of a k = 64 ring with 12 per
flow took minutes)."""
_EPS = 1e-9


class Move(NamedTuple):
    """One flow changing path: ``old_path`` → ``new_path`` (node tuples, host … host). A named
    tuple: a repair at 65,536 GPUs makes tens of thousands of them."""

    flow: FlowDemand
    old_path: Path
    new_path: Path

    @property
    def divergence(self) -> int:
        """Index in the paths of the last node they share before they part (the switch whose
        entry switches the flow; 0 when they differ from the first hop)."""
        k = 0
        for a, b in zip(self.old_path, self.new_path, strict=False):
            if a != b:
                break
            k += 1
        return max(k - 1, 0)


_new_move = partial(tuple.__new__, Move)
"""Move from a (flow, old_path, new_path) tuple, as ``Move._make`` does, without a Python call
per move (a repair at 65,536 GPUs makes tens of thousands)."""


@dataclass(frozen=True)
class RepairResult:
    """What :func:`repair` did.

    Attributes
    ----------
    placement : Placement
        Every flow's path on the failed fabric state (moved or not).
    moves : tuple of Move
        The flows that crossed a dead link, with their old and new paths, in placement order.
    max_utilisation_before : float
        Of the old paths on the links still up.
    max_utilisation_after : float
    lower_bound : float
        No pinning of the moved flows around the others does better.
    """

    placement: Placement
    moves: tuple[Move, ...]
    max_utilisation_before: float
    max_utilisation_after: float
    lower_bound: float

    @property
    def moved(self) -> tuple[FlowDemand, ...]:
        return tuple(m.flow for m in self.moves)


@dataclass(frozen=True)
class ReoptResult:
    """What :func:`reoptimise` found.

    Attributes
    ----------
    placement : Placement
        The re-optimised placement (the input's when nothing moved).
    moves : tuple of Move
        Flows to move, in the make-before-break order of :func:`order_moves`.
    max_utilisation_before, max_utilisation_after : float
    lower_bound : float
        The pigeonhole/cut lower bound of :func:`controller.te.bounds.load_lower_bound`.
    converged : bool
        ``max_utilisation_after`` reached ``max(lower_bound, target)``.
    transient_max_utilisation : float
        The largest link utilisation after any prefix of ``moves`` (≤ max(before, after) when the
        order kept every step within it).
    evaluations : int
        Candidate paths evaluated (the work done).
    """

    placement: Placement
    moves: tuple[Move, ...]
    max_utilisation_before: float
    max_utilisation_after: float
    lower_bound: float
    converged: bool
    transient_max_utilisation: float
    evaluations: int


def _state(placement: Placement, index: PathIndex, flows: np.ndarray,
           base_bps: np.ndarray) -> LoadState:
    """A LoadState over ``index`` with ``flows`` (positions in ``placement``) added, unplaced:
    their hosts read off their paths' access links (:meth:`LoadState.add_routed`)."""
    state = LoadState(index, base_bps)
    starts = placement.starts
    state.add_routed(list(map(placement.flows.__getitem__, flows.tolist())),
                     placement.rate_bps[flows],
                     placement.ids[starts[flows]], placement.ids[starts[flows + 1] - 1])
    return state


def _inner(placement: Placement, flows: np.ndarray) -> list[np.ndarray]:
    return [placement.ids[placement.starts[i] + 1:placement.starts[i + 1] - 1]
            for i in flows.tolist()]


def repair(placement: Placement, down_links: Iterable[frozenset[str]], *,
           search_budget: int = REPAIR_BUDGET) -> RepairResult:
    """Move the flows whose path crosses a link now down, and nothing else.

    Parameters
    ----------
    placement : Placement
        The current placement (on the fabric state before this event).
    down_links : iterable of frozenset of str
        Links that went down (``frozenset({u, v})``; a failed switch:
        :func:`controller.te.reroute.switch_links`), added to those already down.
    search_budget : int
        Candidate evaluations the local search over the moved flows may spend.

    Returns
    -------
    RepairResult

    Raises
    ------
    ValueError
        A down link is unknown, or a flow that must move has no path left (the message names
        it; the caller keeps the old placement and reports the flow as unroutable).

    Notes
    -----
    Cost: the failed state is derived from the placement's index (:meth:`PathIndex.with_down`,
    a mask); the hit flows are one boolean gather over the concatenated link ids; the load of
    the others one ``bincount``; then greedy and a bounded local search over the hit flows only
    (:class:`controller.te.loadstate.LoadState`, their hosts read off their access links,
    :meth:`~controller.te.loadstate.LoadState.add_routed`), whose candidates are the only ones
    built; the new rows go in as one CSR block (:meth:`Placement.replace_many`) and the moves'
    node paths are built per path length (:func:`controller.te.placement.csr_paths`). No step
    loops over the moved flows in Python (24,473 sub-flows on the 65,536-GPU rail fabric).
    """
    idx = placement.index.with_down(down_links)
    dead = ~idx.is_up[placement.ids]
    hit = np.unique(placement.owner[dead])
    n = len(idx.links)
    before = placement.load_bps() / idx.capacity_bps
    fixed = placement.base_bps + placement.pinned_bps
    if len(hit):
        hops = np.diff(placement.starts)[hit]
        hit_ids = placement.ids[concat_ranges(placement.starts[hit], hops)]
        hit_w = np.repeat(placement.rate_bps[hit], hops)
        fixed = np.maximum(fixed - np.bincount(hit_ids, weights=hit_w, minlength=n), 0.0)
    state = _state(placement, idx, hit, fixed)
    greedy(state, range(len(state.flows)))
    lower = load_lower_bound(state)
    local_search(state, lower, search_budget)
    new = placement.replace_many(hit, *state.link_rows(), index=idx)
    moves = tuple(map(_new_move, zip(state.flows, placement.path_list(hit), new.path_list(hit),
                                     strict=True)))
    return RepairResult(new, moves, float(before[idx.is_up].max(initial=0.0)),
                        state.max_utilisation(), lower)


def restore(placement: Placement, up_links: Iterable[frozenset[str]]) -> Placement:
    """The same paths on the fabric state with ``up_links`` back up (nothing moves; follow with
    :func:`reoptimise` to use the capacity). Raises ValueError for a link that is not down."""
    return placement.replace({}, index=placement.index.with_up(up_links))


def reoptimise(
    placement: Placement,
    *,
    target: float = 0.0,
    search_budget: int = REOPTIMISE_BUDGET,
    movable: Iterable[FlowDemand] | None = None,
    chain_depth: int = DEFAULT_CHAIN_DEPTH,
) -> ReoptResult:
    """Re-arrange the fewest flows that bring the maximum utilisation down to the lower bound.

    Parameters
    ----------
    placement : Placement
        The current placement (e.g. :attr:`RepairResult.placement`).
    target : float
        Stop as soon as the maximum utilisation is at most ``max(lower bound, target)`` (e.g.
        1.05 × the splittable optimum of :mod:`controller.sim.optimum` when the caller has it).
    search_budget : int
        Candidate evaluations the local search may spend (bounds the time: ~1 µs each).
    movable : iterable of FlowDemand, optional
        Only these flows may move (default: all).
    chain_depth : int
        Longest ejection chain (:func:`controller.te.localsearch.local_search`).

    Returns
    -------
    ReoptResult
        ``moves`` in make-before-break order (module docstring, step 3).

    Notes
    -----
    Three steps, each only when the one before left the maximum above the goal:

    1. local search from the placement as it is (``QUICK_BUDGET`` evaluations): single moves
       and ejection chains (Glover, Discrete Appl. Math. 65, 1996, §2;
       :mod:`controller.te.localsearch`) of flows on links at the maximum — the fewest moves;
    2. re-colouring of the largest equal-demand class (a mirrored Clos) starting from its
       current ports, then, if that is not enough, from scratch (:func:`_recolour`): on a
       full fabric a re-arrangement needs alternating (Kempe) paths through many switches,
       which local moves rarely find — a k = 32 ring with one aggregation–core link down
       moves ~800 of 8,192 flows to get from 2.0 back to 1.0;
    3. local search again with the budget left.

    Deterministic.
    """
    allf = np.arange(len(placement.flows), dtype=np.int64)
    state = _state(placement, placement.index, allf, placement.base_bps)
    state.place_rows(allf, _inner(placement, allf))
    u0 = state.max_utilisation()
    lower = load_lower_bound(state)
    goal = max(lower, target)
    allowed = None if movable is None else {state.pos[d] for d in movable if d in state.pos}
    quick = min(search_budget, QUICK_BUDGET)
    local_search(state, goal, quick, allowed, chain_depth)
    if state.max_utilisation() > goal + _EPS and movable is None:
        _recolour(state, goal, allowed, chain_depth)
        local_search(state, goal, max(search_budget - state.evaluations, 0), allowed,
                     chain_depth)
    after = state.max_utilisation()
    changed = _changed_flows(state, placement)
    rows = {i: state.links_of(i) for i in changed}
    new = placement.replace(rows)
    order, transient = order_moves(placement, rows)
    old_paths = placement.paths(order)
    new_paths = new.paths(order)
    moves = tuple(Move(placement.flows[i], old_paths[placement.flows[i]],
                       new_paths[placement.flows[i]]) for i in order)
    return ReoptResult(new, moves, u0, after, lower, after <= goal + _EPS, transient,
                       state.evaluations)


def _changed_flows(state: LoadState, placement: Placement) -> list[int]:
    """Positions of the flows whose path in ``state`` differs from ``placement``'s, ascending:
    compared per path length in one array operation each (not one comparison per flow)."""
    rows = state.rows
    n = len(rows)
    lens = np.fromiter((len(r) if r is not None else -1 for r in rows), np.int64, count=n)
    old_lens = np.diff(placement.starts) - 2  # inner links: without the two access links
    out = [np.flatnonzero(lens != old_lens)]
    for length in np.unique(lens[lens == old_lens]).tolist():
        sel = np.flatnonzero((lens == old_lens) & (lens == length))
        if length == 0 or not len(sel):
            continue
        new = np.stack([rows[i] for i in sel.tolist()])  # type: ignore[misc]
        old = placement.ids[placement.starts[sel][:, None] + 1 + np.arange(length)]
        out.append(sel[(new != old).any(axis=1)])
    return sorted(np.concatenate(out).tolist())


def _recolour(state: LoadState, goal: float, movable: set[int] | None = None,
              chain_depth: int = DEFAULT_CHAIN_DEPTH) -> None:
    """Re-colour the equal-demand class with the largest total demand (mirrored Clos fabrics
    only; elsewhere nothing).

    Attempts, in turn, until the maximum utilisation reaches ``goal``:

    1. for sub-flows, **layer by layer** (:func:`_layers`): the sub-flows numbered j of every
       flow, coloured from their current ports around the load of all the others, then local
       search (``QUICK_BUDGET``, only ``movable`` flows, chains of ``chain_depth``) for the
       few links that may be left;
    2. the whole class from its current paths (:func:`controller.te.closcolour.colour_clos`
       with ``initial``: only the flows the Kempe insertions and next-level swaps must move
       change path);
    3. for sub-flows, as whole flows (every sub-flow of a flow on the flow's one coloured path:
       the one-path optimum);
    4. from scratch, which moves more flows but succeeds where an insertion into the current
       colouring found no alternating path.

    Above ``RECOLOUR_MAX_FLOWS`` flows only 1 and 3 run (2 and 4 would take minutes). Each
    attempt is kept only when it lowers the maximum utilisation (else every flow goes back).
    """
    t = state.tables
    if t is None or not state.flows:
        return
    rates = np.asarray(state.rate_bps, dtype=np.float64)
    _, inverse = np.unique(rates, return_inverse=True)
    inverse = inverse.ravel()
    total = np.bincount(inverse, weights=rates)
    flows = np.flatnonzero(inverse == int(np.argmax(total)))
    u, v, h = state.ends(flows)
    key = np.asarray([state.flows[i].subflow for i in flows.tolist()], dtype=np.int64)
    parent = [state.flows[i].parent for i in flows.tolist()]
    split = key.max(initial=0) > 0
    attempts = (["layers"] if split else []) + ["current"] + (["whole flows"] if split else []) \
        + ["fresh"]
    if len(flows) > RECOLOUR_MAX_FLOWS:  # the Kempe insertions would take minutes
        attempts = [a for a in attempts if a in ("layers", "whole flows")]
    for attempt in attempts:
        if state.max_utilisation() <= goal + _EPS:
            return
        init = _columns(state, t, flows, h)
        if attempt == "layers":  # then local moves for what the layers left (a few links)
            _layers(state, t, flows, (u, v, h), key, init, goal)
            local_search(state, goal, QUICK_BUDGET, movable, chain_depth)
            continue
        if attempt == "whole flows":  # sub-flows of one flow on its one coloured path
            first: dict[tuple[str, int, str, str], int] = {}
            for j, pa in enumerate(parent):
                first.setdefault(pa, j)
            lead = np.asarray(sorted(first.values()), dtype=np.int64)
            one = colour_clos(t, u[lead], v[lead], h[lead])
            seq = np.full_like(init, -1)
            row_of = {int(j): one[k] for k, j in enumerate(lead.tolist())}
            for j, pa in enumerate(parent):
                seq[j, :one.shape[1]] = row_of[first[pa]][:seq.shape[1]]
        else:
            seq = colour_clos(t, u, v, h, key, initial=None if attempt == "fresh" else init)
        before = state.max_utilisation()
        old = _adopt(state, t, flows, (u, v, h), seq, init)
        if old is not None and state.max_utilisation() >= before - _EPS:  # no better
            _undo(state, old)


def _columns(state: LoadState, t: ClosTables, flows: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Current up-port columns of ``flows`` (F × max(1, max h)), -1 where a flow's path is not
    a full climb to its meeting height (e.g. not placed)."""
    init = np.full((len(flows), max(int(h.max(initial=0)), 1)), -1, dtype=np.int64)
    cur = [state.rows[i] for i in flows.tolist()]
    lens = np.fromiter((len(r) if r is not None else -1 for r in cur), np.int64, count=len(cur))
    for hh in np.unique(h[h > 0]).tolist():  # one gather per height, not one per flow
        sel = np.flatnonzero((h == hh) & (lens == 2 * hh))
        if len(sel):
            init[sel, :hh] = t.columns(np.stack([cur[j] for j in sel.tolist()]))
    return init


def _excess(state: LoadState, goal: float) -> float:
    """Σ over links of the load above ``goal`` × capacity, bits/s."""
    over = state.load_bps - goal * state.index.capacity_bps
    return float(over[over > _EPS * state.index.capacity_bps].sum())


def _adopt(state: LoadState, t: ClosTables, flows: np.ndarray,
           ends: tuple[np.ndarray, np.ndarray, np.ndarray], seq: np.ndarray,
           init: np.ndarray) -> dict[int, int] | None:
    """Move ``flows`` to the columns ``seq`` (rows of -1: re-placed by the greedy). Returns
    the candidate row every moved flow was on (for :func:`_undo`), None when nothing moved."""
    u, v, h = ends
    ok = (seq[:, 0] >= 0) & (h > 0)
    changed = np.flatnonzero(ok & (seq != init).any(axis=1))
    left = np.flatnonzero(~ok & (h > 0))  # uncoloured: re-placed by the greedy
    if not len(changed):
        return None
    moving = np.concatenate((changed, left))
    old = {int(flows[j]): state.current(int(flows[j])) for j in moving.tolist()}
    for i in old:
        state.remove(i)
    for r in np.unique(h[changed]).tolist():
        sel = changed[h[changed] == r]
        state.place_rows(flows[sel], t.walk(u[sel], v[sel], seq[sel, :r]))
    greedy(state, flows[left].tolist())
    return old


def _undo(state: LoadState, old: dict[int, int]) -> None:
    """Put the flows of ``old`` (an :func:`_adopt` result) back on their candidate rows."""
    for i, ci in old.items():
        state.remove(i)
        state.place(i, ci)


def _layers(state: LoadState, t: ClosTables, flows: np.ndarray,
            ends: tuple[np.ndarray, np.ndarray, np.ndarray], key: np.ndarray,
            init: np.ndarray, goal: float) -> None:
    """Re-colour the sub-flows one layer at a time: layer j is sub-flow j of every flow.

    The planner colours sub-flow j of every flow as a copy of its own wherever the sub-flows fit
    (:func:`controller.te.closcolour._copies`), so each layer is a proper colouring: no link
    carries two sub-flows of one layer, and a link carries at most one sub-flow per layer. A
    repair breaks that only for the layers of the sub-flows it moved: a link above ``goal``
    then holds two of one layer. Every layer with two sub-flows on a link is re-coloured from
    its current ports
    (:func:`colour_clos` with ``initial``: Kempe insertions and next-level swaps, as for one
    path per flow), with ``blocked`` the links where the load of other classes, of the layers
    left as they are and one sub-flow of each other re-coloured layer present leaves no room
    for one of this layer; when that still
    leaves two of the layer on a link above ``goal`` (the next-level swaps found no component
    that frees a port of an aggregation switch that lost a core link), the layer is coloured
    afresh (Euler splitting; it moves most of the layer's sub-flows). When every layer
    is proper again, no link carries more than it did in the plan. The layers are kept together
    when they lower the maximum utilisation, or keep it and lower the load above ``goal``
    (:func:`_excess`); else every flow goes back. Cost: one :func:`colour_clos` of F / n flows
    per broken layer, instead of one of all F sub-flows (minutes at 786,432).
    """
    u, v, h = ends
    n = len(state.index.links)
    cap = state.index.capacity_bps
    w = float(state.rate_bps[int(flows[0])])
    n_layers = int(key.max()) + 1

    def layer_counts(fl: np.ndarray, layer_of: np.ndarray) -> np.ndarray:
        rows = [state.rows[i] for i in fl.tolist()]
        lengths = np.fromiter((len(r) if r is not None else 0 for r in rows), np.int64,
                              count=len(rows))
        ids = np.concatenate([r for r in rows if r is not None and len(r)]
                             or [np.empty(0, np.int64)]).astype(np.int64)
        return np.bincount(ids * n_layers + np.repeat(layer_of, lengths),
                           minlength=n * n_layers).reshape(n, n_layers)

    count = layer_counts(flows, key)
    rest = state.load_bps - w * count.sum(axis=1)  # load of everything else
    hot = state.util > goal + _EPS
    if not (count[hot] >= 2).any():
        return
    broken = np.flatnonzero((count >= 2).any(axis=0))  # all will be proper: count them once
    kept = np.setdiff1d(np.arange(n_layers), broken)
    before, over = state.max_utilisation(), _excess(state, goal)
    done: list[dict[int, int]] = []
    for layer in broken.tolist():
        sel = np.flatnonzero(key == layer)
        own = count[:, layer]
        others = rest + w * ((count[:, broken] > 0).sum(axis=1) - (own > 0)
                             + count[:, kept].sum(axis=1))
        blocked = others + w > (goal + _EPS) * cap
        for start in (init[sel], None):  # from its current ports; else afresh
            seq = colour_clos(t, u[sel], v[sel], h[sel], initial=start, blocked=blocked)
            old = _adopt(state, t, flows[sel], (u[sel], v[sel], h[sel]), seq, init[sel])
            if old is None:
                break
            mine = layer_counts(flows[sel], key[sel])[:, layer]
            if start is None or not ((mine >= 2) & (state.util > goal + _EPS)).any():
                done.append(old)
                count[:, layer] = mine
                break
            _undo(state, old)  # still two of the layer on a link above goal
    after = state.max_utilisation()
    if after < before - _EPS or (after <= before + _EPS
                                 and _excess(state, goal) < over * (1 - 1e-12)):
        return
    for old in reversed(done):
        _undo(state, old)


def order_moves(placement: Placement, rows: Mapping[int, np.ndarray]) -> tuple[list[int], float]:
    """An order of the path changes ``rows`` (flow position → new link ids) in which no link
    exceeds ``bound = max(max utilisation before, after)`` once a move is complete.

    Greedy: repeatedly apply a pending move whose new path stays within the bound given the
    moves applied so far (the flow leaves its old path in the same step); when none does
    (a cyclic dependency), apply the one whose new path's peak is lowest.

    Returns
    -------
    (list of int, float)
        The flow positions in order, and the largest utilisation after any prefix.
    """
    if not rows:
        return [], placement.max_utilisation()
    cap = placement.index.capacity_bps
    load = placement.load_bps().copy()
    after = load.copy()
    for i, r in rows.items():
        np.subtract.at(after, placement.links(i), placement.rate_bps[i])
        np.add.at(after, r, placement.rate_bps[i])
    up = placement.index.is_up
    bound = max(float((load / cap)[up].max(initial=0.0)), float((after / cap)[up].max(initial=0.0)))
    pending = dict(rows)
    order: list[int] = []
    worst = -1.0
    while pending:
        best, best_peak = -1, np.inf
        for i, r in pending.items():
            w = placement.rate_bps[i]
            trial = load[r] + w
            old = placement.links(i)
            overlap = (r[:, None] == old[None, :]).any(axis=1)  # paths are a few links long
            trial[overlap] -= w
            peak = float((trial / cap[r]).max(initial=0.0))
            if peak <= bound + _EPS:
                best, best_peak = i, peak
                break
            if peak < best_peak:
                best, best_peak = i, peak
        r = pending.pop(best)
        np.subtract.at(load, placement.links(best), placement.rate_bps[best])
        np.add.at(load, r, placement.rate_bps[best])
        if worst < 0:  # after the first move: every link once
            worst = float((load / cap)[up].max(initial=0.0))
        else:  # later: only links this move loaded can exceed the running maximum
            r_up = r[up[r]]
            worst = max(worst, float((load[r_up] / cap[r_up]).max(initial=0.0)))
        order.append(best)
    return order, worst
