"""The aggregation header and its struct codec (the fast path; :mod:`.scapy_layer` defines the
same format for scapy).

UDP payload, network byte order (the fixed part is the ``ina_h`` that ``p4/fabric`` reserves,
extended by two bytes)::

    0       16      31 32     40      48              80      88      96
    | job_id | slot:15 |ver:1| worker | flags |  offset (32) | exp | rsvd | d00 … d63 (int32) |

* ``slot`` — index in the job's pool; ``ver`` — which of the slot's two copies (SwitchML's
  shadow copies, Algorithm 2): a worker alternates it on every use of a slot.
* ``offset`` — element offset of the data in the worker's (padded) array; for a bootstrap
  round, the offset of the block whose exponent it carries.
* ``exp`` — biased exponent (:func:`controller.ina.quant.encode_exp`): on the way up the
  worker's exponent of the block that will use this slot next round, on the way down the max.
* ``d00…`` — ``ELEMS`` int32 values; the switch sums them lane by lane.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from controller.ina.program import ELEMS

HEADER = struct.Struct("!HHBBIBB")
HEADER_BYTES = HEADER.size  # 12
#: Bytes of Ethernet (14) + IPv4 (20) + UDP (8) in front of the aggregation header.
L2_L4_BYTES = 14 + 20 + 8


def payload_bytes(elems: int = ELEMS) -> int:
    """UDP payload bytes of one aggregation packet."""
    return HEADER_BYTES + 4 * elems


def frame_bytes(elems: int = ELEMS) -> int:
    """Ethernet frame bytes (without FCS) of one aggregation packet."""
    return L2_L4_BYTES + payload_bytes(elems)


@dataclass(frozen=True)
class InaPacket:
    """One aggregation packet (UDP payload). ``data`` is an int32 array of ``elems`` values."""

    job_id: int
    slot: int
    ver: int
    worker_id: int
    flags: int
    offset: int
    exp: int
    data: NDArray[np.int32]

    def encode(self) -> bytes:
        """The UDP payload; raises ValueError for out-of-width fields."""
        for name, value, bits in (("job_id", self.job_id, 16), ("slot", self.slot, 15),
                                  ("ver", self.ver, 1), ("worker_id", self.worker_id, 8),
                                  ("flags", self.flags, 8), ("offset", self.offset, 32),
                                  ("exp", self.exp, 8)):
            if not 0 <= value < (1 << bits):
                raise ValueError(f"{name}={value} does not fit in {bits} bits")
        head = HEADER.pack(self.job_id, self.slot << 1 | self.ver, self.worker_id, self.flags,
                           self.offset, self.exp, 0)
        return head + np.asarray(self.data, dtype=">i4").tobytes()

    def with_(self, **changes: object) -> InaPacket:
        """A copy with ``changes`` (dataclasses.replace without the import at call sites)."""
        from dataclasses import replace

        return replace(self, **changes)  # type: ignore[arg-type]


def decode(payload: bytes, elems: int = ELEMS) -> InaPacket:
    """Parse a UDP payload; raises ValueError when its length is not that of ``elems`` lanes."""
    if len(payload) != payload_bytes(elems):
        raise ValueError(f"aggregation payload is {len(payload)} bytes, expected "
                         f"{payload_bytes(elems)} ({elems} elements)")
    job, sv, worker, flags, offset, exp, _ = HEADER.unpack_from(payload)
    data = np.frombuffer(payload, dtype=">i4", offset=HEADER_BYTES).astype(np.int32)
    return InaPacket(job, sv >> 1, sv & 1, worker, flags, offset, exp, data)


def _csum16(b: bytes) -> int:
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def udp_frame(payload: bytes, *, src_mac: int, dst_mac: int, src_ip: int, dst_ip: int,
              sport: int, dport: int) -> bytes:
    """Ethernet + IPv4 (checksum set) + UDP (checksum 0, allowed over IPv4) around ``payload``."""
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0,
                     src_ip.to_bytes(4, "big"), dst_ip.to_bytes(4, "big"))
    ip = ip[:10] + struct.pack("!H", _csum16(ip)) + ip[12:]
    return dst_mac.to_bytes(6, "big") + src_mac.to_bytes(6, "big") + b"\x08\x00" + ip + udp


def reset_frame(job_id: int, slot: int, elems: int = ELEMS) -> bytes:
    """The frame of a RESET packet-out for ``slot`` of ``job_id`` (addresses are not looked at)."""
    from controller.ina.program import FLAG_RESET, INA_UDP_PORT

    pkt = InaPacket(job_id, slot, 0, 0, FLAG_RESET, 0, 0, np.zeros(elems, np.int32))
    return udp_frame(pkt.encode(), src_mac=0x020000000000, dst_mac=0x020000000000, src_ip=0,
                     dst_ip=0, sport=INA_UDP_PORT, dport=INA_UDP_PORT)
