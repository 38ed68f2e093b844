"""Reconciling instead of wiping (not a test): ``python bench/reconcile.py [--ovs] [--entries N]``.

1. **k = 16 fat-tree, whole fabric** (320 switches, 1,024 hosts; the pinned policy below puts
   one ring per pod and one strided ring on it): the intended plan (> 10^5 entries), and what
   the switches would report for it (the flow-statistics and group-description bodies the
   OpenFlow driver decodes, built from the very messages it would have sent). Timed: decoding
   that read-back into intents and diffing it against the intended plan — a reconnect of every
   switch with nothing to change, 0 messages — next to the naive full re-push the controller
   used to make at every connect (delete everything, add everything): the messages built and
   serialised, and their count and bytes.

2. **One switch holding N entries (default 10^4) over the wire** (``--ovs``, root): an Open
   vSwitch bridge, the OpenFlow driver with os-ken in this process. The bridge reconnects; timed
   from the handshake to "nothing to send" (read back over OpenFlow, decode, diff), next to the
   naive re-push of the same entries (delete ours, add all, in one bundle) until the switch
   confirmed it. Without ``--ovs``, the same on the simulated switch (what the driver does, not
   the wire).

Median of ``--runs`` runs (``time.perf_counter``); the load average is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.drivers.openflow import encode  # noqa: E402
from controller.drivers.openflow.dialect import OF13, FlowRecord, GroupRecord  # noqa: E402
from controller.model import build_fat_tree  # noqa: E402
from controller.plan.model import (  # noqa: E402
    ETH_TYPE_IPV4,
    PRIO_ROUTE,
    Action,
    FlowIntent,
    Match,
    NextHopSet,
    SwitchPlan,
    diff_switch,
)
from controller.policy.model import Collective, Policy, Routing  # noqa: E402
from controller.runtime.intent import plan_for  # noqa: E402
from controller.runtime.placement import initial_placement  # noqa: E402

D = OF13()


def median_time(fn, runs: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def reported(plan: SwitchPlan) -> tuple[list[FlowRecord], list[GroupRecord]]:
    """What a switch holding ``plan`` reports: the records of the messages a push sends."""
    msgs = encode.encode_full(plan, D)[1:]  # without the delete
    flows, groups = [], []
    for m in msgs:
        if type(m).__name__ == "OFPFlowMod":
            flows.append(FlowRecord(m.table_id, m.priority, m.cookie, m.match,
                                    tuple(m.instructions)))
        else:
            groups.append(m)
    body = [D.parser.OFPGroupDescStats(g.type, g.group_id, g.buckets) for g in groups]
    return flows, D.group_records(body)


def fat_tree(runs: int) -> None:
    k = 16
    fab = build_fat_tree("ft16", k, 100_000_000_000, 100_000_000_000, 1.0, 1.0)
    hosts = [h.name for h in fab.hosts]
    per_pod = k * k // 4
    rings = [Collective(name=f"pod{p}", algorithm="ring",
                        ranks=tuple(hosts[p * per_pod:(p + 1) * per_pod])) for p in range(k)]
    rings.append(Collective(name="strided", algorithm="ring",
                            ranks=tuple(hosts[p * per_pod + p % per_pod] for p in range(k))))
    pol = Policy(routing=Routing(mode="pinned"), collectives=tuple(rings))
    t_plan, plan = median_time(lambda: plan_for(fab, pol, initial_placement(fab, pol),
                                                frozenset()), 1)
    entries = sum(len(sp.flows) for sp in plan.switches.values())
    sets = sum(len(sp.next_hop_sets()) for sp in plan.switches.values())
    print(f"k=16 fat-tree: {len(plan.switches)} switches, {entries:,} flow entries, {sets:,} "
          f"groups (plan {t_plan:.1f} s)")
    reads = {n: reported(sp) for n, sp in plan.switches.items()}

    def reconnect_all() -> int:
        sent = 0
        for name, sp in plan.switches.items():
            flows, groups = reads[name]
            dec = encode.decode_state(name, sp.dpid, flows, groups, D)
            sent += diff_switch(dec.plan, sp).count
        return sent

    t_rec, sent = median_time(reconnect_all, runs)

    def naive() -> tuple[int, int]:
        n = size = 0
        for sp in plan.switches.values():
            for i, m in enumerate(encode.encode_full(sp, D)):
                size += len(D.serialize(m, i + 1))
                n += 1
        return n, size

    t_naive, (n_msgs, n_bytes) = median_time(naive, max(1, runs // 2))
    print(f"  reconcile (decode read-back + diff, every switch): {t_rec:.2f} s, "
          f"{sent} entries to send")
    print(f"  naive full re-push: {n_msgs:,} messages, {n_bytes / 1e6:.1f} MB, built and "
          f"serialised in {t_naive:.2f} s (plus the switches' work)")
    print(f"  ratio naive/reconcile (controller CPU): {t_naive / t_rec:.1f}x; messages "
          f"{n_msgs:,} vs {sent}")


def big_plan(n: int, dpid: int = 3) -> SwitchPlan:
    """``n`` /32 routes on one switch: a third to a port, the rest over 4 ECMP sets."""
    flows = []
    sets = [NextHopSet("ecmp", (p, p + 1)) for p in (33, 35, 37, 39)]
    base = int(ipaddress.IPv4Address("10.128.0.0"))
    for i in range(n):
        m = Match(eth_type=ETH_TYPE_IPV4, ipv4_dst=str(ipaddress.IPv4Address(base + i)))
        a = Action("output", 1 + i % 32) if i % 3 == 0 else Action.via(sets[i % 4])
        flows.append(FlowIntent(0, PRIO_ROUTE, m, a, f"route {i}"))
    return SwitchPlan("leaf1", dpid, frozenset(flows))


def one_switch(n: int, runs: int, use_ovs: bool) -> None:
    plan = big_plan(n)
    if use_ovs:
        asyncio.run(_ovs(plan, runs))
    else:
        asyncio.run(_simulated(plan, runs))


async def _simulated(plan: SwitchPlan, runs: int) -> None:
    from controller.drivers.openflow.driver import OpenFlowDriver
    from controller.testing import FakeOFTable
    from controller.testing.fakeswitch import FakeSwitch

    drv = OpenFlowDriver({3: "leaf1"})
    up = asyncio.Event()
    await drv.start(lambda ev: up.set() if type(ev).__name__ == "SwitchConnected" else None)
    table = FakeOFTable("leaf1")
    sw = FakeSwitch(drv, 3, table, part_size=400)
    sw.connect()
    await asyncio.wait_for(up.wait(), 5)
    await drv.read_state("leaf1")
    from controller.plan.model import SwitchChanges

    await drv.apply("leaf1", SwitchChanges("leaf1", add_flows=tuple(plan.flows)), 60)
    rec, naive = [], []
    for _ in range(runs):
        sw.disconnect()
        await asyncio.sleep(0)
        up.clear()
        sw.connect()
        await asyncio.wait_for(up.wait(), 5)
        t0 = time.perf_counter()
        got = await drv.read_state("leaf1")
        assert diff_switch(got.plan, plan).empty
        rec.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        await _naive(drv, "leaf1", plan)
        naive.append(time.perf_counter() - t0)
    _print_one(len(plan.flows), rec, naive, "simulated switch (driver and fake connection; "
               "no wire)")


async def _naive(drv, switch: str, plan: SwitchPlan) -> None:
    """Delete ours, add everything, in one bundle; until the commit reply (the old push)."""
    s = drv.session(switch)
    d = s.dialect
    msgs = encode.encode_full(plan, d)
    alloc, _ = encode.GroupIds().with_sets(plan.next_hop_sets())
    dels = [encode.group_delete(g, d) for g in sorted(s.groups.ids.values())]
    inner = [msgs[0], *dels, *msgs[1:]]
    bid = 0x7000 + len(drv.messages_sent())
    xids = drv._send(s, [d.bundle_ctrl(bid, "open"), *[d.bundle_add(bid, m) for m in inner],
                         d.bundle_ctrl(bid, "commit")], count=False)
    f_open = drv._expect(s, xids[0], "bundle-open")
    f_commit = drv._expect(s, xids[-1], "bundle-commit")
    await asyncio.wait_for(f_open, 60)
    await asyncio.wait_for(f_commit, 120)
    s.groups = alloc


def _print_one(n: int, rec: list[float], naive: list[float], what: str) -> None:
    r, v = statistics.median(rec), statistics.median(naive)
    print(f"one switch holding {n:,} entries, {what}:")
    print(f"  reconnect without change (read back, decode, diff; 0 sent): {r * 1e3:.0f} ms")
    print(f"  naive full re-push (delete ours + add {n:,} in one bundle, until confirmed): "
          f"{v * 1e3:.0f} ms, {n + 1:,}+ messages")
    print(f"  ratio naive/reconcile: {v / r:.1f}x")


async def _ovs(plan: SwitchPlan, runs: int) -> None:
    from controller.drivers.openflow.app import start_openflow
    from controller.drivers.openflow.driver import OpenFlowDriver
    from controller.drivers.openflow.listener import bind_listener
    from controller.plan.model import SwitchChanges

    loop = asyncio.get_running_loop()
    bridge = f"i12b{os.getpid() % 10000}"
    sock = bind_listener("127.0.0.1", 0)
    port = sock.getsockname()[1]
    drv = OpenFlowDriver({3: "leaf1"}, reply_timeout_s=120)
    up = asyncio.Event()
    drv.bind_loop(loop)
    ready = threading.Event()
    ready.set()
    handle = start_openflow(drv, sock, ready, loop)
    await drv.start(lambda ev: up.set() if type(ev).__name__ == "SwitchConnected" else None)
    try:
        subprocess.run(["ovs-vsctl", "--may-exist", "add-br", bridge, "--", "set", "bridge",
                        bridge, "datapath_type=netdev", "fail_mode=secure",
                        "protocols=OpenFlow13,OpenFlow15",
                        "other-config:datapath-id=0000000000000003"], check=True)

        def point() -> None:
            subprocess.run(["ovs-vsctl", "--", "--id=@c", "create", "Controller",
                            f"target=tcp\\:127.0.0.1\\:{port}", "max_backoff=1000", "--", "set",
                            "bridge", bridge, "controller=[@c]"], check=True,
                           capture_output=True)

        point()
        await asyncio.wait_for(up.wait(), 20)
        await drv.read_state("leaf1")
        await drv.apply("leaf1", SwitchChanges("leaf1", add_flows=tuple(plan.flows)), 120)
        rec, naive = [], []
        for _ in range(runs):
            # the controller drops the connection (as a restart does; removing the bridge's
            # controller instead would make Open vSwitch flush its flows); the bridge comes back
            up.clear()
            drv.session("leaf1").conn.close()
            await asyncio.wait_for(up.wait(), 20)
            t0 = time.perf_counter()
            got = await drv.read_state("leaf1")
            assert diff_switch(got.plan, plan).empty, "the bridge lost entries"
            rec.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await _naive(drv, "leaf1", plan)
            naive.append(time.perf_counter() - t0)
        ver = subprocess.run(["ovs-vsctl", "--version"], capture_output=True,
                             text=True).stdout.split()[3]
        _print_one(len(plan.flows), rec, naive, f"Open vSwitch {ver} bridge (userspace "
                   f"datapath), {drv.session('leaf1').dialect.name} over TCP")
    finally:
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", bridge], capture_output=True)
        handle.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ovs", action="store_true", help="part 2 against Open vSwitch (root)")
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--skip-fat-tree", action="store_true")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} (1 min); median of {args.runs} runs")
    if not args.skip_fat_tree:
        fat_tree(args.runs)
    one_switch(args.entries, args.runs, args.ovs)


if __name__ == "__main__":
    main()
