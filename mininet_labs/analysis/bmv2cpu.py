"""The BMv2 switches' CPU over a lab run (pure): what each ``simple_switch_grpc`` used, from two
readings of its process's CPU time (:func:`mininet_labs.lab.p4net.bmv2_cpu_s`), as seconds and
as a share of one core over the run's wall time.

A BMv2 lab on a shared 2-core machine is only as good as the CPU its switches get: a switch
that needs 40 % of a core per run competes with the hosts' TCP stacks and the controller, and
the queueing that adds lowers busbw. These numbers go with every BMv2 run's results so a
reader sees what the data plane cost (``bench/bmv2_packet_cost.py`` measures it per packet).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def cpu_used(before: Mapping[str, float], after: Mapping[str, float], wall_s: float
             ) -> dict[str, dict[str, float]]:
    """``{switch: {"cpu_s": seconds, "core_share": cpu_s / wall_s}}`` of every switch read
    both times (a switch that restarted or vanished in between is left out).

    >>> cpu_used({"s1": 1.0, "s2": 2.0}, {"s1": 1.5, "s2": 2.0}, 2.0)
    {'s1': {'cpu_s': 0.5, 'core_share': 0.25}, 's2': {'cpu_s': 0.0, 'core_share': 0.0}}

    Raises
    ------
    ValueError
        ``wall_s`` not positive.
    """
    if wall_s <= 0:
        raise ValueError(f"wall_s must be > 0, got {wall_s}")
    out: dict[str, dict[str, float]] = {}
    for sw in sorted(before):
        if sw in after and after[sw] >= before[sw]:
            cpu = round(after[sw] - before[sw], 3)
            out[sw] = {"cpu_s": cpu, "core_share": round(cpu / wall_s, 4)}
    return out


def cpu_line(used: Mapping[str, Mapping[str, float]]) -> str:
    """One line for a run's report: every switch's CPU seconds and share of a core, and the
    total.

    >>> cpu_line({"leaf1": {"cpu_s": 0.5, "core_share": 0.1}})
    'BMv2 CPU over the run: leaf1 0.50 s (10% of a core); total 0.50 s (10% of a core)'
    """
    if not used:
        return "BMv2 CPU over the run: not read"
    parts = [f"{sw} {u['cpu_s']:.2f} s ({u['core_share'] * 100:.0f}% of a core)"
             for sw, u in used.items()]
    tot = sum(u["cpu_s"] for u in used.values())
    share = sum(u["core_share"] for u in used.values())
    return (f"BMv2 CPU over the run: {', '.join(parts)}; total {tot:.2f} s "
            f"({share * 100:.0f}% of a core)")


def cpu_summary(records: Sequence[Mapping[str, Any]], key: str = "mode"
                ) -> dict[str, dict[str, dict[str, float]]]:
    """Per ``record[key]`` (a mode, a variant), per switch: the CPU seconds summed over its
    runs and the mean share of a core. Records without ``bmv2_cpu`` are skipped."""
    acc: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for r in records:
        for sw, u in (r.get("bmv2_cpu") or {}).items():
            acc.setdefault(str(r[key]), {}).setdefault(sw, []).append(
                (u["cpu_s"], u["core_share"]))
    return {k: {sw: {"cpu_s": round(sum(c for c, _ in xs), 3),
                     "core_share": round(sum(s for _, s in xs) / len(xs), 4)}
                for sw, xs in sorted(per.items())}
            for k, per in acc.items()}


def cpu_table(summary: Mapping[str, Mapping[str, Mapping[str, float]]], title: str) -> Any:
    """A rich Table: one row per switch, per mode its CPU seconds and mean share of a core."""
    from rich.table import Table

    t = Table(title=title)
    t.add_column("switch", justify="left")
    modes = list(summary)
    for m in modes:
        t.add_column(f"{m} CPU s", justify="right")
        t.add_column(f"{m} % of a core", justify="right")
    switches = sorted({sw for per in summary.values() for sw in per})
    for sw in switches:
        row = [sw]
        for m in modes:
            u = summary[m].get(sw)
            row += (["-", "-"] if u is None
                    else [f"{u['cpu_s']:.2f}", f"{u['core_share'] * 100:.1f}"])
        t.add_row(*row)
    row = ["total"]
    for m in modes:
        row += [f"{sum(u['cpu_s'] for u in summary[m].values()):.2f}",
                f"{sum(u['core_share'] for u in summary[m].values()) * 100:.1f}"]
    t.add_row(*row)
    return t
