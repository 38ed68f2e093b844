"""Plan objects → os-ken OpenFlow 1.3 messages, built with ``datapath=None``.

Pure functions in the Faucet style: nothing here talks to a switch. The os-ken app sets
``msg.datapath`` and sends; tests apply the same objects to
:class:`controller.testing.fakeoftable.FakeOFTable`.

Every entry we install carries :data:`COOKIE`. Flow identity (for modify/delete) is
``(table, priority, match)``, sent as ``OFPFC_MODIFY_STRICT`` / ``OFPFC_DELETE_STRICT``
(OpenFlow 1.3.5 §6.4). ECMP groups are ``OFPGT_SELECT`` with one bucket per port, weight 1 and
``watch_port`` = that port, so a switch skips buckets whose port is down (§5.6.1). Groups of
kind ``fast-failover`` are ``OFPGT_FF``: buckets in the intent's port order (planned port first),
each watching its port; the switch forwards by the first live one (§5.6.1).

Statistics (:func:`port_stats_request`, :func:`flow_stats_request`) are multipart requests
(§7.3.5); :func:`decode_match` turns a reply's match back into a plan :class:`Match`.
"""

from __future__ import annotations

from typing import Any

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller.plan.model import (
    ETH_TYPE_IPV4,
    IP_PROTO_TCP,
    IP_PROTO_UDP,
    FlowIntent,
    GroupIntent,
    Match,
    SwitchChanges,
    SwitchPlan,
)

#: The cookie on every flow entry aifabric installs ("a1fab" + version nibble).
COOKIE = 0x00A1FAB000000001

OFMsg = Any  # an os-ken ofproto_v1_3_parser.MsgBase with datapath None


class EncodeError(ValueError):
    """A plan object that cannot be expressed in OpenFlow 1.3 (e.g. a missing prerequisite)."""


# -- matches and actions -----------------------------------------------------------------------
def encode_match(match: Match) -> parser.OFPMatch:
    """An :class:`OFPMatch` for ``match``.

    IPv4 fields and ``ip_dscp``/``ip_proto`` need ``eth_type`` 0x0800; ``l4_src``/``l4_dst`` become
    ``tcp_*`` or ``udp_*`` according to ``ip_proto`` (OpenFlow 1.3.5 §7.2.3.6, prerequisites).

    Raises
    ------
    EncodeError
        A field whose prerequisite is missing, or a value out of its field's width.
    """
    f: dict[str, int | str] = {}
    ip_fields = (match.ipv4_src, match.ipv4_dst, match.ip_proto, match.ip_dscp)
    if any(v is not None for v in ip_fields) and match.eth_type != ETH_TYPE_IPV4:
        raise EncodeError(f"{match}: IPv4 fields need eth_type 0x0800, got {match.eth_type!r}")
    if match.eth_type is not None:
        _width(match, "eth_type", match.eth_type, 16)
        f["eth_type"] = match.eth_type
    if match.ipv4_src is not None:
        f["ipv4_src"] = match.ipv4_src
    if match.ipv4_dst is not None:
        f["ipv4_dst"] = match.ipv4_dst
    if match.ip_proto is not None:
        _width(match, "ip_proto", match.ip_proto, 8)
        f["ip_proto"] = match.ip_proto
    if match.ip_dscp is not None:
        _width(match, "ip_dscp", match.ip_dscp, 6)
        f["ip_dscp"] = match.ip_dscp
    if match.l4_src is not None or match.l4_dst is not None:
        prefix = {IP_PROTO_TCP: "tcp", IP_PROTO_UDP: "udp"}.get(match.ip_proto or -1)
        if prefix is None:
            raise EncodeError(f"{match}: l4 ports need ip_proto 6 or 17, got {match.ip_proto!r}")
        if match.l4_src is not None:
            _width(match, "l4_src", match.l4_src, 16)
            f[f"{prefix}_src"] = match.l4_src
        if match.l4_dst is not None:
            _width(match, "l4_dst", match.l4_dst, 16)
            f[f"{prefix}_dst"] = match.l4_dst
    return parser.OFPMatch(**f)


def _width(match: Match, name: str, value: int, bits: int) -> None:
    if not 0 <= value < (1 << bits):
        raise EncodeError(f"{match}: {name}={value} does not fit in {bits} bits")


def encode_instructions(flow: FlowIntent) -> list[parser.OFPInstruction]:
    """Apply-actions for the flow's action; ``drop`` is an empty instruction list."""
    a = flow.action
    if a.kind == "output":
        actions = [parser.OFPActionOutput(a.arg)]
    elif a.kind == "group":
        actions = [parser.OFPActionGroup(a.arg)]
    elif a.kind == "controller":
        actions = [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]
    elif a.kind == "drop":
        return []
    else:  # pragma: no cover - Action.kind is a Literal
        raise EncodeError(f"unknown action kind {a.kind!r}")
    return [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]


# -- flows -------------------------------------------------------------------------------------
def _flow_mod(flow: FlowIntent, command: int, with_instructions: bool) -> parser.OFPFlowMod:
    return parser.OFPFlowMod(
        datapath=None,
        cookie=COOKIE,
        cookie_mask=0,
        table_id=flow.table,
        command=command,
        priority=flow.priority,
        buffer_id=ofp.OFP_NO_BUFFER,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=encode_match(flow.match),
        instructions=encode_instructions(flow) if with_instructions else [],
    )


def flow_add(flow: FlowIntent) -> parser.OFPFlowMod:
    """``OFPFC_ADD`` for ``flow`` (replaces an entry with the same table, priority and match)."""
    return _flow_mod(flow, ofp.OFPFC_ADD, True)


def flow_modify(flow: FlowIntent) -> parser.OFPFlowMod:
    """``OFPFC_MODIFY_STRICT``: new instructions for the entry with ``flow.key``."""
    return _flow_mod(flow, ofp.OFPFC_MODIFY_STRICT, True)


def flow_delete(flow: FlowIntent) -> parser.OFPFlowMod:
    """``OFPFC_DELETE_STRICT`` of the entry with ``flow.key``."""
    return _flow_mod(flow, ofp.OFPFC_DELETE_STRICT, False)


def delete_all_flows() -> parser.OFPFlowMod:
    """``OFPFC_DELETE`` in every table with an empty match: removes every flow entry."""
    return parser.OFPFlowMod(
        datapath=None,
        cookie=0,
        cookie_mask=0,
        table_id=ofp.OFPTT_ALL,
        command=ofp.OFPFC_DELETE,
        buffer_id=ofp.OFP_NO_BUFFER,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=parser.OFPMatch(),
        instructions=[],
    )


# -- groups ------------------------------------------------------------------------------------
FF_KIND = "fast-failover"


def _group_type(group: GroupIntent) -> int:
    if group.kind == "select":
        return int(ofp.OFPGT_SELECT)
    if group.kind == FF_KIND:
        return int(ofp.OFPGT_FF)
    raise EncodeError(f"group {group.group_id}: unsupported kind {group.kind!r}")


def _buckets(group: GroupIntent) -> list[parser.OFPBucket]:
    gtype = _group_type(group)
    if not group.ports:
        raise EncodeError(f"group {group.group_id}: a {group.kind} group needs at least one port")
    if gtype == ofp.OFPGT_FF:
        return [
            parser.OFPBucket(weight=0, watch_port=p, watch_group=ofp.OFPG_ANY,
                             actions=[parser.OFPActionOutput(p)])
            for p in group.ports
        ]
    return [
        parser.OFPBucket(
            weight=1, watch_port=p, watch_group=ofp.OFPG_ANY,
            actions=[parser.OFPActionOutput(p)],
        )
        for p in sorted(group.ports)
    ]


def group_add(group: GroupIntent) -> parser.OFPGroupMod:
    """``OFPGC_ADD``: a select group, one bucket per port (weight 1, watch_port = port), or a
    fast-failover group, one bucket per port in order (watch_port = port)."""
    return parser.OFPGroupMod(None, ofp.OFPGC_ADD, _group_type(group), group.group_id,
                              _buckets(group))


def group_modify(group: GroupIntent) -> parser.OFPGroupMod:
    """``OFPGC_MODIFY``: replace the group's type and buckets."""
    return parser.OFPGroupMod(None, ofp.OFPGC_MODIFY, _group_type(group), group.group_id,
                              _buckets(group))


def group_delete(group_id: int) -> parser.OFPGroupMod:
    """``OFPGC_DELETE`` of ``group_id`` (:data:`OFPG_ALL` deletes every group)."""
    return parser.OFPGroupMod(None, ofp.OFPGC_DELETE, ofp.OFPGT_SELECT, group_id, [])


def delete_all_groups() -> parser.OFPGroupMod:
    """``OFPGC_DELETE`` with ``OFPG_ALL``."""
    return group_delete(ofp.OFPG_ALL)


def barrier() -> parser.OFPBarrierRequest:
    """A barrier request (the switch finishes everything before it first)."""
    return parser.OFPBarrierRequest(None)


# -- whole switches ----------------------------------------------------------------------------
def encode_changes(changes: SwitchChanges) -> list[OFMsg]:
    """Messages for ``changes`` in the safe order: add/modify groups, add/modify flows, delete
    flows, delete groups, so no flow ever points at a missing group. No barrier is appended."""
    msgs: list[OFMsg] = []
    msgs += [group_add(g) for g in changes.add_groups]
    msgs += [group_modify(g) for g in changes.modify_groups]
    msgs += [flow_add(f) for f in changes.add_flows]
    msgs += [flow_modify(f) for f in changes.modify_flows]
    msgs += [flow_delete(f) for f in changes.delete_flows]
    msgs += [group_delete(g.group_id) for g in changes.delete_groups]
    return msgs


def encode_full(plan: SwitchPlan) -> list[OFMsg]:
    """Replace everything on a switch with ``plan``: delete all flows, delete all groups, add the
    groups, add the flows (sorted, so the output is deterministic), then a barrier."""
    msgs: list[OFMsg] = [delete_all_flows(), delete_all_groups()]
    msgs += [group_add(g) for g in sorted(plan.groups)]
    msgs += [flow_add(f) for f in sorted(plan.flows)]
    msgs.append(barrier())
    return msgs


def packet_out(port: int, data: bytes) -> parser.OFPPacketOut:
    """A packet-out sending ``data`` (a whole Ethernet frame) out of ``port``, from the
    controller (``in_port`` = ``OFPP_CONTROLLER``, no buffer)."""
    return parser.OFPPacketOut(
        None,
        buffer_id=ofp.OFP_NO_BUFFER,
        in_port=ofp.OFPP_CONTROLLER,
        actions=[parser.OFPActionOutput(port)],
        data=data,
    )


# -- statistics ----------------------------------------------------------------------------------
def port_stats_request() -> parser.OFPPortStatsRequest:
    """Counters of every port (``OFPP_ANY``); the reply's ``tx_bytes`` are bytes."""
    return parser.OFPPortStatsRequest(None, 0, ofp.OFPP_ANY)


def queue_stats_request() -> parser.OFPQueueStatsRequest:
    """Counters of every queue of every port (``OFPP_ANY``, ``OFPQ_ALL``); the reply's
    ``tx_bytes`` are bytes, ``tx_errors`` frames dropped by the queue (OpenFlow 1.3.5
    §7.3.5.8). A switch with no queues configured answers with an empty body."""
    return parser.OFPQueueStatsRequest(None, 0, ofp.OFPP_ANY, ofp.OFPQ_ALL)


def flow_stats_request() -> parser.OFPFlowStatsRequest:
    """Counters of every entry aifabric installed (cookie :data:`COOKIE`, all tables); the
    reply's ``byte_count`` are bytes."""
    return parser.OFPFlowStatsRequest(None, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY,
                                      COOKIE, 0xFFFFFFFFFFFFFFFF, parser.OFPMatch())


_DECODE = {"eth_type": "eth_type", "ipv4_src": "ipv4_src", "ipv4_dst": "ipv4_dst",
           "ip_proto": "ip_proto", "ip_dscp": "ip_dscp", "tcp_src": "l4_src",
           "tcp_dst": "l4_dst", "udp_src": "l4_src", "udp_dst": "l4_dst"}


def decode_match(match: parser.OFPMatch) -> Match | None:
    """The plan :class:`Match` an OFPMatch of ours encodes (inverse of :func:`encode_match`), or
    None when it has a field :class:`Match` cannot hold (not one of our entries)."""
    fields: dict[str, Any] = {}
    for key, value in match.items():
        name = _DECODE.get(key)
        if name is None or isinstance(value, tuple):  # unknown field or a masked value
            return None
        fields[name] = value
    return Match(**fields)


def describe(msg: OFMsg) -> str:
    """A short human label for a message (for logs): ``flow-add``, ``group-delete``, …"""
    if isinstance(msg, parser.OFPFlowMod):
        return {
            ofp.OFPFC_ADD: "flow-add", ofp.OFPFC_MODIFY: "flow-modify",
            ofp.OFPFC_MODIFY_STRICT: "flow-modify", ofp.OFPFC_DELETE: "flow-delete",
            ofp.OFPFC_DELETE_STRICT: "flow-delete",
        }.get(msg.command, "flow-mod")
    if isinstance(msg, parser.OFPGroupMod):
        return {ofp.OFPGC_ADD: "group-add", ofp.OFPGC_MODIFY: "group-modify",
                ofp.OFPGC_DELETE: "group-delete"}.get(msg.command, "group-mod")
    if isinstance(msg, parser.OFPBarrierRequest):
        return "barrier"
    if isinstance(msg, parser.OFPPacketOut):
        return "packet-out"
    return type(msg).__name__
