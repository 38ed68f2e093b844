"""The placer: one path per flow, minimising the maximum link *utilisation* — the one engine
behind start-up, registration, repair, re-balancing, re-optimisation and the benches.

Flow f has a demand w_f (bits/s) and directed link e a capacity c_e (bits/s) and possibly a load
b_e it already carries (background, measured); choose one candidate path per flow (every
shortest valley-free path, :class:`controller.te.pathindex.PathIndex`) to minimise

    U = max_e (b_e + Σ_{f : e ∈ path(f)} w_f) / c_e.

With equal demands, equal capacities and no background, U = max flows per link × w / c. The
problem is unsplittable min-congestion routing, NP-hard (Raghavan & Thompson, "Randomized
rounding", Combinatorica 7(4), 1987, §1); :mod:`controller.te.lp` gives its LP relaxation and
exact MILP optimum on small instances.

Everything works on arrays of link ids (:class:`~controller.te.loadstate.LoadState`,
:class:`~controller.te.placement.Placement`); node paths are built only for the answer. The
pieces, one module each:

* :mod:`controller.te.loadstate` — the flows, their candidates and the load on every link;
* :mod:`controller.te.greedy` — construction: edge colouring of the largest equal-demand class,
  then a greedy, largest demand first;
* :mod:`controller.te.localsearch` — improvement: moves, ejection chains, compound moves;
* :mod:`controller.te.bounds` — the lower bound that proves a placement optimal;
* :mod:`controller.te.recovery` — repair (only the flows on dead links move), restore and the
  background re-optimisation (fewest moves, make-before-break order);
* :mod:`controller.te.reroute` — re-balancing on measured load, with hysteresis.

The API (this module): :func:`place_policy` (start-up: a policy's pinned flows, weighted by
:func:`pinned_demands_bps`), :func:`place` (any demands; the benches), :func:`place_around`
(registration: new flows around the installed ones), and :func:`repair`, :func:`restore`,
:func:`reoptimise`, :func:`rebalance` re-exported from the modules above.

Cost at scale (bench/te_scale.py ``--k 64 --parts rail``, CPU time, load average 4–7 on 2 CPUs):
one ring per rail over 65,536 GPUs is placed in 0.4–0.8 s with one path per flow and 2.6–4.1 s
with 12 sub-flows per flow (786,432); a repair takes 11–26 ms, 104–119 ms for a spine failure
with 12 sub-flows (24,473 move; docs/te-at-scale.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from controller.model.topology import Fabric
from controller.policy.model import Policy
from controller.te.bounds import load_lower_bound
from controller.te.collectives import FlowDemand, expand_policy
from controller.te.greedy import colour_first, greedy, greedy_in_order
from controller.te.hosts import base_load_array
from controller.te.loadstate import BATCH_FLOWS, EPS, LoadState
from controller.te.localsearch import local_search
from controller.te.pathindex import DirectedLink, Path, PathIndex
from controller.te.patterns import Group, Traffic, demand_rates_bps
from controller.te.placement import Placement
from controller.te.recovery import (
    Move,
    ReoptResult,
    RepairResult,
    reoptimise,
    repair,
    restore,
)
from controller.te.reroute import Hysteresis, RerouteResult, rebalance

DEFAULT_SEARCH_BUDGET = 2_000_000
"""Candidate evaluations the local search of :func:`place` may spend (1–5 µs each)."""
POLICY_SEARCH_BUDGET = 200_000
"""Candidate evaluations :func:`place_policy` lets the local search spend (the controller waits
for it at start-up and on a policy apply: at most about a second)."""
RESTART_MAX_FLOWS = 2048
"""Up to this many flows, :func:`place` restarts from other constructions when the first ends
above the lower bound after a quick search (``QUICK_BUDGET``): the flows one by one with the
fewest candidates first (the order of the flow-count planner the controller used before,
:mod:`controller.testing.pinning_oracle`), then in input order, each followed by a quick search;
the best is searched further (moves and chains, then compound moves). On the fabrics of the
tests and labs one construction alone ended above the oracle's result in 1 of 1,083 random
instances (a rail fabric with a link down: 1.17 where 1.0 is possible); and a failed chain
search from one construction can spend 2 s where another construction reaches the optimum in
3 ms (a k = 4 fat-tree, 48 flows)."""
QUICK_BUDGET = 20_000
"""Candidate evaluations of the quick search after each construction (up to
``RESTART_MAX_FLOWS`` flows)."""
KICK_BUDGET = 200_000
"""Most candidate evaluations the compound moves of :func:`place` may spend (they run last, only
up to ``controller.te.localsearch.KICK_MAX_FLOWS`` flows and when the moves and chains stopped
above the lower bound, which may be the optimum: a budget of 2,000,000 took 7.5 s of CPU on a
k = 4 fat-tree with 189 flows without improving on 200,000)."""
AROUND_SEARCH_BUDGET = 20_000
"""Candidate evaluations the local search of :func:`place_around` may spend (a registration
answers a client: it must be quick)."""


@dataclass(frozen=True)
class LoadPinning:
    """A placement and what proves its quality.

    Attributes
    ----------
    paths : mapping of FlowDemand to tuple of str
        The chosen path of every demand (host … host), in demand order.
    link_load_bps : mapping of (str, str) to float
        Directed link → background + pinned demand on it, bits/s (links with load > 0, sorted).
    max_utilisation : float
        max over directed links of load / capacity (dimensionless; 1.0 = full).
    lower_bound : float
        No pinning on these candidates has a smaller maximum utilisation.
    placement : Placement or None
        The same paths as link ids (:class:`controller.te.placement.Placement`): what
        :func:`repair` and :func:`reoptimise` start from.
    """

    paths: Mapping[FlowDemand, Path]
    link_load_bps: Mapping[DirectedLink, float]
    max_utilisation: float
    lower_bound: float
    placement: Placement | None = field(default=None, compare=False, repr=False)

    @property
    def optimal(self) -> bool:
        """True when ``max_utilisation`` meets the lower bound (up to 1e-9)."""
        return self.max_utilisation <= self.lower_bound + EPS

    @cached_property
    def link_flows(self) -> dict[DirectedLink, int]:
        """Directed link (u, v) → number of pinned flows on it (links some path uses), sorted
        by link."""
        out: dict[DirectedLink, int] = {}
        for p in self.paths.values():
            for uv in zip(p, p[1:], strict=False):
                out[uv] = out.get(uv, 0) + 1
        return dict(sorted(out.items()))

    @property
    def max_link_flows(self) -> int:
        """The largest count of :attr:`link_flows` (0 without flows)."""
        return max(self.link_flows.values(), default=0)


def pinned_demands_bps(fabric: Fabric, flows: Iterable[FlowDemand]) -> dict[FlowDemand, float]:
    """Each pinned flow's demand, bit/s: its rate in the link-rate-bound schedule with every
    pinned flow running at once (:func:`controller.te.patterns.demand_rates_bps`, one phase);
    the sub-flows of a transfer share it (each has 1/n)."""
    fl = tuple(flows)
    if not fl:
        return {}
    return demand_rates_bps(fabric, [Traffic("pinned", 0.0, ((Group(fl, 0.0),),))])


def place_policy(fabric: Fabric, policy: Policy,
                 down_links: Iterable[frozenset[str]] = frozenset()) -> LoadPinning:
    """Every flow of the policy's collectives (:func:`controller.te.collectives.expand_policy`;
    sub-flows each on their own) placed from scratch, weighted by :func:`pinned_demands_bps`:
    what the controller installs at start-up and what ``aifabric plan`` shows.

    Raises
    ------
    ValueError
        A flow is listed twice, names a host the fabric lacks or has no valley-free path over
        the links that are up (the message names it); ``down_links`` names an unknown link.
    """
    flows = expand_policy(policy, fabric)
    if len(set(flows)) != len(flows):
        dup = next(d for i, d in enumerate(flows) if d in flows[:i])
        raise ValueError(f"flow {dup.label} (index {dup.index}) is listed twice")
    return place(fabric, pinned_demands_bps(fabric, flows), down_links,
                 search_budget=POLICY_SEARCH_BUDGET)


def place(
    fabric: Fabric,
    demands: Mapping[FlowDemand, float],
    down_links: Iterable[frozenset[str]] = frozenset(),
    *,
    base_load_bps: Mapping[DirectedLink, float] | None = None,
    index: PathIndex | None = None,
    search_budget: int = DEFAULT_SEARCH_BUDGET,
) -> LoadPinning:
    """Pin every demand on one shortest valley-free path, minimising the maximum utilisation:
    colouring, greedy (:mod:`controller.te.greedy`), then local search with compound moves
    (:mod:`controller.te.localsearch`) down to the lower bound (:mod:`controller.te.bounds`).

    Parameters
    ----------
    fabric : Fabric
        The fabric.
    demands : mapping of FlowDemand to float
        Flow → demand in bits/s (> 0); the order of the mapping is the tie-break order.
    down_links : iterable of frozenset of str, optional
        Links that are down; ignored when ``index`` is given (it has its own).
    base_load_bps : mapping of (str, str) to float, optional
        Load already on directed links (background), bits/s.
    index : PathIndex, optional
        A prebuilt index of this fabric state (reuses its cached cones and leaf pairs).
    search_budget : int, optional
        Most candidate evaluations the local search may spend.

    Returns
    -------
    LoadPinning

    Raises
    ------
    ValueError
        A demand has a non-positive rate, names an unknown host or has no path; a base load
        names an unknown link; ``down_links`` names an unknown link.

    Notes
    -----
    Deterministic. Cost: O(Σ_f |P_f| · hops) for the greedy (vectorised), bounded local search;
    up to ``RESTART_MAX_FLOWS`` flows, two more constructions when the first is not proven
    optimal after a quick search, and compound moves last.

    Examples
    --------
    >>> from controller.model import build_leaf_spine
    >>> f = build_leaf_spine("ls", 2, 2, 2, 10**9, 10**9, 1.0, 1.0)
    >>> ds = {FlowDemand("r", 0, "h1", "h3"): 6e8, FlowDemand("r", 1, "h2", "h4"): 6e8}
    >>> p = place(f, ds)
    >>> round(p.max_utilisation, 2), p.paths[FlowDemand("r", 1, "h2", "h4")][2]
    (0.6, 'spine2')
    """
    idx = index if index is not None else PathIndex(fabric, down_links)
    base = base_load_array(idx, base_load_bps)
    state = LoadState(idx, base)
    if state.tables is None:
        leaf_of = {h.name: h.leaf for h in fabric.hosts}
        idx.prefetch((leaf_of[d.src], leaf_of[d.dst]) for d in demands
                     if d.src in leaf_of and d.dst in leaf_of)
    state.add_many(demands.items())
    greedy(state, colour_first(state))
    lower = load_lower_bound(state)
    n = len(state.flows)
    if n > RESTART_MAX_FLOWS:
        local_search(state, lower, search_budget)
    else:  # three constructions, a quick search each; the best one searched further
        local_search(state, lower, min(search_budget, QUICK_BUDGET))
        for order in (sorted(range(n), key=lambda i: (state.n_cands[i], i)), range(n)):
            if state.max_utilisation() <= lower + EPS:
                break
            other = LoadState(idx, base)
            other.add_many(demands.items())
            greedy_in_order(other, order)
            local_search(other, lower, min(search_budget, QUICK_BUDGET))
            if other.max_utilisation() < state.max_utilisation() - EPS:
                state = other
        if state.max_utilisation() > lower + EPS:
            local_search(state, lower, search_budget)
        if state.max_utilisation() > lower + EPS:
            local_search(state, lower, min(search_budget, KICK_BUDGET), kick=True)
    if state.tables is not None and n >= BATCH_FLOWS:
        state.tables.warm()  # so a repair derives its failed state's tables (ClosTables.warm)
    return _result(state, lower)


def place_around(index: PathIndex, fixed_bps: np.ndarray,
                 demands: Iterable[tuple[FlowDemand, float]], *,
                 search_budget: int = AROUND_SEARCH_BUDGET) -> Placement:
    """New flows placed around load that stays where it is (the installed flows' demand and any
    background): greedy, then local search over the new flows only.

    Parameters
    ----------
    index : PathIndex
        The fabric state.
    fixed_bps : numpy.ndarray of float64, shape (n_directed_links,)
        Load per directed link that does not move, bits/s.
    demands : iterable of (FlowDemand, float)
        The new flows (not among those of ``fixed_bps``) and their demands, bits/s.

    Returns
    -------
    Placement
        The new flows only, in ``demands`` order, on ``index`` with ``fixed_bps`` as base load.

    Raises
    ------
    ValueError
        A flow is repeated, has a non-positive demand, names an unknown host or has no path.
    """
    state = LoadState(index, fixed_bps)
    state.add_many(demands)
    greedy(state, range(len(state.flows)))
    local_search(state, load_lower_bound(state), search_budget)
    return state.placement()


def _result(state: LoadState, lower: float) -> LoadPinning:
    links = state.index.links
    by_name = state.index.fabric_memo("links-by-name", lambda: _name_order(links))
    assert isinstance(by_name, np.ndarray)
    nz = by_name[state.load_bps[by_name] > 0]
    loads = dict(zip(map(links.__getitem__, nz.tolist()), state.load_bps[nz].tolist(),
                     strict=True))
    placement = state.placement()
    return LoadPinning(placement.paths(), loads, state.max_utilisation(), lower, placement)


def _name_order(links: list[DirectedLink]) -> np.ndarray:
    """Directed link ids sorted by (tail name, head name)."""
    tails = np.asarray([u for u, _ in links])
    heads = np.asarray([v for _, v in links])
    return np.lexsort((heads, tails)).astype(np.int64)


def format_link_flows(pinning: LoadPinning, limit: int | None = None) -> str:
    """A plain-text table of pinned flows and load per directed link, busiest first.

    Parameters
    ----------
    pinning : LoadPinning
        A placer result.
    limit : int, optional
        Show at most this many links (all by default).

    Returns
    -------
    str
        One line per directed link ``u -> v  flows  utilisation``, then a summary line with the
        maximum utilisation, the lower bound and whether the maximum is proven optimal.
    """
    placement = pinning.placement
    util: dict[DirectedLink, float] = {}
    if placement is not None:
        u = placement.utilisation()
        util = {placement.index.links[i]: float(u[i]) for i in np.flatnonzero(u > 0).tolist()}
    rows = sorted(pinning.link_flows.items(), key=lambda kv: (-util.get(kv[0], 0.0), -kv[1],
                                                              kv[0]))
    if limit is not None:
        rows = rows[:limit]
    width = max((len(f"{u} -> {v}") for (u, v), _ in rows), default=4)
    width = max(width, len("link"))
    lines = [f"{'link':<{width}}  flows  utilisation"]
    lines += [f"{f'{u} -> {v}':<{width}}  {n:>5}  {util.get((u, v), 0.0):>11.3f}"
              for (u, v), n in rows]
    verdict = "optimal" if pinning.optimal else "not proven optimal"
    lines.append(
        f"{len(pinning.paths)} flows on {len(pinning.link_flows)} directed links; "
        f"max utilisation {pinning.max_utilisation:.3f}, lower bound {pinning.lower_bound:.3f} "
        f"({verdict}); max {pinning.max_link_flows} flows per link"
    )
    return "\n".join(lines)


__all__ = ["AROUND_SEARCH_BUDGET", "DEFAULT_SEARCH_BUDGET", "Hysteresis", "LoadPinning", "Move",
           "ReoptResult", "RepairResult", "RerouteResult", "format_link_flows",
           "pinned_demands_bps", "place", "place_around", "place_policy", "rebalance",
           "reoptimise", "repair", "restore"]
