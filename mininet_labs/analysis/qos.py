"""A collective's share of a link it shares with bulk traffic (pure): the configured share of
its traffic class, one run's measured shares, and the summary, table and plot of the QoS lab.

Measured over the collective's run (the window from the first rank's start to the last rank's
end), two ways:

* at the endpoints: the collective's rate across the bottleneck = (ring flows crossing it) ×
  2(n−1)/n × bytes × 8 / CCT (each ring flow carries 2(n−1)/n of the buffer, nccl-tests
  PERFORMANCE.md), the bulk rate = bytes the bulk receiver got inside the window, the share =
  collective / (collective + bulk);
* at the switches (the verdict uses it): the bytes sent to the collective's destinations and to
  the bulk destination on their access ports, downstream of the bottleneck (so packets it drops
  are not counted), interpolated to the window from samples every 0.2 s; their ratio is the
  collective's share of what crossed the bottleneck.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from controller.policy import Policy
from controller.policy.model import TrafficClass
from mininet_labs.analysis.series import binned_in_window, interpolate
from mininet_labs.workloads.ring_allreduce import busbw_factor

VARIANTS = ("fifo", "qos")


def class_of(policy: Policy, dscp: int) -> TrafficClass | None:
    """The traffic class DSCP ``dscp`` falls in: the class listing it, else the queue-0 class
    (where Open vSwitch puts unlisted values), else None."""
    for tc in policy.traffic_classes:
        if dscp in tc.dscp:
            return tc
    return next((tc for tc in policy.traffic_classes if tc.queue == 0), None)


def configured_share(coll: TrafficClass, bulk: TrafficClass) -> float:
    """The collective's configured share of a port both classes keep busy: 1.0 for a strict
    collective class, else its DWRR weight over the sum of both weights."""
    if coll.scheduling == "strict":
        return 1.0
    if bulk.scheduling == "strict":
        return 0.0
    return (coll.weight or 0) / ((coll.weight or 0) + (bulk.weight or 0))


def rate_in_window_bps(report: Mapping[str, Any], start: float, end: float) -> float:
    """Mean received rate (bit/s) of a bulk receiver's report (``bin_s``, ``bins``) between
    wall-clock times ``start`` and ``end``."""
    if end <= start:
        raise ValueError("the window is empty")
    return binned_in_window(report["bins"], report["bin_s"], start, end) * 8 / (end - start)


def run_record(entry: Mapping[str, Any], reports: Sequence[Mapping[str, Any]],
               bulk: Mapping[str, Any], samples: Sequence[tuple[float, Sequence[float]]],
               flows_on_bottleneck: int, link_bps: float) -> dict[str, Any]:
    """One repeat's measurements (module docstring) from the ring's results ``entry`` and rank
    ``reports``, the bulk receiver's report and the port samples ``(t, (bottleneck tx,
    collective destinations' tx, bulk destination's tx))``."""
    start = min(float(d["start"]) for d in reports)
    end = max(float(d["end"]) for d in reports)
    cct = float(entry["cct_s"])
    coll_bps = flows_on_bottleneck * busbw_factor(int(entry["ranks"])) * entry["bytes"] * 8 / cct
    bulk_bps = rate_in_window_bps(bulk, start, end)
    switch_side: dict[str, Any]
    try:
        (tx0, c0, b0), (tx1, c1, b1) = interpolate(samples, start), interpolate(samples, end)
        switch_side = {"collective_share": round((c1 - c0) / (c1 - c0 + b1 - b0), 4),
                       "collective_bps": round((c1 - c0) * 8 / (end - start)),
                       "bulk_bps": round((b1 - b0) * 8 / (end - start)),
                       "port_tx_bps": round((tx1 - tx0) * 8 / (end - start)),
                       "samples": len(samples)}
    except (ValueError, ZeroDivisionError) as exc:
        switch_side = {"error": str(exc), "samples": len(samples)}
    return {"switch_side": switch_side, "cct_s": round(cct, 3),
            "busbw_bps": entry["busbw_bps"], "collective_bottleneck_bps": round(coll_bps),
            "bulk_bps": round(bulk_bps), "collective_share": round(coll_bps / (coll_bps + bulk_bps), 4),
            "bottleneck_utilisation": round((coll_bps + bulk_bps) / link_bps, 4),
            "bulk_connections": bulk["connections"]}


def summary(runs: Sequence[Mapping[str, Any]], target: float, tolerance: float) -> dict[str, Any]:
    """Per variant: mean shares (switch side and endpoints), busbw, CCT, bulk rate; whether the
    ``qos`` share is within ``tolerance`` × ``target`` of ``target``."""
    out: dict[str, Any] = {"configured_share": target, "tolerance": tolerance, "variants": {}}
    for v in VARIANTS:
        ok = [r for r in runs if r["variant"] == v and r.get("correct")]
        if not ok:
            out["variants"][v] = None
            continue

        def mean(key: str, rows: Sequence[Mapping[str, Any]] = ok) -> float:
            return sum(r[key] for r in rows) / len(rows)

        sw = [r["switch_side"]["collective_share"] for r in ok
              if "collective_share" in r.get("switch_side", {})]
        tx = [r["switch_side"]["port_tx_bps"] for r in ok if "port_tx_bps" in r["switch_side"]]
        out["variants"][v] = {
            "runs": len(ok),
            "port_share": round(sum(sw) / len(sw), 4) if sw else None,
            "port_share_min": min(sw) if sw else None, "port_share_max": max(sw) if sw else None,
            "collective_share": round(mean("collective_share"), 4),
            "share_min": min(r["collective_share"] for r in ok),
            "share_max": max(r["collective_share"] for r in ok),
            "busbw_bps": round(mean("busbw_bps")), "cct_s": round(mean("cct_s"), 3),
            "bulk_bps": round(mean("bulk_bps")),
            "bottleneck_utilisation": round(mean("bottleneck_utilisation"), 4),
            "port_tx_bps": round(sum(tx) / len(tx)) if tx else None,
        }
    q, f = out["variants"].get("qos"), out["variants"].get("fifo")
    share = None if q is None else (q["port_share"] if q["port_share"] is not None
                                    else q["collective_share"])
    out["qos_share"] = share
    out["qos_share_within_tolerance"] = bool(share is not None
                                             and abs(share - target) <= tolerance * target)
    if q is not None and f is not None and q["cct_s"] > 0:
        out["cct_speedup"] = round(f["cct_s"] / q["cct_s"], 3)
    return out


def table(s: Mapping[str, Any], collective: str, bottleneck: tuple[str, str], link_bps: float,
          title: str) -> Any:
    """A rich Table: one row per variant."""
    from rich.table import Table

    u, v = bottleneck
    t = Table("variant", "share of port bytes", "share (endpoints)", "configured",
              f"{collective} busbw", "CCT", "bulk", f"{u}->{v} sent", title=title)
    for name in VARIANTS:
        r = s["variants"].get(name)
        if r is None:
            t.add_row(name, "failed", "", "", "", "", "", "")
            continue
        port = ("n/a" if r["port_share"] is None else
                f"{r['port_share']:.3f} ({r['port_share_min']:.3f}-{r['port_share_max']:.3f})")
        t.add_row(name, port,
                  f"{r['collective_share']:.3f} ({r['share_min']:.3f}-{r['share_max']:.3f})",
                  f"{s['configured_share']:.3f}" if name == "qos" else "none (FIFO)",
                  f"{r['busbw_bps'] / 1e6:.2f} Mbit/s", f"{r['cct_s']:.2f} s",
                  f"{r['bulk_bps'] / 1e6:.2f} Mbit/s",
                  "-" if r["port_tx_bps"] is None else f"{r['port_tx_bps'] / link_bps:.0%}")
    return t


def plot(runs: Sequence[Mapping[str, Any]], target: float, tolerance: float, ylabel: str,
         title: str, path: Path) -> None:
    """Each repeat's share per variant, the configured share and its tolerance band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, v in enumerate(VARIANTS):
        shares = [r["switch_side"].get("collective_share", r["collective_share"])
                  for r in runs if r["variant"] == v and r.get("correct")]
        ax.scatter([i] * len(shares), shares, label=f"{v} ({len(shares)} runs)")
    ax.axhline(target, ls="--", color="k", label="configured share")
    ax.axhspan(target * (1 - tolerance), target * (1 + tolerance), color="0.9")
    ax.set_xticks(range(len(VARIANTS)), VARIANTS)
    ax.set_ylim(0, 1)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
