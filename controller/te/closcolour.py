"""Equitable edge colouring of a mirrored Clos, level by level, at 65,536 flows without paths.

The colouring of :mod:`controller.te.colouring` works on each flow's candidate paths; here the
same level-by-level idea runs on port columns (:class:`controller.te.clos.ClosTables`), so a
flow is two switch numbers and a height, never a path list. At level ℓ a flow is an edge of the
bipartite multigraph (source-side switch, destination-side switch) and its colour is the up-port
column both sides climb by (module docstring of :mod:`controller.te.clos`).

Two refinements over a proper colouring:

* **Equitable.** A switch with more flows than alive up-ports (d > c) is split into ⌈d / c⌉
  copies of at most c flows each (flows ordered by ``key`` — the sub-flow number — so the
  sub-flows of one flow land in different copies), and the copies are coloured properly. Each
  port of the switch then carries at most ⌈d / c⌉ flows: the equitable edge colouring of a
  bipartite multigraph (de Werra, "Balanced schedules", INFOR 9(3), 1971, §2). That is what
  sub-flows need: 16 sub-flows over 15 alive uplinks put 2 on one port instead of failing.
* **Euler splitting.** The bulk is coloured by recursive Euler partition (Gabow, "Using Euler
  partitions to edge color bipartite multigraphs", Int. J. Comput. Inf. Sci. 5, 1976): after
  padding to a D-regular multigraph (D a power of two ≥ the number of columns), pair the edges
  at every node, which makes the edges a union of even alternating cycles; alternate colours
  around them and recurse on each half, log₂ D times. The alternation is vectorised: the
  half-cycles are orbits of the permutation "right partner of the left partner", labelled by
  pointer jumping (O(E log E) array work per split, no Python loop over edges). Edges whose
  colour is not allowed (a dead port on the other side, a column ≥ the number of columns) are
  then inserted by the alternating-path (Kempe) algorithm of :func:`controller.te.colouring._kempe`
  with their allowed sets; what still fails is left to the greedy of :mod:`controller.te.greedy`.
"""

from __future__ import annotations

import numpy as np

from controller.te.clos import ClosTables
from controller.te.colouring import _kempe


def euler_colour(left: np.ndarray, right: np.ndarray, n_left: int, n_right: int,
                 degree: int) -> np.ndarray:
    """A proper edge colouring of a bipartite multigraph with ``degree`` colours.

    Parameters
    ----------
    left, right : numpy.ndarray of int64, shape (E,)
        End nodes of every edge, numbered 0..n_left-1 and 0..n_right-1 (sides kept apart).
    n_left, n_right : int
    degree : int
        D, a power of two at least the largest node degree.

    Returns
    -------
    numpy.ndarray of int64, shape (E,)
        Colour in 0..D-1 of every edge; no two edges at one node share a colour.

    Raises
    ------
    ValueError
        ``degree`` is not a power of two or a node has more than ``degree`` edges.
    """
    if degree < 1 or degree & (degree - 1):
        raise ValueError(f"degree must be a power of two, got {degree}")
    e = len(left)
    if e == 0:
        return np.empty(0, dtype=np.int64)
    deg_l = np.bincount(left, minlength=n_left)
    deg_r = np.bincount(right, minlength=n_right)
    if deg_l.max(initial=0) > degree or deg_r.max(initial=0) > degree:
        raise ValueError(f"a node has more than {degree} edges")
    # pad to a D-regular multigraph: equal total deficits need equal node counts
    n_l, n_r = max(n_left, n_right), max(n_left, n_right)
    def_l = np.concatenate((degree - deg_l, np.full(n_l - n_left, degree)))
    def_r = np.concatenate((degree - deg_r, np.full(n_r - n_right, degree)))
    pad_l = np.repeat(np.arange(n_l), def_l)
    pad_r = np.repeat(np.arange(n_r), def_r)
    a = np.concatenate((left, pad_l)).astype(np.int64)
    b = np.concatenate((right, pad_r)).astype(np.int64)
    n = len(a)
    ids = np.arange(n, dtype=np.int64)
    cls = np.zeros(n, dtype=np.int64)
    d = degree
    while d > 1:
        partner_l = _pairs(cls, a, ids)
        partner_r = _pairs(cls, b, ids)
        tau = partner_r[partner_l]
        lab = ids.copy()
        nxt = tau.copy()
        span = 1
        while span < n:
            got = np.minimum(lab, lab[nxt])
            if np.array_equal(got, lab):
                # every window of 2·span has its window of span's minimum, so every longer
                # one does too: each label is its cycle's minimum already
                break
            lab = got
            nxt = nxt[nxt]
            span *= 2
        bit = (lab > lab[partner_l]).astype(np.int64)
        cls = cls * 2 + bit
        d //= 2
    return cls[:e]


def _pairs(cls: np.ndarray, node: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Partner of every edge when the edges of each (class, node) are paired in id order (each
    group has an even number of edges)."""
    n_nodes, n_ids = int(node.max(initial=0)) + 1, int(ids.max(initial=0)) + 1
    if (int(cls.max(initial=0)) + 1) * n_nodes * n_ids < 2**62:  # one int64 key: 5x faster
        order = np.argsort((cls * n_nodes + node) * n_ids + ids)
    else:
        order = np.lexsort((ids, node, cls))
    out = np.empty_like(ids)
    out[order[0::2]] = order[1::2]
    out[order[1::2]] = order[0::2]
    return out


def _copies(node: np.ndarray, key: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Copy number of each edge at its node: edges of a node sorted by (key, position), cut
    into runs of ``cap[node]``."""
    n = len(node)
    order = np.lexsort((np.arange(n), key, node))
    sn = node[order]
    first = np.flatnonzero(np.r_[True, sn[1:] != sn[:-1]])
    start = np.repeat(first, np.diff(np.r_[first, n]))
    pos = np.arange(n) - start
    out = np.empty(n, dtype=np.int64)
    out[order] = pos // np.maximum(cap[sn], 1)
    if n == 0 or key.max(initial=0) == key.min(initial=0):
        return out
    # one copy per key (sub-flow number) at a node whose keys each fit its ports and need no
    # more copies than the runs: then sub-flow j of every flow is a proper colouring on its own
    # at every level (a layer, which recovery._layers re-colours alone after a repair)
    nk = int(key.max()) + 1
    pair = node * nk + key
    uniq, inv, cnt = np.unique(pair, return_inverse=True, return_counts=True)
    inv = inv.ravel()
    u_node = uniq // nk
    first_of = np.flatnonzero(np.r_[True, u_node[1:] != u_node[:-1]])
    grp = np.repeat(np.arange(len(first_of)), np.diff(np.r_[first_of, len(uniq)]))
    rank = np.arange(len(uniq)) - first_of[grp]  # key's rank among its node's keys
    n_keys = np.diff(np.r_[first_of, len(uniq)])
    biggest = np.maximum.reduceat(cnt, first_of)
    nodes = u_node[first_of]
    deg = np.bincount(node, minlength=int(node.max()) + 1)[nodes]
    c = np.maximum(cap[nodes], 1)
    fits_key = (biggest <= c) & (n_keys <= -(-deg // c))
    use = fits_key[grp][inv]
    out[use] = rank[inv][use]
    return out


def colour_clos(tables: ClosTables, u: np.ndarray, v: np.ndarray, h: np.ndarray,
                key: np.ndarray | None = None, initial: np.ndarray | None = None,
                swap_budget: int = 200_000, blocked: np.ndarray | None = None) -> np.ndarray:
    """Port columns for every flow such that each up-port carries as few flows as an equitable
    colouring allows (module docstring).

    Parameters
    ----------
    tables : ClosTables
    u, v : numpy.ndarray of int64, shape (F,)
        Source and destination leaf switch numbers.
    h : numpy.ndarray of int64, shape (F,)
        Meeting heights (:meth:`ClosTables.heights`).
    key : numpy.ndarray of int64, shape (F,), optional
        Order of flows within a switch when it is split into copies (sub-flow numbers).
    initial : numpy.ndarray of int64, shape (F, ≥ max h), optional
        Columns to keep where they are still allowed and conflict-free (a current placement:
        re-colouring from it moves only the flows the Kempe insertions and swaps must move);
        -1 for none. Without it the bulk is coloured by Euler splitting.
    swap_budget : int
        Most edges the next-level swaps (:func:`_balance_next_level`) may visit per level.
    blocked : numpy.ndarray of bool, shape (n_directed_links,), optional
        Links these flows must not use (already full with other flows): a column is allowed
        only where its up-link on the source side and its down-link on the destination side
        are free, and a switch's capacity counts its free ports only.

    Returns
    -------
    numpy.ndarray of int64, shape (F, max(1, max h))
        Columns of each flow's path, level by level; a row of -1 for a flow left uncoloured
        (and for flows with h ≤ 0, which need no colour). Where a switch has at most as many
        flows of these as alive up-ports, no up-port carries two of them, on either side.

    Notes
    -----
    After level ℓ is coloured, a switch of level ℓ+1 may receive more flows that climb further
    than it has alive up-ports (an aggregation switch that lost a core link: 16 flows, 15
    ports), although the fabric has room (flows that turn at that switch could take its place).
    :func:`_balance_next_level` then swaps the two colours of an alternating (Kempe) component
    at level ℓ — a colouring stays proper under such a swap (Schrijver 2003, §20.1) — whenever
    that lowers the next level's excess, which is what lets a k = 32 ring reach utilisation 1.0
    with one aggregation–core link down.
    """
    f = len(u)
    hmax = int(h.max(initial=0))
    seq = np.full((f, max(hmax, 1)), -1, dtype=np.int64)
    if f == 0 or hmax <= 0:
        return seq
    key = np.zeros(f, dtype=np.int64) if key is None else np.asarray(key, dtype=np.int64)
    w = tables.width
    d = 1
    while d < w:
        d *= 2
    alive = tables.up_link >= 0
    if blocked is None:
        cap_up = cap_dn = alive.sum(axis=1)
        free_up = free_dn = alive
    else:
        free_up = alive & ~blocked[np.where(alive, tables.up_link, 0)]
        free_dn = alive & ~blocked[np.where(alive, tables.up_link ^ 1, 0)]
        cap_up, cap_dn = free_up.sum(axis=1), free_dn.sum(axis=1)
    failed = h <= 0
    spread = len(np.unique(key)) > 1
    cu, cv = u.astype(np.int64).copy(), v.astype(np.int64).copy()
    for lvl in range(hmax):
        act = np.flatnonzero(~failed & (h > lvl))
        if not len(act):
            break
        allowed = tables.allowed_next(cu[act], cv[act], h[act] - lvl)
        if blocked is not None:
            allowed &= free_up[cu[act]] & free_dn[cv[act]]
        some = allowed.any(axis=1)
        failed[act[~some]] = True
        act, allowed = act[some], allowed[some]
        if not len(act):
            break
        lc = _copies(cu[act], key[act], cap_up)
        rc = _copies(cv[act], key[act], cap_dn)
        left, n_left = _compact(cu[act], lc)
        right, n_right = _compact(cv[act], rc)
        if initial is None or lvl >= initial.shape[1]:
            if spread:  # a fixed shuffle, so the copies (sub-flow j of every flow) are not
                # coloured alike and one flow's sub-flows get different ports
                perm = np.random.default_rng(lvl).permutation(len(act))
                col = np.empty(len(act), dtype=np.int64)
                col[perm] = euler_colour(left[perm], right[perm], n_left, n_right, d)
            else:
                col = euler_colour(left, right, n_left, n_right, d)
            good = col < w
        else:
            col = initial[act, lvl].copy()
            good = col >= 0
            good[good] = allowed[np.flatnonzero(good), col[good]]
            good &= _first_use(left, col, good) & _first_use(right, col, good)
        good[good] = allowed[np.flatnonzero(good), col[good]]
        if not good.all():
            col = _insert(left, right + n_left, allowed, np.where(good, col, -1))
        if lvl + 1 < hmax:
            col = _balance_next_level(tables, cu[act], cv[act], h[act] - lvl, left,
                                      right + n_left, allowed, col, (cap_up, cap_dn),
                                      swap_budget)
        ok = col >= 0
        failed[act[~ok]] = True
        act, col = act[ok], col[ok]
        seq[act, lvl] = col
        cu[act] = tables.up_node[cu[act], col]
        cv[act] = tables.up_node[cv[act], col]
    seq[failed] = -1
    return seq


def _first_use(node: np.ndarray, col: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """True for the first edge (in order) of each (node, colour) among ``ok`` edges."""
    out = np.zeros(len(node), dtype=bool)
    sel = np.flatnonzero(ok)
    if not len(sel):
        return out
    keys = node[sel] * (int(col.max(initial=0)) + 1) + col[sel]
    _, first = np.unique(keys, return_index=True)
    out[sel[first]] = True
    return out


def _balance_next_level(tables: ClosTables, cu: np.ndarray, cv: np.ndarray, left_h: np.ndarray,
                        left: np.ndarray, right: np.ndarray, allowed: np.ndarray,
                        col: np.ndarray, caps: tuple[np.ndarray, np.ndarray],
                        budget: int) -> np.ndarray:
    """Swap Kempe components of this level's colouring while that lowers the excess of the next
    level (colour_clos, Notes).

    The next level's per-port target is t = the largest ⌈flows / alive up-ports⌉ of a switch at
    this level (1 for a permutation); a next-level switch x whose flows climbing further number
    n(x) on the source side (or descending through it on the destination side) has excess
    max(0, n(x) − t · cap(x)). A swap of colours α/β along the component of an excess flow is
    applied when every edge of it allows its new colour and the total excess falls. Edges of
    ``left``/``right`` are copy numbers (the two sides numbered apart).
    """
    climb = (left_h > 1) & (col >= 0)
    if not climb.any():
        return col
    n_nodes = len(tables.up_node)
    safe = np.maximum(col, 0)
    nu = np.where(climb, tables.up_node[cu, safe], -1)
    nv = np.where(climb, tables.up_node[cv, safe], -1)
    cnt_u = np.bincount(nu[nu >= 0], minlength=n_nodes)
    cnt_v = np.bincount(nv[nv >= 0], minlength=n_nodes)
    cap_up, cap_dn = caps
    t = 1
    for side, cap in ((cu, cap_up), (cv, cap_dn)):
        nodes, deg = np.unique(side, return_counts=True)
        t = max(t, int((-(-deg // np.maximum(cap[nodes], 1))).max(initial=1)))
    lim_u, lim_v = t * cap_up, t * cap_dn
    if not ((cnt_u > lim_u).any() or (cnt_v > lim_v).any()):
        return col
    col = col.copy()
    at: dict[int, dict[int, int]] = {}
    for j, (a, b, c) in enumerate(zip(left.tolist(), right.tolist(), col.tolist(), strict=True)):
        if c >= 0:
            at.setdefault(a, {})[c] = j
            at.setdefault(b, {})[c] = j
    ends = (left, right)
    left_budget = budget

    def excess() -> int:
        return int(np.maximum(cnt_u - lim_u, 0).sum() + np.maximum(cnt_v - lim_v, 0).sum())

    cur = excess()
    hot = [j for j in np.flatnonzero(climb).tolist()
           if cnt_u[nu[j]] > lim_u[nu[j]] or cnt_v[nv[j]] > lim_v[nv[j]]]
    for g in hot:
        if cur == 0 or left_budget <= 0:
            break
        if not (cnt_u[nu[g]] > lim_u[nu[g]] or cnt_v[nv[g]] > lim_v[nv[g]]):
            continue
        alpha = int(col[g])
        best: tuple[int, int, list[int], dict[int, int]] | None = None
        for beta in np.flatnonzero(allowed[g]).tolist():
            if beta == alpha or left_budget <= 0:
                continue
            comp = _component(g, alpha, beta, at, ends, col)
            left_budget -= len(comp)
            new = {e: beta if col[e] == alpha else alpha for e in comp}
            if any(not allowed[e, c] for e, c in new.items()):
                continue
            delta_u: dict[int, int] = {}
            delta_v: dict[int, int] = {}
            for e, c in new.items():
                if left_h[e] > 1:
                    for delta, side, old_n in ((delta_u, cu, nu), (delta_v, cv, nv)):
                        delta[int(old_n[e])] = delta.get(int(old_n[e]), 0) - 1
                        x = int(tables.up_node[side[e], c])
                        delta[x] = delta.get(x, 0) + 1
            gain = 0
            for delta, cnt, lim in ((delta_u, cnt_u, lim_u), (delta_v, cnt_v, lim_v)):
                for x, dd in delta.items():
                    gain += (max(int(cnt[x]) + dd - int(lim[x]), 0)
                             - max(int(cnt[x]) - int(lim[x]), 0))
            if gain < 0 and (best is None or (gain, len(comp)) < (best[0], best[1])):
                best = (gain, len(comp), comp, new)
        if best is not None:  # the smallest component among the largest gains
            gain, _, comp, new = best
            for e in comp:  # unregister, then register with swapped colours
                for side in ends:
                    del at[int(side[e])][int(col[e])]
            for e, c in new.items():
                col[e] = c
                for side in ends:
                    at.setdefault(int(side[e]), {})[c] = e
                if left_h[e] > 1:
                    cnt_u[nu[e]] -= 1
                    cnt_v[nv[e]] -= 1
                    nu[e] = tables.up_node[cu[e], c]
                    nv[e] = tables.up_node[cv[e], c]
                    cnt_u[nu[e]] += 1
                    cnt_v[nv[e]] += 1
            cur += gain
    return col


def _component(g: int, alpha: int, beta: int, at: dict[int, dict[int, int]],
               ends: tuple[np.ndarray, np.ndarray], col: np.ndarray) -> list[int]:
    """Edges of the α/β alternating component containing edge ``g`` (which has colour α)."""
    out = [g]
    seen = {g}
    for side in (0, 1):  # walk away from g through each of its ends
        node, e = int(ends[side][g]), g
        while True:
            other = beta if col[e] == alpha else alpha
            nxt = at.get(node, {}).get(other)
            if nxt is None or nxt in seen:
                break
            seen.add(nxt)
            out.append(nxt)
            a, b = int(ends[0][nxt]), int(ends[1][nxt])
            node = b if node == a else a
            e = nxt
    return out


def _compact(node: np.ndarray, copy: np.ndarray) -> tuple[np.ndarray, int]:
    """(node, copy) pairs numbered 0..n-1."""
    keys = node * (int(copy.max(initial=0)) + 1) + copy
    uniq, inv = np.unique(keys, return_inverse=True)
    return inv.astype(np.int64).ravel(), len(uniq)


def _insert(left: np.ndarray, right: np.ndarray, allowed: np.ndarray,
            col: np.ndarray) -> np.ndarray:
    """Extend a proper partial colouring (-1: uncoloured) by Kempe insertion, each edge limited
    to its ``allowed`` columns. Returns the colours (-1 where insertion failed)."""
    memo: dict[bytes, tuple[tuple[int, ...], frozenset[int]]] = {}
    edges = []
    for lf, rt, row in zip(left.tolist(), right.tolist(), allowed, strict=True):
        k = row.tobytes()
        got = memo.get(k)
        if got is None:
            cols = tuple(np.flatnonzero(row).tolist())
            got = memo[k] = (cols, frozenset(cols))
        edges.append((lf, rt, got[0], got[1]))
    init: list[int | None] = [c if c >= 0 else None for c in col.tolist()]
    res = _kempe(edges, init)
    return np.asarray([-1 if c is None else c for c in res], dtype=np.int64)
