"""The flows of a placement: who they are, their demands, hosts, access links and candidates
(pure; no I/O).

:class:`FlowTable` numbers flows by position in the order they were added and keeps, per flow,
its demand (bits/s), its access link ids, its (source, destination) leaves and its candidate
paths — rows of fabric link ids between the two leaves (every shortest valley-free path,
:class:`~controller.te.pathindex.PathIndex`). Where each flow is and the load that puts on the
links is :class:`controller.te.loadstate.LoadState`, which extends it.

Candidates are built lazily: a flow placed by a colouring holds only its chosen link ids; its
candidate array is built when the greedy or the local search first needs it, so planning 65,536
flows on a k = 64 fat-tree never holds 65,536 candidate arrays. From ``BATCH_FLOWS`` flows on, a
mirrored Clos counts candidates by port columns (:class:`~controller.te.clos.ClosTables`) without
building them.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator, Sequence
from operator import attrgetter

import numpy as np

from controller.te.clos import ClosTables, heights_and_counts
from controller.te.collectives import FlowDemand
from controller.te.hosts import host_of_access, host_table
from controller.te.pathindex import PathIndex

BATCH_FLOWS = 256
"""From this many flows on, :meth:`FlowTable.add_many` counts candidates by port columns in one
vectorised pass (:class:`ClosTables`) instead of building each flow's candidates, and the greedy
chooses over port tables (:func:`controller.te.greedy.greedy`)."""
_SRC, _DST = attrgetter("src"), attrgetter("dst")


class _LazyCands:
    """``state.cands[i]``: flow i's fabric candidates (n_cand × hops link ids), built on first use
    from the index (which caches them per leaf pair). Holds its state weakly (no reference
    cycle: a state is freed by reference counting, never left to the garbage collector)."""

    __slots__ = ("_got", "_state")

    def __init__(self, state: FlowTable):
        self._state = weakref.ref(state)
        self._got: list[np.ndarray | None] = []

    def __len__(self) -> int:
        return len(self._got)

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self._got)))

    def __getitem__(self, i: int) -> np.ndarray:
        got = self._got[i]
        if got is None:
            state = self._state()
            assert state is not None
            a, b = state.leaves[i]
            got = self._got[i] = state.index.leaf_candidates(a, b)
        return got

    def extend(self, cs: Iterable[np.ndarray | None]) -> None:
        self._got.extend(cs)


class FlowTable:
    """The flows of one placement over one :class:`PathIndex`, by position (only grows).

    Attributes
    ----------
    index : PathIndex
        Candidates and capacities of the fabric state.
    flows : list of FlowDemand
        The flows, in the order they were added.
    rate_bps : list of float
        Demand of every flow, bits/s.
    cands : sequence of numpy.ndarray
        ``cands[i]``: flow i's fabric candidates, (n_cand × hops) link ids, built on first use.
    n_cands : list of int
        Number of candidates of every flow (known without building them).
    clos_ends : list of (int, numpy.ndarray, numpy.ndarray, numpy.ndarray)
        Per batch added on a mirrored Clos: (first position, source leaf, destination leaf,
        meeting height as switch numbers of :attr:`tables`), read by :meth:`ends`.
    """

    def __init__(self, index: PathIndex):
        self.index = index
        self.flows: list[FlowDemand] = []
        self._pos: dict[FlowDemand, int] = {}
        self.rate_bps: list[float] = []
        self.cands = _LazyCands(self)
        self.n_cands: list[int] = []
        self._leaves: list[tuple[str, str]] = []
        self._hosts: list[tuple[np.ndarray, np.ndarray]] = []  # (src, dst) host numbers, per add
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

    def access_of(self, i: int) -> tuple[int, int]:
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
        self._added(len(demands))
        return list(range(first, first + len(demands)))

    def _added(self, n: int) -> None:
        """``n`` flows were just added (a subclass grows its per-flow lists)."""

    def _no_path(self, demand: FlowDemand) -> None:
        raise ValueError(
            f"flow {demand.label}: no valley-free path from {demand.src} to {demand.dst} over "
            f"the links that are up ({len(self.index.down)} down)"
        )


__all__ = ["BATCH_FLOWS", "FlowTable"]
