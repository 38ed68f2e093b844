"""Telemetry plots (PNG, matplotlib Agg): link utilisation over time, the host-pair traffic
matrix, and per-collective bus bandwidth over time. Input is plain data (what ``GetStatus``
returns, sampled over a run), so every lab can draw them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def link_heatmap(times_s: Sequence[float], links: Sequence[str],
                 utilisation: Sequence[Sequence[float]], path: Path, title: str) -> None:
    """Directed links (rows) × sample times (columns, s since start), colour = utilisation
    (0–1, fraction of the link rate) over the interval ending at that time."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.25 * len(times_s) + 3), 0.32 * len(links) + 1.6))
    im = ax.imshow(utilisation, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0,
                   interpolation="nearest",
                   extent=(times_s[0] - 0.5 * _step(times_s), times_s[-1] + 0.5 * _step(times_s),
                           len(links) - 0.5, -0.5))
    ax.set_yticks(range(len(links)), list(links), fontsize=7)
    ax.set_xlabel("time since start, s")
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, label="utilisation (rate / link rate)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _step(times: Sequence[float]) -> float:
    return (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 1.0


def traffic_heatmap(matrix: Mapping[tuple[str, str], int], hosts: Sequence[str], path: Path,
                    title: str) -> None:
    """Sources (rows) × destinations (columns), colour = MB (10^6 bytes) sent, labelled from
    0.05 MB. Rows include ``<leaf>/*`` sources when the matrix has them."""
    plt = _plt()
    srcs = list(hosts) + sorted({s for s, _ in matrix if s not in hosts})
    data = [[matrix.get((s, d), 0) / 1e6 for d in hosts] for s in srcs]
    fig, ax = plt.subplots(figsize=(0.6 * len(hosts) + 2.5, 0.45 * len(srcs) + 1.6))
    im = ax.imshow(data, cmap="magma_r", interpolation="nearest")
    for i, row in enumerate(data):
        for j, v in enumerate(row):
            if v >= 0.05:
                ax.text(j, i, f"{v:.1f}", ha="center", va="center", fontsize=7,
                        color="white" if v > 0.6 * max(max(r) for r in data) else "black")
    ax.set_xticks(range(len(hosts)), list(hosts), fontsize=8)
    ax.set_yticks(range(len(srcs)), srcs, fontsize=8)
    ax.set_xlabel("destination")
    ax.set_ylabel("source")
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, label="MB sent")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def busbw_plot(series: Mapping[str, tuple[Sequence[float], Sequence[float]]], bound_bps: float,
               path: Path, title: str) -> None:
    """Per collective: (times in s, bus bandwidth in bit/s), with the link-rate bound."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name, (ts, bw) in sorted(series.items()):
        ax.plot(ts, [b / 1e6 for b in bw], marker="o", ms=3, label=name)
    ax.axhline(bound_bps / 1e6, color="grey", ls="--", lw=1, label="link-rate bound")
    ax.set_xlabel("time since start, s")
    ax.set_ylabel("busbw, Mbit/s")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
