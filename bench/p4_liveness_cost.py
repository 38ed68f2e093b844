"""The controller's CPU for P4 link liveness, per link, as the fabric grows (not a test):
``.venv/bin/python bench/p4_liveness_cost.py [--interval 0.02] [--k 4 8 16]``.

P4Runtime has no port status, so the controller probes every switch–switch port of its P4
switches each liveness interval (a packet-out) and hears each probe at the far end (a
packet-in): per link and interval, two probes out and two in (:mod:`controller.runtime.liveness`,
``core._liveness``). This runs the runtime's pure core (:func:`controller.runtime.core.step`)
through those rounds on the main experiment's leaf-spine and on k-ary fat-trees (every switch a
connected P4Runtime master, ECMP policy): each round one Tick (the liveness check and the
probes' SendPacket effects) and one PacketIn per probe, delivered at the far end. It prints
the core's CPU time (``time.process_time``) per round, per probe, and per link per second at
the interval, and the share of one core that is.

This is the core only: the process adds the gRPC work of each packet-out and packet-in
(measured end to end by ``link_failure_p4``, which prints the controller's CPU per link: 12.7
ms per link per second at 20 ms on BMv2, load 3.5-7). Together they say how far controller-paced
probing goes: at k=16 (2,048 switch–switch links) the probes alone would need more than a core
at any interval that detects in tens of milliseconds. There the switch must generate and judge
its own probes (Tofino's packet generator and port-down events: p4/fabric/tna/README.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.drivers.southbound import (  # noqa: E402
    PacketIn,
    SwitchConnected,
    SwitchFeatures,
)
from controller.model.generators import fat_tree  # noqa: E402
from controller.model.topology import Fabric, load_topology  # noqa: E402
from controller.policy import load_policy  # noqa: E402
from controller.runtime import core  # noqa: E402
from controller.runtime.events import RoleAssigned, SendPacket, Tick  # noqa: E402
from controller.runtime.state import (  # noqa: E402
    PolicyInForce,
    RuntimeSettings,
    RuntimeState,
    initial_state,
)

MAIN = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
ECMP = ROOT / "policies" / "ecmp_default.yaml"


def connected(fabric: Fabric, interval_s: float, misses: int) -> RuntimeState:
    """Every switch of ``fabric`` a connected P4Runtime master; liveness on."""
    state = initial_state(
        fabric, PolicyInForce(load_policy(ECMP, fabric)),
        RuntimeSettings(liveness_interval_s=interval_s, liveness_misses=misses,
                        lldp_interval_s=3600.0, retry_interval_s=3600.0),
        {s.name: "p4runtime" for s in fabric.switches})
    for sw in fabric.switches:
        feats = SwitchFeatures("p4runtime", sw.dpid, "bench")
        state = core.step(state, SwitchConnected(sw.name, feats, 1), 0.0).state
        state = core.step(state, RoleAssigned(sw.name, "master", 1), 0.0).state
    return state


def rounds(fabric: Fabric, interval_s: float, misses: int, n: int) -> tuple[float, int, int]:
    """CPU seconds of ``n`` liveness rounds after two warm-up rounds, probes per round,
    switch–switch links."""
    state = connected(fabric, interval_s, misses)
    now = 0.0
    cpu = 0.0
    probes = 0
    for i in range(n + 2):
        now = round(now + interval_s, 6)
        t0 = time.process_time()
        st = core.step(state, Tick(now), now)
        state = st.state
        sent = [fx for fx in st.effects if isinstance(fx, SendPacket)]
        for fx in sent:
            peer, peer_port = fabric.port_map[(fx.switch, fx.port)]
            state = core.step(state, PacketIn(peer, peer_port, fx.data), now).state
        if i >= 2:
            cpu += time.process_time() - t0
            probes = len(sent)
    links = sum(1 for ln in fabric.links
                if ln.a in fabric.switch_by_name and ln.b in fabric.switch_by_name)
    return cpu, probes, links


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=float, default=0.02, help="liveness interval, s")
    ap.add_argument("--misses", type=int, default=6)
    ap.add_argument("--k", type=int, nargs="*", default=[4, 8, 16], help="fat-tree k values")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    fabrics = [("leaf-spine 2x4x2 (the labs)", load_topology(MAIN))]
    fabrics += [(f"fat-tree k={k}", fat_tree(k, host_rate_bps=100 * 10**9,
                                           fabric_rate_bps=100 * 10**9)) for k in args.k]
    print(f"the runtime's core, liveness every {args.interval * 1e3:g} ms ({args.misses} misses); "
          f"{args.rounds} rounds each; load average {load0:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after; CPU = time.process_time")
    print(f"{'fabric':<28} {'links':>6} {'probes/round':>12} {'ms CPU/round':>13} "
          f"{'µs CPU/probe':>13} {'µs CPU/link/s':>14} {'cores':>7}")
    for name, fab in fabrics:
        cpu, probes, links = rounds(fab, args.interval, args.misses, args.rounds)
        per_round = cpu / args.rounds
        per_link_s = per_round / args.interval / links
        print(f"{name:<28} {links:>6} {probes:>12} {per_round * 1e3:>13.1f} "
              f"{per_round / probes * 1e6:>13.1f} {per_link_s * 1e6:>14.0f} "
              f"{per_round / args.interval:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
