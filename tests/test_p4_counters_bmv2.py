"""P4 telemetry read from one real BMv2 running fabric.p4: port counters, queue counters with
ECN CE marks and the queue-depth histogram, and the pinned entries' direct counter, read by
the driver's counter reader (controller/drivers/p4runtime/counters.py) into one
CounterSample. Skips without BMv2 or root."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from controller.drivers.p4runtime.client import P4Switch
from controller.drivers.p4runtime.counters import read_sample
from controller.drivers.p4runtime.encode import encode_switch, qos_entries
from controller.drivers.p4runtime.pipeline import BMV2, QDEPTH_BUCKETS_PKTS
from controller.model import load_topology
from controller.plan.build import build_plan
from controller.qos.validate import load_valid_policy as load_policy
from controller.testing.p4sync import sync
from mininet_labs.lab.bmv2 import NetnsSwitch, bmv2_missing_reason
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY
from tests.test_p4_bmv2 import Ports, ipv4_udp

_why = bmv2_missing_reason()
pytestmark = [pytest.mark.p4, pytest.mark.skipif(_why is not None, reason=_why or "")]


def test_one_sample_has_ports_queues_ce_marks_depth_and_pinned_hits(tmp_path):
    """h1 (port 1) sends 4 ECT(0) packets and 3 already-CE packets to h3 (pinned out of port 3).
    fabric.p4 (header comment): ecn_marked counts what this switch marked (threshold 0 on port
    3 priority 0: the 4 ECT ones), ecn_ce_tx every packet leaving with CE (all 7); every
    packet is counted once in the depth histogram; the pinned entry's direct counter sees 7."""
    fabric = load_topology(MAIN_TOPOLOGY)
    h = fabric.host_by_name
    leaf1 = encode_switch(build_plan(fabric, load_policy(PINNED_POLICY)).plan.switches["leaf1"])
    qos = {"tables": [{"table": "ecn_threshold", "match": {"egress_port": 3, "priority": 0},
                       "action": "mark_ecn", "params": {"threshold_pkts": 0}}]}
    want = dataclasses.replace(leaf1, entries=leaf1.entries | set(qos_entries("leaf1", qos)))

    async def go():
        with NetnsSwitch(ports=4, device_id=3, workdir=tmp_path) as bmv2:
            async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=20) as sw:
                await sync(sw, want)
                ports = Ports(bmv2)
                await asyncio.sleep(0.3)
                ports.drain()
                for i in range(7):
                    ports.send(1, ipv4_udp(h["h1"].ipv4, h["h3"].ipv4, 1000 + i, 2,
                                           ecn=2 if i < 4 else 3))
                got = await asyncio.to_thread(ports.recv_all, 0.8)
                assert len(got[3]) == 7
                s = await read_sample(sw, "leaf1", (1, 3), frozenset({"ports", "queues",
                                                                      "entries"}), BMV2,
                                      priorities=(0,), clock=lambda: 5.0)
        assert s.switch == "leaf1" and s.now_s == 5.0
        by_port = {p.port: p for p in s.ports}
        assert by_port[1].rx_packets >= 7 and by_port[3].tx_packets == 7
        (q,) = [q for q in s.queues if q.port == 3]
        assert (q.queue_id, q.tx_packets) == (0, 7)
        assert (q.ecn_marked_packets, q.ce_packets) == (4, 7)
        assert q.depth_bounds == QDEPTH_BUCKETS_PKTS and q.depth_unit == "packets"
        assert sum(q.depth_hist) == 7
        hits = {(e.match.ipv4_src, e.match.ipv4_dst): e.packets for e in s.entries}
        assert hits.get((h["h1"].ipv4, h["h3"].ipv4)) == 7

    asyncio.run(go())
