"""Where pinned flows go: the decisions that change the placement, as pure functions the
controller runs off its event loop (in an executor) and applies only if the state has not moved
on (:attr:`~controller.runtime.state.RuntimeState.generation`).

* :func:`initial_placement`: a policy's collectives pinned from scratch
  (:func:`controller.te.pinning.pin_flows`).
* **Link events are handled in two steps**, each a pluggable function of a
  :class:`PlacementInput`: an immediate **repair** (:data:`Repair`; the default,
  :func:`repin_all`, re-pins every flow around the down links, as the controller always did),
  and an optional background **re-optimisation** (:data:`Reoptimise`; none by default) run after
  the repair is in force. Until a repair is in force the intended plan already leaves out pinned
  entries whose path crosses a down link (their traffic falls back to the ECMP routes, which
  avoid it): the fabric forwards correctly before any placement is computed.
* :func:`pinned_demands_bps`: each pinned flow's demand, the weight every placement balances.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from controller.model.topology import Fabric
from controller.policy.model import Policy
from controller.te.collectives import FlowDemand, expand_policy
from controller.te.patterns import Group, Traffic, demand_rates_bps
from controller.te.pinning import pin_flows

Path = tuple[str, ...]
DownLinks = frozenset[frozenset[str]]
Placement = Mapping[FlowDemand, Path]


def pinned_demands_bps(fabric: Fabric, flows: Iterable[FlowDemand]) -> dict[FlowDemand, float]:
    """Each pinned flow's demand, bit/s: its rate in the link-rate-bound schedule with every
    pinned flow running at once (:func:`controller.te.patterns.demand_rates_bps`, one phase)."""
    fl = tuple(flows)
    if not fl:
        return {}
    return demand_rates_bps(fabric, [Traffic("pinned", 0.0, ((Group(fl, 0.0),),))])


def initial_placement(fabric: Fabric, policy: Policy,
                      down_links: DownLinks = frozenset()) -> dict[FlowDemand, Path]:
    """Every flow of the policy's collectives pinned (``routing.mode: pinned``; {} otherwise).

    Raises
    ------
    ValueError
        A flow has no path (the message names it).
    """
    if policy.routing.mode != "pinned":
        return {}
    return dict(pin_flows(fabric, expand_policy(policy, fabric), down_links).paths)


@dataclass(frozen=True)
class PlacementInput:
    """What a repair or re-optimisation decides from: the fabric, the policy with the
    registered collectives, the current placement, and the links down now and before the
    event."""

    fabric: Fabric
    policy: Policy
    placement: Placement
    down_links: DownLinks
    previous_down_links: DownLinks


Repair = Callable[[PlacementInput], dict[FlowDemand, Path]]
"""An immediate repair: the placement to use with ``down_links`` (every path must avoid them)."""
Reoptimise = Callable[[PlacementInput], dict[FlowDemand, Path] | None]
"""A background re-optimisation: a better placement, or None to keep the current one."""


def repin_all(inp: PlacementInput) -> dict[FlowDemand, Path]:
    """The default repair: pin every flow of the policy from scratch around the down links
    (:func:`controller.te.pinning.pin_flows`); when the links come back, the original placement
    returns (the pinning is deterministic)."""
    return initial_placement(inp.fabric, inp.policy, inp.down_links)
