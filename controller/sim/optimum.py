"""The splittable optimum: how fast any routing could finish, flows split as finely as wanted.

For collectives that start together, every byte of flow f (B_f bits over its whole life, all
phases) crosses the fabric on some mix x_{f,p} of its candidate paths, so the last one finishes
no earlier than

    T* = min_x max_e Σ_f Σ_{p ∋ e} B_f x_{f,p} / c_e        (Σ_p x_{f,p} = 1, x ≥ 0)

— the min-max utilisation LP of :mod:`controller.te.lp` with volumes in place of rates
(Raghavan & Thompson, Combinatorica 7(4), 1987, §2). Any pinning, ECMP draw, spraying or
schedule has a makespan ≥ T*; a collective alone, also ≥ the sum over its phases of each phase's
T*. :func:`makespan_bound` solves the LP with HiGHS (:func:`scipy.optimize.linprog`) when it has
at most ``lp_max_variables`` path variables (flows between the same two hosts merged: with
splitting allowed they are one commodity), and otherwise takes the cut bound of
:func:`controller.te.bounds.load_lower_bound` without its pigeonhole term (leaf and pod cuts,
access links), which is ≤ the LP — so the ratio printed against it is an upper bound on the
ratio to the LP.

:func:`fluid_busbw_bound_bps` is the same LP turned into a rate: the largest equal rate every
flow of some rings can carry at once over a (failed) fabric, i.e. the busbw bound of a ring
all-reduce (each ring link carries busbw; nccl-tests PERFORMANCE.md) that a lab compares its
pinned busbw against.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from controller.model.topology import Fabric
from controller.sim.fluid import PathIds, ideal_cct_s
from controller.te.bounds import load_lower_bound
from controller.te.collectives import FlowDemand
from controller.te.loadstate import LoadState
from controller.te.lp import min_max_utilisation_lp
from controller.te.pathindex import PathIndex
from controller.te.patterns import Traffic

LP_MAX_VARIABLES = 150_000
"""Path variables up to which :func:`makespan_bound` solves the LP (HiGHS); above, the cut bound."""
PER_JOB_LP_SHARE = 10
"""The per-job bounds (one LP per job and phase) use the LP only up to
``lp_max_variables / PER_JOB_LP_SHARE`` variables: many jobs, each alone far from the joint
bound, need not cost an LP each."""


@dataclass(frozen=True)
class Bound:
    """A lower bound on completion times, seconds.

    ``makespan_s``: on the last collective to finish (all together); ``per_job_s``: on each
    collective (alone, phases in sequence, and never below its link-rate ideal); ``method``:
    ``"lp"`` or ``"cut"`` for the joint bound."""

    makespan_s: float
    per_job_s: Mapping[str, float]
    method: str


def _volumes(traffics: Sequence[Traffic]) -> dict[FlowDemand, float]:
    """Bits each flow carries over its life (all phases)."""
    out: dict[FlowDemand, float] = {}
    for t in traffics:
        for ph in t.phases:
            for g in ph:
                for f in g.flows:
                    out[f] = out.get(f, 0.0) + 8.0 * g.bytes_per_flow
    return out


def _merged(vol: Mapping[FlowDemand, float]) -> dict[FlowDemand, float]:
    """One commodity per (src, dst) host pair: volumes summed (exact for a splittable LP)."""
    by: dict[tuple[str, str], float] = {}
    for f, b in vol.items():
        by[(f.src, f.dst)] = by.get((f.src, f.dst), 0.0) + b
    return {FlowDemand("pair", i, s, d): b for i, ((s, d), b) in enumerate(by.items())}


def min_time_s(index: PathIndex, volume_bits: Mapping[FlowDemand, float], *,
               lp_max_variables: int = LP_MAX_VARIABLES) -> tuple[float, str]:
    """T* for these volumes (module docstring): (seconds, ``"lp"`` or ``"cut"``).

    Raises
    ------
    ValueError
        A flow has no path over the links that are up.
    """
    if not volume_bits:
        return 0.0, "lp"
    merged = _merged(volume_bits)
    state = LoadState(index)
    state.add_many(merged.items())
    n_vars = sum(state.n_cands)
    if n_vars <= lp_max_variables:
        # scaled so the largest flow alone fills the slowest link in 1: the LP's optimum is
        # then of order 1, where HiGHS's absolute tolerances (1e-7) are small
        scale = max(merged.values()) / float(index.capacity_bps.min())
        lp = min_max_utilisation_lp(index.fabric, {f: b / scale for f, b in merged.items()},
                                    index.down)
        return lp * scale, "lp"
    return load_lower_bound(state, integral=False), "cut"


def makespan_bound(index: PathIndex, traffics: Sequence[Traffic], *,
                   lp_max_variables: int = LP_MAX_VARIABLES) -> Bound:
    """Lower bounds on the makespan and on each collective's CCT under any routing, flows split
    freely (module docstring). Raises ValueError (a flow without path)."""
    joint, method = min_time_s(index, _volumes(traffics), lp_max_variables=lp_max_variables)
    per_job: dict[str, float] = {}
    for t in traffics:
        seq = 0.0
        for ph in t.phases:
            seq += min_time_s(index, _volumes([Traffic(t.name, t.size_bytes, (ph,))]),
                              lp_max_variables=lp_max_variables // PER_JOB_LP_SHARE)[0]
        per_job[t.name] = seq
    return Bound(max([joint, *per_job.values()]), per_job, method)


def ideal_s(index: PathIndex, traffics: Sequence[Traffic],
            paths: Mapping[FlowDemand, PathIds]) -> dict[str, float]:
    """Each collective's link-rate ideal (:func:`controller.sim.fluid.ideal_cct_s`)."""
    return {t.name: ideal_cct_s(index, t, paths) for t in traffics}


def fluid_busbw_bound_bps(fabric: Fabric, rings: Sequence[Sequence[str]],
                          down_links: Iterable[frozenset[str]] = frozenset()) -> float:
    """The busbw bound of ring all-reduces over a fabric with ``down_links`` down, flows split
    freely: the largest rate r such that every ring flow (rank i → i+1 of every ring) can carry
    r at once, bits/s. ``1 / U*`` where U* is the LP optimum of unit demands
    (:func:`controller.te.lp.min_max_utilisation_lp`, HiGHS); on an intact non-blocking fabric
    the host link rate.

    Raises
    ------
    ValueError
        A ring has fewer than 2 ranks, or a flow has no path.

    Examples
    --------
    >>> from controller.model import build_leaf_spine
    >>> f = build_leaf_spine("ls", 2, 4, 2, 15 * 10**6, 15 * 10**6, 1.0, 1.0)
    >>> rings = [["h1", "h3", "h5", "h7"], ["h2", "h4", "h6", "h8"]]
    >>> round(fluid_busbw_bound_bps(f, rings) / 1e6, 3)
    15.0
    >>> round(fluid_busbw_bound_bps(f, rings, [frozenset({"leaf1", "spine1"})]) / 1e6, 3)
    7.5
    """
    demands: dict[FlowDemand, float] = {}
    for k, ring in enumerate(rings):
        if len(ring) < 2:
            raise ValueError(f"ring {k} needs at least 2 ranks, got {list(ring)!r}")
        n = len(ring)
        for i in range(n if n > 2 else 1):
            demands[FlowDemand(f"ring{k}", i, ring[i], ring[(i + 1) % n])] = 1.0
            if n == 2:
                demands[FlowDemand(f"ring{k}", 1, ring[1], ring[0])] = 1.0
    u = min_max_utilisation_lp(fabric, demands, down_links)
    return float(1.0 / u) if u > 0 else float(np.inf)
