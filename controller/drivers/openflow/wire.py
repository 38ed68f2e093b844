"""The messages a change is made of, straight to wire bytes: flow-mods and the bundle-add
messages that carry them, packed with :mod:`struct` instead of built as os-ken objects first.

A k = 16 fat-tree's plan is ~330,000 entries; building each as an ``OFPFlowMod`` with an
``OFPMatch`` (os-ken normalises every OXM field through ``netaddr``) cost ~130 µs of the
controller's one loop per entry, serialising it ~60 µs more: about a minute of CPU before
Open vSwitch had anything to do. Packed here, an entry costs a few µs. The bytes are those
os-ken writes for the same message, byte for byte (``tests/test_openflow_encode.py`` compares
them over every shape the encoder makes); what the driver sends to a switch it has no os-ken
objects for.

Layouts (all big-endian), OpenFlow 1.3.5 and 1.5.1, ``ofp_header`` first:

* ``ofp_flow_mod`` (§7.3.4.1): cookie, cookie_mask (8 each), table_id, command (1 each),
  idle_timeout, hard_timeout, priority (2 each), buffer_id, out_port, out_group (4 each),
  flags, pad (1.5: importance) (2 each) — 48 bytes with the header — then ``ofp_match``
  (§7.2.2: type ``OFPMT_OXM``, length, OXM TLVs, padded to 8 bytes) and the instructions;
* an OXM TLV header (§7.2.3.2): class ``OFPXMC_OPENFLOW_BASIC`` (0x8000), field (7 bits),
  hasmask (1 bit), length; fields in ascending field number, as os-ken orders them;
* ``OFPIT_APPLY_ACTIONS`` (§7.2.4: type, length, 4 pad) with one ``OFPAT_OUTPUT`` (16 bytes:
  port, max_len ``OFPCML_MAX`` — ``OFPCML_NO_BUFFER`` to the controller) or ``OFPAT_GROUP``
  (8 bytes);
* a bundle add (OpenFlow 1.4+ §7.3.9.7 ``OFPT_BUNDLE_ADD_MESSAGE``; on 1.3 the ONF EXT-230
  experimenter message, experimenter ``0x4f4e4600``, type 2301): bundle_id, pad, flags, then the
  inner message, whose xid is the outer one (EXT-230 §3.3).
"""

from __future__ import annotations

import functools
import ipaddress
import struct

from controller.plan.model import IP_PROTO_TCP, IP_PROTO_UDP, Action, Match

OFPT_EXPERIMENTER = 4
OFPT_FLOW_MOD = 14
OFPT_BUNDLE_ADD_MESSAGE = 34
ONF_EXPERIMENTER_ID = 0x4F4E4600
ONF_ET_BUNDLE_ADD_MESSAGE = 2301
OFPMT_OXM = 1
OFPXMC_OPENFLOW_BASIC = 0x8000
OFPIT_APPLY_ACTIONS = 4
OFPAT_OUTPUT = 0
OFPAT_GROUP = 22
OFPP_CONTROLLER = 0xFFFFFFFD
OFPP_ANY = 0xFFFFFFFF
OFPG_ANY = 0xFFFFFFFF
OFP_NO_BUFFER = 0xFFFFFFFF
OFPCML_MAX = 0xFFE5
OFPCML_NO_BUFFER = 0xFFFF

#: OXM field numbers (OpenFlow 1.3.5 §7.2.3.7) and value widths (bytes)
_ETH_TYPE, _IP_DSCP, _IP_PROTO, _IPV4_SRC, _IPV4_DST = 5, 8, 10, 11, 12
_TCP_SRC, _TCP_DST, _UDP_SRC, _UDP_DST = 13, 14, 15, 16
_ARP_OP, _ARP_TPA = 21, 23

_HEADER = struct.Struct("!BBHI")
_FLOW_MOD = struct.Struct("!BBHIQQBBHHHIIIH2x")
_BUNDLE_ADD_ONF = struct.Struct("!BBHIIII2xH")
_BUNDLE_ADD = struct.Struct("!BBHII2xH")
_OXM8 = struct.Struct("!IB")
_OXM16 = struct.Struct("!IH")
_OXM32 = struct.Struct("!I4s")
_MATCH_HEAD = struct.Struct("!HH")
_APPLY = struct.Struct("!HH4x")
_OUTPUT = struct.Struct("!HHIH6x")
_GROUP = struct.Struct("!HHI")


def _oxm(field: int, length: int) -> int:
    return (OFPXMC_OPENFLOW_BASIC << 16) | (field << 9) | length


_H_ETH_TYPE = _oxm(_ETH_TYPE, 2)
_H_IP_DSCP = _oxm(_IP_DSCP, 1)
_H_IP_PROTO = _oxm(_IP_PROTO, 1)
_H_IPV4_SRC = _oxm(_IPV4_SRC, 4)
_H_IPV4_DST = _oxm(_IPV4_DST, 4)
_H_L4 = {IP_PROTO_TCP: (_oxm(_TCP_SRC, 2), _oxm(_TCP_DST, 2)),
         IP_PROTO_UDP: (_oxm(_UDP_SRC, 2), _oxm(_UDP_DST, 2))}
_PAD = (b"", b"\0" * 7, b"\0" * 6, b"\0" * 5, b"\0" * 4, b"\0" * 3, b"\0" * 2, b"\0")



@functools.lru_cache(maxsize=1 << 20)
def _ipv4(text: str) -> bytes:
    return ipaddress.IPv4Address(text).packed


def match_bytes(m: Match) -> bytes:
    """``ofp_match`` of ``m`` (module docstring), padded; ``m`` is valid
    (:func:`controller.drivers.openflow.encode.encode_match` says why not)."""
    parts = []
    if m.eth_type is not None:
        parts.append(_OXM16.pack(_H_ETH_TYPE, m.eth_type))
    if m.ip_dscp is not None:
        parts.append(_OXM8.pack(_H_IP_DSCP, m.ip_dscp))
    if m.ip_proto is not None:
        parts.append(_OXM8.pack(_H_IP_PROTO, m.ip_proto))
    if m.ipv4_src is not None:
        parts.append(_OXM32.pack(_H_IPV4_SRC, _ipv4(m.ipv4_src)))
    if m.ipv4_dst is not None:
        parts.append(_OXM32.pack(_H_IPV4_DST, _ipv4(m.ipv4_dst)))
    if m.l4_src is not None or m.l4_dst is not None:
        src, dst = _H_L4[m.ip_proto]  # type: ignore[index]
        if m.l4_src is not None:
            parts.append(_OXM16.pack(src, m.l4_src))
        if m.l4_dst is not None:
            parts.append(_OXM16.pack(dst, m.l4_dst))
    body = b"".join(parts)
    n = 4 + len(body)
    return _MATCH_HEAD.pack(OFPMT_OXM, n) + body + _PAD[n % 8]


def instructions_bytes(action: Action, group_id: int | None) -> bytes:
    """Apply-actions of ``action`` (``group_id``: its next-hop set's group); none for drop."""
    kind = action.kind
    if kind == "output":
        act = _OUTPUT.pack(OFPAT_OUTPUT, 16, action.port, OFPCML_MAX)
    elif kind == "next_hops":
        assert group_id is not None
        act = _GROUP.pack(OFPAT_GROUP, 8, group_id)
    elif kind == "controller":
        act = _OUTPUT.pack(OFPAT_OUTPUT, 16, OFPP_CONTROLLER, OFPCML_NO_BUFFER)
    else:
        return b""
    return _APPLY.pack(OFPIT_APPLY_ACTIONS, 8 + len(act)) + act


def flow_mod(version: int, xid: int, command: int, table: int, priority: int, match: bytes,
             instructions: bytes, cookie: int, cookie_mask: int) -> bytes:
    """An ``OFPT_FLOW_MOD`` (``match``/``instructions``: :func:`match_bytes`,
    :func:`instructions_bytes`); idle and hard timeouts 0, no buffer, any out port and group,
    no flags."""
    n = _FLOW_MOD.size + len(match) + len(instructions)
    return _FLOW_MOD.pack(version, OFPT_FLOW_MOD, n, xid, cookie, cookie_mask, table, command,
                          0, 0, priority, OFP_NO_BUFFER, OFPP_ANY, OFPG_ANY, 0) \
        + match + instructions


_PACKET_OUT = struct.Struct("!BBHIIIH6x")
OFPT_PACKET_OUT = 13


def packet_out(xid: int, port: int, data: bytes) -> bytes:
    """An OpenFlow 1.3 ``OFPT_PACKET_OUT`` (§7.3.7) of ``data`` out of ``port``: no buffer,
    in-port ``OFPP_CONTROLLER``, one output action (max_len ``OFPCML_MAX``)."""
    act = _OUTPUT.pack(OFPAT_OUTPUT, 16, port, OFPCML_MAX)
    return _PACKET_OUT.pack(4, OFPT_PACKET_OUT, _PACKET_OUT.size + len(act) + len(data), xid,
                            OFP_NO_BUFFER, OFPP_CONTROLLER, len(act)) + act + data


def with_xid(message: bytes, xid: int) -> bytes:
    """``message`` (wire bytes) with its header's xid set to ``xid``."""
    return message[:4] + xid.to_bytes(4, "big") + message[8:]


def bundle_add(version: int, xid: int, bundle_id: int, flags: int, inner: bytes) -> bytes:
    """A bundle add carrying ``inner`` (whose xid must be ``xid``): ``OFPT_BUNDLE_ADD_MESSAGE``
    from OpenFlow 1.4 on, the ONF EXT-230 experimenter message on 1.3."""
    if version >= 5:
        return _BUNDLE_ADD.pack(version, OFPT_BUNDLE_ADD_MESSAGE, _BUNDLE_ADD.size + len(inner),
                                xid, bundle_id, flags) + inner
    return _BUNDLE_ADD_ONF.pack(version, OFPT_EXPERIMENTER, _BUNDLE_ADD_ONF.size + len(inner),
                                xid, ONF_EXPERIMENTER_ID, ONF_ET_BUNDLE_ADD_MESSAGE, bundle_id,
                                flags) + inner


# -- reading: flow statistics (OpenFlow 1.3) ---------------------------------------------------
OFPMP_FLOW = 1
OFPP_MAX = 0xFFFFFF00
_FLOW_STATS = struct.Struct("!HBxIIHHHH4xQQQ")  # ofp_flow_stats up to the match (48 bytes)
_OXM_HEAD = struct.Struct("!I")
_U8 = struct.Struct("!B")
_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_FIELDS = {_ETH_TYPE: "eth_type", _IP_DSCP: "ip_dscp", _IP_PROTO: "ip_proto",
           _IPV4_SRC: "ipv4_src", _IPV4_DST: "ipv4_dst", _TCP_SRC: "l4_src",
           _TCP_DST: "l4_dst", _UDP_SRC: "l4_src", _UDP_DST: "l4_dst", _ARP_OP: "arp_op",
           _ARP_TPA: "arp_tpa"}
_WIDTH = {_ETH_TYPE: 2, _IP_DSCP: 1, _IP_PROTO: 1, _IPV4_SRC: 4, _IPV4_DST: 4, _TCP_SRC: 2,
          _TCP_DST: 2, _UDP_SRC: 2, _UDP_DST: 2, _ARP_OP: 2, _ARP_TPA: 4}


class WireAction:
    """An entry's one apply-action as read from the wire: ``("output", port)``,
    ``("group", group_id)``, or ``("drop", 0)`` (no instruction); decoded into a plan
    :class:`~controller.plan.model.Action` by :func:`controller.drivers.openflow.encode.
    decode_action`."""

    __slots__ = ("kind", "value")

    def __init__(self, kind: str, value: int) -> None:
        self.kind = kind
        self.value = value

    def __repr__(self) -> str:
        return f"WireAction({self.kind!r}, {self.value})"


_DROP = WireAction("drop", 0)


@functools.lru_cache(maxsize=1 << 16)
def _action(kind: str, value: int) -> WireAction:
    """The one :class:`WireAction` of ``kind`` and ``value`` (shared by every entry)."""
    return WireAction(kind, value)


@functools.lru_cache(maxsize=1 << 20)
def decode_oxm_match(raw: bytes) -> Match | None:
    """The plan :class:`Match` of an ``ofp_match``'s OXM TLVs (``raw``: the TLVs, no header or
    padding), or None when a field is masked or not one :class:`Match` holds. A pure function
    of the bytes, memoised: decoded matches are shared (the same route match comes from every
    switch)."""
    fields: dict[str, int | str] = {}
    off, end = 0, len(raw)
    m: Match | None = None
    while off + 4 <= end:
        (h,) = _OXM_HEAD.unpack_from(raw, off)
        field, width = (h >> 9) & 0x7F, h & 0xFF
        if h >> 16 != OFPXMC_OPENFLOW_BASIC or h & 0x100 or _WIDTH.get(field) != width \
                or off + 4 + width > end:
            break
        if width == 4:
            v: int | str = ".".join(str(b) for b in raw[off + 4:off + 8])
        elif width == 2:
            (v,) = _U16.unpack_from(raw, off + 4)
        else:
            (v,) = _U8.unpack_from(raw, off + 4)
        fields[_FIELDS[field]] = v
        off += 4 + width
    else:
        if off == end:
            try:
                m = Match(**fields)  # type: ignore[arg-type]
            except TypeError:
                m = None
    return m


def _instructions(buf: bytes, off: int, end: int) -> WireAction | None:
    """The one apply-action of an entry's instructions (:class:`WireAction`), or None when
    they are something else."""
    if off == end:
        return _DROP
    if end - off not in (16, 24):
        return None
    itype, ilen = _U16.unpack_from(buf, off)[0], _U16.unpack_from(buf, off + 2)[0]
    if itype != OFPIT_APPLY_ACTIONS or off + ilen != end:
        return None
    atype, alen = _U16.unpack_from(buf, off + 8)[0], _U16.unpack_from(buf, off + 10)[0]
    (value,) = _U32.unpack_from(buf, off + 12)
    if atype == OFPAT_OUTPUT and alen == 16 and ilen == 24:
        return _action("output", value)
    if atype == OFPAT_GROUP and alen == 8 and ilen == 16:
        return _action("group", value)
    return None


def flow_stats_entries(buf: bytes, off: int, end: int) -> list[tuple[int, int, int, int, int,
                                                                     Match | None,
                                                                     WireAction | None, int,
                                                                     int]]:
    """The entries of an OpenFlow 1.3 ``OFPMP_FLOW`` reply body ``buf[off:end]``: (table,
    priority, cookie, byte count, packet count, match or None, action or None, offset of the
    entry, offset of its instructions); an entry whose match or instructions are not of a
    shape the plan writes has None there (the caller reads it with os-ken; the ARP
    responder's instructions, the same on every edge switch, once per distinct bytes).

    Raises
    ------
    ValueError
        An entry's length is shorter than its fixed part (a malformed reply).
    """
    out = []
    while off < end:
        length, table, _, _, prio, _, _, _, cookie, packets, nbytes = \
            _FLOW_STATS.unpack_from(buf, off)
        if length < _FLOW_STATS.size + 8 or off + length > end:
            raise ValueError(f"flow statistics entry of length {length} at {off}")
        mtype, mlen = _MATCH_HEAD.unpack_from(buf, off + _FLOW_STATS.size)
        mstart = off + _FLOW_STATS.size
        ins = mstart + ((mlen + 7) // 8) * 8
        match = decode_oxm_match(bytes(buf[mstart + 4:mstart + mlen])) \
            if mtype == OFPMT_OXM and mlen >= 4 and ins <= off + length else None
        action = _instructions(buf, ins, off + length) if match is not None else None
        out.append((table, prio, cookie, nbytes, packets, match, action, off, ins))
        off += length
    return out


#: ofp_flow_desc up to its match (OpenFlow 1.5.1 §7.3.5.2: length, pad, table, pad, priority,
#: idle and hard timeouts, flags, importance, cookie: 24 bytes), then the match, then an
#: ofp_stats (§7.2.4: reserved, length, OXS TLVs; padded to 8), then the instructions
_FLOW_DESC = struct.Struct("!H2xBxHHHHHQ")
OFPXSC_OPENFLOW_BASIC_STATS = 0x8002
_OXS_PACKET_COUNT, _OXS_BYTE_COUNT = 4, 5
_U64 = struct.Struct("!Q")


def flow_desc_entries(buf: bytes, off: int, end: int) -> list[tuple[int, int, int, int, int,
                                                                    Match | None,
                                                                    WireAction | None, int,
                                                                    int]]:
    """The entries of an OpenFlow 1.5 ``OFPMP_FLOW_DESC`` reply body ``buf[off:end]``, as
    :func:`flow_stats_entries` gives them for 1.3 (byte and packet counts from the entry's OXS
    statistics, 0 when it has none).

    Raises
    ------
    ValueError
        An entry's lengths do not fit in it (a malformed reply).
    """
    out = []
    while off < end:
        length, table, prio, _, _, _, _, cookie = _FLOW_DESC.unpack_from(buf, off)
        stop = off + length
        mstart = off + _FLOW_DESC.size
        if length < _FLOW_DESC.size + 8 or stop > end:
            raise ValueError(f"flow description of length {length} at {off}")
        mtype, mlen = _MATCH_HEAD.unpack_from(buf, mstart)
        st = mstart + ((mlen + 7) // 8) * 8
        if st + 4 > stop:
            raise ValueError(f"flow description at {off}: match of length {mlen} past its end")
        _, slen = _MATCH_HEAD.unpack_from(buf, st)
        ins = st + ((slen + 7) // 8) * 8
        if slen < 4 or ins > stop:
            raise ValueError(f"flow description at {off}: statistics of length {slen} past "
                             "its end")
        packets = nbytes = 0
        p = st + 4
        while p + 4 <= st + slen:
            (h,) = _OXM_HEAD.unpack_from(buf, p)
            field, width = (h >> 9) & 0x7F, h & 0xFF
            if h >> 16 == OFPXSC_OPENFLOW_BASIC_STATS and width == 8 and p + 12 <= st + slen:
                if field == _OXS_PACKET_COUNT:
                    (packets,) = _U64.unpack_from(buf, p + 4)
                elif field == _OXS_BYTE_COUNT:
                    (nbytes,) = _U64.unpack_from(buf, p + 4)
            p += 4 + width
        match = decode_oxm_match(bytes(buf[mstart + 4:mstart + mlen])) \
            if mtype == OFPMT_OXM and mlen >= 4 else None
        action = _instructions(buf, ins, stop) if match is not None else None
        out.append((table, prio, cookie, nbytes, packets, match, action, off, ins))
        off = stop
    return out


__all__ = ["WireAction", "bundle_add", "decode_oxm_match", "flow_desc_entries", "flow_mod",
           "flow_stats_entries",
           "instructions_bytes", "match_bytes", "packet_out", "with_xid"]
