"""Pure analysis of collectives on a fabric: link-rate bounds, per-link load in units of one
flow, a collective's results entry (nccl-tests algbw/busbw), the per-run table and the busbw plot.
No Mininet, no processes: testable anywhere."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import networkx as nx

from controller.model.topology import Fabric
from controller.policy import Collective
from mininet_labs.workloads.ring_allreduce import CollectiveResult, busbw_factor

TARGET_RATIO = 0.85
GB = 8e9  # bits per GB (decimal), for GB/s figures


def ring_pairs(coll: Collective) -> list[tuple[str, str]]:
    """(src, dst) host pairs of a ring: rank i → rank i+1 (mod n)."""
    n = len(coll.ranks)
    return [(coll.ranks[i], coll.ranks[(i + 1) % n]) for i in range(n)]


def ring_bound_bps(fabric: Fabric, coll: Collective) -> int:
    """The link-rate bound on a ring all-reduce's busbw: the slowest link on any shortest path
    of any ring hop (a ring moves at its slowest hop; nccl-tests busbw equals that link rate for
    a ring without contention).
    """
    g = fabric.graph()
    slowest: int | None = None
    for a, b in ring_pairs(coll):
        for path in nx.all_shortest_paths(g, a, b):
            for u, v in zip(path, path[1:], strict=False):
                c = int(g.edges[u, v]["capacity_bps"])
                slowest = c if slowest is None else min(slowest, c)
    if slowest is None:
        raise ValueError(f"collective {coll.name} has no paths")
    return slowest


def flows_per_link(loads: Mapping[str, int], flow_bytes: float, fabric: Fabric) -> dict[str, float]:
    """Fabric-link directions (switch to switch) → carried bytes in units of one ring flow."""
    return {
        k: round(v / flow_bytes, 2)
        for k, v in loads.items()
        if flow_bytes > 0 and not any(fabric.is_host(x) for x in k.split("->"))
    }


def collective_entry(name: str, hosts: Sequence[str], res: CollectiveResult, bound_bps: int,
                     src_ports: Sequence[int], dst_port: int,
                     errors: Sequence[str] = ()) -> dict[str, Any]:
    """One collective's record in results.json (bits/s, GB/s and the ratio to the bound)."""
    return {
        "collective": name,
        "hosts": list(hosts),
        "ranks": res.ranks,
        "src_ports": list(src_ports),
        "dst_port": dst_port,
        "bytes": res.bytes,
        "cct_s": round(res.cct_s, 6),
        "algbw_bps": round(res.algbw_bps),
        "busbw_bps": round(res.busbw_bps),
        "algbw_GBps": res.algbw_bps / GB,
        "busbw_GBps": res.busbw_bps / GB,
        "bound_bps": bound_bps,
        "busbw_over_bound": round(res.busbw_bps / bound_bps, 4),
        "busbw_factor": busbw_factor(res.ranks),
        "flow_bytes": res.bytes * busbw_factor(res.ranks),
        "correct": res.correct,
        "digests_equal": res.digests_equal,
        "max_abs_err": res.max_abs_err,
        "errors": list(errors),
    }


def failed_entry(name: str, hosts: Sequence[str], nbytes: int, bound_bps: int,
                 src_ports: Sequence[int], dst_port: int, errors: Sequence[str]) -> dict[str, Any]:
    return {
        "collective": name, "hosts": list(hosts), "ranks": len(hosts),
        "src_ports": list(src_ports), "dst_port": dst_port, "bytes": nbytes, "cct_s": None,
        "algbw_bps": None, "busbw_bps": None, "algbw_GBps": None, "busbw_GBps": None,
        "bound_bps": bound_bps, "busbw_over_bound": None, "busbw_factor": busbw_factor(len(hosts)),
        "flow_bytes": nbytes * busbw_factor(len(hosts)),
        "correct": False, "digests_equal": False, "max_abs_err": None, "errors": list(errors),
    }


def run_table(mode: str, seed: int, entries: Sequence[Mapping[str, Any]],
              max_flows: float | None, note: str | None = None) -> Any:
    """A rich Table of one (mode, seed) run (``note``: the scale note, as its caption)."""
    from rich.table import Table

    title = f"mode {mode}, seed {seed}"
    if max_flows is not None:
        title += f" (busiest fabric link carried {max_flows:g} ring flows)"
    t = Table(title=title)
    for col in ("collective", "MB", "CCT s", "algbw Mbit/s", "busbw Mbit/s", "bound Mbit/s",
                "busbw/bound", "correct"):
        t.add_column(col, justify="right" if col != "collective" else "left")
    for e in entries:
        ratio = e["busbw_over_bound"]
        style = "" if ratio is None else ("green" if ratio >= TARGET_RATIO else "yellow")
        t.add_row(
            e["collective"],
            f"{(e.get('bytes') or 0) / 1e6:g}",
            "-" if e.get("cct_s") is None else f"{e['cct_s']:.2f}",
            "-" if e.get("algbw_bps") is None else f"{e['algbw_bps'] / 1e6:.1f}",
            "-" if e.get("busbw_bps") is None else f"{e['busbw_bps'] / 1e6:.1f}",
            f"{e['bound_bps'] / 1e6:.1f}",
            "-" if ratio is None else f"[{style}]{ratio:.3f}[/]",
            "yes" if e["correct"] else "[red]NO[/]",
        )
    t.caption = note
    return t


def plot_busbw(runs: Sequence[Mapping[str, Any]], path: Path, title: str) -> None:
    """busbw / link-rate bound per mode and seed, one panel per collective, a line at 0.85."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    collectives = sorted({c["collective"] for r in runs for c in r["collectives"]})
    modes = list(dict.fromkeys(r["mode"] for r in runs))
    seeds = list(dict.fromkeys(r["seed"] for r in runs))
    fig, axes = plt.subplots(1, len(collectives), figsize=(5.5 * len(collectives), 4),
                             squeeze=False, sharey=True)
    width = 0.8 / max(1, len(modes))
    for ax, coll in zip(axes[0], collectives, strict=False):
        for mi, mode in enumerate(modes):
            ys = []
            for seed in seeds:
                v = next((c["busbw_over_bound"] for r in runs if r["mode"] == mode
                          and r["seed"] == seed for c in r["collectives"]
                          if c["collective"] == coll), None)
                ys.append(0.0 if v is None else v)
            xs = [i + (mi - (len(modes) - 1) / 2) * width for i in range(len(seeds))]
            ax.bar(xs, ys, width, label=mode)
        ax.axhline(TARGET_RATIO, color="red", linestyle="--", linewidth=1,
                   label=f"{TARGET_RATIO:.2f} x bound")
        ax.set_xticks(range(len(seeds)), [str(s) for s in seeds])
        ax.set_xlabel("seed")
        ax.set_title(coll)
        ax.set_ylim(0, 1.25)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("busbw / link-rate bound")
    axes[0][-1].legend(loc="upper right", fontsize=8, ncol=len(modes) + 1)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
