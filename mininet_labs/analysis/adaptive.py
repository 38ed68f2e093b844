"""Adaptive re-routing, measured (pure): busbw over time from sampled counters, the phases
around a background stream (before, squeezed, after), when the victim flow moved and when busbw
recovered; the table and the plot of the adaptive-reroute lab.

busbw(t) is the mean over ranks of the bytes each rank received per second (a ring all-reduce
moves every rank's data at the bus bandwidth, nccl-tests PERFORMANCE.md), from the tx counters
of the ranks' leaf ports (wire bytes, Ethernet headers included).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def series(samples: list[tuple[float, tuple[list[int | None], int | None, int | None]]],
           t0: float) -> list[dict[str, Any]]:
    """Per sampling window: ``t_s`` (window end, s after ``t0``), ``dt_s``, ``busbw_bps`` (mean
    over ranks of the bits/s each received), ``rank_rx_bps``, ``background_rx_bps`` and the
    victim's ``output`` port at the window end. Windows with a missing counter are skipped."""
    out = []
    for (ta, (ra, ba, _)), (tb, (rb, bb, pb)) in zip(samples, samples[1:], strict=False):
        dt = tb - ta
        if dt <= 0 or None in ra or None in rb or ba is None or bb is None:
            continue
        rates = [8.0 * (b - a) / dt for a, b in zip(ra, rb, strict=True)]  # type: ignore[operator]
        out.append({"t_s": round(tb - t0, 3), "dt_s": round(dt, 3),
                    "busbw_bps": sum(rates) / len(rates),
                    "rank_rx_bps": [round(r) for r in rates],
                    "background_rx_bps": 8.0 * (bb - ba) / dt, "output": pb})
    return out


def mean_busbw(rows: list[dict[str, Any]], lo_s: float, hi_s: float) -> float | None:
    """Time-weighted mean busbw (bit/s) of the windows lying inside [lo_s, hi_s]."""
    sel = [r for r in rows if r["t_s"] - r["dt_s"] >= lo_s - 1e-6 and r["t_s"] <= hi_s + 1e-6]
    tot = sum(r["dt_s"] for r in sel)
    return sum(r["busbw_bps"] * r["dt_s"] for r in sel) / tot if tot > 0 else None


def phases(rows: list[dict[str, Any]], bg_start_s: float, bg_end_s: float, cct_s: float | None,
           first_output: int | None, sample_s: float, target_bps: float,
           victim_rank: int | None = None) -> dict[str, Any]:
    """Events and mean busbw (bit/s) around the background; times in s after the collective
    started.

    ``cct_s``: where the measured part ends (the run uses the first rank's end: after it the
    ring drains rank by rank and the mean over ranks falls whatever the path).
    ``move_s``: end of the first window whose victim output differs from ``first_output``;
    ``recovered_s``: end of the first of two consecutive windows after the relief (the move,
    or the background's end if nothing moved) with busbw ≥ ``target_bps`` (TCP needs a few
    round trips, or a backed-off retransmission timeout, to regain its rate); means before the
    background, while it squeezed the collective (to the relief), and from recovery (else the
    relief) to the collective's end.

    ``victim_rank``: index in ``rank_rx_bps`` of the victim flow's destination (in a ring a
    rank receives from its predecessor only, so that rank's receive rate is the victim flow's
    rate); given, ``victim_rx_before_bps`` / ``victim_rx_during_bps`` are that flow's mean
    rates before the background and while it squeezed the flow (to the relief).
    """
    move = next((r["t_s"] for r in rows if r["t_s"] > bg_start_s and r["output"] is not None
                 and r["output"] != first_output), None)
    end = cct_s if cct_s is not None else (rows[-1]["t_s"] if rows else 0.0)
    relief = move if move is not None and move < bg_end_s else bg_end_s
    later = [r for r in rows if r["t_s"] > relief and r["t_s"] <= end + 1e-6]
    recovered = next((a["t_s"] for a, b in zip(later, later[1:], strict=False)
                      if a["busbw_bps"] >= target_bps and b["busbw_bps"] >= target_bps), None)
    after_from = recovered - sample_s if recovered is not None else relief
    victim: dict[str, Any] = {}
    if victim_rank is not None:
        vrows = [dict(r, busbw_bps=r["rank_rx_bps"][victim_rank]) for r in rows]
        victim = {"victim_rx_before_bps": mean_busbw(vrows, sample_s, bg_start_s),
                  "victim_rx_during_bps": mean_busbw(vrows, bg_start_s, relief)}
    return {
        "move_s": move,
        "move_after_background_s": None if move is None else round(move - bg_start_s, 3),
        "recovered_s": recovered,
        "recovered_after_relief_s": None if recovered is None else round(recovered - relief, 3),
        "busbw_before_bps": mean_busbw(rows, sample_s, bg_start_s),
        "busbw_during_bps": mean_busbw([r for r in rows if r["t_s"] > bg_start_s],
                                       bg_start_s - sample_s, relief),
        "busbw_after_bps": mean_busbw(rows, after_from, end),
        "after_window_s": [round(after_from, 3), round(end, 3)],
        **victim,
    }


def table(modes: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    t = Table(title="adaptive re-routing: busbw of the collective (Mbit/s) around the background")
    for col in ("mode", "CCT s", "busbw/bound", "before", "during", "after",
                "victim flow before/during", "moved after s", "recovered after s", "correct"):
        t.add_column(col, justify="left" if col == "mode" else "right")

    def mb(v: float | None) -> str:
        return "-" if v is None else f"{v / 1e6:.1f}"

    for m in modes:
        c = m["collective"]
        t.add_row(m["mode"], "-" if c["cct_s"] is None else f"{c['cct_s']:.2f}",
                  "-" if c["busbw_over_bound"] is None else f"{c['busbw_over_bound']:.3f}",
                  mb(m["busbw_before_bps"]), mb(m["busbw_during_bps"]), mb(m["busbw_after_bps"]),
                  f"{mb(m.get('victim_rx_before_bps'))} / {mb(m.get('victim_rx_during_bps'))}",
                  "-" if m["move_after_background_s"] is None
                  else f"{m['move_after_background_s']:.1f}",
                  "-" if m["recovered_after_relief_s"] is None
                  else f"{m['recovered_after_relief_s']:.1f}",
                  "yes" if c["correct"] else "[red]NO[/]")
    return t


def plot(modes: list[dict[str, Any]], path: Path, title: str) -> None:
    """busbw(t) per mode, the background's delivered rate, its start, the move, the bound."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(modes), 1, figsize=(9, 3.2 * len(modes)), squeeze=False,
                             sharex=True)
    for ax, m in zip(axes[:, 0], modes, strict=True):
        xs = [r["t_s"] for r in m["series"]]
        ax.step(xs, [r["busbw_bps"] / 1e6 for r in m["series"]], where="post",
                label=f"busbw of {m['collective']['collective']}")
        ax.step(xs, [r["background_rx_bps"] / 1e6 for r in m["series"]], where="post",
                linestyle="--", color="grey", label="background delivered")
        ax.axhline(m["collective"]["bound_bps"] / 1e6, color="red", linewidth=0.8,
                   linestyle=":", label="link-rate bound")
        ax.axvline(m["background_start_s"], color="black", linewidth=0.8)
        ax.text(m["background_start_s"], 0.5, " background starts", fontsize=8)
        if m["move_s"] is not None:
            ax.axvline(m["move_s"], color="green", linewidth=0.8)
            ax.text(m["move_s"], 2.0, " moved", fontsize=8, color="green")
        if m["collective"]["cct_s"]:
            ax.axvline(m["collective"]["cct_s"], color="grey", linewidth=0.5)
        ax.set_ylabel("Mbit/s")
        ax.set_title(f"mode {m['mode']}", fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=7)
    axes[-1, 0].set_xlabel("seconds after the collective started")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
