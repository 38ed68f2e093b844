"""Re-placing pinned flows when load or the fabric changes (pure: the caller passes ``now``).

* :func:`repair` — links or switches failed: only the flows whose path uses a failed link move;
  every other flow keeps its path and counts as fixed load.
* :func:`rebalance` — measured link loads (from port counters) show a link above a utilisation
  threshold: move the fewest flows that bring the maximum under it, with hysteresis so flows do
  not flap: a flow moved less than ``min_hold_s`` ago stays, and nothing moves unless the
  maximum utilisation falls by at least ``margin``.

Loads are bits/s, utilisation is load / capacity (dimensionless), times are seconds on the
caller's clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from controller.model.topology import Fabric
from controller.te import recovery
from controller.te.collectives import FlowDemand
from controller.te.greedy import best_candidate
from controller.te.hosts import base_load_array
from controller.te.loadstate import EPS, LoadState
from controller.te.pathindex import DirectedLink, Path, PathIndex
from controller.te.placement import Placement


@dataclass(frozen=True)
class RerouteResult:
    """Paths after a repair or rebalance.

    Attributes
    ----------
    paths : mapping of FlowDemand to tuple of str
        Every flow's path (moved or not).
    moved : tuple of FlowDemand
        The flows whose path changed, in input order.
    max_utilisation_before, max_utilisation_after : float
        Maximum directed-link utilisation before and after (with the background load).
    """

    paths: Mapping[FlowDemand, Path]
    moved: tuple[FlowDemand, ...]
    max_utilisation_before: float
    max_utilisation_after: float


@dataclass(frozen=True)
class Hysteresis:
    """When :func:`rebalance` acts.

    ``threshold``: act when a link's utilisation exceeds it (0.9 follows the "peaks under 95%"
    guidance for AI fabrics, with a safety margin); ``margin``: the
    minimum fall of the maximum utilisation worth moving flows for; ``min_hold_s``: seconds a
    moved flow stays on its new path before it may move again.
    """

    threshold: float = 0.9
    margin: float = 0.05
    min_hold_s: float = 5.0


def switch_links(fabric: Fabric, switch: str) -> frozenset[frozenset[str]]:
    """Every link of ``switch`` as down-link pairs (a switch failure). Raises KeyError."""
    if switch not in fabric.switch_by_name:
        raise KeyError(f"{switch!r} is not a switch of fabric {fabric.name!r}")
    return frozenset(frozenset((ln.a, ln.b)) for ln in fabric.links if switch in (ln.a, ln.b))


def _path_load(index: PathIndex, paths: Mapping[FlowDemand, Path],
               demands: Mapping[FlowDemand, float], skip: set[FlowDemand]) -> np.ndarray:
    """Σ demand per directed link over the flows of ``paths`` not in ``skip``, bits/s, shape
    (n_directed_links,); summed in flow then hop order, as sequential adds would."""
    flows = [d for d in paths if d not in skip]
    ids, starts = index.link_ids_flat([paths[d] for d in flows])
    w = np.repeat(np.asarray([demands[d] for d in flows], dtype=np.float64), np.diff(starts))
    return np.bincount(ids, weights=w, minlength=len(index.links))


def _row_of(state: LoadState, i: int, path: Path) -> int:
    ids = state.index.link_ids(path)[1:-1]
    c = state.cands[i]
    if c.shape[1] != len(ids):
        return -1
    hit = np.flatnonzero((c == ids).all(axis=1))
    return int(hit[0]) if len(hit) else -1


def repair(
    fabric: Fabric,
    paths: Mapping[FlowDemand, Path],
    demands: Mapping[FlowDemand, float],
    down_links: Iterable[frozenset[str]],
    *,
    base_load_bps: Mapping[DirectedLink, float] | None = None,
    index: PathIndex | None = None,
) -> RerouteResult:
    """Re-place only the flows whose path crosses a down link.

    Parameters
    ----------
    fabric : Fabric
    paths : mapping of FlowDemand to tuple of str
        Current path of every flow.
    demands : mapping of FlowDemand to float
        Demand of every flow in ``paths``, bits/s.
    down_links : iterable of frozenset of str
        Every link now down (a failed switch: :func:`switch_links`).
    base_load_bps : mapping, optional
        Background load per directed link, bits/s.
    index : PathIndex, optional
        The index of ``fabric`` before the failure (e.g. the one the paths were planned on);
        its down links stay down. Given, the failed state is derived from it incrementally
        (:meth:`PathIndex.with_down`) instead of being rebuilt from the fabric.

    Returns
    -------
    RerouteResult
        ``moved`` are exactly the flows that crossed a down link; ``max_utilisation_before`` is
        that of the old paths on the intact links (failed links excluded).

    Raises
    ------
    ValueError
        A moved flow has no path left, a demand is missing, a down link is unknown, or
        ``index`` is of another fabric.

    Notes
    -----
    A wrapper of :func:`controller.te.recovery.repair` for callers that hold node paths: one
    pass converts them to link ids (:meth:`Placement.from_paths`); a caller that keeps the
    :class:`~controller.te.placement.Placement` calls that function directly and saves it.
    """
    if index is not None and index.fabric is not fabric:
        raise ValueError(f"index is of fabric {index.fabric.name!r}, not {fabric.name!r}")
    idx = index if index is not None else PathIndex(fabric)
    placement = Placement.from_paths(idx, paths, demands, base_load_array(idx, base_load_bps))
    res = recovery.repair(placement, down_links)
    out = dict(paths)
    out.update((m.flow, m.new_path) for m in res.moves)
    return RerouteResult(out, res.moved, res.max_utilisation_before, res.max_utilisation_after)


def rebalance(
    fabric: Fabric,
    paths: Mapping[FlowDemand, Path],
    demands: Mapping[FlowDemand, float],
    measured_load_bps: Mapping[DirectedLink, float],
    now_s: float,
    last_moved_s: Mapping[FlowDemand, float],
    hysteresis: Hysteresis = Hysteresis(),
    down_links: Iterable[frozenset[str]] = frozenset(),
) -> RerouteResult:
    """Move the fewest flows that bring the maximum utilisation under the threshold.

    Parameters
    ----------
    fabric : Fabric
    paths : mapping of FlowDemand to tuple of str
        Current path of every pinned flow.
    demands : mapping of FlowDemand to float
        Expected rate of every pinned flow, bits/s.
    measured_load_bps : mapping of (str, str) to float
        Measured load per directed link, bits/s (port counters); a link left out is taken to
        carry only the pinned flows. Background = max(measured − pinned, 0) per link.
    now_s : float
        The current time, seconds.
    last_moved_s : mapping of FlowDemand to float
        When each flow last moved (absent: never).
    hysteresis : Hysteresis
    down_links : iterable of frozenset of str, optional

    Returns
    -------
    RerouteResult
        No flow moves when the maximum utilisation is at most ``threshold`` or no set of moves
        lowers it by at least ``margin``.

    Notes
    -----
    Greedy: while a link exceeds the threshold, among the movable flows on the hottest link
    the largest whose best alternative candidate (lowest bottleneck, background included)
    relieves it moves; each move strictly lowers that link, so at most one move per flow and
    link level. Largest-first makes a single move suffice whenever one can.

    The margin applies to every move as well as to the total: a flow moves only onto a path
    whose bottleneck is at least ``margin`` below the current maximum. Once the real hot spot
    is relieved, links that stay above the threshold only by measurement noise smaller than the
    margin (pinned flows at line rate, counters that disagree by a few per cent) do not move
    further flows.
    """
    idx = PathIndex(fabric, down_links)
    ours = _path_load(idx, paths, demands, set())
    measured = ours.copy()
    for uv, v in measured_load_bps.items():
        lid = idx.link_id.get(tuple(uv))  # type: ignore[arg-type]
        if lid is None:
            raise ValueError(f"measured load on {uv[0]}->{uv[1]}: not a link of the fabric")
        measured[lid] = v
    background = np.maximum(measured - ours, 0.0)
    util = (background + ours) / idx.capacity_bps
    u0 = float(util.max(initial=0.0))
    unchanged = RerouteResult(dict(paths), (), u0, u0)
    if u0 <= hysteresis.threshold:
        return unchanged
    hot = util > hysteresis.threshold
    movable = {
        d for d, p in paths.items()
        if now_s - last_moved_s.get(d, -np.inf) >= hysteresis.min_hold_s
        and hot[idx.link_ids(p)].any()
    }
    state = LoadState(idx, background + _path_load(idx, paths, demands, movable))
    for d in paths:
        if d in movable:
            i = state.add(d, demands[d])
            row = _row_of(state, i, paths[d])
            if row < 0:
                raise ValueError(f"flow {d.label}: its path is not a candidate of this fabric")
            state.place(i, row)
    start = list(state.choice)
    while True:
        m = state.max_utilisation()
        if m <= hysteresis.threshold + EPS:
            break
        lid = int(np.argmax(state.util))
        on = sorted(state.flows_on.get(lid, ()), key=lambda i: (-state.rate_bps[i], i))
        done = False
        for f in on:
            if state.choice[f] != start[f]:
                continue  # each flow moves at most once per call
            cur = state.choice[f]
            state.remove(f)
            ci, b = best_candidate(state, f, exclude=cur)
            if ci >= 0 and b < m - max(hysteresis.margin, EPS):
                state.place(f, ci)
                done = True
                break
            state.place(f, cur)
        if not done:
            break
    after = state.max_utilisation()
    if u0 - after < hysteresis.margin:
        return unchanged
    out = dict(paths)
    moved = []
    for i, d in enumerate(state.flows):
        if state.choice[i] != start[i]:
            out[d] = state.path(i)
            moved.append(d)
    order = {d: k for k, d in enumerate(paths)}
    return RerouteResult(out, tuple(sorted(moved, key=order.__getitem__)), u0, after)
