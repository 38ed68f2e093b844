"""Min-max utilisation pinning as an LP relaxation and as a MILP (test oracles, small instances).

    minimise    U
    subject to  Σ_{p ∈ P_f} x_{f,p} = 1                                for every flow f
                b_e + Σ_f Σ_{p ∈ P_f : e ∈ p} w_f x_{f,p} ≤ U · c_e      for every directed link e
                0 ≤ x_{f,p} ≤ 1   (LP)   or   x_{f,p} ∈ {0, 1}   (MILP)

(the path formulation of min-congestion routing; Raghavan & Thompson, Combinatorica 7(4), 1987,
§2), solved by HiGHS through :func:`scipy.optimize.linprog` (``method="highs-ipm"``) and
:func:`scipy.optimize.milp`. The candidates P_f are those of :class:`PathIndex`, so the optima
are comparable with :func:`controller.te.placer.place`. LP ≤ MILP ≤ any pinning.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp
from scipy.sparse import coo_matrix

from controller.model.topology import Fabric
from controller.te.collectives import FlowDemand
from controller.te.pathindex import DirectedLink, PathIndex


def _model(fabric: Fabric, demands: Mapping[FlowDemand, float],
           down_links: Iterable[frozenset[str]],
           base_load_bps: Mapping[DirectedLink, float] | None) -> tuple[Any, ...]:
    idx = PathIndex(fabric, down_links)
    flows = list(demands)
    cands = []
    for d in flows:
        c = idx.candidates(d.src, d.dst)
        if c.shape[0] == 0:
            raise ValueError(f"flow {d.label}: no valley-free path from {d.src} to {d.dst}")
        cands.append(c)
    var = [(f, r) for f, c in enumerate(cands) for r in range(c.shape[0])]
    n_x = len(var)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    row_of: dict[int, int] = {}
    for j, (f, r) in enumerate(var):
        w = demands[flows[f]]
        for lid in cands[f][r].tolist():
            rows.append(row_of.setdefault(lid, len(row_of)))
            cols.append(j)
            vals.append(w / idx.capacity_bps[lid])
    base = dict(base_load_bps or {})
    n_l = len(row_of)
    b = np.zeros(n_l)
    for lid, row in row_of.items():
        b[row] = base.get(idx.links[lid], 0.0) / idx.capacity_bps[lid]
    rows += list(range(n_l))
    cols += [n_x] * n_l
    vals += [-1.0] * n_l
    a_ub = coo_matrix((np.asarray(vals), (np.asarray(rows), np.asarray(cols))),
                      shape=(n_l, n_x + 1)).tocsr()
    a_eq = coo_matrix((np.ones(n_x), (np.asarray([f for f, _ in var]), np.arange(n_x))),
                      shape=(len(flows), n_x + 1)).tocsr()
    cost = np.zeros(n_x + 1)
    cost[n_x] = 1.0
    other = max(b.max(initial=0.0), 0.0)  # background on links no candidate uses is constant
    for uv, v in base.items():
        lid = idx.link_id.get(uv)
        if lid is not None and lid not in row_of:
            other = max(other, v / idx.capacity_bps[lid])
    return idx, flows, cands, var, a_ub, -b, a_eq, cost, other


def min_max_utilisation_lp(
    fabric: Fabric,
    demands: Mapping[FlowDemand, float],
    down_links: Iterable[frozenset[str]] = frozenset(),
    base_load_bps: Mapping[DirectedLink, float] | None = None,
) -> float:
    """Optimum of the LP relaxation (flows split over their candidates): a lower bound on the
    maximum utilisation of any pinning. Demands in bits/s. Raises ValueError (no path) or
    RuntimeError (solver failure)."""
    if not demands:
        return 0.0
    _, _, _, var, a_ub, b_ub, a_eq, cost, other = _model(fabric, demands, down_links, base_load_bps)
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.ones(a_eq.shape[0]),
                  bounds=[(0, 1)] * len(var) + [(0, None)], method="highs-ipm")
    if res.status != 0:
        raise RuntimeError(f"LP not solved: {res.message}")
    fun = res.fun
    assert fun is not None  # status 0: solved
    return max(float(fun), float(other))


def min_max_utilisation_exact(
    fabric: Fabric,
    demands: Mapping[FlowDemand, float],
    down_links: Iterable[frozenset[str]] = frozenset(),
    base_load_bps: Mapping[DirectedLink, float] | None = None,
) -> float:
    """Optimal maximum utilisation of an unsplittable pinning (MILP). Exponential worst case:
    tens of flows. Raises ValueError (no path) or RuntimeError (not proven optimal)."""
    if not demands:
        return 0.0
    _, _, _, var, a_ub, b_ub, a_eq, cost, other = _model(fabric, demands, down_links, base_load_bps)
    n = len(var)
    res = milp(cost, constraints=[LinearConstraint(a_ub, -np.inf, b_ub),
                                  LinearConstraint(a_eq, 1.0, 1.0)],
               integrality=np.r_[np.ones(n), 0.0],
               bounds=Bounds(np.zeros(n + 1), np.r_[np.ones(n), np.inf]))
    if res.status != 0 or res.x is None:
        raise RuntimeError(f"MILP not solved to optimality: {res.message}")
    x: np.ndarray = res.x
    return max(float(x[n]), float(other))
