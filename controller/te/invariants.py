"""Invariants of computed forwarding, checked before anything is handed to a driver.

* :func:`check_path` — one pinned path: simple, host to host, over existing up links, valley-free;
* :func:`check_routes` — per-destination next hops: every walk towards a destination uses existing
  up links, never loops, never dead-ends, and ends at that destination.

Both raise :class:`~controller.errors.PlanInvariantError`; a plan that fails is never pushed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from controller.errors import PlanInvariantError
from controller.model.topology import Fabric
from controller.te.links import DownLinks, normalise_down_links


def check_path(
    fabric: Fabric,
    path: Sequence[str],
    down_links: Iterable[frozenset[str]] = frozenset(),
    *,
    src: str | None = None,
    dst: str | None = None,
) -> None:
    """Check that ``path`` is a usable, valley-free host-to-host path.

    Parameters
    ----------
    fabric : Fabric
        The fabric the path runs in.
    path : sequence of str
        Node names, first and last being hosts; length ≥ 3 (host, switch…, host).
    down_links : iterable of frozenset of str, optional
        Links that are down (``frozenset({u, v})``).
    src, dst : str, optional
        If given, the hosts the path must start and end at.

    Raises
    ------
    ValueError
        ``down_links`` names a link the fabric does not have.
    PlanInvariantError
        The path is too short, does not start/end at a host (or at ``src``/``dst``), passes
        through a host, repeats a node (a loop), uses a link that does not exist or is down, or
        is not valley-free: the tiers must strictly rise, then strictly fall (one peak; a
        sideways hop or a rise after a fall is a valley). Valley-free routing is what keeps Clos
        fabrics deadlock-free under PFC (Hu et al., HotNets 2016, §3). On multi-site fabrics a
        path may cross one WAN (DCI) link, at its peak: it rises inside the source site, crosses,
        and falls inside the destination site (each site's part is valley-free; a second WAN
        hop, or a WAN hop that is not at the peak, is refused).
    """
    p = tuple(path)
    shown = " -> ".join(p) if p else "(empty)"
    if len(p) < 3:
        raise PlanInvariantError(f"path {shown}: too short (need host, switch, ..., host)")
    if not fabric.is_host(p[0]):
        raise PlanInvariantError(f"path {shown}: starts at {p[0]!r}, which is not a host")
    if not fabric.is_host(p[-1]):
        raise PlanInvariantError(f"path {shown}: ends at {p[-1]!r}, which is not a host")
    if src is not None and p[0] != src:
        raise PlanInvariantError(f"path {shown}: starts at {p[0]}, not at source {src}")
    if dst is not None and p[-1] != dst:
        raise PlanInvariantError(f"path {shown}: ends at {p[-1]}, not at destination {dst}")
    seen: set[str] = set()
    for node in p:
        if node in seen:
            raise PlanInvariantError(f"path {shown}: loop, {node} is visited twice")
        seen.add(node)
    for node in p[1:-1]:
        if node not in fabric.switch_by_name:
            raise PlanInvariantError(f"path {shown}: {node!r} is not a switch")
    down = normalise_down_links(fabric, down_links)
    for u, v in zip(p, p[1:], strict=False):
        try:
            fabric.link_between(u, v)
        except KeyError:
            raise PlanInvariantError(f"path {shown}: there is no link {u}-{v}") from None
        if frozenset((u, v)) in down:
            raise PlanInvariantError(f"path {shown}: link {u}-{v} is down")
    tiers = [fabric.tier(n) for n in p]
    falling = False
    crossed = False
    for i in range(1, len(p)):
        if fabric.link_between(p[i - 1], p[i]).wan:
            if crossed:
                raise PlanInvariantError(f"path {shown}: crosses a second WAN link at "
                                         f"{p[i - 1]} -> {p[i]}")
            if falling:
                raise PlanInvariantError(f"path {shown}: not valley-free, crosses the WAN at "
                                         f"{p[i - 1]} -> {p[i]} after going down")
            crossed = True
            falling = True  # what follows the crossing must go down
            continue
        if tiers[i] == tiers[i - 1]:
            raise PlanInvariantError(
                f"path {shown}: not valley-free, {p[i - 1]} -> {p[i]} stays on tier {tiers[i]}"
            )
        if tiers[i] < tiers[i - 1]:
            falling = True
        elif falling:
            raise PlanInvariantError(
                f"path {shown}: not valley-free, goes up again at {p[i - 1]} -> {p[i]} "
                f"(tier {tiers[i - 1]} -> {tiers[i]}) after going down"
            )


def check_routes(
    fabric: Fabric,
    next_hops: Mapping[str, Mapping[str, Sequence[int]]],
    down_links: Iterable[frozenset[str]] = frozenset(),
) -> None:
    """Check per-destination next hops: loop-free, no dead ends, complete, over up links.

    Parameters
    ----------
    fabric : Fabric
        The fabric.
    next_hops : mapping of str to mapping of str to sequence of int
        ``next_hops[switch][host]`` → output ports (as from
        :func:`controller.te.ecmp.ecmp_next_hops`).
    down_links : iterable of frozenset of str, optional
        Links that are down (``frozenset({u, v})``).

    Raises
    ------
    ValueError
        ``down_links`` names a link the fabric does not have.
    PlanInvariantError
        An unknown switch or host is named; a port has no link or its link is down; a route
        has no port; a port leads to another host, or to a switch without a route to the same
        destination (a dead end); following next hops can loop; or a switch that can reach a
        host over up links has no route to it.

    Notes
    -----
    Per destination h, the next hops form a directed graph G_h over the switches. Every walk
    in G_h ends at h iff G_h is acyclic and its only sink is h; acyclicity is checked by
    depth-first search with three colours (Cormen et al., *Introduction to Algorithms*,
    3rd ed., §22.3, Lemma 22.11), O(|switches| + |next hops|) per destination — done once per
    distinct switch-to-switch graph (the hosts of one leaf share theirs). No path is
    enumerated.
    """
    down = normalise_down_links(fabric, down_links)
    port_map = fabric.port_map
    hosts = fabric.host_by_name
    # (switch, ports) -> (switch peers, host peers), resolved once per distinct pair
    resolved: dict[tuple[str, tuple[int, ...]], tuple[tuple[str, ...], tuple[str, ...]]] = {}
    columns: dict[str, list[tuple[str, tuple[str, ...]]]] = {h: [] for h in hosts}
    for s, routes in next_hops.items():
        if s not in fabric.switch_by_name:
            raise PlanInvariantError(f"routes name {s!r}, which is not a switch")
        for h, ports in routes.items():
            col = columns.get(h)
            if col is None:
                raise PlanInvariantError(f"switch {s}: route to {h!r}, which is not a host")
            key = (s, tuple(ports))
            peers = resolved.get(key)
            if peers is None:
                peers = resolved[key] = _resolve(s, key[1], h, port_map, down, hosts)
            for hp in peers[1]:
                if hp != h:
                    raise PlanInvariantError(
                        f"switch {s}: route to {h} delivers to host {hp} instead"
                    )
            col.append((s, peers[0]))
    # Destinations with the same switch-to-switch next-hop graph (e.g. the hosts of one leaf)
    # share the structural checks; their host deliveries were checked above.
    comp = _components(fabric, down)
    done: set[tuple[object, ...]] = set()
    for h, col in columns.items():
        sig = (comp.get(h), tuple(col))
        if sig in done:
            continue
        done.add(sig)
        graph = dict(col)
        for s, nexts in col:
            for peer in nexts:
                if peer not in graph:
                    raise PlanInvariantError(
                        f"switch {s}: route to {h} leads to {peer}, which has no route to {h} "
                        "(dead end)"
                    )
        _check_acyclic(h, graph)
        for s in fabric.switch_by_name:
            if s not in graph and comp.get(s) is not None and comp.get(s) == comp.get(h):
                raise PlanInvariantError(f"switch {s}: no route to {h}, which it can reach")


def _resolve(
    s: str,
    ports: tuple[int, ...],
    h: str,
    port_map: Mapping[tuple[str, int], tuple[str, int]],
    down: DownLinks,
    hosts: Mapping[str, object],
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The switches and the hosts that ``ports`` of ``s`` lead to, over up links."""
    if not ports:
        raise PlanInvariantError(f"switch {s}: route to {h} has no output port")
    switch_peers: list[str] = []
    host_peers: list[str] = []
    for p in ports:
        far = port_map.get((s, p))
        if far is None:
            raise PlanInvariantError(f"switch {s}: route to {h} uses port {p}, which has no link")
        if frozenset((s, far[0])) in down:
            raise PlanInvariantError(
                f"switch {s}: route to {h} uses port {p}, whose link {s}-{far[0]} is down"
            )
        (host_peers if far[0] in hosts else switch_peers).append(far[0])
    return tuple(switch_peers), tuple(host_peers)


def _check_acyclic(h: str, graph: Mapping[str, tuple[str, ...]]) -> None:
    """Depth-first search with three colours over switch-to-switch next hops towards ``h``."""
    colour: dict[str, int] = {}  # absent: white, 1: grey (on the stack), 2: black (done)
    for root in graph:
        if root in colour:
            continue
        colour[root] = 1
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            node, i = stack[-1]
            peers = graph[node]
            while i < len(peers) and colour.get(peers[i]) == 2:
                i += 1
            if i == len(peers):
                colour[node] = 2
                stack.pop()
                continue
            stack[-1] = (node, i + 1)
            nxt = peers[i]
            if colour.get(nxt) == 1:
                names = [n for n, _ in stack]
                cycle = names[names.index(nxt):] + [nxt]
                raise PlanInvariantError(f"routes to {h} loop: {' -> '.join(cycle)}")
            colour[nxt] = 1
            stack.append((nxt, 0))


def _components(fabric: Fabric, down: DownLinks) -> dict[str, int]:
    """Connected components over up links, where hosts are ends only (never transit)."""
    adj: dict[str, list[str]] = {}
    for ln in fabric.links:
        if frozenset((ln.a, ln.b)) in down:
            continue
        adj.setdefault(ln.a, []).append(ln.b)
        adj.setdefault(ln.b, []).append(ln.a)
    comp: dict[str, int] = {}
    hosts = fabric.host_by_name
    for i, s in enumerate(fabric.switch_by_name):
        if s in comp:
            continue
        comp[s] = i
        todo = [s]
        while todo:
            u = todo.pop()
            for v in adj.get(u, ()):
                if v not in comp:
                    comp[v] = i
                    if v not in hosts:
                        todo.append(v)
    return comp
