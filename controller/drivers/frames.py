"""Frames the runtime parses and builds, for every southbound: ARP and LLDP (pure; no os-ken,
no switch, no driver).

* **ARP** (RFC 826): a request for a host of the fabric is answered from the address plan with
  that host's MAC, so nothing floods in a looped Clos. Frames are Ethernet II with a 28-byte
  IPv4-over-Ethernet ARP payload.
* **LLDP** probes (IEEE 802.1AB-2016 §8): sent to the nearest-bridge group address
  01:80:c2:00:00:0e, they carry the sending switch's datapath id as a locally assigned chassis id
  (subtype 7, ``dpid:%016x``) and the port number as a port-component port id (subtype 2,
  decimal ASCII), then a TTL and the end TLV, so a probe received on another switch names both
  ends of the link. P4 switches use their device id (aifabric: the dpid).
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

ETH_TYPE_ARP = 0x0806
ETH_TYPE_LLDP = 0x88CC
LLDP_DST_MAC = "01:80:c2:00:00:0e"
LLDP_TTL_S = 120
_CHASSIS_PREFIX = b"dpid:"
ARP_REQUEST = 1
ARP_REPLY = 2
_ARP = struct.Struct("!HHBBH6s4s6s4s")


def mac_bytes(mac: str) -> bytes:
    """``"02:00:00:00:00:01"`` → 6 bytes. Raises ValueError on a malformed address."""
    b = bytes(int(x, 16) for x in mac.split(":"))
    if len(b) != 6:
        raise ValueError(f"bad MAC {mac!r}")
    return b


def mac_str(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)


@dataclass(frozen=True)
class Arp:
    """An IPv4-over-Ethernet ARP message: ``oper`` 1 request, 2 reply; addresses as strings."""

    oper: int
    sender_mac: str
    sender_ip: str
    target_mac: str
    target_ip: str


def parse_arp(frame: bytes) -> Arp | None:
    """The ARP message in Ethernet ``frame``; None for anything else (short, non-ARP, non-IPv4)."""
    if len(frame) < 14 + _ARP.size or int.from_bytes(frame[12:14], "big") != ETH_TYPE_ARP:
        return None
    htype, ptype, hlen, plen, oper, sha, spa, tha, tpa = _ARP.unpack_from(frame, 14)
    if (htype, ptype, hlen, plen) != (1, 0x0800, 6, 4):
        return None
    return Arp(oper, mac_str(sha), str(ipaddress.IPv4Address(spa)), mac_str(tha),
               str(ipaddress.IPv4Address(tpa)))


def arp_frame(a: Arp, eth_dst: str, eth_src: str) -> bytes:
    """An Ethernet frame carrying ``a`` (padded to the 60-byte minimum without FCS)."""
    payload = _ARP.pack(1, 0x0800, 6, 4, a.oper, mac_bytes(a.sender_mac),
                        ipaddress.IPv4Address(a.sender_ip).packed, mac_bytes(a.target_mac),
                        ipaddress.IPv4Address(a.target_ip).packed)
    frame = mac_bytes(eth_dst) + mac_bytes(eth_src) + ETH_TYPE_ARP.to_bytes(2, "big") + payload
    return frame.ljust(60, b"\x00")


def arp_reply(request: Arp, answer_mac: str) -> bytes:
    """The reply to ``request`` saying ``request.target_ip`` is at ``answer_mac``.

    Raises
    ------
    ValueError
        ``request`` is not a request.
    """
    if request.oper != ARP_REQUEST:
        raise ValueError(f"not an ARP request: {request}")
    reply = Arp(ARP_REPLY, answer_mac, request.target_ip, request.sender_mac, request.sender_ip)
    return arp_frame(reply, request.sender_mac, answer_mac)


def is_gratuitous(a: Arp) -> bool:
    """An announcement (sender IP = target IP, or sender IP 0.0.0.0 probe): never answered."""
    return a.sender_ip == a.target_ip or a.sender_ip == "0.0.0.0"


# -- LLDP ------------------------------------------------------------------------------------
def lldp_src_mac(dpid: int, port: int) -> str:
    """A locally administered source MAC for probes from ``dpid``:``port``."""
    b = [0x0E, (dpid >> 16) & 0xFF, (dpid >> 8) & 0xFF, dpid & 0xFF, (port >> 8) & 0xFF,
         port & 0xFF]
    return ":".join(f"{x:02x}" for x in b)


def _tlv(tlv_type: int, value: bytes) -> bytes:
    """One LLDP TLV: 7-bit type and 9-bit length, then the value (802.1AB §8.4)."""
    if len(value) > 511:
        raise ValueError(f"LLDP TLV of {len(value)} bytes exceeds 511")
    return struct.pack("!H", tlv_type << 9 | len(value)) + value


def build_lldp(dpid: int, port: int) -> bytes:
    """An LLDP probe sent from ``dpid``:``port`` (module docstring)."""
    body = (_tlv(1, bytes([7]) + _CHASSIS_PREFIX + f"{dpid:016x}".encode())
            + _tlv(2, bytes([2]) + str(port).encode())
            + _tlv(3, struct.pack("!H", LLDP_TTL_S)) + _tlv(0, b""))
    frame = (mac_bytes(LLDP_DST_MAC) + mac_bytes(lldp_src_mac(dpid, port))
             + ETH_TYPE_LLDP.to_bytes(2, "big") + body)
    return frame.ljust(60, b"\x00")


def parse_lldp(frame: bytes) -> tuple[int, int] | None:
    """``(dpid, port)`` of the sender of an aifabric LLDP probe in ``frame``; None for any other
    frame (including LLDP from other speakers and truncated frames)."""
    if len(frame) < 14 or int.from_bytes(frame[12:14], "big") != ETH_TYPE_LLDP:
        return None
    off, tlvs = 14, list[tuple[int, bytes]]()
    while off + 2 <= len(frame) and len(tlvs) < 2:
        (head,) = struct.unpack_from("!H", frame, off)
        t, n = head >> 9, head & 0x1FF
        if t == 0 or off + 2 + n > len(frame):
            break
        tlvs.append((t, frame[off + 2:off + 2 + n]))
        off += 2 + n
    if len(tlvs) < 2 or tlvs[0][0] != 1 or tlvs[1][0] != 2:
        return None
    chassis, port_id = tlvs[0][1], tlvs[1][1]
    if not chassis or chassis[0] != 7 or not chassis[1:].startswith(_CHASSIS_PREFIX):
        return None
    if not port_id or port_id[0] != 2:
        return None
    try:
        return int(chassis[1 + len(_CHASSIS_PREFIX):], 16), int(port_id[1:])
    except ValueError:
        return None
