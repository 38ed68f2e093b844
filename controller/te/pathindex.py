"""Candidate paths as arrays of directed-link ids, built per leaf pair without enumerating
all-pairs paths (the scalable counterpart of :class:`controller.te.paths.PathOracle`).

The candidates of a flow are the same as :meth:`PathOracle.paths` gives: every shortest
valley-free path. They are built from the *up-cone* of each leaf (the switch a host hangs off):
a breadth-first search over strictly-rising links gives every node above the leaf, its hop
distance and its shortest up-paths. A path between leaves Ls and Ld is an up-path of Ls to a
common peak p followed by the reverse of an up-path of Ld to p, over the peaks minimising
d(Ls, p) + d(Ld, p) (Hu et al., HotNets 2016, §2–3, for why only valley-free paths). On a
fat-tree every (leaf, peak) pair has exactly one up-path, so the join is a vectorised alignment
of two small arrays; other fabrics fall back to a product per peak.

Cost: one cone per leaf that is used, O(nodes above it + up-paths); one join per distinct
(source leaf, destination leaf) pair that is used, O(candidates × path length); nothing is
computed for pairs no flow uses. On a k = 32 fat-tree a cross-pod pair has 256 candidates of
4 fabric links each.

A *directed link id* ``i`` indexes :attr:`PathIndex.links` (``(u, v)`` pairs) and
:attr:`PathIndex.capacity_bps`; link ``j`` of the fabric has ids 2j (a→b) and 2j+1 (b→a).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from controller.model.topology import Fabric
from controller.te.links import DownLinks, normalise_down_links, up_neighbours

DirectedLink = tuple[str, str]
Path = tuple[str, ...]


_ABSENT = 1 << 40  # distance of a node outside a cone


class _LeafCone:
    """Up-cone of one leaf as arrays over all switch ids (internal).

    ``dist[n]``: hop distance from the leaf up to switch n (``_ABSENT`` if not above it, and for
    the leaf itself); ``start[n]``/``count[n]``: rows of n's shortest up-paths in ``up[dist[n]]``
    and ``down[dist[n]]`` — (paths × dist) link-id arrays of the up-path leaf → n and of its
    reverse n → leaf in travel order. ``unique``: every node has exactly one up-path.
    """

    __slots__ = ("count", "dist", "down", "start", "unique", "up")

    def __init__(self, n_nodes: int) -> None:
        self.dist = np.full(n_nodes, _ABSENT, dtype=np.int64)
        self.start = np.zeros(n_nodes, dtype=np.int64)
        self.count = np.zeros(n_nodes, dtype=np.int64)
        self.up: dict[int, np.ndarray] = {}
        self.down: dict[int, np.ndarray] = {}
        self.unique = True


class PathIndex:
    """Shortest valley-free candidate paths of one fabric state, as link-id arrays.

    Parameters
    ----------
    fabric : Fabric
        The fabric; every host is single-homed (``Host.leaf``).
    down_links : iterable of frozenset of str, optional
        Links that are down (``frozenset({u, v})``); no candidate uses them.

    Attributes
    ----------
    links : list of (str, str)
        Directed link of each id.
    link_id : dict of (str, str) to int
        The inverse of ``links``.
    capacity_bps : numpy.ndarray of float64, shape (2·|links|,)
        Capacity of each directed link, bits/s.
    is_up : numpy.ndarray of bool, shape (2·|links|,)
        False for both directions of a down link.

    Raises
    ------
    ValueError
        ``down_links`` names a link the fabric does not have.
    """

    def __init__(self, fabric: Fabric, down_links: Iterable[frozenset[str]] = frozenset()):
        self.fabric = fabric
        self.down: DownLinks = normalise_down_links(fabric, down_links)
        self.links: list[DirectedLink] = []
        caps: list[float] = []
        up: list[bool] = []
        for ln in fabric.links:
            alive = frozenset((ln.a, ln.b)) not in self.down
            self.links += [(ln.a, ln.b), (ln.b, ln.a)]
            caps += [float(ln.capacity_bps)] * 2
            up += [alive, alive]
        self.link_id = {uv: i for i, uv in enumerate(self.links)}
        self.capacity_bps = np.asarray(caps, dtype=np.float64)
        self.is_up = np.asarray(up, dtype=bool)
        self._ups = up_neighbours(fabric, self.down)
        self._names = [s.name for s in fabric.switches]
        self._node_id = {n: i for i, n in enumerate(self._names)}
        self._cones: dict[str, _LeafCone] = {}
        self._up_ptr: np.ndarray | None = None
        self._up_nbr: np.ndarray | None = None
        self._up_lid: np.ndarray | None = None
        self._pairs: dict[tuple[str, str], np.ndarray] = {}

    # -- hosts ----------------------------------------------------------------------------------
    def access(self, host: str) -> tuple[str, int, int] | None:
        """(leaf, id of host→leaf, id of leaf→host), or None if the access link is down.
        Raises ValueError if ``host`` is not a host of the fabric."""
        h = self.fabric.host_by_name.get(host)
        if h is None:
            raise ValueError(f"{host!r} is not a host of fabric {self.fabric.name!r}")
        if frozenset((host, h.leaf)) in self.down:
            return None
        return h.leaf, self.link_id[(host, h.leaf)], self.link_id[(h.leaf, host)]

    # -- candidates -----------------------------------------------------------------------------
    def leaf_candidates(self, src_leaf: str, dst_leaf: str) -> np.ndarray:
        """Fabric part of every candidate between two leaves (read-only, cached).

        Returns
        -------
        numpy.ndarray of int64, shape (n_candidates, hops)
            Row r: the directed link ids from ``src_leaf`` to ``dst_leaf`` of candidate r, in
            travel order; shape (1, 0) when the leaves are the same, (0, 0) when no valley-free
            path exists. Rows are ordered by peak node (switch declaration order).
        """
        key = (src_leaf, dst_leaf)
        got = self._pairs.get(key)
        if got is not None:
            return got
        if src_leaf == dst_leaf:
            out = np.empty((1, 0), dtype=np.int64)
        else:
            out = self._join(self._cone(src_leaf), self._cone(dst_leaf))
        out.setflags(write=False)
        self._pairs[key] = out
        return out

    def candidates(self, src: str, dst: str) -> np.ndarray:
        """Every candidate of the flow ``src`` → ``dst`` as link ids, access links included.

        Returns
        -------
        numpy.ndarray of int64, shape (n_candidates, hops + 2)
            Empty (0 rows) when an access link is down or no valley-free path exists.

        Raises
        ------
        ValueError
            ``src``/``dst`` is not a host, or they are the same host.
        """
        if src == dst:
            raise ValueError(f"no path from host {src} to itself")
        a, b = self.access(src), self.access(dst)
        if a is None or b is None:
            return np.empty((0, 0), dtype=np.int64)
        inner = self.leaf_candidates(a[0], b[0])
        n = inner.shape[0]
        return np.hstack([np.full((n, 1), a[1]), inner, np.full((n, 1), b[2])]).astype(np.int64)

    def paths(self, src: str, dst: str) -> list[Path]:
        """The candidates of ``src`` → ``dst`` as node tuples (host … host). Raises ValueError."""
        return [self.path_of(row) for row in self.candidates(src, dst)]

    def path_of(self, link_ids: Sequence[int] | np.ndarray) -> Path:
        """Node tuple of a path given as consecutive directed link ids."""
        ids = [int(i) for i in link_ids]
        if not ids:
            raise ValueError("a path needs at least one link")
        return (self.links[ids[0]][0],) + tuple(self.links[i][1] for i in ids)

    def link_ids(self, path: Sequence[str]) -> np.ndarray:
        """Directed link ids along a node path. Raises KeyError for a hop that is not a link."""
        return np.asarray([self.link_id[(u, v)] for u, v in zip(path, path[1:], strict=False)],
                          dtype=np.int64)

    # -- internals ------------------------------------------------------------------------------
    def _cone(self, leaf: str) -> _LeafCone:
        cone = self._cones.get(leaf)
        if cone is not None:
            return cone
        if self._up_ptr is None:
            self._build_up_csr()
        ptr, nbr, lid = self._up_ptr, self._up_nbr, self._up_lid
        assert ptr is not None and nbr is not None and lid is not None
        cone = _LeafCone(len(self._names))
        seen = np.zeros(len(self._names), dtype=bool)
        ends = np.asarray([self._node_id[leaf]], dtype=np.int64)
        seen[ends] = True
        rows = np.empty((1, 0), dtype=np.int64)
        d = 0
        while len(ends):
            deg = ptr[ends + 1] - ptr[ends]
            total = int(deg.sum())
            if total == 0:
                break
            which = np.repeat(np.arange(len(ends)), deg)
            first = np.cumsum(deg) - deg
            slot = np.repeat(ptr[ends] - first, deg) + np.arange(total)
            new_ends = nbr[slot]
            new_rows = np.hstack([rows[which], lid[slot][:, None]])
            fresh = ~seen[new_ends]  # reached first at this level: shortest up-paths only
            new_ends, new_rows = new_ends[fresh], new_rows[fresh]
            if not len(new_ends):
                break
            order = np.argsort(new_ends, kind="stable")
            new_ends, new_rows = new_ends[order], new_rows[order]
            d += 1
            nodes, starts, counts = np.unique(new_ends, return_index=True, return_counts=True)
            seen[nodes] = True
            cone.dist[nodes] = d
            cone.start[nodes] = starts
            cone.count[nodes] = counts
            cone.unique &= bool((counts == 1).all())
            cone.up[d] = new_rows
            cone.down[d] = np.ascontiguousarray(new_rows[:, ::-1] ^ 1)  # ids 2j, 2j+1: reverse
            ends, rows = new_ends, new_rows
        self._cones[leaf] = cone
        return cone

    def _build_up_csr(self) -> None:
        per: list[list[tuple[int, int]]] = [[] for _ in self._names]
        for name, ups in self._ups.items():
            i = self._node_id.get(name)
            if i is None:
                continue  # hosts: cones start at their leaf
            per[i] = [(self._node_id[v], self.link_id[(name, v)]) for v in ups]
        self._up_ptr = np.cumsum([0] + [len(x) for x in per]).astype(np.int64)
        self._up_nbr = np.asarray([v for x in per for v, _ in x], dtype=np.int64)
        self._up_lid = np.asarray([e for x in per for _, e in x], dtype=np.int64)

    def _join(self, cs: _LeafCone, cd: _LeafCone) -> np.ndarray:
        sums = cs.dist + cd.dist
        best = int(sums.min())
        if best >= _ABSENT:
            return np.empty((0, 0), dtype=np.int64)
        peaks = np.flatnonzero(sums == best)  # ascending switch id
        ds_all = cs.dist[peaks]
        ds0 = int(ds_all[0])
        if cs.unique and cd.unique and (ds_all == ds0).all():  # the Clos case: one split
            return np.concatenate(
                (cs.up[ds0][cs.start[peaks]], cd.down[best - ds0][cd.start[peaks]]), axis=1
            )
        parts: list[np.ndarray] = []
        for ds in np.unique(ds_all).tolist():
            sel = peaks[ds_all == ds]
            dd = best - ds
            if cs.unique and cd.unique:
                parts.append(np.hstack([cs.up[ds][cs.start[sel]], cd.down[dd][cd.start[sel]]]))
                continue
            rows = []
            for p in sel.tolist():
                ups = cs.up[ds][cs.start[p]:cs.start[p] + cs.count[p]]
                downs = cd.down[dd][cd.start[p]:cd.start[p] + cd.count[p]]
                rows += [np.concatenate([u, w]) for u in ups for w in downs]
            parts.append(np.asarray(rows, dtype=np.int64))
        return np.vstack(parts) if len(parts) > 1 else parts[0]
