"""Load-aware pinning: one path per flow, minimising the maximum link *utilisation*.

The weighted version of :func:`controller.te.pinning.pin_flows`: flow f has a demand w_f (bits/s)
and directed link e a capacity c_e (bits/s) and possibly a load b_e it already carries
(background, measured); choose one candidate path per flow (every shortest valley-free path,
:class:`controller.te.pathindex.PathIndex`) to minimise

    U = max_e (b_e + Σ_{f : e ∈ path(f)} w_f) / c_e.

With equal demands, equal capacities and no background, U = max flows per link × w / c, the
objective of :func:`pin_flows` (which is left unchanged). The problem is unsplittable
min-congestion routing, NP-hard (Raghavan & Thompson, Combinatorica 7(4), 1987, §1);
:mod:`controller.te.lp` gives its LP relaxation and exact MILP optimum on small instances.

Algorithm (:class:`PinState`):

0. The flows of the equal-demand class with the largest total demand are first placed by a
   level-by-level bipartite edge colouring, so that no two share a fabric link where the fabric
   allows it: on a mirrored Clos by port columns without any path list
   (:mod:`controller.te.closcolour`, equitable: a switch with more of these flows than alive
   up-ports spreads them evenly, which is what sub-flows need), elsewhere over the candidates
   (:mod:`controller.te.colouring`, only when every demand is equal). The rest go to the greedy.
1. Greedy, largest demand first (then fewest candidates, then input order), each flow on the
   candidate minimising its own bottleneck utilisation after placement, ties broken by the
   smallest sum of utilisations along the candidate, then candidate order. The evaluation of
   all candidates of a flow is one vectorised gather over a (candidates × hops) link-id array,
   so no path is ever materialised as node names until the answer is returned.
2. Local search, as in :func:`pin_flows` but over utilisations: while U exceeds the lower
   bound, a link at U is relieved: one of its flows (largest first) moves to a candidate that
   stays below U everywhere, or — an ejection chain (Glover, Discrete Appl. Math. 65, 1996, §2)
   — to one that pushes other links to U, each then relieved the same way (depth-limited, at
   most a few candidates per step, rolled back on failure). Each success lowers the number of
   links at U (or U), so it terminates; ``search_budget`` candidate evaluations bound its time.
   On a fat-tree these chains are the alternating paths of bipartite edge colouring (König),
   which is why permutation traffic such as a fragmented ring ends collision-free.
3. Compound moves (instances of at most ``KICK_MAX_FLOWS`` flows), when no chain helps: a flow
   on a link at U moves to any other candidate even if that pushes links *above* U, then flows
   are moved off the link most above U, each to its best candidate avoiding it that stays
   within U (at most ``KICK_STEPS``); kept when nothing ends above U and fewer links are at U
   (a swap of flows of unequal demands, which every order of single moves passes above U:
   0.75 → 0.6 = the MILP optimum on a k = 4 fat-tree with two links down, a draw of
   tests/test_scale_loadpin.py).

Lower bound (:func:`controller.te.bounds.load_lower_bound`): the larger of the mandatory load
(links every candidate of a flow uses, e.g. access links) and cut bounds: the flows leaving
(entering) a leaf with its hosts, or a pod, share that set's up links, so the busiest carries at
least (Σ w + Σ b) / Σ c over them — and, when those flows all have one demand w and the links
one capacity c, the pigeonhole level (⌈n_flows / n_links⌉ · w / c without background), since
no flow splits.

Candidates are materialised lazily (:class:`PinState`): a flow placed by the colouring holds only
its chosen link ids; its candidate array is built when the greedy or the local search first
needs it, so planning 65,536 flows on a k = 64 fat-tree never holds 65,536 candidate arrays.

Cost at scale (k = 32 fat-tree, 8,192 ring flows, bench/te_scale.py): candidate building (per
leaf pair, :mod:`controller.te.pathindex`), the colouring (vectorised per level,
:mod:`controller.te.colouring`), one scatter-add for the coloured placement
(:meth:`PinState.place_many`), a bincount lower bound and vectorised path assembly.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter
from typing import cast

import numpy as np

from controller.model.topology import Fabric
from controller.te.bounds import load_lower_bound
from controller.te.clos import ClosTables, heights_and_counts
from controller.te.closcolour import colour_clos
from controller.te.collectives import FlowDemand
from controller.te.colouring import colour_levels
from controller.te.pathindex import DirectedLink, Path, PathIndex
from controller.te.placement import Placement, concat_ranges, csr_paths

DEFAULT_SEARCH_BUDGET = 2_000_000
BATCH_FLOWS = 256
"""From this many flows on, :meth:`PinState.add_many` counts candidates by port columns in one
vectorised pass (:class:`ClosTables`) instead of building each flow's candidates."""
COLOUR_MIN_CLASS = 64
"""Equal-demand classes with fewer flows than this go straight to the greedy."""
SMALL_FLOW = 1 / 32
"""Flows with a demand at most this share of a link are placed by the greedy in batches (a
batch judged on one utilisation snapshot can stack a few of them on one link; for flows this
small the local search that follows evens that out; 1/8 already left 1.33 where 1.08 was
possible after an aggregation switch failure with 12 sub-flows)."""
GREEDY_BATCH = 64
"""Most small flows judged together (interleaved by source leaf, :func:`_batches`)."""
IN_ORDER_BATCH = 16
"""Fewest larger flows chosen together by :meth:`PinState._greedy_in_order` (the one-by-one
greedy's result, window by window); a window holds twice what the last one placed, between
this and ``IN_ORDER_MAX_BATCH``."""
IN_ORDER_MAX_BATCH = 1024
"""Most flows in one window of :meth:`PinState._greedy_in_order` (on the 65,536-GPU rail
fabric with a spine down, 24,473 sub-flows collide twice: windows of 16 took 1,532 choices,
of 256 took 96)."""
DEFAULT_CHAIN_DEPTH = 8
KICK_MAX_FLOWS = 2048
"""Compound moves (:meth:`PinState._kick`) are tried only up to this many flows: they try
every candidate of every flow on a link at the maximum."""
KICK_STEPS = 8
"""Most re-placements after one kick (:meth:`PinState._settle`)."""
_CHAIN_WIDTH = 4  # candidates tried per flow in a chain step
_SRC, _DST = attrgetter("src"), attrgetter("dst")
_EPS = 1e-9


@dataclass(frozen=True)
class LoadPinning:
    """A load-aware pinning.

    Attributes
    ----------
    paths : mapping of FlowDemand to tuple of str
        The chosen path of every demand (host … host), in demand order.
    link_load_bps : mapping of (str, str) to float
        Directed link → background + pinned demand on it, bits/s (links with load > 0, sorted).
    max_utilisation : float
        max over directed links of load / capacity (dimensionless; 1.0 = full).
    lower_bound : float
        No pinning on these candidates has a smaller maximum utilisation.
    placement : Placement or None
        The same paths as link ids (:class:`controller.te.placement.Placement`): what
        :mod:`controller.te.recovery` repairs and re-optimises.
    """

    paths: Mapping[FlowDemand, Path]
    link_load_bps: Mapping[DirectedLink, float]
    max_utilisation: float
    lower_bound: float
    placement: Placement | None = field(default=None, compare=False, repr=False)

    @property
    def optimal(self) -> bool:
        """True when ``max_utilisation`` meets the lower bound (up to 1e-9)."""
        return self.max_utilisation <= self.lower_bound + _EPS


class _LazyCands:
    """``state.cands[i]``: flow i's fabric candidates (n_cand × hops link ids), built on first use
    from the index (which caches them per leaf pair)."""

    __slots__ = ("_got", "_state")

    def __init__(self, state: PinState):
        self._state = state
        self._got: list[np.ndarray | None] = []

    def __len__(self) -> int:
        return len(self._got)

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self._got)))

    def __getitem__(self, i: int) -> np.ndarray:
        got = self._got[i]
        if got is None:
            a, b = self._state.leaves[i]
            got = self._got[i] = self._state.index.leaf_candidates(a, b)
        return got

    def append(self, c: np.ndarray | None) -> None:
        self._got.append(c)

    def extend(self, cs: Iterable[np.ndarray | None]) -> None:
        self._got.extend(cs)


class PinState:
    """Mutable assignment of flows to candidates over one :class:`PathIndex` (pure; no I/O).

    Parameters
    ----------
    index : PathIndex
        Candidates and capacities of the fabric state.
    base_load_bps : numpy.ndarray, shape (n_directed_links,), optional
        Load not under our control (background), bits/s; zeros by default.

    Attributes
    ----------
    load_bps : numpy.ndarray of float64, shape (n_directed_links,)
        Base load plus the demand of every placed flow, bits/s.
    base_bps : numpy.ndarray of float64, shape (n_directed_links,)
        The base load alone, bits/s (read-only by convention).
    cands : sequence of numpy.ndarray
        ``cands[i]``: flow i's fabric candidates, (n_cand × hops) link ids, built on first use.
    n_cands : list of int
        Number of candidates of every flow (known without building them).
    choice : list of int
        Row of ``cands[i]`` flow i is on; -1 unplaced; -2 placed by :meth:`place_rows` with its
        row not yet looked up (:meth:`current` resolves it).
    """

    def __init__(self, index: PathIndex, base_load_bps: np.ndarray | None = None):
        self.index = index
        n = len(index.links)
        self.inv_cap = 1.0 / index.capacity_bps
        self.load_bps = np.zeros(n) if base_load_bps is None else base_load_bps.astype(float)
        self.base_bps = self.load_bps.copy()
        self.util = self.load_bps * self.inv_cap
        self.flows: list[FlowDemand] = []
        self._pos: dict[FlowDemand, int] = {}
        self.rate_bps: list[float] = []
        self.cands = _LazyCands(self)
        self.n_cands: list[int] = []
        self._leaves: list[tuple[str, str]] = []
        self._hosts: list[tuple[np.ndarray, np.ndarray]] = []  # (src, dst) host numbers, per add
        self.choice: list[int] = []  # -1: not placed, -2: placed, row not looked up
        self.rows: list[np.ndarray | None] = []  # chosen fabric link ids
        self._flows_on: dict[int, set[int]] | None = None
        self.evaluations = 0
        self.clos_ends: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None  # rate_bps, access as arrays
        self._access_flat: list[int] = []
        self._chunks: list[tuple[np.ndarray, np.ndarray]] = [  # the same, per add
            (np.empty(0, dtype=np.float64), np.empty((0, 2), dtype=np.int64))]

    def as_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(:attr:`rate_bps` as float64 shape (F,), :attr:`access` as int64 shape (F, 2)),
        read-only, rebuilt only when flows were added since (both lists only grow)."""
        got = self._arrays
        if got is None or len(got[0]) != len(self.flows):
            rates, access = zip(*self._chunks, strict=True)
            got = self._arrays = (np.concatenate(rates), np.concatenate(access))
            for arr in got:
                arr.setflags(write=False)
            self._chunks[:] = [got]
        return got

    @property
    def access(self) -> np.ndarray:
        """(access link up, access link down) ids per flow, int64, shape (F, 2), read-only."""
        return self.as_arrays()[1]

    def _ends_of(self, i: int) -> tuple[int, int]:
        """Flow ``i``'s access link ids (up, down), from a flat list of ints kept beside
        :attr:`access` for the local search's one-flow-at-a-time reads (a list of ints is one
        object to the garbage collector; a numpy row read costs ten times as much)."""
        flat = self._access_flat
        if len(flat) != 2 * len(self.flows):
            flat = self._access_flat = self.as_arrays()[1].ravel().tolist()
        return flat[2 * i], flat[2 * i + 1]

    @property
    def leaves(self) -> list[tuple[str, str]]:
        """(source leaf, destination leaf) names per flow (named on use, from the host numbers
        :meth:`_add_hosts` kept)."""
        got = self._leaves
        if len(got) < len(self.flows):
            leaf_name = host_table(self.index)[1]
            for src, dst in self._hosts:
                got.extend(zip(map(leaf_name.__getitem__, src.tolist()),
                               map(leaf_name.__getitem__, dst.tolist()), strict=True))
            self._hosts.clear()
        return got

    @property
    def pos(self) -> dict[FlowDemand, int]:
        """Flow → its position (extended on use: a repair that never looks a flow up does not
        hash thousands of them)."""
        got = self._pos
        if len(got) < len(self.flows):
            got.update(zip(self.flows[len(got):], range(len(got), len(self.flows)), strict=True))
        return got

    @property
    def tables(self) -> ClosTables | None:
        """The port tables of the index (:class:`ClosTables`) or None (not a mirrored Clos)."""
        return ClosTables.of(self.index)

    @property
    def flows_on(self) -> dict[int, set[int]]:
        """Fabric link id → positions of the placed flows on it (built on first use, then kept
        up to date by every placement and removal)."""
        if self._flows_on is None:
            got: dict[int, set[int]] = {}
            placed = [i for i, r in enumerate(self.rows) if r is not None and len(r)]
            if placed:
                rows = [r for r in self.rows if r is not None and len(r)]
                lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
                ids = np.concatenate(rows)
                owner = np.repeat(np.asarray(placed, dtype=np.int64), lengths)
                order = np.argsort(ids, kind="stable")
                ids, owner = ids[order], owner[order]
                cut = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1], True])
                owners = owner.tolist()
                for k, lid in enumerate(ids[cut[:-1]].tolist()):
                    got[lid] = set(owners[cut[k]:cut[k + 1]])
            self._flows_on = got
        return self._flows_on

    def ends(self, flows: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(source leaf, destination leaf, meeting height) per flow as switch numbers of
        :attr:`tables` (a mirrored Clos only), gathered from what :meth:`add_many` computed."""
        t = self.tables
        assert t is not None
        n = len(self.flows)
        u, v, h = (np.full(n, -1, dtype=np.int64) for _ in range(3))
        for first, uu, vv, hh in self.clos_ends:
            u[first:first + len(uu)], v[first:first + len(uu)] = uu, vv
            h[first:first + len(uu)] = hh
        idx = np.asarray(flows, dtype=np.int64)
        miss = idx[h[idx] < 0]
        if len(miss):
            u[miss] = t.leaf_ids([self.leaves[i][0] for i in miss.tolist()])
            v[miss] = t.leaf_ids([self.leaves[i][1] for i in miss.tolist()])
            h[miss] = t.heights(u[miss], v[miss])
        return u[idx], v[idx], h[idx]

    # -- flows ----------------------------------------------------------------------------------
    def add(self, demand: FlowDemand, rate_bps: float) -> int:
        """Register ``demand`` (not placed yet); returns its position.

        Raises
        ------
        ValueError
            Repeated demand, unknown host, non-positive rate, or no valley-free path over the
            links that are up (the message names the flow).
        """
        return self.add_many([(demand, rate_bps)])[0]

    def add_many(self, items: Iterable[tuple[FlowDemand, float]]) -> list[int]:
        """:meth:`add` for many flows; on a mirrored Clos their candidates are counted by port
        columns (:class:`ClosTables`) without being built. Nothing is added when one fails.
        Raises ValueError as :meth:`add` does."""
        todo = list(items)
        if not todo:
            return []
        demand_tuple, rate_tuple = zip(*todo, strict=True)
        demands: list[FlowDemand] = list(demand_tuple)
        rates = np.fromiter(rate_tuple, dtype=np.float64, count=len(todo))
        pos = self.pos
        if len(set(demands)) != len(demands) or (pos and any(d in pos for d in demands)):
            seen: set[FlowDemand] = set(pos)
            for dup in demands:
                if dup in seen:
                    raise ValueError(f"flow {dup.label} (index {dup.index}) is listed twice")
                seen.add(dup)
        num = host_table(self.index)[0]
        try:
            src = np.fromiter(map(num.__getitem__, map(_SRC, demands)), np.int64, len(todo))
            dst = np.fromiter(map(num.__getitem__, map(_DST, demands)), np.int64, len(todo))
        except KeyError as exc:
            d = next(d for d in demands if d.src not in num or d.dst not in num)
            host = d.src if d.src not in num else d.dst
            raise ValueError(f"flow {d.label}: {host!r} is not a host of fabric "
                             f"{self.index.fabric.name!r}") from exc
        return self._add_hosts(demands, rates, src, dst)

    def add_routed(self, demands: Sequence[FlowDemand], rate_bps: np.ndarray,
                   up_ids: np.ndarray, down_ids: np.ndarray) -> list[int]:
        """:meth:`add_many` for flows that already had a path: their access links (``up_ids``:
        host → leaf, ``down_ids``: leaf → host, shape (F,)) name their hosts, so no name is
        looked up; ``demands`` must be distinct and not in the state yet (a
        :class:`Placement`'s flows: :func:`controller.te.recovery.repair` moves thousands).
        Raises ValueError as :meth:`add` does, or for an id that is not an access link."""
        if not len(demands):
            return []
        host_of = host_of_access(self.index)
        up_ids, down_ids = np.asarray(up_ids, np.int64), np.asarray(down_ids, np.int64)
        src, dst = host_of[up_ids], host_of[down_ids ^ 1]
        bad = np.flatnonzero((src < 0) | (dst < 0))
        if len(bad):
            raise ValueError(f"flow {demands[int(bad[0])].label}: its path does not start and "
                             "end on access links")
        return self._add_hosts(list(demands), np.asarray(rate_bps, np.float64), src, dst)

    def _add_hosts(self, demands: list[FlowDemand], rates: np.ndarray, src: np.ndarray,
                   dst: np.ndarray) -> list[int]:
        """Add ``demands`` (distinct, new) from host number ``src`` to ``dst``
        (:func:`host_table`) at ``rates`` bits/s, after checking what :meth:`add` checks."""
        bad_rate = np.flatnonzero(~(rates > 0))
        if len(bad_rate):
            d = demands[int(bad_rate[0])]
            raise ValueError(f"flow {d.label}: demand must be > 0 bit/s, "
                             f"got {float(rates[int(bad_rate[0])])!r}")
        same = np.flatnonzero(src == dst)
        if len(same):
            d = demands[int(same[0])]
            raise ValueError(f"flow {d.label}: no path from host {d.src} to itself")
        _, leaf_name, up_id, down_id = host_table(self.index)
        up, down = up_id[src], down_id[dst]
        dead = np.flatnonzero(~(self.index.is_up[up] & self.index.is_up[down]))
        if len(dead):
            self._no_path(demands[int(dead[0])])
        built: list[np.ndarray | None]
        t = self.tables if len(demands) >= BATCH_FLOWS else None
        if t is not None:
            leaf_num = t.host_leaf_ids()
            u, v = leaf_num[src], leaf_num[dst]
            h, n = heights_and_counts(t, u, v)
            bad = np.flatnonzero(h < 0)
            if len(bad):
                self._no_path(demands[int(bad[0])])
            counts = n.tolist()
            built = [None] * len(demands)
            self.clos_ends.append((len(self.flows), u, v, h))
        else:
            built, counts = [], []
            for d, a, b in zip(demands, map(leaf_name.__getitem__, src.tolist()),
                               map(leaf_name.__getitem__, dst.tolist()), strict=True):
                inner = self.index.leaf_candidates(a, b)
                if inner.shape[0] == 0:
                    self._no_path(d)
                counts.append(inner.shape[0])
                built.append(inner)
        first = len(self.flows)
        self.flows.extend(demands)
        self.rate_bps.extend(rates.tolist())
        self.cands.extend(built)
        self.n_cands.extend(counts)
        self._hosts.append((src, dst))
        self._chunks.append((rates.astype(np.float64), np.stack((up, down), axis=1)))
        self.choice.extend([-1] * len(demands))
        self.rows.extend([None] * len(demands))
        return list(range(first, first + len(demands)))

    def _no_path(self, demand: FlowDemand) -> None:
        raise ValueError(
            f"flow {demand.label}: no valley-free path from {demand.src} to {demand.dst} over "
            f"the links that are up ({len(self.index.down)} down)"
        )

    def links_of(self, i: int) -> np.ndarray:
        """Directed link ids of flow ``i``'s chosen path (access links included)."""
        up, down = self._ends_of(i)
        row = self.rows[i]
        assert row is not None, "flow is not placed"
        return np.concatenate(([up], row, [down])).astype(np.int64)

    def link_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`links_of` of every flow (all placed) in CSR form: (ids, starts), flow i's
        links ``ids[starts[i]:starts[i + 1]]``; int64, shapes (Σ hops,), (F + 1,)."""
        rows = cast(list[np.ndarray], self.rows)
        assert all(r is not None for r in rows), "every flow must be placed"
        inner = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        starts = np.concatenate(([0], np.cumsum(inner + 2))).astype(np.int64)
        ids = np.empty(int(starts[-1]), dtype=np.int64)
        acc = self.as_arrays()[1]
        ids[starts[:-1]], ids[starts[1:] - 1] = acc[:, 0], acc[:, 1]
        if len(rows) and inner.any():
            ids[concat_ranges(starts[:-1] + 1, inner)] = np.concatenate(rows)
        return ids, starts

    def path(self, i: int) -> Path:
        """Node path of flow ``i``'s chosen candidate."""
        return self.index.path_of(self.links_of(i))

    def current(self, i: int) -> int:
        """Row of ``cands[i]`` flow ``i`` is on (looked up once for flows placed by
        :meth:`place_rows`); -1 when it is not placed."""
        ci = self.choice[i]
        if ci == -2:
            row = self.rows[i]
            assert row is not None
            c = self.cands[i]
            hit = (np.flatnonzero((c == row).all(axis=1)) if c.shape[1] == len(row)
                   else np.empty(0, dtype=np.int64))
            if not len(hit):
                raise AssertionError(f"flow {self.flows[i].label}: its row is not a candidate")
            ci = self.choice[i] = int(hit[0])
        return ci

    def place(self, i: int, ci: int) -> None:
        """Put flow ``i`` on candidate ``ci`` (it must not be placed)."""
        self._place_row(i, self.cands[i][ci], ci)

    def _place_row(self, i: int, row: np.ndarray, ci: int) -> None:
        """Put flow ``i`` on fabric link ids ``row``, candidate ``ci`` of it."""
        assert self.choice[i] == -1
        self.choice[i] = ci
        self.rows[i] = row
        w = self.rate_bps[i]
        ids = self.links_of(i)
        np.add.at(self.load_bps, ids, w)
        self.util[ids] = self.load_bps[ids] * self.inv_cap[ids]
        if self._flows_on is not None:
            for lid in row.tolist():
                self._flows_on.setdefault(lid, set()).add(i)

    def place_many(self, placements: Iterable[tuple[int, int]]) -> None:
        """:meth:`place` for many (flow, candidate) pairs at once: one scatter-add of all their
        links (access links, then fabric links, each in the given flow order)."""
        pairs = list(placements)
        if not pairs:
            return
        for i, _ in pairs:
            assert self.choice[i] == -1
        self._place(np.asarray([i for i, _ in pairs], dtype=np.int64),
                    [self.cands[i][ci] for i, ci in pairs], [ci for _, ci in pairs])

    def place_rows(self, flows: np.ndarray, rows: np.ndarray | Sequence[np.ndarray]) -> None:
        """Place unplaced ``flows`` on the fabric link-id ``rows`` (F × hops, one candidate of
        each), e.g. a colouring's choice, without building their candidate arrays."""
        for i in flows.tolist():
            assert self.choice[i] == -1
        self._place(np.asarray(flows, dtype=np.int64), list(rows), [-2] * len(flows))

    def _place(self, flows: np.ndarray, inner: list[np.ndarray], choice: list[int]) -> None:
        first, n = (int(flows[0]), len(flows)) if len(flows) else (0, 0)
        if n and int(flows[-1]) == first + n - 1 and bool((np.diff(flows) == 1).all()):
            self.choice[first:first + n] = choice  # consecutive positions (a repair's flows)
            self.rows[first:first + n] = inner
        else:
            for i, row, ci in zip(flows.tolist(), inner, choice, strict=True):
                self.choice[i] = ci
                self.rows[i] = row
        lengths = np.fromiter(map(len, inner), dtype=np.int64, count=len(inner))
        fabric_ids = (np.concatenate(inner) if inner else np.empty(0)).astype(np.int64)
        rate_all, acc_all = self.as_arrays()
        acc, rate = acc_all[flows], rate_all[flows]
        ids = np.concatenate((acc[:, 0], fabric_ids, acc[:, 1]))
        np.add.at(self.load_bps, ids, np.concatenate((rate, np.repeat(rate, lengths), rate)))
        self.util[ids] = self.load_bps[ids] * self.inv_cap[ids]
        flows_on = self._flows_on
        if flows_on is None:
            return
        for lid, i in zip(fabric_ids.tolist(), np.repeat(flows, lengths).tolist(), strict=True):
            got = flows_on.get(lid)
            if got is None:
                flows_on[lid] = {i}
            else:
                got.add(i)

    def paths(self) -> list[Path]:
        """Node path of every placed flow, in position order (vectorised per path length,
        :func:`controller.te.placement.csr_paths`)."""
        ids, starts = self.link_rows()
        return csr_paths(self.index, ids, starts, np.arange(len(self.flows), dtype=np.int64))

    def remove(self, i: int) -> None:
        """Take flow ``i`` off its path."""
        ids = self.links_of(i)
        np.subtract.at(self.load_bps, ids, self.rate_bps[i])
        self.util[ids] = self.load_bps[ids] * self.inv_cap[ids]
        row = self.rows[i]
        assert row is not None
        if self._flows_on is not None:
            for lid in row.tolist():
                self._flows_on[lid].discard(i)
        self.choice[i] = -1
        self.rows[i] = None

    def best_candidate(self, i: int, exclude: int = -1) -> tuple[int, float]:
        """(candidate, its bottleneck utilisation if flow ``i`` were put there); ``i`` must be
        unplaced. Ties: smallest utilisation sum, then candidate order. ``exclude`` is skipped
        (returns (-1, inf) if nothing else is left)."""
        c = self.cands[i]
        self.evaluations += c.shape[0]
        up, down = self._ends_of(i)
        w = self.rate_bps[i]
        edge = max(self.util[up] + w * self.inv_cap[up], self.util[down] + w * self.inv_cap[down])
        if c.shape[1] == 0:
            return (0, edge) if exclude != 0 else (-1, float("inf"))
        u = self.util[c]
        after = u + w * self.inv_cap[c]
        b = after.max(axis=1)
        if exclude >= 0:
            b[exclude] = np.inf
        m = b.min()
        if not np.isfinite(m):
            return -1, float("inf")
        ties = np.flatnonzero(b <= m + _EPS)
        ci = int(ties[0]) if len(ties) == 1 else int(ties[np.argmin(u[ties].sum(axis=1))])
        return ci, max(float(m), float(edge))

    def greedy(self, flows: Iterable[int]) -> None:
        """Place ``flows`` (unplaced positions): largest demand, fewest candidates, first.

        On a mirrored Clos with many flows the candidates of a flow are evaluated from the
        port tables (:meth:`ClosTables.chains`, its two leaves' rows) instead of a per-pair
        candidate array: the same choice, without storing an array per leaf pair."""
        fl = np.fromiter(flows, dtype=np.int64)
        rate = self.as_arrays()[0]
        n_cands = np.asarray(self.n_cands, dtype=np.int64)
        order = fl[np.lexsort((fl, n_cands[fl], -rate[fl]))].tolist()
        t = self.tables
        if t is None or len(order) < BATCH_FLOWS:
            for i in order:
                self.place(i, self.best_candidate(i)[0])
            return
        u, v, h = self.ends(order)
        w_rel = self.as_arrays()[0][order] * self.inv_cap.max()
        big = np.flatnonzero(w_rel > SMALL_FLOW)
        if len(big):
            self._greedy_in_order(t, [order[k] for k in big.tolist()], u[big], v[big], h[big])
        small = np.flatnonzero(w_rel <= SMALL_FLOW)
        pos = {order[k]: k for k in small.tolist()}
        small_flows = [order[k] for k in small.tolist()]
        leaves = self.leaves
        for batch in _batches(small_flows, [leaves[i] for i in small_flows], GREEDY_BATCH):
            ks = np.asarray([pos[i] for i in batch], dtype=np.int64)
            self._greedy_batch(t, batch, u[ks], v[ks], h[ks])

    def _greedy_batch(self, t: ClosTables, flows: list[int], u: np.ndarray, v: np.ndarray,
                      h: np.ndarray) -> None:
        """Place ``flows`` each on its candidate with the lowest bottleneck after placement,
        all judged on the utilisation before any of them is placed (port tables, one gather
        per height), then place them together."""
        self._place_chosen(flows, *self._choose(t, flows, u, v, h))

    def _greedy_in_order(self, t: ClosTables, flows: list[int], u: np.ndarray,
                         v: np.ndarray, h: np.ndarray) -> None:
        """Place ``flows`` one after the other, each on the candidate :meth:`_choose` gives it
        on the utilisation left by the ones before (the one-by-one greedy), a window of
        ``IN_ORDER_BATCH`` to ``IN_ORDER_MAX_BATCH`` at a time: all are chosen on the
        utilisation before the first is placed, and the longest prefix in which no flow's
        choice shares a link with an earlier flow's is placed; the next window starts at the
        first flow that does. That is
        the one-by-one result: placing a flow raises the utilisation of its own links only, so
        a choice none of whose links an earlier flow loaded keeps its bottleneck and its total
        while every other candidate's can only grow (a tie within ``_EPS`` aside)."""
        at, n, size = 0, len(flows), IN_ORDER_BATCH
        while at < n:
            end = min(at + size, n)
            rows, rank, hops = self._choose(t, flows[at:end], u[at:end], v[at:end], h[at:end])
            k = _first_conflict(rows)
            self._place_chosen(flows[at:at + k], rows[:k], rank[:k], hops[:k])
            at += k
            # twice what this window placed: grows while choices do not collide, shrinks
            # to about the run between collisions when they do
            size = min(max(2 * k, IN_ORDER_BATCH), IN_ORDER_MAX_BATCH)

    @cached_property
    def fabric_inv_cap(self) -> float | None:
        """1 / the capacity every fabric (switch-to-switch) link has (1/bits/s), or None when
        they differ."""
        access = host_of_access(self.index) >= 0
        access |= access[np.arange(len(access)) ^ 1]
        ic = self.inv_cap[~access]
        return float(ic[0]) if len(ic) and bool((ic == ic[0]).all()) else None

    def _place_chosen(self, flows: list[int], rows: np.ndarray, rank: np.ndarray,
                      hops: np.ndarray) -> None:
        """Place ``flows`` on what :meth:`_choose` gave them (within-leaf flows on their one
        empty candidate)."""
        if not flows:
            return
        if rows.shape[1] and bool((hops == rows.shape[1]).all()):
            inner = list(rows)  # no padding: the rows as they are
        else:
            inner = [r[:n] for r, n in zip(rows, hops.tolist(), strict=True)]
        self._place(np.asarray(flows, dtype=np.int64), inner, rank.tolist())

    def _choose(self, t: ClosTables, flows: list[int], u: np.ndarray, v: np.ndarray,
                h: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per flow of ``flows`` (leaf numbers ``u``, ``v``, height ``h``, shape (B,)): the
        candidate with the lowest bottleneck after placement (ties: the lowest total
        utilisation), all judged on the utilisation now.

        Returns
        -------
        rows : numpy.ndarray of int64, shape (B, 2 · max h)
            Its fabric link ids (up-links, then down-links), padded with -1.
        rank : numpy.ndarray of int64, shape (B,)
            Its position among the flow's candidates (0 for a flow within one leaf).
        hops : numpy.ndarray of int64, shape (B,)
            Its number of fabric links (2h; 0 within one leaf).
        """
        hops = 2 * np.maximum(h, 0)
        rows = np.full((len(flows), int(hops.max(initial=0))), -1, dtype=np.int64)
        rank = np.zeros(len(flows), dtype=np.int64)
        rate = self.as_arrays()[0]
        for hh in range(1, t.max_height + 1):
            sel = np.flatnonzero(h == hh)
            if not len(sel):
                continue
            chain, reach = t.chains(hh), t.reach(hh)
            uu, vv = u[sel], v[sel]
            alive = (reach[uu] == reach[vv]) & (reach[uu] >= 0)  # (B, W^h)
            ups, downs = chain[uu], chain[vv] ^ 1  # (B, W^h, h); dead links are negative
            w = rate[np.asarray(flows, dtype=np.int64)[sel]][:, None]
            # bottleneck and total over the h hops, a hop at a time (a reduction along an
            # axis of length h costs more than h - 1 element-wise operations); when every
            # fabric link has one capacity, adding the flow adds the same to every candidate's
            # bottleneck, so the bottleneck before orders them alike
            one_cap = self.fabric_inv_cap is not None
            b = tot = np.empty(0)
            for j in range(ups.shape[2]):
                uj, dj = ups[:, :, j], downs[:, :, j]
                cu, cd = self.util[uj], self.util[dj]
                hop = (np.maximum(cu, cd) if one_cap else
                       np.maximum(cu + w * self.inv_cap[uj], cd + w * self.inv_cap[dj]))
                b = hop if j == 0 else np.maximum(b, hop)
                tot = cu + cd if j == 0 else tot + cu + cd
            b = np.where(alive, b, np.inf)
            self.evaluations += int(alive.sum())
            m = b.min(axis=1, keepdims=True)
            tie = np.where(b <= m + _EPS, tot, np.inf)
            code = tie.argmin(axis=1)
            every = np.arange(len(sel))
            rank[sel] = np.cumsum(alive, axis=1)[every, code] - 1
            rows[sel, :2 * hh] = np.concatenate((ups[every, code], downs[every, code][:, ::-1]),
                                                axis=1)
        return rows, rank, hops

    def max_utilisation(self) -> float:
        return float(self.util.max()) if len(self.util) else 0.0

    def local_search(
        self,
        lower: float,
        budget: int,
        movable: set[int] | None = None,
        depth: int = DEFAULT_CHAIN_DEPTH,
        kick: bool = False,
    ) -> int:
        """Relieve the hottest links by moves and ejection chains (module docstring); only flows
        in ``movable`` (all if None) move; with ``kick``, compound moves when those fail (at
        most ``KICK_MAX_FLOWS`` flows; not for a repair, which must be quick). Returns the
        number of flows whose path changed."""
        before: dict[int, np.ndarray | None] = {}
        self._moved = before
        left = [budget]
        while left[0] > 0:
            m = self.max_utilisation()
            if m <= lower + _EPS:
                break
            hot = np.flatnonzero(self.util >= m - _EPS).tolist()
            self._journal: list[tuple[int, int]] = []
            if not any(self._relieve(lid, m, depth, frozenset(), left, movable) for lid in hot):
                if (not kick or len(self.flows) > KICK_MAX_FLOWS
                        or not self._kick(hot, m, left, movable)):
                    break
        self._moved = {}
        return sum(1 for f, r in before.items() if not _same(r, self.rows[f]))

    def _move(self, f: int, ci: int) -> None:
        moved = getattr(self, "_moved", None)
        if moved is not None and f not in moved:
            moved[f] = self.rows[f]
        self._journal.append((f, self.current(f)))
        self.remove(f)
        self.place(f, ci)

    def _rollback(self, mark: int) -> None:
        while len(self._journal) > mark:
            f, old = self._journal.pop()
            self.remove(f)
            self.place(f, old)

    def _relieve(
        self,
        lid: int,
        m: float,
        depth: int,
        chain: frozenset[int],
        left: list[int],
        movable: set[int] | None,
    ) -> bool:
        """Bring link ``lid`` below utilisation ``m`` without any link exceeding m and without
        a link below m ending at m: a flow on ``lid`` moves to a candidate avoiding ``lid``;
        links it pushes to m are relieved recursively (an ejection chain, at most ``depth``
        further moves per branch; Glover, Discrete Appl. Math. 65, 1996, §2). On failure the
        state is restored."""
        mark = len(self._journal)
        on = [f for f in self.flows_on.get(lid, ()) if f not in chain
              and (movable is None or f in movable)]
        for f in sorted(on, key=lambda i: (-self.rate_bps[i], i)):
            cur = self.current(f)
            c = self.cands[f]
            self.remove(f)
            left[0] -= c.shape[0]
            self.evaluations += c.shape[0]
            after = self.util[c] + self.rate_bps[f] * self.inv_cap[c]
            ok = (after.max(axis=1) < m + _EPS) & ~(c == lid).any(axis=1)
            ok[cur] = False
            n_hot = (after >= m - _EPS).sum(axis=1)
            if depth <= 0:
                ok &= n_hot == 0
            self.place(f, cur)
            cis = np.flatnonzero(ok)
            if not len(cis):
                continue
            order = np.lexsort((cis, self.util[c[cis]].sum(axis=1), n_hot[cis]))
            for ci in cis[order][:_CHAIN_WIDTH].tolist():
                if left[0] <= 0:
                    return False
                hot = [int(x) for x in c[ci][after[ci] >= m - _EPS]]
                self._move(f, ci)
                if all(self.util[x] < m - _EPS
                       or self._relieve(x, m, depth - 1, chain | {f}, left, movable)
                       for x in hot):
                    return True
                self._rollback(mark)
        return False

    def _kick(self, hot: list[int], m: float, left: list[int], movable: set[int] | None) -> bool:
        """A compound move (module docstring, step 3): a flow on a link at ``m`` moves to a
        candidate even if that pushes links above ``m``, then :meth:`_settle` re-places flows
        off the links above ``m``. Kept when no link ends above ``m`` and fewer are at it; else
        rolled back. Candidates in order, flows largest first; ``left`` bounds the work."""
        at_m = int((self.util >= m - _EPS).sum())
        for lid in hot:
            on = sorted((f for f in self.flows_on.get(lid, ()) if movable is None or f in movable),
                        key=lambda i: (-self.rate_bps[i], i))
            for f in on:
                cur = self.current(f)
                c = self.cands[f]
                for ci in np.flatnonzero(~(c == lid).any(axis=1)).tolist():
                    if ci == cur:
                        continue
                    if left[0] <= 0:
                        return False
                    left[0] -= 1
                    mark = len(self._journal)
                    self._move(f, ci)
                    if (self._settle(m, left, movable, f)
                            and int((self.util >= m - _EPS).sum()) < at_m):
                        return True
                    self._rollback(mark)
        return False

    def _settle(self, m: float, left: list[int], movable: set[int] | None, fixed: int) -> bool:
        """Move flows (not ``fixed``) off the link most above ``m``, each to the candidate that
        avoids it with the lowest bottleneck, choosing the flow that leaves the smaller of its
        new bottleneck and the link's own utilisation, as long as that bottleneck stays within
        ``m``;
        True when no link is above ``m`` (at most ``KICK_STEPS`` moves)."""
        for _ in range(KICK_STEPS):
            over = np.flatnonzero(self.util > m + _EPS)
            if not len(over):
                return True
            x = int(over[np.argmax(self.util[over])])
            best: tuple[float, int, int] | None = None
            for g in sorted(self.flows_on.get(x, ())):
                if g == fixed or (movable is not None and g not in movable):
                    continue
                cur = self.current(g)
                c = self.cands[g]
                left[0] -= c.shape[0]
                self.evaluations += c.shape[0]
                self.remove(g)
                after = (self.util[c] + self.rate_bps[g] * self.inv_cap[c]).max(axis=1)
                self.place(g, cur)
                after[(c == x).any(axis=1)] = np.inf
                ci = int(np.argmin(after))
                # the larger of its new bottleneck and what it leaves on x: smallest first
                peak = max(float(after[ci]),
                           float(self.util[x] - self.rate_bps[g] * self.inv_cap[x]))
                if after[ci] <= m + _EPS and (best is None or peak < best[0]):
                    best = (peak, g, ci)
            if best is None or left[0] <= 0:
                return False
            self._move(best[1], best[2])
        return not (self.util > m + _EPS).any()

    def result(self, lower: float) -> LoadPinning:
        links = self.index.links
        by_name = self.index.fabric_memo("links-by-name", lambda: _name_order(links))
        assert isinstance(by_name, np.ndarray)
        nz = by_name[self.load_bps[by_name] > 0]
        loads = dict(zip(map(links.__getitem__, nz.tolist()), self.load_bps[nz].tolist(),
                         strict=True))
        placement = self.placement()
        return LoadPinning(placement.paths(), loads, self.max_utilisation(), lower, placement)

    def placement(self) -> Placement:
        """Every (placed) flow as a :class:`Placement` on this state's index and base load."""
        ids, starts = self.link_rows()
        return Placement(self.index, tuple(self.flows), self.as_arrays()[0].copy(), ids, starts,
                         self.base_bps.copy())


def host_table(index: PathIndex) -> tuple[dict[str, int], list[str], np.ndarray, np.ndarray]:
    """Per fabric (memoised): host name → number, and per host number its leaf's name and the
    ids of its access link up (host → leaf) and down (leaf → host)."""
    def build() -> tuple[dict[str, int], list[str], np.ndarray, np.ndarray]:
        hosts = index.fabric.hosts
        num = {h.name: i for i, h in enumerate(hosts)}
        up = np.asarray([index.link_id[(h.name, h.leaf)] for h in hosts], dtype=np.int64)
        return num, [h.leaf for h in hosts], up, up ^ 1

    return cast(tuple[dict[str, int], list[str], np.ndarray, np.ndarray],
                index.fabric_memo("host-table", build))


def host_of_access(index: PathIndex) -> np.ndarray:
    """Per fabric (memoised): directed link id → number of the host (:func:`host_table`) whose
    access link up (host → leaf) it is, else -1; int64, shape (n_directed_links,)."""
    def build() -> np.ndarray:
        out = np.full(len(index.links), -1, dtype=np.int64)
        up = host_table(index)[2]
        out[up] = np.arange(len(up))
        return out

    return cast(np.ndarray, index.fabric_memo("host-of-access", build))


def _batches(flows: list[int], leaves: list[tuple[str, str]], size: int) -> list[list[int]]:
    """``flows`` cut into batches of at most ``size``, interleaved by source leaf (the first
    flow of every source leaf, then the second of every one, ...), so that a batch holds flows
    of different source leaves whenever there are that many."""
    seen: dict[str, int] = {}
    turn = []
    for a, _ in leaves:
        turn.append(seen.get(a, 0))
        seen[a] = turn[-1] + 1
    order = sorted(range(len(flows)), key=lambda k: (turn[k], k))
    ordered = [flows[k] for k in order]
    return [ordered[i:i + size] for i in range(0, len(ordered), size)]


def _first_conflict(rows: np.ndarray) -> int:
    """The first row of ``rows`` (link ids, -1 padding, shape (B, L)) sharing a link with an
    earlier row; B when none does."""
    n, width = rows.shape
    flat = rows.ravel()
    ok = flat >= 0
    key = flat[ok] * n + np.repeat(np.arange(n, dtype=np.int64), width)[ok]
    key.sort()
    link = key // n
    again = link[1:] == link[:-1]
    return int((key[1:][again] % n).min()) if again.any() else n


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return a is not None and b is not None and np.array_equal(a, b)


def _name_order(links: list[DirectedLink]) -> np.ndarray:
    """Directed link ids sorted by (tail name, head name)."""
    tails = np.asarray([u for u, _ in links])
    heads = np.asarray([v for _, v in links])
    return np.lexsort((heads, tails)).astype(np.int64)


def base_load_array(index: PathIndex, base_load_bps: Mapping[DirectedLink, float] | None) -> np.ndarray:
    """Directed-link loads as an array over ``index``'s link ids. Raises ValueError for a link
    the fabric does not have or a negative load."""
    arr = np.zeros(len(index.links))
    for uv, v in (base_load_bps or {}).items():
        lid = index.link_id.get(tuple(uv))  # type: ignore[arg-type]
        if lid is None:
            raise ValueError(f"base load on {uv[0]}->{uv[1]}: not a link of the fabric")
        if v < 0:
            raise ValueError(f"base load on {uv[0]}->{uv[1]} is negative ({v})")
        arr[lid] += v
    return arr


def pin_by_load(
    fabric: Fabric,
    demands: Mapping[FlowDemand, float],
    down_links: Iterable[frozenset[str]] = frozenset(),
    *,
    base_load_bps: Mapping[DirectedLink, float] | None = None,
    index: PathIndex | None = None,
    search_budget: int = DEFAULT_SEARCH_BUDGET,
) -> LoadPinning:
    """Pin every demand on one shortest valley-free path, minimising the maximum utilisation.

    Parameters
    ----------
    fabric : Fabric
        The fabric.
    demands : mapping of FlowDemand to float
        Flow → demand in bits/s (> 0); the order of the mapping is the tie-break order.
    down_links : iterable of frozenset of str, optional
        Links that are down; ignored when ``index`` is given (it has its own).
    base_load_bps : mapping of (str, str) to float, optional
        Load already on directed links (background), bits/s.
    index : PathIndex, optional
        A prebuilt index of this fabric state (reuses its cached cones and leaf pairs).
    search_budget : int, optional
        Most candidate evaluations the local search may spend.

    Returns
    -------
    LoadPinning

    Raises
    ------
    ValueError
        A demand is repeated, has a non-positive rate, names an unknown host or has no path;
        a base load names an unknown link.

    Notes
    -----
    Deterministic. Cost: O(Σ_f |P_f| · hops) for the greedy (vectorised), bounded local search.

    Examples
    --------
    >>> from controller.model import build_leaf_spine
    >>> f = build_leaf_spine("ls", 2, 2, 2, 10**9, 10**9, 1.0, 1.0)
    >>> ds = {FlowDemand("r", 0, "h1", "h3"): 6e8, FlowDemand("r", 1, "h2", "h4"): 6e8}
    >>> p = pin_by_load(f, ds)
    >>> round(p.max_utilisation, 2), p.paths[FlowDemand("r", 1, "h2", "h4")][2]
    (0.6, 'spine2')
    """
    idx = index if index is not None else PathIndex(fabric, down_links)
    state = PinState(idx, base_load_array(idx, base_load_bps))
    if state.tables is None:
        leaf_of = {h.name: h.leaf for h in fabric.hosts}
        idx.prefetch((leaf_of[d.src], leaf_of[d.dst]) for d in demands
                     if d.src in leaf_of and d.dst in leaf_of)
    state.add_many(demands.items())
    rest = colour_first(state)
    state.greedy(rest)
    lower = load_lower_bound(state)
    state.local_search(lower, search_budget, kick=True)
    if state.tables is not None and len(state.flows) >= BATCH_FLOWS:
        state.tables.warm()  # so a repair derives its failed state's tables (ClosTables.warm)
    return state.result(lower)


def colour_first(state: PinState, min_class: int = COLOUR_MIN_CLASS) -> list[int]:
    """Place flows by edge colouring before the greedy (module docstring, step 0); returns the
    positions still unplaced, in order.

    On a mirrored Clos (:class:`ClosTables`) the equal-demand classes are coloured in turn,
    largest total demand first, each equitably on port columns and only over the links the
    classes before it left free (so a 256-rank all-to-all goes where the rings are not);
    sub-flows of one flow (``FlowDemand.subflow``) are spread over different ports where they
    can be. Classes of fewer than ``min_class`` flows (but the largest) are left to the
    greedy. Elsewhere the
    colouring runs on the candidates and only when every demand is equal.
    """
    todo = [i for i, c in enumerate(state.choice) if c == -1]
    if not todo:
        return todo
    rates = np.asarray(state.rate_bps, dtype=np.float64)[todo]
    t = state.tables
    if t is None:
        if len(np.unique(rates)) != 1 or len(todo) != len(state.flows):
            return todo
        rows = colour_levels(state.index, list(state.cands))
        state.place_many((i, ci) for i, ci in enumerate(rows) if ci >= 0)
        return [i for i, ci in enumerate(rows) if ci < 0]
    values, inverse = np.unique(rates, return_inverse=True)
    inverse = inverse.ravel()
    total = np.bincount(inverse, weights=rates)
    done: set[int] = set()
    todo_arr = np.asarray(todo, dtype=np.int64)
    for n, k in enumerate(np.argsort(-total, kind="stable").tolist()):
        flows = todo_arr[inverse == k]
        if n and len(flows) < min_class:
            continue
        used = state.load_bps > state.base_bps + _EPS * state.index.capacity_bps
        u, v, h = state.ends(flows)
        key = np.asarray([state.flows[i].subflow for i in flows.tolist()], dtype=np.int64)
        seq = colour_clos(t, u, v, h, key, blocked=used if done else None)
        for r in np.unique(h).tolist():
            sel = np.flatnonzero((h == r) & ((seq[:, 0] >= 0) | (h == 0)))
            if not len(sel):
                continue
            walked = (t.walk(u[sel], v[sel], seq[sel, :r]) if r > 0
                      else np.empty((len(sel), 0), dtype=np.int64))
            state.place_rows(flows[sel], walked)
            done.update(flows[sel].tolist())
    return [i for i in todo if i not in done]


__all__ = ["LoadPinning", "PinState", "base_load_array", "colour_first", "host_of_access",
           "host_table",
           "load_lower_bound", "pin_by_load"]
