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
greedy of :mod:`controller.te.loadpin`.
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
    """
    links = index.links
    tail_port = np.zeros(len(links), dtype=np.int64)  # port of link id's tail towards its head
    for ln in index.fabric.links:
        for uv, p in (((ln.a, ln.b), ln.a_port), ((ln.b, ln.a), ln.b_port)):
            tail_port[index.link_id[uv]] = p
    node_of = {n: i for i, n in enumerate(sorted({u for u, _ in links}))}
    tail = np.asarray([node_of[u] for u, _ in links], dtype=np.int64)
    alive: list[np.ndarray | None] = [np.arange(c.shape[0]) if c.shape[0] else None for c in cands]
    level = 0
    while True:
        edges: list[tuple[int, tuple[str, str], tuple[str, str], dict[int, np.ndarray]]] = []
        for i, c in enumerate(cands):
            rows = alive[i]
            h = c.shape[1]
            if rows is None or h % 2 or level >= h // 2:
                continue
            sub = c[rows]
            up_ids, down_ids = sub[:, level], sub[:, h - 1 - level]
            u, v = links[int(up_ids[0])][0], links[int(down_ids[0])][1]
            # ids 2j / 2j+1 are the two directions: the reverse of a down link goes up from v
            pa, pb = tail_port[up_ids], tail_port[down_ids ^ 1]
            ok = (pa == pb) & (tail[up_ids] == tail[up_ids[0]]) & (
                tail[down_ids ^ 1] == tail[down_ids[0] ^ 1])
            if not ok.any():
                alive[i] = None
                continue
            keep, pk = rows[ok], pa[ok]
            order = np.argsort(pk, kind="stable")
            keep, pk = keep[order], pk[order]
            cols, starts = np.unique(pk, return_index=True)
            ends = np.append(starts[1:], len(pk))
            opts = {int(c): keep[a:b] for c, a, b in
                    zip(cols.tolist(), starts.tolist(), ends.tolist(), strict=True)}
            edges.append((i, ("s", u), ("d", v), opts))
        if not edges:
            break
        colours = _kempe([(s, d, set(opts)) for _, s, d, opts in edges])
        for (i, _, _, opts), col in zip(edges, colours, strict=True):
            alive[i] = opts[col] if col is not None else None
        level += 1
    return [int(r[0]) if r is not None and len(r) == 1 else -1 for r in alive]


def _kempe(edges: list[tuple[tuple[str, str], tuple[str, str], set[int]]]) -> list[int | None]:
    """Edge-colour a bipartite multigraph; edge j may only take colours in its set.

    Colours a new edge (u, v) with α free at u; if α is taken at v by an edge, the α/β
    alternating path from v (β free at v) is flipped first, which frees α at v and never
    reaches u (bipartite; Schrijver 2003, Thm 20.1). A flip is only done when every edge on
    the path allows both colours; otherwise the edge is left uncoloured (None).
    """
    at: dict[tuple[str, str], dict[int, int]] = {}
    colour: list[int | None] = [None] * len(edges)
    for j, (u, v, allowed) in enumerate(edges):
        au = at.setdefault(u, {})
        av = at.setdefault(v, {})
        free_u = [c for c in sorted(allowed) if c not in au]
        if not free_u:
            continue
        both = [c for c in free_u if c not in av]
        if both:
            colour[j] = both[0]
            au[both[0]] = j
            av[both[0]] = j
            continue
        free_v = [c for c in sorted(allowed) if c not in av]
        if not free_v:
            continue
        alpha, beta = free_u[0], free_v[0]
        path: list[int] = []
        x, c = v, alpha
        ok = True
        while c in at.get(x, {}):
            e = at[x][c]
            if alpha not in edges[e][2] or beta not in edges[e][2] or e in path:
                ok = False
                break
            path.append(e)
            eu, ev, _ = edges[e]
            x = ev if x == eu else eu
            c = beta if c == alpha else alpha
        if not ok or x == u:
            continue
        for e in path:  # un-register, then re-register with swapped colours
            eu, ev, _ = edges[e]
            col = colour[e]
            assert col is not None
            del at[eu][col]
            del at[ev][col]
        for e in path:
            eu, ev, _ = edges[e]
            col = beta if colour[e] == alpha else alpha
            colour[e] = col
            at[eu][col] = e
            at[ev][col] = e
        colour[j] = alpha
        au[alpha] = j
        av[alpha] = j
    return colour
