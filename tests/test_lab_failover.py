"""A fabric link fails under Mininet: the controller re-pins, reprograms only what changed, and
every host still reaches every other; when the link returns, the original paths come back.

Needs root, a running Open vSwitch and Mininet (skipped with the reason otherwise); CI runs it.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.test_lab_mininet import REASON, _our_processes

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
POLICY = ROOT / "policies" / "pinned_two_rings.yaml"

pytestmark = [pytest.mark.mininet,
              pytest.mark.skipif(REASON is not None, reason=f"Mininet lab unavailable: {REASON}")]


def _flows(switch: str) -> list[str]:
    out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", switch],
                         capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def _pinned_output(switch: str, src: str, dst: str) -> int | None:
    """The output port of the pinned entry src -> dst on ``switch`` (None if absent)."""
    for line in _flows(switch):
        if "priority=500" in line and f"nw_src={src}," in line and f"nw_dst={dst} " in line:
            m = re.search(r"actions=output:(\d+)", line)
            return int(m.group(1)) if m else None
    return None


def _wait_for(pred, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    return False


@contextmanager
def _running_lab(tmp_path: Path) -> Iterator[tuple[Any, Any, Path]]:
    """The main fabric under Mininet with the pinned-policy controller, all pairs reachable.

    Yields (fabric, net, controller log); tears everything down and checks nothing is left."""
    from mininet.log import setLogLevel

    from controller.model.topology import load_topology
    from mininet_labs.lab import net as labnet
    from mininet_labs.lab.processes import start_controller

    setLogLevel("error")
    fabric = load_topology(TOPO)
    names = [s.name for s in fabric.switches]
    net = ctl = None
    log = tmp_path / "controller.log"
    # everything, teardown included, inside the lock: a teardown while another lab holds it
    # would kill that lab's recorded processes (the state file is machine-wide)
    with labnet.waiting_lab_lock():  # another lab on this machine: wait for it
        try:
            labnet.cleanup_leftovers(names)
            net = labnet.build_network(fabric, 9000, 20)
            ctl = start_controller(TOPO, POLICY, log, 30)
            labnet.set_controller(net, ctl.port)
            labnet.ping_all(net, fabric, 30)
            yield fabric, net, log
        finally:
            rc = ctl.stop() if ctl is not None else 0
            labnet.teardown(net, names)
    assert rc == 0
    assert _our_processes() == []


def test_link_down_repins_and_link_up_restores(tmp_path):
    from mininet_labs.lab import net as labnet

    with _running_lab(tmp_path) as (fabric, net, log):
        # every lab bridge keeps forwarding without its controller (fail_mode=secure) and retries
        # a lost controller every second (max_backoff 1000 ms, the least OVS accepts; default
        # 8000: ovs-vswitchd.conf.db(5), Controller table)
        for sw in ("leaf1", "spine2"):
            def get(*args: str) -> str:
                return subprocess.run(["ovs-vsctl", "get", *args], capture_output=True,
                                      text=True, check=True).stdout.strip()
            assert get("Bridge", sw, "fail_mode") == "secure"
            assert get("Controller", sw, "max_backoff") == str(labnet.MAX_BACKOFF_MS) == "1000"
            assert get("Controller", sw, "inactivity_probe") == "5000"
        h1, h3 = fabric.host_by_name["h1"].ipv4, fabric.host_by_name["h3"].ipv4
        up_spine1 = fabric.port_towards("leaf1", "spine1")
        up_spine2 = fabric.port_towards("leaf1", "spine2")
        # The planner pins ring-a's h1 -> h3 through spine1 (see `aifabric plan show`).
        assert _pinned_output("leaf1", h1, h3) == up_spine1

        net.configLinkStatus("leaf1", "spine1", "down")
        assert _wait_for(lambda: _pinned_output("leaf1", h1, h3) == up_spine2, 10), (
            "h1->h3 was not re-pinned away from the dead uplink:\n" + log.read_text()[-3000:])
        # No entry on leaf1 points at the dead port any more (routes went to a single uplink).
        assert not [f for f in _flows("leaf1") if f"output:{up_spine1}" in f], _flows("leaf1")
        labnet.flush_arp(net)
        labnet.ping_all(net, fabric, 20)
        text = log.read_text()
        assert re.search(r"\[leaf1 dpid=0x3\].*port 3.*down", text, re.IGNORECASE), text[-3000:]
        # Only what changed was sent: spine2 keeps its flows; no switch got a full re-push.
        sent = re.findall(r"\[(\w+) dpid=0x\w+\] sent (\d+) message", text)
        assert sent, text[-3000:]
        assert all(int(n) < 30 for _, n in sent), sent

        net.configLinkStatus("leaf1", "spine1", "up")
        assert _wait_for(lambda: _pinned_output("leaf1", h1, h3) == up_spine1, 10), (
            "h1->h3 did not return to spine1 after the link came back:\n" + log.read_text()[-3000:])
        labnet.ping_all(net, fabric, 20)


def test_whole_spine_down_keeps_every_pair_reachable(tmp_path):
    from mininet_labs.lab import net as labnet

    with _running_lab(tmp_path) as (fabric, net, log):
        leaves = [s.name for s in fabric.switches if s.role == "leaf"]
        for leaf in leaves:
            net.configLinkStatus(leaf, "spine1", "down")
        to_spine2 = {leaf: fabric.port_towards(leaf, "spine2") for leaf in leaves}

        def all_pins_on_spine2() -> bool:
            for h in fabric.hosts:
                for line in _flows(h.leaf):
                    if "priority=500" in line and f"nw_src={h.ipv4}," in line:
                        if f"actions=output:{to_spine2[h.leaf]}" not in line:
                            return False
            return True

        assert _wait_for(all_pins_on_spine2, 15), log.read_text()[-3000:]
        labnet.flush_arp(net)
        labnet.ping_all(net, fabric, 20)
