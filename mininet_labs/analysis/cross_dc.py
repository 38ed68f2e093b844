"""The cross-datacenter lab's numbers (pure): bytes across the DCI per run against the exact
expectation, the collective's DCI share next to bulk, the summary, table and plot.

Expected WAN payload (B bytes per rank, S sites × k ranks, n = S·k;
:func:`mininet_labs.workloads.hierarchical_allreduce.wan_bytes_expected`): a flat ring placed
site by site crosses the DCI twice, 2·2(n−1)/n·B; hierarchical sends each shard across once in
each direction, 2(S−1)·B. WAN bytes are Ethernet frames counted by the delay line (headers and
ACKs included); the ranks' own payload counts must match the expectation exactly.

The DCI share with bulk: the collective's bytes / (collective + bulk bytes) crossing the DCI in
the bulk's direction while the collective used it: flat, the whole CCT (its DCI flow is the
bottleneck throughout); hierarchical, while every shard exchange was in flight (after the last
rank started it, before the first finished), if that lasted at least ``MIN_SHARE_WINDOW_S``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mininet_labs.analysis.verdict import Verdict
from mininet_labs.workloads.hierarchical_allreduce import wan_bytes_expected

ALGORITHMS = ("flat", "hierarchical")
HEADER_ALLOWANCE = 0.05  # Ethernet/IP/TCP headers (~0.7 % at MTU 9000) and ACKs on the WAN
MIN_SHARE_WINDOW_S = 1.0


def windows(algorithm: str, reports: Sequence[Mapping[str, Any]]
            ) -> tuple[tuple[float, float], tuple[float, float] | None]:
    """``(whole window, all-shards-busy window or None)`` of a run (module docstring)."""
    if algorithm == "flat":
        return (min(float(d["start"]) for d in reports), max(float(d["end"]) for d in reports)), None
    whole = (min(float(d["exchange_start"]) for d in reports),
             max(float(d["exchange_end"]) for d in reports))
    busy = (max(float(d["exchange_start"]) for d in reports),
            min(float(d["exchange_end"]) for d in reports))
    return whole, busy if busy[1] - busy[0] >= MIN_SHARE_WINDOW_S else None


def share_record(algorithm: str, reports: Sequence[Mapping[str, Any]],
                 bytes_in: Callable[[tuple[float, float]], tuple[float, float]]) -> dict[str, Any]:
    """The DCI share of a run with bulk; ``bytes_in(window)`` gives (collective, bulk) bytes in
    the bulk's direction."""
    whole, busy = windows(algorithm, reports)
    rec: dict[str, Any] = {}
    if algorithm == "hierarchical":
        c, b = bytes_in(whole)
        rec["wan_share_whole_exchange"] = round(c / (c + b), 4) if c + b else None
    win = busy or whole
    c, b = bytes_in(win)
    rec.update({"share_window": [round(win[0], 3), round(win[1], 3)],
                "wan_share": round(c / (c + b), 4) if c + b > 0 else None,
                "wan_collective_bps": round(c * 8 / (win[1] - win[0])),
                "wan_bulk_bps": round(b * 8 / (win[1] - win[0]))})
    return rec


def summary(runs: Sequence[Mapping[str, Any]], nbytes: int, sites: int, per_site: int,
            n_ranks: int, configured: float, tolerance: float) -> dict[str, Any]:
    """Expectations next to measurements (module docstring)."""
    expect = wan_bytes_expected(nbytes, sites, per_site)
    runs = [r for r in runs if "algorithm" in r]
    get = {(r["variant"], r["algorithm"], r["bulk"]): r for r in runs if r.get("correct")}
    out: dict[str, Any] = {"expected_wan_payload_bytes": expect, "ranks_per_site": per_site,
                           "sites": sites, "configured_share": configured, "tolerance": tolerance,
                           "runs": len(runs), "correct_runs": len(get)}
    qf, qh = get.get(("fifo", "flat", False)), get.get(("fifo", "hierarchical", False))
    if qf and qh:
        out["payload_matches_expectation"] = all(
            abs(q["wan_payload_bytes"] - expect[a]) <= 4 * n_ranks * 2
            for a, q in (("flat", qf), ("hierarchical", qh)))
        out["wan_bytes_within_expectation"] = {
            a: q["wan_frame_bytes"] <= expect[a] * (1 + HEADER_ALLOWANCE)
            for a, q in (("flat", qf), ("hierarchical", qh))}
        per_f = qf["wan_frame_bytes"] / max(1, qf["wan_connections"])
        per_h = qh["wan_frame_bytes"] / max(1, qh["wan_connections"])
        out["measured_per_connection_bytes"] = {"flat": round(per_f), "hierarchical": round(per_h)}
        out["hierarchical_per_connection_le_flat_over_k"] = per_h <= per_f / per_site
        out["measured_ratio_hierarchical_over_flat"] = round(
            qh["wan_frame_bytes"] / qf["wan_frame_bytes"], 4)
    out["expected_ratio_hierarchical_over_flat"] = round(expect["hierarchical"] / expect["flat"], 4)
    out["priority_shares"] = {a: get.get(("priority", a, True), {}).get("wan_share")
                              for a in ALGORITHMS}
    out["share_floor"] = round(configured * (1 - tolerance), 4)
    return out


def verdicts(s: Mapping[str, Any], nbytes: int) -> list[Verdict]:
    e, k = s["expected_wan_payload_bytes"], s["ranks_per_site"]
    out = [Verdict("all_correct", s["runs"] > 0 and s["correct_runs"] == s["runs"],
                   f"{s['correct_runs']} of {s['runs']} runs correct")]
    if "measured_per_connection_bytes" in s:
        m = s["measured_per_connection_bytes"]
        w = s["wan_bytes_within_expectation"]
        out += [
            Verdict("payload_matches_expectation", s["payload_matches_expectation"],
                    f"B = {nbytes} B per rank: flat 2*2(n-1)/n*B = {e['flat']:.0f} B, "
                    f"hierarchical 2(S-1)*B = {e['hierarchical']:.0f} B"),
            Verdict("wan_bytes_within_expectation", all(w.values()),
                    f"frames within payload + {HEADER_ALLOWANCE:.0%}: flat {w['flat']}, "
                    f"hierarchical {w['hierarchical']}; ratio hierarchical/flat "
                    f"{s['measured_ratio_hierarchical_over_flat']} (expected "
                    f"{s['expected_ratio_hierarchical_over_flat']})"),
            Verdict("hierarchical_per_connection_le_flat_over_k",
                    s["hierarchical_per_connection_le_flat_over_k"],
                    f"hierarchical {m['hierarchical']} B <= flat {m['flat']} B / k={k} = "
                    f"{m['flat'] / k:.0f} B per WAN connection")]
    sh = s["priority_shares"]
    out.append(Verdict("priority_keeps_configured_share",
                       all(x is not None and x >= s["share_floor"] for x in sh.values()),
                       f"DCI share with the priority policy: flat {sh['flat']}, hierarchical "
                       f"{sh['hierarchical']}; configured {s['configured_share']:.3f}, floor "
                       f"{s['share_floor']:.3f}", timing_sensitive=True))
    return out


def table(runs: Sequence[Mapping[str, Any]], s: Mapping[str, Any], configured: float,
          title: str) -> Any:
    from rich.table import Table

    e = s["expected_wan_payload_bytes"]
    t = Table("variant", "algorithm", "bulk", "WAN bytes (frames)", "WAN payload",
              "expected payload", "CCT", "busbw", "DCI share", "configured", "correct",
              title=title)
    for r in runs:
        if "algorithm" not in r:
            continue
        if "cct_s" not in r:
            t.add_row(r["variant"], r["algorithm"], "yes" if r["bulk"] else "no", "failed",
                      "", "", "", "", "", "", "no")
            continue
        share = r.get("wan_share")
        t.add_row(r["variant"], r["algorithm"], "yes" if r["bulk"] else "no",
                  f"{r['wan_frame_bytes'] / 1e6:.3f} MB", f"{r['wan_payload_bytes'] / 1e6:.3f} MB",
                  f"{e[r['algorithm']] / 1e6:.3f} MB", f"{r['cct_s']:.2f} s",
                  f"{r['busbw_bps'] / 1e6:.2f} Mbit/s", "" if share is None else f"{share:.3f}",
                  f"{configured:.3f}" if r["variant"] == "priority" and r["bulk"]
                  else ("none (FIFO)" if r["bulk"] else ""),
                  "yes" if r["correct"] else "NO")
    return t


def plot(runs: Sequence[Mapping[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in runs if "cct_s" in r and "algorithm" in r]
    labels = [f"{r['variant']}\n{r['algorithm'][:4]}\n{'bulk' if r['bulk'] else 'quiet'}"
              for r in ok]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    a1.bar(range(len(ok)), [r["wan_frame_bytes"] / 1e6 for r in ok])
    a1.set_xticks(range(len(ok)), labels, fontsize=7)
    a1.set_ylabel("collective bytes across the DCI (MB)")
    a2.bar(range(len(ok)), [r["cct_s"] for r in ok])
    a2.set_xticks(range(len(ok)), labels, fontsize=7)
    a2.set_ylabel("CCT (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
