"""Fabric + policy (+ down links) → the per-switch :class:`~controller.plan.model.FabricPlan`.

Every switch gets, in table :data:`TABLE`:

* two :data:`~controller.plan.model.PRIO_CONTROL` entries sending ARP and LLDP to the controller;
* one :data:`~controller.plan.model.PRIO_ROUTE` entry per reachable destination host
  (``eth_type=IPv4, ipv4_dst``): ``output`` when one shortest path leaves the switch, otherwise
  an ECMP ``select`` group over every shortest-path port
  (:func:`~controller.te.ecmp.ecmp_next_hops`), with a stable group id
  (:func:`~controller.plan.model.group_id_for_ports`);
* in ``routing.mode: pinned``, one :data:`~controller.plan.model.PRIO_PINNED` entry per pinned
  flow per switch on its path (``ipv4_src, ipv4_dst`` plus the collective's DSCP and L4 fields)
  → the port towards the next node (:func:`~controller.te.pinning.pin_flows`). On a multi-site
  fabric with ``wan.hierarchical_allreduce`` the flows of a collective spanning sites are those
  of the hierarchical all-reduce; cross-site flows are spread over the DCI links by the same
  min-max pinning.

Before returning, every pinned path passes :func:`~controller.te.invariants.check_path` and the
next hops pass :func:`~controller.te.invariants.check_routes`; a plan that fails is never
returned (nothing is half-built).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controller.errors import PlanInvariantError
from controller.model.topology import Fabric
from controller.plan.capacity import (
    DEFAULT_HEADROOM,
    CapacityReport,
    TableCapacity,
    capacities,
    fit_tables,
)
from controller.plan.model import (
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    ETH_TYPE_LLDP,
    PRIO_CONTROL,
    PRIO_PINNED,
    PRIO_ROUTE,
    Action,
    FabricPlan,
    FlowIntent,
    GroupIntent,
    Match,
    SwitchPlan,
    group_id_for_ports,
)
from controller.policy.model import Policy
from controller.te.collectives import FlowDemand, expand_policy
from controller.te.ecmp import NextHops, ecmp_next_hops
from controller.te.invariants import check_path, check_routes
from controller.te.links import normalise_down_links
from controller.te.pinning import Pinning, format_link_flows, pin_flows

TABLE = 0
"""The one flow table the plan uses (control, pinned and route entries, told apart by priority)."""

__all__ = ["TABLE", "PlanResult", "build_plan", "format_link_flows", "pinned_match"]


@dataclass(frozen=True)
class PlanResult:
    """A computed plan and what it was computed from.

    Attributes
    ----------
    plan : FabricPlan
        Intended flows and groups of every switch.
    pinning : Pinning or None
        The pinned paths and per-link counts (``routing.mode: pinned``); None in ECMP mode.
    next_hops : dict of str to dict of str to tuple of int
        ``next_hops[switch][host]`` → ECMP ports, as installed by the route entries.
    tables : CapacityReport or None
        Pinned entries per switch against its capacity, what was merged and which flows fell
        back to ECMP (:func:`controller.plan.capacity.fit_tables`); None in ECMP mode.
    """

    plan: FabricPlan
    pinning: Pinning | None
    next_hops: NextHops
    tables: CapacityReport | None = None


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
    next_hops = ecmp_next_hops(fabric, down)
    check_routes(fabric, next_hops, down)

    control = (
        FlowIntent(TABLE, PRIO_CONTROL, Match(eth_type=ETH_TYPE_ARP), Action("controller"),
                   "control arp"),
        FlowIntent(TABLE, PRIO_CONTROL, Match(eth_type=ETH_TYPE_LLDP), Action("controller"),
                   "control lldp"),
    )
    route_match = {
        h.name: Match(eth_type=ETH_TYPE_IPV4, ipv4_dst=h.ipv4) for h in fabric.hosts
    }
    # Intents carry no switch name, so one object serves every switch with the same
    # (destination, ports): most switches of a Clos share them.
    route_cache: dict[tuple[str, tuple[int, ...]], FlowIntent] = {}
    group_cache: dict[tuple[int, ...], GroupIntent] = {}
    flows: dict[str, list[FlowIntent]] = {}
    groups: dict[str, set[GroupIntent]] = {}
    for sw in fabric.switches:
        sflows = list(control)
        sgroups: set[GroupIntent] = set()
        for host, ports in next_hops[sw.name].items():
            fi = route_cache.get((host, ports))
            if fi is None:
                if len(ports) == 1:
                    action = Action("output", ports[0])
                else:
                    grp = group_cache.get(ports)
                    if grp is None:
                        grp = group_cache[ports] = GroupIntent(group_id_for_ports(ports), ports)
                    action = Action("group", grp.group_id)
                fi = route_cache[(host, ports)] = FlowIntent(
                    TABLE, PRIO_ROUTE, route_match[host], action, f"route {host}"
                )
            if len(ports) > 1:
                sgroups.add(group_cache[ports])
            sflows.append(fi)
        flows[sw.name] = sflows
        groups[sw.name] = sgroups

    pinning: Pinning | None = None
    tables: CapacityReport | None = None
    if policy.routing.mode == "pinned":
        pinning = pin_flows(fabric, expand_policy(policy, fabric), down)
        pinned: dict[str, dict[Match, FlowIntent]] = {}
        for demand, path in pinning.paths.items():
            check_path(fabric, path, down, src=demand.src, dst=demand.dst)
            match = pinned_match(fabric, demand)
            origin = f"pin {demand.label}"
            for i in range(1, len(path) - 1):
                node, nxt = path[i], path[i + 1]
                fi = FlowIntent(TABLE, PRIO_PINNED, match,
                                Action("output", fabric.port_towards(node, nxt)), origin)
                at_node = pinned.setdefault(node, {})
                old = at_node.get(match)
                if old is not None and old.action != fi.action:
                    raise PlanInvariantError(
                        f"switch {node}: pinned flows '{old.origin}' and '{origin}' have the same "
                        f"match but leave by different ports ({old.action} vs {fi.action}); "
                        "give one collective a dscp or l4 match"
                    )
                at_node[match] = fi
        caps = capacities(fabric, per_switch=capacity, policy_tables=policy.tables)
        pinned, tables = fit_tables(
            fabric, pinning.paths, pinned, next_hops, caps, lambda d: pinned_match(fabric, d),
            headroom=policy.tables.headroom if policy.tables else DEFAULT_HEADROOM,
            importance=[c.name for c in policy.collectives])
        for node, entries in pinned.items():
            flows[node].extend(entries.values())

    plan = FabricPlan({
        sw.name: SwitchPlan(
            sw.name, sw.dpid, frozenset(flows[sw.name]), frozenset(groups[sw.name])
        )
        for sw in fabric.switches
    })
    return PlanResult(plan, pinning, next_hops, tables)
