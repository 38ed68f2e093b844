"""Plots of a TE comparison (the I/O edge of :mod:`controller.sim`): matplotlib Agg → PNG."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from controller.sim.compare import Outcome


def write_plots(outcomes: Sequence[Outcome], out_dir: Path, title: str = "") -> list[Path]:
    """Write ``slowdown_cdf.png`` (CDF of per-collective slowdown per strategy and condition;
    ECMP seeds pooled) and ``link_utilisation.png`` (histogram of directed-link utilisation at
    t = 0), each titled (``title``: the scenario's name). Returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    pooled: dict[str, list[float]] = {}
    utils: dict[str, list[float]] = {}
    for o in outcomes:
        key = f"{'ecmp' if o.strategy.startswith('ecmp#') else o.strategy} ({o.condition})"
        pooled.setdefault(key, []).extend(o.slowdown.values())
        utils.setdefault(key, []).extend(o.utilisation)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, vals in pooled.items():
        xs = np.sort(vals)
        ax.step(xs, np.arange(1, len(xs) + 1) / len(xs), where="post", label=key)
    ax.set_xlabel("collective slowdown (CCT / ideal)")
    ax.set_ylabel("CDF")
    ax.set_title(f"{title}: CDF of collective slowdown per strategy and condition".lstrip(": "))
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    cdf = out_dir / "slowdown_cdf.png"
    fig.tight_layout()
    fig.savefig(cdf, dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bins = np.linspace(0, 1, 21).tolist()
    for key, vals in utils.items():
        if "intact" in key:
            ax.hist(vals, bins=bins, histtype="step", label=key)
    ax.set_xlabel("directed link utilisation at t = 0")
    ax.set_ylabel("links")
    ax.set_title(f"{title}: link utilisation at t = 0, intact fabric".lstrip(": "))
    ax.legend(fontsize=7)
    hist = out_dir / "link_utilisation.png"
    fig.tight_layout()
    fig.savefig(hist, dpi=120)
    plt.close(fig)
    return [cdf, hist]
