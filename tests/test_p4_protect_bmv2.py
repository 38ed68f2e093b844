"""Data-plane protection of pinned hops on one real BMv2 running fabric.p4 (its header comment).
The ``liveness`` entry (``set_liveness(timeout_us, hold_us)``) says how the switch judges a port
from the LLDP probes it hears; ``pin_egress_protected(port, backup_port)``:

* forwards to ``port`` while it is live, to a live ``backup_port`` once ``port`` has heard no
  probe for the timeout, back to ``port`` only a hold time after its probes return (a flapping
  link does not move the flow back and forth), and keeps ``port`` when neither hears anything;
  a silence of the whole switch puts no port in hold-down;
* with ``backup_port`` 0 (a hop without an alternative), sends a packet back out of its ingress
  port while ``port`` is dead (not while it is in hold-down), if the ingress port is a live
  fabric port (``bounced``);
* takes a packet that comes back in by its planned port as a bounce: to the backup, and the
  destination avoids the planned port a while (``remote_dead_until_us``);
* never lets a pinned packet leave by the port it came in by otherwise (``dropped[2]``).

The test plays the neighbours: it sends the LLDP probes into the switch's ports from the root
namespace. Timeouts are generous (BMv2 on a loaded machine). Skips without BMv2 or root."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from controller.drivers import frames
from controller.drivers.p4runtime.client import P4Switch
from controller.drivers.p4runtime.encode import encode_switch
from controller.model import load_topology
from controller.plan.build import build_plan
from controller.plan.model import (
    ETH_TYPE_IPV4,
    Action,
    FlowIntent,
    LivenessTimers,
    Match,
    NextHopSet,
    SwitchPlan,
)
from controller.qos.validate import load_valid_policy as load_policy
from controller.testing.p4sync import sync
from mininet_labs.lab.bmv2 import NetnsSwitch, bmv2_missing_reason
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY
from tests.test_p4_bmv2 import Ports, ipv4_udp

_why = bmv2_missing_reason()
pytestmark = [pytest.mark.p4, pytest.mark.skipif(_why is not None, reason=_why or "")]
TIMEOUT_S, HOLD_S = 0.3, 1.5   # generous: BMv2 on a loaded machine
TIMERS = LivenessTimers(round(TIMEOUT_S * 1e6), round(HOLD_S * 1e6))


def _plan(extra: FlowIntent) -> SwitchPlan:
    """leaf1 of the main experiment (hosts on ports 1, 2; uplinks 3, 4) plus ``extra``."""
    sp = build_plan(load_topology(MAIN_TOPOLOGY), load_policy(PINNED_POLICY)).plan
    leaf1 = sp.switches["leaf1"]
    return dataclasses.replace(leaf1, flows=leaf1.flows | {extra})


def _flow(nhs: NextHopSet, dst: str = "10.0.9.9") -> FlowIntent:
    return FlowIntent(0, 900, Match(eth_type=ETH_TYPE_IPV4, ipv4_src="10.0.0.1", ipv4_dst=dst),
                      Action.via(nhs), "protected")


class Switch:
    """The BMv2 and the test's hands on its ports: a background task sends an LLDP probe into
    every port of :attr:`probing` every 50 ms, as the neighbours' controller would."""

    def __init__(self, bmv2: NetnsSwitch, sw: P4Switch) -> None:
        self.ports = Ports(bmv2)
        self.sw = sw
        self.probing: set[int] = set()

    async def probe_forever(self) -> None:
        while True:
            for p in sorted(self.probing):
                self.ports.send(p, frames.build_lldp(0x10 + p, 1))
            await asyncio.sleep(0.05)

    async def out_ports(self, data: bytes, in_port: int = 1) -> set[int]:
        return (await self.sent([(data, in_port)]))[0]

    async def sent(self, frames_in: list[tuple[bytes, int]], gap_s: float = 0.0
                   ) -> list[set[int]]:
        """Send each ``(frame, port)`` in order, ``gap_s`` apart (BMv2 reads its ports in
        threads of their own: frames on two ports sent together may be handled either way
        round); where each frame came out."""
        self.ports.drain()
        for i, (data, port) in enumerate(frames_in):
            if i and gap_s:
                await asyncio.sleep(gap_s)
            self.ports.send(port, data)
        got = await asyncio.to_thread(self.ports.recv_all, 0.5)
        return [{p for p, fs in got.items() if data in fs} for data, _ in frames_in]

    async def counter(self, name: str, index: int) -> int:
        return (await self.sw.read_counters(name)).get(index, (0, 0))[0]


def _run(tmp_path, plan: SwitchPlan, body) -> None:  # noqa: ANN001 - a coroutine function
    async def go() -> None:
        with NetnsSwitch(ports=4, device_id=3, workdir=tmp_path) as bmv2:
            async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=20) as sw:
                await sync(sw, encode_switch(plan))
                s = Switch(bmv2, sw)
                task = asyncio.create_task(s.probe_forever())
                try:
                    await body(s)
                finally:
                    task.cancel()

    asyncio.run(go())


def test_a_protected_hop_moves_to_its_backup_and_back_only_after_the_hold(tmp_path):
    data = ipv4_udp("10.0.0.1", "10.0.9.9", 7, 7)

    async def body(s: Switch) -> None:
        s.probing = {3, 4}
        await asyncio.sleep(0.3)
        assert await s.out_ports(data) == {3}          # both live: the planned port
        s.probing = {4}                                 # the primary goes silent
        await asyncio.sleep(3 * TIMEOUT_S)
        assert await s.out_ports(data) == {4}
        assert await s.counter("failover_used", 3) == 1
        # its probes come back: still the backup (hold-down), then the planned port again
        s.probing = {3, 4}
        await asyncio.sleep(HOLD_S / 4)
        assert await s.out_ports(data) == {4}
        await asyncio.sleep(HOLD_S)
        assert await s.out_ports(data) == {3}
        # nobody hears anything (no controller probing): the planned port is kept
        s.probing = set()
        await asyncio.sleep(3 * TIMEOUT_S)
        assert await s.out_ports(data) == {3}
        # that switch-wide silence (as when BMv2 is starved of CPU) put no port in hold-down:
        # after it, a dead primary fails over to the backup at once
        s.probing = {3, 4}
        await asyncio.sleep(0.2)
        s.probing = {4}
        await asyncio.sleep(3 * TIMEOUT_S)
        assert await s.out_ports(data) == {4}

    _run(tmp_path, _plan(_flow(NextHopSet("failover", (3, 4), liveness=TIMERS))), body)


def test_a_hop_without_an_alternative_sends_back_and_the_hop_before_takes_its_backup(tmp_path):
    # port 3 plays the hop with no alternative towards 10.0.9.9 (a spine towards a leaf):
    # planned port 4, else back where the packet came from
    to_spine = ipv4_udp("10.0.0.1", "10.0.9.9", 7, 7)
    # and the same switch as the hop before, for 10.0.8.8: planned uplink 3, backup 4
    back = _flow(NextHopSet("failover", (4,), bounce=True, liveness=TIMERS))
    before = dataclasses.replace(_flow(NextHopSet("failover", (3, 4), liveness=TIMERS),
                                       dst="10.0.8.8"), priority=901)
    plan = _plan(back)
    plan = dataclasses.replace(plan, flows=plan.flows | {before})
    to_uplink = ipv4_udp("10.0.0.1", "10.0.8.8", 7, 7)

    async def body(s: Switch) -> None:
        # ports 3 and 4 are fabric ports (probed); 1 and 2 face hosts (never probed)
        s.probing = {3, 4}
        await asyncio.sleep(0.3)
        assert await s.out_ports(to_spine, in_port=3) == {4}
        s.probing = {3}                                   # port 4 dies
        await asyncio.sleep(3 * TIMEOUT_S)
        assert await s.out_ports(to_spine, in_port=3) == {3}   # back where it came from
        assert await s.counter("bounced", 4) == 1
        # from a host port (never heard: not a switch) nothing comes back: the planned port
        assert await s.out_ports(to_spine, in_port=1) == {4}
        # port 4 hears again: in hold-down it still forwards (a bounce is for a dead port)
        s.probing = {3, 4}
        await asyncio.sleep(0.2)
        assert await s.out_ports(to_spine, in_port=3) == {4}
        # the hop before: its packet comes back in by its planned port 3 → the backup 4 ...
        await asyncio.sleep(HOLD_S + 3 * TIMEOUT_S)        # both live, hold over
        assert await s.out_ports(to_uplink) == {3}
        # ... and the destination keeps off port 3 a while (REMOTE_AVOID_US, 100 ms: the
        # second packet, sent 20 ms after, goes within it), then tries it again
        later = ipv4_udp("10.0.0.1", "10.0.8.8", 8, 8)
        assert await s.sent([(to_uplink, 3), (later, 1)], gap_s=0.02) == [{4}, {4}]
        assert await s.out_ports(to_uplink) == {3}
        # sent back with the backup dead too: dropped, never out of its ingress port again
        s.probing = {3}                                   # port 4 dead
        await asyncio.sleep(3 * TIMEOUT_S)
        before = await s.counter("dropped", 2)
        assert await s.out_ports(to_uplink, in_port=3) == set()
        assert await s.counter("dropped", 2) == before + 1

    _run(tmp_path, plan, body)
