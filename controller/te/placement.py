"""Pinned flows as one immutable value: who goes where, in link ids, on which fabric state.

A :class:`Placement` is what a running controller keeps between events: the flows, their demands,
each flow's path as directed link ids of one :class:`~controller.te.pathindex.PathIndex` (stored as
one concatenated array with offsets, a CSR row per flow) and the background load. It is never
mutated: :meth:`Placement.replace` returns a new value sharing the index, so a worker thread can
re-optimise one placement while the event loop repairs another (:mod:`controller.te.recovery`).

Keeping link ids instead of node names is what makes a repair at 65,536 flows cheap: finding the
flows that cross a dead link is one boolean gather over the concatenated ids, and the load of the
flows that stay is one ``bincount``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from controller.te.collectives import FlowDemand
from controller.te.pathindex import DirectedLink, Path, PathIndex


@dataclass(frozen=True, eq=False)
class Placement:
    """Pinned flows on one fabric state (read-only arrays; see the module docstring).

    Attributes
    ----------
    index : PathIndex
        The fabric state the paths were placed on (link numbering, capacities, down links).
    flows : tuple of FlowDemand
        Every pinned flow (sub-flows each on their own), in planning order.
    rate_bps : numpy.ndarray of float64, shape (F,)
        Demand of each flow, bits/s.
    ids : numpy.ndarray of int64, shape (Σ hops,)
        Directed link ids of every path (access links included), flow after flow.
    starts : numpy.ndarray of int64, shape (F + 1,)
        Flow j's path is ``ids[starts[j]:starts[j + 1]]``.
    base_bps : numpy.ndarray of float64, shape (n_directed_links,)
        Load not pinned by us (background), bits/s.
    """

    index: PathIndex
    flows: tuple[FlowDemand, ...]
    rate_bps: np.ndarray
    ids: np.ndarray
    starts: np.ndarray
    base_bps: np.ndarray = field(repr=False)

    def __post_init__(self) -> None:
        for arr in (self.rate_bps, self.ids, self.starts, self.base_bps):
            arr.setflags(write=False)
        if len(self.starts) != len(self.flows) + 1 or len(self.rate_bps) != len(self.flows):
            raise ValueError("a placement needs one rate and one path per flow")
        if "owner" not in self.__dict__:
            _ = self.owner  # computed now, so the first repair does not pay for it

    # -- building --------------------------------------------------------------------------------
    @staticmethod
    def from_paths(index: PathIndex, paths: Mapping[FlowDemand, Sequence[str]],
                   rate_bps: Mapping[FlowDemand, float],
                   base_load_bps: np.ndarray | None = None) -> Placement:
        """The placement of node ``paths`` (host … host) with their demands (bits/s).

        Raises
        ------
        ValueError
            A flow of ``paths`` has no demand.
        KeyError
            A hop of a path is not a link of the fabric.
        """
        flows = tuple(paths)
        try:
            rates = np.fromiter((rate_bps[d] for d in flows), dtype=np.float64, count=len(flows))
        except KeyError as exc:
            raise ValueError(f"flow {exc.args[0].label}: no demand given") from None
        ids, starts = index.link_ids_flat([paths[d] for d in flows])
        base = np.zeros(len(index.links)) if base_load_bps is None else base_load_bps
        return Placement(index, flows, rates, ids, starts, np.asarray(base, dtype=np.float64))

    @staticmethod
    def from_rows(index: PathIndex, flows: Sequence[FlowDemand], rate_bps: Sequence[float],
                  rows: Sequence[np.ndarray], base_bps: np.ndarray) -> Placement:
        """From per-flow link-id arrays (access links included)."""
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        ids = np.concatenate(rows).astype(np.int64) if len(rows) else np.empty(0, np.int64)
        starts = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        return Placement(index, tuple(flows), np.asarray(rate_bps, dtype=np.float64), ids,
                         starts, np.asarray(base_bps, dtype=np.float64))

    # -- reading ---------------------------------------------------------------------------------
    @cached_property
    def pos(self) -> dict[FlowDemand, int]:
        """Flow → its position."""
        return {d: i for i, d in enumerate(self.flows)}

    @cached_property
    def owner(self) -> np.ndarray:
        """Position of the flow each entry of :attr:`ids` belongs to, shape (Σ hops,)."""
        return np.repeat(np.arange(len(self.flows), dtype=np.int64), np.diff(self.starts))

    def links(self, i: int) -> np.ndarray:
        """Directed link ids of flow ``i``'s path."""
        return self.ids[self.starts[i]:self.starts[i + 1]]

    def path(self, i: int) -> Path:
        """Node path of flow ``i``."""
        return self.index.path_of(self.links(i))

    def paths(self, flows: Iterable[int] | None = None) -> dict[FlowDemand, Path]:
        """Flow → node path, for ``flows`` (positions; all by default), in that order
        (:meth:`path_list`)."""
        sel = np.arange(len(self.flows)) if flows is None else np.asarray(list(flows), np.int64)
        return dict(zip(map(self.flows.__getitem__, sel.tolist()), self.path_list(sel),
                        strict=True))

    def path_list(self, flows: np.ndarray) -> list[Path]:
        """Node paths of ``flows`` (positions, int array), in that order
        (:func:`csr_paths`)."""
        return csr_paths(self.index, self.ids, self.starts, flows)

    @cached_property
    def pinned_bps(self) -> np.ndarray:
        """Pinned demand per directed link (background excluded), bits/s, shape
        (n_directed_links,); read-only. :meth:`replace` carries it over, updated by the
        moved flows only."""
        out: np.ndarray = np.bincount(self.ids, weights=self.rate_bps[self.owner],
                                      minlength=len(self.index.links))
        out.setflags(write=False)
        return out

    def load_bps(self) -> np.ndarray:
        """Background + pinned demand per directed link, bits/s, shape (n_directed_links,)."""
        out: np.ndarray = self.base_bps + self.pinned_bps
        return out

    def _successor(self, idx: PathIndex, ids: np.ndarray, starts: np.ndarray, base: np.ndarray,
                   moved: np.ndarray, new_ids: np.ndarray, new_starts: np.ndarray) -> Placement:
        """The placement with ``ids``/``starts``, its caches seeded from this one's where they
        carry over: ``owner`` when no path changed length (same ``starts``), ``pinned_bps``
        updated by the ``moved`` flows' old rows and new rows (``new_ids`` in CSR form with
        offsets ``new_starts``): O(moved hops), not O(Σ hops)."""
        new = object.__new__(Placement)
        for name, value in (("index", idx), ("flows", self.flows), ("rate_bps", self.rate_bps),
                            ("ids", ids), ("starts", starts), ("base_bps", base)):
            object.__setattr__(new, name, value)
        if starts is self.starts and "owner" in self.__dict__:
            new.__dict__["owner"] = self.owner
        if "pinned_bps" in self.__dict__ and len(moved):
            n = len(self.index.links)
            old_len = np.diff(self.starts)[moved]
            old_ids = self.ids[concat_ranges(self.starts[moved], old_len)]
            pinned = (self.pinned_bps
                      - np.bincount(old_ids, weights=np.repeat(self.rate_bps[moved], old_len),
                                    minlength=n)
                      + np.bincount(new_ids, weights=np.repeat(self.rate_bps[moved],
                                                               np.diff(new_starts)),
                                    minlength=n))
            np.maximum(pinned, 0.0, out=pinned)  # rounding of the subtraction
            pinned.setflags(write=False)
            new.__dict__["pinned_bps"] = pinned
        elif "pinned_bps" in self.__dict__:
            new.__dict__["pinned_bps"] = self.pinned_bps
        new.__post_init__()
        return new

    def utilisation(self) -> np.ndarray:
        """:meth:`load_bps` / capacity per directed link (dead links included)."""
        return self.load_bps() / self.index.capacity_bps

    def max_utilisation(self) -> float:
        """The largest utilisation over links that are up."""
        u = self.utilisation()[self.index.is_up]
        return float(u.max(initial=0.0))

    def link_load(self) -> dict[DirectedLink, float]:
        """Directed link → load, bits/s, for links with load > 0."""
        load = self.load_bps()
        nz = np.flatnonzero(load > 0)
        return {self.index.links[i]: float(load[i]) for i in nz.tolist()}

    # -- changing --------------------------------------------------------------------------------
    def replace(self, rows: Mapping[int, np.ndarray], index: PathIndex | None = None,
                base_bps: np.ndarray | None = None) -> Placement:
        """A new placement with flow i's path replaced by ``rows[i]`` (link ids, access links
        included), on ``index`` (default: this one's) with ``base_bps`` (default: this one's).
        O(Σ hops) array work plus O(len(rows)) (:meth:`replace_many`)."""
        moved = np.fromiter(rows, dtype=np.int64, count=len(rows))
        lengths = np.fromiter((len(rows[i]) for i in moved.tolist()), dtype=np.int64,
                              count=len(moved))
        new_ids = (np.concatenate([np.asarray(rows[i], np.int64) for i in moved.tolist()])
                   if len(moved) else np.empty(0, np.int64))
        return self.replace_many(moved, new_ids, np.concatenate(([0], np.cumsum(lengths))),
                                 index, base_bps)

    def replace_many(self, moved: np.ndarray, new_ids: np.ndarray, new_starts: np.ndarray,
                     index: PathIndex | None = None,
                     base_bps: np.ndarray | None = None) -> Placement:
        """:meth:`replace` with the new paths in CSR form: flow ``moved[j]`` (distinct
        positions) takes ``new_ids[new_starts[j]:new_starts[j + 1]]``. Array work only: one
        gather-scatter when no path changes length, else a rebuild of the concatenated ids."""
        idx = self.index if index is None else index
        base = self.base_bps if base_bps is None else base_bps
        moved = np.asarray(moved, dtype=np.int64)
        new_ids = np.asarray(new_ids, dtype=np.int64)
        new_starts = np.asarray(new_starts, dtype=np.int64)
        if not len(moved):
            return self._successor(idx, self.ids, self.starts, base, moved, new_ids, new_starts)
        old_len = np.diff(self.starts)
        new_len = np.diff(new_starts)
        if np.array_equal(new_len, old_len[moved]):  # same lengths: copy and overwrite
            ids = self.ids.copy()
            ids[concat_ranges(self.starts[moved], new_len)] = new_ids
            return self._successor(idx, ids, self.starts, base, moved, new_ids, new_starts)
        lengths = old_len.copy()
        lengths[moved] = new_len
        starts = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        ids = np.empty(int(starts[-1]), dtype=np.int64)
        keep = np.ones(len(self.flows), dtype=bool)
        keep[moved] = False
        kept = np.flatnonzero(keep)
        kept_len = old_len[kept]
        ids[concat_ranges(starts[kept], kept_len)] = self.ids[concat_ranges(self.starts[kept],
                                                                            kept_len)]
        ids[concat_ranges(starts[moved], new_len)] = new_ids
        return self._successor(idx, ids, starts, base, moved, new_ids, new_starts)


def csr_paths(index: PathIndex, ids: np.ndarray, starts: np.ndarray,
              flows: np.ndarray) -> list[Path]:
    """Node paths of ``flows`` (positions, int array) whose link ids are in CSR form (flow j:
    ``ids[starts[j]:starts[j + 1]]``), in that order, built per path length in one vectorised
    pass each (:meth:`PathIndex.paths_of_rows`)."""
    lengths = np.diff(starts)[flows]
    if len(flows) and bool((lengths == lengths[0]).all()):  # one length: one pass
        n = int(lengths[0])
        return index.paths_of_rows(ids[starts[flows][:, None] + np.arange(n)])
    out: list[Path] = [()] * len(flows)
    for n in np.unique(lengths).tolist():
        at = np.flatnonzero(lengths == n)
        rows = ids[starts[flows[at]][:, None] + np.arange(n)]
        for k, p in zip(at.tolist(), index.paths_of_rows(rows), strict=True):
            out[k] = p
    return out


def concat_ranges(first: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(first[j], first[j] + length[j])`` over j (int64)."""
    total = int(length.sum())
    if not total:
        return np.empty(0, dtype=np.int64)
    ends = np.cumsum(length)
    out: np.ndarray = (np.arange(total, dtype=np.int64) - np.repeat(ends - length, length)
                       + np.repeat(first, length))
    return out
