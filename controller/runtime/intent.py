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
    DEFAULT_HEADROOM,
    P4_PINNED_TABLE,
    P4_ROUTES_TABLE,
    CapacityReport,
    SwitchTables,
    TableCapacity,
    capacities,
)
from controller.plan.hashing import hashing_notes
from controller.plan.model import PRIO_PINNED, FabricPlan, LivenessTimers, Match
from controller.plan.pinned import TABLE, path_is_up, pinned_match, with_pinned
from controller.policy.model import Policy
from controller.runtime.placement import pinned_demands_bps
from controller.runtime.state import DownLinks, Path, RuntimeSettings, RuntimeState
from controller.te.collectives import FlowDemand

Capacities = tuple[tuple[str, TableCapacity], ...]
"""Switch capacities, sorted by switch."""
CONTROL_ENTRIES = 2
"""Entries every switch holds besides routes and pinned flows (the control entries:
:func:`controller.plan.build.control_flows`; :func:`~controller.plan.capacity.fit_tables`'s
``control_entries``)."""
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
    plan = with_pinned(fabric, rp.plan, live, down_links, rp.next_hops, failover,
                       probed=probed)
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


ENTRY_CACHE_SLACK = 1024
"""Entries of flows no longer placed that the pinned-entry cache may keep beyond twice the
placed flows before it is pruned to them (:func:`_pinned_plan`)."""


def _pinned_plan(state: RuntimeState) -> None:
    """The generation's plan before any table fitting, into the memo: the routes (carried over
    from the last generation when their inputs are equal), the live pinned flows and every
    switch's pinned and route entry counts (what :func:`binding_capacities` compares with the
    capacities)."""
    memo = state.memo
    ff = state.settings.failover_switches if state.settings.fast_failover else frozenset()
    policy = state.effective_policy
    down = state.down_links
    # a switch that cannot hash as asked changes the generation (core ``SwitchConnected``),
    # so the memo needs no key of its own for it
    cannot = dict(unhashed(state))
    route_key = (tuple(sorted(ecmp_hashes(state.fabric, policy, cannot).items(),
                              key=lambda kv: kv[0])), down)
    if memo.routes is None or memo.routes[0] != route_key:
        memo.routes = (route_key, build_routes(state.fabric, policy, down, cannot, previous=(
            memo.routes[1] if memo.routes is not None else None)))
    rp = _route_plan(state)
    live = {d: p for d, p in state.placement.items() if path_is_up(p, down)}
    # entries of the flows placed before, valid while the routes and failover switches stay
    # (a pinned entry depends on the next hops only through fast failover: without it, the
    # entries stay valid when links go down; the flows crossing them are not live)
    # and the probed switches' liveness timers stay
    probed = liveness_timers(state.settings)
    key = (memo.routes[0] if ff else None, ff, tuple(probed.items()))
    cache = memo.entries[1] if memo.entries is not None and memo.entries[0] == key else {}
    plan = with_pinned(state.fabric, rp.plan, live, down, rp.next_hops, ff, cache,
                       routes_only=True, probed=probed, reuse=memo.switch_reuse)
    # flows gone stay in the cache until it holds twice the live ones (pruning it to the live
    # flows on every generation hashed every (flow, path): ~25 ms per registration batch at
    # k = 16)
    if len(cache) > 2 * len(live) + ENTRY_CACHE_SLACK:
        cache = {k: cache[k] for k in live.items()}
    memo.entries = (key, cache)
    # a switch's pinned entries: its entries beyond the route plan's (with_pinned adds them
    # to the route entries, which have another priority)
    routes = rp.plan.switches
    memo.pinned = (plan, live, {n: len(sp.flows) - len(routes[n].flows) if n in routes
                                else sum(1 for f in sp.flows if f.priority == PRIO_PINNED)
                                for n, sp in plan.switches.items()})


def fits_as_before(before: RuntimeState, after: RuntimeState) -> bool:
    """Whether ``after`` (``before`` with other capacities known, the same generation) has
    ``before``'s plan: the capacities
    that shape the plan — each switch whose pinned entries do not fit the room its capacity
    leaves (:meth:`~controller.plan.capacity.TableCapacity.pinned_room` less the headroom;
    the policy's ``tables`` section over the reported capacity), with that capacity — are
    those the plan was fitted with. :func:`~controller.plan.capacity.fit_tables` changes
    nothing on any other switch, so a switch that reports a capacity its entries fit in
    (every Open vSwitch bridge of a fabric reporting 1,000,000) changes nothing: the core
    makes a new generation only when this is false (:func:`controller.runtime.core.step`,
    ``SwitchConnected``)."""
    assert before.memo is after.memo, "states of one generation"
    _memo(before)
    return bool(_binding(after) == before.memo.binding)


def _control_entries(rp: RoutePlan, switch: str) -> int:
    """Entries ``switch`` holds besides routes and pinned flows: the control entries
    (:data:`CONTROL_ENTRIES`) and, on an edge switch, the ARP responder's (one per host:
    :func:`controller.plan.build.arp_reply_flows`) — its route-plan entries less its routes,
    as :func:`controller.plan.build.fit_plan_tables` counts them."""
    sp = rp.plan.switches.get(switch)
    if sp is None:
        return CONTROL_ENTRIES
    return len(sp.flows) - len(rp.next_hops.get(switch, {}))


def _route_plan(state: RuntimeState) -> RoutePlan:
    routes = state.memo.routes
    assert routes is not None, "the memo holds its generation's routes"
    rp: RoutePlan = routes[1]
    return rp


def _binding(state: RuntimeState) -> Capacities:
    memo = state.memo
    plan, live, needed = memo.pinned
    policy = state.effective_policy
    if not live or (policy.tables is None and not any(
            switch_capacity(s.features) for s in state.switches.values())):
        return ()
    caps = capacities(state.fabric, per_switch=dict(known_capacities(state)),
                      policy_tables=policy.tables)
    headroom = policy.tables.headroom if policy.tables is not None else DEFAULT_HEADROOM
    rp = _route_plan(state)
    out = []
    for name, cap in sorted(caps.items()):
        room = cap.pinned_room(len(rp.next_hops.get(name, {})), _control_entries(rp, name))
        if room is not None and needed.get(name, 0) > max(room - headroom, 0):
            out.append((name, cap))
    return tuple(out)


def _memo(state: RuntimeState) -> tuple[FabricPlan, CapacityReport | None]:
    """The generation's plan and its table report, computed once (module docstring). The
    table fit depends on the capacities only through :func:`binding_capacities`, which the
    core keeps constant within a generation (a report that changes them is a new generation);
    the report's per-switch capacities are those known now."""
    memo = state.memo
    key = (state.fabric, state.policy, state.registered, state.placement, state.down_ports,
           state.settings)
    if memo.plan is None or memo.generation != state.generation \
            or len(memo.key) != len(key) or any(a is not b for a, b in zip(memo.key, key,
                                                                            strict=True)):
        previous = memo.plan[0] if memo.plan is not None else memo.previous
        _pinned_plan(state)
        memo.generation, memo.key = state.generation, key
        memo.binding = None
        memo.binding = binding = _binding(state)
        plan, live, _ = memo.pinned
        report: CapacityReport | None = None
        policy = state.effective_policy
        if binding or (live and policy.tables is not None):
            rp = _route_plan(state)
            plan, report = fit_plan_tables(state.fabric, policy, plan, live, rp.next_hops,
                                           dict(binding))
        memo.plan = (_keep_equal(plan, previous), report)
        memo.demands = memo.matches = memo.by_collective = None
        memo.report = None
    fitted: tuple[FabricPlan, CapacityReport | None] = memo.plan
    return fitted


def _keep_equal(plan: FabricPlan, previous: FabricPlan | None) -> FabricPlan:
    """``plan`` with every switch plan equal to ``previous``'s replaced by that very object:
    what a switch holds is compared with its target by identity first
    (:func:`controller.runtime.writes.drive`), so an unchanged target stays cheap to compare."""
    if previous is None:
        return plan
    old = previous.switches
    out = {n: old[n] if n in old and old[n] == sp else sp for n, sp in plan.switches.items()}
    return FabricPlan(out)


def _report(state: RuntimeState) -> CapacityReport | None:
    """The table report with every switch's capacity and room as known now (the fit itself
    only depends on the binding capacities: :func:`binding_capacities`)."""
    _memo(state)
    memo = state.memo
    if memo.report is not None and memo.report[0] is state.switches:
        kept: CapacityReport | None = memo.report[1]
        return kept
    plan, live, needed = memo.pinned
    fitted = memo.plan[1]
    policy = state.effective_policy
    known = known_capacities(state)
    out: CapacityReport | None = None
    if live and (known or policy.tables is not None):
        caps = capacities(state.fabric, per_switch=dict(known), policy_tables=policy.tables)
        headroom = policy.tables.headroom if policy.tables is not None else DEFAULT_HEADROOM
        rp = _route_plan(state)
        final = memo.plan[0].switches
        rows = {}
        for name, cap in caps.items():
            room = cap.pinned_room(len(rp.next_hops.get(name, {})), _control_entries(rp, name))
            room = None if room is None else max(room - headroom, 0)
            sp, base = final.get(name), rp.plan.switches.get(name)
            # pinned entries: beyond the route plan's (fitting only removes pinned ones)
            pinned = 0 if sp is None else len(sp.flows) - len(base.flows) if base else sum(
                1 for f in sp.flows if f.priority == PRIO_PINNED)
            rows[name] = SwitchTables(name, needed.get(name, 0), pinned,
                                      len(rp.next_hops.get(name, {})),
                                      _control_entries(rp, name), cap,
                                      room)
        out = CapacityReport(rows, fitted.fallback, fitted.notes, dict(fitted.merged)) \
            if fitted is not None else CapacityReport(rows)
    memo.report = (state.switches, out)
    return out


def intended_plan(state: RuntimeState) -> FabricPlan:
    """What every switch should hold in ``state`` (module docstring).

    Raises
    ------
    PlanInvariantError
        Two placed flows with one match need different actions on a switch, or a path breaks
        an invariant.
    """
    return _memo(state)[0]


def table_notes(state: RuntimeState) -> tuple[tuple[str, ...], tuple[FlowDemand, ...]]:
    """The notes and the fallen-back flows of the table fit of :func:`intended_plan` (what
    :func:`plan_tables` reports beyond each switch's use), without building that report."""
    fitted = _memo(state)[1]
    return (fitted.notes, fitted.fallback) if fitted is not None else ((), ())


def plan_tables(state: RuntimeState) -> CapacityReport | None:
    """The table fitting of :func:`intended_plan`: pinned entries per switch against its
    capacity, what was merged, which flows fell back to ECMP (None: no capacity known, or
    nothing pinned)."""
    return _report(state)


def pinned_demands(state: RuntimeState) -> dict[FlowDemand, float]:
    """Each pinned flow's demand (bit/s, :func:`controller.runtime.placement.
    pinned_demands_bps`), computed once per generation."""
    _memo(state)
    memo = state.memo
    if memo.demands is None:
        memo.demands = pinned_demands_bps(state.fabric, state.placement)
    return memo.demands


def placed_by_match(state: RuntimeState) -> dict[Match, FlowDemand]:
    """Each placed flow by its match (what a registration's new flows must not repeat),
    computed once per generation; the matches of flows placed in the generations before are
    carried over (a flow's match depends on the flow and the fabric only), so a registration
    batch computes those of its own flows, not of every placed one."""
    _memo(state)
    memo = state.memo
    if memo.matches is None:
        fabric = state.fabric
        known = memo.match_of[1] if memo.match_of is not None and \
            memo.match_of[0] is fabric else {}
        match_of = {}
        for d in state.placement:
            m = known.get(d)
            match_of[d] = m if m is not None else pinned_match(fabric, d)
        memo.match_of = (fabric, match_of)
        memo.matches = {m: d for d, m in match_of.items()}
    matches: dict[Match, FlowDemand] = memo.matches
    return matches


def placed_by_collective(state: RuntimeState) -> dict[str, dict[FlowDemand, Path]]:
    """The placed flows of each collective, computed once per generation."""
    _memo(state)
    memo = state.memo
    if memo.by_collective is None:
        out: dict[str, dict[FlowDemand, Path]] = {}
        for d, p in state.placement.items():
            out.setdefault(d.collective, {})[d] = p
        memo.by_collective = out
    got: dict[str, dict[FlowDemand, Path]] = memo.by_collective
    return got

