"""Load-aware pinning: one path per flow, minimising the maximum link *utilisation*.

The weighted version of :func:`controller.te.pinning.pin_flows`: flow f has a demand w_f (bits/s)
and directed link e a capacity c_e (bits/s) and possibly a load b_e it already carries
(background, measured); choose one candidate path per flow (every shortest valley-free path,
:class:`controller.te.pathindex.PathIndex`) to minimise

    U = max_e (b_e + Σ_{f : e ∈ path(f)} w_f) / c_e.

With equal demands, equal capacities and no background, U = max flows per link × w / c, the
objective of :func:`pin_flows` (which is left unchanged). The problem is unsplittable
min-congestion routing, NP-hard (Raghavan & Thompson, Combinatorica 7(4), 1987, §1);
:mod:`controller.te.lp` gives its LP relaxation and exact MILP optimum on small instances.

Algorithm (:class:`PinState`):

0. When all demands are equal, a level-by-level bipartite edge colouring
   (:mod:`controller.te.colouring`) first places every flow it can without any two sharing a
   fabric link; the rest go to the greedy.
1. Greedy, largest demand first (then fewest candidates, then input order), each flow on the
   candidate minimising its own bottleneck utilisation after placement, ties broken by the
   smallest sum of utilisations along the candidate, then candidate order. The evaluation of
   all candidates of a flow is one vectorised gather over a (candidates × hops) link-id array,
   so no path is ever materialised as node names until the answer is returned.
2. Local search, as in :func:`pin_flows` but over utilisations: while U exceeds the lower
   bound, a link at U is relieved: one of its flows (largest first) moves to a candidate that
   stays below U everywhere, or — an ejection chain (Glover, Discrete Appl. Math. 65, 1996, §2)
   — to one that pushes other links to U, each then relieved the same way (depth-limited, at
   most a few candidates per step, rolled back on failure). Each success lowers the number of
   links at U (or U), so it terminates; ``search_budget`` candidate evaluations bound its time.
   On a fat-tree these chains are the alternating paths of bipartite edge colouring (König),
   which is why permutation traffic such as a fragmented ring ends collision-free.

Lower bound (:func:`load_lower_bound`): the larger of the mandatory load (links every candidate
of a flow uses, e.g. access links) and cut bounds: the flows leaving (entering) a leaf with its
hosts, or a pod, share that set's up links, so the busiest carries at least
(Σ w + Σ b) / Σ c over them.

Cost at scale (k = 32 fat-tree, 8,192 ring flows, bench/te_scale.py): candidate building (per
leaf pair, :mod:`controller.te.pathindex`), the colouring (vectorised per level,
:mod:`controller.te.colouring`), one scatter-add for the coloured placement
(:meth:`PinState.place_many`), a bincount lower bound and vectorised path assembly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from controller.model.topology import Fabric
from controller.te.collectives import FlowDemand
from controller.te.colouring import colour_levels
from controller.te.pathindex import DirectedLink, Path, PathIndex

DEFAULT_SEARCH_BUDGET = 2_000_000
DEFAULT_CHAIN_DEPTH = 8
_CHAIN_WIDTH = 4  # candidates tried per flow in a chain step
_EPS = 1e-9


@dataclass(frozen=True)
class LoadPinning:
    """A load-aware pinning.

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
    """

    paths: Mapping[FlowDemand, Path]
    link_load_bps: Mapping[DirectedLink, float]
    max_utilisation: float
    lower_bound: float

    @property
    def optimal(self) -> bool:
        """True when ``max_utilisation`` meets the lower bound (up to 1e-9)."""
        return self.max_utilisation <= self.lower_bound + _EPS


class PinState:
    """Mutable assignment of flows to candidates over one :class:`PathIndex` (pure; no I/O).

    Parameters
    ----------
    index : PathIndex
        Candidates and capacities of the fabric state.
    base_load_bps : numpy.ndarray, shape (n_directed_links,), optional
        Load not under our control (background), bits/s; zeros by default.

    Attributes
    ----------
    load_bps : numpy.ndarray of float64, shape (n_directed_links,)
        Base load plus the demand of every placed flow, bits/s.
    base_bps : numpy.ndarray of float64, shape (n_directed_links,)
        The base load alone, bits/s (read-only by convention).
    """

    def __init__(self, index: PathIndex, base_load_bps: np.ndarray | None = None):
        self.index = index
        n = len(index.links)
        self.inv_cap = 1.0 / index.capacity_bps
        self.load_bps = np.zeros(n) if base_load_bps is None else base_load_bps.astype(float)
        self.base_bps = self.load_bps.copy()
        self.util = self.load_bps * self.inv_cap
        self.flows: list[FlowDemand] = []
        self.pos: dict[FlowDemand, int] = {}
        self.rate_bps: list[float] = []
        self.cands: list[np.ndarray] = []  # inner (fabric) link ids, (n_cand, hops)
        self.access: list[tuple[int, int]] = []
        self.choice: list[int] = []  # -1: not placed
        self.flows_on: dict[int, set[int]] = {}
        self.evaluations = 0

    # -- flows ----------------------------------------------------------------------------------
    def add(self, demand: FlowDemand, rate_bps: float) -> int:
        """Register ``demand`` (not placed yet); returns its position.

        Raises
        ------
        ValueError
            Repeated demand, unknown host, non-positive rate, or no valley-free path over the
            links that are up (the message names the flow).
        """
        if demand in self.pos:
            raise ValueError(f"flow {demand.label} (index {demand.index}) is listed twice")
        if not rate_bps > 0:
            raise ValueError(f"flow {demand.label}: demand must be > 0 bit/s, got {rate_bps!r}")
        try:
            a = self.index.access(demand.src)
            b = self.index.access(demand.dst)
            if demand.src == demand.dst:
                raise ValueError(f"no path from host {demand.src} to itself")
        except ValueError as exc:
            raise ValueError(f"flow {demand.label}: {exc}") from None
        inner = self.index.leaf_candidates(a[0], b[0]) if a and b else np.empty((0, 0), int)
        if inner.shape[0] == 0:
            raise ValueError(
                f"flow {demand.label}: no valley-free path from {demand.src} to {demand.dst} over "
                f"the links that are up ({len(self.index.down)} down)"
            )
        assert a is not None and b is not None
        i = len(self.flows)
        self.flows.append(demand)
        self.pos[demand] = i
        self.rate_bps.append(float(rate_bps))
        self.cands.append(inner)
        self.access.append((a[1], b[2]))
        self.choice.append(-1)
        return i

    def links_of(self, i: int) -> np.ndarray:
        """Directed link ids of flow ``i``'s chosen path (access links included)."""
        up, down = self.access[i]
        return np.concatenate(([up], self.cands[i][self.choice[i]], [down])).astype(np.int64)

    def path(self, i: int) -> Path:
        """Node path of flow ``i``'s chosen candidate."""
        return self.index.path_of(self.links_of(i))

    def place(self, i: int, ci: int) -> None:
        """Put flow ``i`` on candidate ``ci`` (it must not be placed)."""
        assert self.choice[i] == -1
        self.choice[i] = ci
        w = self.rate_bps[i]
        ids = self.links_of(i)
        np.add.at(self.load_bps, ids, w)
        self.util[ids] = self.load_bps[ids] * self.inv_cap[ids]
        for lid in self.cands[i][ci].tolist():
            self.flows_on.setdefault(lid, set()).add(i)

    def place_many(self, placements: Iterable[tuple[int, int]]) -> None:
        """:meth:`place` for many (flow, candidate) pairs at once: one scatter-add of all their
        links (access links, then fabric links, each in the given flow order)."""
        pairs = list(placements)
        if not pairs:
            return
        flows = np.asarray([i for i, _ in pairs], dtype=np.int64)
        for i, ci in pairs:
            assert self.choice[i] == -1
            self.choice[i] = ci
        inner = [self.cands[i][ci] for i, ci in pairs]
        lengths = np.fromiter(map(len, inner), dtype=np.int64, count=len(inner))
        fabric_ids = np.concatenate(inner).astype(np.int64)
        acc = np.asarray([self.access[i] for i, _ in pairs], dtype=np.int64).reshape(-1, 2)
        rate = np.asarray(self.rate_bps, dtype=np.float64)[flows]
        ids = np.concatenate((acc[:, 0], fabric_ids, acc[:, 1]))
        np.add.at(self.load_bps, ids, np.concatenate((rate, np.repeat(rate, lengths), rate)))
        self.util[ids] = self.load_bps[ids] * self.inv_cap[ids]
        flows_on = self.flows_on
        for lid, i in zip(fabric_ids.tolist(), np.repeat(flows, lengths).tolist(), strict=True):
            got = flows_on.get(lid)
            if got is None:
                flows_on[lid] = {i}
            else:
                got.add(i)

    def paths(self) -> list[Path]:
        """Node path of every placed flow, in position order (vectorised per path length)."""
        by_hops: dict[int, list[int]] = {}
        for i, c in enumerate(self.cands):
            by_hops.setdefault(c.shape[1], []).append(i)
        out: list[Path] = [()] * len(self.flows)
        for hops, fl in by_hops.items():
            acc = np.asarray([self.access[i] for i in fl], dtype=np.int64).reshape(-1, 2)
            parts = [acc[:, :1]]
            if hops:
                parts.append(np.stack([self.cands[i][self.choice[i]] for i in fl]))
            parts.append(acc[:, 1:])
            for i, p in zip(fl, self.index.paths_of_rows(np.hstack(parts)), strict=True):
                out[i] = p
        return out

    def remove(self, i: int) -> None:
        """Take flow ``i`` off its path."""
        ids = self.links_of(i)
        np.subtract.at(self.load_bps, ids, self.rate_bps[i])
        self.util[ids] = self.load_bps[ids] * self.inv_cap[ids]
        for lid in self.cands[i][self.choice[i]].tolist():
            self.flows_on[lid].discard(i)
        self.choice[i] = -1

    def best_candidate(self, i: int, exclude: int = -1) -> tuple[int, float]:
        """(candidate, its bottleneck utilisation if flow ``i`` were put there); ``i`` must be
        unplaced. Ties: smallest utilisation sum, then candidate order. ``exclude`` is skipped
        (returns (-1, inf) if nothing else is left)."""
        c = self.cands[i]
        self.evaluations += c.shape[0]
        up, down = self.access[i]
        w = self.rate_bps[i]
        edge = max(self.util[up] + w * self.inv_cap[up], self.util[down] + w * self.inv_cap[down])
        if c.shape[1] == 0:
            return (0, edge) if exclude != 0 else (-1, float("inf"))
        u = self.util[c]
        after = u + w * self.inv_cap[c]
        b = after.max(axis=1)
        if exclude >= 0:
            b[exclude] = np.inf
        m = b.min()
        if not np.isfinite(m):
            return -1, float("inf")
        ties = np.flatnonzero(b <= m + _EPS)
        ci = int(ties[0]) if len(ties) == 1 else int(ties[np.argmin(u[ties].sum(axis=1))])
        return ci, max(float(m), float(edge))

    def greedy(self, flows: Iterable[int]) -> None:
        """Place ``flows`` (unplaced positions): largest demand, fewest candidates, first."""
        order = sorted(flows, key=lambda i: (-self.rate_bps[i], self.cands[i].shape[0], i))
        for i in order:
            self.place(i, self.best_candidate(i)[0])

    def max_utilisation(self) -> float:
        return float(self.util.max()) if len(self.util) else 0.0

    def local_search(
        self,
        lower: float,
        budget: int,
        movable: set[int] | None = None,
        depth: int = DEFAULT_CHAIN_DEPTH,
    ) -> int:
        """Relieve the hottest links by moves and ejection chains (module docstring); only flows
        in ``movable`` (all if None) move. Returns the number of flows whose path changed."""
        before = list(self.choice)
        left = [budget]
        while left[0] > 0:
            m = self.max_utilisation()
            if m <= lower + _EPS:
                break
            hot = np.flatnonzero(self.util >= m - _EPS).tolist()
            self._journal: list[tuple[int, int]] = []
            if not any(self._relieve(lid, m, depth, frozenset(), left, movable) for lid in hot):
                break
        return sum(1 for a, b in zip(before, self.choice, strict=True) if a != b)

    def _move(self, f: int, ci: int) -> None:
        self._journal.append((f, self.choice[f]))
        self.remove(f)
        self.place(f, ci)

    def _rollback(self, mark: int) -> None:
        while len(self._journal) > mark:
            f, old = self._journal.pop()
            self.remove(f)
            self.place(f, old)

    def _relieve(
        self,
        lid: int,
        m: float,
        depth: int,
        chain: frozenset[int],
        left: list[int],
        movable: set[int] | None,
    ) -> bool:
        """Bring link ``lid`` below utilisation ``m`` without any link exceeding m and without
        a link below m ending at m: a flow on ``lid`` moves to a candidate avoiding ``lid``;
        links it pushes to m are relieved recursively (an ejection chain, at most ``depth``
        further moves per branch; Glover, Discrete Appl. Math. 65, 1996, §2). On failure the
        state is restored."""
        mark = len(self._journal)
        on = [f for f in self.flows_on.get(lid, ()) if f not in chain
              and (movable is None or f in movable)]
        for f in sorted(on, key=lambda i: (-self.rate_bps[i], i)):
            cur = self.choice[f]
            c = self.cands[f]
            self.remove(f)
            left[0] -= c.shape[0]
            self.evaluations += c.shape[0]
            after = self.util[c] + self.rate_bps[f] * self.inv_cap[c]
            ok = (after.max(axis=1) < m + _EPS) & ~(c == lid).any(axis=1)
            ok[cur] = False
            n_hot = (after >= m - _EPS).sum(axis=1)
            if depth <= 0:
                ok &= n_hot == 0
            self.place(f, cur)
            cis = np.flatnonzero(ok)
            if not len(cis):
                continue
            order = np.lexsort((cis, self.util[c[cis]].sum(axis=1), n_hot[cis]))
            for ci in cis[order][:_CHAIN_WIDTH].tolist():
                if left[0] <= 0:
                    return False
                hot = [int(x) for x in c[ci][after[ci] >= m - _EPS]]
                self._move(f, ci)
                if all(self.util[x] < m - _EPS
                       or self._relieve(x, m, depth - 1, chain | {f}, left, movable)
                       for x in hot):
                    return True
                self._rollback(mark)
        return False

    def result(self, lower: float) -> LoadPinning:
        links = self.index.links
        by_name = self.index.fabric_memo("links-by-name", lambda: _name_order(links))
        assert isinstance(by_name, np.ndarray)
        nz = by_name[self.load_bps[by_name] > 0]
        loads = dict(zip(map(links.__getitem__, nz.tolist()), self.load_bps[nz].tolist(),
                         strict=True))
        return LoadPinning(
            dict(zip(self.flows, self.paths(), strict=True)),
            loads,
            self.max_utilisation(),
            lower,
        )


def _name_order(links: list[DirectedLink]) -> np.ndarray:
    """Directed link ids sorted by (tail name, head name)."""
    tails = np.asarray([u for u, _ in links])
    heads = np.asarray([v for _, v in links])
    return np.lexsort((heads, tails)).astype(np.int64)


def base_load_array(index: PathIndex, base_load_bps: Mapping[DirectedLink, float] | None) -> np.ndarray:
    """Directed-link loads as an array over ``index``'s link ids. Raises ValueError for a link
    the fabric does not have or a negative load."""
    arr = np.zeros(len(index.links))
    for uv, v in (base_load_bps or {}).items():
        lid = index.link_id.get(tuple(uv))  # type: ignore[arg-type]
        if lid is None:
            raise ValueError(f"base load on {uv[0]}->{uv[1]}: not a link of the fabric")
        if v < 0:
            raise ValueError(f"base load on {uv[0]}->{uv[1]} is negative ({v})")
        arr[lid] += v
    return arr


def pin_by_load(
    fabric: Fabric,
    demands: Mapping[FlowDemand, float],
    down_links: Iterable[frozenset[str]] = frozenset(),
    *,
    base_load_bps: Mapping[DirectedLink, float] | None = None,
    index: PathIndex | None = None,
    search_budget: int = DEFAULT_SEARCH_BUDGET,
) -> LoadPinning:
    """Pin every demand on one shortest valley-free path, minimising the maximum utilisation.

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
        A demand is repeated, has a non-positive rate, names an unknown host or has no path;
        a base load names an unknown link.

    Notes
    -----
    Deterministic. Cost: O(Σ_f |P_f| · hops) for the greedy (vectorised), bounded local search.

    Examples
    --------
    >>> from controller.model import build_leaf_spine
    >>> f = build_leaf_spine("ls", 2, 2, 2, 10**9, 10**9, 1.0, 1.0)
    >>> ds = {FlowDemand("r", 0, "h1", "h3"): 6e8, FlowDemand("r", 1, "h2", "h4"): 6e8}
    >>> p = pin_by_load(f, ds)
    >>> round(p.max_utilisation, 2), p.paths[FlowDemand("r", 1, "h2", "h4")][2]
    (0.6, 'spine2')
    """
    idx = index if index is not None else PathIndex(fabric, down_links)
    state = PinState(idx, base_load_array(idx, base_load_bps))
    leaf_of = {h.name: h.leaf for h in fabric.hosts}
    idx.prefetch((leaf_of[d.src], leaf_of[d.dst]) for d in demands
                 if d.src in leaf_of and d.dst in leaf_of)
    for d, w in demands.items():
        state.add(d, w)
    rest: list[int] = list(range(len(state.flows)))
    if state.rate_bps and len(set(state.rate_bps)) == 1:
        rows = colour_levels(idx, state.cands)
        state.place_many((i, ci) for i, ci in enumerate(rows) if ci >= 0)
        rest = [i for i, ci in enumerate(rows) if ci < 0]
    state.greedy(rest)
    lower = load_lower_bound(state)
    state.local_search(lower, search_budget)
    return state.result(lower)


def load_lower_bound(state: PinState) -> float:
    """Lower bound on the maximum utilisation of any pinning of ``state``'s flows (placed or
    not) over their candidates: max of the mandatory-load and leaf/pod cut bounds (module
    docstring). Vectorised: O(|links| + |flows|) array work (bincount per cut family)."""
    idx = state.index
    base = state.base_bps
    rate = np.asarray(state.rate_bps, dtype=np.float64)
    acc = np.asarray(state.access, dtype=np.int64).reshape(-1, 2)
    mand = base.copy()
    np.add.at(mand, acc[:, 0], rate)
    np.add.at(mand, acc[:, 1], rate)
    for i, c in enumerate(state.cands):
        if c.shape[0] == 1:
            mand[c[0]] += rate[i]
    best = float((mand * state.inv_cap).max()) if len(mand) else 0.0
    tail, head, _, _ = idx.link_ends()
    groups = idx.fabric_memo("cut-groups", lambda: _cut_groups(idx))
    assert isinstance(groups, tuple)
    src, dst = tail[acc[:, 0]], head[acc[:, 1]]  # host node numbers
    for g in groups:
        n_groups = int(g.max(initial=-1)) + 1
        if n_groups == 0:
            continue
        gt, gh = g[tail], g[head]
        cross = (gt != gh) & idx.is_up
        gs, gd = g[src], g[dst]
        leaves = gs != gd
        for ends, f_ends in ((gt, gs), (gh, gd)):  # out of a group, into a group
            m = cross & (ends >= 0)
            cap = np.bincount(ends[m], weights=idx.capacity_bps[m], minlength=n_groups)
            load = np.bincount(ends[m], weights=base[m], minlength=n_groups)
            fm = leaves & (f_ends >= 0)
            load += np.bincount(f_ends[fm], weights=rate[fm], minlength=n_groups)
            pos = cap > 0
            if pos.any():
                best = max(best, float((load[pos] / cap[pos]).max()))
    return best


def _cut_groups(idx: PathIndex) -> tuple[np.ndarray, np.ndarray]:
    """Per node number of :meth:`PathIndex.link_ends`: its leaf group and its pod group (-1:
    none). A leaf and its hosts form one leaf group; a pod's switches and their hosts one pod
    group."""
    fabric = idx.fabric
    *_, names = idx.link_ends()
    num = {n: i for i, n in enumerate(names)}
    leaf_g = np.full(len(names), -1, dtype=np.int64)
    pod_g = np.full(len(names), -1, dtype=np.int64)
    leaf_ids: dict[str, int] = {}
    pod_ids: dict[object, int] = {}
    pod_of = {s.name: s.pod for s in fabric.switches if s.pod is not None}
    for s in fabric.switches:
        if s.pod is not None:
            pod_g[num[s.name]] = pod_ids.setdefault(s.pod, len(pod_ids))
    for h in fabric.hosts:
        g = leaf_ids.setdefault(h.leaf, len(leaf_ids))
        leaf_g[num[h.name]] = leaf_g[num[h.leaf]] = g
        if h.leaf in pod_of:
            pod_g[num[h.name]] = pod_ids[pod_of[h.leaf]]
    return leaf_g, pod_g
