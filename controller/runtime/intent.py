"""The intended plan: a pure function of the runtime state.

``intended_plan(state)`` = the route plan for the policy's ECMP settings with the down links
removed (:func:`controller.plan.build.build_routes`) + one pinned entry per hop of every placed
flow whose path is up (:func:`controller.plan.pinned.with_pinned`), with failover next-hop sets
on ``failover`` switches when fast failover is on, **fitted into each switch's table**
(:func:`controller.plan.build.fit_plan_tables`). A flow whose path crosses a down link has no
pinned entries until a repair places it again: its traffic follows the routes, which avoid the
link.

Table capacity (issue 15, point 5): each switch's capacity is what its driver reported when it
connected (:attr:`controller.drivers.southbound.SwitchFeatures.tables`: OpenFlow table 0's
``max_entries`` from the table features, a P4 program's ``pinned``/``routes`` sizes from its
P4Info; :func:`switch_capacity`), with the policy's ``tables`` section over it. A switch whose
pinned entries do not fit (capacity minus the headroom kept for make-before-break moves) gets
them merged where paths coincide, and the least important flows fall back to ECMP on every
switch — a stated fallback (:func:`plan_tables`: the report the core logs and publishes, the
status shows), never a write the switch refuses. The capacity of a switch is remembered once
reported (also while it is disconnected), so the plan depends on the state only: two
controllers with equal state compute equal plans.

ECMP hashing (issue 29, point 2): a switch whose driver reported no ``ecmp_hash`` capability
when it connected (an OpenFlow 1.3 session: no group selection properties) cannot hash as the
policy asks; its ECMP sets carry no hash (the switch's default way) instead of being refused,
and :func:`hash_notes` says so (:func:`unhashed`; :mod:`controller.plan.hashing`). Like the
capacity, what a switch reported is remembered while it is disconnected.

The plan of a state is computed once per generation and kept in the state's own memo
(:class:`~controller.runtime.state.PlanMemo`: states of one generation have equal plan inputs),
since every event asks for the plan and most change nothing it depends on.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from controller.drivers.southbound import SwitchFeatures
from controller.model.topology import Fabric
from controller.plan.build import RoutePlan, build_routes, ecmp_hashes, fit_plan_tables
from controller.plan.capacity import (
    P4_PINNED_TABLE,
    P4_ROUTES_TABLE,
    CapacityReport,
    TableCapacity,
)
from controller.plan.hashing import hashing_notes
from controller.plan.model import FabricPlan, LivenessTimers
from controller.plan.pinned import TABLE, path_is_up, with_pinned
from controller.policy.model import Policy
from controller.runtime.placement import pinned_demands_bps
from controller.runtime.state import DownLinks, Path, RuntimeSettings, RuntimeState
from controller.te.collectives import FlowDemand

Capacities = tuple[tuple[str, TableCapacity], ...]
"""Known switch capacities, sorted by switch (hashable: part of the plan cache's key)."""
Unhashed = tuple[tuple[str, str], ...]
"""Switches that cannot hash ECMP as asked, and why, sorted by switch (hashable)."""

#: The capability a driver reports for a switch whose ECMP sets hash the fields and seed asked
#: for (:attr:`controller.drivers.southbound.SwitchFeatures.capabilities`).
ECMP_HASH_CAPABILITY = "ecmp_hash"


def unhashed(state: RuntimeState) -> Unhashed:
    """The switches whose driver reported no :data:`ECMP_HASH_CAPABILITY`, with why (what they
    speak); switches not heard from yet are planned as able."""
    return tuple((name, f"it speaks {s.features.protocol}, without group selection properties")
                 for name, s in sorted(state.switches.items())
                 if s.features is not None
                 and ECMP_HASH_CAPABILITY not in s.features.capabilities)


def hash_notes(state: RuntimeState) -> tuple[str, ...]:
    """One warning per switch that cannot hash ECMP as the policy asks (``"<switch>: ..."``;
    :func:`controller.plan.hashing.hashing_notes`)."""
    return hashing_notes(state.fabric, state.effective_policy.routing.ecmp, dict(unhashed(state)))


def switch_capacity(features: SwitchFeatures | None) -> TableCapacity | None:
    """What a switch's driver reported of the tables the plan uses (None: nothing known):
    OpenFlow table :data:`~controller.plan.pinned.TABLE` (``"0"``) holds every entry
    (``total_entries``); a P4 program's ``FabricIngress.pinned``/``FabricIngress.routes``
    sizes are the pinned and route room."""
    if features is None or not features.tables:
        return None
    sizes = {t.table: t.max_entries for t in features.tables if t.max_entries is not None}
    if features.southbound == "openflow" and str(TABLE) in sizes:
        return TableCapacity(total_entries=sizes[str(TABLE)],
                             source="OpenFlow table features")
    if P4_PINNED_TABLE in sizes or P4_ROUTES_TABLE in sizes:
        return TableCapacity(pinned_entries=sizes.get(P4_PINNED_TABLE),
                             route_entries=sizes.get(P4_ROUTES_TABLE), source="P4Info")
    return None


def known_capacities(state: RuntimeState) -> Capacities:
    """Every switch's capacity as its driver last reported it (:func:`switch_capacity`)."""
    out = []
    for name, s in sorted(state.switches.items()):
        cap = switch_capacity(s.features)
        if cap is not None:
            out.append((name, cap))
    return tuple(out)


def liveness_timers(settings: RuntimeSettings) -> dict[str, LivenessTimers]:
    """The :class:`~controller.plan.model.LivenessTimers` of every probed failover switch when
    fast failover and liveness are on: dead after ``dataplane misses × interval`` without a
    frame (by default the controller's own ``misses``, :mod:`controller.runtime.liveness`),
    used again ``hold_s`` after frames came back."""
    if not settings.fast_failover or not settings.liveness_interval_s:
        return {}
    misses = settings.liveness_dataplane_misses or settings.liveness_misses
    timers = LivenessTimers(max(1, round(misses * settings.liveness_interval_s * 1e6)),
                            round(settings.liveness_hold_s * 1e6))
    return dict.fromkeys(sorted(settings.probed_switches & settings.failover_switches), timers)


def _fitted(fabric: Fabric, policy: Policy, placement: Mapping[FlowDemand, Path],
            down_links: DownLinks, failover: frozenset[str], capacity: Capacities,
            routes: RoutePlan | None = None, cannot_hash: Unhashed = (),
            probed: Mapping[str, LivenessTimers] | None = None
            ) -> tuple[FabricPlan, CapacityReport | None]:
    rp = routes or build_routes(fabric, policy, down_links, dict(cannot_hash))
    live = {d: p for d, p in placement.items() if path_is_up(p, down_links)}
    plan = with_pinned(fabric, rp.plan, live, down_links, rp.next_hops, failover, probed)
    report: CapacityReport | None = None
    if live and (capacity or policy.tables is not None):
        plan, report = fit_plan_tables(fabric, policy, plan, live, rp.next_hops,
                                       dict(capacity))
    return plan, report


def plan_for(fabric: Fabric, policy: Policy, placement: Mapping[FlowDemand, Path],
             down_links: DownLinks, failover: Collection[str] = (),
             capacity: Capacities = (), cannot_hash: Unhashed = ()) -> FabricPlan:
    """The plan of a placement (module docstring); ``policy``'s collectives, in order, say
    which flows matter most when a table overflows; ``cannot_hash``: :func:`unhashed`.

    Raises
    ------
    PlanInvariantError
        Two placed flows with one match need different actions on a switch, or a path breaks
        an invariant.
    KeyError
        The policy's ``tables`` section names a switch the fabric lacks.
    """
    return _fitted(fabric, policy, placement, down_links, frozenset(failover), capacity,
                   cannot_hash=cannot_hash)[0]


def _memo(state: RuntimeState) -> tuple[FabricPlan, CapacityReport | None]:
    memo = state.memo
    key = (state.fabric, state.policy, state.registered, state.placement, state.down_ports,
           state.settings)
    caps = (known_capacities(state), unhashed(state))
    if memo.plan is None or memo.generation != state.generation or memo.caps != caps \
            or len(memo.key) != len(key) or any(a is not b for a, b in zip(memo.key, key,
                                                                            strict=True)):
        ff = state.settings.failover_switches if state.settings.fast_failover else frozenset()
        policy = state.effective_policy
        down = state.down_links
        cannot = dict(caps[1])
        route_key = (tuple(sorted(ecmp_hashes(state.fabric, policy, cannot).items(),
                                  key=lambda kv: kv[0])), down)
        if memo.routes is None or memo.routes[0] != route_key:
            memo.routes = (route_key, build_routes(state.fabric, policy, down, cannot))
        memo.plan = _fitted(state.fabric, policy, state.placement, down, ff, caps[0],
                            memo.routes[1], caps[1], liveness_timers(state.settings))
        memo.generation, memo.key, memo.caps = state.generation, key, caps
        memo.demands = None
    plan: tuple[FabricPlan, CapacityReport | None] = memo.plan
    return plan


def intended_plan(state: RuntimeState) -> FabricPlan:
    """What every switch should hold in ``state`` (module docstring).

    Raises
    ------
    PlanInvariantError
        Two placed flows with one match need different actions on a switch, or a path breaks
        an invariant.
    """
    return _memo(state)[0]


def plan_tables(state: RuntimeState) -> CapacityReport | None:
    """The table fitting of :func:`intended_plan`: pinned entries per switch against its
    capacity, what was merged, which flows fell back to ECMP (None: no capacity known, or
    nothing pinned)."""
    return _memo(state)[1]


def pinned_demands(state: RuntimeState) -> dict[FlowDemand, float]:
    """Each pinned flow's demand (bit/s, :func:`controller.runtime.placement.
    pinned_demands_bps`), computed once per generation."""
    _memo(state)
    memo = state.memo
    if memo.demands is None:
        memo.demands = pinned_demands_bps(state.fabric, state.placement)
    return memo.demands


def stranded(state: RuntimeState) -> tuple[FlowDemand, ...]:
    """Placed flows whose path crosses a down link (waiting for a repair)."""
    down = state.down_links
    return tuple(d for d, p in state.placement.items() if not path_is_up(p, down))
