"""The P4Runtime driver and fabric.p4 on one real BMv2 (simple_switch_grpc in a network
namespace, ports on veths): arbitration, SetForwardingPipelineConfig, batched writes, read-back
reconciliation, per-update errors, and PTF-style data-plane checks (a packet in, the expected
packet out) compared against the Python pipeline model. Skips without BMv2 or root."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import select
import socket
import struct
import time

import pytest

from controller.drivers.p4runtime.client import (
    NotPrimaryError,
    P4Switch,
    P4SwitchError,
    WriteError,
)
from controller.drivers.p4runtime.encode import EcmpHash, encode_switch, qos_entries
from controller.drivers.p4runtime.entities import SwitchEntities
from controller.drivers.p4runtime.pipeline import queue_index
from controller.drivers.p4runtime.reconcile import Update, reconcile
from controller.model import load_topology
from controller.plan.build import build_plan
from controller.qos.validate import load_valid_policy as load_policy
from controller.testing.p4model import CONTROLLER, DROP, Packet, forward, forward_hashed
from controller.testing.p4sync import sync
from mininet_labs.lab.bmv2 import NetnsSwitch, bmv2_missing_reason, thrift_cli_command
from tests.conftest import ECMP_POLICY, MAIN_TOPOLOGY, PINNED_POLICY

_why = bmv2_missing_reason()
pytestmark = [pytest.mark.p4, pytest.mark.skipif(_why is not None, reason=_why or "")]


@pytest.fixture(scope="module")
def fabric():
    return load_topology(MAIN_TOPOLOGY)


@pytest.fixture(scope="module")
def leaf1(fabric) -> SwitchEntities:
    """leaf1 of the main experiment, pinned mode: hosts h1, h2 on ports 1, 2; uplinks 3, 4."""
    return encode_switch(build_plan(fabric, load_policy(PINNED_POLICY)).plan.switches["leaf1"])


@pytest.fixture
def bmv2(tmp_path):
    with NetnsSwitch(ports=4, device_id=3, workdir=tmp_path) as sw:
        yield sw


def _strip(s: SwitchEntities) -> SwitchEntities:
    return dataclasses.replace(
        s, entries=frozenset(dataclasses.replace(e, origin="") for e in s.entries))


def test_reconcile_from_empty_then_nothing_then_only_the_difference(bmv2, leaf1):
    async def go():
        async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=20) as sw:
            first = await sync(sw, leaf1)
            assert first.written == {"insert": leaf1.count, "modify": 0, "delete": 0}
            assert first.requests == 3  # members, groups, entries: one WriteRequest each
            assert _strip(await sw.read_state()) == _strip(leaf1)
            again = await sync(sw, leaf1)
            assert again.written == {"insert": 0, "modify": 0, "delete": 0}
            assert again.requests == 0
            # the switch drifts: one pinned entry lost, one foreign entry added
            pinned = sorted(e for e in leaf1.entries if e.table == "pinned")
            foreign = dataclasses.replace(pinned[0], priority=pinned[0].priority + 1)
            await sw.write_batch([Update("delete", pinned[1]), Update("insert", foreign)])
            fix = await sync(sw, leaf1)
            assert fix.written == {"insert": 1, "modify": 0, "delete": 1}
            assert _strip(await sw.read_state()) == _strip(leaf1)

        # a restarted controller (new connection, same pipeline cookie) writes nothing
        async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=21) as sw:
            assert (await sync(sw, leaf1)).written == {"insert": 0, "modify": 0, "delete": 0}

    asyncio.run(go())


def test_backup_client_is_refused_with_the_primarys_election_id(bmv2):
    async def go():
        async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=50):
            with pytest.raises(NotPrimaryError, match=r"election_id 50 > ours 7"):
                async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=7):
                    pass

    asyncio.run(go())


def test_write_errors_name_each_failed_entity(bmv2, leaf1):
    async def go():
        async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=20) as sw:
            await sync(sw, leaf1)
            entries = sorted(e for e in leaf1.entries if e.table == "pinned")
            ok = dataclasses.replace(entries[0], priority=entries[0].priority + 3)
            with pytest.raises(WriteError) as ei:
                await sw.write_batch([Update("insert", entries[0]), Update("insert", ok),
                                      Update("insert", entries[1])])
            failed = ei.value.failures
            assert [f.update.entity for f in failed] == [entries[0], entries[1]]
            assert {f.code for f in failed} == {"ALREADY_EXISTS"}
            assert "pin " in str(ei.value)  # names the entity by its origin

    asyncio.run(go())


# -- PTF-style data-plane checks ----------------------------------------------------------------
def _csum(b: bytes) -> int:
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    s = (s >> 16) + (s & 0xFFFF)
    return ~(s + (s >> 16)) & 0xFFFF


def ipv4_udp(src: str, dst: str, sport: int, dport: int, dscp: int = 0, ecn: int = 0,
             src_mac: str = "02:00:00:00:00:01", dst_mac: str = "02:00:00:00:00:03") -> bytes:
    payload = b"aifabric-ptf" + bytes(20)
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, dscp << 2 | ecn, 20 + len(udp), 1, 0, 64, 17, 0,
                      ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed)
    hdr = hdr[:10] + struct.pack("!H", _csum(hdr)) + hdr[12:]
    eth = bytes.fromhex(dst_mac.replace(":", "")) + bytes.fromhex(src_mac.replace(":", ""))
    return eth + b"\x08\x00" + hdr + udp


def arp_request(sender_ip: str, target_ip: str) -> bytes:
    mac = bytes.fromhex("020000000001")
    arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, mac,
                      ipaddress.IPv4Address(sender_ip).packed, bytes(6),
                      ipaddress.IPv4Address(target_ip).packed)
    return b"\xff" * 6 + mac + b"\x08\x06" + arp


class Ports:
    """Raw AF_PACKET sockets on the root-namespace ends of the switch's veths."""

    def __init__(self, sw: NetnsSwitch) -> None:
        self.socks = {}
        for p in range(1, sw.ports + 1):
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
            s.bind((sw.peer(p), 0))
            s.setblocking(False)
            self.socks[p] = s

    def drain(self) -> None:
        for s in self.socks.values():
            while select.select([s], [], [], 0)[0]:
                s.recv(65535)

    def send(self, port: int, frame: bytes) -> None:
        self.socks[port].send(frame)

    def recv_all(self, wait_s: float = 1.0) -> dict[int, list[bytes]]:
        out: dict[int, list[bytes]] = {p: [] for p in self.socks}
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            r, _, _ = select.select(list(self.socks.values()), [], [], 0.05)
            for s in r:
                p = next(k for k, v in self.socks.items() if v is s)
                frame, addr = s.recvfrom(65535)
                if addr[2] != socket.PACKET_OUTGOING:
                    out[p].append(frame)
        return out


def _ip(s: str) -> int:
    return int(ipaddress.IPv4Address(s))


def _mac(m: str) -> int:
    return int(m.replace(":", ""), 16)


def test_packets_go_where_the_model_says(bmv2, leaf1, fabric):
    """h1 (port 1) sends to every other host: each frame leaves exactly where the pipeline
    model says (for ECMP routes: the group member the model's copy of fabric.p4's hash picks),
    unchanged."""
    h = fabric.host_by_name
    qos = {"tables": [{"table": "ecn_threshold", "match": {"egress_port": 3, "priority": 0},
                       "action": "mark_ecn", "params": {"threshold_pkts": 0}}]}
    want = dataclasses.replace(leaf1, entries=leaf1.entries | set(qos_entries("leaf1", qos)))

    async def go():
        async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=20) as sw:
            await sync(sw, want)
            ports = Ports(bmv2)
            await asyncio.sleep(0.3)
            ports.drain()
            checked = 0
            for src in ("h1", "h2"):
                in_port = h[src].port
                for dst in ("h2", "h3", "h5", "h7", "h8"):
                    if dst == src:
                        continue
                    frame = ipv4_udp(h[src].ipv4, h[dst].ipv4, 40000 + checked, 5001)
                    pkt = Packet(0x0800, _ip(h[src].ipv4), _ip(h[dst].ipv4), 17, 0,
                                 40000 + checked, 5001, _mac("02:00:00:00:00:01"),
                                 _mac("02:00:00:00:00:03"))
                    expect = forward(want, pkt)
                    ports.send(in_port, frame)
                    got = await asyncio.to_thread(ports.recv_all, 0.6)
                    out = {p for p, fs in got.items() if fs}
                    assert isinstance(expect, frozenset)
                    assert len(out) == 1 and out <= expect, (src, dst, out, expect)
                    assert out == {forward_hashed(want, pkt)}, (src, dst, out)
                    assert got[out.pop()] == [frame]
                    checked += 1
            # ECN: threshold 0 on port 3 priority 0 marks ECT(0) packets CE, checksum fixed
            pinned_h1_h3 = ipv4_udp(h["h1"].ipv4, h["h3"].ipv4, 1, 2, ecn=2)
            ports.send(1, pinned_h1_h3)
            got = await asyncio.to_thread(ports.recv_all, 0.6)
            assert len(got[3]) == 1
            ip = got[3][0][14:34]
            assert ip[1] & 3 == 3 and _csum(ip) == 0
            # counters are readable per port/queue; queue depth through the histogram counter,
            # since BMv2's P4Runtime server refuses register reads (p4lang/PI#376)
            tx = await sw.read_counters("port_tx")
            assert tx[3][0] >= 1
            marked = await sw.read_counters("ecn_marked")
            assert marked[queue_index(3, 0)][0] == 1
            hist = await sw.read_queue_depth_histogram(3, 0)
            assert sorted(hist) == [0, 1, 2, 4, 8, 16, 32, 64]
            assert sum(hist.values()) == tx[3][0]  # every packet out of port 3 was priority 0
            with pytest.raises(P4SwitchError, match="UNIMPLEMENTED"):
                await sw.read_register("queue_depth_pkts", queue_index(3, 0))
            # unknown destination: dropped and counted
            ports.send(1, ipv4_udp(h["h1"].ipv4, "10.9.9.9", 1, 2))
            got = await asyncio.to_thread(ports.recv_all, 0.4)
            assert not any(got.values())
            assert (await sw.read_counters("dropped"))[0][0] == 1

    asyncio.run(go())


def test_arp_answered_by_the_switch_and_lldp_packet_in_and_packet_out(bmv2, leaf1, fabric):
    """An ARP request for a fabric host comes back out of its port as the reply, made by the
    switch (arp_responder), exactly as the model says; one for an unknown address goes
    nowhere; LLDP reaches the controller; a packet-out leaves by its port."""
    from controller.drivers import frames
    from controller.testing.p4model import arp_reply

    h3 = fabric.host_by_name["h3"]
    asked = Packet(0x0806, arp_op=1, arp_tpa=_ip(h3.ipv4), in_port=1)
    assert forward(leaf1, asked) == frozenset({1}) and arp_reply(leaf1, asked) == _mac(h3.mac)
    assert forward(leaf1, Packet(0x0806, arp_op=1, arp_tpa=_ip("10.9.9.9"), in_port=1)) == DROP
    assert forward(leaf1, Packet(0x88CC)) == CONTROLLER
    assert forward(leaf1, Packet(0x0800, _ip("10.0.0.1"), _ip("10.9.9.9"))) == DROP

    async def go():
        async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=20) as sw:
            await sync(sw, leaf1)
            ports = Ports(bmv2)
            await asyncio.sleep(0.3)
            ports.drain()
            ports.send(1, arp_request("10.0.0.1", h3.ipv4))
            got = await asyncio.to_thread(ports.recv_all, 0.6)
            assert [len(f) > 0 for f in got[1]] == [True] and not got[2] and not got[3], got
            reply = got[1][0]
            assert reply[:6] == bytes.fromhex("020000000001")           # to the requester
            assert reply[6:12] == bytes.fromhex(h3.mac.replace(":", ""))
            a = frames.parse_arp(reply)
            assert a is not None and (a.oper, a.sender_mac, a.sender_ip, a.target_mac,
                                      a.target_ip) == (frames.ARP_REPLY, h3.mac, h3.ipv4,
                                                       "02:00:00:00:00:01", "10.0.0.1")
            ports.send(1, arp_request("10.0.0.1", "10.9.9.9"))
            got = await asyncio.to_thread(ports.recv_all, 0.4)
            assert not any(got.values())
            lldp = b"\x01\x80\xc2\x00\x00\x0e" + b"\x02" * 6 + b"\x88\xcc" + bytes(46)
            it = sw.packets_in()
            ports.send(1, lldp)
            port, frame = await asyncio.wait_for(it.__anext__(), 5)
            assert port == 1 and frame[:len(lldp)] == lldp
            await sw.packet_out(2, b"\x02" * 6 + b"\x02" * 6 + b"\x88\xb5" + bytes(46))
            got = await asyncio.to_thread(ports.recv_all, 0.6)
            assert [len(f) for f in got[2]] == [60] and not got[1] and not got[3]
            await it.aclose()

    asyncio.run(go())


def test_reconcile_across_a_replan(bmv2, fabric, leaf1):
    """Pinned → ECMP on the live switch: only the pinned entries are deleted."""
    ecmp = encode_switch(build_plan(fabric, load_policy(PINNED_POLICY.parent / "ecmp_two_rings.yaml"))
                         .plan.switches["leaf1"])

    async def go():
        async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=20) as sw:
            await sync(sw, leaf1)
            rep = await sync(sw, ecmp)
            n_pinned = sum(1 for e in leaf1.entries if e.table == "pinned")
            assert rep.written == {"insert": 0, "modify": 0, "delete": n_pinned}
            assert reconcile(ecmp, await sw.read_state()).empty

    asyncio.run(go())


# -- ECMP hash entropy (policy routing.ecmp.hash_fields / hash_seeds) ---------------------------
def _uplinks_taken(ports: Ports, frames: list[tuple[int, bytes]]) -> dict[int, int]:
    """Send ``(udp source port, frame)`` pairs from port 1; udp source port → egress port."""
    ports.drain()
    for _, f in frames:
        ports.send(1, f)
    got = ports.recv_all(1.5)
    out: dict[int, int] = {}
    for p, fs in got.items():
        for f in fs:
            out[struct.unpack("!H", f[34:36])[0]] = p
    return out


def test_hash_seed_and_fields_change_the_chosen_member(bmv2, fabric):
    """leaf1 under 5-tuple ECMP: 32 UDP flows h1 → h5 (source ports differ) spread over both
    uplinks; another seed moves a part of them (not none, not all: fabric.p4's fmix32 makes the
    seeds' choices independent); hashing only ipv4_dst sends all of them one way. Every choice
    is the one the pipeline model predicts."""
    h = fabric.host_by_name
    plan = build_plan(fabric, load_policy(ECMP_POLICY)).plan.switches["leaf1"]
    five = ("ipv4_src", "ipv4_dst", "ip_proto", "l4_src", "l4_dst")
    sports = [41000 + 7 * i for i in range(32)]
    frames = [(sp, ipv4_udp(h["h1"].ipv4, h["h5"].ipv4, sp, 5001)) for sp in sports]

    def predicted(state: SwitchEntities) -> dict[int, int]:
        out = {}
        for sp in sports:
            pkt = Packet(0x0800, _ip(h["h1"].ipv4), _ip(h["h5"].ipv4), 17, 0, sp, 5001,
                         _mac("02:00:00:00:00:01"), _mac("02:00:00:00:00:03"))
            port = forward_hashed(state, pkt)
            assert isinstance(port, int)
            out[sp] = port
        return out

    async def go():
        taken = {}
        async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=20) as sw:
            ports = Ports(bmv2)
            for label, setting in (("seed 1", EcmpHash(five, 1)), ("seed 2", EcmpHash(five, 2)),
                                   ("dst only", EcmpHash(("ipv4_dst",), 1))):
                state = encode_switch(plan, None, setting)
                rep = await sync(sw, state)
                assert rep.written["modify"] <= 1  # only the ecmp_hash entry changes
                await asyncio.sleep(0.2)
                got = await asyncio.to_thread(_uplinks_taken, ports, frames)
                assert got == predicted(state), label
                taken[label] = got
        a, b, d = taken["seed 1"], taken["seed 2"], taken["dst only"]
        assert set(a.values()) == set(b.values()) == {3, 4}
        moved = sum(a[sp] != b[sp] for sp in sports)
        assert 4 <= moved <= 28, moved
        assert len(set(d.values())) == 1
        print(f"hash entropy on BMv2: seed 1 uplinks {sorted(a.values()).count(3)}x3 "
              f"{sorted(a.values()).count(4)}x4; seed 2 moved {moved}/32 flows; "
              f"dst-only: all on port {next(iter(d.values()))}")

    asyncio.run(go())


@pytest.mark.skipif(thrift_cli_command() is None,
                    reason="simple_switch_CLI or a Python with the thrift module not found")
def test_queue_depth_register_over_thrift(bmv2, leaf1, fabric):
    """The other route to the queue-depth register: simple_switch_CLI register_read in the
    switch's namespace. A burst into port 3 leaves a depth the register recorded."""
    h = fabric.host_by_name

    async def go():
        async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=20) as sw:
            await sync(sw, leaf1)
            ports = Ports(bmv2)
            await asyncio.sleep(0.2)
            for i in range(200):  # pinned h1 -> h3 (port 3), as fast as the socket takes them
                ports.send(1, ipv4_udp(h["h1"].ipv4, h["h3"].ipv4, 1000 + i, 2))
            await asyncio.to_thread(ports.recv_all, 1.0)
            hist = await sw.read_queue_depth_histogram(3, 0)
            sent = (await sw.read_counter("queue_tx", queue_index(3, 0)))[0]
            return hist, sent

    hist, sent = asyncio.run(go())
    depth = bmv2.register_read("FabricEgress.queue_depth_pkts", queue_index(3, 0))
    assert 0 <= depth < 2**19
    # every packet queued on (3, 0) is in exactly one bucket (not all 200 reach BMv2's
    # ingress: the burst overruns its receive buffer)
    assert sum(hist.values()) == sent > 0
    assert bmv2.register_read("FabricEgress.queue_depth_pkts", queue_index(2, 0)) == 0
