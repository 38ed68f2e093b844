"""Side-by-side comparison of routing modes over the same seeds (pure; no Mininet).

Given the runs of an experiment (``results.json["runs"]``), pair every (seed, collective) across
modes and state what pinning bought:

* ``speedup``: ECMP CCT / pinned CCT for the same seed and collective (> 1: pinned was faster);
* ``collision``: the busiest switch-to-switch link direction carried at least
  :data:`COLLISION_FLOWS` ring flows' worth of bytes (measured from OVS port counters);
* ``noise``: run-to-run spread of busbw/bound measured on this machine, taken as the range
  (max − min) of the pinned runs' ratios, which all have the same, collision-free placement and
  differ only in source ports and data. "Pinned never worse than ECMP" is judged against it:
  pinned counts as worse only if its ratio is below ECMP's by more than ``noise``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import mean
from typing import Any

COLLISION_FLOWS = 1.5


def compare_modes(runs: Sequence[Mapping[str, Any]], target_ratio: float,
                  base: str = "ecmp", other: str = "pinned") -> dict[str, Any]:
    """Pair ``base`` and ``other`` runs by (seed, collective) and compute the verdicts.

    Returns a JSON-ready dict: ``rows`` (one per seed and collective), ``noise``, and
    ``verdicts`` (booleans and the numbers behind them). Modes absent from ``runs`` give an
    empty comparison with only ``all_correct`` and the per-mode minima.
    """
    by_key: dict[tuple[str, int, str], Mapping[str, Any]] = {}
    max_flows: dict[tuple[str, int], float | None] = {}
    for run in runs:
        max_flows[(run["mode"], run["seed"])] = run.get("max_flows_per_fabric_link")
        for c in run["collectives"]:
            by_key[(run["mode"], run["seed"], c["collective"])] = c
    seeds = sorted({k[1] for k in by_key})
    colls = sorted({k[2] for k in by_key})
    ratios: dict[str, list[float]] = {}
    for (mode, _s, _c), e in by_key.items():
        if e.get("busbw_over_bound") is not None:
            ratios.setdefault(mode, []).append(e["busbw_over_bound"])
    other_ratios = ratios.get(other, [])
    noise = (max(other_ratios) - min(other_ratios)) if len(other_ratios) > 1 else 0.0
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        for coll in colls:
            b = by_key.get((base, seed, coll))
            o = by_key.get((other, seed, coll))
            if b is None or o is None:
                continue
            rb, ro = b.get("busbw_over_bound"), o.get("busbw_over_bound")
            speedup = (b["cct_s"] / o["cct_s"]) if b.get("cct_s") and o.get("cct_s") else None
            mf = max_flows.get((base, seed))
            rows.append({
                "seed": seed, "collective": coll,
                f"{base}_cct_s": b.get("cct_s"), f"{base}_busbw_over_bound": rb,
                f"{other}_cct_s": o.get("cct_s"), f"{other}_busbw_over_bound": ro,
                "speedup": None if speedup is None else round(speedup, 3),
                f"{base}_max_flows_per_fabric_link": mf,
                f"{base}_collision": mf is not None and mf >= COLLISION_FLOWS,
                f"{other}_worse_beyond_noise": (rb is not None and ro is not None
                                                and ro < rb - noise),
                "both_correct": bool(b.get("correct")) and bool(o.get("correct")),
            })
    all_correct = all(bool(e.get("correct")) for e in by_key.values())
    collided = sorted({r["seed"] for r in rows if r[f"{base}_collision"]})
    verdicts: dict[str, Any] = {
        "all_correct": all_correct,
        f"{other}_min_busbw_over_bound": min(other_ratios) if other_ratios else None,
        f"{other}_meets_target": bool(other_ratios) and min(other_ratios) >= target_ratio,
        f"{base}_mean_busbw_over_bound": round(mean(ratios[base]), 4) if ratios.get(base) else None,
        f"{base}_worst_busbw_over_bound": min(ratios[base]) if ratios.get(base) else None,
        f"{other}_mean_busbw_over_bound": round(mean(other_ratios), 4) if other_ratios else None,
        f"{base}_seeds_with_collision": collided,
        f"{other}_never_worse": bool(rows) and not any(r[f"{other}_worse_beyond_noise"] for r in rows),
        "target_ratio": target_ratio,
    }
    return {"base": base, "other": other, "noise": round(noise, 4), "rows": rows,
            "verdicts": verdicts}


def comparison_table(cmp: Mapping[str, Any]) -> Any:
    """A rich Table: per seed and collective, both modes side by side."""
    from rich.table import Table

    b, o = cmp["base"], cmp["other"]
    t = Table(title=f"{b} vs {o}: busbw as a fraction of the link-rate bound", title_justify="left")
    for col in ("seed", "collective", f"{b} CCT s", f"{b} busbw/bound", f"{b} busiest link",
                f"{o} CCT s", f"{o} busbw/bound", "speed-up"):
        t.add_column(col, justify="left" if col == "collective" else "right", no_wrap=True)

    def f(x: Any, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    for r in cmp["rows"]:
        mf = r[f"{b}_max_flows_per_fabric_link"]
        t.add_row(
            str(r["seed"]), r["collective"],
            f(r[f"{b}_cct_s"], ".2f"), f(r[f"{b}_busbw_over_bound"], ".3f"),
            "-" if mf is None else f"{mf:.2f} flows" + (" collision" if r[f"{b}_collision"] else ""),
            f(r[f"{o}_cct_s"], ".2f"), f(r[f"{o}_busbw_over_bound"], ".3f"),
            "-" if r["speedup"] is None else f"{r['speedup']:.2f}x",
        )
    return t


def verdict_lines(cmp: Mapping[str, Any]) -> list[str]:
    """Plain-text conclusions, each with the numbers behind it."""
    b, o, v = cmp["base"], cmp["other"], cmp["verdicts"]
    n_seeds = len({r["seed"] for r in cmp["rows"]})
    lines = [f"all results correct sums: {'yes' if v['all_correct'] else 'NO'}"]
    if v[f"{o}_min_busbw_over_bound"] is not None:
        lines.append(
            f"{o} busbw >= {v['target_ratio']:.2f} x bound: "
            f"{'yes' if v[f'{o}_meets_target'] else 'NO'} "
            f"(min {v[f'{o}_min_busbw_over_bound']:.3f}, mean {v[f'{o}_mean_busbw_over_bound']:.3f})"
        )
    if v[f"{b}_mean_busbw_over_bound"] is not None:
        lines.append(
            f"{b}: hash collisions on {len(v[f'{b}_seeds_with_collision'])} of {n_seeds} seeds "
            f"{v[f'{b}_seeds_with_collision']}; busbw/bound mean "
            f"{v[f'{b}_mean_busbw_over_bound']:.3f}, worst {v[f'{b}_worst_busbw_over_bound']:.3f}"
        )
    if cmp["rows"]:
        lines.append(
            f"{o} never worse than {b} in the same seed (beyond run-to-run noise "
            f"{cmp['noise']:.3f}): {'yes' if v[f'{o}_never_worse'] else 'NO'}"
        )
        for r in cmp["rows"]:
            if r[f"{o}_worse_beyond_noise"]:
                lines.append(
                    f"  seed {r['seed']} {r['collective']}: {o} {r[f'{o}_busbw_over_bound']:.3f} vs "
                    f"{b} {r[f'{b}_busbw_over_bound']:.3f}"
                    + (" (no collision in that seed: both modes put one ring flow on every link)"
                       if not r[f"{b}_collision"] else "")
                )
    return lines
