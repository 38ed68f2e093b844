"""Generated fabrics beyond the two Clos kinds of :mod:`controller.model.topology`, and their shape.

* :func:`build_rail_optimized` — a rail-optimised GPU fabric in the style of published GPU
  reference designs (NVIDIA DGX SuperPOD: a scalable unit of 32 servers × 8 GPUs, NIC i of every
  server on rail i's leaf, leaves to spines non-blocking; /work/shared/data/real_workloads.md).
* :func:`fat_tree` / :func:`leaf_spine` — keyword-only front ends of the topology module's
  builders (units in the argument names, oversubscription explained once).
* :func:`server_groups`, :func:`oversubscription` — what placement and reports need to know.

Every fabric is the same immutable :class:`~controller.model.topology.Fabric`.
"""

from __future__ import annotations

from controller.model.topology import (
    TIER_LEAF,
    TIER_SPINE,
    Fabric,
    Host,
    Link,
    Switch,
    _host_addr,
    build_fat_tree,
    build_leaf_spine,
)


def build_rail_optimized(
    name: str,
    servers: int,
    rails: int,
    servers_per_leaf: int,
    spines: int,
    host_rate_bps: int,
    fabric_rate_bps: int,
    host_latency_us: float,
    fabric_latency_us: float,
    source: str = "<built>",
) -> Fabric:
    """A rail-optimised 2-tier fabric: ``servers`` × ``rails`` GPUs, one NIC (host) per GPU.

    Parameters
    ----------
    name : str
        Fabric name.
    servers : int
        GPU servers (≥ 1).
    rails : int
        GPUs (NICs) per server = number of rails (8 in the reference designs).
    servers_per_leaf : int
        Servers per rail leaf; must divide ``servers``. Rail i has servers / servers_per_leaf
        leaves ``r{i}l{j}`` (j from 0); server s's NIC i hangs off ``r{i}l{s // servers_per_leaf}``
        on port ``s % servers_per_leaf + 1``.
    spines : int
        Spines ``spine1..``; every leaf has one uplink to each (leaf ports servers_per_leaf+1..
        in spine order; a spine's port i+1 goes to leaf i, leaves in rail-major order).
    host_rate_bps, fabric_rate_bps : int
        Rate of a NIC link and of a leaf-spine link, bits/s.
    host_latency_us, fabric_latency_us : float
        One-way propagation delays, µs.
    source : str, optional
        Where the description came from (for messages).

    Returns
    -------
    Fabric
        ``kind == "rail-optimized"``; hosts ``h1..`` server-major (GPU i of server s is
        ``h{s·rails + i + 1}``, ``Host.server == s``); dpids: spines first, then leaves.

    Raises
    ------
    ValueError
        A count is < 1, ``servers_per_leaf`` does not divide ``servers``, or the leaves are
        oversubscribed (spines × fabric rate < servers_per_leaf × host rate).

    Examples
    --------
    >>> f = build_rail_optimized("ro", 4, 8, 2, 2, 400 * 10**9, 400 * 10**9, 1.0, 1.0)
    >>> len(f.hosts), len(f.switches), f.host_by_name["h10"].leaf, f.host_by_name["h10"].server
    (32, 18, 'r1l0', 1)
    """
    for what, v in (("servers", servers), ("rails", rails), ("servers_per_leaf", servers_per_leaf),
                    ("spines", spines)):
        if v < 1:
            raise ValueError(f"rail-optimized {what} must be >= 1, got {v}")
    if servers % servers_per_leaf:
        raise ValueError(
            f"servers_per_leaf ({servers_per_leaf}) must divide servers ({servers})"
        )
    if spines * fabric_rate_bps < servers_per_leaf * host_rate_bps:
        raise ValueError(
            f"rail leaves must be non-blocking: {spines} spines × {fabric_rate_bps} bit/s < "
            f"{servers_per_leaf} servers × {host_rate_bps} bit/s"
        )
    leaves_per_rail = servers // servers_per_leaf
    switches: list[Switch] = []
    dpid = 1
    for s in range(spines):
        switches.append(Switch(f"spine{s + 1}", "spine", TIER_SPINE, dpid))
        dpid += 1
    leaf_names = [f"r{r}l{j}" for r in range(rails) for j in range(leaves_per_rail)]
    for lf in leaf_names:
        switches.append(Switch(lf, "leaf", TIER_LEAF, dpid))
        dpid += 1
    hosts: list[Host] = []
    links: list[Link] = []
    for srv in range(servers):
        for r in range(rails):
            n = srv * rails + r + 1
            ip, mac = _host_addr(n)
            leaf = f"r{r}l{srv // servers_per_leaf}"
            port = srv % servers_per_leaf + 1
            hosts.append(Host(f"h{n}", n, ip, mac, leaf, port, server=srv))
            links.append(Link(f"h{n}", 0, leaf, port, host_rate_bps, host_latency_us))
    for li, lf in enumerate(leaf_names):
        for s in range(spines):
            links.append(Link(lf, servers_per_leaf + 1 + s, f"spine{s + 1}", li + 1,
                              fabric_rate_bps, fabric_latency_us))
    return Fabric(name, "rail-optimized", tuple(switches), tuple(hosts), tuple(links), source)


def fat_tree(
    k: int,
    *,
    host_rate_bps: int,
    fabric_rate_bps: int,
    latency_us: float = 1.0,
    core_uplinks: int | None = None,
    name: str | None = None,
) -> Fabric:
    """A k-ary fat-tree; oversubscribed by ``core_uplinks`` < k/2 (aggregation layer, ratio
    (k/2)/core_uplinks) and/or ``host_rate_bps`` > ``fabric_rate_bps`` (edge layer, ratio
    host/fabric). See :func:`controller.model.topology.build_fat_tree`. Raises ValueError."""
    return build_fat_tree(name or f"fat-tree-k{k}", k, host_rate_bps, fabric_rate_bps,
                          latency_us, latency_us, core_uplinks=core_uplinks)


def leaf_spine(
    spines: int,
    leaves: int,
    hosts_per_leaf: int,
    *,
    host_rate_bps: int,
    fabric_rate_bps: int,
    latency_us: float = 1.0,
    name: str | None = None,
) -> Fabric:
    """A 2-tier leaf-spine fabric (:func:`controller.model.topology.build_leaf_spine`)."""
    return build_leaf_spine(name or f"leaf-spine-{spines}x{leaves}x{hosts_per_leaf}", spines,
                            leaves, hosts_per_leaf, host_rate_bps, fabric_rate_bps,
                            latency_us, latency_us)


def server_groups(fabric: Fabric) -> tuple[tuple[str, ...], ...]:
    """Hosts grouped by GPU server, servers in index order, each server's hosts in rail order.

    On fabrics without ``Host.server`` every host is a one-GPU server. Shape: (servers,
    GPUs per server) — ragged only if a fabric were built with unequal servers.
    """
    if all(h.server is None for h in fabric.hosts):
        return tuple((h.name,) for h in fabric.hosts)
    by: dict[int, list[Host]] = {}
    for h in fabric.hosts:
        if h.server is None:
            raise ValueError(f"host {h.name} has no server while others do")
        by.setdefault(h.server, []).append(h)
    return tuple(tuple(h.name for h in sorted(by[s], key=lambda h: h.index)) for s in sorted(by))


def oversubscription(fabric: Fabric) -> dict[str, float]:
    """Worst ratio of down-facing to up-facing capacity per switch role (1.0 = non-blocking).

    Returns
    -------
    dict of str to float
        Role (leaf, edge, agg, spine, core) → max over its switches of
        Σ capacity_bps towards lower tiers / Σ capacity_bps towards higher tiers; roles without
        up links (the top tier) are left out.
    """
    tier = {s.name: s.tier for s in fabric.switches}
    tier.update({h.name: 0 for h in fabric.hosts})
    down: dict[str, int] = {}
    up: dict[str, int] = {}
    for ln in fabric.links:
        lo, hi = (ln.a, ln.b) if tier[ln.a] < tier[ln.b] else (ln.b, ln.a)
        up[lo] = up.get(lo, 0) + ln.capacity_bps
        down[hi] = down.get(hi, 0) + ln.capacity_bps
    out: dict[str, float] = {}
    for s in fabric.switches:
        if up.get(s.name):
            ratio = down.get(s.name, 0) / up[s.name]
            out[s.role] = max(out.get(s.role, 0.0), ratio)
    return out
