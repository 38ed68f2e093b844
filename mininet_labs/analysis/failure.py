"""A link failure seen by a probe (pure): which outage of the probe stream the failure caused,
and the link-failure lab's table and plot.

The probe (:mod:`mininet_labs.workloads.udp_probe`) carries a sequence number and a send time
in every packet; :func:`mininet_labs.workloads.udp_probe.analyse` finds its outages (runs of
lost sequence numbers). The failure's outage is the one whose send-time interval spans the
link-down command; the others are congestion drops (the probe shares its path with a ring flow
that fills the link and its queue).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def failure_outage(report: dict[str, Any], t_fail: float, t_done: float
                   ) -> dict[str, Any] | None:
    """The probe outage the failure caused: the run of lost packets whose send-time interval
    (last delivered before, first delivered after) overlaps the link-down command
    [``t_fail``, ``t_done``] (s since the epoch); None when no packet sent then was lost. Other
    outages are ordinary congestion drops (the probe shares its path with a ring flow that
    fills the link and its 20-packet queue)."""
    hit = [o for o in report["outages"]
           if o["start_send_s"] <= t_done and o["end_send_s"] >= t_fail]
    return max(hit, key=lambda o: o["gap_ms"], default=None)


def table(cases: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    t = Table(title="link failure mid-collective: probe gap and collective results")
    for col in ("case", "link down", "fast failover", "gap ms", "lost", "resumed ms",
                "bound ms", "congestion gap ms", "CCT s (per collective)", "correct"):
        t.add_column(col, justify="left" if col in ("case", "link down") else "right")
    for c in cases:
        ok = all(x["correct"] for x in c["collectives"])
        t.add_row(c["case"], "-".join(c["link"]), "yes" if c["fast_failover"] else "no",
                  f"{c['gap_ms']:.1f}", str(c["gap_lost_packets"]),
                  "-" if c["resumed_after_failure_ms"] is None
                  else f"{c['resumed_after_failure_ms']:.1f}",
                  f"{c['max_gap_ms_allowed']:.0f}", f"{c['max_congestion_gap_ms']:.1f}",
                  " ".join("-" if x["cct_s"] is None else f"{x['cct_s']:.2f}"
                           for x in c["collectives"]),
                  "yes" if ok else "[red]NO[/]")
    return t


def plot(cases: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = [c["case"] for c in cases]
    ax.bar(names, [c["gap_ms"] for c in cases],
           color=["tab:green" if c["fast_failover"] and c["link_role"] == "source-uplink"
                  else "tab:orange" for c in cases])
    for i, c in enumerate(cases):
        ax.text(i, c["gap_ms"], f"{c['gap_ms']:.1f} ms\n({c['gap_lost_packets']} lost)",
                ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("probe gap at the failure, ms")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def failure_record(sent: dict[str, Any], recv: dict[str, Any], t_fail: float, t_done: float,
                   max_gap_s: float) -> dict[str, Any]:
    """The probe's view of one failure: the outage it caused (``gap_ms``, ``gap_lost_packets``),
    the longest other outage, when traffic resumed (ms after the link-down command: the send time
    of the first packet delivered after the outage), and whether the gap stayed below
    ``max_gap_s`` with traffic resuming. ``sent``/``recv``: the probe's reports."""
    from mininet_labs.workloads.udp_probe import analyse

    rep = analyse(recv["records"], sent["sent"], sent["interval_us"])
    outage = failure_outage(rep, t_fail, t_done)
    send_times = [r[1] / 1e9 for r in recv["records"]]
    after = t_fail + (outage["gap_ms"] / 1e3 if outage else 0)
    resumed = min((t for t in send_times if t > after), default=None)
    gap_ms = outage["gap_ms"] if outage else 0.0
    return {
        "probe": {"interval_us": sent["interval_us"], "payload_bytes": sent["payload_bytes"],
                  "sent": rep["sent"], "received": rep["received"], "lost": rep["lost"],
                  "lost_to_congestion": rep["lost"] - rep["tail_lost"]
                  - (outage["lost"] if outage else 0),
                  "tail_lost": rep["tail_lost"], "duplicates": rep["duplicates"],
                  "reordered": rep["reordered"], "corrupt": recv["corrupt"],
                  "send_errors": sent["send_errors"], "outages": rep["outages"][:20],
                  "one_way_delay_ms": rep["one_way_delay_ms"]},
        "gap_ms": gap_ms,
        "gap_lost_packets": outage["lost"] if outage else 0,
        "max_congestion_gap_ms": max((o["gap_ms"] for o in rep["outages"] if o is not outage),
                                     default=0.0),
        "resumed_after_failure_ms": None if resumed is None else round((resumed - t_fail) * 1e3, 1),
        "max_gap_ms_allowed": max_gap_s * 1e3,
        "gap_within_bound": gap_ms < max_gap_s * 1e3 and resumed is not None,
    }
