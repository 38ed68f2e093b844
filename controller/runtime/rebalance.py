"""Load-adaptive re-balancing of pinned flows (``routing.mode: pinned``). Pure: measured loads
and ``now`` in, a decision out.

* The background a round acts on is, per link, the **minimum of the last** ``persist_rounds``
  **rounds' estimates** (2 by default). Open vSwitch refreshes flow-entry counters from its
  datapath only every revalidation (up to 500 ms), while port counters are current, so when
  rates change the difference shows a transient "background" on links that carry none (up to a
  third of the link in the adaptive lab); a real background persists.
* **Queue depth** (P4 switches: fabric.p4's queue-depth histogram; OpenFlow has none): a link
  whose egress queue was standing for at least ``queued_fraction`` of the interval's packets
  (each found ``standing_depth`` or more ahead of it, :attr:`~.meter.LinkLoad.queued_fraction`)
  is congested now, whatever the counters' lag: its background is this round's estimate, without
  waiting ``persist_rounds`` rounds. The move rules below are unchanged.
* :func:`controller.te.reroute.rebalance` moves the fewest pinned flows so that (background +
  pinned *demand*) / capacity falls under the threshold, with its hysteresis (margin, hold
  time). Demands are the link-rate-bound rates of
  :func:`controller.runtime.placement.pinned_demands_bps` with every pinned flow running at
  once: what the collective needs, not what it gets while squeezed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from controller.runtime.meter import LinkLoad
from controller.runtime.state import DirectedLink, Path, RebalanceMemory, RuntimeState
from controller.te.collectives import FlowDemand
from controller.te.reroute import Hysteresis
from controller.te.reroute import rebalance as te_rebalance


@dataclass(frozen=True)
class FlowMove:
    """A pinned flow the re-balancer moved: its old and new paths (host … host)."""

    flow: FlowDemand
    old_path: Path
    new_path: Path

    def switch(self) -> str:
        """The switch whose entry changed: the last node both paths share before they part."""
        k = next((i for i, (a, b) in enumerate(zip(self.old_path, self.new_path, strict=False))
                  if a != b), 2)
        return self.old_path[max(k - 1, 1)]


@dataclass(frozen=True)
class RebalanceOutcome:
    """What one re-balancing round decided.

    ``placement``: the new placement when flows moved (None otherwise); ``moves``: the moved
    flows; ``hot``: the links above the threshold (their measured loads), hottest first;
    ``max_utilisation_before/after``: (background + demand) / capacity over all links, before
    and after the moves (equal when nothing moved); ``reason``: why nothing moved, if so;
    ``memory``: the re-balancer's history after the round; ``generation``: the state it was
    computed from.
    """

    memory: RebalanceMemory
    generation: int
    placement: Mapping[FlowDemand, Path] | None = None
    moves: tuple[FlowMove, ...] = ()
    hot: tuple[LinkLoad, ...] = ()
    max_utilisation_before: float = 0.0
    max_utilisation_after: float = 0.0
    reason: str = ""
    now_s: float = 0.0


def persistent_loads(raw: Mapping[DirectedLink, LinkLoad], memory: RebalanceMemory,
                     rounds: int, queued_fraction: float | None = None
                     ) -> tuple[dict[DirectedLink, LinkLoad],
                                dict[DirectedLink, tuple[float, ...]]]:
    """The loads a round acts on and the updated history: background = minimum over the last
    ``rounds`` estimates (only links with that many), or this round's estimate on a link whose
    ``queued_fraction`` reached ``queued_fraction`` (None: queue depth not used; module
    docstring)."""
    hist: dict[DirectedLink, tuple[float, ...]] = {}
    loads: dict[DirectedLink, LinkLoad] = {}
    for k, ld in raw.items():
        h = (*memory.background_bps.get(k, ()), ld.background_bps)[-rounds:]
        hist[k] = h
        queued = (queued_fraction is not None and ld.queued_fraction is not None
                  and ld.queued_fraction >= queued_fraction)
        if queued or len(h) == rounds:
            bg = ld.background_bps if queued else min(h)
            # total - pinned = bg  →  pinned' = total - bg
            loads[k] = LinkLoad(k, ld.capacity_bps, ld.total_bps, ld.total_bps - bg,
                                ld.planned_bps, ld.queued_fraction)
    return loads, hist


def rebalance_round(state: RuntimeState, raw: Mapping[DirectedLink, LinkLoad],
                    demands_bps: Mapping[FlowDemand, float], now_s: float) -> RebalanceOutcome:
    """One round on the measured loads ``raw`` of this round (module docstring)."""
    hys = state.settings.rebalance or Hysteresis()
    mem = state.rebalance
    gen = state.generation
    if not state.placement:
        return RebalanceOutcome(mem, gen, reason="no pinned flows", now_s=now_s)
    cfg = state.settings
    loads, hist = persistent_loads(raw, mem, cfg.persist_rounds,
                                   cfg.queued_fraction if cfg.standing_depth else None)
    mem2 = replace(mem, background_bps=hist)
    if not loads:
        return RebalanceOutcome(mem2, gen, reason="no link loads measured yet", now_s=now_s)
    floor = hys.margin
    hot = tuple(sorted((ld for ld in loads.values() if ld.utilisation > hys.threshold
                        and ld.background_bps >= floor * ld.capacity_bps),
                       key=lambda ld: -ld.utilisation))
    measured = {k: ld.background_bps + ld.planned_bps for k, ld in loads.items()}
    res = te_rebalance(state.fabric, state.placement, demands_bps, measured, now_s,
                       mem.last_moved_s, hys, state.down_links)
    u0, u1 = res.max_utilisation_before, res.max_utilisation_after
    if not res.moved:
        why = ("no link above the threshold with background" if not hot else
               "no move lowers the maximum utilisation by the margin, or the flows on "
               "the hot links moved less than the hold time ago")
        return RebalanceOutcome(mem2, gen, None, (), hot, u0, u0, why, now_s)
    new_paths = dict(res.paths)
    moves = tuple(FlowMove(d, state.placement[d], new_paths[d]) for d in res.moved)
    moved_at = {**mem.last_moved_s, **{d: now_s for d in res.moved}}
    mem3 = RebalanceMemory(moved_at, {}, now_s, mem.hot_reported)
    return RebalanceOutcome(mem3, gen, new_paths, moves, hot, u0, u1, "", now_s)
