"""TE at scale (not a test): ``python bench/te_scale.py [--k 32 64] [--subflows 12] [--seeds 20]
[--parts ring,mix,rail] [--collector controller|python|thresholds|off]``.

For k = 32 (8,192 hosts) and k = 64 (65,536 hosts) fat-trees (100 Gb/s everywhere, non-blocking)
and a rail-optimised fabric of 65,536 GPUs (8 rails × 8,192 servers, 32 servers per rail leaf,
32 spines, 400 Gb/s), prints per row (condition × strategy):

* ``plan s`` / ``repair ms`` / ``reopt s``: wall time of :func:`controller.te.placer.place` (the plan),
  :func:`controller.te.recovery.repair` after the failure and
  :func:`controller.te.recovery.reoptimise` after that, with the process's CPU time in
  brackets (other jobs share the machine: the load average is printed);
* ``moved``: flows the repair / the re-optimisation moved;
* ``CCT/opt``: makespan of the fluid model (:mod:`controller.sim.fluid`) divided by the
  splittable optimum T* (:mod:`controller.sim.optimum`: HiGHS LP where it has at most 150,000
  path variables, else the cut bound, which is ≤ the LP, so the ratio is an upper bound);
  for aifabric after the repair and after the re-optimisation (target ≤ 1.05);
* ``table``: the largest number of pinned entries on one switch (every hop / only hops that
  climb, which is what remains after route-redundant entries are dropped) against the P4
  ``pinned`` table's 4,096 (P4Info of p4/fabric).

Garbage collector: ``--collector controller`` (the default) times with the controller's own
settings (:mod:`controller.runtime.collector`): enabled at CPython's thresholds, the heap frozen
after each plan and after each repair and re-optimisation (as the controller freezes it after
every placement it adopts; the freeze is not in the timed work, its time is printed at the end).
``python``: CPython's settings, nothing frozen (what the controller paid before); ``thresholds``:
gen-0 threshold 100,000 (:data:`~controller.runtime.collector.HEAP_THRESHOLDS`), nothing frozen;
``off``: the collector disabled. The settings are printed with the load average.

Strategies: aifabric with one path per flow and with ``--subflows`` sub-flows per flow
(``connections_per_peer``), ECMP (ideal hashing; mean and worst of ``--seeds`` seeds), per-packet
spraying (even split at every hop) and static (destination modulo). Conditions: intact, one
aggregation–core link down (rail: one leaf–spine link), one aggregation switch down (rail: one
spine), and a fragmented job mix (fat-trees): data-parallel rings, one 256-rank all-to-all
(MoE, one coflow) and pipeline-parallel jobs, with per-job CCT / ideal, Jain's fairness, and
aifabric with job-aware priorities by GPU intensity on 8 queues (Crux, SIGCOMM 2024).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import resource
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from controller.model import build_fat_tree
from controller.model.generators import build_rail_optimized
from controller.plan.capacity import capacity_from_p4info, pinned_entries_per_switch
from controller.runtime.collector import (
    DEFAULT_THRESHOLDS,
    HEAP_THRESHOLDS,
    CollectionMeter,
    collector_state,
    configure_collector,
    freeze_heap,
)
from controller.sim.jobs import JobMix, intensity_priorities, job_mix
from controller.sim.optimum import Bound, ideal_s, makespan_bound
from controller.sim.scale import RowResult, ecmp_summary, evaluate_routing, spray_rows
from controller.sim.strategies import ClosRouter
from controller.te.pathindex import PathIndex
from controller.te.patterns import Traffic, demand_rates_bps, rail_rings, ring_allreduce, with_subflows
from controller.te.placement import Placement
from controller.te.placer import LoadPinning, place, reoptimise, repair
from controller.te.reroute import switch_links

RATE_BPS = 100_000_000_000
RAIL_RATE_BPS = 400_000_000_000
P4INFO = Path(__file__).resolve().parent.parent / "p4" / "fabric" / "build" / "fabric.p4info.txtpb"


FREEZE = {"on": False, "s": 0.0, "n": 0, "max_s": 0.0}
"""Whether to freeze the heap after each adopted placement (``--collector controller``), and the
CPU time (in all and the longest) and number of those freezes."""


def adopted() -> None:
    """A placement was adopted: freeze the heap as the controller does (if ``FREEZE["on"]``)."""
    if FREEZE["on"]:
        c0 = time.process_time()
        freeze_heap()
        took = time.process_time() - c0
        FREEZE["s"] += took
        FREEZE["max_s"] = max(FREEZE["max_s"], took)
        FREEZE["n"] += 1


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


GC = CollectionMeter()
"""What the collector ran during each timed repair."""


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def fmt_t(wall: float, cpu: float, ms: bool = False) -> str:
    k = 1e3 if ms else 1.0
    return f"{wall * k:.0f} ({cpu * k:.0f})" if ms else f"{wall:.2f} ({cpu:.2f})"


class Table:
    HEAD = (f"{'condition':<14} {'strategy':<22} {'plan s':>13} {'repair ms':>11} "
            f"{'reopt s':>13} {'moved':>11} {'CCT/opt':>15} {'table':>16}")

    def __init__(self, title: str):
        print(f"\n== {title}")
        print(self.HEAD)
        print("-" * len(self.HEAD))

    @staticmethod
    def row(cond: str, strategy: str, plan: str = "", rep: str = "", reopt: str = "",
            moved: str = "", ratio: str = "", table: str = "") -> None:
        print(f"{cond:<14} {strategy:<22} {plan:>13} {rep:>11} {reopt:>13} {moved:>11} "
              f"{ratio:>15} {table:>16}", flush=True)


def table_use(p: Placement, cap: int) -> str:
    every = int(pinned_entries_per_switch(p).max(initial=0))
    up = int(pinned_entries_per_switch(p, up_only=True).max(initial=0))
    return f"{every}/{up} of {cap}"


def plan(fabric, traffics: list[Traffic], index: PathIndex) -> tuple[LoadPinning, float, float]:
    rates = demand_rates_bps(fabric, traffics)
    out = timed(lambda: place(fabric, rates, index=index))
    adopted()
    return out


def paths_of(p: Placement) -> dict:
    return {f: p.links(i) for i, f in enumerate(p.flows)}


def aifabric_rows(tab: Table, cond: str, name: str, pin: LoadPinning, t_plan: tuple[float, float],
                  traffics: list[Traffic], cond_index: PathIndex, down: frozenset,
                  bound: Bound, ideal: dict, cap: int) -> None:
    placement = pin.placement
    assert placement is not None
    if not down:
        r = evaluate_routing(cond_index, traffics, bound, ideal, paths=paths_of(placement))
        tab.row(cond, name, fmt_t(*t_plan), ratio=f"{r.vs_optimum:.3f}",
                table=table_use(placement, cap))
        return
    mark = GC.mark()
    rep, w_rep, c_rep = timed(lambda: repair(placement, down))
    in_repair = GC.since(mark)
    adopted()
    r1 = evaluate_routing(cond_index, traffics, bound, ideal, paths=paths_of(rep.placement))
    ro, w_ro, c_ro = timed(lambda: reoptimise(rep.placement))
    adopted()
    r2 = evaluate_routing(cond_index, traffics, bound, ideal, paths=paths_of(ro.placement))
    tab.row(cond, name, "", fmt_t(w_rep, c_rep, ms=True), fmt_t(w_ro, c_ro),
            f"{len(rep.moves)} + {len(ro.moves)}", f"{r1.vs_optimum:.3f} -> {r2.vs_optimum:.3f}",
            table_use(ro.placement, cap))
    print(f"   {'':<14} collector during that repair: {in_repair}", flush=True)


def baseline_rows(tab: Table, cond: str, traffics: list[Traffic], index: PathIndex,
                  bound: Bound, ideal: dict, seeds: int) -> dict[str, RowResult]:
    mean, worst, _ = ecmp_summary(index, traffics, bound, ideal, range(seeds))
    tab.row(cond, f"ECMP mean ({seeds} seeds)", ratio=f"{mean.vs_optimum:.3f}")
    tab.row(cond, "ECMP worst", ratio=f"{worst.vs_optimum:.3f}")
    spray = evaluate_routing(index, traffics, bound, ideal, group_links=spray_rows(index, traffics))
    tab.row(cond, "spraying", ratio=f"{spray.vs_optimum:.3f}")
    flows = list(dict.fromkeys(f for t in traffics for f in t.flows))
    static = evaluate_routing(index, traffics, bound, ideal,
                              paths=ClosRouter(index, flows).static())
    tab.row(cond, "static", ratio=f"{static.vs_optimum:.3f}")
    return {"ECMP mean": mean, "ECMP worst": worst, "spraying": spray, "static": static}


def failure_block(tab: Table, fabric, index: PathIndex, traffic: Traffic, n_sub: int,
                  conditions: list[tuple[str, frozenset]], seeds: int, cap: int) -> None:
    sub = with_subflows(traffic, n_sub)
    pin1, w1, c1 = plan(fabric, [traffic], index)
    pin_n, wn, cn = plan(fabric, [sub], index)
    base = pin1.placement
    assert base is not None
    ideal = ideal_s(index, [traffic], paths_of(base))
    for cond, down in conditions:
        cidx = index.with_down(down) if down else index
        bound, w_b, _ = timed(partial(makespan_bound, cidx, [traffic]))
        label = f"{cond}"
        tab.row(label, f"optimum ({bound.method}, {w_b:.1f} s)", ratio="1.000")
        aifabric_rows(tab, label, "aifabric one path", pin1, (w1, c1), [traffic], cidx, down,
                      bound, ideal, cap)
        aifabric_rows(tab, label, f"aifabric {n_sub} sub-flows", pin_n, (wn, cn), [sub], cidx,
                      down, bound, ideal, cap)
        baseline_rows(tab, label, [traffic], cidx, bound, ideal, seeds)


def mix_block(tab: Table, fabric, index: PathIndex, mix: JobMix, n_sub: int, seeds: int,
              cap: int) -> None:
    traffics = job_mix(fabric, mix, seed=3)
    split = [with_subflows(t, n_sub) if not t.name.startswith("moe") else t for t in traffics]
    bound, w_b, _ = timed(lambda: makespan_bound(index, traffics))
    pin1, w1, c1 = plan(fabric, traffics, index)
    pin_n, wn, cn = plan(fabric, split, index)
    assert pin1.placement is not None and pin_n.placement is not None
    paths1 = paths_of(pin1.placement)
    ideal = ideal_s(index, traffics, paths1)
    cond = "job mix"
    tab.row(cond, f"optimum ({bound.method}, {w_b:.1f} s)", ratio="1.000")
    results: dict[str, RowResult] = {}
    r1 = evaluate_routing(index, traffics, bound, ideal, paths=paths1)
    results["aifabric one path"] = r1
    tab.row(cond, "aifabric one path", fmt_t(w1, c1), ratio=f"{r1.vs_optimum:.3f}",
            table=table_use(pin1.placement, cap))
    rn = evaluate_routing(index, split, bound, ideal, paths=paths_of(pin_n.placement))
    results[f"aifabric {n_sub} sub-flows"] = rn
    tab.row(cond, f"aifabric {n_sub} sub-flows", fmt_t(wn, cn), ratio=f"{rn.vs_optimum:.3f}",
            table=table_use(pin_n.placement, cap))
    compute = {t.name: len({f.src for f in t.flows}) * (0.2 if t.name.startswith("dp") else
                                                        0.05 if t.name == "moe" else 0.1)
               for t in traffics}
    prio = intensity_priorities(index, traffics, paths1, compute, queues=8)
    rp = evaluate_routing(index, traffics, bound, ideal, paths=paths1, priority=prio)
    results["aifabric + priorities"] = rp
    tab.row(cond, "aifabric + priorities", ratio=f"{rp.vs_optimum:.3f}")
    results.update(baseline_rows(tab, cond, traffics, index, bound, ideal, seeds))
    print(f"   job mix: {len(traffics)} jobs ({mix.dp_jobs} DP rings × {mix.dp_ranks} ranks, "
          f"MoE all-to-all × {mix.moe_ranks}, {mix.pp_jobs} pipelines {mix.pp_stages} stages × "
          f"{mix.pp_width}), {sum(len(t.flows) for t in traffics):,} flows, fragmented")
    print(f"   {'strategy':<24} {'CCT/ideal min':>14} {'mean':>7} {'max':>7} "
          f"{'DP max':>7} {'MoE':>7} {'PP max':>7} {'Jain':>6}")
    for name, r in results.items():
        s = r.slowdown
        dp = [v for k, v in s.items() if k.startswith("dp")]
        pp = [v for k, v in s.items() if k.startswith("pp")]
        print(f"   {name:<24} {min(s.values()):>14.3f} {np.mean(list(s.values())):>7.3f} "
              f"{max(s.values()):>7.3f} {max(dp, default=0):>7.3f} {s.get('moe', 0):>7.3f} "
              f"{max(pp, default=0):>7.3f} {r.fairness:>6.3f}")
    print("   priorities (queue per job, Crux intensity, 8 queues): "
          + ", ".join(f"{q}: {sum(1 for v in prio.values() if v == q)} jobs"
                      for q in sorted(set(prio.values()), reverse=True)))


def integral_note(half: int) -> None:
    loss = [(n, -(-half * n // (half - 1)) * (half - 1) / (half * n)) for n in (1, 2, 4, 8, 12, 16)]
    print("   one switch of k/2 = {0} uplinks lost: best CCT/opt of n sub-flows per flow "
          "(⌈{0}n/{1}⌉/n ÷ {0}/{1}): ".format(half, half - 1)
          + ", ".join(f"n={n}: {v:.3f}" for n, v in loss))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, nargs="+", default=[32, 64])
    ap.add_argument("--subflows", type=int, default=12)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--parts", default="ring,mix,rail",
                    help="comma-separated: ring (failure rows), mix (job mix), rail (k=64 only)")
    ap.add_argument("--collector", choices=["controller", "python", "thresholds", "off"],
                    default="controller",
                    help="garbage collector settings (module docstring); default: the "
                         "controller's")
    a = ap.parse_args()
    if a.collector == "off":
        gc.disable()
    else:
        configure_collector(HEAP_THRESHOLDS if a.collector == "thresholds" else
                            DEFAULT_THRESHOLDS)
    FREEZE["on"] = a.collector == "controller"
    print(f"garbage collector: --collector {a.collector}: {collector_state().describe()}"
          + ("; the heap frozen after each plan, repair and re-optimisation"
             if FREEZE["on"] else "; nothing frozen"))
    parts = set(a.parts.split(","))
    cap = capacity_from_p4info(P4INFO.read_text()).pinned_entries or 0
    print(f"load average at start: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f} ({os.cpu_count()} CPUs); times: wall (CPU), s or ms")
    for k in a.k:
        fabric, w_f, _ = timed(partial(build_fat_tree, f"ft{k}", k, RATE_BPS, RATE_BPS, 1.0, 1.0))
        index = PathIndex(fabric)
        hosts = [h.name for h in fabric.hosts]
        random.Random(1).shuffle(hosts)
        ring = ring_allreduce("ring", hosts, 1e9)
        tab = Table(f"fat-tree k={k}: {len(fabric.hosts):,} hosts, {len(fabric.switches):,} "
                    f"switches, {len(fabric.links) - len(fabric.hosts):,} switch links; one ring "
                    f"all-reduce over all hosts (fragmented, 1 GB per rank); fabric built in "
                    f"{w_f:.1f} s")
        agg = "p0a0"
        conds = [("intact", frozenset()),
                 ("1 link down", frozenset({frozenset((agg, "c1"))})),
                 ("1 agg down", frozenset(switch_links(fabric, agg)))]
        if "ring" in parts:
            failure_block(tab, fabric, index, ring, a.subflows, conds, a.seeds, cap)
            integral_note(k // 2)
            print(f"   peak RSS so far: {rss_mib():.0f} MiB")
        n = len(fabric.hosts)
        mix = (JobMix(48, 1024, 1e9, 256, 256e6, 63, 4, 64, 64e6) if k == 64 else
               JobMix(6, 1024, 1e9, 256, 256e6, 7, 4, 64, 64e6))
        assert mix.hosts_needed <= n
        if "mix" in parts:
            tab = Table(f"fat-tree k={k}: fragmented job mix")
            mix_block(tab, fabric, index, mix, a.subflows, a.seeds, cap)
            print(f"   peak RSS so far: {rss_mib():.0f} MiB; load average now: "
                  f"{os.getloadavg()[0]:.2f}")
        if k == 64 and "rail" in parts:
            rail, w_r, _ = timed(lambda: build_rail_optimized(
                "rail64k", 8192, 8, 32, 32, RAIL_RATE_BPS, RAIL_RATE_BPS, 1.0, 1.0))
            ridx = PathIndex(rail)
            servers: dict[int, list[str]] = {}
            for h in rail.hosts:
                servers.setdefault(int(h.server or 0), []).append(h.name)
            order = list(servers)
            random.Random(1).shuffle(order)
            rings = rail_rings("rails", [servers[s] for s in order], 1e9)
            tab = Table(f"rail-optimised: {len(rail.hosts):,} GPUs (8 rails × 8,192 servers, 32 "
                        f"per rail leaf, 32 spines, 400 Gb/s), one ring per rail over all "
                        f"servers (fragmented); built in {w_r:.1f} s")
            rconds = [("intact", frozenset()),
                      ("1 link down", frozenset({frozenset(("r0l0", "spine1"))})),
                      ("1 spine down", frozenset(switch_links(rail, "spine1")))]
            failure_block(tab, rail, ridx, rings, a.subflows, rconds, a.seeds, cap)
            integral_note(32)
            print(f"   peak RSS so far: {rss_mib():.0f} MiB")
    print(f"\nload average at end: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f}; peak RSS {rss_mib():.0f} MiB")
    c0 = time.process_time()
    gc.collect()
    print(f"a full collection now (what a repair pays when one falls due): "
          f"{(time.process_time() - c0) * 1e3:.0f} ms CPU")
    print(f"garbage collector at end: {collector_state().describe()}; "
          f"{FREEZE['n']} freezes, {FREEZE['s'] * 1e3:.0f} ms CPU in all, the longest "
          f"{FREEZE['max_s'] * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
