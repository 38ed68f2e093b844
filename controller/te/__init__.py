"""Traffic engineering: pure algorithms over an immutable :class:`~controller.model.Fabric`.

* :mod:`controller.te.ecmp` — per-destination ECMP next-hop port sets (hop-count shortest paths);
* :mod:`controller.te.ecmphash` — header-hash ECMP: fields, per-tier seeds, polarisation;
* :mod:`controller.te.collectives` — a policy collective → its point-to-point flow demands;
* :mod:`controller.te.paths` — candidate shortest valley-free paths between two hosts;
* :mod:`controller.te.placer` — one path per demand, minimising the busiest link's utilisation:
  the one placer of start-up, registration, repair, re-balancing and re-optimisation (its
  pieces: :mod:`~controller.te.loadstate`, :mod:`~controller.te.greedy`,
  :mod:`~controller.te.localsearch`, :mod:`~controller.te.bounds`, :mod:`~controller.te.recovery`,
  :mod:`~controller.te.reroute`);
* :mod:`controller.te.exact` — the flow-count objective solved exactly (MILP; small instances,
  tests);
* :mod:`controller.te.invariants` — loop-freedom, reachability, valley-freedom checks.

Nothing here does I/O or reads a clock; every function returns values.
"""

from controller.te.collectives import FlowDemand, expand_collective, expand_policy
from controller.te.ecmp import NextHops, ecmp_next_hops
from controller.te.invariants import check_path, check_routes
from controller.te.paths import PathOracle, candidate_paths
from controller.te.placer import LoadPinning, place, place_policy

__all__ = [
    "FlowDemand",
    "LoadPinning",
    "NextHops",
    "PathOracle",
    "candidate_paths",
    "check_path",
    "check_routes",
    "ecmp_next_hops",
    "expand_collective",
    "expand_policy",
    "place",
    "place_policy",
]
