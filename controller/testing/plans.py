"""A small reference planner for tests of the drivers and runtime (not the production planner).

:func:`simple_plan` gives per-destination shortest-path ECMP over switch–switch links, ARP and
LLDP to the controller, and optional pinned host-pair paths. It lets driver and runtime tests run
on plans whose shape is known exactly, independently of :mod:`controller.plan.build`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx

from controller.errors import PlanInvariantError
from controller.model.topology import Fabric
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


@dataclass(frozen=True)
class SimplePlanResult:
    plan: FabricPlan
    pinning: Mapping[tuple[str, str], tuple[str, ...]] | None
    next_hops: Mapping[tuple[str, str], tuple[str, ...]]


def simple_plan(
    fabric: Fabric,
    policy: Any = None,
    down_links: frozenset[frozenset[str]] = frozenset(),
    pins: Mapping[tuple[str, str], Sequence[str]] | None = None,
) -> SimplePlanResult:
    """Plan ECMP routes to every host, avoiding ``down_links``; ``pins`` maps (src host,
    dst host) to a full node path (host, switches…, host) installed at :data:`PRIO_PINNED`.

    Raises PlanInvariantError if a host's leaf cannot reach another host's leaf.
    """
    live = fabric.without_links(down_links)
    g = live.graph()
    sw = nx.Graph(g.subgraph([s.name for s in fabric.switches]))
    flows: dict[str, set[FlowIntent]] = {s.name: set() for s in fabric.switches}
    groups: dict[str, set[GroupIntent]] = {s.name: set() for s in fabric.switches}
    next_hops: dict[tuple[str, str], tuple[str, ...]] = {}
    for s in fabric.switches:
        for et, what in ((ETH_TYPE_ARP, "arp"), (ETH_TYPE_LLDP, "lldp")):
            flows[s.name].add(FlowIntent(0, PRIO_CONTROL, Match(eth_type=et),
                                         Action("controller"), what))
    for h in fabric.hosts:
        dist = nx.single_source_shortest_path_length(sw, h.leaf)
        for s in fabric.switches:
            m = Match(eth_type=ETH_TYPE_IPV4, ipv4_dst=h.ipv4)
            if s.name == h.leaf:
                flows[s.name].add(FlowIntent(0, PRIO_ROUTE, m, Action("output", h.port),
                                             f"route {h.name}"))
                continue
            if s.name not in dist:
                raise PlanInvariantError(f"{s.name} cannot reach {h.leaf}")
            nhs = tuple(sorted(n for n in sw.neighbors(s.name) if dist.get(n) == dist[s.name] - 1))
            next_hops[(s.name, h.name)] = nhs
            ports = tuple(sorted(fabric.port_towards(s.name, n) for n in nhs))
            if len(ports) == 1:
                act = Action("output", ports[0])
            else:
                gid = group_id_for_ports(ports)
                groups[s.name].add(GroupIntent(gid, ports))
                act = Action("group", gid)
            flows[s.name].add(FlowIntent(0, PRIO_ROUTE, m, act, f"route {h.name}"))
    for (src, dst), path in (pins or {}).items():
        a, b = fabric.host_by_name[src], fabric.host_by_name[dst]
        m = Match(eth_type=ETH_TYPE_IPV4, ipv4_src=a.ipv4, ipv4_dst=b.ipv4)
        for i in range(1, len(path) - 1):
            port = fabric.port_towards(path[i], path[i + 1])
            flows[path[i]].add(FlowIntent(0, PRIO_PINNED, m, Action("output", port),
                                          f"pin {src}->{dst}"))
    plan = FabricPlan({
        s.name: SwitchPlan(s.name, s.dpid, frozenset(flows[s.name]), frozenset(groups[s.name]))
        for s in fabric.switches
    })
    return SimplePlanResult(plan, {k: tuple(v) for k, v in pins.items()} if pins else None,
                            next_hops)
