"""Fencing enforced by Open vSwitch itself: two controllers get their mastership terms of one
switch from etcd (a handover between two MastershipService replicas), then talk OpenFlow 1.3 to a
real OVS bridge with ``generation_id = token`` (OpenFlow 1.3.5 §6.3.7). The deposed master's
flow-mod is refused (OFPBRC_IS_SLAVE) and so is its attempt to become master again
(OFPRRFC_STALE).

Needs root and a running Open vSwitch (``make setup`` starts it); creates one bridge with a
name of its own (``f14`` + pid) in passive mode (``ptcp:`` on 127.0.0.1), removed afterwards.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import struct
import subprocess

import pytest
from os_ken.ofproto import ofproto_parser
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller.cluster.etcd import EtcdClient, EtcdSettings
from controller.cluster.keys import ClusterKeys
from controller.cluster.lease import LeaseSettings
from controller.cluster.mastership import MastershipService
from controller.testing.etcd import free_loopback_ports

pytestmark = [
    pytest.mark.mininet,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ovs-vsctl") is None,
                       reason="needs root and Open vSwitch"),
]


#: ONF extension 1911 (OpenFlow 1.4's role status, as Open vSwitch sends it on 1.3)
ONF_EXPERIMENTER_ID = 0x4F4E4600
ONFT_ROLE_STATUS = 1911


class _Datapath:
    """What os-ken's message classes need to serialize and parse without a running app."""

    ofproto = ofp
    ofproto_parser = parser


class OFClient:
    """A bare OpenFlow 1.3 connection to a bridge's passive (ptcp) listener."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.dp = _Datapath()
        self.role_status: list[tuple[int, int]] = []   # (role, generation_id) the switch announced
        self._xid = 0x1400
        self.send(parser.OFPHello(self.dp))
        assert isinstance(self.recv(), parser.OFPHello)

    def send(self, msg) -> int:
        msg.serialize()
        self.sock.sendall(msg.buf)
        return msg.xid

    def recv(self):
        head = self._read(8)
        version, msg_type, msg_len, xid = struct.unpack("!BBHI", head)
        body = self._read(msg_len - 8)
        return ofproto_parser.msg(self.dp, version, msg_type, msg_len, xid, head + body)

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("switch closed the connection")
            buf += chunk
        return buf

    def request(self, msg):
        """Send ``msg`` then a barrier; read up to the barrier's reply and return the first other
        answer to ``msg`` (an error or a role reply), or None when there was none."""
        self._xid += 2
        msg.set_xid(self._xid)
        self.send(msg)
        barrier = parser.OFPBarrierRequest(self.dp)
        barrier.set_xid(self._xid + 1)
        self.send(barrier)
        answer = None
        while True:
            reply = self.recv()
            if isinstance(reply, parser.OFPEchoRequest):
                self.send(parser.OFPEchoReply(self.dp, data=reply.data))
                continue
            if isinstance(reply, parser.OFPBarrierReply) and reply.xid == self._xid + 1:
                return answer
            if isinstance(reply, parser.OFPExperimenter) and \
                    (reply.experimenter, reply.exp_type) == (ONF_EXPERIMENTER_ID, ONFT_ROLE_STATUS):
                role, _reason, gen = struct.unpack("!IB3xQ", reply.data[:16])
                self.role_status.append((role, gen))   # the switch demoted us (asynchronous)
                continue
            if reply.xid == self._xid and answer is None:
                answer = reply

    def role(self, role: int, generation_id: int):
        return self.request(parser.OFPRoleRequest(self.dp, role, generation_id))

    def add_flow(self, priority: int):
        match = parser.OFPMatch(eth_type=0x0800, ipv4_dst="10.9.9.9")
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [])]
        return self.request(parser.OFPFlowMod(self.dp, cookie=0x14, priority=priority,
                                              match=match, instructions=inst))

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def bridge():
    name = f"f14{os.getpid() % 100000}"
    port = free_loopback_ports(1)[0]
    subprocess.run(["ovs-vsctl", "--may-exist", "add-br", name, "--", "set", "bridge", name,
                    "datapath_type=netdev", "fail_mode=secure", "protocols=OpenFlow13", "--",
                    "set-controller", name, f"ptcp:{port}:127.0.0.1"], check=True, timeout=20)
    try:
        yield name, port
    finally:
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", name], check=False, timeout=20)


def _terms_from_a_handover(cluster) -> tuple[int, int]:
    """Two replicas; r-old masters s1, then stops; r-new takes s1. Returns (old, new) tokens."""

    async def go() -> tuple[int, int]:
        lease = LeaseSettings(ttl_s=1, keepalive_interval_s=0.2, margin_s=0.1)
        clients = [EtcdClient(EtcdSettings.from_url(cluster.url)) for _ in range(2)]
        old = MastershipService(clients[0], "r-old", ["s1"], keys=ClusterKeys("ovs"), lease=lease)
        new = MastershipService(clients[1], "r-new", ["s1"], keys=ClusterKeys("ovs"), lease=lease)
        await old.start()
        old_term = old.term("s1")
        assert old_term is not None
        await new.start()
        await old.stop()
        for _ in range(500):
            if new.term("s1") is not None:
                break
            await asyncio.sleep(0.01)
        new_term = new.term("s1")
        assert new_term is not None
        await new.stop()
        for c in clients:
            await c.close()
        return old_term.generation_id, new_term.generation_id

    return asyncio.run(go())


def test_deposed_master_is_refused_by_open_vswitch(etcd_cluster, bridge):
    old_gen, new_gen = _terms_from_a_handover(etcd_cluster)
    assert new_gen > old_gen
    _, port = bridge
    zombie, master = OFClient(port), OFClient(port)
    try:
        reply = zombie.role(ofp.OFPCR_ROLE_MASTER, old_gen)
        assert isinstance(reply, parser.OFPRoleReply) and reply.role == ofp.OFPCR_ROLE_MASTER
        assert zombie.add_flow(100) is None                  # the master of the old term writes
        reply = master.role(ofp.OFPCR_ROLE_MASTER, new_gen)  # the new term takes over
        assert isinstance(reply, parser.OFPRoleReply) and reply.generation_id == new_gen
        # the deposed master's write: refused, it is SLAVE now (OpenFlow 1.3.5 §6.3.7)
        err = zombie.add_flow(200)
        assert isinstance(err, parser.OFPErrorMsg)
        assert (err.type, err.code) == (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_IS_SLAVE)
        assert zombie.role_status == [(ofp.OFPCR_ROLE_SLAVE, new_gen)]   # and told it so
        # and so is its claim to be master again with the old generation_id
        err = zombie.role(ofp.OFPCR_ROLE_MASTER, old_gen)
        assert isinstance(err, parser.OFPErrorMsg)
        assert (err.type, err.code) == (ofp.OFPET_ROLE_REQUEST_FAILED, ofp.OFPRRFC_STALE)
        # a backup asking for SLAVE with the current master's token is accepted
        backup = OFClient(port)
        try:
            reply = backup.role(ofp.OFPCR_ROLE_SLAVE, new_gen)
            assert isinstance(reply, parser.OFPRoleReply) and reply.role == ofp.OFPCR_ROLE_SLAVE
        finally:
            backup.close()
        assert master.add_flow(300) is None                  # the new master writes
    finally:
        zombie.close()
        master.close()
