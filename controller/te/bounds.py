"""Lower bounds on the maximum utilisation of a pinning (what proves a plan optimal).

:func:`load_lower_bound` takes the larger of

* the mandatory load: every flow loads its access links, and a flow with one candidate every
  link of it;
* cut bounds: the flows leaving (entering) a leaf with its hosts, or a pod, share that set's
  up links, so the busiest carries at least (Σ w + Σ b) / Σ c over them;
* with ``integral`` (flows do not split), the pigeonhole version of a cut: n flows of one
  demand w over links of one capacity c with background b_e need the lowest level L with
  Σ_e ⌊L − b_e/w⌋ ≥ n, i.e. ⌈n / n_links⌉ · w / c without background (:func:`_integral_cut`).

Without ``integral`` the bound also holds for routings that split flows (the LP relaxation of
:mod:`controller.te.lp`), which is how :mod:`controller.sim.optimum` uses it at scale.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from controller.te.pathindex import PathIndex

if TYPE_CHECKING:
    from controller.te.loadstate import LoadState


_RESOLUTION = 1e-9
"""Width (in flows) at which the pigeonhole bound's bisection stops: ``room`` counts a level
within 1e-9 of a breakpoint as past it, so a narrower bracket finds nothing new."""


def load_lower_bound(state: LoadState, integral: bool = True) -> float:
    """Lower bound on the maximum utilisation of any pinning of ``state``'s flows (placed or
    not) over their candidates: max of the mandatory-load and leaf/pod cut bounds (module
    docstring). ``integral=False`` leaves out the pigeonhole bound: then it also bounds
    routings that split flows (the LP relaxation). Vectorised: O(|links| + |flows|) array
    work (bincount per cut family)."""
    idx = state.index
    base = state.base_bps
    rate, acc = state.as_arrays()
    mand = base.copy()
    np.add.at(mand, acc[:, 0], rate)
    np.add.at(mand, acc[:, 1], rate)
    for i in np.flatnonzero(np.asarray(state.n_cands) == 1).tolist():
        mand[state.cands[i][0]] += rate[i]
    best = float((mand * state.inv_cap).max()) if len(mand) else 0.0
    tail, head, _, _ = idx.link_ends()
    groups = idx.fabric_memo("cut-groups", lambda: _cut_groups(idx))
    assert isinstance(groups, tuple)
    src, dst = tail[acc[:, 0]], head[acc[:, 1]]  # host node numbers
    for g, ids, gt, gh in groups:
        n_groups = int(g.max(initial=-1)) + 1
        if n_groups == 0:
            continue
        up = idx.is_up[ids]
        ids, gt, gh = ids[up], gt[up], gh[up]
        l_cap, l_base = idx.capacity_bps[ids], base[ids]
        gs, gd = g[src], g[dst]
        leaves = gs != gd
        for ends, f_ends in ((gt, gs), (gh, gd)):  # out of a group, into a group
            m = ends >= 0
            cap = np.bincount(ends[m], weights=l_cap[m], minlength=n_groups)
            load = np.bincount(ends[m], weights=l_base[m], minlength=n_groups)
            fm = leaves & (f_ends >= 0)
            load += np.bincount(f_ends[fm], weights=rate[fm], minlength=n_groups)
            pos = cap > 0
            if pos.any():
                best = max(best, float((load[pos] / cap[pos]).max()))
                if integral:
                    best = max(best, _integral_cut(ends[m], l_cap[m], l_base[m],
                                                   f_ends[fm], rate[fm], n_groups))
    return best


def _integral_cut(link_group: np.ndarray, cap: np.ndarray, base: np.ndarray,
                  flow_group: np.ndarray, rate: np.ndarray, n_groups: int) -> float:
    """The pigeonhole cut bound (module docstring), with background: over the groups whose n
    crossing flows share one rate w and whose crossing links share one capacity c, the lowest
    level L (in flows of w) such that the links can take them without splitting,
    Σ_e max(0, ⌊L − b_e / w⌋) ≥ n; returned as L · w / c (0 when no group qualifies). Without
    background that is ⌈n / n_links⌉ · w / c.

    L is found by bisection over all groups at once, between the busiest link's level and that
    plus ⌈n / n_links⌉ (always feasible). In a group whose backgrounds are whole flows every
    breakpoint b_e / w + k is whole, so the bisection runs over integers and ends on L. In the
    others it stops at ``_RESOLUTION`` and is snapped to the breakpoint where it becomes
    feasible, so the bound is exact, not a bisection's estimate (when two breakpoints lie
    closer than that resolution, its infeasible lower end is returned, which still bounds).
    """
    if not len(flow_group) or not len(link_group):
        return 0.0
    n_links = np.bincount(link_group, minlength=n_groups)
    n_flows = np.bincount(flow_group, minlength=n_groups)
    lo_r, hi_r = np.full(n_groups, np.inf), np.full(n_groups, -np.inf)
    np.minimum.at(lo_r, flow_group, rate)
    np.maximum.at(hi_r, flow_group, rate)
    lo_c, hi_c = np.full(n_groups, np.inf), np.full(n_groups, -np.inf)
    np.minimum.at(lo_c, link_group, cap)
    np.maximum.at(hi_c, link_group, cap)
    ok = (n_links > 0) & (n_flows > 0) & (lo_r == hi_r) & (lo_c == hi_c)
    if not ok.any():
        return 0.0
    keep = ok[link_group]
    g, beta = link_group[keep], base[keep] / lo_r[link_group[keep]]  # background in flows
    need = n_flows.astype(np.float64)

    def room(level: np.ndarray) -> np.ndarray:
        return np.bincount(g, weights=np.maximum(np.floor(level[g] - beta + 1e-9), 0.0),
                           minlength=n_groups)

    top = np.zeros(n_groups)
    np.maximum.at(top, g, beta)
    # at top + ⌈n / n_links⌉ every link takes at least ⌈n / n_links⌉ flows: always feasible
    hi = top + np.ceil(need / np.maximum(n_links, 1))
    # groups whose backgrounds are whole flows have whole breakpoints: bisect over integers
    # (a few rounds; a repair's background is the other flows of the same demand)
    whole_beta = np.abs(beta - np.round(beta)) < 1e-9
    whole = np.bincount(g, weights=~whole_beta, minlength=n_groups) == 0
    top = np.where(whole, np.round(top), top)
    hi = np.where(whole, np.round(hi), hi)
    lo = top.copy()  # the most loaded link alone: never below it
    for _ in range(200):
        open_ = np.where(whole, hi - lo > 1, hi - lo >= _RESOLUTION)
        if not open_.any():
            break
        mid = np.where(whole, np.floor((lo + hi) / 2), (lo + hi) / 2)
        fits = room(mid) >= need
        hi = np.where(open_ & fits, mid, hi)
        lo = np.where(open_ & ~fits, mid, lo)
    snap = np.full(n_groups, np.inf)  # the first breakpoint β_e + k above lo
    np.minimum.at(snap, g, beta + np.floor(lo[g] - beta) + 1.0)
    # feasible there: it is the optimum (lo is infeasible and no breakpoint lies between);
    # else (breakpoints closer than the bisection's resolution) lo, infeasible, still bounds;
    # whole breakpoints: hi (lo, hi adjacent integers, hi feasible)
    level = np.where(whole, hi, np.where(room(snap) >= need, snap, lo))
    # the busiest link's own level, when the flows already fit there, is the bound (the
    # bisection's lower end starts there untested, so the snap would pass it)
    level = np.where(room(top) >= need, top, np.maximum(level, top))
    return float((level[ok] * lo_r[ok] / lo_c[ok]).max())


def _cut_groups(idx: PathIndex) -> tuple[tuple[np.ndarray, ...], ...]:
    """Per family (leaf groups, pod groups): (group of every node number of
    :meth:`PathIndex.link_ends` (-1: none), ids of the directed links between two groups (or a
    group and no group), the group of their tails, of their heads). A leaf and its hosts form
    one leaf group; a pod's switches and their hosts one pod group."""
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
        gid = leaf_ids.setdefault(h.leaf, len(leaf_ids))
        leaf_g[num[h.name]] = leaf_g[num[h.leaf]] = gid
        if h.leaf in pod_of:
            pod_g[num[h.name]] = pod_ids[pod_of[h.leaf]]
    tail, head, _, _ = idx.link_ends()
    out: list[tuple[np.ndarray, ...]] = []
    for g in (leaf_g, pod_g):
        ids = np.flatnonzero(g[tail] != g[head])
        out.append((g, ids, g[tail[ids]], g[head[ids]]))
    return tuple(out)
