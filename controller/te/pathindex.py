"""Candidate paths as arrays of directed-link ids, built per leaf pair without enumerating
all-pairs paths (the scalable counterpart of :class:`controller.te.paths.PathOracle`).

The candidates of a flow are the same as :meth:`PathOracle.paths` gives: every shortest
valley-free path. They are built from the *up-cone* of each leaf (the switch a host hangs off):
a breadth-first search over strictly-rising links gives every node above the leaf, its hop
distance and its shortest up-paths. A path between leaves Ls and Ld is an up-path of Ls to a
common peak p followed by the reverse of an up-path of Ld to p, over the peaks minimising
d(Ls, p) + d(Ld, p) (Hu et al., HotNets 2016, §2–3, for why only valley-free paths). On a
fat-tree every (leaf, peak) pair has exactly one up-path, so the join is a vectorised alignment
of two small arrays; other fabrics fall back to a product per peak. Between the sites of a
multi-site fabric the cones never meet: a path climbs to a switch with a WAN (DCI) link, crosses
it at the peak and descends (:meth:`PathIndex._join_wan`, as :class:`PathOracle` does).

Cost: one cone per leaf that is used, O(nodes above it + up-paths); one join per distinct
(source leaf, destination leaf) pair that is used, O(candidates × path length); nothing is
computed for pairs no flow uses. On a k = 32 fat-tree a cross-pod pair has 256 candidates of
4 fabric links each. The peaks of a join depend only on the two leaves' distance vectors, which
are equal for all leaves of a fat-tree pod, so they are memoised per pair of distinct vectors
(32² joins' worth of work instead of one per leaf pair at k = 32), leaving two gathers and a
concatenation per leaf pair.

A failure does not need a new index from the fabric: :meth:`PathIndex.with_down` derives one
by masking the failed link ids out of the up-adjacency, sharing link numbering, capacities and
the join memo (what a repair after one link failure needs is the candidates of a few flows).

A *directed link id* ``i`` indexes :attr:`PathIndex.links` (``(u, v)`` pairs) and
:attr:`PathIndex.capacity_bps`; link ``j`` of the fabric has ids 2j (a→b) and 2j+1 (b→a).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from itertools import chain

import numpy as np

from controller.model.topology import Fabric
from controller.te.links import DownLinks, normalise_down_links

DirectedLink = tuple[str, str]
Path = tuple[str, ...]


_ABSENT = 1 << 40  # distance of a node outside a cone
_MISSING = object()


class _LeafCone:
    """Up-cone of one leaf as arrays over all switch ids (internal).

    ``dist[n]``: hop distance from the leaf up to switch n (``_ABSENT`` if not above it, and for
    the leaf itself); ``start[n]``/``count[n]``: rows of n's shortest up-paths in ``up[dist[n]]``
    and ``down[dist[n]]`` — (paths × dist) link-id arrays of the up-path leaf → n and of its
    reverse n → leaf in travel order. ``unique``: every node has exactly one up-path. ``sig``:
    a small integer naming ``dist`` (equal for cones with equal distance vectors, e.g. the leaves
    of one fat-tree pod), the key of the join memo.
    """

    __slots__ = ("count", "dist", "down", "sig", "start", "unique", "up")

    dist: np.ndarray
    start: np.ndarray
    count: np.ndarray
    up: dict[int, np.ndarray]
    down: dict[int, np.ndarray]
    unique: bool
    sig: int


class _Shared:
    """What every index of one fabric shares, whatever is down (internal).

    ``memo``: values other modules derive from the fabric alone (:meth:`PathIndex.fabric_memo`);
    ``sig_of``: (distance-vector bytes, unique) → cone signature; ``peaks``: (sig_s, sig_d) →
    the join's (best distance, peak switch ids, source-side distance of each peak, that
    distance if it is the same for every peak else -1, and each peak's row in the source's and
    the destination's up-path arrays — used only when both cones are unique, where they depend
    on the distance vectors alone); ``ends``: (tail node, head node, tail port) per directed link id,
    nodes numbered switches first then hosts (:meth:`PathIndex.link_ends`).
    """

    __slots__ = ("ends", "lock", "memo", "peaks", "sig_of")

    def __init__(self) -> None:
        self.lock = threading.RLock()  # every cache fill of every index of one fabric
        self.memo: dict[str, object] = {}
        self.sig_of: dict[tuple[bytes, bool], int] = {}
        self.peaks: dict[tuple[int, int],
                         tuple[int, np.ndarray, np.ndarray, int, np.ndarray, np.ndarray]] = {}
        self.ends: tuple[np.ndarray, np.ndarray, np.ndarray, list[str]] | None = None


def _sorted_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys sorted, the link id of each sorted key)."""
    order = np.argsort(keys, kind="stable").astype(np.int64)
    return keys[order], order


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
        self._names = [s.name for s in fabric.switches]
        self._node_id = {n: i for i, n in enumerate(self._names)}
        self._cones: dict[str, _LeafCone] = {}
        self._up_ptr: np.ndarray | None = None
        self._up_nbr: np.ndarray | None = None
        self._up_lid: np.ndarray | None = None
        self._pairs: dict[tuple[str, str], np.ndarray] = {}
        self._access: dict[str, tuple[str, int, int] | None] = {}
        self._shared = _Shared()

    def with_down(self, down_links: Iterable[frozenset[str]]) -> PathIndex:
        """This fabric state with ``down_links`` down as well (a failure), built incrementally.

        The new index shares the link numbering, capacities and join memo with this one, and
        derives its up-adjacency by masking the failed link ids out of this index's (no pass
        over the fabric's links); its cones and leaf pairs are built on demand, so a repair that
        needs the candidates of a few flows touches only their leaves. Candidates are identical
        to ``PathIndex(fabric, self.down | down_links)``'s.

        Parameters
        ----------
        down_links : iterable of frozenset of str
            Links now down in addition to :attr:`down`.

        Returns
        -------
        PathIndex

        Raises
        ------
        ValueError
            ``down_links`` names a link the fabric does not have.
        """
        extra = self._known(down_links)
        with self._shared.lock:
            if self._up_ptr is None:
                self._build_up_csr()
        assert self._up_ptr is not None and self._up_nbr is not None and self._up_lid is not None
        new = self._derived(self.down | extra, extra, False)
        new.__dict__["_failed_from"] = weakref.ref(self)  # ClosTables.of derives from ours
        keep = new.is_up[self._up_lid]
        owner = np.repeat(np.arange(len(self._names)), np.diff(self._up_ptr))
        counts = np.bincount(owner[keep], minlength=len(self._names))
        new._up_ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        new._up_nbr, new._up_lid = self._up_nbr[keep], self._up_lid[keep]
        return new

    def _known(self, links: Iterable[frozenset[str]]) -> DownLinks:
        """``links`` checked as :func:`normalise_down_links` does, by this index's link ids."""
        return normalise_down_links(self.fabric, links, lambda a, b: (a, b) in self.link_id)

    def with_up(self, up_links: Iterable[frozenset[str]]) -> PathIndex:
        """The index of this fabric with ``up_links`` (now up again) removed from :attr:`down`.

        Shares link numbering, capacities and memos like :meth:`with_down`; its up-adjacency is
        rebuilt from the link arrays (vectorised), cones and pairs on demand.

        Raises
        ------
        ValueError
            A link of ``up_links`` is unknown or not down.
        """
        back = self._known(up_links)
        if not back <= self.down:
            a, b = sorted(next(iter(back - self.down)))
            raise ValueError(f"link {a}-{b} is not down")
        new = self._derived(self.down - back, back, True)
        new._up_ptr = new._up_nbr = new._up_lid = None
        return new

    def _derived(self, down: DownLinks, changed: DownLinks, up: bool) -> PathIndex:
        """A new index of this fabric sharing numbering, capacities and memos, with
        ``changed`` links set up (``up``) or down; its caches empty."""
        new = object.__new__(PathIndex)
        new.fabric = self.fabric
        new.down = down
        new.links, new.link_id, new.capacity_bps = self.links, self.link_id, self.capacity_bps
        is_up = self.is_up.copy()
        for pair in changed:
            a, b = sorted(pair)
            is_up[[self.link_id[(a, b)], self.link_id[(b, a)]]] = up
        new.is_up = is_up
        new._names, new._node_id = self._names, self._node_id
        new._cones, new._pairs, new._shared = {}, {}, self._shared
        new._access = {}
        return new

    def link_ends(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
        """Per directed link id: tail node, head node and the tail's port (cached, shared).

        Returns
        -------
        tail, head : numpy.ndarray of int64, shape (n_directed_links,)
            Node numbers: switches in declaration order, then hosts in declaration order.
        tail_port : numpy.ndarray of int64, shape (n_directed_links,)
            The tail's port number towards the head.
        names : list of str
            Node name of each node number.
        """
        sh = self._shared
        with sh.lock:
            return self._link_ends(sh)

    def _link_ends(self, sh: _Shared) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
        if sh.ends is None:
            names = self._names + [h.name for h in self.fabric.hosts]
            num = {n: i for i, n in enumerate(names)}
            ends = np.asarray([(num[ln.a], num[ln.b], ln.a_port, ln.b_port)
                               for ln in self.fabric.links], dtype=np.int64).reshape(-1, 4)
            tail = np.empty(len(self.links), dtype=np.int64)
            head, port = np.empty_like(tail), np.empty_like(tail)
            tail[0::2], tail[1::2] = ends[:, 0], ends[:, 1]
            head[0::2], head[1::2] = ends[:, 1], ends[:, 0]
            port[0::2], port[1::2] = ends[:, 2], ends[:, 3]
            sh.ends = (tail, head, port, names)
        return sh.ends

    # -- hosts ----------------------------------------------------------------------------------
    def access(self, host: str) -> tuple[str, int, int] | None:
        """(leaf, id of host→leaf, id of leaf→host), or None if the access link is down.
        Raises ValueError if ``host`` is not a host of the fabric."""
        if host in self._access:
            return self._access[host]
        with self._shared.lock:
            return self._access_fill(host)

    def _access_fill(self, host: str) -> tuple[str, int, int] | None:
        h = self.fabric.host_by_name.get(host)
        if h is None:
            raise ValueError(f"{host!r} is not a host of fabric {self.fabric.name!r}")
        if frozenset((host, h.leaf)) in self.down:
            got = None
        else:
            got = (h.leaf, self.link_id[(host, h.leaf)], self.link_id[(h.leaf, host)])
        self._access[host] = got
        return got

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
        with self._shared.lock:
            return self._leaf_candidates(key)

    def _leaf_candidates(self, key: tuple[str, str]) -> np.ndarray:
        src_leaf, dst_leaf = key
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

    def prefetch(self, leaf_pairs: Iterable[tuple[str, str]]) -> None:
        """Build the candidates of many (source leaf, destination leaf) pairs at once.

        Afterwards :meth:`leaf_candidates` returns them from the cache; the arrays are equal to
        what it would have built. In the Clos case the pairs whose leaves have the same pair of
        distance vectors are joined together: one stacked gather of up-paths and one of
        down-paths per group, (pairs × peaks × hops), instead of one per pair.

        Parameters
        ----------
        leaf_pairs : iterable of (str, str)
            Leaf (switch) names; repeats and already cached pairs are skipped.
        """
        with self._shared.lock:
            self._prefetch(leaf_pairs)

    def _prefetch(self, leaf_pairs: Iterable[tuple[str, str]]) -> None:
        todo = [key for key in dict.fromkeys(leaf_pairs) if key not in self._pairs]
        self._build_cones([lf for key in todo for lf in key])
        groups: dict[tuple[int, int], list[tuple[tuple[str, str], _LeafCone, _LeafCone]]] = {}
        for key in todo:
            if key in self._pairs:
                continue
            cs, cd = self._cone(key[0]), self._cone(key[1])
            best, _, _, ds0, _, _ = self._peaks(cs, cd)
            if key[0] == key[1] or best >= _ABSENT or ds0 < 0 or not (cs.unique and cd.unique):
                self.leaf_candidates(*key)
                continue
            groups.setdefault((cs.sig, cd.sig), []).append((key, cs, cd))
        for sig, items in groups.items():
            best, _, _, ds0, rows_s, rows_d = self._shared.peaks[sig]
            up = np.take(np.stack([cs.up[ds0] for _, cs, _ in items]), rows_s, axis=1)
            down = np.take(np.stack([cd.down[best - ds0] for _, _, cd in items]), rows_d, axis=1)
            out = np.concatenate((up, down), axis=2)
            out.setflags(write=False)
            for g, (key, _, _) in enumerate(items):
                self._pairs[key] = out[g]

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

    def link_ids_flat(self, paths: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray]:
        """Directed link ids of many node paths at once, concatenated.

        Node names become numbers by one dictionary pass; each hop (u, v) becomes the key
        u·N + v, looked up by binary search in the sorted keys of all directed links — no
        per-path array and no per-hop tuple.

        Returns
        -------
        ids : numpy.ndarray of int64, shape (Σ hops,)
            Path 0's link ids, then path 1's, …
        starts : numpy.ndarray of int64, shape (n_paths + 1,)
            Path j's ids are ``ids[starts[j]:starts[j + 1]]``.

        Raises
        ------
        KeyError
            A node is unknown, or a hop is not a link (the message names it).
        """
        tail, head, _, names = self.link_ends()
        num = self.fabric_memo("node-number", lambda: {n: i for i, n in enumerate(names)})
        keyed = self.fabric_memo("link-keys", lambda: _sorted_keys(tail * len(names) + head))
        assert isinstance(num, dict) and isinstance(keyed, tuple)
        keys, order = keyed
        n_nodes = np.fromiter(map(len, paths), dtype=np.int64, count=len(paths))
        nodes = np.fromiter(map(num.__getitem__, chain.from_iterable(paths)), dtype=np.int64,
                            count=int(n_nodes.sum()))
        first = np.cumsum(n_nodes) - n_nodes
        is_first = np.zeros(len(nodes) + 1, dtype=bool)
        is_first[first] = True
        hop = ~is_first[1:-1]  # nodes[k] -> nodes[k + 1] stays inside one path
        key = nodes[:-1][hop] * len(names) + nodes[1:][hop]
        pos = np.minimum(np.searchsorted(keys, key), max(len(keys) - 1, 0))
        bad = np.flatnonzero(keys[pos] != key) if len(keys) else np.arange(len(key))
        if len(bad):
            u, v = divmod(int(key[bad[0]]), len(names))
            raise KeyError(f"{names[u]}->{names[v]} is not a link of fabric {self.fabric.name!r}")
        lengths = np.maximum(n_nodes - 1, 0)
        return order[pos], np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)

    def paths_of_rows(self, rows: np.ndarray) -> list[Path]:
        """Node tuples of many paths of equal length given as link-id rows (vectorised).

        Parameters
        ----------
        rows : numpy.ndarray of int64, shape (n, hops), hops ≥ 1
            Every link id of each path in travel order.

        Returns
        -------
        list of tuple of str
            ``path_of(rows[j])`` for every j.
        """
        tail, head, _, names = self.link_ends()
        nodes = self.fabric_memo("node-names", lambda: np.asarray(names, dtype=object))
        assert isinstance(nodes, np.ndarray)
        grid = np.empty((rows.shape[1] + 1, rows.shape[0]), dtype=np.int64)  # node × path
        grid[0], grid[1:] = tail[rows[:, 0]], head[rows.T]
        return list(zip(*nodes[grid].tolist(), strict=True))  # one tuple per path, in C

    def fabric_memo(self, key: str, build: Callable[[], object]) -> object:
        """``build()`` computed once per fabric and shared by every index derived from this one
        (:meth:`with_down`); for values that depend on the fabric, not on what is down."""
        memo = self._shared.memo
        got = memo.get(key, _MISSING)
        if got is not _MISSING:
            return got
        with self._shared.lock:
            if key not in memo:
                memo[key] = build()
            return memo[key]

    # -- internals ------------------------------------------------------------------------------
    def _cone(self, leaf: str) -> _LeafCone:
        cone = self._cones.get(leaf)
        if cone is None:
            self._build_cones([leaf])
            cone = self._cones[leaf]
        return cone

    def _build_cones(self, leaves: Sequence[str]) -> None:
        """Up-cones of ``leaves`` (not yet built), by one breadth-first search over strictly
        rising links for all of them at once: rows carry their leaf, and "first reached at this
        level" is tested per (leaf, node). Row order within a leaf is that of a search from the
        leaf alone (a stable sort by (leaf, node) keeps each leaf's rows in order)."""
        if self._up_ptr is None:
            self._build_up_csr()
        ptr, nbr, lid = self._up_ptr, self._up_nbr, self._up_lid
        assert ptr is not None and nbr is not None and lid is not None
        leaves = [lf for lf in dict.fromkeys(leaves) if lf not in self._cones]
        n, n_leaves = len(self._names), len(leaves)
        if not n_leaves:
            return
        dist = np.full((n_leaves, n), _ABSENT, dtype=np.int64)
        start = np.zeros((n_leaves, n), dtype=np.int64)
        count = np.zeros((n_leaves, n), dtype=np.int64)
        multi = np.zeros(n_leaves, dtype=bool)  # some node has two up-paths
        seen = np.zeros(n_leaves * n, dtype=bool)
        owner = np.arange(n_leaves, dtype=np.int64)
        ends = np.asarray([self._node_id[lf] for lf in leaves], dtype=np.int64)
        seen[owner * n + ends] = True
        rows = np.empty((n_leaves, 0), dtype=np.int64)
        levels: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # rows, reversed, bounds
        d = 0
        while len(ends):
            deg = ptr[ends + 1] - ptr[ends]
            total = int(deg.sum())
            if total == 0:
                break
            which = np.repeat(np.arange(len(ends)), deg)
            first = np.cumsum(deg) - deg
            slot = np.repeat(ptr[ends] - first, deg) + np.arange(total)
            new_ends, new_owner = nbr[slot], owner[which]
            new_rows = np.hstack([rows[which], lid[slot][:, None]])
            key = new_owner * n + new_ends
            fresh = ~seen[key]  # reached first at this level: shortest up-paths only
            if not fresh.any():
                break
            key, new_ends, new_owner, new_rows = (key[fresh], new_ends[fresh], new_owner[fresh],
                                                  new_rows[fresh])
            order = np.argsort(key, kind="stable")
            key, new_ends, new_owner, new_rows = (key[order], new_ends[order], new_owner[order],
                                                  new_rows[order])
            d += 1
            ukeys, starts, counts = np.unique(key, return_index=True, return_counts=True)
            seen[ukeys] = True
            u_owner, u_node = ukeys // n, ukeys % n
            bounds = np.searchsorted(new_owner, np.arange(n_leaves + 1))  # each leaf's rows
            dist[u_owner, u_node] = d
            start[u_owner, u_node] = starts - bounds[u_owner]
            count[u_owner, u_node] = counts
            multi[u_owner[counts > 1]] = True
            levels.append((new_rows, np.ascontiguousarray(new_rows[:, ::-1] ^ 1), bounds))
            ends, owner, rows = new_ends, new_owner, new_rows
        sigs = self._shared.sig_of
        for j, leaf in enumerate(leaves):
            cone = _LeafCone()
            cone.dist, cone.start, cone.count = dist[j], start[j], count[j]
            cone.unique = not bool(multi[j])
            cone.up, cone.down = {}, {}
            for level, (up, down, bounds) in enumerate(levels, start=1):
                a, b = int(bounds[j]), int(bounds[j + 1])
                if a == b:
                    break
                cone.up[level], cone.down[level] = up[a:b], down[a:b]  # ids 2j, 2j+1: reverse
            cone.sig = sigs.setdefault((cone.dist.tobytes(), cone.unique), len(sigs))
            self._cones[leaf] = cone

    def _build_up_csr(self) -> None:
        """Up-adjacency of the switches as CSR arrays: for switch n, ``_up_nbr``/``_up_lid``
        [ptr[n]:ptr[n+1]] are its higher-tier neighbours over links that are up and the link
        ids, in n's port order (as :func:`controller.te.links.up_neighbours`)."""
        tail, head, port, names = self.link_ends()
        n_sw = len(self._names)
        tier = self.fabric_memo("node-tiers", lambda: np.asarray(
            [s.tier for s in self.fabric.switches] + [0] * (len(names) - n_sw), dtype=np.int64))
        assert isinstance(tier, np.ndarray)
        ids = np.flatnonzero(self.is_up & (tail < n_sw) & (tier[head] > tier[tail]))
        ids = ids[np.lexsort((port[ids], tail[ids]))]
        counts = np.bincount(tail[ids], minlength=n_sw)
        self._up_ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        self._up_nbr = head[ids]
        self._up_lid = ids.astype(np.int64)

    def _peaks(self, cs: _LeafCone, cd: _LeafCone
               ) -> tuple[int, np.ndarray, np.ndarray, int, np.ndarray, np.ndarray]:
        """The memoised peak structure of a join (:class:`_Shared`)."""
        memo = self._shared.peaks
        got = memo.get((cs.sig, cd.sig))
        if got is None:
            sums = cs.dist + cd.dist
            best = int(sums.min())
            peaks = np.flatnonzero(sums == best)  # ascending switch id
            ds = cs.dist[peaks]
            split = int(ds[0]) if len(ds) and (ds == ds[0]).all() else -1
            # with one up-path per node, a node's row in up[d] is its rank among the nodes at
            # distance d, a function of dist alone: memoisable with the peaks
            got = memo[(cs.sig, cd.sig)] = (best, peaks, ds, split, cs.start[peaks],
                                            cd.start[peaks])
        return got

    def _join(self, cs: _LeafCone, cd: _LeafCone) -> np.ndarray:
        best, peaks, ds_all, ds0, rows_s, rows_d = self._peaks(cs, cd)
        if best >= _ABSENT:  # the cones do not meet: a path between sites, if any
            return self._join_wan(cs, cd)
        # cones that meet are of one site, whose up-links never cross a WAN link: no crossing
        if cs.unique and cd.unique and ds0 >= 0:  # the Clos case: one split
            return np.concatenate(
                (np.take(cs.up[ds0], rows_s, axis=0), np.take(cd.down[best - ds0], rows_d, axis=0)),
                axis=1,
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

    def _join_wan(self, cs: _LeafCone, cd: _LeafCone) -> np.ndarray:
        """Candidates between leaves of different sites (multi-site fabrics): an up-path of the
        source leaf to a switch u, the WAN (DCI) link u → v, the reverse of an up-path of the
        destination leaf to v — over the up WAN links giving the fewest hops, as
        :meth:`controller.te.paths.PathOracle.paths` (one WAN hop, at the peak: valley-free
        inside each site). Rows by (u, v) in switch declaration order; shape (0, 0) when no WAN
        link that is up joins the two cones."""
        crossings = []
        for ln in self.fabric.wan_links:
            for a, b in ((ln.a, ln.b), (ln.b, ln.a)):
                lid = self.link_id[(a, b)]
                u, v = self._node_id[a], self._node_id[b]
                if self.is_up[lid] and cs.dist[u] < _ABSENT and cd.dist[v] < _ABSENT:
                    crossings.append((int(cs.dist[u] + 1 + cd.dist[v]), u, v, lid))
        best = min((c[0] for c in crossings), default=_ABSENT)
        if best >= _ABSENT:
            return np.empty((0, 0), dtype=np.int64)
        rows: list[np.ndarray] = []
        for _, u, v, lid in sorted(c for c in crossings if c[0] == best):
            du, dv = int(cs.dist[u]), int(cd.dist[v])
            ups = cs.up[du][cs.start[u]:cs.start[u] + cs.count[u]]
            downs = cd.down[dv][cd.start[v]:cd.start[v] + cd.count[v]]
            rows += [np.concatenate([up, [lid], down]) for up in ups for down in downs]
        return np.asarray(rows, dtype=np.int64)
