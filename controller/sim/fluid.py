"""A fluid (flow-level) model of collectives on a fabric.

Rates are max-min fair, computed by progressive filling (Bertsekas & Gallager, *Data Networks*,
2nd ed., 1992, §6.5.2): all unfrozen sessions grow at the same rate until a link saturates (or a
session reaches its own cap); sessions crossing a saturated link freeze; repeat. A *session* is
either a lock-step group of a collective (a ring: every step waits for its slowest neighbour
flow, so all its flows send at one rate; a link crossed by several of its flows counts each) or a
background flow capped at its rate.

Collective completion time (CCT, seconds) comes from an event-driven run: rates are recomputed
whenever a group finishes; a collective's phases run one after another. The *ideal* CCT of a
collective is the link-rate bound: the same run with the collective alone and only its hosts'
access links limiting (fabric links of infinite capacity).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix

from controller.te.collectives import FlowDemand
from controller.te.pathindex import PathIndex
from controller.te.patterns import Group, Traffic

_REL = 1e-9

PathIds = Sequence[int] | np.ndarray
"""A path as directed link ids (of a :class:`PathIndex`)."""


def max_min_rates(incidence: csr_matrix, capacity_bps: np.ndarray,
                  max_rate_bps: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair session rates by progressive filling (Bertsekas & Gallager 1992, §6.5.2).

    Parameters
    ----------
    incidence : scipy.sparse.csr_matrix, shape (sessions, links)
        How many of a session's flows cross each link (a session's rate counts that often).
    capacity_bps : numpy.ndarray, shape (links,)
        Link capacities, bits/s (``inf`` allowed).
    max_rate_bps : numpy.ndarray, shape (sessions,), optional
        Per-session cap (``inf`` = none).

    Returns
    -------
    numpy.ndarray, shape (sessions,)
        Rate of each session, bits/s.

    Raises
    ------
    ValueError
        A session crosses no finite-capacity link and has no finite cap (its rate is unbounded).
    """
    n_s = incidence.shape[0]
    caps = np.full(n_s, np.inf) if max_rate_bps is None else np.asarray(max_rate_bps, float)
    rate = np.zeros(n_s)
    frozen = np.zeros(n_s, dtype=bool)
    res = np.asarray(capacity_bps, dtype=float).copy()
    at = incidence.T.tocsr()
    while not frozen.all():
        act = (~frozen).astype(float)
        per_link = at @ act
        used = per_link > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            inc_l = np.min(res[used] / per_link[used]) if used.any() else np.inf
        inc_c = np.min(caps[~frozen] - rate[~frozen])
        inc = min(inc_l, inc_c)
        if not np.isfinite(inc):
            raise ValueError("a session has unbounded rate (no finite link and no cap)")
        rate[~frozen] += inc
        res[used] -= inc * per_link[used]
        sat = used & (res <= _REL * np.where(np.isfinite(capacity_bps), capacity_bps, 1.0))
        frozen |= (incidence @ sat.astype(float)) > 0
        frozen |= rate >= caps - _REL * np.where(np.isfinite(caps), caps, 1.0)
    return rate


def prioritised_max_min_rates(incidence: csr_matrix, capacity_bps: np.ndarray,
                              max_rate_bps: np.ndarray, priority: np.ndarray) -> np.ndarray:
    """Rates under strict-priority queues: the sessions of the highest priority share the links
    max-min fairly (:func:`max_min_rates`), the next priority shares what they leave, and so on
    (every link serves its queues in strict priority, work-conserving; Bertsekas & Gallager 1992,
    §6.5.2, applied per class). Shapes as :func:`max_min_rates`; ``priority`` (sessions,)."""
    levels = np.unique(priority)
    if len(levels) <= 1:
        return max_min_rates(incidence, capacity_bps, max_rate_bps)
    rate = np.zeros(incidence.shape[0])
    residual = np.asarray(capacity_bps, dtype=float).copy()
    for lvl in levels[::-1]:
        sel = np.flatnonzero(priority == lvl)
        sub = incidence[sel]
        r = max_min_rates(sub, np.maximum(residual, 0.0), max_rate_bps[sel])
        rate[sel] = r
        residual = residual - sub.T @ r
    return rate


@dataclass(frozen=True)
class Background:
    """A background flow on a fixed path (directed link ids), capped at ``rate_bps``."""

    links: tuple[int, ...]
    rate_bps: float


@dataclass(frozen=True)
class SimResult:
    """``cct_s``: collective name → completion time, s; ``link_utilisation``: directed link id →
    utilisation at t = 0 (links with traffic); ``makespan_s``: the last completion."""

    cct_s: Mapping[str, float]
    link_utilisation: Mapping[int, float]
    makespan_s: float


def simulate(
    index: PathIndex,
    traffics: Sequence[Traffic],
    paths: Mapping[FlowDemand, PathIds],
    background: Sequence[Background] = (),
    capacity_bps: np.ndarray | None = None,
    *,
    group_links: Callable[[Group], tuple[np.ndarray, np.ndarray]] | None = None,
    priority: Mapping[str, int] | None = None,
) -> SimResult:
    """Run ``traffics`` (all starting at t = 0) on ``paths`` (flow → directed link ids).

    Parameters
    ----------
    index : PathIndex
        Link ids and capacities.
    traffics : sequence of Traffic
        Collectives; names must be distinct.
    paths : mapping of FlowDemand to sequence of int
        The path of every flow of every traffic, as directed link ids.
    background : sequence of Background
        Endless capped flows.
    capacity_bps : numpy.ndarray, optional
        Override of the link capacities (e.g. for the ideal), bits/s.
    group_links : callable, optional
        A group → (directed link ids, how many of the group's flows cross each, possibly
        fractional): split routing such as per-packet spraying (``paths`` is then unused).
    priority : mapping of str to int, optional
        Traffic name → strict-priority queue (higher is served first; background and unlisted
        traffics 0): :func:`prioritised_max_min_rates`.

    Returns
    -------
    SimResult

    Raises
    ------
    KeyError
        A flow has no path.
    """
    cap = index.capacity_bps if capacity_bps is None else capacity_bps
    n_links = len(cap)
    phase = {t.name: 0 for t in traffics}
    # (traffic, link ids, how often each is crossed per unit of the group's rate, bytes)
    groups: list[tuple[str, np.ndarray, np.ndarray, float]] = []

    def links_of(g: Group) -> tuple[np.ndarray, np.ndarray]:
        if group_links is not None:
            return group_links(g)
        ids = np.concatenate([np.asarray(paths[f], dtype=np.int64) for f in g.flows])
        return ids, np.ones(len(ids))

    def start(t: Traffic) -> None:
        for g in t.phases[phase[t.name]]:
            ids, w = links_of(g)
            groups.append((t.name, ids, w, float(g.bytes_per_flow)))

    by_name = {t.name: t for t in traffics}
    for t in traffics:
        start(t)
    bg_rows = [np.asarray(b.links, dtype=np.int64) for b in background]
    bg_caps = np.asarray([b.rate_bps for b in background], dtype=float)
    prio_of = dict(priority or {})
    now = 0.0
    cct: dict[str, float] = {}
    first_util: dict[int, float] | None = None
    while groups:
        rows = [g[1] for g in groups] + bg_rows
        weights = [g[2] for g in groups] + [np.ones(len(r)) for r in bg_rows]
        r_idx = np.repeat(np.arange(len(rows)), [len(r) for r in rows])
        inc = csr_matrix((np.concatenate(weights), (r_idx, np.concatenate(rows))),
                         shape=(len(rows), n_links))
        caps = np.r_[np.full(len(groups), np.inf), bg_caps]
        prio = np.asarray([prio_of.get(g[0], 0) for g in groups] + [0] * len(bg_rows))
        rate = prioritised_max_min_rates(inc, cap, caps, prio)
        if first_util is None:
            load = inc.T @ rate
            nz = np.flatnonzero(load > 0)
            first_util = {int(i): float(load[i] / index.capacity_bps[i]) for i in nz}
        g_rate = rate[:len(groups)]
        if not (g_rate > 0).any():
            raise ValueError("no collective flow gets bandwidth (a link of zero capacity?)")
        with np.errstate(divide="ignore"):  # a starved group (lower priority) waits
            left = np.where(g_rate > 0, np.asarray([g[3] for g in groups]) * 8.0 / g_rate,
                            np.inf)
        dt = float(left.min())
        now += dt
        remaining: list[tuple[str, np.ndarray, np.ndarray, float]] = []
        finished: set[str] = set()
        for (name, ids, w, b), r, t_left in zip(groups, g_rate, left, strict=True):
            if t_left <= dt * (1 + 1e-12) + 1e-15:
                finished.add(name)
            else:
                remaining.append((name, ids, w, b - r * dt / 8.0))
        groups = remaining
        for name in sorted(finished):
            if any(g[0] == name for g in groups):
                continue  # other groups of this phase still run
            phase[name] += 1
            if phase[name] < len(by_name[name].phases):
                start(by_name[name])
            else:
                cct[name] = now
    return SimResult(cct, first_util or {}, max(cct.values(), default=0.0))


def ideal_cct_s(index: PathIndex, traffic: Traffic, paths: Mapping[FlowDemand, PathIds]
                ) -> float:
    """The link-rate bound: ``traffic`` alone, only host access links finite (module docstring)."""
    hosts = set(index.fabric.host_by_name)
    access = np.asarray([u in hosts or v in hosts for u, v in index.links])
    cap = np.where(access, index.capacity_bps, np.inf)
    return simulate(index, [traffic], paths, capacity_bps=cap).cct_s[traffic.name]
