"""The test oracle of the placer (:mod:`controller.te.placer`): path pinning by flow counts.

Kept only for tests (nothing in controller/ or bench/ calls it): the placer's start-up placement
must be no worse than this one by maximum link utilisation on the fabrics the tests and labs
use (tests/test_te_placer.py). It is the planner the controller used before one placer served
start-up, registration, repair and re-optimisation alike.

The problem: given flows F, each with candidate paths P_f (every shortest valley-free path,
:mod:`controller.te.paths`), choose one path per flow to minimise the *congestion*
max_e |{f : e ∈ path(f)}| over directed links e. It is the unsplittable min-congestion routing
problem, NP-hard in general (Raghavan & Thompson, "Randomized rounding", Combinatorica 7(4),
1987, §1); :mod:`controller.te.exact` solves small instances exactly as a test oracle.

The planner here is greedy placement followed by local search with ejection chains:

1. Greedy. Flows are taken most-constrained first (fewest candidates, then input order); each
   goes on the candidate minimising (resulting maximum load, the candidate's own bottleneck
   after placement, the candidate's current total load, candidate order).
2. Local search. While the maximum load M exceeds the lower bound, a link at load M is relieved:
   one of its flows moves to a candidate that stays below M everywhere, or — an *ejection
   chain* (Glover, "Ejection chains, reference structures and alternating path methods for
   traveling salesman problems", Discrete Appl. Math. 65, 1996, §2) — to a candidate that
   pushes other links to M, each of which is then relieved the same way (up to a depth limit;
   a failed branch is rolled back). Each success lowers the number of links at load M by at
   least one (or M itself), so the search terminates; a step budget bounds its time.

The lower bound is the larger of (a) the *mandatory* load: flows whose every candidate uses a
link (e.g. a host's access link) and (b) *cut* bounds: flows leaving (entering) a leaf with its
hosts, or a pod, must share that set's up links out (in): ⌈flows / links⌉. When
``max_link_flows == lower_bound`` the pinning is optimal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controller.model.topology import Fabric
from controller.te.collectives import FlowDemand
from controller.te.links import DownLinks
from controller.te.paths import Path, PathOracle

DirectedLink = tuple[str, str]
"""A direction of a link: (from node, to node)."""

DEFAULT_CHAIN_DEPTH = 8
DEFAULT_SEARCH_BUDGET = 200_000


@dataclass(frozen=True)
class Pinning:
    """The planner's answer.

    Attributes
    ----------
    paths : mapping of FlowDemand to tuple of str
        The chosen path of every demand (host … host), in demand order.
    link_flows : mapping of (str, str) to int
        Directed link (u, v) → number of pinned flows on it; every directed link some path
        uses is present (count ≥ 1), sorted by link.
    max_link_flows : int
        The largest count in ``link_flows`` (0 without demands).
    lower_bound : int
        No pinning of these demands on these candidates can do better; equality proves
        optimality.
    """

    paths: Mapping[FlowDemand, Path]
    link_flows: Mapping[DirectedLink, int]
    max_link_flows: int
    lower_bound: int

    @property
    def optimal(self) -> bool:
        """True when ``max_link_flows`` meets the lower bound."""
        return self.max_link_flows == self.lower_bound


def pin_flows(
    fabric: Fabric,
    demands: Iterable[FlowDemand],
    down_links: Iterable[frozenset[str]] = frozenset(),
    *,
    chain_depth: int = DEFAULT_CHAIN_DEPTH,
    search_budget: int = DEFAULT_SEARCH_BUDGET,
) -> Pinning:
    """Pin every demand on one shortest valley-free path, minimising the busiest directed link.

    Parameters
    ----------
    fabric : Fabric
        The fabric.
    demands : iterable of FlowDemand
        Distinct flows (their hosts must be hosts of ``fabric``).
    down_links : iterable of frozenset of str, optional
        Links that are down (``frozenset({u, v})``); no path uses them.
    chain_depth : int, optional
        Longest ejection chain the local search tries (0: single moves only).
    search_budget : int, optional
        Most candidate evaluations the local search may spend (bounds its time; the result is
        still deterministic).

    Returns
    -------
    Pinning
        Paths, per-directed-link flow counts, the maximum count and a lower bound.

    Raises
    ------
    ValueError
        A demand is repeated, names a host the fabric lacks, or has no valley-free path over
        the up links (the message names the flow); ``down_links`` names an unknown link.

    Notes
    -----
    Deterministic: the same inputs give the same paths. Cost: greedy O(Σ_f |P_f| · len);
    local search bounded by ``search_budget`` candidate evaluations.

    Examples
    --------
    >>> from controller.model import build_leaf_spine
    >>> f = build_leaf_spine("ls", 2, 2, 2, 10**9, 10**9, 1.0, 1.0)
    >>> ds = [FlowDemand("r", 0, "h1", "h3"), FlowDemand("r", 1, "h2", "h4")]
    >>> p = pin_flows(f, ds)
    >>> p.max_link_flows, p.lower_bound, p.paths[ds[1]][2]
    (1, 1, 'spine2')
    """
    flows = tuple(demands)
    if len(set(flows)) != len(flows):
        dup = next(d for i, d in enumerate(flows) if d in flows[:i])
        raise ValueError(f"flow {dup.label} (index {dup.index}) is listed twice")
    oracle = PathOracle(fabric, down_links)
    state = _State()
    pair_cache: dict[tuple[str, str], list[Path]] = {}
    cand_paths: list[list[Path]] = []
    for d in flows:
        key = (d.src, d.dst)
        paths = pair_cache.get(key)
        if paths is None:
            try:
                paths = oracle.paths(d.src, d.dst)
            except ValueError as exc:
                raise ValueError(f"flow {d.label}: {exc}") from None
            if not paths:
                raise ValueError(
                    f"flow {d.label}: no valley-free path from {d.src} to {d.dst} over the links "
                    f"that are up ({len(oracle.down)} down)"
                )
            pair_cache[key] = paths
        cand_paths.append(paths)
        state.add_flow([state.link_ids(p) for p in paths])
    state.greedy()
    lower = max(_mandatory_bound(state), _cut_bound(fabric, oracle.down, flows)) if flows else 0
    state.local_search(lower, chain_depth, search_budget)
    chosen = {d: cand_paths[i][state.assign[i]] for i, d in enumerate(flows)}
    counts = {state.links[lid]: n for lid, n in enumerate(state.loads) if n > 0}
    link_flows = dict(sorted(counts.items()))
    return Pinning(chosen, link_flows, max(link_flows.values(), default=0), lower)


class _State:
    """Mutable search state over integer link ids (internal)."""

    def __init__(self) -> None:
        self.links: list[DirectedLink] = []
        self._lid: dict[DirectedLink, int] = {}
        self.loads: list[int] = []
        self.flows_on: list[set[int]] = []
        self.cands: list[list[tuple[int, ...]]] = []
        self.assign: list[int] = []
        self.journal: list[tuple[int, int]] = []

    def link_ids(self, path: Path) -> tuple[int, ...]:
        out = []
        for uv in zip(path, path[1:], strict=False):
            lid = self._lid.get(uv)
            if lid is None:
                lid = len(self.links)
                self._lid[uv] = lid
                self.links.append(uv)
                self.loads.append(0)
                self.flows_on.append(set())
            out.append(lid)
        return tuple(out)

    def add_flow(self, cands: list[tuple[int, ...]]) -> None:
        self.cands.append(cands)
        self.assign.append(-1)

    def place(self, f: int, ci: int) -> None:
        self.assign[f] = ci
        for lid in self.cands[f][ci]:
            self.loads[lid] += 1
            self.flows_on[lid].add(f)

    def remove(self, f: int) -> None:
        for lid in self.cands[f][self.assign[f]]:
            self.loads[lid] -= 1
            self.flows_on[lid].discard(f)
        self.assign[f] = -1

    def greedy(self) -> None:
        loads = self.loads
        top = 0
        for f in sorted(range(len(self.cands)), key=lambda i: (len(self.cands[i]), i)):
            best: tuple[int, int, int, int] | None = None
            for ci, c in enumerate(self.cands[f]):
                after = max(loads[lid] for lid in c) + 1
                key = (max(top, after), after, sum(loads[lid] for lid in c), ci)
                if best is None or key < best:
                    best = key
            assert best is not None  # every flow has at least one candidate
            self.place(f, best[3])
            top = best[0]

    def move(self, f: int, ci: int) -> None:
        """Re-route flow ``f`` onto candidate ``ci``, remembering how to undo it."""
        self.journal.append((f, self.assign[f]))
        self.remove(f)
        self.place(f, ci)

    def rollback(self, mark: int) -> None:
        """Undo every move made since the journal had ``mark`` entries."""
        while len(self.journal) > mark:
            f, old = self.journal.pop()
            self.remove(f)
            self.place(f, old)

    def local_search(self, lower: int, depth: int, budget: int) -> None:
        left = [budget]
        while left[0] > 0:
            m = max(self.loads, default=0)
            if m <= lower:
                return
            hot = [lid for lid, n in enumerate(self.loads) if n == m]
            if not any(self._relieve(lid, m, depth, frozenset(), left) for lid in hot):
                return
            self.journal.clear()

    def _relieve(
        self, lid: int, m: int, depth: int, chain: frozenset[int], left: list[int]
    ) -> bool:
        """Bring link ``lid`` from load ``m`` to below m, moving flows so that no link exceeds
        m and no link that was below m ends at m. On failure the state is restored.

        A flow on ``lid`` moves to a candidate avoiding ``lid`` and every link at m; the links
        it pushes to m are then relieved recursively (an ejection chain of at most ``depth``
        further moves per branch), never moving a flow of the current chain again.
        """
        loads = self.loads
        mark = len(self.journal)
        for f in sorted(self.flows_on[lid]):
            if f in chain:
                continue
            cur = self.assign[f]
            self.remove(f)
            options: list[tuple[int, int, int, list[int]]] = []
            for ci, c in enumerate(self.cands[f]):
                if ci == cur or lid in c:
                    continue
                left[0] -= 1
                if any(loads[x] >= m for x in c):
                    continue
                hot = [x for x in c if loads[x] == m - 1]
                if len(hot) == 0 or depth > 0:
                    options.append((len(hot), sum(loads[x] for x in c), ci, hot))
            self.place(f, cur)
            options.sort(key=lambda o: o[:3])
            for _, _, ci, hot in options:
                if left[0] <= 0:
                    return False
                self.move(f, ci)
                if all(
                    loads[x] < m or self._relieve(x, m, depth - 1, chain | {f}, left)
                    for x in hot
                ):
                    return True
                self.rollback(mark)
        return False


def _mandatory_bound(state: _State) -> int:
    """Max over links of the number of flows all of whose candidates use that link."""
    count = [0] * len(state.links)
    for cands in state.cands:
        common = set(cands[0])
        for c in cands[1:]:
            common.intersection_update(c)
        for lid in common:
            count[lid] += 1
    return max(count, default=0)


def _cut_bound(fabric: Fabric, down: DownLinks, flows: tuple[FlowDemand, ...]) -> int:
    """⌈flows crossing / up links crossing⌉ over each leaf-with-hosts and each pod, both ways.

    Every path of a flow from inside a node set S to outside crosses at least one directed
    link out of S (and symmetrically in), so the busiest such link carries at least the ratio.
    O(|links| + |flows|).
    """
    leaf_of = {h.name: h.leaf for h in fabric.hosts}
    pod_of_switch = {s.name: s.pod for s in fabric.switches if s.pod is not None}
    # two partitions of (some) nodes: by leaf, by pod; a node outside a partition is None
    by_leaf: dict[str, object] = {leaf: leaf for leaf in leaf_of.values()}
    by_leaf.update(leaf_of)
    by_pod: dict[str, object] = dict(pod_of_switch)
    by_pod.update({h: pod_of_switch[lf] for h, lf in leaf_of.items() if lf in pod_of_switch})
    partitions = [by_leaf, by_pod]
    best = 0
    for part in partitions:
        across: dict[object, int] = {}
        for ln in fabric.links:
            ga, gb = part.get(ln.a), part.get(ln.b)
            if ga == gb or frozenset((ln.a, ln.b)) in down:
                continue
            for g in (ga, gb):
                if g is not None:
                    across[g] = across.get(g, 0) + 1
        out_flows: dict[object, int] = {}
        in_flows: dict[object, int] = {}
        for d in flows:
            gs, gd = part.get(d.src), part.get(d.dst)
            if gs == gd:
                continue
            if gs is not None:
                out_flows[gs] = out_flows.get(gs, 0) + 1
            if gd is not None:
                in_flows[gd] = in_flows.get(gd, 0) + 1
        for counts in (out_flows, in_flows):
            for g, n in counts.items():
                if across.get(g):
                    best = max(best, -(-n // across[g]))
    return best

