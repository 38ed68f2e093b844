"""Generated fabrics beyond the two Clos kinds of :mod:`controller.model.topology`, and their shape.

* :func:`build_rail_optimized` — a rail-optimised GPU fabric in the style of published GPU
  reference designs (NVIDIA DGX SuperPOD: a scalable unit of 32 servers × 8 GPUs, NIC i of every
  server on rail i's leaf, leaves to spines non-blocking; the DGX SuperPOD reference architecture).
* :func:`fat_tree` / :func:`leaf_spine` — keyword-only front ends of the topology module's
  builders (units in the argument names, oversubscription explained once).
* :func:`server_groups`, :func:`oversubscription` — what placement and reports need to know.
* :func:`build_multi_site` — leaf-spine sites joined by WAN (data-centre interconnect) links.

Every fabric is the same immutable :class:`~controller.model.topology.Fabric`.
"""

from __future__ import annotations

from dataclasses import dataclass

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


# -- multi-site fabrics ----------------------------------------------------------------------
SiteArgs = tuple[str, int, int, int, int, int, float, float]
"""(name, spines, leaves, hosts_per_leaf, host_rate_bps, fabric_rate_bps, host_latency_us,
fabric_latency_us) of one leaf-spine site."""


@dataclass(frozen=True)
class WanEnd:
    """A DCI link to build: switch names ``a`` and ``b`` (site-prefixed, ``dc1-spine1``),
    ``rate_bps`` (bit/s), one-way ``delay_us`` (µs), ``loss_percent`` (percent)."""

    a: str
    b: str
    rate_bps: int
    delay_us: float
    loss_percent: float


def _site_switches(site: SiteArgs) -> dict[str, int]:
    """Site-prefixed switch name → tier, for one site."""
    name, spines, leaves = site[0], site[1], site[2]
    out = {f"{name}-spine{i + 1}": TIER_SPINE for i in range(spines)}
    out.update({f"{name}-leaf{i + 1}": TIER_LEAF for i in range(leaves)})
    return out


def multi_site_problems(sites: list[SiteArgs], wans: list[WanEnd]) -> list[tuple[tuple[str | int, ...], str]]:
    """Cross-checks of a multi-site description: (YAML path, message) per problem.

    Site names are unique; every WAN end is a top-tier switch (spine) of a site; the two ends
    are in different sites; no pair of switches has two WAN links; every site has a WAN link.
    """
    out: list[tuple[tuple[str | int, ...], str]] = []
    seen: set[str] = set()
    for i, st in enumerate(sites):
        if st[0] in seen:
            out.append((("sites", i, "name"), f"site {st[0]!r} is declared twice"))
        seen.add(st[0])
    site_of: dict[str, str] = {}
    for st in sites:
        for sw, tier in _site_switches(st).items():
            if tier == TIER_SPINE:
                site_of[sw] = st[0]
    pairs: set[frozenset[str]] = set()
    joined: set[str] = set()
    for i, w in enumerate(wans):
        bad = False
        for j, end in enumerate((w.a, w.b)):
            if end not in site_of:
                out.append((("wan_links", i, "between", j),
                            f"{end!r} is not a spine of any site (WAN links join top-tier "
                            f"switches; spines: {', '.join(sorted(site_of))})"))
                bad = True
        if bad:
            continue
        if site_of[w.a] == site_of[w.b]:
            out.append((("wan_links", i, "between"),
                        f"{w.a} and {w.b} are both in site {site_of[w.a]!r}; a WAN link joins "
                        "two sites"))
            continue
        pair = frozenset((w.a, w.b))
        if pair in pairs:
            out.append((("wan_links", i, "between"), f"{w.a}-{w.b} has two WAN links (one link "
                                                     "per switch pair)"))
        pairs.add(pair)
        joined.update((site_of[w.a], site_of[w.b]))
    if not out:
        for i, st in enumerate(sites):
            if st[0] not in joined:
                out.append((("sites", i, "name"), f"site {st[0]!r} has no WAN link"))
    return out


def build_multi_site(name: str, sites: list[SiteArgs], wans: list[WanEnd],
                     source: str = "<built>") -> Fabric:
    """Leaf-spine sites joined by WAN (DCI) links, as one :class:`Fabric` of kind ``multi-site``.

    Parameters
    ----------
    name : str
        Fabric name.
    sites : list of SiteArgs
        One leaf-spine description per site (see :data:`SiteArgs`), in order.
    wans : list of WanEnd
        The DCI links; their ends must pass :func:`multi_site_problems`.
    source : str, optional
        Where the description came from.

    Returns
    -------
    Fabric
        Switches ``{site}-spine{i}``, ``{site}-leaf{i}`` (``Switch.site``), site by site, spines
        first within a site; dpids 1, 2, … in that order. Hosts ``h1..`` numbered across sites in
        site order (``Host.site``), with the usual address plan. Ports inside a site are those of
        :func:`~controller.model.topology.build_leaf_spine`; a WAN link takes the next free port
        of each end, in ``wans`` order. WAN links carry ``wan=True``, ``latency_us`` = one-way
        delay, ``loss_percent``.

    Raises
    ------
    ValueError
        A problem :func:`multi_site_problems` reports (the first one).

    Examples
    --------
    >>> s = ("dc1", 1, 2, 2, 10**9, 10**9, 1.0, 1.0)
    >>> f = build_multi_site("two", [s, ("dc2",) + s[1:]],
    ...                      [WanEnd("dc1-spine1", "dc2-spine1", 10**8, 5000.0, 0.0)])
    >>> [ln.a_port for ln in f.wan_links], f.host_by_name["h5"].leaf, f.site_of("h5")
    ([3], 'dc2-leaf1', 'dc2')
    """
    problems = multi_site_problems(sites, wans)
    if problems:
        raise ValueError(problems[0][1])
    switches: list[Switch] = []
    hosts: list[Host] = []
    links: list[Link] = []
    dpid = 1
    n = 1
    for st in sites:
        site = st[0]
        part = build_leaf_spine(site, *st[1:])
        ren = {s.name: f"{site}-{s.name}" for s in part.switches}
        for s in part.switches:
            switches.append(Switch(ren[s.name], s.role, s.tier, dpid, site=site))
            dpid += 1
        hren: dict[str, str] = {}
        for h in part.hosts:
            ip, mac = _host_addr(n)
            hren[h.name] = f"h{n}"
            hosts.append(Host(f"h{n}", n, ip, mac, ren[h.leaf], h.port, site=site))
            n += 1
        for ln in part.links:
            links.append(Link(ren.get(ln.a) or hren[ln.a], ln.a_port, ren.get(ln.b) or hren[ln.b],
                              ln.b_port, ln.capacity_bps, ln.latency_us))
    top: dict[str, int] = {}
    for ln in links:
        for node, port in ((ln.a, ln.a_port), (ln.b, ln.b_port)):
            top[node] = max(top.get(node, 0), port)
    for w in wans:
        pa, pb = top[w.a] + 1, top[w.b] + 1
        top[w.a], top[w.b] = pa, pb
        links.append(Link(w.a, pa, w.b, pb, w.rate_bps, w.delay_us, wan=True,
                          loss_percent=w.loss_percent))
    return Fabric(name, "multi-site", tuple(switches), tuple(hosts), tuple(links), source)
