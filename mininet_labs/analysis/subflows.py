"""Pure analysis of the sub-flow failure lab (:mod:`mininet_labs.labs.subflow_failure`): the
rate a placement allows, per-variant busbw/bound statistics, the verdicts, the table and plot.
No Mininet, no processes: testable anywhere.

Two bounds are compared with what the rings measured (nccl-tests busbw, PERFORMANCE.md):

* the **fluid bound** of the failed fabric,
  :func:`controller.sim.optimum.fluid_busbw_bound_bps` — flows split as finely as wanted (the
  LP, HiGHS): no routing can give every ring flow more at once;
* the **placement bound** (:func:`placement_bound_bps`) of the paths the controller had in
  force: the same definition with every (sub-)flow on its one path. Sub-flow pinning can only
  gain where the one-path placement bound is below the fluid bound.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from statistics import mean
from typing import Any

from controller.model.topology import Fabric
from mininet_labs.analysis.verdict import Verdict

#: A pinned variant's name is this prefix + its connections per peer (``pinned-2``).
PINNED_PREFIX = "pinned-"


def placement_bound_bps(fabric: Fabric, flows: Iterable[tuple[Sequence[str], float]]) -> float:
    """The largest rate r (bit/s) at which every peer pair can send at once when each
    (sub-)flow stays on its path: ``min over directed links of capacity / Σ weights``.

    ``flows``: (hops host … host, weight) per (sub-)flow; a weight is the share of its peer
    pair's bytes the sub-flow carries (1/c for c connections per peer, 1 for one). Defined as
    :func:`controller.sim.optimum.fluid_busbw_bound_bps` (max concurrent rate, unit demands)
    with the paths fixed, so it is ≤ that bound. Raises ValueError when no flow is given.

    >>> from controller.model import build_leaf_spine
    >>> f = build_leaf_spine("ls", 2, 4, 2, 15 * 10**6, 15 * 10**6, 1.0, 1.0)
    >>> up = ["h1", "leaf1", "spine2", "leaf2", "h3"]
    >>> placement_bound_bps(f, [(up, 1.0), (["h2", "leaf1", "spine2", "leaf2", "h4"], 1.0)])
    7500000.0
    >>> placement_bound_bps(f, [(up, 0.5), (["h1", "leaf1", "spine1", "leaf2", "h3"], 0.5)])
    15000000.0
    """
    load: dict[tuple[str, str], float] = defaultdict(float)
    any_flow = False
    for hops, weight in flows:
        any_flow = True
        for u, v in zip(hops, hops[1:], strict=False):
            load[(u, v)] += weight
    if not any_flow:
        raise ValueError("no flows: no placement to bound")
    return min(fabric.link_between(u, v).capacity_bps / w for (u, v), w in load.items() if w > 0)


def crosses(hops: Sequence[str], link: Sequence[str]) -> bool:
    """Whether the path ``hops`` uses the (undirected) ``link`` in either direction."""
    pair = set(link)
    return any({u, v} == pair for u, v in zip(hops, hops[1:], strict=False))


def ratios_by_variant(records: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """busbw / fluid bound of every measured collective, per variant (runs in order)."""
    out: dict[str, list[float]] = {}
    for r in records:
        for c in r["collectives"]:
            if c.get("busbw_over_bound") is not None:
                out.setdefault(r["variant"], []).append(float(c["busbw_over_bound"]))
            else:
                out.setdefault(r["variant"], [])
    return out


def summarize(records: Sequence[Mapping[str, Any]], fluid_bps: float, intact_fluid_bps: float,
              link_rate_bps: float, min_gain: float, target_ratio: float) -> dict[str, Any]:
    """Per variant: busbw/bound mean, min, max, n, the mean over runs of the slower ring's
    busbw/bound (the rings share the bottleneck; the one that finishes first frees it for the
    other) and the placement bounds seen; the gain of
    the pinned variant with the most connections per peer over ``pinned-1`` (difference of the
    means of busbw/fluid bound) and the thresholds the verdicts use."""
    ratios = ratios_by_variant(records)
    variants: dict[str, Any] = {}
    for name, xs in ratios.items():
        pb = sorted({r["placement_bound_bps"] for r in records
                     if r["variant"] == name and r.get("placement_bound_bps") is not None})
        slowest = [min(c["busbw_over_bound"] for c in r["collectives"]) for r in records
                   if r["variant"] == name and r["collectives"]
                   and all(c.get("busbw_over_bound") is not None for c in r["collectives"])]
        variants[name] = {"n": len(xs), "mean": round(mean(xs), 4) if xs else None,
                          "min": min(xs, default=None), "max": max(xs, default=None),
                          "slowest_ring_mean": round(mean(slowest), 4) if slowest else None,
                          "placement_bounds_bps": pb}
    pinned = sorted((int(n.removeprefix(PINNED_PREFIX)), n) for n in variants
                    if n.startswith(PINNED_PREFIX))
    gain = None
    if len(pinned) >= 2 and pinned[0][0] == 1:
        lo, hi = variants[pinned[0][1]]["mean"], variants[pinned[-1][1]]["mean"]
        if lo is not None and hi is not None:
            gain = {"of": pinned[-1][1], "over": pinned[0][1], "mean_ratio_difference":
                    round(hi - lo, 4)}
    return {"fluid_bound_bps": fluid_bps, "intact_fluid_bound_bps": intact_fluid_bps,
            "link_rate_bps": link_rate_bps, "variants": variants, "gain": gain,
            "min_gain": min_gain, "target_ratio": target_ratio,
            "units": {"busbw_over_bound": "nccl-tests busbw / fluid bound of the failed fabric",
                      "placement_bound_bps": "max concurrent rate of the paths in force, bit/s"}}


def verdicts(records: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> list[Verdict]:
    """``all_correct``; ``pinned_off_failed_link`` (every pinned path in force avoided the down
    link, with one pinned entry per sub-flow); ``pinned_near_fluid_bound`` (every pinned
    sample ≥ ``target_ratio`` of the fluid bound); ``subflows_gain`` (the mean busbw/bound of
    the most-connections pinned variant exceeds ``pinned-1``'s by ≥ ``min_gain``). The last two
    are timing-sensitive."""
    correct = [c["correct"] for r in records for c in r["collectives"]]
    pinned = [r for r in records if r["variant"].startswith(PINNED_PREFIX)]
    off = [r for r in pinned if r["paths_in_force"] and not r["paths_cross_failed_link"]
           and r["pinned_flows"] == r["expected_pinned_flows"]]
    target = summary["target_ratio"]
    pr = [x for name, v in ratios_by_variant(pinned).items() for x in v]
    n_pinned = sum(len(r["collectives"]) for r in pinned)
    fluid = summary["fluid_bound_bps"]
    vs = summary["variants"]
    means = ", ".join(f"{n} {v['mean']:.3f}" + ("" if v["slowest_ring_mean"] is None else
                                                 f" (slower ring {v['slowest_ring_mean']:.3f})")
                      for n, v in vs.items() if v["mean"] is not None)
    pbs = "; ".join(f"{n} {'/'.join(f'{b / 1e6:g}' for b in v['placement_bounds_bps'])}"
                    for n, v in vs.items() if v["placement_bounds_bps"])
    gain = summary["gain"]
    out = [
        Verdict("all_correct", bool(correct) and all(correct),
                f"{sum(correct)} of {len(correct)} collectives correct"),
        Verdict("pinned_off_failed_link", bool(pinned) and len(off) == len(pinned),
                f"{len(off)} of {len(pinned)} pinned runs had every (sub-)flow pinned, none on "
                "the down link (controller's paths in force)"),
        Verdict("pinned_near_fluid_bound", len(pr) == n_pinned > 0 and min(pr) >= target,
                f"min pinned busbw/bound {min(pr, default=0):.3f} (target {target:.2f} of the "
                f"fluid bound {fluid / 1e6:g} Mbit/s)", timing_sensitive=True)]
    if gain is not None:
        d = gain["mean_ratio_difference"]
        out.append(Verdict(
            "subflows_gain", d >= summary["min_gain"],
            f"mean busbw/bound {gain['of']} − {gain['over']} = {d:+.3f} (threshold "
            f"{summary['min_gain']:+.2f}); means: {means}; placement bounds Mbit/s: {pbs}",
            timing_sensitive=True))
    return out


def table(records: Sequence[Mapping[str, Any]], fluid_bps: float) -> Any:
    """A rich Table: one row per run and collective."""
    from rich.table import Table

    t = Table(title=f"busbw / fluid bound of the failed fabric ({fluid_bps / 1e6:g} Mbit/s)")
    for col in ("variant", "seed", "collective", "CCT s", "busbw Mbit/s", "busbw/bound",
                "placement bound Mbit/s", "correct"):
        t.add_column(col, justify="left" if col in ("variant", "collective") else "right")
    for r in records:
        pb = r.get("placement_bound_bps")
        for c in r["collectives"]:
            t.add_row(r["variant"], str(r["seed"]), c["collective"],
                      "-" if c.get("cct_s") is None else f"{c['cct_s']:.2f}",
                      "-" if c.get("busbw_bps") is None else f"{c['busbw_bps'] / 1e6:.2f}",
                      "-" if c.get("busbw_over_bound") is None else f"{c['busbw_over_bound']:.3f}",
                      "-" if pb is None else f"{pb / 1e6:g}",
                      "yes" if c["correct"] else "[red]NO[/]")
    return t


def plot(records: Sequence[Mapping[str, Any]], summary: Mapping[str, Any], path: Path,
         title: str) -> None:
    """busbw / fluid bound of every sample per variant (dots) with each variant's mean (bar)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = ratios_by_variant(records)
    names = list(ratios)
    fig, ax = plt.subplots(figsize=(1.8 * len(names) + 3, 4))
    for i, n in enumerate(names):
        xs = ratios[n]
        ax.bar(i, mean(xs) if xs else 0.0, 0.6, alpha=0.5, label=None)
        ax.plot([i] * len(xs), xs, "o", color="black", markersize=4)
    ax.axhline(1.0, color="grey", linewidth=1, label="fluid optimum of the failed fabric")
    ax.axhline(summary["target_ratio"], color="red", linestyle="--", linewidth=1,
               label=f"{summary['target_ratio']:.2f} × bound")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("busbw / fluid bound")
    ax.set_ylim(0, 1.4)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
