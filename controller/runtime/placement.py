"""Where pinned flows go: the decisions that change the placement, as pure functions the
controller runs off its event loop (in an executor) and applies only if the state has not moved
on (:attr:`~controller.runtime.state.RuntimeState.generation`).

* :func:`initial_placement`: a policy's collectives pinned from scratch
  (:func:`controller.te.placer.place_policy`, the one placer every phase below uses too).
* **Link events are handled in two phases** (issue 15), each a pluggable function of a
  :class:`PlacementInput` returning a :class:`PlacementDecision`:

  1. an immediate **repair** (:data:`Repair`; the default :func:`repair_moved` is
     :func:`controller.te.recovery.repair`: only the flows whose path crosses a link now down
     move, around the flows that stay; a link back up is :func:`controller.te.recovery.restore`:
     nothing moves);
  2. a background **re-optimisation** (:data:`Reoptimise`; the default
     :func:`reoptimise_moves` is :func:`controller.te.recovery.reoptimise`: the fewest moves
     that bring the maximum utilisation down to the lower bound), whose moves come in
     make-before-break order and are applied in batches (:func:`move_batches`) so no switch
     ever holds more than the table headroom of extra entries while a move is in flight.

  Until a repair is in force the intended plan already leaves out pinned entries whose path
  crosses a down link (their traffic falls back to the ECMP routes, which avoid it): the
  fabric forwards correctly before any placement is computed.
* Both phases work on a :class:`controller.te.placement.Placement` (paths as link ids, the
  value that makes a repair cheap at 65,536 flows); the runtime's placement is node paths.
  :func:`te_placement` converts, and a decision carries the converted value so the next event
  starts from it (:attr:`PlacementInput.current`) instead of converting again.
* :func:`pinned_demands_bps`: each pinned flow's demand, the weight every placement balances.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from controller.model.topology import Fabric
from controller.plan.capacity import DEFAULT_HEADROOM
from controller.policy.model import Policy
from controller.te import placer
from controller.te.collectives import FlowDemand
from controller.te.pathindex import PathIndex
from controller.te.placement import Placement as TePlacement
from controller.te.recovery import REOPTIMISE_BUDGET as _REOPTIMISE_BUDGET
from controller.te.recovery import Move

Path = tuple[str, ...]
DownLinks = frozenset[frozenset[str]]
Placement = Mapping[FlowDemand, Path]

REOPTIMISE_BUDGET = _REOPTIMISE_BUDGET
"""Candidate evaluations a background re-optimisation may spend (≈ 1 µs each)."""


def pinned_demands_bps(fabric: Fabric, flows: Iterable[FlowDemand]) -> dict[FlowDemand, float]:
    """Each pinned flow's demand, bit/s: its rate in the link-rate-bound schedule with every
    pinned flow running at once (:func:`controller.te.patterns.demand_rates_bps`, one phase);
    the sub-flows of a transfer share it (each has 1/n);
    :func:`controller.te.placer.pinned_demands_bps`."""
    return placer.pinned_demands_bps(fabric, flows)


def initial_placement(fabric: Fabric, policy: Policy,
                      down_links: DownLinks = frozenset()) -> dict[FlowDemand, Path]:
    """Every flow of the policy's collectives pinned (``routing.mode: pinned``; {} otherwise);
    with ``connections_per_peer`` every sub-flow on its own path. Each flow is weighted by
    :func:`pinned_demands_bps` and the maximum link utilisation minimised
    (:func:`controller.te.placer.place_policy`).

    Raises
    ------
    ValueError
        A flow has no path (the message names it).
    """
    if policy.routing.mode != "pinned":
        return {}
    return dict(placer.place_policy(fabric, policy, down_links).paths)


def te_placement(fabric: Fabric, paths: Placement, down_links: DownLinks) -> TePlacement:
    """``paths`` as a :class:`controller.te.placement.Placement` on the fabric state with
    ``down_links`` down, each flow weighted by :func:`pinned_demands_bps`.

    Raises
    ------
    ValueError
        ``down_links`` names an unknown link.
    KeyError
        A hop of a path is not a link of the fabric.
    """
    index = PathIndex(fabric, down_links)
    return TePlacement.from_paths(index, paths, pinned_demands_bps(fabric, paths))


@dataclass(frozen=True)
class PlacementInput:
    """What a repair or re-optimisation decides from: the fabric, the policy with the
    registered collectives, the current placement, and the links down now and before the
    event. ``current``: ``placement`` as a te placement on any earlier fabric state (what the
    last decision computed; the caller vouches that it holds the same paths); None: converted
    here."""

    fabric: Fabric
    policy: Policy
    placement: Placement
    down_links: DownLinks
    previous_down_links: DownLinks
    current: TePlacement | None = None


@dataclass(frozen=True)
class PlacementDecision:
    """A placement computed off the loop.

    Attributes
    ----------
    paths : dict of FlowDemand to tuple of str
        Every flow's path (host … host), in the input's flow order.
    te : Placement or None
        The same paths as a te placement on the fabric state decided for (the next decision
        starts from it); None when not computed.
    moves : tuple of Move
        Flows whose path changed, old → new; for a re-optimisation in make-before-break order
        (:func:`controller.te.recovery.order_moves`).
    max_utilisation_before, max_utilisation_after, lower_bound : float
        Of the placement on the links up (:mod:`controller.te.recovery`); 0 when not known.
    """

    paths: dict[FlowDemand, Path]
    te: TePlacement | None = None
    moves: tuple[Move, ...] = ()
    max_utilisation_before: float = 0.0
    max_utilisation_after: float = 0.0
    lower_bound: float = 0.0

    def describe(self) -> str:
        """``2 flow(s) moved; max utilisation 1.00 -> 2.00 (lower bound 2.00)``."""
        return (f"{len(self.moves)} flow(s) moved; max utilisation "
                f"{self.max_utilisation_before:.2f} -> {self.max_utilisation_after:.2f} "
                f"(lower bound {self.lower_bound:.2f})")


Repair = Callable[[PlacementInput], PlacementDecision]
"""An immediate repair: every path of the result avoids ``down_links``."""
Reoptimise = Callable[[PlacementInput], PlacementDecision | None]
"""A background re-optimisation: a better placement, or None to keep the current one."""


def _same_paths(cur: TePlacement | None, paths: Placement) -> bool:
    return cur is not None and len(cur.flows) == len(paths) and all(
        d in paths for d in cur.flows)


def repair_moved(inp: PlacementInput) -> PlacementDecision:
    """Phase 1 (module docstring): move only the flows whose path crosses a link down now
    (:func:`controller.te.recovery.repair`); links back up are restored first
    (:func:`controller.te.recovery.restore`: nothing moves, the capacity is there for the
    re-optimisation).

    Raises
    ------
    ValueError
        A flow that must move has no path left (the message names it).
    """
    if not inp.placement:
        return PlacementDecision({})
    now = frozenset(inp.down_links)
    cur = inp.current if _same_paths(inp.current, inp.placement) else None
    if cur is None:  # the flows on dead links are found by the index's link state, not a delta
        cur = te_placement(inp.fabric, inp.placement, now)
    back = cur.index.down - now
    if back:
        cur = placer.restore(cur, back)
    res = placer.repair(cur, now - cur.index.down)
    moved = {m.flow: m.new_path for m in res.moves}
    paths = {d: moved.get(d, tuple(p)) for d, p in inp.placement.items()}
    return PlacementDecision(paths, res.placement, res.moves, res.max_utilisation_before,
                             res.max_utilisation_after, res.lower_bound)


def reoptimise_moves(inp: PlacementInput, *,
                     search_budget: int = REOPTIMISE_BUDGET) -> PlacementDecision | None:
    """Phase 2 (module docstring): the fewest moves that bring the maximum utilisation down
    to the lower bound (:func:`controller.te.recovery.reoptimise`), in make-before-break order;
    None when nothing moves."""
    if not inp.placement:
        return None
    cur = inp.current if _same_paths(inp.current, inp.placement) else None
    if cur is None or cur.index.down != frozenset(inp.down_links):
        cur = te_placement(inp.fabric, inp.placement, inp.down_links)
    res = placer.reoptimise(cur, search_budget=search_budget)
    if not res.moves:
        return None
    moved = {m.flow: m.new_path for m in res.moves}
    paths = {d: moved.get(d, tuple(p)) for d, p in inp.placement.items()}
    return PlacementDecision(paths, res.placement, res.moves, res.max_utilisation_before,
                             res.max_utilisation_after, res.lower_bound)


def added_entries(move: Move) -> tuple[str, ...]:
    """Switches that get an entry for ``move.flow`` before its divergence switch moves it:
    the new path's switches after the divergence (both paths' entries exist there until the
    old one is deleted)."""
    path = move.new_path
    return tuple(path[move.divergence + 1:len(path) - 1])


def move_batches(moves: Iterable[Move], headroom: int = DEFAULT_HEADROOM
                 ) -> tuple[tuple[Move, ...], ...]:
    """``moves`` (in make-before-break order) cut into consecutive batches, each applied as
    one transaction (make, move, break), so that no switch gets more than ``headroom``
    entries added in one batch (:func:`added_entries`) — the entries the table capacity
    fitting keeps free (:data:`controller.plan.capacity.DEFAULT_HEADROOM`). A batch has at
    least one move; order is kept."""
    out: list[tuple[Move, ...]] = []
    cur: list[Move] = []
    used: dict[str, int] = {}
    room = max(int(headroom), 1)
    for m in moves:
        add = added_entries(m)
        if cur and any(used.get(sw, 0) + 1 > room for sw in add):
            out.append(tuple(cur))
            cur, used = [], {}
        cur.append(m)
        for sw in add:
            used[sw] = used.get(sw, 0) + 1
    if cur:
        out.append(tuple(cur))
    return tuple(out)


def apply_moves(paths: Placement, moves: Iterable[Move]) -> dict[FlowDemand, Path]:
    """``paths`` with each move's flow on its new path (order and other flows kept).

    Raises
    ------
    KeyError
        A move's flow is not in ``paths``.
    """
    out = {d: tuple(p) for d, p in paths.items()}
    for m in moves:
        if m.flow not in out:
            raise KeyError(f"flow {m.flow.label} is not placed")
        out[m.flow] = m.new_path
    return out
