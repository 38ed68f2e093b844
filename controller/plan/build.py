"""Fabric + policy (+ down links) → the per-switch :class:`~controller.plan.model.FabricPlan`.

Every switch gets, in table :data:`TABLE`:

* one :data:`~controller.plan.model.PRIO_CONTROL` entry sending LLDP to the controller (link
  discovery: the one thing the controller must learn from the data plane);
* on every edge switch (one a host hangs off), one :data:`~controller.plan.model.PRIO_ARP_REPLY`
  entry per fabric host: an ARP request for the host's IPv4 address is answered by the switch
  itself, from the topology's host table (:class:`~controller.plan.model.ArpReply`,
  :func:`arp_reply_flows`), so hosts resolve each other with no controller at all. Other ARP
  (requests for addresses the fabric does not hold, replies, announcements) matches nothing and
  is dropped: the controller answered nothing else either, and nothing is flooded. Switches no
  host hangs off never see a host's ARP and get no such entry;
* one :data:`~controller.plan.model.PRIO_ROUTE` entry per reachable destination host
  (``eth_type=IPv4, ipv4_dst``): ``output`` when one shortest path leaves the switch, otherwise
  an ECMP :class:`~controller.plan.model.NextHopSet` over every shortest-path port
  (:func:`~controller.te.ecmp.ecmp_next_hops`), hashing what the policy's
  ``routing.ecmp`` asks of that switch (:mod:`controller.plan.hashing`: by default the 5-tuple
  with a seed of its own; the switch's default way where it cannot hash as asked);
* in ``routing.mode: pinned``, one :data:`~controller.plan.model.PRIO_PINNED` entry per pinned
  flow per switch on its path (``ipv4_src, ipv4_dst`` plus the collective's DSCP and L4 fields)
  → the port towards the next node (:func:`~controller.te.placer.place_policy`: each flow
  weighted by its link-rate-bound demand, the maximum link utilisation minimised;
  :mod:`controller.plan.pinned`). On a multi-site fabric with ``wan.hierarchical_allreduce``
  the flows of a collective spanning sites are those of the hierarchical all-reduce;
  cross-site flows are spread over the DCI links by the same min-max pinning.

Before returning, every pinned path passes :func:`~controller.te.invariants.check_path` and the
next hops pass :func:`~controller.te.invariants.check_routes`; a plan that fails is never
returned (nothing is half-built).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from controller.model.topology import Fabric
from controller.plan import hashing
from controller.plan.capacity import (
    DEFAULT_HEADROOM,
    CapacityReport,
    TableCapacity,
    capacities,
    fit_tables,
)
from controller.plan.model import (
    ETH_TYPE_IPV4,
    ETH_TYPE_LLDP,
    PRIO_ARP_REPLY,
    PRIO_CONTROL,
    PRIO_PINNED,
    PRIO_ROUTE,
    Action,
    ArpReply,
    EcmpHash,
    FabricPlan,
    FlowIntent,
    Match,
    NextHopSet,
    SwitchPlan,
    arp_request_match,
)
from controller.plan.pinned import TABLE, pinned_match, with_pinned
from controller.policy.model import Policy
from controller.te.collectives import FlowDemand
from controller.te.ecmp import NextHops, ecmp_next_hops
from controller.te.invariants import check_routes
from controller.te.links import normalise_down_links
from controller.te.placer import LoadPinning, format_link_flows, place_policy

__all__ = ["TABLE", "PlanResult", "RoutePlan", "arp_reply_flows", "build_plan", "build_routes",
           "control_flows", "ecmp_hashes", "format_link_flows", "pinned_match"]


@dataclass(frozen=True)
class PlanResult:
    """A computed plan and what it was computed from.

    Attributes
    ----------
    plan : FabricPlan
        Intended flows of every switch.
    pinning : LoadPinning or None
        The pinned paths, per-link load and flow counts, the maximum utilisation and its lower
        bound (``routing.mode: pinned``); None in ECMP mode.
    next_hops : dict of str to dict of str to tuple of int
        ``next_hops[switch][host]`` → ECMP ports, as installed by the route entries.
    tables : CapacityReport or None
        Pinned entries per switch against its capacity, what was merged and which flows fell
        back to ECMP (:func:`controller.plan.capacity.fit_tables`); None in ECMP mode.
    """

    plan: FabricPlan
    pinning: LoadPinning | None
    next_hops: NextHops
    tables: CapacityReport | None = None


@dataclass(frozen=True)
class RoutePlan:
    """The control and route entries of every switch (no pinned entries), and the ECMP next
    hops they were built from (``next_hops[switch][host]`` → ports); ``hashes``: each
    switch's ECMP hash, and ``intents`` the entries built, by (destination host, ports, hash):
    what :func:`build_routes` reuses from a previous route plan."""

    plan: FabricPlan
    next_hops: NextHops
    hashes: Mapping[str, EcmpHash | None] = field(default_factory=dict, compare=False)
    intents: Mapping[tuple[str, tuple[int, ...], EcmpHash | None], FlowIntent] = field(
        default_factory=dict, compare=False, repr=False)


def ecmp_hashes(fabric: Fabric, policy: Policy,
                unhashed: Mapping[str, str] | None = None) -> dict[str, EcmpHash | None]:
    """Switch name → what its ECMP sets hash (:func:`controller.plan.hashing.ecmp_hashes` of the
    policy's ``routing.ecmp``; None: the switch's default way). ``unhashed``: switches that
    cannot hash as asked, with why."""
    return hashing.ecmp_hashes(fabric, policy.routing.ecmp, unhashed)


def control_flows() -> tuple[FlowIntent, ...]:
    """The entries every switch holds to reach the controller: LLDP (link discovery)."""
    return (
        FlowIntent(TABLE, PRIO_CONTROL, Match(eth_type=ETH_TYPE_LLDP), Action("controller"),
                   "control lldp"),
    )


def arp_reply_flows(fabric: Fabric) -> tuple[FlowIntent, ...]:
    """The ARP responder of an edge switch: per fabric host (sorted by name), the request for
    its IPv4 address → :class:`~controller.plan.model.ArpReply` with its MAC (module
    docstring). The same entries on every edge switch: a host may ask for any other."""
    return tuple(
        FlowIntent(TABLE, PRIO_ARP_REPLY, arp_request_match(h.ipv4),
                   Action.answer(ArpReply(h.ipv4, h.mac)), f"arp {h.name}")
        for h in sorted(fabric.hosts, key=lambda h: h.name))


def edge_switches(fabric: Fabric) -> frozenset[str]:
    """Names of the switches some host hangs off (the ones that answer ARP)."""
    return frozenset(h.leaf for h in fabric.hosts)


def build_routes(fabric: Fabric, policy: Policy,
                 down_links: Iterable[frozenset[str]] = frozenset(),
                 unhashed: Mapping[str, str] | None = None,
                 previous: RoutePlan | None = None) -> RoutePlan:
    """Control and route entries of every switch with ``down_links`` down; ``unhashed``:
    switches that cannot hash as asked, with why (their ECMP sets carry no hash:
    :mod:`controller.plan.hashing`).

    ``previous``: a route plan of the same fabric (other down links, say): a switch whose next
    hops and hash are those it had there keeps that very switch plan, and entries equal to
    one built there are that very object (a link going down changes the routes of a few
    switches: the rest costs a comparison, not a rebuild).

    Raises
    ------
    ValueError
        ``down_links`` names an unknown link.
    PlanInvariantError
        The ECMP routes break an invariant (:func:`controller.te.invariants.check_routes`).
    """
    down = normalise_down_links(fabric, down_links)
    next_hops = ecmp_next_hops(fabric, down)
    check_routes(fabric, next_hops, down)
    hashes = ecmp_hashes(fabric, policy, unhashed)
    control = control_flows()
    arp = arp_reply_flows(fabric)
    edges = edge_switches(fabric)
    route_match = {h.name: Match(eth_type=ETH_TYPE_IPV4, ipv4_dst=h.ipv4) for h in fabric.hosts}
    # Intents carry no switch name, so one object serves every switch with the same
    # (destination, ports, hash), and one action every entry with the same (ports, hash):
    # output entries are shared across a Clos; ECMP entries of a switch whose hash is its own
    # (the default: a seed per switch) are not kept for sharing (hundreds of thousands of keys
    # at k=16 that nothing would hit, and that Python's collector would walk).
    users = Counter(hashes.values())
    cache: dict[tuple[str, tuple[int, ...], EcmpHash | None], FlowIntent] = \
        dict(previous.intents) if previous is not None else {}
    actions: dict[tuple[tuple[int, ...], EcmpHash | None], Action] = {}
    old = previous.plan.switches if previous is not None else {}
    switches: dict[str, SwitchPlan] = {}
    for sw in fabric.switches:
        h = hashes[sw.name]
        if sw.name in old and previous is not None and previous.hashes.get(sw.name) == h \
                and previous.next_hops.get(sw.name) == next_hops[sw.name]:
            switches[sw.name] = old[sw.name]
            continue
        flows = list(control) + (list(arp) if sw.name in edges else [])
        own = users[h] == 1
        for host, ports in next_hops[sw.name].items():
            ecmp = len(ports) > 1
            key = (host, ports, h if ecmp else None)
            fi = None if ecmp and own else cache.get(key)
            if fi is None:
                action = actions.get(key[1:])
                if action is None:
                    action = actions[key[1:]] = (
                        Action.via(NextHopSet("ecmp", ports, h)) if ecmp
                        else Action("output", ports[0]))
                fi = FlowIntent(TABLE, PRIO_ROUTE, route_match[host], action, f"route {host}")
                if not (ecmp and own):
                    cache[key] = fi
            flows.append(fi)
        switches[sw.name] = SwitchPlan(sw.name, sw.dpid, frozenset(flows))
    return RoutePlan(FabricPlan(switches), next_hops, hashes, cache)


def build_plan(
    fabric: Fabric, policy: Policy, down_links: Iterable[frozenset[str]] = frozenset(),
    capacity: Mapping[str, TableCapacity] | None = None,
) -> PlanResult:
    """Compute the whole fabric's forwarding intent for ``policy`` with ``down_links`` down.

    Parameters
    ----------
    fabric : Fabric
        The fabric.
    policy : Policy
        A validated policy (its ranks should have been checked against ``fabric``).
    down_links : iterable of frozenset of str, optional
        Links that are down (``frozenset({u, v})``); no route or pinned path uses them.
    capacity : mapping of str to TableCapacity, optional
        Switch table capacity (P4Info sizes, OpenFlow table features); the policy's ``tables``
        section overrides it. Pinned entries that do not fit are merged or fall back to ECMP.

    Returns
    -------
    PlanResult
        The plan, the pinning (None unless ``routing.mode == 'pinned'``) and the ECMP next hops.

    Raises
    ------
    ValueError
        ``down_links`` names an unknown link; a collective names an unknown host, uses an unknown
        algorithm, or has a flow with no valley-free path (the message names the flow).
    PlanInvariantError
        A pinned path or the ECMP routes break an invariant (see
        :mod:`controller.te.invariants`), or two pinned flows with the same match would need
        different ports on one switch.
    """
    down = normalise_down_links(fabric, down_links)
    routes = build_routes(fabric, policy, down)
    pinning: LoadPinning | None = None
    tables: CapacityReport | None = None
    plan = routes.plan
    if policy.routing.mode == "pinned":
        pinning = place_policy(fabric, policy, down)
        plan = with_pinned(fabric, routes.plan, pinning.paths, down)
        plan, tables = fit_plan_tables(fabric, policy, plan, pinning.paths, routes.next_hops,
                                       capacity)
    return PlanResult(plan, pinning, routes.next_hops, tables)


def fit_plan_tables(fabric: Fabric, policy: Policy, plan: FabricPlan,
                    paths: Mapping[FlowDemand, Sequence[str]], next_hops: NextHops,
                    capacity: Mapping[str, TableCapacity] | None = None
                    ) -> tuple[FabricPlan, CapacityReport]:
    """``plan`` with each switch's pinned entries fitted into its table
    (:func:`controller.plan.capacity.fit_tables`: merged where paths coincide, the least
    important flows left to ECMP), and the report of what was done. ``paths``: the pinned path
    of every flow whose entries ``plan`` holds; ``capacity``: per switch (the policy's
    ``tables`` section overrides it); importance: the policy's collectives in order."""
    pinned = {name: {f.match: f for f in sp.flows if f.priority == PRIO_PINNED}
              for name, sp in plan.switches.items()}
    caps = capacities(fabric, per_switch=capacity, policy_tables=policy.tables)
    control = {name: sum(1 for f in sp.flows if f.priority not in (PRIO_PINNED, PRIO_ROUTE))
               for name, sp in plan.switches.items()}
    fitted, report = fit_tables(
        fabric, paths, pinned, next_hops, caps, lambda d: pinned_match(fabric, d),
        control_entries=control,
        headroom=policy.tables.headroom if policy.tables else DEFAULT_HEADROOM,
        importance=[c.name for c in policy.collectives])
    if fitted == pinned:
        return plan, report
    switches = {
        name: SwitchPlan(sp.switch, sp.dpid, frozenset(
            {f for f in sp.flows if f.priority != PRIO_PINNED} | set(fitted.get(name, {}).values())))
        for name, sp in plan.switches.items()}
    return FabricPlan(switches), report
