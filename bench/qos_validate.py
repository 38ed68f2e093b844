"""Packet-level validation of the compiled QoS numbers on ns-3 (not a test):
``python bench/qos_validate.py [POLICY] [--speeds 10,25,100,400] [--quick] [--json OUT]``.

Compiles ``POLICY`` (default ``policies/qos_roce.yaml``) for a two-tier fabric whose links all
run at each speed, feeds the derived numbers to the scenario programs of ``validation/ns3``
(built by ``make -C validation/ns3``; Debian ``ns3`` and ``libns3-dev`` 3.37) and prints a table
per speed:

a. DCTCP (ns-3 ``TcpDctcp``, ``RedQueueDisc`` marking as a step at K): 8 long flows into one
   port with the compiled K (the DCTCP class's ``k``), K/2 and 2K: queue percentiles,
   throughput as a share of line rate, marks. Verdict: throughput >= 95 % at K.
b. DCQCN-style RED (the lossless class's Kmin/Kmax/Pmax) under the same load.
c. PFC (our module, ``validation/ns3/pfc``): a 16 -> 1 incast on the lossless priority with the
   compiled headroom, and with one MTU (``pfc.mtu``) less, for cables of 5, 100 and 300 m (four
   runs with different sender start staggers, summed; one with ``--quick``). The XOFF
   threshold is four lossless frames: it sets when pauses start, not the headroom above it.
   Verdicts: 0 drops and pauses > 0 with the compiled headroom; drops with one MTU less.
d. A ring all-reduce over two switches (ring alternating racks) with both classes at once.

The scenario programs print JSON; this script only derives inputs and formats outputs. Run
with ``nice``: a full table takes minutes of CPU (it prints its run time and load average).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.model.topology import build_leaf_spine  # noqa: E402
from controller.policy.model import Policy  # noqa: E402
from controller.qos import formulas as f  # noqa: E402
from controller.qos.compile import Port, compile_qos, ecn_profile, port_headroom  # noqa: E402
from controller.qos.validate import load_valid_policy  # noqa: E402

NS3_DIR = ROOT / "validation" / "ns3"
BUILD = NS3_DIR / "build"
DEFAULT_POLICY = ROOT / "policies" / "qos_roce.yaml"
SPEEDS_GBPS = (10, 25, 100, 400)
CABLES_M = (5.0, 100.0, 300.0)
INCAST_SENDERS = 16
TCP_FLOWS = 8
IP_MTU = 9000  # the TCP scenarios' IP MTU (a 9216-byte frame holds it with room to spare)
THROUGHPUT_TARGET = 0.95


@dataclass(frozen=True)
class Derived:
    """The numbers compiled for one speed (bytes unless named otherwise)."""

    rate_bps: int
    k: int
    kmin: int
    kmax: int
    pmax_percent: float
    queue_limit: int
    rtt_us: float
    mtu: int
    lossless_mtu: int
    xon: int
    quanta: int
    headroom_by_cable: dict[float, int]


def derive(policy: Policy, rate_bps: int) -> Derived:
    """Compile ``policy`` on a 2x2 leaf-spine whose links all run at ``rate_bps`` and take the
    numbers the scenarios need: the DCTCP class's K, the lossless class's RED profile, the
    queue limit, XON and, per cable of :data:`CABLES_M`, the headroom of a port at this speed.

    Raises ValueError when the policy lacks a DCTCP class, a DCQCN/explicit class, PFC or
    buffers."""
    if policy.pfc is None or policy.ecn is None or policy.buffers is None:
        raise ValueError("the policy needs pfc, ecn and buffers sections")
    fabric = build_leaf_spine("v", 2, 2, 2, rate_bps, rate_bps, 1.0, 1.0)
    plan = compile_qos(policy, fabric)
    pq = plan.switches[0].ports[0]
    dctcp = next((e for e in policy.ecn.classes if e.mode == "dctcp"), None)
    red = next((e for e in policy.ecn.classes if e.mode != "dctcp"), None)
    if dctcp is None or red is None:
        raise ValueError("the policy needs a dctcp class and a dcqcn/explicit class")
    k = ecn_profile(dctcp, policy, rate_bps).kmin_bytes
    r = ecn_profile(red, policy, rate_bps)
    heads = {}
    for cable in CABLES_M:
        _, h = port_headroom(policy, Port(0, "peer", rate_bps, cable))
        heads[cable] = h
    return Derived(rate_bps, k, r.kmin_bytes, r.kmax_bytes, r.pmax_percent,
                   pq.queue_limit_bytes or 0, policy.ecn.base_rtt_us, policy.pfc.mtu_bytes,
                   policy.pfc.lossless_mtu_bytes or policy.pfc.mtu_bytes, pq.xon_bytes,
                   f.pause_reaction_quanta(rate_bps)[1], heads)


def run(program: str, **args: object) -> dict[str, object]:
    """Run ``validation/ns3/build/<program>`` with ``--key=value`` arguments (niced) and return
    its JSON line. Raises RuntimeError when it fails or prints no JSON."""
    cmd = [str(BUILD / program)] + [f"--{k}={v}" for k, v in args.items()]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False,
                         preexec_fn=lambda: os.nice(10))  # noqa: PLW1509 (no threads here)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr[-2000:]}")
    out: dict[str, object] = json.loads(lines[-1])
    return out


def dctcp_runs(d: Derived, quick: bool) -> list[dict[str, object]]:
    """Scenario a at K/2, K, 2K and scenario b; shorter with ``quick``."""
    dur, warm = (4.0, 2.0) if quick else (30.0, 10.0)
    out = []
    for label, k in (("K/2", max(1, d.k // 2)), ("K", d.k), ("2K", 2 * d.k)):
        r = run("dctcp-scenario", mode="dctcp", rate_bps=d.rate_bps, rtt_us=d.rtt_us,
                flows=TCP_FLOWS, mtu=IP_MTU, k=k, limit=d.queue_limit, duration_ms=dur,
                warmup_ms=warm)
        out.append({"label": label} | r)
    r = run("dctcp-scenario", mode="red", rate_bps=d.rate_bps, rtt_us=d.rtt_us, flows=TCP_FLOWS,
            mtu=IP_MTU, kmin=d.kmin, kmax=d.kmax, pmax=d.pmax_percent, limit=d.queue_limit,
            duration_ms=dur, warmup_ms=warm)
    out.append({"label": "RED"} | r)
    return out


def incast_duration_us(d: Derived, frames: int) -> float:
    """Simulated time for ``frames`` lossless frames to leave the incast's egress port."""
    return frames * d.lossless_mtu * 8 / d.rate_bps * 1e6


def incast_runs(d: Derived, quick: bool, cables: tuple[float, ...] = CABLES_M
                ) -> list[dict[str, object]]:
    """Scenario c per cable, with the compiled headroom and with one MTU less."""
    out = []
    frames = 3000 if quick else 20000
    runs = 1 if quick else 4  # sender start staggers: the filler and senders meet at new phases
    for cable in cables:
        h = d.headroom_by_cable[cable]
        for label, head in (("compiled", h), ("one MTU short", h - d.mtu)):
            rs = [run("pfc-incast", rate_bps=d.rate_bps, cable_m=cable, mtu=d.mtu,
                      lossless_mtu=d.lossless_mtu, headroom=head, xoff=4 * d.lossless_mtu,
                      xon=d.xon, quanta=d.quanta, senders=INCAST_SENDERS,
                      duration_us=incast_duration_us(d, frames), run=i + 1)
                  for i in range(runs)]
            merged = dict(rs[0])
            for key in ("lossless_drops", "xoff_sent", "xon_sent", "pauses_received"):
                merged[key] = sum(int(r[key]) for r in rs)  # type: ignore[call-overload]
            merged["max_headroom_used_bytes"] = max(
                int(r["max_headroom_used_bytes"]) for r in rs)  # type: ignore[call-overload]
            merged["egress_utilisation"] = min(
                float(r["egress_utilisation"]) for r in rs)  # type: ignore[arg-type]
            out.append({"label": label, "runs": runs} | merged)
    return out


def allreduce_run(d: Derived, quick: bool) -> dict[str, object]:
    """Scenario d: 14 ring steps (2 x (8 - 1)) of 20 us of line rate each (2 with ``quick``)."""
    steps = 2 if quick else 14
    chunk = max(d.lossless_mtu, int(d.rate_bps * 20e-6 / 8))
    return run("allreduce", rate_bps=d.rate_bps, cable_m=100, lossless_mtu=d.lossless_mtu,
               lossy_mtu=d.mtu, headroom=d.headroom_by_cable[100.0], xoff=4 * d.lossless_mtu,
               xon=d.xon, k=d.k, limit=d.queue_limit, quanta=d.quanta, chunk=chunk, steps=steps,
               rtt_us=d.rtt_us, limit_ms=200)


def verdicts(tcp: list[dict[str, object]], incast: list[dict[str, object]]) -> list[str]:
    """The expected outcomes that failed (empty: all held)."""
    bad = []
    at_k = next(r for r in tcp if r["label"] == "K")
    if float(at_k["throughput_share"]) < THROUGHPUT_TARGET:  # type: ignore[arg-type]
        bad.append(f"DCTCP at K: throughput {at_k['throughput_share']} < {THROUGHPUT_TARGET}")
    for r in incast:
        drops, pauses = int(r["lossless_drops"]), int(r["pauses_received"])  # type: ignore[call-overload]
        if r["label"] == "compiled" and (drops or not pauses):
            bad.append(f"incast {r['cable_m']}m compiled: {drops} drops, {pauses} pauses")
        if r["label"] == "one MTU short" and not drops:
            bad.append(f"incast {r['cable_m']}m one MTU short: no drop")
    return bad


def _pct(v: object) -> str:
    return f"{100 * float(v):.1f}%"  # type: ignore[arg-type]


def _kb(v: object) -> str:
    return f"{float(v) / 1000:.1f}"  # type: ignore[arg-type]


def table(d: Derived, tcp: list[dict[str, object]], incast: list[dict[str, object]],
          ar: dict[str, object]) -> str:
    """Markdown tables of one speed."""
    g = d.rate_bps // 1_000_000_000
    lines = [f"### {g} Gbit/s", "",
             f"Compiled: DCTCP K {d.k} B; RED Kmin {d.kmin} B, Kmax {d.kmax} B, Pmax "
             f"{d.pmax_percent:g}%; queue limit {d.queue_limit} B; XON {d.xon} B; response "
             f"{d.quanta} quanta; headroom " + ", ".join(
                 f"{c:g} m {h} B" for c, h in d.headroom_by_cable.items()), "",
             "| a/b: marking | threshold (B) | queue p50 (KB) | p99 (KB) | max (KB) | "
             "throughput | marks | drops |", "|---|---|---|---|---|---|---|---|"]
    for r in tcp:
        thr = (f"{r['kmin_bytes']}-{r['kmax_bytes']} @ {r['pmax_percent']}%"
               if r["label"] == "RED" else str(r["k_bytes"]))
        lines.append(f"| {r['label']} | {thr} | {_kb(r['queue_p50_bytes'])} | "
                     f"{_kb(r['queue_p99_bytes'])} | {_kb(r['queue_max_bytes'])} | "
                     f"{_pct(r['throughput_share'])} | {r['marks']} | {r['drops']} |")
    lines += ["", "| c: incast 16->1 | cable (m) | headroom (B) | most used (B) | drops | "
              "pauses | egress busy |", "|---|---|---|---|---|---|---|"]
    for r in incast:
        lines.append(f"| {r['label']} | {r['cable_m']} | {r['headroom_bytes']} | "
                     f"{r['max_headroom_used_bytes']} | {r['lossless_drops']} | "
                     f"{r['pauses_received']} | {_pct(r['egress_utilisation'])} |")
    lines += ["", "| d: all-reduce, 2 switches | steps | lossless done (us) | lossy done (us) | "
              "ideal both (us) | trunk busy | lossless drops | pauses (host/trunk) | "
              "lossy drops | lossy marks |", "|---|---|---|---|---|---|---|---|---|---|",
              f"| ring, alternating racks | {ar['steps']} | {ar['lossless_done_us']} | "
              f"{ar['lossy_done_us']} | {ar['ideal_both_us']} | {_pct(ar['trunk_utilisation'])}"
              f" | {ar['lossless_drops']} | {ar['host_pauses']}/{ar['trunk_pauses']} | "
              f"{ar['lossy_drops']} | {ar['lossy_marks']} |", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("policy", nargs="?", default=str(DEFAULT_POLICY))
    ap.add_argument("--speeds", default=",".join(map(str, SPEEDS_GBPS)),
                    help="link speeds in Gbit/s, comma-separated")
    ap.add_argument("--quick", action="store_true", help="short runs (seconds)")
    ap.add_argument("--json", help="also write every result to this file")
    args = ap.parse_args(argv)
    if not (BUILD / "pfc-incast").exists():
        subprocess.run(["make", "-C", str(NS3_DIR)], check=True)
    policy = load_valid_policy(args.policy)
    t0, c0 = time.perf_counter(), os.times()
    results = []
    failed: list[str] = []
    for g in (int(s) for s in args.speeds.split(",")):
        d = derive(policy, g * 1_000_000_000)
        tcp, inc, ar = dctcp_runs(d, args.quick), incast_runs(d, args.quick), \
            allreduce_run(d, args.quick)
        print(table(d, tcp, inc, ar), flush=True)
        failed += [f"{g}G: {b}" for b in verdicts(tcp, inc)]
        results.append({"rate_gbps": g, "dctcp": tcp, "incast": inc, "allreduce": ar})
    c1 = os.times()
    cpu = (c1.children_user + c1.children_system) - (c0.children_user + c0.children_system)
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"run time: {time.perf_counter() - t0:.1f} s wall, {cpu:.1f} s CPU of the scenario "
          f"programs; load average {' '.join(load)}")
    print("verdicts: " + ("all held" if not failed else "; ".join(failed)))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
