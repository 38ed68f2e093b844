"""A fake OpenFlow switch connection for :class:`controller.drivers.openflow.driver.
OpenFlowDriver`: the driver's real messages land in a :class:`~.fakeoftable.FakeOFTable`, and the
switch answers as Open vSwitch does (OpenFlow 1.3 with the ONF bundle extension, or 1.5):

* **bundles**: open/add/commit; the commit applies every message in order on a snapshot of the
  tables; the first refused message restores the snapshot, is answered with its own error (its
  xid), and the commit fails with ``OFPBFC_MSG_FAILED`` — Open vSwitch's ``do_bundle_commit``.
* **read-back**: flow statistics (1.3) / descriptions (1.5) filtered by cookie and mask, group
  descriptions, port/queue/entry counters, split into multipart parts of ``part_size`` entries
  (``OFPMPF_REPLY_MORE`` on all but the last).
* **roles**: a :class:`RoleArbiter` shared by the connections of one switch keeps the largest
  ``generation_id`` seen and refuses a MASTER/SLAVE request with an older one
  (``OFPRRFC_STALE``, OpenFlow 1.3.5 §6.3.6, with the spec's wrap-around comparison); a
  connection in role SLAVE gets ``OFPBRC_IS_SLAVE`` for any write.
* refused messages outside bundles get their error too; barriers are answered.

Test helpers: :meth:`FakeSwitch.port_status` and :meth:`FakeSwitch.packet_in` send what a switch
would; :attr:`FakeSwitch.received` records every message the driver sent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from controller.drivers.openflow.dialect import DIALECTS, Dialect, selection_property
from controller.testing.fakeoftable import FakeFabric, FakeOFError, FakeOFTable, _Flow


@dataclass
class RoleArbiter:
    """What a switch remembers across its controller connections about roles."""

    generation_id: int | None = None
    master: Any = None
    roles: dict[int, str] = field(default_factory=dict)  # id(connection) -> role

    def request(self, conn: Any, role: str, generation_id: int) -> str | None:
        """The role granted, or None when ``generation_id`` is stale."""
        if role in ("master", "backup"):
            if self.generation_id is not None:
                diff = (generation_id - self.generation_id) & 0xFFFFFFFFFFFFFFFF
                if diff >= 1 << 63:  # (int64)(generation_id - cached) < 0
                    return None
            self.generation_id = generation_id
        if role == "master":
            if self.master is not None and self.master is not conn:
                self.roles[id(self.master)] = "backup"
            self.master = conn
        elif self.master is conn:
            self.master = None
        self.roles[id(conn)] = role
        return role


_ERR_PREFIX = {"OFPBRC_": "OFPET_BAD_REQUEST", "OFPBAC_": "OFPET_BAD_ACTION",
               "OFPBMC_": "OFPET_BAD_MATCH", "OFPFMFC_": "OFPET_FLOW_MOD_FAILED",
               "OFPGMFC_": "OFPET_GROUP_MOD_FAILED", "OFPBFC_": "OFPET_BUNDLE_FAILED",
               "OFPRRFC_": "OFPET_ROLE_REQUEST_FAILED"}


class FakeSwitch:
    """One fake switch connection (a :class:`~controller.drivers.openflow.driver.Connection`).

    Parameters
    ----------
    driver
        The driver to report to (``connection_up``/``connection_down``/``message``).
    dpid : int
    table : FakeOFTable
        The switch's tables (shared by reconnects: the switch keeps its state).
    version : int
        OpenFlow wire version (4: 1.3, 6: 1.5).
    arbiter : RoleArbiter, optional
        Shared by the connections of one switch (a new one when None).
    part_size : int
        Entries per multipart reply part.
    table_features : bool
        Answer table features requests (table 0's ``max_entries``: the table's ``max_flows``,
        else 1,000,000 as Open vSwitch reports); False: refuse them (``OFPBRC_BAD_STAT``).
    """

    wire_only = False  # applies the driver's message objects

    def __init__(self, driver: Any, dpid: int, table: FakeOFTable, version: int = 4,
                 address: str = "", arbiter: RoleArbiter | None = None,
                 part_size: int = 50, journal: list[tuple[str, list[Any]]] | None = None,
                 name: str = "", table_features: bool = True) -> None:
        self.driver = driver
        self.dpid = dpid
        self.table = table
        self.version = version
        self.dialect: Dialect = DIALECTS[version]
        self.address = address or f"fake:{dpid:#x}"
        self.arbiter = arbiter or RoleArbiter()
        self.part_size = part_size
        self.table_features = table_features
        self.received: list[Any] = []
        self.journal = journal  # committed bundles of every switch, in commit order
        self.name = name or self.address
        self._bundles: dict[int, list[tuple[int, Any]]] = {}
        self.closed = False
        self.answer = True  # False: swallow requests (a switch that stopped answering)
        #: answers to bundle commits come this late (s; a slow switch); 0: at once
        self.commit_delay_s = 0.0
        #: the next flow-mod of a bundle commit is refused with this error (once); None: none
        self.refuse_next: str | None = None
        #: what queue statistics report: (port, queue id, tx bytes, tx packets, tx errors)
        self.queues: list[tuple[int, int, int, int, int]] = []

    # -- connection ------------------------------------------------------------------------------
    def ports(self) -> frozenset[int] | None:
        return self.table.ports

    def connect(self) -> FakeSwitch:
        self.closed = False
        self.driver.connection_up(self)
        return self

    def disconnect(self) -> None:
        self.closed = True
        self.driver.connection_down(self, "fake switch disconnected")

    def close(self) -> None:
        if not self.closed:
            self.disconnect()

    def send(self, data: bytes, msgs: Sequence[Any]) -> None:
        if self.closed:
            return
        for m in msgs:
            self.received.append(m)
            if self.answer:
                self._handle(m)

    # -- what the driver sent ----------------------------------------------------------------------
    def sent_kinds(self) -> list[str]:
        """Kinds of the messages received, bundle contents unwrapped."""
        out = []
        for m in self.received:
            inner = getattr(m, "message", None)
            out.append(type(inner if inner is not None else m).__name__)
        return out

    def writes(self) -> list[Any]:
        """Flow and group mods received (inside bundles or not)."""
        out = []
        for m in self.received:
            inner = getattr(m, "message", None)
            m = inner if inner is not None else m
            if type(m).__name__ in ("OFPFlowMod", "OFPGroupMod"):
                out.append(m)
        return out

    # -- the switch ------------------------------------------------------------------------------
    def _role(self) -> str:
        return self.arbiter.roles.get(id(self), "equal")

    def _handle(self, m: Any) -> None:
        kind = type(m).__name__
        d = self.dialect
        p, o = d.parser, d.ofp
        if kind in ("OFPFlowMod", "OFPGroupMod"):
            if self._role() == "backup":
                self._error(m.xid, "OFPBRC_IS_SLAVE")
                return
            try:
                self.table.apply_one(m)
            except FakeOFError as exc:
                self._error(m.xid, _err_name(str(exc)))
            return
        if kind in ("ONFBundleCtrlMsg", "OFPBundleCtrlMsg"):
            self._bundle_ctrl(m)
            return
        if kind in ("ONFBundleAddMsg", "OFPBundleAddMsg"):
            if self._role() == "backup":
                self._error(m.xid, "OFPBRC_IS_SLAVE")
                return
            if m.bundle_id not in self._bundles:
                self._error(m.xid, "OFPBFC_BAD_ID")
                return
            self._bundles[m.bundle_id].append((m.xid, m.message))
            return
        if kind == "OFPBarrierRequest":
            self._reply(p.OFPBarrierReply(d.desc), m.xid)
            return
        if kind == "OFPRoleRequest":
            role = d.role_of(m.role)
            got = self.arbiter.request(self, role, m.generation_id)
            if got is None:
                self._error(m.xid, "OFPRRFC_STALE")
                return
            code = {"master": o.OFPCR_ROLE_MASTER, "backup": o.OFPCR_ROLE_SLAVE}.get(
                got, o.OFPCR_ROLE_EQUAL)
            if self.version >= 5:
                rep = p.OFPRoleReply(d.desc, role=code, short_id=0,
                                     generation_id=m.generation_id)
            else:
                rep = p.OFPRoleReply(d.desc, role=code, generation_id=m.generation_id)
            self._reply(rep, m.xid)
            return
        if kind == "OFPPacketOut":
            self.table.packet_outs.append(m)
            return
        if kind in ("OFPFlowStatsRequest", "OFPFlowDescStatsRequest"):
            self._parts(m.xid, kind, self.flow_body(m.cookie, m.cookie_mask, kind))
            return
        if kind == "OFPTableFeaturesStatsRequest":
            if not self.table_features:
                self._error(m.xid, "OFPBRC_BAD_STAT")
                return
            n = self.table.max_flows if self.table.max_flows is not None else 1_000_000
            if self.version >= 5:
                body = [p.OFPTableFeaturesStats(table_id=0, command=0, features=0, name="table0",
                                                metadata_match=0, metadata_write=0,
                                                capabilities=0, max_entries=n, properties=[])]
            else:
                body = [p.OFPTableFeaturesStats(table_id=0, name="table0", metadata_match=0,
                                                metadata_write=0, config=0, max_entries=n,
                                                properties=[])]
            self._parts(m.xid, kind, body)
            return
        if kind == "OFPGroupDescStatsRequest":
            self._parts(m.xid, kind, self.group_body())
            return
        if kind == "OFPPortStatsRequest":
            rep = self.table.port_stats_reply()
            body = rep.body
            if self.version >= 5:
                body = [p.OFPPortStats(port_no=s.port_no, rx_packets=s.rx_packets,
                                       tx_packets=s.tx_packets, rx_bytes=s.rx_bytes,
                                       tx_bytes=s.tx_bytes, rx_dropped=s.rx_dropped,
                                       tx_dropped=s.tx_dropped, rx_errors=0, tx_errors=0,
                                       properties=[]) for s in body]
            self._parts(m.xid, kind, body)
            return
        if kind == "OFPQueueStatsRequest":
            if self.version >= 5:
                body = [p.OFPQueueStats(port_no=q[0], queue_id=q[1], tx_bytes=q[2],
                                        tx_packets=q[3], tx_errors=q[4], duration_sec=0,
                                        duration_nsec=0, properties=[]) for q in self.queues]
            else:
                body = [p.OFPQueueStats(*q, 0, 0) for q in self.queues]
            self._parts(m.xid, kind, body)
            return
        self._error(m.xid, "OFPBRC_BAD_TYPE")

    def flow_body(self, cookie: int, cookie_mask: int,
                  kind: str = "OFPFlowStatsRequest") -> list[Any]:
        """The flow statistics (or descriptions) this switch reports for ``cookie``/mask."""
        if kind == "OFPFlowStatsRequest" and self.version >= 5:
            kind = "OFPFlowDescStatsRequest"
        return [self._flow_body(f, kind) for f in self.table.flows
                if (f.cookie & cookie_mask) == (cookie & cookie_mask)]

    def group_body(self) -> list[Any]:
        """The group descriptions this switch reports."""
        p = self.dialect.parser
        body = []
        for g in sorted(self.table.groups.values(), key=lambda g: g.group_id):
            if self.version >= 5:
                props = [selection_property(g.selection)] if g.selection else []
                body.append(p.OFPGroupDescStats(g.type_, g.group_id, self._buckets(g), props))
            else:
                body.append(p.OFPGroupDescStats(g.type_, g.group_id, self._buckets(g)))
        return body

    def _buckets(self, g: Any) -> list[Any]:
        """A group's buckets as this switch's version reports them."""
        p, o = self.dialect.parser, self.dialect.ofp
        out = []
        for i, b in enumerate(g.buckets):
            acts = [p.OFPActionOutput(port) for port in b.outputs]
            if self.version >= 5:
                props = [p.OFPGroupBucketPropWatch(type_=o.OFPGBPT_WATCH_PORT, watch=b.watch_port)]
                if g.type_ == o.OFPGT_SELECT:
                    props.insert(0, p.OFPGroupBucketPropWeight(type_=o.OFPGBPT_WEIGHT,
                                                               weight=b.weight))
                out.append(p.OFPBucket(bucket_id=i, actions=acts, properties=props))
            else:
                out.append(p.OFPBucket(weight=b.weight, watch_port=b.watch_port,
                                       watch_group=o.OFPG_ANY, actions=acts))
        return out

    def _flow_body(self, f: _Flow, kind: str) -> Any:
        p = self.dialect.parser
        match = p.OFPMatch(**f.match)
        if self.version < 5:
            return p.OFPFlowStats(table_id=f.table_id, duration_sec=0, duration_nsec=0,
                                  priority=f.priority, idle_timeout=0, hard_timeout=0, flags=0,
                                  cookie=f.cookie, packet_count=f.packet_count,
                                  byte_count=f.byte_count, match=match,
                                  instructions=f.instructions)
        stats = p.OFPStats(byte_count=f.byte_count, packet_count=f.packet_count)
        if kind == "OFPFlowDescStatsRequest":
            return p.OFPFlowDesc(table_id=f.table_id, priority=f.priority, idle_timeout=0,
                                 hard_timeout=0, flags=0, importance=0, cookie=f.cookie,
                                 match=match, stats=stats, instructions=f.instructions)
        return p.OFPFlowStats(table_id=f.table_id, reason=0, priority=f.priority, match=match,
                              stats=stats)

    def _parts(self, xid: int, kind: str, body: list[Any]) -> None:
        d = self.dialect
        p, o = d.parser, d.ofp
        reply_cls = {
            "OFPFlowStatsRequest": p.OFPFlowStatsReply,
            "OFPFlowDescStatsRequest": getattr(p, "OFPFlowDescStatsReply", None),
            "OFPGroupDescStatsRequest": p.OFPGroupDescStatsReply,
            "OFPPortStatsRequest": p.OFPPortStatsReply,
            "OFPQueueStatsRequest": p.OFPQueueStatsReply,
            "OFPTableFeaturesStatsRequest": p.OFPTableFeaturesStatsReply,
        }[kind]
        chunks = [body[i:i + self.part_size] for i in range(0, len(body), self.part_size)] or [[]]
        for i, chunk in enumerate(chunks):
            flags = o.OFPMPF_REPLY_MORE if i < len(chunks) - 1 else 0
            self._reply(reply_cls(d.desc, body=chunk, flags=flags), xid)

    def _bundle_ctrl(self, m: Any) -> None:
        d = self.dialect
        p, o = d.parser, d.ofp
        onf = self.version < 5
        t_open = o.ONF_BCT_OPEN_REQUEST if onf else o.OFPBCT_OPEN_REQUEST
        t_commit = o.ONF_BCT_COMMIT_REQUEST if onf else o.OFPBCT_COMMIT_REQUEST
        t_discard = o.ONF_BCT_DISCARD_REQUEST if onf else o.OFPBCT_DISCARD_REQUEST
        cls = p.ONFBundleCtrlMsg if onf else p.OFPBundleCtrlMsg
        bid = m.bundle_id
        if self._role() == "backup":
            # Open vSwitch: handle_bundle_control() starts with reject_slave_controller()
            self._error(m.xid, "OFPBRC_IS_SLAVE")
            return
        if m.type == t_open:
            if bid in self._bundles:
                self._error(m.xid, "OFPBFC_BUNDLE_EXIST")
                return
            self._bundles[bid] = []
            self._reply(cls(d.desc, bid, m.type + 1, m.flags, []), m.xid)
        elif m.type == t_discard:
            self._bundles.pop(bid, None)
            self._reply(cls(d.desc, bid, m.type + 1, m.flags, []), m.xid)
        elif m.type == t_commit:
            msgs = self._bundles.pop(bid, None)
            if msgs is None:
                self._error(m.xid, "OFPBFC_BAD_ID")
                return
            snap = self.table.snapshot()
            for xid, inner in msgs:
                try:
                    if self.refuse_next and type(inner).__name__ == "OFPFlowMod":
                        why, self.refuse_next = self.refuse_next, None
                        raise FakeOFError(why)
                    self.table.apply_one(inner)
                except FakeOFError as exc:
                    self.table.restore(snap)
                    self._error(xid, _err_name(str(exc)))
                    self._error(m.xid, "OFPBFC_MSG_FAILED")
                    return
            if self.journal is not None:
                self.journal.append((self.name, [inner for _, inner in msgs]))
            reply = cls(d.desc, bid, m.type + 1, m.flags, [])
            if self.commit_delay_s > 0:
                import asyncio

                asyncio.get_running_loop().call_later(self.commit_delay_s, self._reply, reply,
                                                      m.xid)
            else:
                self._reply(reply, m.xid)
        else:
            self._error(m.xid, "OFPBFC_BAD_TYPE")

    def _error(self, xid: int, name: str) -> None:
        d = self.dialect
        o = d.ofp
        if name.startswith("OFPBFC_") and self.version < 5:
            # OpenFlow 1.3 carries bundle errors as ONF experimenter errors (EXT-230)
            from os_ken.ofproto import ofproto_common

            exp = getattr(o, "ONFERR_ET_" + name[len("OFPBFC_"):].replace("MSG_FAILED", "FAILED"),
                          o.ONFERR_ET_UNKNOWN)
            self._reply(d.parser.OFPErrorMsg(d.desc, type_=o.OFPET_EXPERIMENTER, code=0,
                                             data=b"", exp_type=exp,
                                             experimenter=ofproto_common.ONF_EXPERIMENTER_ID),
                        xid)
            return
        prefix = next((k for k in _ERR_PREFIX if name.startswith(k)), "OFPBRC_")
        etype = getattr(o, _ERR_PREFIX[prefix])
        code = getattr(o, name, o.OFPBRC_EPERM)
        self._reply(d.parser.OFPErrorMsg(d.desc, type_=etype, code=code, data=b""), xid)

    def _reply(self, msg: Any, xid: int) -> None:
        msg.xid = xid
        self.driver.message(self, msg)

    # -- what a switch sends on its own ------------------------------------------------------------
    def port_status(self, port: int, up: bool) -> None:
        """Report ``port`` up or down (the table's port liveness follows)."""
        d = self.dialect
        o = d.ofp
        self.table.set_port_up(port, up)
        desc = SimpleNamespace(port_no=port, state=0 if up else o.OFPPS_LINK_DOWN, config=0)
        self.driver.message(self, d.parser.OFPPortStatus(d.desc, o.OFPPR_MODIFY, desc))

    def packet_in(self, port: int, data: bytes) -> None:
        d = self.dialect
        p, o = d.parser, d.ofp
        msg = p.OFPPacketIn(d.desc, buffer_id=o.OFP_NO_BUFFER, total_len=len(data),
                            reason=o.OFPR_ACTION, table_id=0, cookie=0,
                            match=p.OFPMatch(in_port=port), data=data)
        self.driver.message(self, msg)


def _err_name(text: str) -> str:
    m = re.search(r"OFP[A-Z]+_[A-Z_]+", text)
    return m.group(0) if m else "OFPBRC_EPERM"


def fake_switches(driver: Any, fabric: FakeFabric, version: int = 4,
                  only: Iterable[str] | None = None,
                  arbiters: Mapping[str, RoleArbiter] | None = None) -> dict[str, FakeSwitch]:
    """A :class:`FakeSwitch` on each table of ``fabric`` (or those named in ``only``), not yet
    connected."""
    names = set(only) if only is not None else set(fabric.tables)
    out = {}
    for sw in fabric.fabric.switches:
        if sw.name in names:
            out[sw.name] = FakeSwitch(driver, sw.dpid, fabric.tables[sw.name], version,
                                      arbiter=(arbiters or {}).get(sw.name))
    return out
