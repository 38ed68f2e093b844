"""A flow-table simulator for os-ken OpenFlow 1.3 and 1.5 messages, and a tracer across a fabric.

Modelled on Faucet's ``clib/fakeoftable.py``: the driver's encoders build messages with no
datapath; :class:`FakeOFTable` applies exactly those objects and answers "which ports does this
packet leave by". :class:`FakeFabric` wires one table per switch through ``Fabric.port_map`` and
follows a packet from a host to every host (or the controller) it can reach.

Semantics follow OpenFlow 1.3.5 where our encoders rely on them:

* ``OFPFC_ADD`` replaces an entry with the same table, priority and match (§6.4);
  ``OFPFC_MODIFY[_STRICT]`` changes instructions of matching entries and never adds one;
  ``OFPFC_DELETE`` removes every entry whose match is at least as specific as the request's
  (an empty match with ``OFPTT_ALL`` empties the switch); ``OFPFC_DELETE_STRICT`` removes the one
  entry with that priority and match.
* A flow whose action names a missing group is refused (:class:`FakeOFError`, as a switch answers
  ``OFPBAC_BAD_OUT_GROUP``); adding an existing group or modifying a missing one is refused;
  deleting a group also deletes the flows that use it (§6.5). A table given ``ports`` refuses
  an output (or bucket) to a port it lacks (``OFPBAC_BAD_OUT_PORT``; a real switch may accept
  it, Open vSwitch does: the simulator is stricter, which is how tests make one switch refuse).
  ``max_flows`` refuses adds beyond that many entries (``OFPFMFC_TABLE_FULL``).
* Cookies: modify/delete with a ``cookie_mask`` touch only entries whose cookie matches
  (§7.3.4.1); :meth:`FakeOFTable.snapshot`/:meth:`~FakeOFTable.restore` give bundles their
  all-or-nothing semantics (:mod:`controller.testing.fakeswitch`).
* OpenFlow 1.5 group mods carry buckets with watch/weight properties and group properties;
  a select group with Open vSwitch's selection method (``hash``, fields, seed) picks its bucket
  by a deterministic hash of those fields and that seed.
* ``lookup``: the highest-priority matching entry of table 0 wins (goto-table is followed); a
  select group yields every bucket whose ``watch_port`` is up, or with ``hash_fields``, exactly one
  bucket chosen by a deterministic hash of those packet fields and ``seed``; a fast-failover
  group (``OFPGT_FF``) yields the first bucket whose ``watch_port`` is up (§5.6.1). A packet is
  never sent back out of its ``in_port`` (plain output to the in-port is dropped, as on OVS).
* Header rewrites: ``OFPAT_SET_FIELD`` and a whole-field copy (Nicira ``NXAST_REG_MOVE``,
  OpenFlow 1.5 ``OFPAT_COPY_FIELD``) are applied in order to the packet dict, and an output to
  ``OFPP_IN_PORT`` sends the packet back out of the port it came in by: the ARP responder
  (:mod:`controller.drivers.openflow.arp`). :meth:`FakeOFTable.execute` returns every output
  with the packet as it leaves; :meth:`FakeFabric.arp` asks a host's edge switch for an address
  and returns the reply the host gets.
* Multipart (statistics) requests are recorded in ``stats_requests`` and otherwise ignored.
* Counters: :meth:`FakeOFTable.forward` (and :meth:`FakeFabric.send` across the fabric) counts
  a packet's bytes and frames on the entry it hits and on its in- and out-ports;
  :meth:`FakeOFTable.port_stats_reply` and :meth:`FakeOFTable.flow_stats_reply` answer with
  the os-ken reply messages a switch would send (OpenFlow 1.3.5 §7.3.5.2, §7.3.5.6). Counters
  of an entry start at zero when it is added (``OFPFC_ADD`` of an existing entry keeps them,
  as Open vSwitch does without ``OFPFF_RESET_COUNTS``).

Packets are dicts with any of: ``eth_type``, ``ipv4_src``, ``ipv4_dst``, ``ip_proto``,
``ip_dscp``, ``l4_src``, ``l4_dst``, ``eth_src``, ``eth_dst`` and the ARP fields ``arp_op``,
``arp_spa``, ``arp_tpa``, ``arp_sha``, ``arp_tha`` (MACs as lower-case strings, IPv4 addresses
dotted; and optionally ``in_port``).

Messages of either version are recognised by class name, so the 1.3 and 1.5 parsers' objects
both apply.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller.drivers.openflow.dialect import Bucket, parse_selection_property
from controller.model.topology import Fabric
from controller.plan.model import EcmpHash

CONTROLLER = "controller"
Output = int | str  # a port number, or CONTROLLER

_L4 = {"tcp_src": (6, "l4_src"), "tcp_dst": (6, "l4_dst"),
       "udp_src": (17, "l4_src"), "udp_dst": (17, "l4_dst")}
_DIRECT = ("eth_type", "ipv4_src", "ipv4_dst", "ip_proto", "ip_dscp", "in_port", "eth_src",
           "eth_dst", "arp_op", "arp_spa", "arp_tpa", "arp_sha", "arp_tha")
#: Actions that rewrite the packet (applied by :meth:`FakeOFTable.execute`, ignored by lookups).
_REWRITES = ("OFPActionSetField", "NXActionRegMove", "OFPActionCopyField")
BROADCAST_MAC = "ff:ff:ff:ff:ff:ff"


class FakeOFError(Exception):
    """A message a real switch would refuse with an OpenFlow error."""


@dataclass
class _Flow:
    table_id: int
    priority: int
    match: dict[str, Any]
    instructions: list[Any]
    cookie: int
    byte_count: int = 0
    packet_count: int = 0

    def outputs(self) -> tuple[list[int], list[int], list[int]]:
        """(ports incl. reserved, group ids, goto tables) named by the apply-actions."""
        ports: list[int] = []
        groups: list[int] = []
        gotos: list[int] = []
        for ins in self.instructions:
            kind = type(ins).__name__
            if kind == "OFPInstructionGotoTable":
                gotos.append(ins.table_id)
            elif kind == "OFPInstructionActions":
                if ins.type != ofp.OFPIT_APPLY_ACTIONS:
                    raise FakeOFError(f"unsupported instruction type {ins.type}")
                for act in ins.actions:
                    akind = type(act).__name__
                    if akind == "OFPActionOutput":
                        ports.append(act.port)
                    elif akind == "OFPActionGroup":
                        groups.append(act.group_id)
                    elif akind in _REWRITES:
                        continue
                    else:
                        raise FakeOFError(f"unsupported action {act!r}")
            else:
                raise FakeOFError(f"unsupported instruction {ins!r}")
        return ports, groups, gotos


@dataclass
class _Group:
    group_id: int
    type_: int
    buckets: list[Bucket]
    selection: EcmpHash | None = None
    raw_buckets: list[Any] = field(default_factory=list)
    properties: list[Any] = field(default_factory=list)


def _buckets(msg: Any) -> list[Bucket]:
    """A group mod's buckets as :class:`Bucket` (1.3: fields; 1.5: properties)."""
    out = []
    for b in msg.buckets:
        outs = tuple(a.port for a in b.actions if type(a).__name__ == "OFPActionOutput")
        other = len(outs) != len(b.actions)
        if hasattr(b, "watch_port"):
            out.append(Bucket(outs, b.watch_port, b.weight, other))
            continue
        watch, weight = ofp.OFPP_ANY, 0
        for prop in b.properties:
            if type(prop).__name__ == "OFPGroupBucketPropWatch" and prop.type == 1:
                watch = prop.watch
            elif type(prop).__name__ == "OFPGroupBucketPropWeight":
                weight = prop.weight
        out.append(Bucket(outs, watch, weight, other))
    return out


def _match_dict(match: parser.OFPMatch) -> dict[str, Any]:
    out = dict(match.items())
    for k, v in out.items():
        if isinstance(v, tuple):
            raise FakeOFError(f"masked match field {k}={v!r} is not simulated")
    return out


def _packet_matches(match: Mapping[str, Any], pkt: Mapping[str, Any]) -> bool:
    for k, v in match.items():
        if k in _L4:
            proto, pkey = _L4[k]
            if pkt.get("ip_proto") != proto or pkt.get(pkey) != v:
                return False
        elif k in _DIRECT:
            if pkt.get(k) != v:
                return False
        else:
            raise FakeOFError(f"match field {k!r} is not simulated")
    return True


#: Field widths (bits) a copy may move between (the ARP responder's fields).
_WIDTHS = {"eth_src": 48, "eth_dst": 48, "arp_sha": 48, "arp_tha": 48, "arp_spa": 32,
           "arp_tpa": 32, "ipv4_src": 32, "ipv4_dst": 32}


def _copy_fields(act: Any) -> tuple[str, str]:
    """(source, destination) packet keys of a whole-field copy action (Nicira reg-move or
    OpenFlow 1.5 copy-field). Raises :class:`FakeOFError` for a partial copy or unequal
    widths."""
    if type(act).__name__ == "NXActionRegMove":
        src, dst, ofs = act.src_field, act.dst_field, (act.src_ofs, act.dst_ofs)
    else:
        src, dst = act.oxm_ids[0].type, act.oxm_ids[1].type
        ofs = (act.src_offset, act.dst_offset)
    src, dst = (f[:-4] if f.endswith("_nxm") else f for f in (src, dst))
    width = _WIDTHS.get(src)
    if width is None or _WIDTHS.get(dst) != width or act.n_bits != width or ofs != (0, 0):
        raise FakeOFError(f"copy {src}->{dst} of {act.n_bits} bits at offsets {ofs} is not "
                          "simulated (whole fields of equal width only)")
    return src, dst


def _covers(general: Mapping[str, Any], specific: Mapping[str, Any]) -> bool:
    """True if every field of ``general`` is in ``specific`` with the same value."""
    return all(k in specific and specific[k] == v for k, v in general.items())


class FakeOFTable:
    """One switch's flow tables and group table, driven by os-ken OpenFlow 1.3 messages.

    Parameters
    ----------
    name
        The switch name (used in error messages).
    hash_fields
        If given, a select group picks exactly one live bucket by hashing these packet fields
        (with ``seed``); if None, a select group yields every live bucket (all ECMP branches).
    seed
        Mixed into the hash so tests can vary the choice deterministically.
    ports
        If given, the switch's ports: outputs to other ports are refused (module docstring).
    max_flows
        If given, adds beyond this many entries are refused (table full).
    """

    def __init__(self, name: str = "switch", hash_fields: Sequence[str] | None = None,
                 seed: int = 0, ports: Iterable[int] | None = None,
                 max_flows: int | None = None) -> None:
        self.name = name
        self.hash_fields = tuple(hash_fields) if hash_fields is not None else None
        self.seed = seed
        self.ports = frozenset(ports) if ports is not None else None
        self.max_flows = max_flows
        self.flows: list[_Flow] = []
        self.groups: dict[int, _Group] = {}
        self.down_ports: set[int] = set()
        self.barriers = 0
        self.packet_outs: list[Any] = []
        self.stats_requests: list[Any] = []
        # port -> [rx_packets, tx_packets, rx_bytes, tx_bytes, rx_dropped, tx_dropped]
        self.port_counters: dict[int, list[int]] = {}

    # -- applying messages ---------------------------------------------------------------------
    def apply(self, msgs: Iterable[Any]) -> None:
        """Apply messages in order. Raises :class:`FakeOFError` on what a switch would refuse."""
        for msg in msgs:
            self.apply_one(msg)

    def apply_one(self, msg: Any) -> None:
        kind = type(msg).__name__
        if kind == "OFPFlowMod":
            self._flow_mod(msg)
        elif kind == "OFPGroupMod":
            self._group_mod(msg)
        elif kind == "OFPBarrierRequest":
            self.barriers += 1
        elif kind == "OFPPacketOut":
            self.packet_outs.append(msg)
        elif kind.endswith("StatsRequest") or kind == "OFPMultipartRequest":
            self.stats_requests.append(msg)
        else:
            raise FakeOFError(f"[{self.name}] unsupported message {kind}")

    def snapshot(self) -> tuple[list[_Flow], dict[int, _Group]]:
        """The flow and group tables (a copy), for :meth:`restore`."""
        return copy.deepcopy(self.flows), copy.deepcopy(self.groups)

    def restore(self, snap: tuple[list[_Flow], dict[int, _Group]]) -> None:
        """Put back what :meth:`snapshot` took (entries' counters included)."""
        self.flows, self.groups = snap

    def _check_port(self, port: int, what: str) -> None:
        if self.ports is not None and port <= ofp.OFPP_MAX and port not in self.ports:
            raise FakeOFError(f"[{self.name}] OFPBAC_BAD_OUT_PORT: {what} outputs to port "
                              f"{port}, which the switch lacks (ports {sorted(self.ports)})")

    def _flow_mod(self, msg: parser.OFPFlowMod) -> None:
        match = _match_dict(msg.match)
        cmd = msg.command
        if cmd == ofp.OFPFC_ADD:
            flow = _Flow(msg.table_id, msg.priority, match, list(msg.instructions), msg.cookie)
            ports, groups, _ = flow.outputs()
            for p in ports:
                self._check_port(p, f"flow prio {msg.priority} {match}")
            if self.max_flows is not None and len(self.flows) >= self.max_flows and \
                    not any(self._same_key(f, flow) for f in self.flows):
                raise FakeOFError(f"[{self.name}] OFPFMFC_TABLE_FULL: {len(self.flows)} entries")
            for g in groups:
                if g not in self.groups:
                    raise FakeOFError(
                        f"[{self.name}] flow prio {msg.priority} {match} points to missing "
                        f"group {g}"
                    )
            old = [f for f in self.flows if self._same_key(f, flow)]
            if old:
                flow.byte_count, flow.packet_count = old[0].byte_count, old[0].packet_count
            self.flows = [f for f in self.flows if not self._same_key(f, flow)]
            self.flows.append(flow)
        elif cmd in (ofp.OFPFC_MODIFY, ofp.OFPFC_MODIFY_STRICT):
            strict = cmd == ofp.OFPFC_MODIFY_STRICT
            probe = _Flow(msg.table_id, msg.priority, match, list(msg.instructions), msg.cookie)
            ports, groups, _ = probe.outputs()
            for p in ports:
                self._check_port(p, f"modify {match}")
            for g in groups:
                if g not in self.groups:
                    raise FakeOFError(f"[{self.name}] modify {match} to missing group {g}")
            for f in self._selected(msg, match, strict):
                f.instructions = list(msg.instructions)
        elif cmd in (ofp.OFPFC_DELETE, ofp.OFPFC_DELETE_STRICT):
            doomed = self._selected(msg, match, cmd == ofp.OFPFC_DELETE_STRICT)
            ids = {id(f) for f in doomed}
            self.flows = [f for f in self.flows if id(f) not in ids]
        else:
            raise FakeOFError(f"[{self.name}] unsupported flow-mod command {cmd}")

    @staticmethod
    def _same_key(a: _Flow, b: _Flow) -> bool:
        return a.table_id == b.table_id and a.priority == b.priority and a.match == b.match

    def _selected(self, msg: parser.OFPFlowMod, match: dict[str, Any], strict: bool) -> list[_Flow]:
        out = []
        for f in self.flows:
            if msg.table_id != ofp.OFPTT_ALL and f.table_id != msg.table_id:
                continue
            if msg.cookie_mask and (f.cookie & msg.cookie_mask) != (msg.cookie & msg.cookie_mask):
                continue
            if strict:
                if f.priority != msg.priority or f.match != match:
                    continue
            elif not _covers(match, f.match):
                continue
            if msg.command in (ofp.OFPFC_DELETE, ofp.OFPFC_DELETE_STRICT):
                ports, groups, _ = f.outputs()
                if msg.out_port != ofp.OFPP_ANY and msg.out_port not in ports:
                    continue
                if msg.out_group != ofp.OFPG_ANY and msg.out_group not in groups:
                    continue
            out.append(f)
        return out

    def _new_group(self, msg: Any) -> _Group:
        bs = _buckets(msg)
        for b in bs:
            for p in b.outputs:
                self._check_port(p, f"group {msg.group_id}")
        sel = None
        for prop in getattr(msg, "properties", None) or ():
            got = parse_selection_property(prop)
            if got is not None:
                sel = got[1]
        return _Group(msg.group_id, msg.type, bs, sel, list(msg.buckets),
                      list(getattr(msg, "properties", None) or ()))

    def _group_mod(self, msg: Any) -> None:
        gid = msg.group_id
        if msg.command == ofp.OFPGC_ADD:
            if gid in self.groups:
                raise FakeOFError(f"[{self.name}] OFPGMFC_GROUP_EXISTS: group {gid}")
            self.groups[gid] = self._new_group(msg)
        elif msg.command == ofp.OFPGC_MODIFY:
            if gid not in self.groups:
                raise FakeOFError(f"[{self.name}] OFPGMFC_UNKNOWN_GROUP: modify of {gid}")
            self.groups[gid] = self._new_group(msg)
        elif msg.command == ofp.OFPGC_DELETE:
            doomed = set(self.groups) if gid == ofp.OFPG_ALL else {gid} & set(self.groups)
            for g in doomed:
                del self.groups[g]
            self.flows = [f for f in self.flows if not set(f.outputs()[1]) & doomed]
        else:
            raise FakeOFError(f"[{self.name}] unsupported group-mod command {msg.command}")

    # -- port state ----------------------------------------------------------------------------
    def set_port_up(self, port: int, up: bool) -> None:
        """Mark ``port`` live or dead (select buckets watching a dead port are skipped)."""
        if up:
            self.down_ports.discard(port)
        else:
            self.down_ports.add(port)

    # -- lookups -------------------------------------------------------------------------------
    def match_flow(self, packet: Mapping[str, Any], table_id: int = 0) -> _Flow | None:
        """The entry of ``table_id`` that ``packet`` hits (highest priority), or None (miss).

        Raises :class:`FakeOFError` if two entries of equal priority both match (ambiguous).
        """
        best: _Flow | None = None
        for f in self.flows:
            if f.table_id != table_id or not _packet_matches(f.match, packet):
                continue
            if best is None or f.priority > best.priority:
                best = f
            elif f.priority == best.priority and f.match != best.match:
                raise FakeOFError(
                    f"[{self.name}] ambiguous: {best.match} and {f.match} at priority "
                    f"{f.priority} both match {dict(packet)}"
                )
        return best

    def lookup(self, packet: Mapping[str, Any]) -> set[Output]:
        """Every port (or ``'controller'``) ``packet`` leaves by; empty set = dropped."""
        out: set[Output] = set()
        table_id: int | None = 0
        in_port = packet.get("in_port")
        back = False  # an output to OFPP_IN_PORT
        seen_tables: set[int] = set()
        while table_id is not None:
            if table_id in seen_tables:
                raise FakeOFError(f"[{self.name}] goto-table loop at table {table_id}")
            seen_tables.add(table_id)
            flow = self.match_flow(packet, table_id)
            if flow is None:
                break
            ports, groups, gotos = flow.outputs()
            for p in ports:
                if p == ofp.OFPP_IN_PORT:
                    back = True
                else:
                    out.add(self._port_name(p))
            for g in groups:
                out |= self._group_outputs(g, packet)
            table_id = gotos[0] if gotos else None
        if in_port is not None:
            out.discard(in_port)
            if back:
                out.add(in_port)
        return out

    def execute(self, packet: Mapping[str, Any]) -> list[tuple[Output, dict[str, Any]]]:
        """Every output of ``packet`` (table 0's entry), each with the packet as it leaves:
        set-field and whole-field copies applied in action order (module docstring). An output
        to ``OFPP_IN_PORT`` leaves by ``packet['in_port']``; a plain output to the in-port is
        dropped, as in :meth:`lookup`.

        Raises
        ------
        FakeOFError
            A goto-table entry (not simulated here), a copy between fields of different widths
            or from a field the packet lacks, or an ``OFPP_IN_PORT`` output without
            ``in_port``.
        """
        flow = self.match_flow(packet)
        if flow is None:
            return []
        pkt = dict(packet)
        in_port = packet.get("in_port")
        out: list[tuple[Output, dict[str, Any]]] = []
        for ins in flow.instructions:
            if type(ins).__name__ != "OFPInstructionActions":
                raise FakeOFError(f"[{self.name}] execute: {type(ins).__name__} not simulated")
            for act in ins.actions:
                kind = type(act).__name__
                if kind == "OFPActionSetField":
                    v = act.value
                    pkt[act.key] = v.lower() if isinstance(v, str) else v
                elif kind in ("NXActionRegMove", "OFPActionCopyField"):
                    src, dst = _copy_fields(act)
                    if src not in pkt:
                        raise FakeOFError(f"[{self.name}] copy from {src}, which the packet "
                                          f"lacks: {dict(packet)}")
                    pkt[dst] = pkt[src]
                elif kind == "OFPActionOutput":
                    if act.port == ofp.OFPP_IN_PORT:
                        if in_port is None:
                            raise FakeOFError(f"[{self.name}] output IN_PORT without in_port")
                        out.append((in_port, dict(pkt)))
                    elif act.port != in_port:
                        out.append((self._port_name(act.port), dict(pkt)))
                elif kind == "OFPActionGroup":
                    out += [(p, dict(pkt)) for p in sorted(
                        self._group_outputs(act.group_id, pkt), key=str) if p != in_port]
                else:
                    raise FakeOFError(f"[{self.name}] unsupported action {act!r}")
        return out

    @staticmethod
    def _port_name(p: int) -> Output:
        if p == ofp.OFPP_CONTROLLER:
            return CONTROLLER
        if p > ofp.OFPP_MAX:
            raise FakeOFError(f"reserved port {p:#x} is not simulated")
        return p

    def _group_outputs(self, gid: int, packet: Mapping[str, Any]) -> set[Output]:
        group = self.groups.get(gid)
        if group is None:
            raise FakeOFError(f"[{self.name}] flow points to missing group {gid}")
        if group.type_ not in (ofp.OFPGT_SELECT, ofp.OFPGT_FF):
            raise FakeOFError(f"[{self.name}] group {gid}: only select and fast-failover groups "
                              "are simulated")
        live = [b for b in group.buckets
                if b.watch_port == ofp.OFPP_ANY or b.watch_port not in self.down_ports]
        if not live:
            return set()
        if group.type_ == ofp.OFPGT_FF:
            live = live[:1]
        elif group.selection is not None:
            sel = group.selection
            key = repr((sel.seed, [packet.get(f) for f in sel.fields])).encode()
            h = int.from_bytes(hashlib.sha256(key).digest()[:8], "big")
            live = [live[h % len(live)]]
        elif self.hash_fields is not None:
            key = repr((self.seed, gid, [packet.get(f) for f in self.hash_fields])).encode()
            h = int.from_bytes(hashlib.sha256(key).digest()[:8], "big")
            live = [live[h % len(live)]]
        out: set[Output] = set()
        for b in live:
            if b.other_actions:
                raise FakeOFError(f"[{self.name}] group {gid}: unsupported bucket action")
            for port in b.outputs:
                out.add(self._port_name(port))
        return out

    # -- counters ------------------------------------------------------------------------------
    def _port(self, port: int) -> list[int]:
        return self.port_counters.setdefault(port, [0, 0, 0, 0, 0, 0])

    def forward(self, packet: Mapping[str, Any], nbytes: int, npackets: int = 1) -> set[Output]:
        """:meth:`lookup` that also counts ``nbytes`` bytes in ``npackets`` frames on the
        entry hit, the in-port's rx and every output port's tx (a miss counts as an rx drop)."""
        in_port = packet.get("in_port")
        if in_port is not None:
            c = self._port(in_port)
            c[0] += npackets
            c[2] += nbytes
        flow = self.match_flow(packet)
        if flow is None:
            if in_port is not None:
                self._port(in_port)[4] += npackets
            return set()
        flow.byte_count += nbytes
        flow.packet_count += npackets
        outs = self.lookup(packet)
        for out in outs:
            if isinstance(out, int):
                c = self._port(out)
                c[1] += npackets
                c[3] += nbytes
        return outs

    def port_stats_reply(self, datapath: Any = None) -> parser.OFPPortStatsReply:
        """The port-statistics reply for every port that counted something."""
        body = [parser.OFPPortStats(p, c[0], c[1], c[2], c[3], c[4], c[5], 0, 0, 0, 0, 0, 0, 0, 0)
                for p, c in sorted(self.port_counters.items())]
        return parser.OFPPortStatsReply(datapath, body=body, flags=0)

    def flow_stats_reply(self, datapath: Any = None) -> parser.OFPFlowStatsReply:
        """The flow-statistics reply for every entry (matches rebuilt as ``OFPMatch``)."""
        body = [parser.OFPFlowStats(table_id=f.table_id, duration_sec=0, duration_nsec=0,
                                    priority=f.priority, idle_timeout=0, hard_timeout=0, flags=0,
                                    cookie=f.cookie, packet_count=f.packet_count,
                                    byte_count=f.byte_count, match=parser.OFPMatch(**f.match),
                                    instructions=f.instructions)
                for f in self.flows]
        return parser.OFPFlowStatsReply(datapath, body=body, flags=0)

    def dump(self, resolve_groups: bool = False) -> list[str]:
        """Flow entries as sorted text lines (for failure messages and golden files); with
        ``resolve_groups`` a group is shown by its type and buckets' ports, not its id (ids are
        a driver's choice)."""
        lines = []
        for f in sorted(self.flows, key=lambda f: (f.table_id, -f.priority, sorted(f.match.items(),
                                                                                   key=str))):
            ports, groups, _ = f.outputs()

            def grp(g: int) -> str:
                if not resolve_groups or g not in self.groups:
                    return f"group:{g}"
                gr = self.groups[g]
                kind = "ff" if gr.type_ == ofp.OFPGT_FF else "select"
                return f"{kind}({','.join(str(p) for b in gr.buckets for p in b.outputs)})"
            acts = [f"output:{p}" for p in ports] + [grp(g) for g in groups] or ["drop"]
            m = ",".join(f"{k}={v}" for k, v in sorted(f.match.items()))
            lines.append(f"table={f.table_id} priority={f.priority} {m} -> {','.join(acts)}")
        return lines


# -- a whole fabric ----------------------------------------------------------------------------
Path = tuple[str, ...]  # node names from the source host to a host or 'controller'


class TraceError(AssertionError):
    """A forwarding problem found by :meth:`FakeFabric.trace`. ``path`` is the path so far."""

    def __init__(self, message: str, path: Path):
        super().__init__(f"{message}: {' -> '.join(path)}")
        self.path = path


class BlackHole(TraceError):
    """A packet dropped inside the fabric (table miss, dead port, unwired port)."""


class ForwardingLoop(TraceError):
    """A packet that comes back to a switch it already crossed."""


class Misdelivery(TraceError):
    """An IPv4 packet delivered to a host that does not own its ``ipv4_dst``."""


@dataclass
class TraceResult:
    """Everything one packet can do: ``paths`` that end at a host or ``'controller'``, and the
    problems met (each a :class:`TraceError` carrying its partial path)."""

    paths: list[Path] = field(default_factory=list)
    black_holes: list[BlackHole] = field(default_factory=list)
    loops: list[ForwardingLoop] = field(default_factory=list)
    misdelivered: list[Misdelivery] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.black_holes or self.loops or self.misdelivered)

    @property
    def problems(self) -> list[TraceError]:
        return [*self.loops, *self.black_holes, *self.misdelivered]


class FakeFabric:
    """One :class:`FakeOFTable` per switch, wired by ``fabric.port_map``.

    ``tables`` maps switch names to tables. :meth:`set_link` takes a link down or up: both ends'
    ports go dead (select groups skip them) and packets sent onto the link are lost.
    """

    def __init__(self, fabric: Fabric, tables: Mapping[str, FakeOFTable]) -> None:
        missing = set(fabric.switch_by_name) - set(tables)
        if missing:
            raise ValueError(f"no table for switch(es) {', '.join(sorted(missing))}")
        self.fabric = fabric
        self.tables = dict(tables)
        self.down_links: set[frozenset[str]] = set()
        for node, port in fabric.port_map:  # a switch reports every port, idle ones at zero
            if node in self.tables:
                self.tables[node]._port(port)

    @classmethod
    def empty(cls, fabric: Fabric, hash_fields: Sequence[str] | None = None,
              seed: int = 0) -> FakeFabric:
        """A fabric of empty tables (one per switch)."""
        return cls(fabric, {s.name: FakeOFTable(s.name, hash_fields, seed)
                            for s in fabric.switches})

    def set_link(self, u: str, v: str, up: bool) -> None:
        """Take the link ``u``–``v`` down (``up=False``) or back up. Raises KeyError if none."""
        link = self.fabric.link_between(u, v)
        key = frozenset((u, v))
        if up:
            self.down_links.discard(key)
        else:
            self.down_links.add(key)
        for node in (u, v):
            if node in self.tables:
                self.tables[node].set_port_up(link.port_of(node), up)

    def send(self, src_host: str, packet: Mapping[str, Any], nbytes: int,
             npackets: int = 1) -> Path:
        """Carry ``nbytes`` in ``npackets`` frames of ``packet`` from ``src_host`` along the
        one path it takes, counting on every switch (:meth:`FakeOFTable.forward`). Returns the
        path (ending at a host, or where the traffic was dropped).

        Raises
        ------
        TraceError
            The packet would take several paths (a select group without ``hash_fields``) or
            loops.
        """
        host = self.fabric.host_by_name[src_host]
        path: Path = (src_host, host.leaf)
        switch, in_port = host.leaf, host.port
        while True:
            outs = self.tables[switch].forward({**packet, "in_port": in_port}, nbytes, npackets)
            if not outs:
                return path
            if len(outs) > 1:
                raise TraceError(f"{switch} sends it out of {sorted(outs, key=str)}: give the "
                                 "tables hash_fields to pick one", path)
            (out,) = outs
            peer = self.fabric.port_map.get((switch, out)) if isinstance(out, int) else None
            if peer is None or frozenset((switch, peer[0])) in self.down_links:
                return path
            node, in_port = peer
            path = (*path, node)
            if self.fabric.is_host(node):
                return path
            if node in path[:-1]:
                raise ForwardingLoop(f"loop at {node}", path)
            switch = node

    def arp(self, src_host: str, target_ip: str) -> dict[str, Any] | None:
        """The reply ``src_host`` gets to the ARP request it broadcasts for ``target_ip``, as
        its edge switch sends it back (a packet dict, no ``in_port``), or None when the switch
        drops the request.

        Raises
        ------
        TraceError
            The request leaves by a port other than the host's, or to the controller (a
            switch must answer it itself, and nothing is flooded).
        """
        host = self.fabric.host_by_name[src_host]
        request = {"eth_type": 0x0806, "eth_src": host.mac, "eth_dst": BROADCAST_MAC,
                   "arp_op": 1, "arp_sha": host.mac, "arp_spa": host.ipv4,
                   "arp_tha": "00:00:00:00:00:00", "arp_tpa": target_ip, "in_port": host.port}
        outs = self.tables[host.leaf].execute(request)
        if not outs:
            return None
        if [p for p, _ in outs] != [host.port]:
            raise TraceError(f"{host.leaf} sends {src_host}'s ARP request for {target_ip} out "
                             f"of {[p for p, _ in outs]}, not back to port {host.port}",
                             (src_host, host.leaf))
        reply = dict(outs[0][1])
        reply.pop("in_port", None)
        return reply

    def trace_all(self, src_host: str, packet: Mapping[str, Any]) -> TraceResult:
        """Follow ``packet`` sent by ``src_host`` along every possible output. Never raises for
        forwarding problems; they are collected in the result."""
        host = self.fabric.host_by_name[src_host]
        result = TraceResult()
        self._walk(host.leaf, host.port, dict(packet), (src_host, host.leaf), result)
        return result

    def trace(self, src_host: str, packet: Mapping[str, Any]) -> list[Path]:
        """Every path ``packet`` from ``src_host`` can take (sorted).

        Raises
        ------
        TraceError
            The first loop, black hole or misdelivery found (:class:`ForwardingLoop`,
            :class:`BlackHole`, :class:`Misdelivery`).
        """
        result = self.trace_all(src_host, packet)
        if result.problems:
            raise result.problems[0]
        return sorted(result.paths)

    def _walk(self, switch: str, in_port: int, packet: dict[str, Any], path: Path,
              result: TraceResult) -> None:
        if switch in path[:-1]:
            result.loops.append(ForwardingLoop(f"loop at {switch}", path))
            return
        pkt = {**packet, "in_port": in_port}
        outs = self.tables[switch].lookup(pkt)
        if not outs:
            result.black_holes.append(BlackHole(f"dropped at {switch} (in_port {in_port})", path))
            return
        for out in sorted(outs, key=str):
            if out == CONTROLLER:
                result.paths.append((*path, CONTROLLER))
                continue
            assert isinstance(out, int)
            peer = self.fabric.port_map.get((switch, out))
            if peer is None:
                result.black_holes.append(BlackHole(f"{switch} port {out} is not wired", path))
                continue
            node, node_port = peer
            if frozenset((switch, node)) in self.down_links:
                result.black_holes.append(
                    BlackHole(f"{switch} port {out} -> {node} is down", (*path, node))
                )
                continue
            if self.fabric.is_host(node):
                dst = packet.get("ipv4_dst")
                if dst is not None and self.fabric.host_by_name[node].ipv4 != dst:
                    result.misdelivered.append(
                        Misdelivery(f"{dst} delivered to {node}", (*path, node))
                    )
                else:
                    result.paths.append((*path, node))
                continue
            self._walk(node, node_port, packet, (*path, node), result)
