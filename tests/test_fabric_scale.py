"""The small version of ``bench/fabric_scale.py`` (issue 28): a k = 4 fat-tree as 20 Open vSwitch
bridges (patch ports for its 32 fabric links), the controller as real processes, alone and as
3 replicas on a 3-member etcd. Asserts what does not depend on the machine's speed: every switch
confirmed and holding exactly the plan's entries and groups; a ``kill -9`` and restart reconciles
every switch with nothing sent; a replica's death moves its switches to the others, which
reconcile them with nothing sent; mastership balanced within one switch.

Needs root and Open vSwitch (and etcd for the replicas); bridges named ``k28t<pid>s<n>`` are
removed afterwards. Plain TCP on loopback (``--insecure``): Open vSwitch's TLS settings are one
for the whole host (the bench, which holds the lab lock, runs with TLS). Waits are generous and
bounded; nothing here asserts how fast.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from controller.drivers.openflow.encode import COOKIE
from controller.model.topology import load_topology
from controller.plan.model import count_entries
from controller.policy import load_policy
from controller.runtime.intent import plan_for
from controller.runtime.placement import initial_placement
from controller.testing.etcd import free_loopback_ports
from controller.testing.fabricrun import (
    ControllerProcess,
    logged_masters,
    messages_by_kind,
    policy_yaml,
    reconciled_by_master,
    topology_yaml,
)
from controller.testing.ovsfabric import OvsFabric, run

pytestmark = [
    pytest.mark.mininet,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ovs-vsctl") is None,
                       reason="needs root and Open vSwitch (make setup installs openvswitch-switch)"),
]

WRITES = ("flow-mod", "group-mod")
WAIT_S = 120.0


@pytest.fixture
def fabric(tmp_path):
    """(files dir, fabric, bridges, switch → (entries, groups) of the plan)."""
    (tmp_path / "topology.yaml").write_text(topology_yaml("fat-tree", 4))
    fab = load_topology(tmp_path / "topology.yaml")
    (tmp_path / "policy.yaml").write_text(policy_yaml(fab))
    pol = load_policy(tmp_path / "policy.yaml", fab)
    plan = plan_for(fab, pol, initial_placement(fab, pol), frozenset())
    want = {n: (count_entries([sp])[0], len(sp.next_hop_sets())) for n, sp in plan.switches.items()}
    ovs = OvsFabric(fab, f"k28t{os.getpid() % 10000}s")
    try:
        ovs.create()
        yield tmp_path, fab, ovs, want
    finally:
        ovs.remove()


def _start(d: Path, name: str, ports: tuple[int, int], extra: list[str]) -> ControllerProcess:
    of, metrics = ports
    return ControllerProcess(["-t", str(d / "topology.yaml"), "-p", str(d / "policy.yaml"),
                              "--listen", f"127.0.0.1:{of}", "--metrics-listen",
                              f"127.0.0.1:{metrics}", "--insecure", *extra],
                             d / f"{name}.log", metrics=f"http://127.0.0.1:{metrics}/metrics")


def _until(pred: Callable[[], bool], what: str, procs: dict[str, ControllerProcess],
           timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.5)
    tails = {n: "\n".join(ln.text for ln in p.lines[-15:]) for n, p in procs.items()}
    raise AssertionError(f"{what} not reached within {timeout_s:g} s: {tails}")


def _writes(p: ControllerProcess) -> int:
    return sum(messages_by_kind(p.metrics()).get(k, 0) for k in WRITES)


def test_alone_every_switch_holds_the_plan_and_a_restart_sends_nothing(fabric):
    d, fab, ovs, want = fabric
    ports = tuple(free_loopback_ports(2))
    ovs.set_controllers([f"tcp:127.0.0.1:{ports[0]}"])
    n = len(fab.switches)
    p = _start(d, "alone", ports, [])
    procs = {"alone": p}
    try:
        assert p.wait_text(f"all {n} switches programmed", WAIT_S) is not None, p.lines[-20:]
        assert ovs.all_entries(COOKIE) == want
        p.kill()
        p = procs["alone"] = _start(d, "alone", ports, [])
        _until(lambda: len(reconciled_by_master(procs, {}, set(ovs.bridges))) == n,
               "every switch reconciled after kill -9 and restart", procs)
        assert _writes(p) == 0
        assert ovs.all_entries(COOKIE) == want
    finally:
        for q in procs.values():
            q.kill()


def test_three_replicas_balance_and_a_dead_ones_switches_move_with_nothing_sent(fabric,
                                                                                 etcd_cluster):
    d, fab, ovs, want = fabric
    names = ("r1", "r2", "r3")
    flat = free_loopback_ports(2 * len(names))
    ports = {r: (flat[2 * i], flat[2 * i + 1]) for i, r in enumerate(names)}
    ovs.set_controllers([f"tcp:127.0.0.1:{ports[r][0]}" for r in names])
    switches = set(ovs.bridges)
    procs: dict[str, ControllerProcess] = {}
    try:
        for r in names:
            procs[r] = _start(d, r, ports[r], ["--cluster", etcd_cluster.url, "--replica", r])

        def masters() -> dict[str, str]:
            return logged_masters(procs)

        def balanced(live: tuple[str, ...]) -> bool:
            m = masters()
            loads = [sum(1 for x in m.values() if x == r) for r in live]
            return set(m) == switches and set(m.values()) <= set(live) \
                and max(loads) - min(loads) <= 1

        _until(lambda: balanced(names) and
               len(reconciled_by_master(procs, {}, switches)) == len(switches),
               "mastership balanced over r1, r2, r3 and every switch reconciled", procs)
        _until(lambda: ovs.all_entries(COOKIE) == want, "every switch holding the plan", procs)
        before = masters()
        victim = "r3"
        theirs = {sw for sw, r in before.items() if r == victim}
        assert theirs
        survivors = {r: p for r, p in procs.items() if r != victim}
        marks = {r: p.mark() for r, p in survivors.items()}
        sent = {r: _writes(p) for r, p in survivors.items()}
        procs.pop(victim).kill()
        _until(lambda: len(reconciled_by_master(survivors, marks, theirs)) == len(theirs),
               f"{victim}'s switches mastered and reconciled by r1, r2", procs)
        assert {r: _writes(p) for r, p in survivors.items()} == sent  # nothing modified
        _until(lambda: balanced(("r1", "r2")), "mastership balanced over r1, r2", procs)
        assert ovs.all_entries(COOKIE) == want
    finally:
        for p in procs.values():
            p.kill()


def test_bridges_left_by_an_earlier_run_are_made_empty_again(fabric):
    """A killed bench leaves its bridges, and with ``fail_mode=secure`` their flows: creating
    the fabric again deletes them first, so a cold start starts from empty switches (it once
    "programmed" a k = 16 fabric in 13.8 s by finding every entry in place)."""
    _, _, ovs, _ = fabric
    br = next(iter(ovs.bridges.values()))
    run(["ovs-ofctl", "-O", "OpenFlow13", "add-flow", br, "priority=7,actions=drop"])
    assert "priority=7" in run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", br])
    again = OvsFabric(ovs.fabric, ovs.tag)
    again.create()
    assert "priority=7" not in run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", br])
