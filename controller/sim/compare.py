"""ECMP, static pinning and aifabric pinning side by side on the fluid model.

* ECMP, ideal hashing (default): per-flow hashing modelled as a uniformly random choice among
  the equal-cost candidates, independent across flows (the balls-into-bins model of hash
  collisions; Al-Fares et al., "Hedera", NSDI 2010, §2), one draw per seed
  (``numpy.random.default_rng(seed)``). After a failure flows re-hash over the surviving
  candidates.
* ECMP, header hashing (:class:`HashedEcmp`, a scenario's ``ecmp:`` block): every switch hashes
  the configured header fields with its tier's seed (:mod:`controller.te.ecmphash`), so the
  choice of field set and per-tier seeds shows (polarisation when tiers share a seed). What
  varies per ECMP seed is what varies between runs on a real fabric: the flows' transport source
  ports, drawn uniformly from the dynamic range 49152–65535 (RFC 6335 §6) with
  ``numpy.random.default_rng(seed)``.
* static: a fixed path per (src, dst) chosen without knowledge of other flows — candidate
  (destination host index mod candidates), the destination-based uplink choice of the fat-tree
  two-level tables (Al-Fares et al., SIGCOMM 2008, §3.3); after a failure the same rule over the
  surviving candidates.
* aifabric: :func:`controller.te.placer.place` on the flows' link-rate-bound demands and
  the background load; after a failure :func:`controller.te.reroute.repair` moves only the flows
  that crossed a failed link.

Slowdown of a collective = CCT / ideal CCT (:func:`controller.sim.fluid.ideal_cct_s`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from controller.model.topology import Fabric
from controller.sim.fluid import Background, ideal_cct_s, simulate
from controller.sim.jobs import intensity_priorities, jain_index
from controller.sim.optimum import Bound, makespan_bound
from controller.te.clos import ClosTables
from controller.te.collectives import FlowDemand
from controller.te.ecmphash import HashConfig, flow_headers, hashed_paths
from controller.te.pathindex import PathIndex
from controller.te.patterns import Group, Traffic, demand_rates_bps, with_subflows
from controller.te.placement import Placement
from controller.te.placer import LoadPinning, place, reoptimise, repair

LinkPaths = dict[FlowDemand, np.ndarray]


def _cands(index: PathIndex, f: FlowDemand) -> np.ndarray:
    c = index.candidates(f.src, f.dst)
    if c.shape[0] == 0:
        raise ValueError(f"flow {f.label}: no path over the links that are up")
    return c


DYNAMIC_PORTS = (49152, 65535)
"""Transport source ports a flow may get (RFC 6335 §6, dynamic ports), inclusive."""


@dataclass(frozen=True)
class HashedEcmp:
    """Header-hash ECMP (module docstring): ``config`` says what the switches hash; every flow
    carries ``ip_proto`` and ``l4_dst`` (default UDP 4791: RoCEv2, IBTA Annex A17) and a source
    port drawn per ECMP seed from :data:`DYNAMIC_PORTS`."""

    config: HashConfig
    ip_proto: int = 17
    l4_dst: int = 4791


def ecmp_paths(index: PathIndex, flows: Iterable[FlowDemand], seed: int,
               hashed: HashedEcmp | None = None) -> LinkPaths:
    """ECMP placement for one seed: ideal (random) hashing, or header hashing with ``hashed``
    (module docstring). Raises ValueError (no path)."""
    rng = np.random.default_rng(seed)
    out: LinkPaths = {}
    if hashed is None:
        for f in flows:
            c = _cands(index, f)
            out[f] = c[int(rng.integers(c.shape[0]))]
        return out
    fl = list(flows)
    ports = rng.integers(DYNAMIC_PORTS[0], DYNAMIC_PORTS[1] + 1, size=len(fl)).tolist()
    headers = {f: flow_headers(index.fabric, f, ip_proto=hashed.ip_proto, l4_src=p,
                               l4_dst=hashed.l4_dst) for f, p in zip(fl, ports, strict=True)}
    return hashed_paths(index, fl, hashed.config, headers)


def static_paths(index: PathIndex, flows: Iterable[FlowDemand]) -> LinkPaths:
    """Destination-modulo static pinning (module docstring). Raises ValueError (no path)."""
    out: LinkPaths = {}
    for f in flows:
        c = _cands(index, f)
        out[f] = c[index.fabric.host_by_name[f.dst].index % c.shape[0]]
    return out


@dataclass(frozen=True)
class Outcome:
    """One strategy under one condition: per-collective ``slowdown`` (CCT / ideal), the link
    ``utilisation`` values at t = 0, ``moved`` flows (failure repair / re-optimisation; 0
    otherwise), ``vs_optimum`` (makespan / the splittable optimum of the condition,
    :mod:`controller.sim.optimum`) and ``fairness`` (Jain's index of ideal / CCT over the
    collectives, :func:`controller.sim.jobs.jain_index`)."""

    strategy: str
    condition: str
    slowdown: Mapping[str, float]
    utilisation: tuple[float, ...]
    moved: int = 0
    vs_optimum: float = float("nan")
    fairness: float = float("nan")


def evaluate(
    fabric: Fabric,
    traffics: Sequence[Traffic],
    *,
    ecmp_seeds: Sequence[int] = tuple(range(20)),
    down_links: Iterable[frozenset[str]] = frozenset(),
    background: Sequence[tuple[str, str, float]] = (),
    hashed: HashedEcmp | None = None,
    subflows: int = 1,
    queues: int | None = None,
    compute_gpu_s: Mapping[str, float] | None = None,
) -> list[Outcome]:
    """Every strategy intact, after ``down_links`` fail (if any), and under ``background`` (if
    any; background flows (src, dst, rate bits/s) are ECMP-hashed with seed 0 and capped at their
    rate; aifabric plans knowing their load, as port counters would show it). ECMP is ideal
    hashing, or header hashing with ``hashed`` (module docstring).

    On a mirrored Clos also ``spraying`` (:mod:`controller.sim.strategies`); after a failure
    ``aifabric`` is the repair (:func:`controller.te.recovery.repair`) and ``aifabric
    reoptimised`` the background re-optimisation that follows it; with ``subflows`` n > 1 the
    same for ``aifabric n sub-flows`` (every flow split into n sub-flows, each pinned); with
    ``queues``, ``aifabric + priorities`` (intact: job-aware priorities by GPU intensity,
    :func:`controller.sim.jobs.intensity_priorities`, ``compute_gpu_s`` per job).

    Returns
    -------
    list of Outcome
        Conditions ``intact``, ``failure``, ``background``; strategies ``ecmp`` (one per seed,
        named ``ecmp#seed``), ``static``, ``aifabric`` and those above.

    Raises
    ------
    ValueError
        A flow has no path; a down link is unknown.
    """
    flows = list(dict.fromkeys(f for t in traffics for f in t.flows))
    rates = demand_rates_bps(fabric, traffics)
    intact = PathIndex(fabric)
    ideal = {t.name: ideal_cct_s(intact, t, static_paths(intact, t.flows)) for t in traffics}
    out: list[Outcome] = []
    bounds: dict[str, Bound] = {}
    split = [with_subflows(t, subflows) for t in traffics] if subflows > 1 else []
    split_rates = demand_rates_bps(fabric, split) if split else {}

    def run(index: PathIndex, name: str, cond: str, paths: LinkPaths,
            bg: Sequence[Background] = (), moved: int = 0, tr: Sequence[Traffic] = traffics,
            group_links: Callable[[Group], tuple[np.ndarray, np.ndarray]] | None = None,
            priority: Mapping[str, int] | None = None) -> None:
        res = simulate(index, tr, paths, bg, group_links=group_links, priority=priority)
        slow = {t: res.cct_s[t] / ideal[t] for t in res.cct_s}
        b = bounds.get(cond)
        out.append(Outcome(name, cond, slow, tuple(res.link_utilisation.values()), moved,
                           res.makespan_s / b.makespan_s if b and b.makespan_s > 0
                           else float("nan"),
                           jain_index([1.0 / x for x in slow.values()])))

    def plan(index: PathIndex, demand: Mapping[FlowDemand, float],
             base: Mapping[tuple[str, str], float] | None = None) -> LoadPinning:
        return place(fabric, demand, index=index, base_load_bps=base)

    def links(p: Placement | None) -> LinkPaths:
        assert p is not None
        return {f: p.links(i) for i, f in enumerate(p.flows)}

    clos = ClosTables.of(intact) is not None
    conds: list[tuple[str, PathIndex]] = [("intact", intact)]
    down = frozenset(down_links)
    if down:
        conds.append(("failure", intact.with_down(down)))
    planned = {"aifabric": (plan(intact, {f: rates[f] for f in flows}), traffics)}
    if split:
        planned[f"aifabric {subflows} sub-flows"] = (plan(intact, split_rates), split)
    for cond, index in conds:
        bounds[cond] = makespan_bound(index, traffics)
        for s in ecmp_seeds:
            run(index, f"ecmp#{s}", cond, ecmp_paths(index, flows, s, hashed))
        run(index, "static", cond, static_paths(index, flows))
        if clos:
            run(index, "spraying", cond, {}, group_links=spray_rows(index, traffics))
        for name, (pin, tr) in planned.items():
            if cond == "intact":
                run(index, name, cond, links(pin.placement), tr=tr)
                continue
            assert pin.placement is not None
            rep = repair(pin.placement, down)
            run(index, name, cond, links(rep.placement), moved=len(rep.moves), tr=tr)
            ro = reoptimise(rep.placement)
            run(index, f"{name} reoptimised", cond, links(ro.placement), moved=len(ro.moves),
                tr=tr)
        if queues and cond == "intact":
            pin = planned["aifabric"][0]
            paths = links(pin.placement)
            prio = intensity_priorities(index, traffics, paths, compute_gpu_s or {}, queues)
            run(index, "aifabric + priorities", cond, paths, priority=prio)
    if background:
        bgf = [FlowDemand("background", i, s, d) for i, (s, d, _) in enumerate(background)]
        bg_paths = ecmp_paths(intact, bgf, 0, hashed)
        bg = [Background(tuple(int(x) for x in bg_paths[f]), r)
              for f, (_, _, r) in zip(bgf, background, strict=True)]
        base: dict[tuple[str, str], float] = {}
        for b in bg:
            for lid in b.links:
                uv = intact.links[lid]
                base[uv] = base.get(uv, 0.0) + b.rate_bps
        for s in ecmp_seeds:
            run(intact, f"ecmp#{s}", "background", ecmp_paths(intact, flows, s, hashed), bg)
        run(intact, "static", "background", static_paths(intact, flows), bg)
        run(intact, "aifabric", "background",
            links(plan(intact, {f: rates[f] for f in flows}, base).placement), bg)
    return out


def spray_rows(index: PathIndex, traffics: Sequence[Traffic]
               ) -> Callable[[Group], tuple[np.ndarray, np.ndarray]]:
    """``group_links`` of :func:`controller.sim.fluid.simulate` for per-packet spraying of
    every group of ``traffics`` (:class:`controller.sim.strategies.ClosRouter`; cached per
    group)."""
    from controller.sim.strategies import ClosRouter

    cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def links(g: Group) -> tuple[np.ndarray, np.ndarray]:
        got = cache.get(id(g))
        if got is None:
            got = cache[id(g)] = ClosRouter(index, g.flows).spray()
        return got

    return links


def summarise(outcomes: Sequence[Outcome]) -> list[dict[str, object]]:
    """Rows per (condition, strategy), ECMP seeds folded into ``ecmp mean`` / ``ecmp worst``
    (the seed with the largest mean slowdown): mean / max slowdown, max link utilisation."""
    rows: list[dict[str, object]] = []
    conds = list(dict.fromkeys(o.condition for o in outcomes))
    for cond in conds:
        group = [o for o in outcomes if o.condition == cond]
        ecmp = [o for o in group if o.strategy.startswith("ecmp#")]

        def row(name: str, slow: list[float], util: list[float], moved: int = 0,
                vs_opt: float = float("nan"), fair: float = float("nan"),
                cond: str = cond) -> None:
            rows.append({"condition": cond, "strategy": name,
                         "mean_slowdown": float(np.mean(slow)), "max_slowdown": float(np.max(slow)),
                         "max_utilisation": float(max(util, default=0.0)), "moved": moved,
                         "vs_optimum": vs_opt, "fairness": fair})

        if ecmp:
            means = [np.mean(list(o.slowdown.values())) for o in ecmp]
            row(f"ecmp mean ({len(ecmp)} seeds)", [float(m) for m in means],
                [max(o.utilisation, default=0.0) for o in ecmp], 0,
                float(np.mean([o.vs_optimum for o in ecmp])),
                float(np.mean([o.fairness for o in ecmp])))
            worst = ecmp[int(np.argmax(means))]
            row("ecmp worst", list(worst.slowdown.values()), list(worst.utilisation), 0,
                worst.vs_optimum, worst.fairness)
        for o in group:
            if not o.strategy.startswith("ecmp#"):
                row(o.strategy, list(o.slowdown.values()), list(o.utilisation), o.moved,
                    o.vs_optimum, o.fairness)
    return rows
