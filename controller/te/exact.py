"""Exact min-congestion pinning as a mixed-integer program (a test oracle for small instances).

    minimise    z
    subject to  Σ_{p ∈ P_f} x_{f,p} = 1                         for every flow f
                Σ_{f} Σ_{p ∈ P_f : e ∈ p} x_{f,p} − z ≤ 0        for every directed link e
                x_{f,p} ∈ {0, 1},  z ≥ 0

(the path formulation of unsplittable min-congestion routing; Raghavan & Thompson,
Combinatorica 7(4), 1987, §2), solved by HiGHS through :func:`scipy.optimize.milp`. The
candidate sets P_f are every shortest valley-free path (:class:`controller.te.paths.PathOracle`,
the same as the placer's, :class:`controller.te.pathindex.PathIndex`), so the optima are
comparable. Exponential in the worst case: keep instances small (tens of flows).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from controller.model.topology import Fabric
from controller.te.collectives import FlowDemand
from controller.te.paths import Path, PathOracle


def min_congestion_exact(
    fabric: Fabric,
    demands: Iterable[FlowDemand],
    down_links: Iterable[frozenset[str]] = frozenset(),
) -> tuple[int, dict[FlowDemand, Path]]:
    """The optimal maximum number of flows on a directed link, and one pinning achieving it.

    Parameters
    ----------
    fabric : Fabric
        The fabric.
    demands : iterable of FlowDemand
        Distinct flows.
    down_links : iterable of frozenset of str, optional
        Links that are down.

    Returns
    -------
    (int, dict of FlowDemand to tuple of str)
        The optimum congestion and the chosen path per demand (0 and {} without demands).

    Raises
    ------
    ValueError
        A demand has no valley-free path, or names an unknown host.
    RuntimeError
        The solver did not prove optimality.
    """
    flows = tuple(demands)
    if not flows:
        return 0, {}
    oracle = PathOracle(fabric, down_links)
    cands: list[list[Path]] = []
    for d in flows:
        paths = oracle.paths(d.src, d.dst)
        if not paths:
            raise ValueError(f"flow {d.label}: no valley-free path from {d.src} to {d.dst}")
        cands.append(paths)
    var_of: list[tuple[int, int]] = [(f, p) for f, ps in enumerate(cands) for p in range(len(ps))]
    n_x = len(var_of)
    z = n_x  # index of the congestion variable
    link_row: dict[tuple[str, str], int] = {}
    rows: list[int] = []
    cols: list[int] = []
    for j, (f, p) in enumerate(var_of):
        path = cands[f][p]
        for uv in zip(path, path[1:], strict=False):
            rows.append(link_row.setdefault(uv, len(link_row)))
            cols.append(j)
    n_links = len(link_row)
    rows.extend(range(n_links))
    cols.extend([z] * n_links)
    vals = [1.0] * (len(rows) - n_links) + [-1.0] * n_links
    cap = coo_matrix((np.asarray(vals), (np.asarray(rows), np.asarray(cols))),
                     shape=(n_links, n_x + 1))
    one = coo_matrix(
        (np.ones(n_x), (np.asarray([f for f, _ in var_of]), np.arange(n_x))),
        shape=(len(flows), n_x + 1))
    cost = np.zeros(n_x + 1)
    cost[z] = 1.0
    integrality = np.ones(n_x + 1, dtype=np.int64)
    res = milp(
        cost,
        constraints=[
            LinearConstraint(cap, -np.inf, 0.0),
            LinearConstraint(one, 1.0, 1.0),
        ],
        integrality=integrality,
        bounds=Bounds(np.zeros(n_x + 1), np.r_[np.ones(n_x), np.inf]),
    )
    if res.status != 0 or res.x is None:
        raise RuntimeError(f"MILP not solved to optimality: {res.message}")
    chosen = {
        flows[f]: cands[f][p] for j, (f, p) in enumerate(var_of) if res.x[j] > 0.5
    }
    return round(res.x[z]), chosen
