"""Construction of a placement: edge colouring first, then a greedy (pure; no I/O).

Both work on a :class:`~controller.te.loadstate.LoadState` and leave every flow they are given
on one candidate; :mod:`controller.te.localsearch` improves on the result.

0. :func:`colour_first`: the flows of the equal-demand class with the largest total demand are
   placed by a level-by-level bipartite edge colouring, so that no two share a fabric link where
   the fabric allows it: on a mirrored Clos by port columns without any path list
   (:mod:`controller.te.closcolour`, equitable: a switch with more of these flows than alive
   up-ports spreads them evenly, which is what sub-flows need), elsewhere over the candidates
   (:mod:`controller.te.colouring`, only when every demand is equal). The rest go to the greedy.
1. :func:`greedy`: largest demand first (then fewest candidates, then input order), each flow on
   the candidate minimising its own bottleneck utilisation after placement, ties broken by the
   smallest sum of utilisations along the candidate, then candidate order. The evaluation of all
   candidates of a flow is one vectorised gather over a (candidates × hops) link-id array — or,
   on a mirrored Clos with many flows, over the port tables (:meth:`ClosTables.chains`), in
   windows that give exactly the one-by-one result (:func:`_greedy_in_order`).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from controller.te.clos import ClosTables
from controller.te.closcolour import colour_clos
from controller.te.colouring import colour_levels
from controller.te.loadstate import BATCH_FLOWS, EPS, LoadState

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
"""Fewest larger flows chosen together by :func:`_greedy_in_order` (the one-by-one greedy's
result, window by window); a window holds twice what the last one placed, between this and
``IN_ORDER_MAX_BATCH``."""
IN_ORDER_MAX_BATCH = 1024
"""Most flows in one window of :func:`_greedy_in_order` (on the 65,536-GPU rail fabric with a
spine down, 24,473 sub-flows collide twice: windows of 16 took 1,532 choices, of 256 took 96)."""


def colour_first(state: LoadState, min_class: int = COLOUR_MIN_CLASS) -> list[int]:
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
        used = state.load_bps > state.base_bps + EPS * state.index.capacity_bps
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


def best_candidate(state: LoadState, i: int, exclude: int = -1) -> tuple[int, float]:
    """(candidate, its bottleneck utilisation if flow ``i`` were put there); ``i`` must be
    unplaced. Ties: smallest utilisation sum, then candidate order. ``exclude`` is skipped
    (returns (-1, inf) if nothing else is left)."""
    c = state.cands[i]
    state.evaluations += c.shape[0]
    up, down = state.access_of(i)
    w = state.rate_bps[i]
    edge = max(state.util[up] + w * state.inv_cap[up], state.util[down] + w * state.inv_cap[down])
    if c.shape[1] == 0:
        return (0, edge) if exclude != 0 else (-1, float("inf"))
    u = state.util[c]
    after = u + w * state.inv_cap[c]
    b = after.max(axis=1)
    if exclude >= 0:
        b[exclude] = np.inf
    m = b.min()
    if not np.isfinite(m):
        return -1, float("inf")
    ties = np.flatnonzero(b <= m + EPS)
    ci = int(ties[0]) if len(ties) == 1 else int(ties[np.argmin(u[ties].sum(axis=1))])
    return ci, max(float(m), float(edge))


def greedy_in_order(state: LoadState, order: Iterable[int]) -> None:
    """Place the unplaced flows of ``order`` one by one, in that order, each on its
    :func:`best_candidate` on the load the ones before left (a restart of
    :func:`controller.te.placer.place` uses the orders of other constructions)."""
    for i in order:
        state.place(i, best_candidate(state, i)[0])


def greedy(state: LoadState, flows: Iterable[int]) -> None:
    """Place ``flows`` (unplaced positions): largest demand, fewest candidates, first.

    On a mirrored Clos with many flows the candidates of a flow are evaluated from the
    port tables (:meth:`ClosTables.chains`, its two leaves' rows) instead of a per-pair
    candidate array: the same choice, without storing an array per leaf pair."""
    fl = np.fromiter(flows, dtype=np.int64)
    rate = state.as_arrays()[0]
    n_cands = np.asarray(state.n_cands, dtype=np.int64)
    order = fl[np.lexsort((fl, n_cands[fl], -rate[fl]))].tolist()
    t = state.tables
    if t is None or len(order) < BATCH_FLOWS:
        greedy_in_order(state, order)
        return
    u, v, h = state.ends(order)
    w_rel = state.as_arrays()[0][order] * state.inv_cap.max()
    big = np.flatnonzero(w_rel > SMALL_FLOW)
    if len(big):
        _greedy_in_order(state, t, [order[k] for k in big.tolist()], u[big], v[big], h[big])
    small = np.flatnonzero(w_rel <= SMALL_FLOW)
    pos = {order[k]: k for k in small.tolist()}
    small_flows = [order[k] for k in small.tolist()]
    leaves = state.leaves
    for batch in _batches(small_flows, [leaves[i] for i in small_flows], GREEDY_BATCH):
        ks = np.asarray([pos[i] for i in batch], dtype=np.int64)
        _greedy_batch(state, t, batch, u[ks], v[ks], h[ks])


def _greedy_batch(state: LoadState, t: ClosTables, flows: list[int], u: np.ndarray,
                  v: np.ndarray, h: np.ndarray) -> None:
    """Place ``flows`` each on its candidate with the lowest bottleneck after placement,
    all judged on the utilisation before any of them is placed (port tables, one gather
    per height), then place them together."""
    _place_chosen(state, flows, *_choose(state, t, flows, u, v, h))


def _greedy_in_order(state: LoadState, t: ClosTables, flows: list[int], u: np.ndarray,
                     v: np.ndarray, h: np.ndarray) -> None:
    """Place ``flows`` one after the other, each on the candidate :func:`_choose` gives it
    on the utilisation left by the ones before (the one-by-one greedy), a window of
    ``IN_ORDER_BATCH`` to ``IN_ORDER_MAX_BATCH`` at a time: all are chosen on the
    utilisation before the first is placed, and the longest prefix in which no flow's
    choice shares a link with an earlier flow's is placed; the next window starts at the
    first flow that does. That is
    the one-by-one result: placing a flow raises the utilisation of its own links only, so
    a choice none of whose links an earlier flow loaded keeps its bottleneck and its total
    while every other candidate's can only grow (a tie within ``EPS`` aside)."""
    at, n, size = 0, len(flows), IN_ORDER_BATCH
    while at < n:
        end = min(at + size, n)
        rows, rank, hops = _choose(state, t, flows[at:end], u[at:end], v[at:end], h[at:end])
        k = _first_conflict(rows)
        _place_chosen(state, flows[at:at + k], rows[:k], rank[:k], hops[:k])
        at += k
        # twice what this window placed: grows while choices do not collide, shrinks
        # to about the run between collisions when they do
        size = min(max(2 * k, IN_ORDER_BATCH), IN_ORDER_MAX_BATCH)


def _place_chosen(state: LoadState, flows: list[int], rows: np.ndarray, rank: np.ndarray,
                  hops: np.ndarray) -> None:
    """Place ``flows`` on what :func:`_choose` gave them (within-leaf flows on their one
    empty candidate)."""
    if not flows:
        return
    if rows.shape[1] and bool((hops == rows.shape[1]).all()):
        inner = list(rows)  # no padding: the rows as they are
    else:
        inner = [r[:n] for r, n in zip(rows, hops.tolist(), strict=True)]
    state.place_ranked(np.asarray(flows, dtype=np.int64), inner, rank.tolist())


def _choose(state: LoadState, t: ClosTables, flows: list[int], u: np.ndarray, v: np.ndarray,
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
    rate = state.as_arrays()[0]
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
        one_cap = state.fabric_inv_cap is not None
        b = tot = np.empty(0)
        for j in range(ups.shape[2]):
            uj, dj = ups[:, :, j], downs[:, :, j]
            cu, cd = state.util[uj], state.util[dj]
            hop = (np.maximum(cu, cd) if one_cap else
                   np.maximum(cu + w * state.inv_cap[uj], cd + w * state.inv_cap[dj]))
            b = hop if j == 0 else np.maximum(b, hop)
            tot = cu + cd if j == 0 else tot + cu + cd
        b = np.where(alive, b, np.inf)
        state.evaluations += int(alive.sum())
        m = b.min(axis=1, keepdims=True)
        tie = np.where(b <= m + EPS, tot, np.inf)
        code = tie.argmin(axis=1)
        every = np.arange(len(sel))
        rank[sel] = np.cumsum(alive, axis=1)[every, code] - 1
        rows[sel, :2 * hh] = np.concatenate((ups[every, code], downs[every, code][:, ::-1]),
                                            axis=1)
    return rows, rank, hops


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


__all__ = ["COLOUR_MIN_CLASS", "best_candidate", "colour_first", "greedy", "greedy_in_order"]
