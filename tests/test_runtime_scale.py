"""What keeps the control plane's cost per fabric, not per switch (issue 28), on the pure core and
the OpenFlow codec and transport: a table capacity the entries fit in re-plans nothing; telemetry
yields to programming and spreads its requests over the round; link events arriving while a
transaction is in flight fold into one converge; the write window; flow statistics read from the
wire as os-ken reads them; every switch connection on the loop (no thread per connection).

Nothing here asserts a speed (bench/fabric_scale.py measures it)."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from dataclasses import replace

from os_ken.ofproto import ofproto_v1_3_parser as p13

from controller.drivers.openflow import encode, wire
from controller.drivers.openflow.dialect import OF13
from controller.drivers.openflow.driver import OpenFlowDriver
from controller.drivers.openflow.listener import bind_listener
from controller.drivers.southbound import (
    PortStatus,
    SwitchConnected,
    SwitchFeatures,
    SwitchState,
    TableCapacity,
)
from controller.model.topology import load_topology
from controller.plan.model import (
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    Action,
    FlowIntent,
    Match,
    NextHopSet,
)
from controller.policy import load_policy
from controller.runtime import core, writes
from controller.runtime.controller import (
    WRITE_WINDOW,
    WRITES_IN_FLIGHT_MIN,
    _Window,
    write_weight,
)
from controller.runtime.events import (
    Publish,
    ReadBackDone,
    RequestCounters,
    RoleAssigned,
    SendPacket,
    Tick,
    WriteAnswered,
)
from controller.runtime.intent import ECMP_HASH_CAPABILITY, intended_plan
from controller.runtime.placement import initial_placement
from controller.runtime.state import PolicyInForce, RuntimeSettings, initial_state
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY

#: what Open vSwitch bridges speaking OpenFlow 1.5 report (the plan's ECMP hashes fit them)
HASHES = frozenset({ECMP_HASH_CAPABILITY})
FABRIC = load_topology(MAIN_TOPOLOGY)


def _state(**settings):
    pol = load_policy(PINNED_POLICY, FABRIC)
    return initial_state(FABRIC, PolicyInForce(pol), RuntimeSettings(**settings),
                         placement=initial_placement(FABRIC, pol))


def _programmed(st):
    """Every switch connected, master, read back holding its plan."""
    for sw in FABRIC.switches:
        st = core.step(st, SwitchConnected(sw.name, SwitchFeatures("openflow", sw.dpid, "x",
                                                              capabilities=HASHES), 1),
                       0.0).state
        st = core.step(st, RoleAssigned(sw.name, "master", 1), 0.0).state
        st = core.step(st, ReadBackDone(sw.name, 1, SwitchState(writes.target_of(st, sw.name))),
                       0.0).state
    assert st.programmed == frozenset(s.name for s in FABRIC.switches)
    return st


# -- table capacity ----------------------------------------------------------------------------------
def test_a_capacity_the_entries_fit_in_makes_no_new_generation():
    """Every Open vSwitch bridge reports table 0 holding 1,000,000 entries: the plan fits as
    before, so nothing is re-planned or compared again (a k = 16 fabric re-planned the whole
    fabric for each of its 320 switches)."""
    st = _state()
    plan = intended_plan(st)
    big = (TableCapacity("0", 1_000_000),)
    for sw in FABRIC.switches:
        got = core.step(st, SwitchConnected(sw.name, SwitchFeatures("openflow", sw.dpid, "x",
                                                                    tables=big, capabilities=HASHES), 1), 0.0)
        assert got.state.generation == st.generation and not got.state.converge
        st = got.state
    assert intended_plan(st) is plan
    # one that binds does re-plan (test_runtime_recovery covers what it changes)
    small = (TableCapacity("0", 12),)
    leaf = FABRIC.switch_by_name["leaf1"]
    got = core.step(st, SwitchConnected("leaf1", SwitchFeatures("openflow", leaf.dpid, "x",
                                                                tables=small, capabilities=HASHES), 2), 0.0)
    assert got.state.generation == st.generation + 1
    assert [e.kind for e in got.effects if isinstance(e, Publish)] == ["table-overflow"]


# -- telemetry -----------------------------------------------------------------------------------------
def test_counter_requests_are_spread_over_the_round_and_a_late_tick_asks_everyone():
    st = _programmed(_state(stats_interval_s=1.0))
    st = core.step(st, Tick(10.0), 10.0).state
    asked: dict[str, int] = {}
    per_tick = []
    for i in range(1, 11):  # ten ticks of 0.1 s: one round
        fx = core.step(st, Tick(10.0 + i / 10), 10.0 + i / 10)
        st = fx.state
        names = [e.switch for e in fx.effects if isinstance(e, RequestCounters)]
        per_tick.append(len(names))
        for n in names:
            asked[n] = asked.get(n, 0) + 1
    assert set(asked) == {s.name for s in FABRIC.switches}
    assert max(per_tick) < len(FABRIC.switches)  # never the whole fabric at once
    late = core.step(st, Tick(15.0), 15.0)
    assert {e.switch for e in late.effects if isinstance(e, RequestCounters)} == set(asked)
    # entry counters only where the telemetry counts them (switches with hosts)
    kinds = {e.switch: e.kinds for e in late.effects if isinstance(e, RequestCounters)}
    assert all(("entries" in k) == (FABRIC.switch_by_name[n].tier == 1) for n, k in kinds.items())


def test_a_round_lasts_as_long_as_the_entry_budget_needs(monkeypatch):
    st = _programmed(_state(stats_interval_s=1.0))
    polled = sum(len(intended_plan(st).switches[h.leaf].flows)
                 for h in {h.leaf: h for h in FABRIC.hosts}.values())
    monkeypatch.setattr(core, "ENTRY_COUNTERS_PER_S", polled / 4)  # a round of 4 s
    st = core.step(st, Tick(0.0), 0.0).state
    n = 0
    for i in range(1, 11):  # one second of ticks: a quarter of the round
        fx = core.step(st, Tick(i / 10), i / 10)
        st = fx.state
        n += sum(1 for e in fx.effects if isinstance(e, RequestCounters))
    assert n <= len(FABRIC.switches) // 4 + 10  # ceil per tick


def test_telemetry_yields_while_a_transaction_is_in_flight():
    st = _programmed(_state(stats_interval_s=1.0, lldp_interval_s=1.0))
    st = core.step(st, Tick(0.0), 0.0).state
    # a link goes down: a transaction starts (in flight until the switches answer)
    s1 = core.step(st, PortStatus("leaf1", FABRIC.port_towards("leaf1", "spine1"), False), 0.5)
    assert s1.state.txn is not None
    quiet = core.step(s1.state, Tick(3.0), 3.0)
    assert not [e for e in quiet.effects if isinstance(e, (RequestCounters, SendPacket))]
    # once the switches hold the plan again, counters and probes resume (the LLDP check
    # waits for one round of probes after the pause)
    st = quiet.state
    t = st.txn
    while t is not None:
        for sw in sorted(t.waiting):
            st = core.step(st, WriteAnswered(t.id, sw, 1, "done"), 3.1).state
        t = st.txn
    back = core.step(st, Tick(4.5), 4.5)
    assert [e for e in back.effects if isinstance(e, RequestCounters)]
    assert [e for e in back.effects if isinstance(e, SendPacket)]


# -- link events ---------------------------------------------------------------------------------------
def test_a_commit_sends_the_changes_its_preview_computed(monkeypatch):
    """The preview of a commit (off the loop) computed each switch's changes from the plan
    before to the new one; the converge that follows sends those to the switches holding the
    plan before, not a diff of its own for each (~190 switches per registration batch at
    k = 16); without a preview it diffs them itself, to the same writes."""
    from controller.runtime.events import Write
    from controller.runtime.intentstore import IntentUpdate, synced
    from controller.runtime.service import _preview

    st = _programmed(_state())
    update = IntentUpdate(placement=dict(list(st.placement.items())[1:]))
    planned, changes, _ = _preview(st, update, 0.0, 0.0)
    assert changes
    calls: list[str] = []
    real = writes.diff_switch
    monkeypatch.setattr(writes, "diff_switch", lambda a, b: calls.append(b.switch) or real(a, b))

    def written(hint):
        out = core.step(st, synced(st, update, st.intent_generation + 1, 0.0, hint), 0.0)
        got: dict[str, set] = {}
        for fx in out.effects:
            if isinstance(fx, Write):
                got.setdefault(fx.switch, set()).update(fx.part.add_flows, fx.part.delete_flows)
        return got

    with_preview = written(planned)
    assert calls == []
    assert with_preview == {n: {*c.add_flows, *c.delete_flows} for n, c in changes.items()}
    assert written(None) == with_preview and sorted(calls) == sorted(changes)


def test_link_events_during_a_transaction_fold_into_one_converge():
    """Every port of a failed switch reports down one after another: the first starts a
    transaction, the others arrive while it is in flight and are converged to together."""
    st = _programmed(_state())
    downs = [("spine1", FABRIC.port_towards("spine1", leaf)) for leaf in
             ("leaf1", "leaf2", "leaf3", "leaf4")]
    st = core.step(st, PortStatus(*downs[0], False), 1.0).state
    first = st.txn
    assert first is not None
    gens = {st.generation}
    for sw, port in downs[1:]:
        st = core.step(st, PortStatus(sw, port, False), 1.0).state
        assert st.txn is first and st.converge  # folded: converged to after the one in flight
        gens.add(st.generation)
    assert len(gens) == 4
    t = st.txn
    txns = set()
    while t is not None:
        txns.add(t.id)
        for sw in sorted(t.waiting):
            st = core.step(st, WriteAnswered(t.id, sw, 1, "done"), 1.1).state
        t = st.txn
    assert len(txns) == 2  # the first, then one for all the others
    plan = intended_plan(st)
    assert all(st.switches[n].held == plan.switches[n] for n in plan.switches)
    assert len(st.down_links) == 4
    assert not [f for f in plan.switches["spine1"].flows
                if set(f.action.ports()) & {p for _, p in downs}]


# -- the write window ------------------------------------------------------------------------------------
def test_the_write_window_counts_entries_and_lets_a_large_write_go_alone():
    async def run() -> list[str]:
        w = _Window(100)
        order: list[str] = []

        async def write(name: str, n: int, hold: asyncio.Event) -> None:
            await w.acquire(n)
            order.append(f"+{name}")
            await hold.wait()
            order.append(f"-{name}")
            w.release(n)
        done = [asyncio.Event() for _ in range(4)]
        tasks = [asyncio.create_task(write("a", 60, done[0])),
                 asyncio.create_task(write("b", 30, done[1])),
                 asyncio.create_task(write("c", 500, done[2])),  # larger than the window
                 asyncio.create_task(write("d", 5, done[3]))]
        await asyncio.sleep(0)
        assert order == ["+a", "+b"] and w.used == 90  # c waits; d waits behind c (in order)
        done[0].set()
        done[1].set()
        await asyncio.sleep(0.01)
        assert order[-1] == "+c" and w.used == 500  # alone
        done[2].set()
        await asyncio.sleep(0.01)
        done[3].set()
        await asyncio.gather(*tasks)
        assert w.used == 0
        return order
    assert asyncio.run(run()) == ["+a", "+b", "-a", "-b", "+c", "-c", "+d", "-d"]


def test_sixteen_switches_are_written_at_once_however_large_their_writes():
    """k = 32: 8,193 to 16,402 entries per switch. Counted by entries alone, two bundles were in
    flight and Open vSwitch, reading 50 messages of a connection per turn of its main loop over
    1,280 bridges, took ~2,800 messages a second; sixteen at once ~23,500. Small writes still
    count their entries (a registration's hundred small bundles all go at once)."""
    assert write_weight(3) == 4 and write_weight(500) == 501
    w = _Window(WRITE_WINDOW)

    async def run() -> int:
        async def write(entries: int) -> None:
            await w.acquire(write_weight(entries))
        tasks = [asyncio.create_task(write(n)) for n in [8_193, 16_402] * 10]
        await asyncio.sleep(0.01)
        admitted = sum(t.done() for t in tasks)
        for t in tasks:
            t.cancel()
        return admitted
    assert asyncio.run(run()) == WRITES_IN_FLIGHT_MIN == 16


# -- flow statistics from the wire -----------------------------------------------------------------------
def _flow_stats_reply(records: list[tuple[FlowIntent, int | None, int, int]]) -> bytes:
    """An OpenFlow 1.3 OFPMP_FLOW reply (OpenFlow 1.3.5 §7.3.5.2) holding ``records``
    (entry, group id, bytes, packets), built field by field."""
    body = b""
    for f, gid, nbytes, packets in records:
        m = wire.match_bytes(f.match)
        ins = wire.instructions_bytes(f.action, gid)
        body += struct.pack("!HBxIIHHHH4xQQQ", 48 + len(m) + len(ins), f.table, 7, 9, f.priority,
                            0, 0, 0, encode.COOKIE, packets, nbytes) + m + ins
    return struct.pack("!BBHIHH4x", 4, 19, 16 + len(body), 77, 1, 0) + body


def _group_and_output_entries(e34: NextHopSet, gid: int) -> list[tuple[object, ...]]:
    """Two entries every read-back test decodes: to a group, and to a port with a 5-tuple."""
    return [
        (FlowIntent(0, 100, Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.3"), Action.via(e34)),
         gid, 1000, 10),
        (FlowIntent(0, 200, Match(eth_type=ETH_TYPE_IPV4, ipv4_src="10.0.0.1",
                                  ipv4_dst="10.0.0.9", ip_proto=17, ip_dscp=26, l4_dst=4791),
                    Action("output", 7)), None, 5, 1),
    ]


def test_flow_statistics_read_from_the_wire_decode_as_os_ken_reads_them():
    e34 = NextHopSet("ecmp", (3, 4))
    gid = encode.GROUP_ID_BASE
    flows = [
        *_group_and_output_entries(e34, gid),
        (FlowIntent(0, 1000, Match(eth_type=ETH_TYPE_ARP), Action("controller")), None, 0, 0),
        (FlowIntent(0, 50, Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.4"), Action("drop")),
         None, 0, 0),
    ]
    frame = _flow_stats_reply(flows)
    d = OF13()
    fast = d.wire_flow_stats(77, frame)
    slow = p13.OFPFlowStatsReply.parser(d.desc, 4, 19, len(frame), 77, frame)
    assert fast.flags == 0 and len(fast.body) == len(slow.body) == 4
    groups = {gid: e34}
    for got, ref in zip(d.flow_records(fast.body), d.flow_records(slow.body), strict=True):
        assert (got.table, got.priority, got.cookie, got.byte_count, got.packet_count) == \
            (ref.table, ref.priority, ref.cookie, ref.byte_count, ref.packet_count)
        assert encode.decode_match(got.match) == encode.decode_match(ref.match)
        assert encode.decode_action(got.instructions, groups) == \
            encode.decode_action(ref.instructions, groups)
    # the decoded entries are the plan's
    dec = encode.decode_state("s", 1, d.flow_records(fast.body), [], d)
    assert dec.plan.flows == {f for f, gid_, _, _ in flows if gid_ is None}


# -- the transport: every connection on the loop --------------------------------------------------------
def _recv_msg(s: socket.socket) -> bytes:
    head = b""
    while len(head) < 8:
        head += s.recv(8 - len(head))
    n = struct.unpack("!H", head[2:4])[0]
    body = b""
    while len(body) < n - 8:
        body += s.recv(n - 8 - len(body))
    return head + body


class _Switch:
    """An OpenFlow 1.3 switch speaking over a socket just enough for the handshake."""

    def __init__(self, port: int, dpid: int) -> None:
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.dpid = dpid

    def handshake(self) -> None:
        s = self.s
        # HELLO with a version bitmap {1.3} (OpenFlow 1.3.5 §7.5.1)
        s.sendall(struct.pack("!BBHI", 4, 0, 16, 1) + struct.pack("!HHI", 1, 8, 1 << 4))
        hello = _recv_msg(s)
        assert hello[1] == 0
        feats = _recv_msg(s)
        assert feats[0] == 4 and feats[1] == 5  # FEATURES_REQUEST in the agreed version
        s.sendall(struct.pack("!BBHIQIBB2xII", 4, 6, 32, struct.unpack("!I", feats[4:8])[0],
                              self.dpid, 0, 254, 0, 0, 0))
        desc = _recv_msg(s)
        assert desc[1] == 18 and struct.unpack("!H", desc[8:10])[0] == 13  # PORT_DESC
        port = struct.pack("!I4x6s2x16sIIIIIIII", 1, b"\0" * 6, b"p1".ljust(16, b"\0"),
                           0, 4, 0, 0, 0, 0, 0, 0)
        s.sendall(struct.pack("!BBHIHH4x", 4, 19, 16 + len(port),
                              struct.unpack("!I", desc[4:8])[0], 13, 0) + port)

    def close(self) -> None:
        self.s.close()


def test_connections_run_on_the_loop_without_a_thread_each():
    from controller.drivers.openflow.app import start_openflow

    async def run() -> None:
        loop = asyncio.get_running_loop()
        drv = OpenFlowDriver({}, features_timeout_s=0.5)  # no dpid known: connections stay
        drv.bind_loop(loop)
        ready = threading.Event()
        ready.set()
        h = start_openflow(drv, bind_listener("127.0.0.1", 0), ready, loop)
        await drv.start(lambda ev: None)
        before = threading.active_count()
        switches = [_Switch(h.port, 100 + i) for i in range(40)]
        try:
            await asyncio.gather(*(loop.run_in_executor(None, sw.handshake)
                                   for sw in switches[:4]))
            for sw in switches[4:]:
                await loop.run_in_executor(None, sw.handshake)
            for _ in range(100):
                if h.gate.unfinished() == 0 and len(h.transport.connections) == 40:
                    break
                await asyncio.sleep(0.05)
            assert h.gate.unfinished() == 0 and len(h.transport.connections) == 40
            assert all(c.state == "main" and c.version == 4 for c in h.transport.connections)
            assert {c.dpid for c in h.transport.connections} == {100 + i for i in range(40)}
            # the executor's threads aside, none per connection
            assert threading.active_count() <= before + 4
            # echo answered by the transport (same xid, same data)
            sw = switches[0]
            sw.s.sendall(struct.pack("!BBHI", 4, 2, 12, 4242) + b"ping")
            reply = await loop.run_in_executor(None, _recv_msg, sw.s)
            assert reply[1] == 3 and reply[4:8] == struct.pack("!I", 4242) and reply[8:] == b"ping"
        finally:
            for sw in switches:
                sw.close()
            await drv.stop()
    asyncio.run(run())


def test_a_switch_speaking_no_version_of_ours_is_refused():
    from controller.drivers.openflow.app import start_openflow

    async def run() -> bytes:
        loop = asyncio.get_running_loop()
        drv = OpenFlowDriver({})
        drv.bind_loop(loop)
        ready = threading.Event()
        ready.set()
        h = start_openflow(drv, bind_listener("127.0.0.1", 0), ready, loop)
        await drv.start(lambda ev: None)
        s = socket.create_connection(("127.0.0.1", h.port), timeout=10)
        try:
            s.sendall(struct.pack("!BBHI", 1, 0, 8, 1))  # OpenFlow 1.0 only
            got = await loop.run_in_executor(None, _recv_msg, s)  # our HELLO
            assert got[1] == 0
            return await loop.run_in_executor(None, _recv_msg, s)
        finally:
            s.close()
            await drv.stop()
    err = asyncio.run(run())
    assert err[1] == 1 and struct.unpack("!HH", err[8:12]) == (0, 0)  # HELLO_FAILED/INCOMPATIBLE


def test_a_state_with_other_sessions_keeps_its_generations_plan():
    """A state replaced with other sessions keeps its generation's memo (the plan is not
    recomputed for a connect or a role change)."""
    st = _programmed(_state())
    plan = intended_plan(st)
    other = replace(st, switches={**st.switches})
    assert intended_plan(other) is plan


def _arp_entries(hosts: tuple[int, ...]) -> list[FlowIntent]:
    """The ARP responder's entries for hosts 10.0.0.H."""
    from controller.plan.model import ArpReply, arp_request_match

    replies = [ArpReply(f"10.0.0.{i}", f"02:00:00:00:00:{i:02x}") for i in hosts]
    return [FlowIntent(0, 1100, arp_request_match(r.ipv4), Action.answer(r)) for r in replies]


def _arp_reply_frame(flows: list[FlowIntent], d: OF13) -> bytes:
    """An OpenFlow 1.3 OFPMP_FLOW reply holding ``flows`` as os-ken serialises them."""
    body = b""
    for f in flows:
        m = bytearray()
        encode.encode_match(f.match, d).serialize(m, 0)
        ins = bytearray()
        for i in encode.encode_instructions(f.action, None, d):
            i.serialize(ins, len(ins))
        body += struct.pack("!HBxIIHHHH4xQQQ", 48 + len(m) + len(ins), f.table, 7, 9, f.priority,
                            0, 0, 0, encode.COOKIE, 0, 0) + bytes(m) + bytes(ins)
    return struct.pack("!BBHIHH4x", 4, 19, 16 + len(body), 77, 1, 0) + body


def test_the_arp_responders_entries_read_from_the_wire_decode_once_as_os_ken_reads_them():
    """Every edge switch holds the ARP responder (one entry per fabric host, the same bytes on
    each switch): its match is read from the wire, its eight actions parsed by os-ken once per
    distinct bytes and shared, and every entry decodes to the plan's entry, as os-ken's own
    parse of the reply does (the read-back of a k = 16 fabric holds 131,072 of them)."""
    d = OF13()
    flows = _arp_entries((3, 4))
    frame = _arp_reply_frame(flows * 2, d)   # two switches' worth: each reply's bytes twice
    fast = d.wire_flow_stats(77, frame)
    slow = p13.OFPFlowStatsReply.parser(d.desc, 4, 19, len(frame), 77, frame)
    got, ref = d.flow_records(fast.body), d.flow_records(slow.body)
    assert [r.match for r in got] == [f.match for f in flows * 2]   # matched from the wire
    assert got[0].instructions is got[2].instructions               # parsed once, shared
    assert got[0].instructions is not got[1].instructions
    memo: dict = {}
    for g, r, f in zip(got, ref, flows * 2, strict=True):
        assert encode.decode_action(g.instructions, {}, d, memo) == \
            encode.decode_action(r.instructions, {}, d) == f.action
    assert encode.decode_state("s", 1, got, [], d).plan.flows == set(flows)


def test_the_arp_responders_actions_decode_once_for_every_switch(monkeypatch):
    """An ARP reply's action depends on its bytes alone: read back from many switches (320 at
    k = 16, 131,072 entries), each distinct reply is decoded once for all of them, not once per
    switch (the restart's read-back spent most of its CPU there)."""
    from controller.drivers.openflow.dialect import shared_instructions

    shared_instructions.cache_clear()   # the parse is shared process-wide: decoded by no test yet
    d = OF13()
    flows = _arp_entries((3, 4, 5))
    frame = _arp_reply_frame(flows, d)
    calls = []
    real = encode.decode_reply
    monkeypatch.setattr(encode, "decode_reply", lambda *a: calls.append(1) or real(*a))
    for sw in range(4):   # four switches, each its own read-back of the same bytes
        records = d.flow_records(d.wire_flow_stats(77, frame).body)
        assert encode.decode_state(f"e{sw}", sw + 1, records, [], d).plan.flows == set(flows)
    assert len(calls) == len(flows)


def test_flow_descriptions_of_openflow_15_read_from_the_wire_decode_as_os_ken_reads_them():
    """An OpenFlow 1.5 read-back (``OFPMP_FLOW_DESC``, OpenFlow 1.5.1 §7.3.5.2: the match,
    then OXS statistics, then the instructions) read straight from its bytes gives the records
    os-ken's parser gives: routes, ECMP and control entries from the wire, the ARP responder's
    instructions parsed once and shared, counts from the OXS statistics."""
    from os_ken.ofproto import ofproto_parser

    from controller.drivers.openflow.dialect import OF15
    from controller.plan.model import ArpReply, arp_request_match

    d = OF15()
    e34 = NextHopSet("ecmp", (3, 4))
    gid = encode.GROUP_ID_BASE
    reply = ArpReply("10.0.0.3", "02:00:00:00:00:03")
    flows = [
        *_group_and_output_entries(e34, gid),
        (FlowIntent(0, 1100, arp_request_match("10.0.0.3"), Action.answer(reply)), None, 0, 0),
        (FlowIntent(0, 1100, arp_request_match("10.0.0.3"), Action.answer(reply)), None, 64, 1),
        (FlowIntent(0, 50, Match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.4"), Action("drop")),
         None, 0, 0),
    ]
    body = b""
    for f, g, nbytes, packets in flows:
        m = bytearray()
        encode.encode_match(f.match, d).serialize(m, 0)
        ins = bytearray()
        for i in encode.encode_instructions(f.action, g, d):
            i.serialize(ins, len(ins))
        oxs = b"".join(struct.pack("!IQ", (0x8002 << 16) | (field << 9) | 8, v)
                       for field, v in ((4, packets), (5, nbytes)))
        stats = struct.pack("!HH", 0, 4 + len(oxs)) + oxs
        stats += b"\0" * (-len(stats) % 8)
        rest = bytes(m) + stats + bytes(ins)
        body += struct.pack("!H2xBxHHHHHQ", 24 + len(rest), f.table, f.priority, 0, 0, 0, 0,
                            encode.COOKIE) + rest
    frame = struct.pack("!BBHIHH4x", 6, 19, 16 + len(body), 77, 1, 0) + body
    fast = d.wire_flow_stats(77, frame)
    slow = ofproto_parser.msg(d.desc, 6, 19, len(frame), 77, frame)
    got, ref = d.flow_records(fast.body), d.flow_records(slow.body)
    assert fast.flags == 0 and len(got) == len(ref) == 5
    assert all(type(r).__name__ == "WireRecord" for r in got)       # none went through os-ken
    groups = {gid: e34}
    for g, r in zip(got, ref, strict=True):
        assert (g.table, g.priority, g.cookie, g.byte_count, g.packet_count) == \
            (r.table, r.priority, r.cookie, r.byte_count, r.packet_count)
        assert encode.decode_match(g.match) == encode.decode_match(r.match)
        assert encode.decode_action(g.instructions, groups, d) == \
            encode.decode_action(r.instructions, groups, d)
    assert got[2].instructions is got[3].instructions
    dec = encode.decode_state("s", 1, got, [], d)
    assert dec.plan.flows == {f for f, g, _, _ in flows if g is None}
