"""Pinned entries: a placement (flow → path) on top of a route plan, with optional fast-failover
protection. Pure.

For each pinned flow and each switch on its path, one :data:`~controller.plan.model.PRIO_PINNED`
entry matches the flow (:func:`pinned_match`) and outputs towards the next node. With
``failover`` naming a switch, an entry there whose destination has other shortest next hops
(a leaf's uplinks) forwards by a failover :class:`~controller.plan.model.NextHopSet` instead:
its planned port first, then the other next hops ascending, so the switch moves the flow the
moment the port goes down (OpenFlow 1.3.5 §5.6.1), before the controller re-pins. Where only one
next hop exists (a spine towards a leaf), nothing local can help and the re-pin restores the
flow. No port-number limit applies: the set is a value, the driver gives it an id.

``probed`` names the failover switches that learn port liveness from probes (P4 switches: no
port status), with their :class:`~controller.plan.model.LivenessTimers`. Their failover sets
carry the timers, and there a hop with no other next hop between two switches (not the first
hop of the path, nor the last towards the destination host) gets a ``bounce`` set: its planned
port, else back to the hop before, whose own failover set moves the flow to its alternative
(fabric.p4's header comment). So a failure past the first hop is also handled in the data
plane, by the last switch that has a choice.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from controller.errors import PlanInvariantError
from controller.model.topology import Fabric
from controller.plan.model import (
    ETH_TYPE_IPV4,
    PRIO_PINNED,
    Action,
    FabricPlan,
    FlowIntent,
    LivenessTimers,
    Match,
    NextHopSet,
    SwitchPlan,
)
from controller.te.collectives import FlowDemand
from controller.te.invariants import check_path

TABLE = 0
"""The one flow table the plan uses (control, pinned and route entries, told apart by priority)."""

Path = tuple[str, ...]
DownLinks = frozenset[frozenset[str]]
NextHopMap = Mapping[str, Mapping[str, tuple[int, ...]]]


def pinned_match(fabric: Fabric, demand: FlowDemand) -> Match:
    """The header match of a pinned flow: IPv4 source and destination of its hosts, plus the
    collective's DSCP and L4 fields when it declares them.

    Raises
    ------
    KeyError
        A host of the demand is not in ``fabric``.
    """
    return Match(
        eth_type=ETH_TYPE_IPV4,
        ipv4_src=fabric.host_by_name[demand.src].ipv4,
        ipv4_dst=fabric.host_by_name[demand.dst].ipv4,
        ip_proto=demand.ip_proto,
        ip_dscp=demand.dscp,
        l4_src=demand.l4_src,
        l4_dst=demand.l4_dst,
    )


def path_is_up(path: Path, down_links: DownLinks) -> bool:
    """True when no hop of ``path`` is a down link."""
    return not any(frozenset(e) in down_links for e in zip(path, path[1:], strict=False))


PinnedCache = dict[tuple[FlowDemand, Path], tuple[tuple[str, FlowIntent], ...]]
SwitchReuse = dict[str, tuple[SwitchPlan, dict[Match, FlowIntent], SwitchPlan]]
"""switch → (its route plan, its pinned entries by match, the plan of both): what
:func:`with_pinned` made of them last, taken as it is while both are the same (the route plan
the very object, the pinned entries equal)."""
"""(flow, path) → the flow's entries (switch, entry), valid for one fabric, one set of down
links, one route plan's next hops and one set of failover switches."""


def with_pinned(fabric: Fabric, base: FabricPlan, paths: Mapping[FlowDemand, Path],
                down_links: DownLinks = frozenset(), next_hops: NextHopMap | None = None,
                failover: Collection[str] = (), cache: PinnedCache | None = None,
                routes_only: bool = False,
                probed: Mapping[str, LivenessTimers] | None = None,
                reuse: SwitchReuse | None = None) -> FabricPlan:
    """``base`` (control and route entries) plus the pinned entries of ``paths``.

    Parameters
    ----------
    fabric : Fabric
    base : FabricPlan
        A route plan (:func:`controller.plan.build.build_routes`); its pinned entries, if any,
        are replaced.
    paths : mapping of FlowDemand to tuple of str
        The pinned path (host … host) of every flow; each must pass
        :func:`controller.te.invariants.check_path` with ``down_links``.
    down_links : frozenset of frozenset of str
        Links that are down.
    next_hops : mapping, optional
        ``next_hops[switch][host]`` → shortest-path ports with ``down_links`` removed (the
        route plan's); needed for ``failover``.
    failover : collection of str
        Switches whose entries get fast-failover protection (module docstring).
    cache : PinnedCache, optional
        Entries of flows computed before with the same fabric, down links, next hops and
        failover switches (read, and added to): a flow found there is neither checked nor
        built again (a registration batch changes a few flows of thousands).
    routes_only : bool
        ``base`` holds no pinned entry (a route plan): its entries are not scanned for them.
    probed : mapping of str to LivenessTimers, optional
        Failover switches that judge ports by probes, and their timers (module docstring).
    reuse : SwitchReuse, optional
        Each switch's plan made last (read, and replaced): a switch whose route plan is the
        same object and whose pinned entries are equal keeps that plan object — its entries
        are not copied again, and the plan compares by identity (a registration batch changes
        the pinned entries of ~190 of 320 switches at k = 16).

    Returns
    -------
    FabricPlan

    Raises
    ------
    PlanInvariantError
        A path breaks an invariant, or two flows with one match need different actions on a
        switch (the message names both and suggests a dscp or l4 match).
    """
    entries: dict[str, dict[Match, FlowIntent]] = {}
    ff = frozenset(failover)
    for demand, path in paths.items():
        hit = cache.get((demand, path)) if cache is not None else None
        if hit is None:
            hit = _flow_entries(fabric, demand, path, down_links, next_hops, ff, probed)
            if cache is not None:
                cache[(demand, path)] = hit
        for node, fi in hit:
            match = fi.match
            origin = fi.origin
            at = entries.setdefault(node, {})
            old = at.get(match)
            if old is not None and old.action != fi.action:
                raise PlanInvariantError(
                    f"switch {node}: pinned flows '{old.origin}' and '{origin}' have the same "
                    f"match but leave differently ({old.action} vs {fi.action}); give one "
                    "collective a dscp or l4 match")
            at[match] = fi
    out: dict[str, SwitchPlan] = {}
    for name, sp in base.switches.items():
        flows = sp.flows
        if not routes_only and any(f.priority == PRIO_PINNED for f in flows):
            flows = frozenset(f for f in flows if f.priority != PRIO_PINNED)
        mine = entries.get(name)
        if not mine and flows is sp.flows:
            out[name] = sp
            continue
        if reuse is not None and flows is sp.flows:
            last = reuse.get(name)
            if last is not None and last[0] is sp and last[1] == mine:
                out[name] = last[2]
                continue
        # a union copies the base's hashes: a route plan's entries are not hashed again
        out[name] = SwitchPlan(sp.switch, sp.dpid, flows.union(mine.values()) if mine else flows)
        if reuse is not None and flows is sp.flows and mine:
            reuse[name] = (sp, mine, out[name])
    return FabricPlan(out)


def _flow_entries(fabric: Fabric, demand: FlowDemand, path: Path, down_links: DownLinks,
                  next_hops: NextHopMap | None, ff: frozenset[str],
                  probed: Mapping[str, LivenessTimers] | None = None
                  ) -> tuple[tuple[str, FlowIntent], ...]:
    """One flow's pinned entries along ``path`` (checked: :func:`~controller.te.invariants.
    check_path`); ``probed``: see :func:`with_pinned`."""
    check_path(fabric, path, down_links, src=demand.src, dst=demand.dst)
    match = pinned_match(fabric, demand)
    origin = f"pin {demand.label}"
    out = []
    for i in range(1, len(path) - 1):
        node, nxt = path[i], path[i + 1]
        port = fabric.port_towards(node, nxt)
        action = Action("output", port)
        if node in ff and next_hops is not None:
            alts = tuple(p for p in next_hops.get(node, {}).get(demand.dst, ()) if p != port)
            timers = (probed or {}).get(node)
            if alts:
                action = Action.via(NextHopSet("failover", (port, *sorted(alts)),
                                               liveness=timers))
            elif timers is not None and i > 1 and i + 1 < len(path) - 1:
                # a switch feeds this hop and it feeds a switch (not the last hop to the
                # destination host, whose port is not probed)
                action = Action.via(NextHopSet("failover", (port,), bounce=True,
                                               liveness=timers))
        out.append((node, FlowIntent(TABLE, PRIO_PINNED, match, action, origin)))
    return tuple(out)
