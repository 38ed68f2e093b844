"""Candidate paths for a flow: every shortest *valley-free* path between two hosts.

A path is valley-free when the tiers of its nodes strictly rise and then strictly fall (up to one
peak, never back up). Clos fabrics route only such paths: they are loop-free by construction and,
with lossless (PFC) classes, free of cyclic buffer dependencies (Hu et al., "Deadlocks in
Datacenter Networks: Why Do They Form, and How to Avoid Them", HotNets 2016, §2–3).

A valley-free path is an up-path from the source to a peak followed by the reverse of an up-path
from the destination to the same peak, so the search runs one breadth-first search *upwards* from
each end (its "up-cone"), keeps the peaks minimising the sum of the two distances, and joins the
shortest up-paths there. On an intact Clos fabric these are exactly the hop-count shortest paths,
i.e. the paths of the ECMP DAG of :func:`controller.te.ecmp.ecmp_next_hops`; with links down they
can be fewer (a shortest path through a valley is never offered).

Multi-site fabrics: the two up-cones of hosts in different sites never meet; instead a path
climbs its source site's cone to a switch with a WAN (DCI) link, crosses exactly one WAN link
sideways at the peak, and descends the destination site's cone. Such a path is valley-free
inside each site (:func:`controller.te.invariants.check_path` accepts exactly one WAN hop, at the
peak). Among WAN crossings the ones with the fewest hops are kept, so a flow's candidates are
its shortest paths over every DCI link that lies on a shortest path.
"""

from __future__ import annotations

from collections.abc import Iterable

from controller.model.topology import Fabric
from controller.te.links import DownLinks, normalise_down_links, up_neighbours

Path = tuple[str, ...]
"""A path as node names, source host first, destination host last."""

_UpPath = tuple[Path, tuple[int, ...], tuple[int, ...]]
"""(host … node, output ports going up it, output ports coming back down it)."""


class _Cone:
    """Up-cone of one host: hop distance and shortest-path predecessors of every node above it,
    and (memoised) the shortest up-paths to a node with their port sequences."""

    __slots__ = ("dist", "preds", "ups")

    def __init__(self, dist: dict[str, int], preds: dict[str, list[str]]):
        self.dist = dist
        self.preds = preds
        # node -> [(host..node path, ports going up, ports coming back down)]
        self.ups: dict[str, list[_UpPath]] = {}


class PathOracle:
    """Shortest valley-free paths between hosts of one fabric state; cones are cached per host.

    Parameters
    ----------
    fabric : Fabric
        The fabric.
    down_links : iterable of frozenset of str, optional
        Links that are down (``frozenset({u, v})``).

    Raises
    ------
    ValueError
        ``down_links`` names a link the fabric does not have.
    """

    def __init__(self, fabric: Fabric, down_links: Iterable[frozenset[str]] = frozenset()):
        self.fabric = fabric
        self.down: DownLinks = normalise_down_links(fabric, down_links)
        self._ups = up_neighbours(fabric, self.down)
        self._port: dict[tuple[str, str], int] = {}
        for ln in fabric.links:
            self._port[(ln.a, ln.b)] = ln.a_port
            self._port[(ln.b, ln.a)] = ln.b_port
        self._cones: dict[str, _Cone] = {}
        # directed WAN crossings (u, v) over up links: peaks of cross-site paths
        self._wan: tuple[tuple[str, str], ...] = tuple(
            pair for ln in fabric.wan_links if frozenset((ln.a, ln.b)) not in self.down
            for pair in ((ln.a, ln.b), (ln.b, ln.a))
        )

    def _cone(self, host: str) -> _Cone:
        cone = self._cones.get(host)
        if cone is not None:
            return cone
        dist = {host: 0}
        preds: dict[str, list[str]] = {host: []}
        frontier = [host]
        d = 0
        while frontier:
            nxt: list[str] = []
            for u in frontier:
                for v in self._ups[u]:
                    dv = dist.get(v)
                    if dv is None:
                        dist[v] = d + 1
                        preds[v] = [u]
                        nxt.append(v)
                    elif dv == d + 1:
                        preds[v].append(u)
            frontier = nxt
            d += 1
        cone = _Cone(dist, preds)
        self._cones[host] = cone
        return cone

    def _up_paths(self, cone: _Cone, node: str) -> list[_UpPath]:
        """All shortest up-paths from the cone's host to ``node`` (host first), each with the
        output ports taken going up it and coming down it."""
        memo = cone.ups.get(node)
        if memo is not None:
            return memo
        preds = cone.preds[node]
        out: list[_UpPath]
        if not preds:
            out = [((node,), (), ())]
        else:
            port = self._port
            out = [
                (p + (node,), up + (port[(u, node)],), (port[(node, u)],) + down)
                for u in preds
                for p, up, down in self._up_paths(cone, u)
            ]
        cone.ups[node] = out
        return out

    def distance(self, src: str, dst: str) -> int | None:
        """Hop count of the shortest valley-free path, or None if there is none."""
        cs, cd = self._cone(self._host(src)), self._cone(self._host(dst))
        small, big = (cs, cd) if len(cs.dist) <= len(cd.dist) else (cd, cs)
        sums = [d + big.dist[n] for n, d in small.dist.items() if n in big.dist]
        sums += [cs.dist[u] + 1 + cd.dist[v] for u, v in self._wan
                 if u in cs.dist and v in cd.dist]
        return min(sums) if sums else None

    def paths(self, src: str, dst: str) -> list[Path]:
        """Every shortest valley-free path from host ``src`` to host ``dst``.

        Returns
        -------
        list of tuple of str
            Paths ``(src, leaf, ..., leaf, dst)``, sorted by the sequence of output ports taken
            along them (so "via spine1" precedes "via spine2"); empty when no valley-free path
            exists. Cost: O(|cone| + number of paths × length).

        Raises
        ------
        ValueError
            ``src`` or ``dst`` is not a host of the fabric, or they are the same host.
        """
        self._host(src)
        self._host(dst)
        if src == dst:
            raise ValueError(f"no path from host {src} to itself")
        cs, cd = self._cone(src), self._cone(dst)
        # peaks: (top of the up-path from src, top of the up-path from dst, cost); equal tops
        # for a common node, the two ends of a WAN link for a crossing between sites
        peaks = [(n, n, cs.dist[n] + cd.dist[n]) for n in cs.dist if n in cd.dist]
        peaks += [(u, v, cs.dist[u] + 1 + cd.dist[v]) for u, v in self._wan
                  if u in cs.dist and v in cd.dist]
        if not peaks:
            return []
        best = min(c for _, _, c in peaks)
        keyed: list[tuple[tuple[int, ...], Path]] = []
        for top_s, top_d, cost in peaks:
            if cost != best:
                continue
            downs = self._up_paths(cd, top_d)
            if top_s == top_d:
                for up, up_ports, _ in self._up_paths(cs, top_s):
                    keyed.extend(
                        (up_ports + down_ports, up + tuple(reversed(down[:-1])))
                        for down, _, down_ports in downs
                    )
                continue
            cross = (self._port[(top_s, top_d)],)
            for up, up_ports, _ in self._up_paths(cs, top_s):
                keyed.extend(
                    (up_ports + cross + down_ports, up + tuple(reversed(down)))
                    for down, _, down_ports in downs
                )
        keyed.sort()
        return [p for _, p in keyed]

    def _host(self, name: str) -> str:
        if name not in self.fabric.host_by_name:
            raise ValueError(f"{name!r} is not a host of fabric {self.fabric.name!r}")
        return name


def candidate_paths(
    fabric: Fabric, src: str, dst: str, down_links: Iterable[frozenset[str]] = frozenset()
) -> list[Path]:
    """Every shortest valley-free path from ``src`` to ``dst`` (see :meth:`PathOracle.paths`).

    Examples
    --------
    >>> from controller.model import build_leaf_spine
    >>> f = build_leaf_spine("ls", 2, 2, 1, 10**9, 10**9, 1.0, 1.0)
    >>> candidate_paths(f, "h1", "h2")
    [('h1', 'leaf1', 'spine1', 'leaf2', 'h2'), ('h1', 'leaf1', 'spine2', 'leaf2', 'h2')]
    """
    return PathOracle(fabric, down_links).paths(src, dst)
