"""One comparison row at scale: a routing of some collectives → their completion times against
the splittable optimum (pure; used by bench/te_scale.py and ``aifabric te simulate``).

A routing is either one path per flow (directed link ids, as :func:`controller.sim.fluid.simulate`
takes them) or per-packet spraying (fractional loads, :class:`controller.sim.strategies.
ClosRouter`). :func:`evaluate_routing` runs the fluid model and divides:

* the makespan by the splittable optimum T* (:func:`controller.sim.optimum.makespan_bound`):
  1.0 means no routing, split or not, could finish sooner;
* every collective's CCT by its link-rate ideal (its slowdown) and the slowdowns' fairness
  (:func:`controller.sim.jobs.jain_index` over ideal / CCT).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from controller.sim.compare import spray_rows
from controller.sim.fluid import PathIds, simulate
from controller.sim.jobs import jain_index
from controller.sim.optimum import Bound
from controller.sim.strategies import ClosRouter
from controller.te.collectives import FlowDemand
from controller.te.pathindex import PathIndex
from controller.te.patterns import Group, Traffic

__all__ = ["RowResult", "ecmp_summary", "evaluate_routing", "spray_rows"]


@dataclass(frozen=True)
class RowResult:
    """``vs_optimum``: makespan / T*; ``slowdown``: per collective CCT / ideal; ``fairness``:
    Jain's index of ideal / CCT over the collectives; ``cct_s``: per collective CCT."""

    vs_optimum: float
    slowdown: Mapping[str, float]
    fairness: float
    cct_s: Mapping[str, float]


def evaluate_routing(index: PathIndex, traffics: Sequence[Traffic], bound: Bound,
                     ideal_s: Mapping[str, float], *,
                     paths: Mapping[FlowDemand, PathIds] | None = None,
                     group_links: Callable[[Group], tuple[np.ndarray, np.ndarray]] | None = None,
                     priority: Mapping[str, int] | None = None) -> RowResult:
    """Fluid completion times of ``traffics`` routed by ``paths`` (or ``group_links``) on
    ``index``'s fabric state, against ``bound`` and ``ideal_s``. Raises KeyError (a flow
    without a path) or ValueError (no bandwidth)."""
    res = simulate(index, traffics, paths or {}, group_links=group_links, priority=priority)
    slow = {t: res.cct_s[t] / ideal_s[t] for t in res.cct_s}
    return RowResult(res.makespan_s / bound.makespan_s, slow,
                     jain_index([1.0 / x for x in slow.values()]), dict(res.cct_s))


def ecmp_summary(index: PathIndex, traffics: Sequence[Traffic], bound: Bound,
                 ideal_s: Mapping[str, float], seeds: Sequence[int]
                 ) -> tuple[RowResult, RowResult, list[float]]:
    """ECMP (ideal hashing) over ``seeds``: (mean row — ratios averaged over seeds —, the
    worst seed's row (largest makespan / T*), every seed's makespan / T*)."""
    flows = list(dict.fromkeys(f for t in traffics for f in t.flows))
    router = ClosRouter(index, flows)
    rows = [evaluate_routing(index, traffics, bound, ideal_s, paths=router.ecmp(s))
            for s in seeds]
    ratios = [r.vs_optimum for r in rows]
    worst = rows[int(np.argmax(ratios))]
    names = list(rows[0].slowdown)
    mean = RowResult(float(np.mean(ratios)),
                     {n: float(np.mean([r.slowdown[n] for r in rows])) for n in names},
                     float(np.mean([r.fairness for r in rows])),
                     {n: float(np.mean([r.cct_s[n] for r in rows])) for n in names})
    return mean, worst, ratios
