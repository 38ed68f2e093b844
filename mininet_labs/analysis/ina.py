"""In-network aggregation, counted (pure): the bytes on the wire per worker and all-reduce the
ina-allreduce lab expects (:mod:`mininet_labs.labs.ina_allreduce` derives them), what it
measured against that, its table and plot. ``exp`` is the lab's experiment (its ``spec`` and
``mlp``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from controller.ina.program import ELEMS
from controller.ina.wire import frame_bytes

TCP_HEADERS_BYTES = 14 + 20 + 32  # Ethernet + IPv4 + TCP with timestamps
VARIANTS = ("clean", "lossy")


def expected_bytes(exp: Any) -> dict[str, Any]:
    """Bytes on the wire per worker and all-reduce, as the module docstring derives them."""
    s, n = exp.spec, exp.spec.workers
    e = exp.mlp.n_params
    c = math.ceil(e / ELEMS)
    packets = c + min(s.pool_size, c)
    ina = packets * frame_bytes()
    ring_payload = 2 * (n - 1) * 4 * e / n
    mss = s.lab.mtu_bytes - 52
    ring_frames = ring_payload + math.ceil(ring_payload / mss) * TCP_HEADERS_BYTES
    return {"parameters": e, "blocks": c, "ina_packets": packets, "ina_frame_bytes": frame_bytes(),
            "ina_bytes": ina, "ring_payload_bytes": round(ring_payload), "mss_bytes": mss,
            "ring_data_frame_bytes": round(ring_frames),
            "payload_ratio": round(n / (2 * (n - 1)), 4),
            "ratio": round(ina / ring_frames, 4)}


def summary(exp: Any, runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    x = expected_bytes(exp)
    out: dict[str, Any] = {"expected": x}
    ring = runs.get("ring", {})
    for v in VARIANTS:
        r = runs.get(v, {})
        if not r.get("correct"):
            continue
        # exact: the schedule's packets, plus this run's retransmissions, minus the packets the
        # loss injection dropped before the socket (310 B each), per worker and all-reduce
        extra = r["retransmitted"] - r["injected_drops_tx"]
        expect = x["ina_bytes"] + extra * frame_bytes() / (exp.spec.workers * exp.spec.steps)
        row = {"measured_tx_per_worker_per_allreduce": r["tx_bytes_per_worker_per_allreduce"],
               "expected_tx_per_worker_per_allreduce": round(expect, 1)}
        if ring.get("correct"):
            row["measured_ratio_vs_ring"] = round(
                r["tx_bytes_per_worker_per_allreduce"] / ring["tx_bytes_per_worker_mean"], 4)
        out[v] = row
    if ring.get("correct"):
        out["ring"] = {"measured_tx_per_worker": ring["tx_bytes_per_worker_mean"],
                       "expected_data_frames_per_worker": x["ring_data_frame_bytes"],
                       "extra_measured_bytes": round(ring["tx_bytes_per_worker_mean"]
                                                     - x["ring_data_frame_bytes"], 1)}
    return out


def table(exp: Any, runs: dict[str, dict[str, Any]], s: dict[str, Any]) -> Any:
    from rich.table import Table

    t = Table("run", "correct", "within bound", "bit-exact", "median step", "retx",
              "injected drops", "tx B/worker/all-reduce", "expected", "vs ring",
              title=f"{exp.spec.name}: {exp.spec.workers} workers, {exp.mlp.n_params} "
                    f"parameters, pool {exp.spec.pool_size}")
    for v in VARIANTS:
        r = runs.get(v)
        if r is None or "within_bound_rate" not in r:
            t.add_row(v, "FAILED", *[""] * 8)
            continue
        row = s.get(v, {})
        t.add_row(v, "yes" if r["correct"] else "NO", f"{r['within_bound_rate']:.6f}",
                  f"{r['exact_rate']:.6f}", f"{r['step_s_median'] * 1e3:.0f} ms",
                  str(r["retransmitted"]), str(r["injected_drops_tx"] + r["injected_drops_rx"]),
                  f"{r['tx_bytes_per_worker_per_allreduce']:.0f}",
                  f"{row.get('expected_tx_per_worker_per_allreduce', 0):.0f}",
                  f"{row['measured_ratio_vs_ring']:.3f}" if "measured_ratio_vs_ring" in row else "")
    ring = runs.get("ring")
    if ring is not None and ring.get("correct"):
        t.add_row("ring", "yes", "(own bound)", "", f"{ring['cct_s'] * 1e3:.0f} ms", "", "",
                  f"{ring['tx_bytes_per_worker_mean']:.0f}",
                  f"{s['expected']['ring_data_frame_bytes']} + ACKs", "1")
    elif ring is not None:
        t.add_row("ring", "FAILED", *[""] * 8)
    return t


def plot(exp: Any, runs: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.6))
    names, vals = [], []
    for v in (*VARIANTS, "ring"):
        r = runs.get(v, {})
        if r.get("correct"):
            names.append(v)
            vals.append(r.get("tx_bytes_per_worker_per_allreduce", r.get("tx_bytes_per_worker_mean", 0)))
    a1.bar(names, [x / 1e3 for x in vals], color=["C0", "C1", "C2"][:len(names)])
    a1.set_ylabel("kB sent per worker per all-reduce")
    a1.set_title("bytes on the wire")
    for v in VARIANTS:
        r = runs.get(v, {})
        if r.get("step_s"):
            a2.plot(range(len(r["step_s"])), [x * 1e3 for x in r["step_s"]], "o-", label=v)
    a2.set_xlabel("training step")
    a2.set_ylabel("all-reduce time, ms (slowest worker)")
    a2.legend()
    fig.suptitle(f"{exp.spec.name}: {exp.spec.workers} workers on BMv2")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
