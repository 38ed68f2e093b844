"""TE at scale (not a test): ``python bench/te_scale.py``; runtime well under 2 minutes.

Fat-tree k = 32 (8,192 hosts, 100 Gb/s everywhere, non-blocking), one ring all-reduce over all
8,192 ranks (1 GB per rank) placed fragmented (seeded shuffle). Prints, with time.perf_counter
(wall; the CPU time of this process, time.process_time, in brackets, as other jobs share the
machine):

* planning time of :func:`pin_by_load` (target ≤ 2 s) and its max utilisation / lower bound;
* failure re-planning time of :func:`repair` after one aggregation–core link fails (≤ 200 ms),
  given the planning's PathIndex as a running controller keeps it (the failed state is derived
  from it incrementally, :meth:`PathIndex.with_down`);
* CCT / ideal (fluid model, :mod:`controller.sim.fluid`) for aifabric (target ≤ 1.05), ECMP
  (mean and worst over 20 seeds) and static pinning, intact and with that link down.
"""

from __future__ import annotations

import random
import time

import numpy as np

from controller.model import build_fat_tree
from controller.sim.compare import ecmp_paths, static_paths
from controller.sim.fluid import ideal_cct_s, simulate
from controller.te.loadpin import pin_by_load
from controller.te.pathindex import PathIndex
from controller.te.patterns import demand_rates_bps, ring_allreduce
from controller.te.reroute import repair

K = 32
RATE_BPS = 100_000_000_000
SEEDS = 20


def main() -> None:
    fabric = build_fat_tree(f"ft{K}", K, RATE_BPS, RATE_BPS, 1.0, 1.0)
    hosts = [h.name for h in fabric.hosts]
    random.Random(1).shuffle(hosts)
    ring = ring_allreduce("ring", hosts, 1e9)
    rates = demand_rates_bps(fabric, [ring])
    t0, c0 = time.perf_counter(), time.process_time()
    index = PathIndex(fabric)
    pin = pin_by_load(fabric, rates, index=index)
    t_plan, c_plan = time.perf_counter() - t0, time.process_time() - c0
    down = frozenset({frozenset(("p0a0", "c1"))})
    t0, c0 = time.perf_counter(), time.process_time()
    rep = repair(fabric, pin.paths, rates, down, index=index)
    t_fail, c_fail = time.perf_counter() - t0, time.process_time() - c0
    failed = index.with_down(down)
    ideal = ideal_cct_s(index, ring, {f: index.link_ids(p) for f, p in pin.paths.items()})

    def ratio(idx: PathIndex, paths) -> float:
        return simulate(idx, [ring], paths).cct_s["ring"] / ideal

    print(f"fat-tree k={K}: {len(fabric.hosts)} hosts, {len(ring.flows)} ring flows "
          f"(fragmented), {RATE_BPS / 1e9:.0f} Gb/s links")
    print(f"planning (pin_by_load): {t_plan:.3f} s ({c_plan:.3f} s CPU)   [target <= 2 s]  "
          f"max util {pin.max_utilisation:.3f}, lower bound {pin.lower_bound:.3f}")
    print(f"failure re-planning (repair, 1 agg-core link): {t_fail * 1e3:.1f} ms "
          f"({c_fail * 1e3:.1f} ms CPU)   [target <= 200 ms]  moved {len(rep.moved)} flows")
    for cond, idx, ours in (("intact", index, pin.paths), ("1 link down", failed, rep.paths)):
        ecmp = [ratio(idx, ecmp_paths(idx, ring.flows, s)) for s in range(SEEDS)]
        print(f"[{cond}] CCT/ideal: aifabric {ratio(idx, {f: idx.link_ids(p) for f, p in ours.items()}):.3f}"
              f"  ECMP mean {np.mean(ecmp):.3f} worst {np.max(ecmp):.3f} ({SEEDS} seeds)"
              f"  static {ratio(idx, static_paths(idx, ring.flows)):.3f}")


if __name__ == "__main__":
    main()
