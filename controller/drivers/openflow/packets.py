"""Frames the controller builds and parses: ARP replies and LLDP probes (pure, no datapath).

LLDP probes (IEEE 802.1AB) carry the sending switch's datapath id as a locally assigned chassis id
(``dpid:%016x``) and the port number as a port-component port id (decimal ASCII), so a probe
received on another switch names both ends of the link.
"""

from __future__ import annotations

from dataclasses import dataclass

from os_ken.lib.packet import arp, ethernet, lldp, packet
from os_ken.ofproto import ether

from controller.plan.model import ETH_TYPE_ARP, ETH_TYPE_LLDP

LLDP_TTL_S = 120
_CHASSIS_PREFIX = b"dpid:"


@dataclass(frozen=True)
class ArpRequest:
    """The fields of an ARP request the controller answers."""

    src_mac: str
    src_ip: str
    dst_ip: str


def parse_arp_request(data: bytes) -> ArpRequest | None:
    """The ARP request in frame ``data``; None for anything else (replies, non-ARP, garbage)."""
    try:
        pkt = packet.Packet(data)
    except Exception:  # noqa: BLE001 - os-ken raises various errors on truncated frames
        return None
    a = pkt.get_protocol(arp.arp)
    if a is None or a.opcode != arp.ARP_REQUEST:
        return None
    return ArpRequest(a.src_mac, a.src_ip, a.dst_ip)


def is_gratuitous(req: ArpRequest) -> bool:
    """An announcement (sender IP = target IP, or sender IP 0.0.0.0 probe): never answered."""
    return req.src_ip == req.dst_ip or req.src_ip == "0.0.0.0"


def build_arp_reply(req: ArpRequest, target_mac: str) -> bytes:
    """An Ethernet ARP reply to ``req``: ``req.dst_ip`` is at ``target_mac``."""
    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(dst=req.src_mac, src=target_mac, ethertype=ETH_TYPE_ARP))
    pkt.add_protocol(
        arp.arp(opcode=arp.ARP_REPLY, src_mac=target_mac, src_ip=req.dst_ip,
                dst_mac=req.src_mac, dst_ip=req.src_ip)
    )
    pkt.serialize()
    return bytes(pkt.data)


def lldp_src_mac(dpid: int, port: int) -> str:
    """A locally administered source MAC for probes from ``dpid``:``port``."""
    b = [0x0E, (dpid >> 16) & 0xFF, (dpid >> 8) & 0xFF, dpid & 0xFF, (port >> 8) & 0xFF,
         port & 0xFF]
    return ":".join(f"{x:02x}" for x in b)


def build_lldp(dpid: int, port: int) -> bytes:
    """An LLDP probe sent from ``dpid``:``port``."""
    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(dst=lldp.LLDP_MAC_NEAREST_BRIDGE,
                                       src=lldp_src_mac(dpid, port),
                                       ethertype=ether.ETH_TYPE_LLDP))
    tlvs = (
        lldp.ChassisID(subtype=lldp.ChassisID.SUB_LOCALLY_ASSIGNED,
                       chassis_id=_CHASSIS_PREFIX + f"{dpid:016x}".encode()),
        lldp.PortID(subtype=lldp.PortID.SUB_PORT_COMPONENT, port_id=str(port).encode()),
        lldp.TTL(ttl=LLDP_TTL_S),
        lldp.End(),
    )
    pkt.add_protocol(lldp.lldp(tlvs))
    pkt.serialize()
    return bytes(pkt.data)


def parse_lldp(data: bytes) -> tuple[int, int] | None:
    """``(dpid, port)`` of the sender of an aifabric LLDP probe in ``data``; None for any other
    frame (including LLDP from other speakers)."""
    try:
        pkt = packet.Packet(data)
    except Exception:  # noqa: BLE001
        return None
    eth = pkt.get_protocol(ethernet.ethernet)
    if eth is None or eth.ethertype != ETH_TYPE_LLDP:
        return None
    lp = pkt.get_protocol(lldp.lldp)
    if lp is None or len(lp.tlvs) < 2:
        return None
    chassis, port_tlv = lp.tlvs[0], lp.tlvs[1]
    if not isinstance(chassis, lldp.ChassisID) or not isinstance(port_tlv, lldp.PortID):
        return None
    cid = bytes(chassis.chassis_id)
    if chassis.subtype != lldp.ChassisID.SUB_LOCALLY_ASSIGNED or not cid.startswith(
        _CHASSIS_PREFIX
    ):
        return None
    try:
        return int(cid[len(_CHASSIS_PREFIX):], 16), int(bytes(port_tlv.port_id))
    except ValueError:
        return None
