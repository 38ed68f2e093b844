"""The running controller's two failure phases at scale (not a test):
``python bench/runtime_repair.py [--k 32] [--subflows 1] [--collector controller|python|off]``.

A k-ary fat-tree (k = 32: 8,192 hosts, 1,280 switches) with one ring all-reduce over every host
in a fragmented order (shuffled, seed 1), pinned by :func:`controller.te.placer.place`.
Then, with the functions the controller runs off its event loop
(:mod:`controller.runtime.placement`), on the inputs the controller hands them:

* ``convert``: the placement's node paths → a te placement (link ids), what the controller
  does in the background after a new placement is adopted
  (:func:`controller.runtime.placement.te_placement`);
* ``repair``: one aggregation–core link down, :func:`repair_moved` from the kept te placement
  (the controller's phase 1: only the flows on the link move) — issue 15's target is ≤ 100 ms
  of compute at k = 32;
* ``re-optimise``: :func:`reoptimise_moves` of the repaired placement (phase 2, in an
  executor), its moves cut into make-before-break batches by :func:`move_batches`;
* ``restore``: the link back up (:func:`repair_moved` again: nothing moves).

Times are wall (CPU) of this process; other jobs share the machine, so the load average is
printed. The garbage collector runs with the controller's settings
(:mod:`controller.runtime.collector`: the heap frozen after the plan and after each adopted
placement, not in the timed work) unless ``--collector`` says otherwise (``python``: CPython's
settings, nothing frozen; ``off``: disabled); what it ran during the repair is printed. The
intended plan itself (routes to 8,192 hosts on 1,280 switches, ~10^7 entries) is not computed
here: the runtime's plan is sized for lab and rack-scale fabrics.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import time
from collections.abc import Callable
from typing import Any

from controller.model import build_fat_tree
from controller.plan.capacity import DEFAULT_HEADROOM
from controller.policy.model import Policy
from controller.runtime.collector import (
    CollectionMeter,
    collector_state,
    configure_collector,
    freeze_heap,
)
from controller.runtime.placement import (
    PlacementInput,
    move_batches,
    reoptimise_moves,
    repair_moved,
    te_placement,
)
from controller.te.pathindex import PathIndex
from controller.te.patterns import demand_rates_bps, ring_allreduce, with_subflows
from controller.te.placer import place

RATE_BPS = 100_000_000_000


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--subflows", type=int, default=1)
    ap.add_argument("--collector", choices=["controller", "python", "off"], default="controller")
    a = ap.parse_args()
    if a.collector == "off":
        gc.disable()
    else:
        configure_collector()
    meter = CollectionMeter()

    def adopted() -> None:  # what the controller does after each adopted placement
        if a.collector == "controller":
            freeze_heap()
    la = os.getloadavg()
    print(f"load average at start: {la[0]:.2f} {la[1]:.2f} {la[2]:.2f} ({os.cpu_count()} CPUs); "
          "times: wall (CPU)")
    print(f"garbage collector: --collector {a.collector}: {collector_state().describe()}")
    fabric, w, _ = timed(lambda: build_fat_tree(f"ft{a.k}", a.k, RATE_BPS, RATE_BPS, 1.0, 1.0))
    hosts = [h.name for h in fabric.hosts]
    random.Random(1).shuffle(hosts)
    ring = ring_allreduce("ring", hosts, 1e9)
    if a.subflows > 1:
        ring = with_subflows(ring, a.subflows)
    pin, wp, cp = timed(lambda: place(fabric, demand_rates_bps(fabric, [ring]),
                                      index=PathIndex(fabric)))
    paths = dict(pin.paths)
    adopted()
    print(f"fat-tree k={a.k}: {len(fabric.hosts):,} hosts, {len(fabric.switches):,} switches "
          f"(built in {w:.1f} s); {len(paths):,} pinned flows planned in {wp:.2f} s ({cp:.2f})")
    policy = Policy.model_validate({"routing": {"mode": "pinned"}})  # unused by the phases
    te, wc, cc = timed(lambda: te_placement(fabric, paths, frozenset()))
    adopted()
    print(f"convert (background, after a placement is adopted): {wc:.2f} s ({cc:.2f})")
    down = frozenset({frozenset(("p0a0", "c1"))})
    inp = PlacementInput(fabric, policy, paths, down, frozenset(), te)
    mark = meter.mark()
    rep, wr, cr = timed(lambda: repair_moved(inp))
    in_repair = meter.since(mark)
    adopted()
    print(f"repair (p0a0-c1 down): {wr * 1e3:.0f} ms ({cr * 1e3:.0f}); {len(rep.moves)} flow(s) "
          f"moved; max utilisation {rep.max_utilisation_before:.2f} -> "
          f"{rep.max_utilisation_after:.2f} (lower bound {rep.lower_bound:.2f}); collector "
          f"during it: {in_repair}")
    inp2 = PlacementInput(fabric, policy, rep.paths, down, down, rep.te)
    opt, wo, co = timed(lambda: reoptimise_moves(inp2))
    adopted()
    if opt is None:
        print(f"re-optimise: nothing to gain ({wo:.2f} s)")
        final, final_te = rep.paths, rep.te
    else:
        batches = move_batches(opt.moves, DEFAULT_HEADROOM)
        print(f"re-optimise: {wo:.2f} s ({co:.2f}); {len(opt.moves)} flow(s) moved in "
              f"{len(batches)} make-before-break batch(es) of at most {DEFAULT_HEADROOM} added "
              f"entries per switch; max utilisation {opt.max_utilisation_before:.2f} -> "
              f"{opt.max_utilisation_after:.2f} (lower bound {opt.lower_bound:.2f})")
        final, final_te = opt.paths, opt.te
    inp3 = PlacementInput(fabric, policy, final, frozenset(), down, final_te)
    mark = meter.mark()
    back, wb, cb = timed(lambda: repair_moved(inp3))
    in_restore = meter.since(mark)
    print(f"restore (link back up): {wb * 1e3:.0f} ms ({cb * 1e3:.0f}); {len(back.moves)} flow(s) "
          f"moved; collector during it: {in_restore}")
    c0 = time.process_time()
    gc.collect()
    print(f"a full collection now: {(time.process_time() - c0) * 1e3:.0f} ms CPU; "
          f"{collector_state().describe()}")
    la = os.getloadavg()
    print(f"load average at end: {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}")


if __name__ == "__main__":
    main()
