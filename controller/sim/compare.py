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
* aifabric: :func:`controller.te.loadpin.pin_by_load` on the flows' link-rate-bound demands and
  the background load; after a failure :func:`controller.te.reroute.repair` moves only the flows
  that crossed a failed link.

Slowdown of a collective = CCT / ideal CCT (:func:`controller.sim.fluid.ideal_cct_s`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from controller.model.topology import Fabric
from controller.sim.fluid import Background, ideal_cct_s, simulate
from controller.te.collectives import FlowDemand
from controller.te.ecmphash import HashConfig, flow_headers, hashed_paths
from controller.te.loadpin import pin_by_load
from controller.te.pathindex import PathIndex
from controller.te.patterns import Traffic, demand_rates_bps
from controller.te.reroute import repair

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
    ``utilisation`` values at t = 0, and ``moved`` flows (failure repair; 0 otherwise)."""

    strategy: str
    condition: str
    slowdown: Mapping[str, float]
    utilisation: tuple[float, ...]
    moved: int = 0


def evaluate(
    fabric: Fabric,
    traffics: Sequence[Traffic],
    *,
    ecmp_seeds: Sequence[int] = tuple(range(20)),
    down_links: Iterable[frozenset[str]] = frozenset(),
    background: Sequence[tuple[str, str, float]] = (),
    hashed: HashedEcmp | None = None,
) -> list[Outcome]:
    """Every strategy intact, after ``down_links`` fail (if any), and under ``background`` (if
    any; background flows (src, dst, rate bits/s) are ECMP-hashed with seed 0 and capped at their
    rate; aifabric plans knowing their load, as port counters would show it). ECMP is ideal
    hashing, or header hashing with ``hashed`` (module docstring).

    Returns
    -------
    list of Outcome
        Conditions ``intact``, ``failure``, ``background``; strategies ``ecmp`` (one per seed,
        named ``ecmp#seed``), ``static``, ``aifabric``.

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

    def run(index: PathIndex, name: str, cond: str, paths: LinkPaths,
            bg: Sequence[Background] = (), moved: int = 0) -> None:
        res = simulate(index, traffics, paths, bg)
        out.append(Outcome(name, cond, {t: res.cct_s[t] / ideal[t] for t in res.cct_s},
                           tuple(res.link_utilisation.values()), moved))

    def ours(index: PathIndex, base: Mapping[tuple[str, str], float] | None = None) -> LinkPaths:
        pin = pin_by_load(fabric, {f: rates[f] for f in flows}, index=index, base_load_bps=base)
        return {f: index.link_ids(p) for f, p in pin.paths.items()}

    conds: list[tuple[str, PathIndex]] = [("intact", intact)]
    down = frozenset(down_links)
    if down:
        conds.append(("failure", intact.with_down(down)))
    for cond, index in conds:
        for s in ecmp_seeds:
            run(index, f"ecmp#{s}", cond, ecmp_paths(index, flows, s, hashed))
        run(index, "static", cond, static_paths(index, flows))
        if cond == "intact":
            run(index, "aifabric", cond, ours(index))
        else:
            before = pin_by_load(fabric, {f: rates[f] for f in flows}, index=intact)
            rep = repair(fabric, before.paths, {f: rates[f] for f in flows}, down, index=intact)
            run(index, "aifabric", cond, {f: index.link_ids(p) for f, p in rep.paths.items()},
                moved=len(rep.moved))
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
        run(intact, "aifabric", "background", ours(intact, base), bg)
    return out


def summarise(outcomes: Sequence[Outcome]) -> list[dict[str, object]]:
    """Rows per (condition, strategy), ECMP seeds folded into ``ecmp mean`` / ``ecmp worst``
    (the seed with the largest mean slowdown): mean / max slowdown, max link utilisation."""
    rows: list[dict[str, object]] = []
    conds = list(dict.fromkeys(o.condition for o in outcomes))
    for cond in conds:
        group = [o for o in outcomes if o.condition == cond]
        ecmp = [o for o in group if o.strategy.startswith("ecmp#")]

        def row(name: str, slow: list[float], util: list[float], moved: int = 0,
                cond: str = cond) -> None:
            rows.append({"condition": cond, "strategy": name,
                         "mean_slowdown": float(np.mean(slow)), "max_slowdown": float(np.max(slow)),
                         "max_utilisation": float(max(util, default=0.0)), "moved": moved})

        if ecmp:
            means = [np.mean(list(o.slowdown.values())) for o in ecmp]
            row(f"ecmp mean ({len(ecmp)} seeds)", [float(m) for m in means],
                [max(o.utilisation, default=0.0) for o in ecmp])
            worst = ecmp[int(np.argmax(means))]
            row("ecmp worst", list(worst.slowdown.values()), list(worst.utilisation))
        for o in group:
            if not o.strategy.startswith("ecmp#"):
                row(o.strategy, list(o.slowdown.values()), list(o.utilisation), o.moved)
    return rows
