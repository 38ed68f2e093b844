"""ARP frames the P4 controller parses and answers (pure; no os-ken, no switch).

An ARP request (RFC 826) for a host of the fabric is answered from the address plan with that
host's MAC, so nothing floods in a looped Clos. Frames are Ethernet II with a 28-byte
IPv4-over-Ethernet ARP payload.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

ETH_TYPE_ARP = 0x0806
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
