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

from mininet_labs.analysis.verdict import Verdict

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


def weights_equal_across_modes(runs: Sequence[Mapping[str, Any]], base: str = "ecmp",
                               other: str = "pinned") -> tuple[bool, list[str]] | None:
    """For DDP runs: whether the final weights' digest of every (seed, collective) is the same
    under ``base`` and ``other`` routing (the network must not change the math); None when no
    run carries weights. Returns ``(held, mismatches)``."""
    got: dict[tuple[int, str], dict[str, str | None]] = {}
    for run in runs:
        for c in run["collectives"]:
            if "weights_identical_across_ranks" in c:
                got.setdefault((run["seed"], c["collective"]), {})[run["mode"]] = \
                    c.get("weights_digest")
    if not got:
        return None
    bad = [f"seed {s} {c}: {d.get(base)} vs {d.get(other)}" for (s, c), d in sorted(got.items())
           if base in d and other in d and (d[base] is None or d[base] != d[other])]
    return not bad, bad


def verdicts_of(cmp: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> list[Verdict]:
    """The verdicts of an ECMP-vs-pinned comparison (:func:`compare_modes`), with the numbers:
    all results correct; the pinned mode's busbw at least the target fraction of the bound on
    every sample (timing-sensitive: a loaded CPU slows the userspace datapath); ECMP hash
    collisions seen; pinned never worse than ECMP in the same seed beyond the pinned runs'
    spread (timing-sensitive); and, for DDP, the final weights identical on every rank and
    equal between the modes of one seed."""
    b, o, v = cmp["base"], cmp["other"], cmp["verdicts"]
    n_seeds = len({r["seed"] for r in runs})
    out = [Verdict("all_correct", bool(v["all_correct"]),
                   f"{sum(bool(c.get('correct')) for r in runs for c in r['collectives'])} of "
                   f"{sum(len(r['collectives']) for r in runs)} collectives correct")]
    if v[f"{o}_min_busbw_over_bound"] is not None:
        out.append(Verdict(f"{o}_meets_target", bool(v[f"{o}_meets_target"]),
                           f"{o} busbw/bound min {v[f'{o}_min_busbw_over_bound']:.3f}, mean "
                           f"{v[f'{o}_mean_busbw_over_bound']:.3f}, target "
                           f"{v['target_ratio']:.2f}", timing_sensitive=True))
    if v[f"{b}_mean_busbw_over_bound"] is not None and cmp["rows"]:
        seen = v[f"{b}_seeds_with_collision"]
        out.append(Verdict(f"{b}_collisions_seen", bool(seen),
                           f"hash collisions on {len(seen)} of {n_seeds} seeds {seen}; {b} "
                           f"busbw/bound mean {v[f'{b}_mean_busbw_over_bound']:.3f}, worst "
                           f"{v[f'{b}_worst_busbw_over_bound']:.3f}"))
    if cmp["rows"]:
        worse = [f"seed {r['seed']} {r['collective']}" for r in cmp["rows"]
                 if r[f"{o}_worse_beyond_noise"]]
        out.append(Verdict(f"{o}_never_worse", bool(v[f"{o}_never_worse"]),
                           f"beyond the {o} runs' spread {cmp['noise']:.3f}"
                           + (f"; worse: {', '.join(worse)}" if worse else ""),
                           timing_sensitive=True))
    ddp = [c for r in runs for c in r["collectives"] if "weights_identical_across_ranks" in c]
    if ddp:
        same = all(c["weights_identical_across_ranks"] for c in ddp)
        out.append(Verdict("weights_identical_across_ranks", same,
                           f"{sum(c['weights_identical_across_ranks'] for c in ddp)} of "
                           f"{len(ddp)} DDP jobs ended with bit-identical weights on every rank"))
        across = weights_equal_across_modes(runs, b, o)
        if across is not None:
            out.append(Verdict(f"weights_equal_{b}_vs_{o}", across[0],
                               "equal final weights for every seed and collective"
                               if across[0] else "; ".join(across[1][:4])))
    return out
