"""The load state of a placement in progress: where every flow is, and the load that puts on
every directed link (pure; no I/O).

:class:`LoadState` extends the flows (:class:`~controller.te.flowtable.FlowTable`: demands,
hosts, candidates) with each flow's chosen candidate and the load per directed link. It is what
the greedy (:mod:`controller.te.greedy`) and the local search (:mod:`controller.te.localsearch`)
work on, and what :mod:`controller.te.recovery` rebuilds from a
:class:`~controller.te.placement.Placement` for a repair or a re-optimisation. Placing a flow
adds its demand to its links' load with one scatter-add; the utilisation (load / capacity) is
kept beside the load.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cached_property
from typing import cast

import numpy as np

from controller.te.flowtable import BATCH_FLOWS, FlowTable
from controller.te.hosts import host_of_access
from controller.te.pathindex import Path, PathIndex
from controller.te.placement import Placement, concat_ranges, csr_paths

EPS = 1e-9
"""Utilisations within this of each other are equal (ties, "at the maximum")."""


class LoadState(FlowTable):
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
    util : numpy.ndarray of float64, shape (n_directed_links,)
        ``load_bps`` / capacity.
    rows : list of numpy.ndarray or None
        The fabric link ids (access links excluded) flow i is on; None unplaced.
    choice : list of int
        Row of ``cands[i]`` flow i is on; -1 unplaced; -2 placed by :meth:`place_rows` with its
        row not yet looked up (:meth:`current` resolves it).
    evaluations : int
        Candidate paths evaluated so far by the greedy and the local search (the work done).
    """

    def __init__(self, index: PathIndex, base_load_bps: np.ndarray | None = None):
        super().__init__(index)
        n = len(index.links)
        self.inv_cap = 1.0 / index.capacity_bps
        self.load_bps = np.zeros(n) if base_load_bps is None else base_load_bps.astype(float)
        self.base_bps = self.load_bps.copy()
        self.util = self.load_bps * self.inv_cap
        self.choice: list[int] = []  # -1: not placed, -2: placed, row not looked up
        self.rows: list[np.ndarray | None] = []  # chosen fabric link ids
        self._flows_on: dict[int, set[int]] | None = None
        self.evaluations = 0

    def _added(self, n: int) -> None:
        self.choice.extend([-1] * n)
        self.rows.extend([None] * n)

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

    def links_of(self, i: int) -> np.ndarray:
        """Directed link ids of flow ``i``'s chosen path (access links included)."""
        up, down = self.access_of(i)
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
        self.place_ranked(np.asarray([i for i, _ in pairs], dtype=np.int64),
                    [self.cands[i][ci] for i, ci in pairs], [ci for _, ci in pairs])

    def place_rows(self, flows: np.ndarray, rows: np.ndarray | Sequence[np.ndarray]) -> None:
        """Place unplaced ``flows`` on the fabric link-id ``rows`` (F × hops, one candidate of
        each), e.g. a colouring's choice, without building their candidate arrays."""
        for i in flows.tolist():
            assert self.choice[i] == -1
        self.place_ranked(np.asarray(flows, dtype=np.int64), list(rows), [-2] * len(flows))

    def place_ranked(self, flows: np.ndarray, inner: list[np.ndarray], choice: list[int]) -> None:
        """Put unplaced ``flows`` on the fabric link ids ``inner[j]``, candidate ``choice[j]`` of
        each (-2: not looked up), with one scatter-add of all their links (access links, then
        fabric links, each in the given flow order)."""
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

    @cached_property
    def fabric_inv_cap(self) -> float | None:
        """1 / the capacity every fabric (switch-to-switch) link has (1/bits/s), or None when
        they differ."""
        access = host_of_access(self.index) >= 0
        access |= access[np.arange(len(access)) ^ 1]
        ic = self.inv_cap[~access]
        return float(ic[0]) if len(ic) and bool((ic == ic[0]).all()) else None

    def max_utilisation(self) -> float:
        """The largest utilisation over every directed link (0 without links)."""
        return float(self.util.max()) if len(self.util) else 0.0

    def placement(self) -> Placement:
        """Every (placed) flow as a :class:`Placement` on this state's index and base load."""
        ids, starts = self.link_rows()
        return Placement(self.index, tuple(self.flows), self.as_arrays()[0].copy(), ids, starts,
                         self.base_bps.copy())


__all__ = ["BATCH_FLOWS", "EPS", "LoadState"]
