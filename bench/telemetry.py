"""Collection cost per sample for 1,000 switch ports: what one statistics round costs the
controller (pure Python; no switches).

A leaf-spine fabric of 20 spines and 25 leaves (500 switch-switch links: 1,000 switch ports)
with 8 hosts per leaf (200 more, host-facing ports) is built; every round each switch reports
every port's counters (``Telemetry.record_ports``: the collection), the alerts are evaluated,
and a Prometheus scrape is rendered. Printed: median and p95 milliseconds per round, and µs per
reported port (wall clock, ``time.perf_counter``; the development machine's 2 shared cores).

    .venv/bin/python bench/telemetry.py [--rounds 50]
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from controller.model import build_leaf_spine
from controller.telemetry import PortCounters, Telemetry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=50)
    args = ap.parse_args()
    fab = build_leaf_spine("bench", 20, 25, 8, 10**11, 4 * 10**11, 1.0, 1.0)
    per_switch: dict[str, list[int]] = {}
    for ln in fab.links:
        for node in (ln.a, ln.b):
            if node in fab.switch_by_name:
                per_switch.setdefault(node, []).append(ln.port_of(node))
    fabric_ports = sum(1 for ln in fab.links if not fab.is_host(ln.a) and not fab.is_host(ln.b)) * 2
    nports = sum(len(v) for v in per_switch.values())
    tel = Telemetry(fab)
    cost_ms, eval_ms, scrape_ms = [], [], []
    from prometheus_client import generate_latest

    from controller.policy.model import Policy
    from controller.runtime.controller import Controller
    from controller.runtime.metrics import registry_for
    from controller.runtime.state import PolicyInForce, RuntimeSettings, initial_state

    # what the metrics collector reads: a runtime (no switch connected, no driver)
    policy = Policy.model_validate({"version": 1, "routing": {"mode": "ecmp"}})
    state = initial_state(fab, PolicyInForce(policy), RuntimeSettings())
    reg = registry_for(Controller(state, {}, telemetry=tel, executor=ThreadPoolExecutor(1)), 1.0)
    for r in range(args.rounds):
        t = float(r)
        samples = {sw: [PortCounters(p, r * 10**9 + p, r * 10**9 + 2 * p, r * 10**6, r * 10**6)
                        for p in ports] for sw, ports in per_switch.items()}
        t0 = time.perf_counter()
        for sw, cs in samples.items():
            tel.record_ports(sw, cs, t)
        t1 = time.perf_counter()
        tel.evaluate(t)
        t2 = time.perf_counter()
        generate_latest(reg)
        t3 = time.perf_counter()
        if r:
            cost_ms.append((t1 - t0) * 1e3)
            eval_ms.append((t2 - t1) * 1e3)
            scrape_ms.append((t3 - t2) * 1e3)

    def line(name: str, xs: list[float]) -> str:
        xs = sorted(xs)
        return (f"{name:<28} median {statistics.median(xs):7.2f} ms  p95 "
                f"{xs[int(0.95 * (len(xs) - 1))]:7.2f} ms  ({statistics.median(xs) * 1e3 / nports:6.1f}"
                " µs per port)")

    print(f"fabric: {len(fab.switches)} switches, {nports} ports reported per round "
          f"({fabric_ports} switch-switch, {nports - fabric_ports} host-facing), "
          f"{len(tel.taps)} link directions; {args.rounds - 1} rounds")
    print(line("record_ports (collection)", cost_ms))
    print(line("alert evaluation", eval_ms))
    print(line("Prometheus scrape render", scrape_ms))


if __name__ == "__main__":
    main()
