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


def table(cases: list[dict[str, Any]], openflow: dict[str, Any] | None = None) -> Any:
    """The lab's table, one row per case; with ``openflow`` (:func:`openflow_reference`), the
    Open vSwitch run's gap of the same failure beside this run's (:func:`openflow_gap`)."""
    from rich.table import Table

    t = Table(title="link failure mid-collective: probe gap and collective results")
    cols = ["case", "link down", "fast failover", "gap ms", "lost", "resumed ms", "bound ms"]
    if openflow is not None:
        cols.append("Open vSwitch gap ms")
    cols += ["congestion gap ms", "CCT s (per collective)", "correct"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("case", "link down") else "right")
    for c in cases:
        ok = all(x["correct"] for x in c["collectives"])
        row = [c["case"], "-".join(c["link"]),
               "yes" if c["fast_failover"] else "no",
               f"{c['gap_ms']:.1f}", str(c["gap_lost_packets"]),
               "-" if c["resumed_after_failure_ms"] is None
               else f"{c['resumed_after_failure_ms']:.1f}",
               f"{c['max_gap_ms_allowed']:.0f}"]
        if openflow is not None:
            g = openflow_gap(openflow, c)
            row.append("-" if g is None else f"{g:.1f}")
        row += [f"{c['max_congestion_gap_ms']:.1f}",
                " ".join("-" if x["cct_s"] is None else f"{x['cct_s']:.2f}"
                         for x in c["collectives"]),
                "yes" if ok else "[red]NO[/]"]
        t.add_row(*row)
    if openflow is not None:
        t.caption = (f"Open vSwitch: {openflow['file']} ({openflow['when']}, load average "
                     f"{openflow['load_average']})")
    return t


def openflow_reference(results_json: Path) -> dict[str, Any]:
    """The cases of an Open vSwitch run of the lab (its ``results.json``): ``cases`` (name,
    link role, fast failover, flapped, gap), with when it ran and its load average; ``cases``
    empty (and ``error`` set) when the file is missing or not such a run, so the table says so
    instead of failing the BMv2 run."""
    import json
    import time

    out: dict[str, Any] = {"file": str(results_json), "cases": [], "when": "-",
                           "load_average": "-"}
    try:
        data = json.loads(Path(results_json).read_text())
        out["cases"] = [{"case": r["case"], "link_role": r["link_role"],
                         "fast_failover": bool(r["fast_failover"]),
                         "flapped": bool(r.get("flaps")), "gap_ms": float(r["gap_ms"])}
                        for r in data["runs"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        out["error"] = f"no Open vSwitch results read from {results_json}: {exc}"
        return out
    env = data.get("environment", {})
    out["load_average"] = f"{env.get('load_average_start')} -> {env.get('load_average_end')}"
    out["when"] = time.strftime("%Y-%m-%d %H:%M", time.localtime(Path(results_json).stat()
                                                                  .st_mtime))
    return out


def openflow_gap(openflow: dict[str, Any], case: dict[str, Any]) -> float | None:
    """The Open vSwitch gap of the same failure as ``case``: same link role, fast failover and
    flapping (a BMv2 case's name may differ: ``downlink-bounce`` is Open vSwitch's
    ``downlink-repin``, the same failure handled by the data plane); None when it ran none.

    >>> ovs = {"cases": [{"case": "downlink-repin", "link_role": "destination-downlink",
    ...                   "fast_failover": True, "flapped": False, "gap_ms": 63.1}]}
    >>> openflow_gap(ovs, {"link_role": "destination-downlink", "fast_failover": True})
    63.1
    """
    for c in openflow.get("cases", ()):
        if (c["link_role"], c["fast_failover"], c["flapped"]) == (
                case["link_role"], case["fast_failover"], bool(case.get("flaps"))):
            return float(c["gap_ms"])
    return None


def controller_cpu(cpu_s: float, wall_s: float, links: int) -> dict[str, float]:
    """The controller's CPU over a case: seconds, share of one core, and per switch–switch
    link (µs of CPU per second per link: what each link's liveness probes, packet-ins and
    counters cost it).

    >>> controller_cpu(1.5, 10.0, 16)
    {'cpu_s': 1.5, 'core_share': 0.15, 'us_per_link_s': 9375.0}

    Raises
    ------
    ValueError
        ``wall_s`` or ``links`` not positive.
    """
    if wall_s <= 0 or links <= 0:
        raise ValueError(f"wall_s {wall_s} and links {links} must be > 0")
    return {"cpu_s": round(cpu_s, 3), "core_share": round(cpu_s / wall_s, 4),
            "us_per_link_s": round(cpu_s / wall_s / links * 1e6, 1)}


def cpu_line(case: str, cpu: dict[str, float]) -> str:
    """One line: the controller's CPU over ``case``."""
    return (f"controller CPU during {case}: {cpu['cpu_s']:.2f} s, {cpu['core_share'] * 100:.1f} "
            f"% of a core, {cpu['us_per_link_s']:.0f} µs per second per switch-switch link")


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
