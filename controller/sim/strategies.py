"""The comparison strategies at 65,536 flows: ECMP, static pinning and per-packet spraying, by port
columns (:class:`controller.te.clos.ClosTables`) instead of per-flow candidate lists.

* ECMP: each flow on one of its candidates drawn uniformly (``numpy.random.default_rng(seed)``),
  as :func:`controller.sim.compare.ecmp_paths` models ideal hashing;
* static: candidate (destination host index mod candidates), as
  :func:`controller.sim.compare.static_paths`;
* spraying: every packet hashed anew at every hop over the switch's equal-cost next hops towards
  the destination ("random packet spraying", Dixit et al., INFOCOM 2013, §III), so a flow's
  bytes split evenly over the next hops at each switch; in the fluid model a flow is a
  fractional load on every link it may take. It is the comparison row "without reordering
  limits": what the fabric gives when nothing is pinned and nothing collides.

The candidates, and their order, are those of :class:`controller.te.pathindex.PathIndex`, so on a
fabric that is not a mirrored Clos the functions fall back to :mod:`controller.sim.compare`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from controller.sim.compare import LinkPaths, ecmp_paths, static_paths
from controller.te.clos import CHUNK_FLOWS, ClosTables, heights_and_counts, pick_alive
from controller.te.collectives import FlowDemand
from controller.te.hosts import host_table
from controller.te.pathindex import PathIndex
from controller.te.patterns import Group


class _Ends:
    """Per flow: access link ids, leaf switch numbers, meeting height and candidate count."""

    def __init__(self, index: PathIndex, tables: ClosTables, flows: Sequence[FlowDemand]):
        num, leaf, up_id, down_id = host_table(index)
        try:
            src = np.fromiter((num[f.src] for f in flows), dtype=np.int64, count=len(flows))
            dst = np.fromiter((num[f.dst] for f in flows), dtype=np.int64, count=len(flows))
        except KeyError as exc:
            raise ValueError(f"{exc.args[0]!r} is not a host of {index.fabric.name!r}") from None
        self.up, self.down = up_id[src], down_id[dst]
        dead = np.flatnonzero(~(index.is_up[self.up] & index.is_up[self.down]))
        if len(dead):
            raise ValueError(f"flow {flows[int(dead[0])].label}: no path over the links that "
                             "are up")
        self.u = tables.leaf_ids([leaf[i] for i in src.tolist()])
        self.v = tables.leaf_ids([leaf[i] for i in dst.tolist()])
        self.h, self.n = heights_and_counts(tables, self.u, self.v)
        bad = np.flatnonzero(self.h < 0)
        if len(bad):
            f = flows[int(bad[0])]
            raise ValueError(f"flow {f.label}: no path over the links that are up")


class ClosRouter:
    """ECMP, static and spraying for one set of flows on one fabric state (module docstring),
    with the per-flow work (access links, heights, candidate counts) done once.

    Raises
    ------
    ValueError
        A flow has no path, or the fabric is not a mirrored Clos.
    """

    def __init__(self, index: PathIndex, flows: Sequence[FlowDemand]):
        tables = ClosTables.of(index)
        if tables is None:
            raise ValueError(f"{index.fabric.name!r} is not a mirrored Clos fabric")
        self.index, self.tables, self.flows = index, tables, list(flows)
        self.e = _Ends(index, tables, self.flows)
        self.full = self.e.n == tables.width ** np.maximum(self.e.h, 0)

    def rows(self, rank: np.ndarray) -> LinkPaths:
        """Each flow on its ``rank``-th candidate (0 ≤ rank < its count), as link ids with
        access links."""
        t, e, w = self.tables, self.e, self.tables.width
        seq = np.full((len(self.flows), max(t.max_height, 1)), -1, dtype=np.int64)
        for hh in range(1, t.max_height + 1):  # every candidate alive: the rank is the code
            sel = np.flatnonzero(self.full & (e.h == hh))
            code = rank[sel].copy()
            for lvl in range(hh - 1, -1, -1):
                seq[sel, lvl] = code % w
                code //= w
        part = np.flatnonzero(~self.full & (e.h > 0))
        if len(part):
            got = pick_alive(t, e.u[part], e.v[part], e.h[part], rank[part])
            seq[part, :got.shape[1]] = got
        out: LinkPaths = {}
        for hh in range(0, t.max_height + 1):
            sel = np.flatnonzero(e.h == hh)
            if not len(sel):
                continue
            inner = (t.walk(e.u[sel], e.v[sel], seq[sel, :hh]) if hh
                     else np.empty((len(sel), 0), dtype=np.int64))
            rows = np.hstack((e.up[sel, None], inner, e.down[sel, None]))
            out.update(zip([self.flows[i] for i in sel.tolist()], rows, strict=True))
        return out

    def ecmp(self, seed: int) -> LinkPaths:
        rng = np.random.default_rng(seed)
        return self.rows(np.floor(rng.random(len(self.e.n)) * self.e.n).astype(np.int64))

    def static(self) -> LinkPaths:
        fab = self.index.fabric
        dst = np.asarray([fab.host_by_name[f.dst].index for f in self.flows], dtype=np.int64)
        return self.rows(dst % np.maximum(self.e.n, 1))

    def spray(self, flows: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """:func:`spray_links` of the flows at positions ``flows`` (all by default)."""
        t, e = self.tables, self.e
        sel_all = np.arange(len(self.flows)) if flows is None else np.asarray(flows, np.int64)
        n_links = len(self.index.links)
        load = np.bincount(e.up[sel_all], minlength=n_links).astype(np.float64)
        load += np.bincount(e.down[sel_all], minlength=n_links)
        w = t.width
        for hh in range(1, t.max_height + 1):
            at = sel_all[e.h[sel_all] == hh]
            # every candidate alive: the split depends on the leaf alone, so count per leaf
            full = at[self.full[at]]
            for leaf_of, flip in ((e.u, 0), (e.v, 1)):
                if not len(full):
                    break
                leaves, cnt = np.unique(leaf_of[full], return_counts=True)
                mass = cnt.astype(np.float64)[:, None]
                cur = leaves[:, None]
                for _ in range(hh):
                    fl = cur.ravel()
                    m = np.repeat(mass.ravel() / w, w).reshape(-1, w)
                    links = t.up_link[fl] ^ flip
                    load += np.bincount(links.ravel(), weights=m.ravel(), minlength=n_links)
                    cur = t.up_node[fl].reshape(len(leaves), -1)
                    mass = m.reshape(len(leaves), -1)
            part = at[~self.full[at]]
            if len(part):
                load += _spray_partial(t, e.u[part], e.v[part], hh, n_links)
        ids = np.flatnonzero(load > 0)
        return ids, load[ids]


def _spray_partial(tables: ClosTables, u: np.ndarray, v: np.ndarray, hh: int,
                   n_links: int) -> np.ndarray:
    """Spray load of flows some of whose candidates are dead (per hop, the general way)."""
    load = np.zeros(n_links)
    for lo in range(0, len(u), CHUNK_FLOWS):
        su, sv = u[lo:lo + CHUNK_FLOWS], v[lo:lo + CHUNK_FLOWS]
        mass = np.ones(len(su))[:, None]  # (flows, sequences so far)
        cu, cv = su[:, None], sv[:, None]
        for lvl in range(hh):
            fu, fv = cu.ravel(), cv.ravel()
            ok = tables.allowed_next(np.where(fu >= 0, fu, 0), np.where(fv >= 0, fv, 0),
                                     np.full(len(fu), hh - lvl)) & (fu >= 0)[:, None]
            share = ok / np.maximum(ok.sum(axis=1, keepdims=True), 1)
            m = mass.ravel()[:, None] * share  # (flows·seqs, W)
            take = m > 0
            up = tables.up_link[np.maximum(fu, 0)]
            dn = tables.up_link[np.maximum(fv, 0)] ^ 1
            load += np.bincount(up[take], weights=m[take], minlength=n_links)
            load += np.bincount(dn[take], weights=m[take], minlength=n_links)
            cu = np.where(ok, tables.up_node[np.maximum(fu, 0)], -1).reshape(len(su), -1)
            cv = np.where(ok, tables.up_node[np.maximum(fv, 0)], -1).reshape(len(su), -1)
            mass = m.reshape(len(su), -1)
    return load


def ecmp_rows(index: PathIndex, flows: Sequence[FlowDemand], seed: int) -> LinkPaths:
    """ECMP (ideal hashing) for one seed: a uniformly drawn candidate per flow (module
    docstring); the model of :func:`controller.sim.compare.ecmp_paths`, drawn in one vector
    (another draw than it for the same seed). Raises ValueError (no path)."""
    if ClosTables.of(index) is None:
        return ecmp_paths(index, flows, seed)
    return ClosRouter(index, flows).ecmp(seed)


def static_rows(index: PathIndex, flows: Sequence[FlowDemand]) -> LinkPaths:
    """Destination-modulo static pinning (:func:`controller.sim.compare.static_paths`), by
    port columns; the same paths. Raises ValueError (no path)."""
    if ClosTables.of(index) is None:
        return static_paths(index, flows)
    return ClosRouter(index, flows).static()


def spray_links(index: PathIndex, flows: Sequence[FlowDemand]) -> tuple[np.ndarray, np.ndarray]:
    """The fractional load per unit of rate that spraying ``flows`` puts on every link.

    At every switch a flow's bytes split evenly over its next hops towards the destination (the
    columns that can still meet at its height, :meth:`ClosTables.allowed_next`), level by
    level; the way down mirrors the way up. On an intact Clos this is the even split over all
    candidates; with a dead link it is what switches do (each splits over the next hops it
    has), not the optimal split.

    Returns
    -------
    (numpy.ndarray of int64, numpy.ndarray of float64)
        Link ids and how many units of a flow's rate each carries, summed over ``flows``
        (access links included: 1 per flow). Raises ValueError (no path, not a mirrored Clos).
    """
    return ClosRouter(index, flows).spray()


def spray_group_links(index: PathIndex) -> Callable[[Group], tuple[np.ndarray, np.ndarray]]:
    """``group_links`` for :func:`controller.sim.fluid.simulate` under spraying."""
    return lambda g: spray_links(index, g.flows)


def hop_count(index: PathIndex, flows: Sequence[FlowDemand]) -> np.ndarray:
    """Links per flow path (access links included), by height: 2 + 2h. Shape (F,)."""
    tables = ClosTables.of(index)
    if tables is None:
        return np.asarray([index.candidates(f.src, f.dst).shape[1] for f in flows])
    return 2 + 2 * _Ends(index, tables, flows).h


__all__ = ["ecmp_rows", "hop_count", "spray_group_links", "spray_links", "static_rows"]
