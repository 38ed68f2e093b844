"""Port-level view of a mirrored Clos fabric: path choice for many flows at once, no path lists.

The Clos fabrics the model generates (fat-tree, leaf-spine, rail-optimised) are *mirrored*:

(a) every up-link into a switch w leaves its lower end by the same port number π(w) (a
    fat-tree's aggregation switch j is on port k/2+1+j of every edge switch of its pod; core
    c{j·u+m+1} on port k/2+1+m of aggregation switch j of every pod; a spine s on port H+s of
    every leaf);
(b) all lower neighbours of a switch share one π (core switches hang off aggregation switch j
    of every pod, all with π = k/2+1+j);
(c) every up-link climbs exactly one tier, and every host hangs off a switch of the lowest tier.

Then a shortest valley-free path between leaves Ls and Ld that peaks h tiers up is fully named by
its *port sequence* (p_0, …, p_{h-1}): climbing from Ls and from Ld by the same port at every
level reaches, level by level, the switches of the path's two halves, and they meet at the peak
(a path climbs from Ls to a peak w and descends to Ld; by (a) and (b) the port taken at level ℓ
on the way up is π of the level-ℓ+1 node on either side, and those nodes have the same π). The
candidate set of a flow is every alive sequence that meets at the lowest height any alive
sequence meets — exactly the candidates of :class:`controller.te.pathindex.PathIndex` (Hu et
al., HotNets 2016, §2–3, for why only valley-free paths; the property tests compare the two).

Everything here is an array over flows: ``up_link[node, col]`` (the directed link id climbing
from ``node`` by port column ``col``, -1 when absent or down) and ``up_node[node, col]`` (the
switch reached). Meeting masks are (flows × W^h) boolean arrays built level by level in chunks
of flows, so a k = 64 fat-tree (32 columns, h ≤ 2) costs 1,024 booleans per flow at a time and
no per-pair path array is ever stored. Used by :mod:`controller.te.closcolour` (colouring),
:mod:`controller.te.greedy` (candidates of the flows the greedy places) and the flow-level
comparison at scale (:mod:`controller.sim.strategies`: ECMP, static, spraying).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from controller.te.pathindex import PathIndex

CHUNK_FLOWS = 4096
"""Flows per chunk of a meeting mask (bounds temporary memory to CHUNK_FLOWS × W^h booleans)."""

COPY_BELOW_BYTES = 4 << 20
"""A failed state's tables smaller than this are copied and patched, not wrapped in
:class:`PatchedRows` (:meth:`PatchedRows.patch`)."""

_LOCK = threading.Lock()


class NotMirroredClos(ValueError):
    """The fabric breaks one of the module docstring's conditions (a)–(c) (the message says which)."""


class PatchedRows:
    """A table equal to ``base`` except at ``rows`` (sorted, unique), whose rows are ``values``:
    read by gathers along the first axis (``table[idx]``, any integer array) like the ndarray it
    stands for, without a copy of ``base``.

    A failed state's :meth:`ClosTables.chains` and :meth:`ClosTables.reach` differ from the
    state they failed from in a few rows (k = 64 fat-tree, one aggregation switch down: 32 of
    5,120); copying the 63 MB of tables to change those rows took most of a repair's time.
    """

    def __init__(self, base: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
        self.base, self.rows, self.values = base, rows, values
        self.shape: tuple[int, ...] = base.shape
        self.dtype = base.dtype
        self._slot = np.full(base.shape[0], -1, dtype=np.int64)
        self._slot[rows] = np.arange(len(rows))

    @staticmethod
    def patch(table: np.ndarray | PatchedRows, rows: np.ndarray,
              values: np.ndarray) -> PatchedRows:
        """``table`` with ``rows`` replaced by ``values`` (``table`` itself unchanged)."""
        if not isinstance(table, PatchedRows):
            return PatchedRows(table, rows, values)
        every = np.union1d(table.rows, rows)
        merged = table[every]
        merged[np.searchsorted(every, rows)] = values
        return PatchedRows(table.base, every, merged)

    def __getitem__(self, key: Any) -> np.ndarray:
        idx = np.asarray(key)
        if idx.dtype.kind not in "iu":
            raise TypeError("PatchedRows is read by integer gathers along its first axis")
        out: np.ndarray = self.base[idx]
        slot = self._slot[idx]
        hit = slot >= 0
        if idx.ndim == 0:
            one: np.ndarray = self.values[int(slot)].copy() if bool(hit) else out
            return one
        if hit.any():
            out[hit] = self.values[slot[hit]]
        return out

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.base.copy()
        out[self.rows] = self.values
        return out if dtype is None else out.astype(dtype)


Table = np.ndarray | PatchedRows


def _patched(table: Table, rows: np.ndarray, values: np.ndarray) -> Table:
    """``table`` with ``rows`` replaced by ``values`` (``table`` unchanged): a copy when the
    table is small (``COPY_BELOW_BYTES``) or a quarter of its rows change (every gather would
    pay for the patch: a rail fabric's spine touches every leaf), else a :class:`PatchedRows`."""
    size = table.shape[0] * int(np.prod(table.shape[1:])) * table.dtype.itemsize
    if size < COPY_BELOW_BYTES or 4 * len(rows) >= table.shape[0]:
        out = np.array(table)
        out[rows] = values
        return out
    return PatchedRows.patch(table, rows, values)


def _row_hashes(reach: np.ndarray) -> np.ndarray:
    """Two independent 64-bit hashes of each row of ``reach`` (wrapping integer arithmetic),
    shape (rows, 2): rows differ when either hash does, except with probability ~2^-128, so
    :meth:`ClosTables.classes` takes the distinct hash pairs instead of sorting rows W^r wide.
    Deterministic (fixed weights per row width)."""
    rng = np.random.default_rng(0x5EED)
    keys = []
    for _ in range(2):
        wts = rng.integers(1, 2**63 - 1, size=reach.shape[1], dtype=np.uint64)
        with np.errstate(over="ignore"):
            keys.append((reach.astype(np.uint64) + np.uint64(1)) @ wts)
    return np.stack(keys, axis=1)


class ClosTables:
    """Port-indexed up-adjacency of one fabric state (see the module docstring).

    Parameters
    ----------
    index : PathIndex
        The fabric state (its down links are left out of the tables); link ids are the index's.

    Attributes
    ----------
    index : PathIndex
        The fabric state, held weakly: the index keeps its tables (:meth:`of`), and a strong
        reference back would make a reference cycle, left to the garbage collector (and kept
        forever once frozen, :mod:`controller.runtime.collector`).
    cols : numpy.ndarray of int64, shape (W,)
        The up-port number of each column (ascending).
    up_link, up_node : numpy.ndarray of int64, shape (n_switches, W)
        Directed link id and switch climbed to from each switch by each column; -1 where the
        switch has no such up-port or its link is down.
    max_height : int
        Tiers above the leaves (2 on a fat-tree, 1 on leaf-spine and rail-optimised fabrics).

    Raises
    ------
    NotMirroredClos
        The fabric is not a mirrored Clos (multi-site fabrics, hand-made topologies).
    """

    def __init__(self, index: PathIndex):
        got = index.fabric_memo("clos-structure", lambda: _structure(index))
        if isinstance(got, str):
            raise NotMirroredClos(got)
        assert isinstance(got, tuple)
        ids, t, h, col, cols, max_height = got
        self._index = weakref.ref(index)
        self.cols = cols
        alive = index.is_up[ids]
        n_sw, w = len(index.fabric.switches), len(cols)
        self.up_link = np.full((n_sw, w), -1, dtype=np.int64)
        self.up_node = np.full((n_sw, w), -1, dtype=np.int64)
        self.up_link[t[alive], col[alive]] = ids[alive]
        self.up_node[t[alive], col[alive]] = h[alive]
        self.max_height = max_height
        self._reach: dict[int, Table] = {}
        self._classes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._chains: dict[int, Table] = {}
        self._parent: ClosTables | None = None  # tables this state's failure derives from
        self._parent_is_up: np.ndarray | None = None  # their index's links up (kept: weak index)
        self._changed: dict[int, np.ndarray] = {}  # rows _derived_rows recomputed, per height
        self._keys: dict[int, np.ndarray] = {}  # per height: the row hashes of classes()
        self._leaf_num = cast(dict[str, int], index.fabric_memo(
            "switch-numbers", lambda: {s.name: i for i, s in enumerate(index.fabric.switches)}))

    @property
    def index(self) -> PathIndex:
        """The fabric state of these tables (alive as long as anyone uses the tables)."""
        got = self._index()
        assert got is not None, "port tables used after their path index was freed"
        return got

    def columns(self, row: np.ndarray) -> np.ndarray:
        """Port columns of an inner path row (2h link ids, up-links first, as :meth:`walk`
        gives): the column of each of its first h links; raises ValueError for a row that is
        not an up-then-down path of this fabric. A 2-d array of rows (shape (F, 2h)) gives
        the columns of each, shape (F, h)."""
        h = row.shape[-1] // 2
        if row.shape[-1] != 2 * h:
            raise ValueError("an inner path has an even number of links")
        got = self.index.fabric_memo("clos-column-of-link", self._column_of_link)
        assert isinstance(got, np.ndarray)
        out: np.ndarray = got[row[..., :h]]
        if (out < 0).any():
            raise ValueError("a path's first half is not made of up-links")
        return out

    def _column_of_link(self) -> np.ndarray:
        got = self.index.fabric_memo("clos-structure", lambda: _structure(self.index))
        assert isinstance(got, tuple)
        ids, _, _, col, _, _ = got
        out = np.full(len(self.index.links), -1, dtype=np.int64)
        out[ids] = col
        return out

    @staticmethod
    def of(index: PathIndex) -> ClosTables | None:
        """The tables of ``index`` (built once per index and kept on it), or None when the
        fabric is not a mirrored Clos. Safe to call from several threads."""
        memo = index.__dict__
        if "_clos_tables" in memo:
            return cast("ClosTables | None", memo["_clos_tables"])
        with _LOCK:
            if "_clos_tables" not in memo:
                try:
                    tables = ClosTables(index)
                except NotMirroredClos:
                    memo["_clos_tables"] = None
                else:
                    ref = memo.get("_failed_from")  # PathIndex.with_down: a weakref
                    parent = ref() if ref is not None else None
                    got = None if parent is None else parent.__dict__.get("_clos_tables")
                    if parent is not None and isinstance(got, ClosTables):
                        tables._parent, tables._parent_is_up = got, parent.is_up
                    memo["_clos_tables"] = tables
        return cast("ClosTables | None", memo["_clos_tables"])

    def _derived_rows(self, r: int) -> tuple[Table, Table] | None:
        """:meth:`chains` and :meth:`reach` at length ``r`` derived from the tables of the state
        this one failed from (:meth:`PathIndex.with_down`) when those are built: only the rows
        of switches that can climb to a link down here but up there are recomputed (a k = 64
        fat-tree with one aggregation switch down: 32 of 5,120 rows; building from scratch
        gathers all 5,120 × 4,096 × 2), the rest shared (:class:`PatchedRows`). None when
        there is nothing to derive from. Equal to building from scratch: a sequence is -1 from
        its first dead link on (:meth:`chains`), and reaches -1 when any of its links is dead
        (:meth:`reach`)."""
        p, p_up = self._parent, self._parent_is_up
        if p is None or p_up is None or r not in p._chains or r not in p._reach:
            return None
        is_up = self.index.is_up
        newly = np.flatnonzero(~is_up & p_up)
        tail = self.index.link_ends()[0]
        n = len(self.up_node)
        hit = np.zeros(n, dtype=bool)
        hit[tail[newly][tail[newly] < n]] = True  # switches with a newly dead up- or down-link
        climb = p.up_node
        for _ in range(r - 1):  # and every switch that climbs to one of them
            safe = np.where(climb >= 0, climb, 0)
            hit |= ((climb >= 0) & hit[safe]).any(axis=1)
        rows = np.flatnonzero(hit)
        sub = p._chains[r][rows]
        bad = (sub < 0) | ~is_up[np.where(sub >= 0, sub, 0)]
        bad = np.logical_or.accumulate(bad, axis=2)
        chains = _patched(p._chains[r], rows, np.where(bad, -1, sub).astype(sub.dtype))
        got = p._reach[r][rows]
        reach = _patched(p._reach[r], rows, np.where(bad[:, :, -1], -1, got).astype(got.dtype))
        self._changed[r] = rows
        return chains, reach

    def warm(self) -> None:
        """Build :meth:`chains` and :meth:`reach` at every height now (at planning time): the
        tables of a failure of this state (:meth:`PathIndex.with_down`) are then derived from
        them row by row instead of built (k = 64 fat-tree: ~63 MB, built once here; a repair
        after an aggregation switch failure then shares them and recomputes 32 rows, a
        :class:`PatchedRows`)."""
        for r in range(1, self.max_height + 1):
            self.chains(r)
            self.reach(r)

    @property
    def width(self) -> int:
        """W, the number of port columns."""
        return len(self.cols)

    def leaf_ids(self, leaves: Sequence[str]) -> np.ndarray:
        """Switch numbers of leaf names (int64 array). Raises KeyError for an unknown name."""
        return np.fromiter((self._leaf_num[x] for x in leaves), dtype=np.int64, count=len(leaves))

    def host_leaf_ids(self) -> np.ndarray:
        """Switch number of every host's leaf, by host number (the fabric's host order, as
        :func:`controller.te.hosts.host_table` numbers them); int64, memoised per fabric."""
        fabric = self.index.fabric
        return cast(np.ndarray, self.index.fabric_memo(
            "host-leaf-numbers", lambda: self.leaf_ids([h.leaf for h in fabric.hosts])))

    # -- meeting masks ---------------------------------------------------------------------------
    def reach(self, r: int) -> Table:
        """The switch reached from every switch by every port sequence of length ``r``.

        Returns
        -------
        numpy.ndarray of int32, shape (n_switches, W**r)
            Column Σ_ℓ col_ℓ · W^(r-1-ℓ) (the first level most significant); -1 where a link of
            the sequence is absent or down. Built once per table (W² columns on a fat-tree: 20 MB
            at k = 64); a failed state's is a :class:`PatchedRows` over its parent's.
        """
        got = self._reach.get(r)
        if got is None and r > 0 and (derived := self._derived_rows(r)) is not None:
            self._chains[r], got = derived
            self._reach[r] = got
        if got is None:
            if r == 0:
                got = np.arange(len(self.up_node), dtype=np.int32)[:, None]
            else:
                below = self.reach(r - 1)
                nxt = self.up_node
                safe = np.where(nxt >= 0, nxt, 0)
                got = np.where((nxt >= 0)[:, :, None], below[safe], -1).reshape(len(nxt), -1)
                got = got.astype(np.int32)
            self._reach[r] = got
        return got

    def chains(self, r: int) -> Table:
        """Up-link ids along every port sequence of length ``r`` from every switch.

        Returns
        -------
        numpy.ndarray of int32, shape (n_switches, W**r, r)
            ``chains(r)[s, code, l]``: the link climbed at level l by sequence ``code`` (first
            level most significant) from switch s; -1 where absent or down. Built once (42 MB
            at k = 64, r = 2); a failed state's is a :class:`PatchedRows` over its parent's.
        """
        got = self._chains.get(r)
        if got is None and (derived := self._derived_rows(r)) is not None:
            got, self._reach[r] = derived
            self._chains[r] = got
        if got is None:
            n = len(self.up_node)
            if r == 1:
                got = self.up_link.astype(np.int32)[:, :, None]
            else:
                below = self.chains(r - 1)
                nxt = self.up_node
                safe = np.where(nxt >= 0, nxt, 0)
                rest = np.where((nxt >= 0)[:, :, None, None], below[safe], -1)  # n, W, W^(r-1), r-1
                first = np.broadcast_to(self.up_link.astype(np.int32)[:, :, None, None],
                                        (n, self.width, below.shape[1], 1))
                got = np.concatenate((first, rest), axis=3).reshape(n, -1, r).astype(np.int32)
            self._chains[r] = got
        return got

    def meet_mask(self, u: np.ndarray, v: np.ndarray, r: int) -> np.ndarray:
        """Alive port sequences of length ``r`` from switches ``u`` and ``v`` that meet.

        Parameters
        ----------
        u, v : numpy.ndarray of int64, shape (F,)
            Switch numbers (same tier); -1 entries give all-False rows.
        r : int
            Levels to climb (0: meet means u == v).

        Returns
        -------
        numpy.ndarray of bool, shape (F, W**r)
            Column Σ_ℓ col_ℓ · W^(r-1-ℓ) (the first level most significant) is True when every
            link of the sequence is up on both sides and the two climbs end at one switch.
        """
        reach = self.reach(r)
        ok = (u >= 0) & (v >= 0)
        a = reach[np.where(ok, u, 0)]
        out: np.ndarray = (a == reach[np.where(ok, v, 0)]) & (a >= 0)
        out &= ok[:, None]
        return out

    def classes(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """Switches grouped by their :meth:`reach` row at length ``r`` (a meeting mask depends
        on the two rows alone, so it is computed once per pair of classes): (class of every
        switch, one switch of each class). All edge switches of an intact fat-tree share one
        class at r = 2; those of a pod one at r = 1."""
        got = self._classes.get(r)
        if got is None:
            reach = self.reach(r)
            p = self._parent
            if p is not None and r in self._changed and r in p._keys:
                pair = p._keys[r].copy()  # derived: only the recomputed rows hash anew
                rows = self._changed[r]
                pair[rows] = _row_hashes(reach[rows])
            else:
                pair = _row_hashes(np.asarray(reach))
            self._keys[r] = pair
            _, first, inv = np.unique(pair, axis=0, return_index=True, return_inverse=True)
            got = self._classes[r] = (inv.astype(np.int64).ravel(), first.astype(np.int64))
        return got

    def per_pair(self, u: np.ndarray, v: np.ndarray, r: int,
                 fn: Callable[[np.ndarray], Any]) -> np.ndarray:
        """``fn(meet_mask(…))`` for every flow, evaluated once per distinct pair of switch
        classes (:meth:`classes`) and gathered; rows of flows with u or v < 0 are
        ``fn`` of an all-False mask."""
        cls, rep = self.classes(r)
        ok = (u >= 0) & (v >= 0)
        n_cls = len(rep) + 1  # the last class: "no switch"
        cu = np.where(ok, cls[np.where(ok, u, 0)], n_cls - 1)
        cv = np.where(ok, cls[np.where(ok, v, 0)], n_cls - 1)
        keys, inv = np.unique(cu * n_cls + cv, return_inverse=True)
        ku, kv = keys // n_cls, keys % n_cls
        valid = (ku < n_cls - 1) & (kv < n_cls - 1)
        ru = np.where(valid, rep[np.minimum(ku, len(rep) - 1)], -1)
        rv = np.where(valid, rep[np.minimum(kv, len(rep) - 1)], -1)
        parts = [fn(self.meet_mask(ru[lo:lo + CHUNK_FLOWS], rv[lo:lo + CHUNK_FLOWS], r))
                 for lo in range(0, len(keys), CHUNK_FLOWS)]
        vals = np.concatenate(parts) if parts else fn(np.zeros((0, self.width ** r), bool))
        return np.asarray(vals)[inv.ravel()]

    def heights(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Lowest meeting height per flow (leaf switch numbers ``u`` → ``v``), -1 where no alive
        sequence meets (no valley-free path). Shape (F,), int64."""
        return heights_and_counts(self, u, v)[0]

    def allowed_next(self, u: np.ndarray, v: np.ndarray, left: np.ndarray) -> np.ndarray:
        """Which port columns a flow at switches (``u``, ``v``) with ``left`` levels still to
        climb may take so that it can still meet at exactly that height.

        Returns
        -------
        numpy.ndarray of bool, shape (F, W)
        """
        out = np.zeros((len(u), self.width), dtype=bool)
        w = self.width
        for r in np.unique(left).tolist():
            if r <= 0:
                continue
            sel = np.flatnonzero(left == r)
            out[sel] = self.per_pair(u[sel], v[sel], r,
                                     lambda m: m.reshape(len(m), w, -1).any(axis=2))
        return out

    # -- sequences → links -----------------------------------------------------------------------
    def walk(self, u: np.ndarray, v: np.ndarray, seq: np.ndarray) -> np.ndarray:
        """Inner (fabric) link ids of port sequences, in travel order.

        Parameters
        ----------
        u, v : numpy.ndarray of int64, shape (F,)
            Source and destination leaf switch numbers.
        seq : numpy.ndarray of int64, shape (F, h)
            Port columns per level (every flow the same height h; the caller groups by height).

        Returns
        -------
        numpy.ndarray of int64, shape (F, 2h)
            Up-links of levels 0..h-1 from ``u``, then down-links of levels h-1..0 towards ``v``
            (the reverse direction of ``v``'s up-link: ids 2j and 2j+1 are one link's two
            directions). Raises ValueError when a link of a sequence is absent or down.
        """
        f, h = seq.shape
        ups = np.empty((f, h), dtype=np.int64)
        downs = np.empty((f, h), dtype=np.int64)
        cu, cv = u.copy(), v.copy()
        for lvl in range(h):
            a = self.up_link[cu, seq[:, lvl]]
            b = self.up_link[cv, seq[:, lvl]]
            if (a < 0).any() or (b < 0).any():
                raise ValueError("a port sequence uses a link that is absent or down")
            ups[:, lvl], downs[:, h - 1 - lvl] = a, b ^ 1
            cu, cv = self.up_node[cu, seq[:, lvl]], self.up_node[cv, seq[:, lvl]]
        if (cu != cv).any():
            raise ValueError("a port sequence does not meet at its height")
        return np.hstack((ups, downs))

    def candidates(self, u: int, v: int) -> np.ndarray:
        """Every candidate of one leaf pair as inner link-id rows (n, 2h), in lexicographic
        port order (shape (1, 0) when u == v, (0, 0) when no path exists)."""
        h = int(self.heights(np.asarray([u]), np.asarray([v]))[0])
        if h < 0:
            return np.empty((0, 0), dtype=np.int64)
        if h == 0:
            return np.empty((1, 0), dtype=np.int64)
        mask = self.meet_mask(np.asarray([u]), np.asarray([v]), h)[0]
        seq = decode(np.flatnonzero(mask), self.width, h)
        n = len(seq)
        return self.walk(np.full(n, u), np.full(n, v), seq)


def _structure(index: PathIndex) -> str | tuple[Any, ...]:
    """The up-links of the whole fabric (down ones too) as (link ids, tail, head, column,
    columns' port numbers, max height), or why the fabric is not a mirrored Clos (a str)."""
    fabric = index.fabric
    if any(ln.wan for ln in fabric.links):
        return f"fabric {fabric.name!r} has WAN links"
    tail, head, port, names = index.link_ends()
    n_sw = len(fabric.switches)
    tier = np.asarray([s.tier for s in fabric.switches], dtype=np.int64)
    leaf_tiers = {fabric.switch_by_name[h.leaf].tier for h in fabric.hosts}
    if len(leaf_tiers) > 1:
        return f"hosts hang off switches of tiers {sorted(leaf_tiers)}"
    ids = np.flatnonzero((tail < n_sw) & (head < n_sw))
    ids = ids[tier[head[ids]] > tier[tail[ids]]]
    t, h, p = tail[ids], head[ids], port[ids]
    if (tier[h] - tier[t] != 1).any():
        return "an up-link skips a tier"
    pi = np.full(n_sw, -1, dtype=np.int64)
    pi[h] = p
    if (pi[h] != p).any():
        bad = names[int(h[np.flatnonzero(pi[h] != p)[0]])]
        return f"up-links into {bad} leave their lower ends by different ports"
    inner = pi[t] >= 0  # lower ends that have a π of their own (not leaves)
    child_pi = np.full(n_sw, -1, dtype=np.int64)
    child_pi[h[inner]] = pi[t[inner]]
    if (child_pi[h[inner]] != pi[t[inner]]).any():
        bad = names[int(h[inner][np.flatnonzero(child_pi[h[inner]] != pi[t[inner]])[0]])]
        return f"the switches below {bad} have different up-port numbers"
    cols = np.unique(p)
    base = min(leaf_tiers, default=1)
    return ids, t, h, np.searchsorted(cols, p), cols, int(tier.max(initial=base) - base)


def decode(codes: np.ndarray, width: int, h: int) -> np.ndarray:
    """Sequence codes (first level most significant, base ``width``) → (n, h) port columns."""
    out = np.empty((len(codes), h), dtype=np.int64)
    rest = np.asarray(codes, dtype=np.int64).copy()
    for lvl in range(h - 1, -1, -1):
        out[:, lvl] = rest % width
        rest //= width
    return out


def pick_alive(tables: ClosTables, u: np.ndarray, v: np.ndarray, h: np.ndarray,
               rank: np.ndarray, count: np.ndarray | None = None) -> np.ndarray:
    """The ``rank``-th alive sequence (lexicographic) of every flow, as port columns.

    Parameters
    ----------
    u, v, h : numpy.ndarray of int64, shape (F,)
        Leaf switch numbers and meeting heights (:meth:`ClosTables.heights`; h ≥ 1).
    rank : numpy.ndarray of int64, shape (F,)
        0 ≤ rank < the flow's number of candidates.
    count : numpy.ndarray, optional
        Out: filled with each flow's number of candidates.

    Returns
    -------
    numpy.ndarray of int64, shape (F, max h)
        Columns beyond a flow's height are -1.
    """
    hmax = int(h.max(initial=0))
    out = np.full((len(u), max(hmax, 1)), -1, dtype=np.int64)
    for r in np.unique(h).tolist():
        if r <= 0:
            continue
        sel = np.flatnonzero(h == r)
        cls, rep = tables.classes(r)
        n_cls = len(rep)
        keys, inv = np.unique(cls[u[sel]] * n_cls + cls[v[sel]], return_inverse=True)
        inv = inv.ravel()
        masks = tables.meet_mask(rep[keys // n_cls], rep[keys % n_cls], r)  # (pairs, W^r)
        csum = np.cumsum(masks, axis=1)
        if count is not None:
            count[sel] = csum[inv, -1]
        width = csum.shape[1]
        # one sorted array over all pairs: pair k's row shifted by k·(width + 1)
        flat = (csum + (np.arange(len(keys)) * (width + 1))[:, None]).ravel()
        target = rank[sel] + inv * (width + 1)
        code = np.searchsorted(flat, target, side="right") - inv * width
        out[sel, :r] = decode(code, tables.width, r)
    return out


def heights_and_counts(tables: ClosTables, u: np.ndarray, v: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """(:meth:`ClosTables.heights`, number of candidates) per flow: the count is the number of
    meeting sequences at the flow's height (1 at height 0, 0 where h < 0). Each meeting mask is
    computed once per pair of switch classes (:meth:`ClosTables.per_pair`)."""
    h = np.full(len(u), -1, dtype=np.int64)
    n = np.zeros(len(u), dtype=np.int64)
    for r in range(tables.max_height + 1):
        todo = np.flatnonzero(h < 0)
        if not len(todo):
            break
        cnt = tables.per_pair(u[todo], v[todo], r, lambda m: m.sum(axis=1))
        hit = cnt > 0
        h[todo[hit]] = r
        n[todo[hit]] = cnt[hit]
    return h, n
