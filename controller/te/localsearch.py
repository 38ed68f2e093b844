"""Improvement of a placement by local moves (pure; no I/O).

:func:`local_search` lowers the maximum utilisation U of a
:class:`~controller.te.loadstate.LoadState` whose flows are all placed:

1. While U exceeds the lower bound, a link at U is relieved: one of its flows (largest first)
   moves to a candidate that stays below U everywhere, or — an ejection chain (Glover, "Ejection
   chains, reference structures and alternating path methods for traveling salesman problems",
   Discrete Appl. Math. 65, 1996, §2) — to one that pushes other links to U, each then relieved
   the same way (depth-limited, at most ``_CHAIN_WIDTH`` candidates per step, rolled back on
   failure). Each success lowers the number of links at U (or U), so it terminates; a budget
   of candidate evaluations bounds its time. On a fat-tree these chains are the alternating
   paths of bipartite edge colouring (König), which is why permutation traffic such as a
   fragmented ring ends collision-free.
2. Compound moves (``kick``; instances of at most ``KICK_MAX_FLOWS`` flows), when no chain
   helps: a flow on a link at U moves to any other candidate even if that pushes links *above*
   U, then flows are moved off the link most above U, each to its best candidate avoiding it
   that stays within U (at most ``KICK_STEPS``); kept when nothing ends above U and fewer links
   are at U (a swap of flows of unequal demands, which every order of single moves passes above
   U: 0.75 → 0.6 = the MILP optimum on a k = 4 fat-tree with two links down, a draw of
   tests/test_scale_loadpin.py).
"""

from __future__ import annotations

import numpy as np

from controller.te.loadstate import EPS, LoadState

DEFAULT_CHAIN_DEPTH = 8
"""Longest ejection chain (further moves per branch) by default."""
KICK_MAX_FLOWS = 2048
"""Compound moves (:meth:`_Search.kick`) are tried only up to this many flows: they try every
candidate of every flow on a link at the maximum."""
KICK_STEPS = 8
"""Most re-placements after one kick (:meth:`_Search.settle`)."""
_CHAIN_WIDTH = 4
"""Candidates tried per flow in a chain step."""


def local_search(state: LoadState, lower: float, budget: int, movable: set[int] | None = None,
                 depth: int = DEFAULT_CHAIN_DEPTH, kick: bool = False) -> int:
    """Relieve the hottest links of ``state`` by moves and ejection chains (module docstring)
    until the maximum utilisation reaches ``lower`` or nothing helps.

    Parameters
    ----------
    state : LoadState
        Every flow placed; changed in place.
    lower : float
        A lower bound on the maximum utilisation (:func:`controller.te.bounds.load_lower_bound`):
        the search stops there.
    budget : int
        Most candidate evaluations to spend (bounds the time; the result is deterministic).
    movable : set of int, optional
        Positions of the flows that may move (all if None).
    depth : int
        Longest ejection chain.
    kick : bool
        Try compound moves when chains fail (at most ``KICK_MAX_FLOWS`` flows; not for a repair,
        which must be quick).

    Returns
    -------
    int
        The number of flows whose path changed.
    """
    return _Search(state, budget, movable).run(lower, depth, kick)


class _Search:
    """One run of :func:`local_search`: the moves made (journal, for rollback), each moved flow's
    row before the run, and the budget left."""

    def __init__(self, state: LoadState, budget: int, movable: set[int] | None):
        self.state = state
        self.left = budget
        self.movable = movable
        self.journal: list[tuple[int, int]] = []
        self.before: dict[int, np.ndarray | None] = {}

    def run(self, lower: float, depth: int, kick: bool) -> int:
        st = self.state
        while self.left > 0:
            m = st.max_utilisation()
            if m <= lower + EPS:
                break
            hot = np.flatnonzero(st.util >= m - EPS).tolist()
            self.journal.clear()
            if not any(self.relieve(lid, m, depth, frozenset()) for lid in hot):
                if (not kick or len(st.flows) > KICK_MAX_FLOWS
                        or not self.kick(hot, m)):
                    break
        return sum(1 for f, r in self.before.items() if not _same(r, st.rows[f]))

    def _may_move(self, f: int) -> bool:
        return self.movable is None or f in self.movable

    def move(self, f: int, ci: int) -> None:
        """Flow ``f`` onto candidate ``ci``, remembering how to undo it."""
        st = self.state
        if f not in self.before:
            self.before[f] = st.rows[f]
        self.journal.append((f, st.current(f)))
        st.remove(f)
        st.place(f, ci)

    def rollback(self, mark: int) -> None:
        """Undo every move made since the journal had ``mark`` entries."""
        st = self.state
        while len(self.journal) > mark:
            f, old = self.journal.pop()
            st.remove(f)
            st.place(f, old)

    def relieve(self, lid: int, m: float, depth: int, chain: frozenset[int]) -> bool:
        """Bring link ``lid`` below utilisation ``m`` without any link exceeding m and without
        a link below m ending at m: a flow on ``lid`` moves to a candidate avoiding ``lid``;
        links it pushes to m are relieved recursively (an ejection chain, at most ``depth``
        further moves per branch). On failure the state is restored."""
        st = self.state
        mark = len(self.journal)
        on = [f for f in st.flows_on.get(lid, ()) if f not in chain and self._may_move(f)]
        for f in sorted(on, key=lambda i: (-st.rate_bps[i], i)):
            cur = st.current(f)
            c = st.cands[f]
            st.remove(f)
            self.left -= c.shape[0]
            st.evaluations += c.shape[0]
            after = st.util[c] + st.rate_bps[f] * st.inv_cap[c]
            ok = (after.max(axis=1) < m + EPS) & ~(c == lid).any(axis=1)
            ok[cur] = False
            n_hot = (after >= m - EPS).sum(axis=1)
            if depth <= 0:
                ok &= n_hot == 0
            st.place(f, cur)
            cis = np.flatnonzero(ok)
            if not len(cis):
                continue
            order = np.lexsort((cis, st.util[c[cis]].sum(axis=1), n_hot[cis]))
            for ci in cis[order][:_CHAIN_WIDTH].tolist():
                if self.left <= 0:
                    return False
                hot = [int(x) for x in c[ci][after[ci] >= m - EPS]]
                self.move(f, ci)
                if all(st.util[x] < m - EPS or self.relieve(x, m, depth - 1, chain | {f})
                       for x in hot):
                    return True
                self.rollback(mark)
        return False

    def kick(self, hot: list[int], m: float) -> bool:
        """A compound move (module docstring, step 2): a flow on a link at ``m`` moves to a
        candidate even if that pushes links above ``m``, then :meth:`settle` re-places flows
        off the links above ``m``. Kept when no link ends above ``m`` and fewer are at it; else
        rolled back. Candidates in order, flows largest first."""
        st = self.state
        at_m = int((st.util >= m - EPS).sum())
        for lid in hot:
            on = sorted((f for f in st.flows_on.get(lid, ()) if self._may_move(f)),
                        key=lambda i: (-st.rate_bps[i], i))
            for f in on:
                cur = st.current(f)
                c = st.cands[f]
                for ci in np.flatnonzero(~(c == lid).any(axis=1)).tolist():
                    if ci == cur:
                        continue
                    if self.left <= 0:
                        return False
                    self.left -= 1
                    mark = len(self.journal)
                    self.move(f, ci)
                    if self.settle(m, f) and int((st.util >= m - EPS).sum()) < at_m:
                        return True
                    self.rollback(mark)
        return False

    def settle(self, m: float, fixed: int) -> bool:
        """Move flows (not ``fixed``) off the link most above ``m``, each to the candidate that
        avoids it with the lowest bottleneck, choosing the flow that leaves the smaller of its
        new bottleneck and the link's own utilisation, as long as that bottleneck stays within
        ``m``; True when no link is above ``m`` (at most ``KICK_STEPS`` moves)."""
        st = self.state
        for _ in range(KICK_STEPS):
            over = np.flatnonzero(st.util > m + EPS)
            if not len(over):
                return True
            x = int(over[np.argmax(st.util[over])])
            best: tuple[float, int, int] | None = None
            for g in sorted(st.flows_on.get(x, ())):
                if g == fixed or not self._may_move(g):
                    continue
                cur = st.current(g)
                c = st.cands[g]
                self.left -= c.shape[0]
                st.evaluations += c.shape[0]
                st.remove(g)
                after = (st.util[c] + st.rate_bps[g] * st.inv_cap[c]).max(axis=1)
                st.place(g, cur)
                after[(c == x).any(axis=1)] = np.inf
                ci = int(np.argmin(after))
                # the larger of its new bottleneck and what it leaves on x: smallest first
                peak = max(float(after[ci]),
                           float(st.util[x] - st.rate_bps[g] * st.inv_cap[x]))
                if after[ci] <= m + EPS and (best is None or peak < best[0]):
                    best = (peak, g, ci)
            if best is None or self.left <= 0:
                return False
            self.move(best[1], best[2])
        return not (st.util > m + EPS).any()


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return a is not None and b is not None and np.array_equal(a, b)


__all__ = ["DEFAULT_CHAIN_DEPTH", "KICK_MAX_FLOWS", "local_search"]
