"""The ARP responder as OpenFlow actions: a switch turns an ARP request for a fabric host into
the reply, with no controller. Pure, like :mod:`.encode`.

An entry matching ``eth_type=0x0806, arp_op=1, arp_tpa=IP`` (:func:`~controller.plan.model.
arp_request_match`) applies, in this order (the classic Open vSwitch ARP responder; RFC 826
"Packet Reception" says what a reply holds)::

    move eth_src -> eth_dst          the reply goes to the requester
    set  eth_src  = MAC
    set  arp_op   = 2                reply
    move arp_sha -> arp_tha          target = the requester's addresses
    set  arp_sha  = MAC
    move arp_spa -> arp_tpa
    set  arp_spa  = IP               sender = the host asked for
    output IN_PORT                   back out of the port the request came in by

``set`` is OpenFlow's ``OFPAT_SET_FIELD`` (1.3.5 §7.2.5; ``arp_op``/``arp_sha``/``arp_spa`` need
``eth_type=0x0806``, §7.2.3.8). ``move`` copies a whole field (:meth:`.dialect.Dialect.copy_field`):
OpenFlow 1.3 has no such action, so there it is Nicira's ``NXAST_REG_MOVE`` (os-ken
``NXActionRegMove``); OpenFlow 1.5 standardised it as ``OFPAT_COPY_FIELD`` (1.5.1 §7.2.3.8), and
Open vSwitch 3.1 refuses ``NXAST_REG_MOVE`` in a 1.5 session. Read back, Open vSwitch reports a
move over 1.5 as ``OFPAT_COPY_FIELD`` and over 1.3 as ``NXAST_REG_MOVE`` with NXM field headers
(os-ken names them ``eth_src_nxm``…; OVS ``lib/ofp-actions.c`` ``encode_REG_MOVE``) — or, for
an entry written over 1.5 and read over 1.3, as the ONF extension ``ONFACT_ET_COPY_FIELD``
(experimenter ``0x4F4E4600``, type 3200: the 1.5 action's body behind an experimenter head),
which os-ken leaves undecoded.
:func:`decode_reply` accepts every one of those spellings, so a switch read back compares equal
to the plan whatever version the session speaks (a mismatch would rewrite the entries at every
reconnect).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from os_ken.ofproto import ofproto_v1_3

from controller.drivers.openflow.dialect import Dialect
from controller.plan.model import ARP_OP_REPLY, ArpReply

ONF_EXPERIMENTER_ID = 0x4F4E4600
ONFACT_ET_COPY_FIELD = 3200
_ONF_COPY = struct.Struct("!H2xHHH2xII")  # exp_type, n_bits, src/dst offset, src/dst OXM

#: (source field, destination field, bits) of the three moves, in order.
_MOVES = (("eth_src", "eth_dst", 48), ("arp_sha", "arp_tha", 48), ("arp_spa", "arp_tpa", 32))

Step = tuple[Any, ...]


def reply_actions(reply: ArpReply, dialect: Dialect) -> list[Any]:
    """The actions that answer the request with ``reply`` (module docstring)."""
    p, o = dialect.parser, dialect.ofp

    def move(i: int) -> Any:
        return dialect.copy_field(*_MOVES[i])

    return [move(0), p.OFPActionSetField(eth_src=reply.mac),
            p.OFPActionSetField(arp_op=ARP_OP_REPLY),
            move(1), p.OFPActionSetField(arp_sha=reply.mac),
            move(2), p.OFPActionSetField(arp_spa=reply.ipv4),
            p.OFPActionOutput(o.OFPP_IN_PORT)]


def _field(name: str) -> str:
    return name[:-4] if name.endswith("_nxm") else name


def _step(a: Any, dialect: Dialect) -> Step | None:
    """One action in a version-neutral form, or None (not one the responder uses)."""
    p = dialect.parser
    kind = type(a).__name__
    if kind == "NXActionRegMove":
        return ("move", _field(a.src_field), _field(a.dst_field), a.n_bits, a.src_ofs,
                a.dst_ofs)
    if kind == "OFPActionCopyField":
        if len(a.oxm_ids) != 2:
            return None
        return ("move", _field(a.oxm_ids[0].type), _field(a.oxm_ids[1].type), a.n_bits,
                a.src_offset, a.dst_offset)
    if kind == "OFPActionExperimenterUnknown" and a.experimenter == ONF_EXPERIMENTER_ID:
        return _onf_copy_field(bytes(a.data))
    if isinstance(a, p.OFPActionSetField):
        k, v = a.key, a.value
        if isinstance(v, str):
            v = v.lower()
        return ("set", k, v)
    if isinstance(a, p.OFPActionOutput):
        return ("output", a.port)
    return None


def _onf_copy_field(data: bytes) -> Step | None:
    if len(data) < _ONF_COPY.size:
        return None
    exp_type, n_bits, src_ofs, dst_ofs, src, dst = _ONF_COPY.unpack_from(data)
    if exp_type != ONFACT_ET_COPY_FIELD:
        return None
    o = ofproto_v1_3
    try:
        names = [o.oxm_to_user_header(o.oxm_parse_header(struct.pack("!I", h), 0)[0])
                 for h in (src, dst)]
    except (KeyError, struct.error):
        return None
    return ("move", _field(str(names[0])), _field(str(names[1])), n_bits, src_ofs, dst_ofs)


def _steps(actions: Sequence[Any], dialect: Dialect) -> list[Step | None]:
    return [_step(a, dialect) for a in actions]


def decode_reply(actions: Sequence[Any], dialect: Dialect) -> ArpReply | None:
    """The :class:`ArpReply` an entry's apply-actions encode, or None (not the responder)."""
    if len(actions) != 8:
        return None
    got = _steps(actions, dialect)
    mac, ip = got[1], got[6]
    if mac is None or ip is None or mac[:2] != ("set", "eth_src") or \
            ip[:2] != ("set", "arp_spa"):
        return None
    try:
        reply = ArpReply(str(ip[2]), str(mac[2]))
    except ValueError:
        return None
    return reply if got == _steps(reply_actions(reply, dialect), dialect) else None
