"""Collision-free initial placement on Clos fabrics by bipartite edge colouring, level by level.

In a Clos fabric built by :mod:`controller.model` a shortest path climbs from the source leaf and
descends to the destination leaf through switches at mirrored positions, and the up-port taken
at level ℓ on the way up equals the up-port used at level ℓ on the way down (fat-tree: the
aggregation index, then the core index; leaf-spine and rail-optimised: the spine). Choosing, at
level ℓ, that port for every flow so that no up link (source side) or down link (destination
side) carries two flows is edge colouring of the bipartite multigraph (source-side switch,
destination-side switch) with the ports as colours; König's theorem says Δ colours suffice, and
the alternating-path (Kempe chain) algorithm finds such a colouring (Schrijver, *Combinatorial
Optimization*, 2003, §20.1). Levels are coloured bottom-up, each restricted to the candidates
the lower levels left. This is the classical proof that a Clos network is rearrangeably
non-blocking (Beneš, 1962), applied to pinning.

Only flows of equal demand are coloured (one flow per link per colour); a flow that cannot be
coloured (a switch has more flows than colours — oversubscription, failures) is left to the
greedy of :mod:`controller.te.greedy`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from controller.te.pathindex import PathIndex


def colour_levels(index: PathIndex, cands: Sequence[np.ndarray]) -> list[int]:
    """A candidate per flow such that no fabric link carries two coloured flows, or -1.

    Parameters
    ----------
    index : PathIndex
        The index the candidate arrays come from (for link ends and ports).
    cands : sequence of numpy.ndarray
        Per flow, its fabric candidates (n_cand × hops link ids; hops even, source side first).

    Returns
    -------
    list of int
        Candidate row per flow; -1 where the flow was not coloured at some level. Among coloured
        flows every directed fabric link is used by at most one flow.

    Notes
    -----
    Per level, the flows whose surviving candidates have the same shape are handled as one
    (flows × rows × hops) array: the port tests and each flow's allowed colours are a few
    vectorised operations per shape, not per flow; only the Kempe colouring walks flows one by
    one. Cost per level: O(Σ_f rows_f · hops) array work plus the colouring.
    """
    tail, _, tail_port, names = index.link_ends()
    n_nodes = len(names)
    n_ports = int(tail_port.max(initial=0)) + 1
    alive: list[np.ndarray | None] = [np.arange(c.shape[0]) if c.shape[0] else None for c in cands]
    allowed_of: dict[bytes, tuple[tuple[int, ...], frozenset[int]]] = {}
    level = 0
    while True:
        groups: dict[tuple[int, int], list[int]] = {}
        for i, c in enumerate(cands):
            rows = alive[i]
            h = c.shape[1]
            if rows is None or h % 2 or level >= h // 2:
                continue
            groups.setdefault((len(rows), h), []).append(i)
        if not groups:
            break
        # flow -> (source-side node, destination-side node, allowed colours, its group, its slot)
        edge_of: dict[int, tuple[int, int, tuple[int, ...], frozenset[int], int, int]] = {}
        batches: list[tuple[list[int], np.ndarray, np.ndarray]] = []
        for (n_rows, h), fl in groups.items():
            # surviving rows ascend, so as many as the flow has means all of them (no gather)
            sub = np.stack([cands[i] if n_rows == cands[i].shape[0] else cands[i][alive[i]]
                            for i in fl])
            up_ids, down_ids = sub[:, :, level], sub[:, :, h - 1 - level]
            back = down_ids ^ 1  # ids 2j / 2j+1 are the two directions: reverse goes up from v
            pa, pb = tail_port[up_ids], tail_port[back]
            tu, tv = tail[up_ids], tail[back]
            ok = (pa == pb) & (tu == tu[:, :1]) & (tv == tv[:, :1])
            allowed = np.zeros((len(fl), n_ports), dtype=bool)
            fi, ri = np.nonzero(ok)
            allowed[fi, pa[fi, ri]] = True
            g = len(batches)
            batches.append((fl, ok, pa))
            us, vs = tu[:, 0].tolist(), tv[:, 0].tolist()
            for j, i in enumerate(fl):
                key = allowed[j].tobytes()
                got = allowed_of.get(key)
                if got is None:
                    cols = tuple(np.flatnonzero(allowed[j]).tolist())
                    got = allowed_of[key] = (cols, frozenset(cols))
                if not got[0]:
                    alive[i] = None
                    continue
                edge_of[i] = (us[j], vs[j] + n_nodes, got[0], got[1], g, j)
        order = sorted(edge_of)
        colours = _kempe([edge_of[i][:4] for i in order])
        chosen = [np.full(len(fl), -1, dtype=np.int64) for fl, _, _ in batches]
        for i, col in zip(order, colours, strict=True):
            _, _, _, _, g, j = edge_of[i]
            if col is None:
                alive[i] = None
            else:
                chosen[g][j] = col
        for (fl, ok, pa), col_arr in zip(batches, chosen, strict=True):
            sel = ok & (pa == col_arr[:, None])
            for j, i in enumerate(fl):
                rows = alive[i]
                if rows is not None and col_arr[j] >= 0:
                    alive[i] = rows[sel[j]]
        level += 1
    return [int(r[0]) if r is not None and len(r) == 1 else -1 for r in alive]


def _kempe(
    edges: list[tuple[int, int, tuple[int, ...], frozenset[int]]],
    initial: list[int | None] | None = None,
    max_tries: int = 64,
) -> list[int | None]:
    """Edge-colour a bipartite multigraph; edge j = (u, v, allowed colours ascending, the same
    as a set) may only take colours in its set (u and v are node keys, the sides kept apart by
    the caller). ``initial``: a proper partial colouring to extend (its coloured edges keep a
    colour, possibly another one after a flip; only its None edges are added).

    Colours a new edge (u, v) with a colour free at both ends when there is one. Otherwise, for
    α free at u and β free at v (both allowed), the α/β alternating path from v is flipped,
    which frees α at v and never reaches u (bipartite; Schrijver 2003, Thm 20.1), or the β/α
    path from u, which frees β at u. A flip is only done when every edge on the path allows both
    colours (restricted colours: dead ports); the (α, β) pairs are tried in order, both ways,
    at most ``max_tries`` paths per edge, and an edge none of them frees is left uncoloured
    (None). When every colour an edge allows is taken at one of its ends (the colour free
    there is one it may not take, e.g. the column of a dead port on its path), a γ/α path from
    that end first moves an edge of an allowed colour γ onto the free colour α.
    """
    at: dict[int, dict[int, int]] = {}
    colour: list[int | None] = [None] * len(edges) if initial is None else list(initial)
    if initial is not None:
        for j, c0 in enumerate(colour):
            if c0 is not None:
                at.setdefault(edges[j][0], {})[c0] = j
                at.setdefault(edges[j][1], {})[c0] = j

    def path_from(x: int, first: int, other: int) -> list[int] | None:
        """Edges of the first/other alternating path leaving x by its ``first`` edge, or None
        when an edge on it does not allow both colours."""
        path: list[int] = []
        seen: set[int] = set()
        c = first
        while c in at.get(x, {}):
            e = at[x][c]
            if first not in edges[e][3] or other not in edges[e][3] or e in seen:
                return None
            path.append(e)
            seen.add(e)
            eu, ev = edges[e][0], edges[e][1]
            x = ev if x == eu else eu
            c = other if c == first else first
        return path

    def flip(path: list[int], a: int, b: int) -> None:
        for e in path:  # un-register, then re-register with swapped colours
            col = colour[e]
            assert col is not None
            del at[edges[e][0]][col]
            del at[edges[e][1]][col]
        for e in path:
            col = b if colour[e] == a else a
            colour[e] = col
            at[edges[e][0]][col] = e
            at[edges[e][1]][col] = e

    palette = sorted(set().union(*{e[3] for e in edges}))

    def make_free(x: int, ordered: tuple[int, ...], budget: int) -> None:
        """Free one of ``ordered`` at x, where all of them are taken: for a colour α free at
        x (outside ``ordered``) and γ in ``ordered``, flip the γ/α path leaving x by its γ edge
        (x lacks α, so x is an end of it and the colouring stays proper)."""
        ax = at.setdefault(x, {})
        for alpha in (c for c in palette if c not in ax):
            for gamma in ordered:
                if budget <= 0:
                    return
                budget -= 1
                path = path_from(x, gamma, alpha)
                if path is not None:
                    flip(path, gamma, alpha)
                    return

    for j, (u, v, ordered, _) in enumerate(edges):
        if colour[j] is not None:
            continue
        au = at.setdefault(u, {})
        av = at.setdefault(v, {})
        for x, ax in ((u, au), (v, av)):  # every allowed colour taken at an end: free one
            if all(c in ax for c in ordered):
                make_free(x, ordered, max_tries)
        free_u = [c for c in ordered if c not in au]
        free_v = [c for c in ordered if c not in av]
        both = next((c for c in free_u if c not in av), None)
        if both is not None:
            colour[j] = both
            au[both] = j
            av[both] = j
            continue
        tries = 0
        done = False
        for alpha in free_u:
            for beta in free_v:
                for start, a, b, gets in ((v, alpha, beta, alpha), (u, beta, alpha, beta)):
                    if tries >= max_tries:
                        break
                    tries += 1
                    path = path_from(start, a, b)
                    if path is None:
                        continue
                    flip(path, a, b)
                    if gets in au or gets in av:  # cannot happen in a bipartite graph
                        flip(path, a, b)
                        continue
                    colour[j] = gets
                    au[gets] = j
                    av[gets] = j
                    done = True
                    break
                if done or tries >= max_tries:
                    break
            if done or tries >= max_tries:
                break
    return colour
