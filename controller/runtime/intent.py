"""The intended plan: a pure function of the runtime state.

``intended_plan(state)`` = the route plan for the policy's ECMP settings with the down links
removed (:func:`controller.plan.build.build_routes`) + one pinned entry per hop of every placed
flow whose path is up (:func:`controller.plan.pinned.with_pinned`), with failover next-hop sets
on ``failover`` switches when fast failover is on. A flow whose path crosses a down link has no
pinned entries until a repair places it again: its traffic follows the routes, which avoid the
link. Nothing depends on connections, counters or clocks, so two controllers with equal state
compute equal plans.

The last results are cached by input (route plans by fabric, hash settings and down links; the
plan by those and the placement), since every event asks for the plan and most change nothing
it depends on.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Mapping
from typing import Any

from controller.model.topology import Fabric
from controller.plan.build import RoutePlan, build_routes, ecmp_hashes
from controller.plan.model import FabricPlan
from controller.plan.pinned import path_is_up, with_pinned
from controller.policy.model import Policy
from controller.runtime.state import DownLinks, Path, RuntimeState
from controller.te.collectives import FlowDemand

_ROUTES: OrderedDict[tuple[Any, ...], tuple[Fabric, RoutePlan]] = OrderedDict()
_PLANS: OrderedDict[tuple[Any, ...], tuple[Any, FabricPlan]] = OrderedDict()
_CACHE_SIZE = 8


def routes_for(fabric: Fabric, policy: Policy, down_links: DownLinks) -> RoutePlan:
    """:func:`~controller.plan.build.build_routes`, cached by (fabric, hash settings, down
    links)."""
    hashes = tuple(sorted(ecmp_hashes(fabric, policy).items(), key=lambda kv: kv[0]))
    key = (id(fabric), hashes, down_links)
    hit = _ROUTES.get(key)
    if hit is not None and hit[0] is fabric:
        _ROUTES.move_to_end(key)
        return hit[1]
    rp = build_routes(fabric, policy, down_links)
    _ROUTES[key] = (fabric, rp)
    while len(_ROUTES) > _CACHE_SIZE:
        _ROUTES.popitem(last=False)
    return rp


def plan_for(fabric: Fabric, policy: Policy, placement: Mapping[FlowDemand, Path],
             down_links: DownLinks, failover: Collection[str] = ()) -> FabricPlan:
    """The plan of a placement (module docstring).

    Raises
    ------
    PlanInvariantError
        Two placed flows with one match need different actions on a switch, or a path breaks
        an invariant.
    """
    hashes = tuple(sorted(ecmp_hashes(fabric, policy).items(), key=lambda kv: kv[0]))
    ff = frozenset(failover)
    key = (id(fabric), hashes, down_links, id(placement), ff)
    hit = _PLANS.get(key)
    if hit is not None and hit[0][0] is fabric and hit[0][1] is placement:
        _PLANS.move_to_end(key)
        return hit[1]
    rp = routes_for(fabric, policy, down_links)
    live = {d: p for d, p in placement.items() if path_is_up(p, down_links)}
    plan = with_pinned(fabric, rp.plan, live, down_links, rp.next_hops, ff)
    _PLANS[key] = ((fabric, placement), plan)
    while len(_PLANS) > _CACHE_SIZE:
        _PLANS.popitem(last=False)
    return plan


def intended_plan(state: RuntimeState) -> FabricPlan:
    """What every switch should hold in ``state`` (module docstring)."""
    ff = state.settings.failover_switches if state.settings.fast_failover else frozenset()
    return plan_for(state.fabric, state.policy.policy, state.placement, state.down_links, ff)


def stranded(state: RuntimeState) -> tuple[FlowDemand, ...]:
    """Placed flows whose path crosses a down link (waiting for a repair)."""
    down = state.down_links
    return tuple(d for d, p in state.placement.items() if not path_is_up(p, down))
