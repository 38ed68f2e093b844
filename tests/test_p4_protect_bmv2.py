"""Data-plane protection of a pinned hop on one real BMv2 running fabric.p4 (its header
comment): ``pin_egress_protected(port, backup_port, timeout_us)`` forwards to ``port`` while it
hears LLDP probes, to ``backup_port`` once ``port`` has heard none for ``timeout_us`` and the
backup has, and keeps ``port`` when neither hears any; ``failover_used[port]`` counts the packets
sent to the backup. The test plays the neighbours: it sends the LLDP probes into the switch's
ports from the root namespace. Skips without BMv2 or root."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from controller.drivers import frames
from controller.drivers.p4runtime.client import P4Switch
from controller.drivers.p4runtime.encode import encode_flow, encode_switch
from controller.model import load_topology
from controller.plan.build import build_plan
from controller.plan.model import ETH_TYPE_IPV4, Action, FlowIntent, Match, NextHopSet
from controller.qos.validate import load_valid_policy as load_policy
from mininet_labs.lab.bmv2 import NetnsSwitch, bmv2_missing_reason
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY
from tests.test_p4_bmv2 import Ports, ipv4_udp

_why = bmv2_missing_reason()
pytestmark = [pytest.mark.p4, pytest.mark.skipif(_why is not None, reason=_why or "")]
TIMEOUT_US = 300_000  # generous: BMv2 on a loaded machine


def test_a_protected_pinned_hop_moves_to_its_backup_when_the_primary_stops_hearing(tmp_path):
    fabric = load_topology(MAIN_TOPOLOGY)
    leaf1 = encode_switch(build_plan(fabric, load_policy(PINNED_POLICY)).plan.switches["leaf1"])
    fi = FlowIntent(0, 900, Match(eth_type=ETH_TYPE_IPV4, ipv4_src="10.0.0.1",
                                  ipv4_dst="10.0.9.9"),
                    Action.via(NextHopSet("failover", (3, 4))), "protected")
    protected = encode_flow("leaf1", fi, timeout_us=TIMEOUT_US)
    want = dataclasses.replace(leaf1, entries=leaf1.entries | {protected})
    data = ipv4_udp("10.0.0.1", "10.0.9.9", 7, 7)

    async def go():
        with NetnsSwitch(ports=4, device_id=3, workdir=tmp_path) as bmv2:
            async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=20) as sw:
                await sw.reconcile(want)
                ports = Ports(bmv2)
                await asyncio.sleep(0.3)

                def probe(*on: int) -> None:
                    for p in on:
                        ports.send(p, frames.build_lldp(0x10 + p, 1))

                async def out_port() -> set[int]:
                    ports.drain()
                    ports.send(1, data)
                    got = await asyncio.to_thread(ports.recv_all, 0.5)
                    return {p for p, fs in got.items() if data in fs}

                probe(3, 4)
                assert await out_port() == {3}  # both alive: the planned port
                # the primary goes silent, the backup keeps hearing its neighbour
                t_end = time.monotonic() + 3 * TIMEOUT_US / 1e6
                while time.monotonic() < t_end:
                    probe(4)
                    await asyncio.sleep(0.05)
                probe(4)
                assert await out_port() == {4}
                used = await sw.read_counters("failover_used")
                assert used.get(3, (0, 0))[0] == 1
                # the primary hears again: back on it at once
                probe(3, 4)
                assert await out_port() == {3}
                # nobody hears anything (no controller probing): the planned port is kept
                await asyncio.sleep(3 * TIMEOUT_US / 1e6)
                assert await out_port() == {3}

    asyncio.run(go())
