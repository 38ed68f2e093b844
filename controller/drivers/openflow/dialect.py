"""OpenFlow versions the driver speaks, and what differs between them. Pure: messages are built
with an os-ken :class:`~os_ken.ofproto.ofproto_protocol.ProtocolDesc` (no connection), so they
serialise anywhere and tests push the very same objects into the flow-table simulator.

The driver offers OpenFlow 1.3 and 1.5; the switch picks the highest both speak (OpenFlow
1.3.5 §6.3.1 version negotiation). Where they differ:

* **Bundles** (atomic changes): OpenFlow 1.5 ``OFPT_BUNDLE_CONTROL``/``OFPT_BUNDLE_ADD_MESSAGE``
  (1.4.0 §6.8, §7.3.9); OpenFlow 1.3 the ONF extension EXT-230 with the same semantics, which
  Open vSwitch implements. Both with flags ATOMIC|ORDERED.
* **Groups**: 1.5 buckets carry ids and properties (weight, watch port: 1.5.1 §7.3.4.2), and a
  group carries properties: Open vSwitch's select-group **selection method** is an experimenter
  group property (``ntr_group_prop_selection_method``: experimenter ``0x0000154d`` (NTR),
  exp_type 1, a 16-byte method name, a 64-bit ``selection_method_param`` and the OXM headers of
  the hashed fields; ovs-ofctl(8) "Group Syntax": ``selection_method=hash``, ``fields(...)``,
  ``selection_method_param``). OpenFlow 1.3 has no group properties: a switch on 1.3 hashes its
  default way (Open vSwitch since 2.10: ``dp_hash`` over a symmetric L3/L4 hash that leaves UDP
  ports out, basis 0), so an ECMP set that asks for fields or a seed cannot be honoured there
  (:data:`CAP_ECMP_HASH` is absent: the runtime plans such a switch's sets without a hash and
  warns; the encoder refuses a set that still carries one).
* **Read-back**: entries with their instructions come from 1.3 flow statistics, from 1.5 flow
  *descriptions* (``OFPMP_FLOW_DESC``); 1.5 statistics carry OXS counters.
* **Packet-out**: 1.5 carries the in-port in a match.
* **Copying a field** (the ARP responder's moves): 1.5 ``OFPAT_COPY_FIELD``; 1.3 Nicira's
  ``NXAST_REG_MOVE``, which Open vSwitch refuses on 1.5 (``OFPBAC_BAD_EXP_TYPE``).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from os_ken.ofproto import (
    ofproto_protocol,
    ofproto_v1_3,
    ofproto_v1_3_parser,
    ofproto_v1_5,
    ofproto_v1_5_parser,
)

from controller.drivers.openflow import wire
from controller.plan.model import EcmpHash
from controller.telemetry.samples import PortCounters, QueueCounters

NTR_VENDOR_ID = 0x0000154D
NTRT_SELECTION_METHOD = 1
SELECTION_HASH = "hash"

CAP_ATOMIC = "atomic"
CAP_ECMP_HASH = "ecmp_hash"
CAP_FAILOVER = "failover"
CAP_ROLES = "roles"

#: Plan hash field → the OXM fields Open vSwitch hashes for it (a transport port is TCP's or
#: UDP's; OVS hashes a field only when its prerequisites hold).
HASH_OXM: dict[str, tuple[str, ...]] = {
    "eth_src": ("eth_src",), "eth_dst": ("eth_dst",), "ipv4_src": ("ipv4_src",),
    "ipv4_dst": ("ipv4_dst",), "ip_proto": ("ip_proto",), "l4_src": ("tcp_src", "udp_src"),
    "l4_dst": ("tcp_dst", "udp_dst"),
}
_OXM_HASH = {o: name for name, oxms in HASH_OXM.items() for o in oxms}


@dataclass(frozen=True)
class FlowRecord:
    """One entry as a switch reports it (flow statistics / description)."""

    table: int
    priority: int
    cookie: int
    match: Any  # OFPMatch, or a plan Match when read from the wire
    instructions: tuple[Any, ...]  # os-ken instructions, or one wire.WireAction
    byte_count: int = 0
    packet_count: int = 0


class WireRecord:
    """A :class:`FlowRecord` read straight from the wire (:meth:`OF13.wire_flow_stats`): the
    same attributes, a plan ``Match`` and one :class:`~.wire.WireAction`; a plain slotted
    object (a frozen dataclass costs several times as much to build, per entry of a read-back)."""

    __slots__ = ("byte_count", "cookie", "instructions", "match", "packet_count", "priority",
                 "table")

    def __init__(self, table: int, priority: int, cookie: int, match: Any,
                 instructions: tuple[Any, ...], byte_count: int, packet_count: int) -> None:
        self.table = table
        self.priority = priority
        self.cookie = cookie
        self.match = match
        self.instructions = instructions
        self.byte_count = byte_count
        self.packet_count = packet_count


class SharedInstructions(tuple[Any, ...]):
    """Instructions os-ken parsed once for every entry read back with the same bytes
    (:meth:`OF13.wire_flow_stats`): one object shared by those entries, on every switch, so
    their plan action is decoded once too (:func:`~.encode.decode_action`).

    ``decoded`` holds that action once decoded when it depends on the bytes alone (an ARP
    reply: no group id of a switch); ``UNDECODED`` until then."""

    decoded: Any

    def __new__(cls, items: Iterable[Any]) -> SharedInstructions:
        self = super().__new__(cls, items)
        self.decoded = UNDECODED
        return self


UNDECODED: Any = object()
"""The :attr:`SharedInstructions.decoded` of instructions not decoded yet (or whose action
depends on the switch)."""


Record = FlowRecord | WireRecord
"""An entry as read back: decoded by os-ken, or straight from the wire."""


@dataclass
class WireFlowStatsReply:
    """A flow statistics reply part decoded without os-ken (:meth:`OF13.wire_flow_stats`):
    ``flags`` (``OFPMPF_REPLY_MORE``) and the entries as records."""

    xid: int
    flags: int
    body: list[Any]


@dataclass(frozen=True)
class Bucket:
    """A group bucket: the ports its actions output to, its watch port, its weight."""

    outputs: tuple[int, ...]
    watch_port: int
    weight: int
    other_actions: bool = False


@dataclass(frozen=True)
class GroupRecord:
    """One group as a switch reports it; ``selection`` is the select method (hash fields and
    seed) when the switch reported one."""

    group_id: int
    type: int
    buckets: tuple[Bucket, ...]
    selection: EcmpHash | None = None
    selection_method: str = ""


@functools.lru_cache(maxsize=1 << 16)
def shared_instructions(parser: Any, raw: bytes) -> SharedInstructions:
    """The instructions ``raw`` (the instruction list of a flow entry read back) as os-ken's
    ``parser`` module parses them: one object per distinct bytes, shared by every entry and
    switch holding them (memoised)."""
    out, off = [], 0
    while off < len(raw):
        inst = parser.OFPInstruction.parser(raw, off)
        out.append(inst)
        off += inst.len
    return SharedInstructions(out)


class Dialect:
    """The version-specific half of the OpenFlow encoder (module docstring)."""

    name = ""
    version = 0
    ofp: Any = None
    parser: Any = None
    capabilities: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.desc = ofproto_protocol.ProtocolDesc(self.version)

    # -- building ------------------------------------------------------------------------------
    def _own(self, msg: Any) -> Any:
        msg.datapath = self.desc
        return msg

    def flow_mod(self, command: int, table: int, priority: int, match: Any,
                 instructions: list[Any], cookie: int, cookie_mask: int) -> Any:
        p, o = self.parser, self.ofp
        return self._own(p.OFPFlowMod(
            self.desc, cookie=cookie, cookie_mask=cookie_mask, table_id=table, command=command,
            priority=priority, buffer_id=o.OFP_NO_BUFFER, out_port=o.OFPP_ANY,
            out_group=o.OFPG_ANY, match=match, instructions=instructions))

    def group_mod(self, command: int, gtype: int, group_id: int,
                  buckets: list[tuple[int, int]], selection: EcmpHash | None) -> Any:
        """``buckets``: (output port, weight) each watching its own port."""
        raise NotImplementedError

    def barrier(self) -> Any:
        return self._own(self.parser.OFPBarrierRequest(self.desc))

    def copy_field(self, src: str, dst: str, n_bits: int) -> Any:
        """An action copying the whole field ``src`` into ``dst`` (OXM names, ``n_bits`` wide)."""
        raise NotImplementedError

    def bundle_ctrl(self, bundle_id: int, kind: str) -> Any:
        """``kind``: open, commit, discard (flags ATOMIC|ORDERED)."""
        raise NotImplementedError

    def bundle_add(self, bundle_id: int, inner: Any) -> Any:
        raise NotImplementedError

    def bundle_reply(self, msg: Any) -> tuple[int, str] | None:
        """(bundle id, open/commit/discard) when ``msg`` is a bundle control reply."""
        raise NotImplementedError

    def packet_out(self, port: int, data: bytes) -> Any:
        raise NotImplementedError

    def entries_request(self, cookie: int, cookie_mask: int = 0xFFFFFFFFFFFFFFFF) -> Any:
        """Every entry whose cookie matches ``cookie`` under ``cookie_mask`` (default: exactly;
        0: every entry of the switch, foreign ones too), with instructions."""
        raise NotImplementedError

    def entry_counters_request(self, cookie: int) -> Any:
        """Byte counters of every entry with ``cookie``."""
        raise NotImplementedError

    def groups_request(self) -> Any:
        p, o = self.parser, self.ofp
        return self._own(p.OFPGroupDescStatsRequest(self.desc, 0, group_id=o.OFPG_ALL)
                         if self.version >= ofproto_v1_5.OFP_VERSION
                         else p.OFPGroupDescStatsRequest(self.desc, 0))

    def port_stats_request(self) -> Any:
        return self._own(self.parser.OFPPortStatsRequest(self.desc, 0, self.ofp.OFPP_ANY))

    def queue_stats_request(self) -> Any:
        return self._own(self.parser.OFPQueueStatsRequest(self.desc, 0, self.ofp.OFPP_ANY,
                                                          self.ofp.OFPQ_ALL))

    def table_features_request(self) -> Any:
        """Every table's features (an empty body only asks: OpenFlow 1.3.5 §7.3.5.18; a body
        would set the tables' configuration)."""
        return self._own(self.parser.OFPTableFeaturesStatsRequest(self.desc, 0, []))

    @staticmethod
    def table_sizes(body: list[Any]) -> dict[int, int]:
        """Table id → ``max_entries`` from a table features reply (OpenFlow 1.3.5
        §7.3.5.18.1: "the maximum number of flow entries that can be inserted into that
        table")."""
        return {int(t.table_id): int(t.max_entries) for t in body}

    def role_request(self, role: str, generation_id: int) -> Any:
        o = self.ofp
        code = {"master": o.OFPCR_ROLE_MASTER, "backup": o.OFPCR_ROLE_SLAVE,
                "equal": o.OFPCR_ROLE_EQUAL}[role]
        return self._own(self.parser.OFPRoleRequest(self.desc, role=code,
                                                    generation_id=generation_id))

    def role_of(self, code: int) -> str:
        o = self.ofp
        return {o.OFPCR_ROLE_MASTER: "master", o.OFPCR_ROLE_SLAVE: "backup",
                o.OFPCR_ROLE_EQUAL: "equal"}.get(code, "equal")

    # -- decoding ------------------------------------------------------------------------------
    def flow_records(self, body: list[Any]) -> list[Record]:
        raise NotImplementedError

    def group_records(self, body: list[Any]) -> list[GroupRecord]:
        raise NotImplementedError

    def port_counters(self, body: list[Any]) -> list[PortCounters]:
        return [PortCounters(s.port_no, s.rx_bytes, s.tx_bytes, s.rx_packets, s.tx_packets,
                             s.rx_dropped, s.tx_dropped, s.rx_errors, s.tx_errors)
                for s in body if s.port_no <= self.ofp.OFPP_MAX]

    def queue_counters(self, body: list[Any]) -> list[QueueCounters]:
        return [QueueCounters(s.port_no, s.queue_id, s.tx_bytes, s.tx_packets, s.tx_errors)
                for s in body if s.port_no <= self.ofp.OFPP_MAX]

    def serialize(self, msg: Any, xid: int) -> bytes:
        """Wire bytes of ``msg`` with ``xid``."""
        msg.datapath = self.desc
        msg.set_xid(xid)
        msg.serialize()
        return bytes(msg.buf)

    def _wire_records(self, xid: int, frame: bytes, entries: list[Any],
                      parse: Any) -> WireFlowStatsReply:
        """The records of a flow statistics (1.3) or description (1.5) reply's ``entries``
        (:func:`~.wire.flow_stats_entries`, :func:`~.wire.flow_desc_entries`): those of a
        shape the plan writes read from the wire, any other by os-ken's ``parse``."""
        (flags,) = struct.unpack_from("!H", frame, 10)
        body: list[Any] = []
        for table, prio, cookie, nbytes, packets, match, action, off, ins in entries:
            if match is None:
                body.append(parse(frame, off))
            elif action is not None:
                body.append(WireRecord(table, prio, cookie, match, (action,), nbytes, packets))
            else:
                # instructions of another shape (the ARP responder's: the same bytes on every
                # edge switch): parsed by os-ken once per distinct bytes, the parse shared
                (length,) = struct.unpack_from("!H", frame, off)
                got = shared_instructions(self.parser, bytes(frame[ins:off + length]))
                body.append(WireRecord(table, prio, cookie, match, got, nbytes, packets))
        return WireFlowStatsReply(xid, flags, body)


class OF13(Dialect):
    """OpenFlow 1.3 with the ONF EXT-230 bundle extension."""

    name = "OpenFlow 1.3"
    version = ofproto_v1_3.OFP_VERSION
    ofp = ofproto_v1_3
    parser = ofproto_v1_3_parser
    capabilities = frozenset({CAP_ATOMIC, CAP_FAILOVER, CAP_ROLES})

    def group_mod(self, command: int, gtype: int, group_id: int,
                  buckets: list[tuple[int, int]], selection: EcmpHash | None) -> Any:
        if selection is not None:
            raise ValueError("OpenFlow 1.3 groups carry no selection method")
        p, o = self.parser, self.ofp
        bs = [p.OFPBucket(weight=w, watch_port=port, watch_group=o.OFPG_ANY,
                          actions=[p.OFPActionOutput(port)]) for port, w in buckets]
        return self._own(p.OFPGroupMod(self.desc, command, gtype, group_id, bs))

    def copy_field(self, src: str, dst: str, n_bits: int) -> Any:
        """Nicira's ``NXAST_REG_MOVE`` (OpenFlow 1.3 has no copy action; Open vSwitch takes
        this one up to OpenFlow 1.4 and refuses it on 1.5, ``OFPBAC_BAD_EXP_TYPE``)."""
        return self.parser.NXActionRegMove(src_field=src, dst_field=dst, n_bits=n_bits)

    def bundle_ctrl(self, bundle_id: int, kind: str) -> Any:
        o = self.ofp
        t = {"open": o.ONF_BCT_OPEN_REQUEST, "commit": o.ONF_BCT_COMMIT_REQUEST,
             "discard": o.ONF_BCT_DISCARD_REQUEST}[kind]
        return self._own(self.parser.ONFBundleCtrlMsg(
            self.desc, bundle_id, t, o.ONF_BF_ATOMIC | o.ONF_BF_ORDERED, []))

    def bundle_add(self, bundle_id: int, inner: Any) -> Any:
        o = self.ofp
        return self._own(self.parser.ONFBundleAddMsg(
            self.desc, bundle_id, o.ONF_BF_ATOMIC | o.ONF_BF_ORDERED, inner, []))

    def bundle_reply(self, msg: Any) -> tuple[int, str] | None:
        if not isinstance(msg, self.parser.ONFBundleCtrlMsg):
            return None
        o = self.ofp
        kind = {o.ONF_BCT_OPEN_REPLY: "open", o.ONF_BCT_COMMIT_REPLY: "commit",
                o.ONF_BCT_DISCARD_REPLY: "discard"}.get(msg.type)
        return None if kind is None else (msg.bundle_id, kind)

    def packet_out(self, port: int, data: bytes) -> Any:
        p, o = self.parser, self.ofp
        return self._own(p.OFPPacketOut(self.desc, buffer_id=o.OFP_NO_BUFFER,
                                        in_port=o.OFPP_CONTROLLER,
                                        actions=[p.OFPActionOutput(port)], data=data))

    def entries_request(self, cookie: int, cookie_mask: int = 0xFFFFFFFFFFFFFFFF) -> Any:
        p, o = self.parser, self.ofp
        return self._own(p.OFPFlowStatsRequest(self.desc, 0, o.OFPTT_ALL, o.OFPP_ANY,
                                               o.OFPG_ANY, cookie, cookie_mask, p.OFPMatch()))

    def entry_counters_request(self, cookie: int) -> Any:
        return self.entries_request(cookie)

    def flow_records(self, body: list[Any]) -> list[Record]:
        return [s if isinstance(s, (FlowRecord, WireRecord)) else
                FlowRecord(s.table_id, s.priority, s.cookie, s.match, tuple(s.instructions),
                           s.byte_count, s.packet_count) for s in body]

    def wire_flow_stats(self, xid: int, frame: bytes) -> WireFlowStatsReply:
        """A flow statistics reply (``OFPMP_FLOW``) read straight from its bytes: each entry
        of a shape the plan writes as a :class:`FlowRecord` with a plan ``Match`` and a
        :class:`~.wire.WireAction` (:func:`~.wire.flow_stats_entries`: a few µs instead of
        os-ken's ~60 µs per entry), any other by os-ken's parser."""
        return self._wire_records(xid, frame, wire.flow_stats_entries(frame, 16, len(frame)),
                                  self.parser.OFPFlowStats.parser)

    def group_records(self, body: list[Any]) -> list[GroupRecord]:
        out = []
        for g in body:
            bs = []
            for b in g.buckets:
                outs = tuple(a.port for a in b.actions
                             if isinstance(a, self.parser.OFPActionOutput))
                bs.append(Bucket(outs, b.watch_port, b.weight, len(outs) != len(b.actions)))
            out.append(GroupRecord(g.group_id, g.type, tuple(bs)))
        return out


class OF15(Dialect):
    """OpenFlow 1.5: native bundles, group properties (Open vSwitch's selection method)."""

    name = "OpenFlow 1.5"
    version = ofproto_v1_5.OFP_VERSION
    ofp = ofproto_v1_5
    parser = ofproto_v1_5_parser
    capabilities = frozenset({CAP_ATOMIC, CAP_FAILOVER, CAP_ROLES, CAP_ECMP_HASH})

    def group_mod(self, command: int, gtype: int, group_id: int,
                  buckets: list[tuple[int, int]], selection: EcmpHash | None) -> Any:
        p, o = self.parser, self.ofp
        bs = []
        for i, (port, w) in enumerate(buckets):
            props = [p.OFPGroupBucketPropWatch(type_=o.OFPGBPT_WATCH_PORT, watch=port)]
            if gtype == o.OFPGT_SELECT:
                props.insert(0, p.OFPGroupBucketPropWeight(type_=o.OFPGBPT_WEIGHT, weight=w))
            bs.append(p.OFPBucket(bucket_id=i, actions=[p.OFPActionOutput(port)],
                                  properties=props))
        props = [] if selection is None else [selection_property(selection)]
        return self._own(p.OFPGroupMod(self.desc, command, gtype, group_id,
                                       o.OFPG_BUCKET_ALL, bs, props))

    def copy_field(self, src: str, dst: str, n_bits: int) -> Any:
        """``OFPAT_COPY_FIELD`` (OpenFlow 1.5.1 §7.2.3.8)."""
        p = self.parser
        return p.OFPActionCopyField(n_bits=n_bits, oxm_ids=[p.OFPOxmId(src), p.OFPOxmId(dst)])

    def bundle_ctrl(self, bundle_id: int, kind: str) -> Any:
        o = self.ofp
        t = {"open": o.OFPBCT_OPEN_REQUEST, "commit": o.OFPBCT_COMMIT_REQUEST,
             "discard": o.OFPBCT_DISCARD_REQUEST}[kind]
        return self._own(self.parser.OFPBundleCtrlMsg(
            self.desc, bundle_id, t, o.OFPBF_ATOMIC | o.OFPBF_ORDERED, []))

    def bundle_add(self, bundle_id: int, inner: Any) -> Any:
        o = self.ofp
        return self._own(self.parser.OFPBundleAddMsg(
            self.desc, bundle_id, o.OFPBF_ATOMIC | o.OFPBF_ORDERED, inner, []))

    def bundle_reply(self, msg: Any) -> tuple[int, str] | None:
        if not isinstance(msg, self.parser.OFPBundleCtrlMsg):
            return None
        o = self.ofp
        kind = {o.OFPBCT_OPEN_REPLY: "open", o.OFPBCT_COMMIT_REPLY: "commit",
                o.OFPBCT_DISCARD_REPLY: "discard"}.get(msg.type)
        return None if kind is None else (msg.bundle_id, kind)

    def packet_out(self, port: int, data: bytes) -> Any:
        p, o = self.parser, self.ofp
        return self._own(p.OFPPacketOut(self.desc, buffer_id=o.OFP_NO_BUFFER,
                                        match=p.OFPMatch(in_port=o.OFPP_CONTROLLER),
                                        actions=[p.OFPActionOutput(port)], data=data))

    def entries_request(self, cookie: int, cookie_mask: int = 0xFFFFFFFFFFFFFFFF) -> Any:
        p, o = self.parser, self.ofp
        return self._own(p.OFPFlowDescStatsRequest(self.desc, 0, o.OFPTT_ALL, o.OFPP_ANY,
                                                   o.OFPG_ANY, cookie, cookie_mask,
                                                   p.OFPMatch()))

    def entry_counters_request(self, cookie: int) -> Any:
        p, o = self.parser, self.ofp
        return self._own(p.OFPFlowStatsRequest(self.desc, 0, o.OFPTT_ALL, o.OFPP_ANY,
                                               o.OFPG_ANY, cookie, 0xFFFFFFFFFFFFFFFF,
                                               p.OFPMatch()))

    def wire_flow_stats(self, xid: int, frame: bytes) -> WireFlowStatsReply:
        """A flow description reply (``OFPMP_FLOW_DESC``, what :meth:`entries_request` asks
        for) read straight from its bytes, as :meth:`OF13.wire_flow_stats` reads 1.3's
        (:func:`~.wire.flow_desc_entries`)."""
        return self._wire_records(xid, frame, wire.flow_desc_entries(frame, 16, len(frame)),
                                  self.parser.OFPFlowDesc.parser)

    def flow_records(self, body: list[Any]) -> list[Record]:
        out: list[Record] = []
        for s in body:
            if isinstance(s, WireRecord):
                out.append(s)
                continue
            # OXS statistics as a dict once (os-ken's OFPStats lookup scans its fields)
            st = dict(getattr(s.stats, "fields", None) or ())
            nbytes, npk = int(st.get("byte_count", 0)), int(st.get("packet_count", 0))
            out.append(FlowRecord(s.table_id, s.priority, getattr(s, "cookie", 0), s.match,
                                  tuple(getattr(s, "instructions", None) or ()), nbytes, npk))
        return out

    def group_records(self, body: list[Any]) -> list[GroupRecord]:
        p, o = self.parser, self.ofp
        out = []
        for g in body:
            bs = []
            for b in g.buckets:
                outs = tuple(a.port for a in b.actions if isinstance(a, p.OFPActionOutput))
                watch, weight = o.OFPP_ANY, 0
                for prop in b.properties:
                    if isinstance(prop, p.OFPGroupBucketPropWatch) and \
                            prop.type == o.OFPGBPT_WATCH_PORT:
                        watch = prop.watch
                    elif isinstance(prop, p.OFPGroupBucketPropWeight):
                        weight = prop.weight
                bs.append(Bucket(outs, watch, weight, len(outs) != len(b.actions)))
            sel, method = None, ""
            for prop in g.properties:
                got = parse_selection_property(prop)
                if got is not None:
                    method, sel = got
            out.append(GroupRecord(g.group_id, g.type, tuple(bs), sel, method))
        return out


# -- Open vSwitch's selection-method group property --------------------------------------------------
def _oxm_header(name: str) -> int:
    o = ofproto_v1_5
    buf = bytearray()
    o.oxm_serialize_header(o.oxm_from_user_header(name), buf, 0)
    return int(struct.unpack("!I", bytes(buf))[0])


_NTR_HEAD = struct.Struct("!HHII4x16sQ")  # type, length, experimenter, exp_type, pad, name, param


class NtrSelectionMethod(ofproto_v1_5_parser.OFPGroupProp):
    """Open vSwitch's ``ntr_group_prop_selection_method`` (an OpenFlow 1.5 experimenter group
    property), byte-exact.

    Layout (OVS ``include/openflow/netronome-ext.h``): type ``OFPGPT_EXPERIMENTER``, length (without
    the trailing padding), experimenter ``NTR_VENDOR_ID``, exp_type ``NTRT_SELECTION_METHOD``,
    4 pad bytes, the method name in 16 bytes, the 64-bit ``selection_method_param``, then one OXM
    TLV per hashed field whose *value is the field's mask* (all ones: the whole field is hashed;
    OVS ``oxm_put_field_array``), padded to 8 bytes. os-ken's generic experimenter property keeps
    32-bit words only and OXM TLVs of 2-byte fields are not word-sized, so this class replaces it
    for parsing and building.

    Attributes: ``method`` (str), ``param`` (int), ``fields`` (OXM field names, in order),
    ``experimenter``/``exp_type`` (for a property that is not a selection method: ``raw`` holds
    its bytes after the header).
    """

    def __init__(self, type_: int = ofproto_v1_5.OFPGPT_EXPERIMENTER, length: int | None = None,
                 experimenter: int = NTR_VENDOR_ID, exp_type: int = NTRT_SELECTION_METHOD,
                 method: str = SELECTION_HASH, param: int = 0, fields: tuple[str, ...] = (),
                 raw: bytes = b"") -> None:
        super().__init__(type_, length)
        self.experimenter, self.exp_type = experimenter, exp_type
        self.method, self.param, self.fields, self.raw = method, param, tuple(fields), raw

    @classmethod
    def parser(cls, buf: bytes) -> NtrSelectionMethod:
        type_, length, exp, exp_type = struct.unpack_from("!HHII", buf, 0)
        if exp != NTR_VENDOR_ID or exp_type != NTRT_SELECTION_METHOD or length < _NTR_HEAD.size:
            return cls(type_, length, exp, exp_type, "", 0, (), bytes(buf[12:length]))
        _, _, _, _, name, param = _NTR_HEAD.unpack_from(buf, 0)
        fields: list[str] = []
        off = _NTR_HEAD.size
        o = ofproto_v1_5
        while off + 4 <= length:
            (head,) = struct.unpack_from("!I", buf, off)
            n = head & 0xFF
            try:
                fields.append(str(o.oxm_to_user_header(o.oxm_parse_header(
                    struct.pack("!I", head), 0)[0])))
            except Exception:  # noqa: BLE001 - a field os-ken does not know
                fields.append(f"oxm:{head:#010x}")
            off += 4 + n
        return cls(type_, length, exp, exp_type, name.rstrip(b"\0").decode(errors="replace"),
                   param, tuple(fields))

    def serialize(self) -> bytearray:
        body = bytearray()
        for name in self.fields:
            head = _oxm_header(name)
            body += struct.pack("!I", head) + b"\xff" * (head & 0xFF)
        self.length = _NTR_HEAD.size + len(body)
        out = bytearray(_NTR_HEAD.pack(self.type, self.length, self.experimenter, self.exp_type,
                                       self.method.encode()[:16], self.param))
        out += body
        out += b"\0" * (-len(out) % 8)
        return out


ofproto_v1_5_parser.OFPGroupProp._TYPES[ofproto_v1_5.OFPGPT_EXPERIMENTER] = NtrSelectionMethod


def selection_property(h: EcmpHash) -> NtrSelectionMethod:
    """The selection-method property for ``selection_method=hash``, ``fields(...)`` of
    ``h.fields``, ``selection_method_param=h.seed`` (module docstring)."""
    oxms = tuple(o for f in h.fields for o in HASH_OXM[f])
    return NtrSelectionMethod(method=SELECTION_HASH, param=h.seed, fields=oxms)


def parse_selection_property(prop: Any) -> tuple[str, EcmpHash | None] | None:
    """(method name, hash) of a selection-method property; None for any other property. The
    hash is None for a method other than ``hash``, or fields we do not hash."""
    if not isinstance(prop, NtrSelectionMethod) or prop.experimenter != NTR_VENDOR_ID or \
            prop.exp_type != NTRT_SELECTION_METHOD:
        return None
    names: list[str] = []
    for oxm in prop.fields:
        name = _OXM_HASH.get(oxm)
        if name is None:
            return prop.method, None
        if name not in names:
            names.append(name)
    if prop.method != SELECTION_HASH or not names or not 0 <= prop.param < 1 << 32:
        return prop.method, None
    return prop.method, EcmpHash(tuple(names), prop.param)


def _bucket_parser_15(cls: Any, buf: bytes, offset: int) -> Any:
    """os-ken's ``OFPBucket.parser`` (OpenFlow 1.5) with its property bounds fixed.

    os-ken 4.x slices a bucket's properties as ``buf[offset:offset + len]`` with ``offset``
    already past the actions, so it reads into the next bucket and fails (``ValueError``) on
    every group description Open vSwitch sends with more than one bucket; the properties end
    at the bucket's own start + ``len`` (OpenFlow 1.5.1 §7.3.4.2, ``ofp_bucket``).
    """
    msg = cls()
    start = offset
    (msg.len, msg.action_array_len, msg.bucket_id) = struct.unpack_from(
        ofproto_v1_5.OFP_BUCKET_PACK_STR, buf, offset)
    offset += ofproto_v1_5.OFP_BUCKET_SIZE
    action_buf = buf[offset:offset + msg.action_array_len]
    msg.actions = []
    while action_buf:
        action = ofproto_v1_5_parser.OFPAction.parser(action_buf, 0)
        msg.actions.append(action)
        action_buf = action_buf[action.len:]
    offset += msg.action_array_len
    rest = buf[offset:start + msg.len]
    msg.properties = []
    while rest:
        p, rest = ofproto_v1_5_parser.OFPGroupBucketProp.parse(rest)
        msg.properties.append(p)
    return msg


ofproto_v1_5_parser.OFPBucket.parser = classmethod(_bucket_parser_15)


def _copy_field_parser_15(cls: Any, buf: bytes, offset: int) -> Any:
    """os-ken's ``OFPActionCopyField.parser`` (OpenFlow 1.5) with its bounds fixed.

    os-ken 4.x reads the OXM ids from ``buf[offset:offset + len]`` with ``offset`` already past
    the 12-byte head, so it runs into the padding and the next actions and fails
    (``AssertionError``: not two ids) on every entry Open vSwitch reports with a ``move`` over
    OpenFlow 1.5 (the ARP responder, :mod:`.arp`): the whole flow description reply was lost.
    Its constructor also leaves ``len`` at the head's 12 bytes, so the actions after it were
    parsed from the wrong offset.
    The ids are exactly two OXM headers, source then destination, after the head (OpenFlow
    1.5.1 §7.2.3.8, ``ofp_action_copy_field``), then zero padding to 8 bytes.
    """
    o, p = ofproto_v1_5, ofproto_v1_5_parser
    (type_, len_, n_bits, src_offset, dst_offset) = struct.unpack_from(
        o.OFP_ACTION_COPY_FIELD_PACK_STR, buf, offset)
    rest = bytes(buf[offset + o.OFP_ACTION_COPY_FIELD_SIZE:offset + len_])
    oxm_ids = []
    for _ in range(2):
        oxm_id, rest = p.OFPOxmId.parse(rest)
        oxm_ids.append(oxm_id)
    action = cls(n_bits, src_offset, dst_offset, oxm_ids, type_, len_)
    action.len = len_  # the constructor keeps the 12-byte head size: the next action's offset
    return action


ofproto_v1_5_parser.OFPActionCopyField.parser = classmethod(_copy_field_parser_15)

DIALECTS: dict[int, Dialect] = {d.version: d for d in (OF13(), OF15())}
"""Every dialect by wire version."""
