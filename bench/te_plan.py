"""Benchmark of the TE planner on fat-trees (not a test): ``python bench/te_plan.py``.

Needs the package importable (``pip install -e .``, as ``make`` sets up).

For k = 8 and k = 16 (100 Gbit/s links, 1 µs latency), one ring collective per pod over all of
that pod's hosts (k²/4 ranks: 16 for k = 8, 64 for k = 16), plus one *strided* ring across all
pods (rank i on pod i mod k, so every flow crosses the core), times separately

* ``ecmp_next_hops`` (every switch × every host),
* :func:`controller.te.placer.place_policy` (colouring, greedy, local search) for those
  collectives,
* ``build_plan`` (the whole plan, invariant checks included),

as the median of a few runs (``time.perf_counter``), and prints flows, the busiest link's flow
count, its utilisation, the lower bound on it, and the k16/k8 ratio of planner time.
"""

from __future__ import annotations

from timing import RUNS, timed  # bench/timing.py (sys.path[0] is bench/)

from controller.model import Fabric, build_fat_tree
from controller.plan.build import build_plan
from controller.policy.model import Collective, Policy, Routing
from controller.te.collectives import expand_policy
from controller.te.ecmp import ecmp_next_hops
from controller.te.placer import place_policy

RATE_BPS = 100_000_000_000
LATENCY_US = 1.0




def pod_rings(fabric: Fabric, k: int) -> Policy:
    """One ring per pod over all of its hosts, plus one strided ring across the pods."""
    per_pod = k * k // 4
    hosts = [h.name for h in fabric.hosts]
    rings = [
        Collective(name=f"pod{p}", algorithm="ring",
                   ranks=tuple(hosts[p * per_pod:(p + 1) * per_pod]))
        for p in range(k)
    ]
    # rank i of the cross-pod ring: host (i // k) of pod (i % k); a DSCP keeps its match apart
    cross = tuple(hosts[(i % k) * per_pod + i // k] for i in range(len(hosts)))
    rings.append(Collective(name="cross", algorithm="ring", ranks=cross, dscp=26))
    return Policy(routing=Routing(mode="pinned"), collectives=tuple(rings))


def main() -> None:
    rows = []
    for k in (8, 16):
        fabric = build_fat_tree(f"ft{k}", k, RATE_BPS, RATE_BPS, LATENCY_US, LATENCY_US)
        policy = pod_rings(fabric, k)
        demands = expand_policy(policy)
        t_ecmp, _ = timed(lambda f=fabric: ecmp_next_hops(f))
        t_pin, pin = timed(lambda f=fabric, p=policy: place_policy(f, p))
        t_plan, res = timed(lambda f=fabric, p=policy: build_plan(f, p), runs=3)
        entries = sum(len(sp.flows) for sp in res.plan.switches.values())
        rows.append((k, len(fabric.hosts), len(fabric.switches), len(demands),
                     pin.max_link_flows, pin.max_utilisation, pin.lower_bound, t_ecmp, t_pin,
                     t_plan, entries))
    head = (f"{'k':>3} {'hosts':>6} {'switches':>8} {'flows':>6} {'max/link':>8} {'util':>5} "
            f"{'bound':>5} "
            f"{'ecmp_s':>8} {'pin_s':>8} {'plan_s':>8} {'entries':>8}")
    print("fat-tree, one ring per pod (all pod hosts) + one strided cross-pod ring (dscp 26)")
    print(f"median of {RUNS} runs (build_plan: 3), time.perf_counter, seconds")
    print(head)
    print("-" * len(head))
    for k, nh, ns, nf, mx, ut, lb, te, tp, tb, ne in rows:
        print(f"{k:>3} {nh:>6} {ns:>8} {nf:>6} {mx:>8} {ut:>5.2f} {lb:>5.2f} "
              f"{te:>8.4f} {tp:>8.4f} {tb:>8.4f} {ne:>8}")
    (_, *a), (_, *b) = rows
    print(f"ratio k16/k8: ecmp {b[6] / a[6]:.1f}x, place_policy {b[7] / a[7]:.1f}x, "
          f"build_plan {b[8] / a[8]:.1f}x (hosts {b[0] / a[0]:.0f}x, flows {b[2] / a[2]:.1f}x)")


if __name__ == "__main__":
    main()
