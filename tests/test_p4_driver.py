"""The P4Runtime driver behind the southbound interface, in one runtime with the OpenFlow driver:
a fabric whose leaves speak P4Runtime (fake clients applying writes with the P4Runtime rules)
and whose spines speak OpenFlow (the flow-table simulator). No BMv2 here; test_p4_bmv2.py runs
the program itself when simple_switch_grpc is present."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from controller.drivers import frames
from controller.drivers.p4runtime.driver import P4RuntimeDriver, decode_entities
from controller.drivers.p4runtime.encode import encode_switch, plan_ecmp_hash
from controller.drivers.p4runtime.entities import (
    Exact,
    MulticastGroup,
    SwitchEntities,
    TableEntry,
)
from controller.drivers.p4runtime.pipeline import BMV2
from controller.model.topology import load_topology
from controller.plan.model import ETH_TYPE_IPV4
from controller.policy import load_policy
from controller.runtime.controller import Controller
from controller.runtime.intent import intended_plan
from controller.runtime.process import ControllerOptions, build_state
from controller.testing import FakeFabric
from controller.testing.fakep4 import FakeP4Switch, factory
from controller.testing.fakeswitch import FakeSwitch
from controller.testing.p4model import Packet, forward
from tests.conftest import ECMP_POLICY, MAIN_TOPOLOGY, PINNED_POLICY

FABRIC = load_topology(MAIN_TOPOLOGY)
LEAVES = [s for s in FABRIC.switches if s.role == "leaf"]
SPINES = [s for s in FABRIC.switches if s.role == "spine"]
FOREIGN = TableEntry("dscp_to_priority", (("dscp", Exact(26)),), 0, "set_priority",
                     (("priority", 3),))


class Mixed:
    """Leaves on P4Runtime (fake clients), spines on OpenFlow (fake switches), one runtime."""

    def __init__(self, policy_path=PINNED_POLICY):
        from controller.drivers.openflow.driver import OpenFlowDriver

        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        pol = load_policy(policy_path, FABRIC)
        sb = {s.name: ("p4runtime" if s.role == "leaf" else "openflow") for s in FABRIC.switches}
        state = build_state(FABRIC, pol, policy_path.read_text(), str(policy_path), sb,
                            ControllerOptions(), frozenset({"openflow"}))
        self.p4 = {s.name: FakeP4Switch(s.name, s.dpid, SwitchEntities(
            s.name, s.dpid, frozenset({FOREIGN}), multicast=frozenset({MulticastGroup(5, (1,))})))
            for s in LEAVES}
        self.p4drv = P4RuntimeDriver({s.name: ("fake", s.dpid) for s in LEAVES},
                                     client_factory=factory(self.p4), reconnect_s=0.01)
        self.ofdrv = OpenFlowDriver({s.dpid: s.name for s in SPINES})
        self.ctl = Controller(state, {"openflow": self.ofdrv, "p4runtime": self.p4drv},
                              executor=ThreadPoolExecutor(2),
                              tick_s=3600)
        self.ff = FakeFabric.empty(FABRIC)
        self.of = {s.name: FakeSwitch(self.ofdrv, s.dpid, self.ff.tables[s.name])
                   for s in SPINES}
        self.run(self.ctl.start())

    def run(self, coro=None):
        out = self.loop.run_until_complete(coro) if coro is not None else None
        self.loop.run_until_complete(asyncio.sleep(0.2))
        return out

    def close(self):
        self.run(self.ctl.stop())
        self.loop.close()


def test_one_runtime_programs_p4_leaves_and_openflow_spines():
    m = Mixed()
    try:
        for sw in m.of.values():
            sw.connect()
        m.run()
        plan = intended_plan(m.ctl.state)
        for s in LEAVES:
            want = encode_switch(plan.switches[s.name], None,
                                 plan_ecmp_hash(plan.switches[s.name]), BMV2)
            got = m.p4[s.name].state
            assert decode_entities(got).plan == plan.switches[s.name]
            assert want.entries <= got.entries and FOREIGN in got.entries  # foreign kept
            assert MulticastGroup(5, (1,)) in got.multicast
        for s in SPINES:
            assert len(m.ff.tables[s.name].flows) == len(plan.switches[s.name].flows)
        # a pinned flow leaves its P4 leaf by the planned port
        d = next(d for d in m.ctl.state.placement if d.label == "ring-a h1->h3")
        path = m.ctl.state.placement[d]
        h1, h3 = FABRIC.host_by_name["h1"], FABRIC.host_by_name["h3"]
        import ipaddress

        pkt = Packet(ETH_TYPE_IPV4, int(ipaddress.IPv4Address(h1.ipv4)),
                     int(ipaddress.IPv4Address(h3.ipv4)), d.ip_proto or 6, d.dscp or 0,
                     d.l4_src or 1, d.l4_dst or 2)
        assert forward(m.p4["leaf1"].state, pkt) == frozenset(
            {FABRIC.port_towards("leaf1", path[2])})
        # ARP from a P4 switch goes through the runtime and back out as a packet-out
        req = frames.arp_frame(frames.Arp(1, h1.mac, h1.ipv4, "00:00:00:00:00:00", h3.ipv4),
                               "ff:ff:ff:ff:ff:ff", h1.mac)
        m.p4["leaf1"].packet_in(h1.port, req)
        m.run()
        ((port, frame),) = m.p4["leaf1"].packets_out
        assert port == h1.port and frames.parse_arp(frame).sender_mac == h3.mac
        # a reconnect with nothing changed writes nothing
        before = {n: (c.requests, c.updates) for n, c in m.p4.items()}
        m.p4["leaf2"].drop()
        m.run()
        assert {n: (c.requests, c.updates) for n, c in m.p4.items()} == before
        assert m.p4drv.messages_sent()[("leaf1", "p4-update")] > 0
    finally:
        m.close()


def test_a_refusing_p4_switch_is_restored_and_the_openflow_spines_rolled_back():
    m = Mixed(ECMP_POLICY)
    try:
        for sw in m.of.values():
            sw.connect()
        m.run()
        before_p4 = {n: c.state for n, c in m.p4.items()}
        before_of = {n: t.dump(True) for n, t in m.ff.tables.items()}
        m.p4["leaf3"].refuse = lambda u: ("table full" if u.op == "insert"
                                          and getattr(u.entity, "table", "") == "pinned"
                                          else None)
        from controller.runtime.service import FabricService

        svc = FabricService(m.ctl)
        res = m.run(svc.apply_policy(PINNED_POLICY.read_text(), str(PINNED_POLICY), False))
        assert not res.ok
        assert res.error.startswith("leaf3: entry ") and "table full" in res.error
        assert {n: c.state for n, c in m.p4.items()} == before_p4
        assert {n: t.dump(True) for n, t in m.ff.tables.items()} == before_of
        assert m.ctl.state.policy.generation == 1
    finally:
        m.close()


def test_p4_counters_reach_the_runtime_as_one_sample():
    """request_counters reads fabric.p4's counters (controller/drivers/p4runtime/counters.py)
    and reports one CounterSample: ports, queues (CE marks, depth histogram), pinned hits."""
    from controller.drivers.p4runtime.pipeline import depth_hist_index, queue_index
    from controller.drivers.southbound import CounterSample

    m = Mixed()
    try:
        m.run()
        leaf = m.p4["leaf1"]
        leaf.cells = {("port_rx", 1): (10, 1000), ("port_tx", 3): (7, 700),
                      ("queue_tx", queue_index(3, 0)): (7, 700),
                      ("ecn_marked", queue_index(3, 0)): (2, 0),
                      ("ecn_ce_tx", queue_index(3, 0)): (5, 0),
                      ("queue_depth_hist", depth_hist_index(3, 0, 0)): (6, 0),
                      ("queue_depth_hist", depth_hist_index(3, 0, 7)): (1, 0)}
        pinned = next(e for e in leaf.state.entries if e.table == "pinned")
        leaf.hits = {pinned.key: (4, 400)}
        m.p4drv.ports["leaf1"] = (1, 3)
        seen: list[object] = []
        m.ctl.listeners.append(lambda ev, st: seen.append(ev))
        m.run(m.p4drv.request_counters("leaf1", frozenset({"ports", "queues", "entries"})))
        (s,) = [e for e in seen if isinstance(e, CounterSample)]
        assert {(p.port, p.rx_packets, p.tx_packets) for p in s.ports} == {(1, 10, 0), (3, 0, 7)}
        (q,) = s.queues
        assert (q.port, q.queue_id, q.tx_packets, q.ecn_marked_packets, q.ce_packets) == (
            3, 0, 7, 2, 5)
        assert q.depth_hist == (6, 0, 0, 0, 0, 0, 0, 1)
        assert [e.packets for e in s.entries if e.packets] == [4]
        assert m.p4drv.messages_sent()[("leaf1", "p4-read")] == 1
    finally:
        m.close()


def test_a_p4_backup_says_so_and_writes_nothing():
    from controller.drivers.southbound import NotMaster
    from controller.plan.model import SwitchChanges, empty_plan

    m = Mixed()
    try:
        m.run()
        m.p4["leaf2"].role = "backup"  # another client holds primary on leaf2
        assert m.p4drv.role_of("leaf2") == "backup"
        assert m.run(m.p4drv.set_role("leaf2", "master", None)) == "backup"
        before = m.p4["leaf2"].requests
        with pytest.raises(NotMaster, match="another client is primary"):
            m.run(m.p4drv.apply("leaf2", SwitchChanges("leaf2"), empty_plan("leaf2", 4), 1.0))
        assert m.p4["leaf2"].requests == before
    finally:
        m.close()


def test_drift_reads_p4_switches_without_touching_the_drivers_ids():
    """A pinned entry deleted from a P4Runtime leaf by another client is drift (missing); the
    read adopts nothing: the driver's group ids and its record of the entities beyond the
    canonical encoding stay as the last read-back left them, and nothing is written."""
    from dataclasses import replace

    from controller.runtime.drift import check_drift

    m = Mixed()
    try:
        for sw in m.of.values():
            sw.connect()
        m.run()
        rep = m.run(check_drift(m.ctl, (), timeout_s=5.0))
        assert rep.drifted == () and not rep.unread
        s = m.p4drv._session("leaf1")  # noqa: SLF001 - what a read must leave alone
        kept = (dict(s.group_ids), s.extra, s.missing)
        leaf1 = m.p4["leaf1"]
        gone = next(e for e in leaf1.state.entries if e.table == "pinned")
        leaf1.state = replace(leaf1.state, entries=leaf1.state.entries - {gone})
        s.group_ids = {**s.group_ids, (99,): 77}        # a marker a read would overwrite
        kept = (dict(s.group_ids), s.extra, s.missing)
        writes = (leaf1.requests, leaf1.updates)
        rep = m.run(check_drift(m.ctl, ("leaf1",), timeout_s=5.0))
        (d,) = rep.switches
        assert d.read and rep.drifted == ("leaf1",)
        assert [e.kind for e in d.entries] == ["missing"] and d.foreign_entries >= 1
        assert "priority=500" in d.entries[0].entry and "'pin " in d.entries[0].entry
        assert (dict(s.group_ids), s.extra, s.missing) == kept
        assert (leaf1.requests, leaf1.updates) == writes   # the read is not a write request
    finally:
        m.close()
