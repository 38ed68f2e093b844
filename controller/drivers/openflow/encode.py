"""Plan intents ↔ OpenFlow messages. Pure, in the Faucet style: nothing here talks to a switch.

Messages are built for a :class:`~.dialect.Dialect` (OpenFlow 1.3 or 1.5) with no connection; the
driver wraps them in a bundle and sends them; tests apply the same objects to
:class:`controller.testing.fakeoftable.FakeOFTable`.

* **Ownership.** Every entry aifabric installs carries :data:`COOKIE`; modifies and deletes are
  strict (``OFPFC_MODIFY_STRICT`` / ``OFPFC_DELETE_STRICT``, OpenFlow 1.3.5 §6.4) and masked to
  that cookie, and read-back asks for that cookie only, so entries of other applications (other
  cookies) are never touched, whatever their table or priority. Groups are ours when their id
  lies in ``[GROUP_ID_BASE, GROUP_ID_BASE + GROUP_ID_COUNT)``; others are never touched.
* **Group ids.** Each distinct :class:`~controller.plan.model.NextHopSet` of a switch gets the
  lowest free id of the range (:class:`GroupIds`); the allocation is the driver's, rebuilt from
  what the switch reports (:func:`decode_state`). ECMP sets are ``OFPGT_SELECT`` groups with one
  bucket per port, weight 1, ``watch_port`` = that port (a switch skips buckets whose port is
  down, §5.6.1). A set with a hash (the plan gives every switch's: by default the 5-tuple with
  a seed of its own, :mod:`controller.plan.hashing`) carries it as Open vSwitch's
  selection-method property (:mod:`.dialect`: ``selection_method=hash``, the fields, the seed as
  ``selection_method_param``), which exists on OpenFlow 1.5 only; a set without one is a plain
  select group, hashed the switch's default way (Open vSwitch: ``dp_hash``, a symmetric L3/L4
  hash without UDP ports, basis 0). The plan of a switch on an OpenFlow 1.3 session carries no
  hash (the runtime degrades it, with a warning); a set that still asks for one there is refused
  with the reason, never installed with the switch's default hash in silence. Failover sets
  are ``OFPGT_FF`` with buckets in preference order.
  A set's value never changes: a different set is a different group.
* **Order** within one change (a bundle with ATOMIC|ORDERED): add groups, add flows, modify
  flows, delete flows, delete groups no entry uses any more — no entry ever points at a missing
  group, even without a bundle.

* **ARP replies** (:class:`~controller.plan.model.ArpReply`) are the switch's own ARP responder:
  set-field and field-copy actions, then ``output IN_PORT`` (:mod:`.arp`, which also decodes
  every form Open vSwitch reports them in).

Statistics: :func:`decode_match` turns a reply's match back into a plan :class:`Match`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.drivers.openflow import wire
from controller.drivers.openflow.arp import decode_reply, reply_actions
from controller.drivers.openflow.dialect import (
    CAP_ECMP_HASH,
    DIALECTS,
    OF13,
    UNDECODED,
    Dialect,
    GroupRecord,
    Record,
    SharedInstructions,
)
from controller.plan.model import (
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    IP_PROTO_TCP,
    IP_PROTO_UDP,
    Action,
    FlowIntent,
    Match,
    NextHopSet,
    SwitchChanges,
    SwitchPlan,
)

#: The cookie on every flow entry aifabric installs ("a1fab" + version nibble).
COOKIE = 0x00A1FAB000000001
COOKIE_MASK = 0xFFFFFFFFFFFFFFFF
#: aifabric's group ids: ``GROUP_ID_BASE`` .. ``GROUP_ID_BASE + GROUP_ID_COUNT - 1`` (below
#: OpenFlow's reserved ids from 0xFFFFFF00, OpenFlow 1.3.5 §7.3.4.2).
GROUP_ID_BASE = 0xA1F0_0000
GROUP_ID_COUNT = 1 << 20
DEFAULT_DIALECT: Dialect = DIALECTS[OF13.version]
#: flow-mod commands and bundle flags, equal in OpenFlow 1.3 and 1.5 (§7.3.4.1, §7.3.9)
OFPFC_ADD, OFPFC_MODIFY_STRICT, OFPFC_DELETE_STRICT = 0, 2, 4
BUNDLE_FLAGS = 3  # ATOMIC | ORDERED

OFMsg = Any  # an os-ken parser MsgBase


class EncodeError(ValueError):
    """A plan object this switch cannot hold as asked (a missing prerequisite, a value out of a
    field's width, an ECMP hash a switch on OpenFlow 1.3 cannot honour, no group id left)."""


def is_our_group(group_id: int) -> bool:
    return GROUP_ID_BASE <= group_id < GROUP_ID_BASE + GROUP_ID_COUNT


# -- matches and actions -------------------------------------------------------------------------
def check_match(match: Match) -> dict[str, int | str]:
    """The OXM fields of ``match`` by os-ken name, checked (see :func:`encode_match`).

    Raises
    ------
    EncodeError
        A field whose prerequisite is missing, or a value out of its field's width.
    """
    f: dict[str, int | str] = {}
    ip_fields = (match.ipv4_src, match.ipv4_dst, match.ip_proto, match.ip_dscp)
    if any(v is not None for v in ip_fields) and match.eth_type != ETH_TYPE_IPV4:
        raise EncodeError(f"{match}: IPv4 fields need eth_type 0x0800, got {match.eth_type!r}")
    if (match.arp_op is not None or match.arp_tpa is not None) and \
            match.eth_type != ETH_TYPE_ARP:
        raise EncodeError(f"{match}: ARP fields need eth_type 0x0806, got {match.eth_type!r}")
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
    if match.arp_op is not None:
        _width(match, "arp_op", match.arp_op, 16)
        f["arp_op"] = match.arp_op
    if match.arp_tpa is not None:
        f["arp_tpa"] = match.arp_tpa
    return f


def encode_match(match: Match, dialect: Dialect = DEFAULT_DIALECT) -> Any:
    """An ``OFPMatch`` for ``match``.

    IPv4 fields and ``ip_dscp``/``ip_proto`` need ``eth_type`` 0x0800; ``l4_src``/``l4_dst`` become
    ``tcp_*`` or ``udp_*`` according to ``ip_proto``; ``arp_op``/``arp_tpa`` need ``eth_type``
    0x0806 (OpenFlow 1.3.5 §7.2.3.6, prerequisites).

    Raises
    ------
    EncodeError
        A field whose prerequisite is missing, or a value out of its field's width.
    """
    return dialect.parser.OFPMatch(**check_match(match))


def check_action(action: Action, group_id: int | None = None,
                 dialect: Dialect = DEFAULT_DIALECT) -> None:
    """Raise :class:`EncodeError` when ``action`` cannot be encoded (see
    :func:`encode_instructions`)."""
    if action.kind == "output" and not 1 <= action.port <= dialect.ofp.OFPP_MAX:
        raise EncodeError(f"output port {action.port} outside 1..{dialect.ofp.OFPP_MAX:#x}")
    if action.kind == "next_hops" and group_id is None:
        raise EncodeError(f"{action}: no group id for its next-hop set")
    if action.arp is not None:
        reply_actions(action.arp, dialect)


def _width(match: Match, name: str, value: int, bits: int) -> None:
    if not 0 <= value < (1 << bits):
        raise EncodeError(f"{match}: {name}={value} does not fit in {bits} bits")


def encode_instructions(action: Action, group_id: int | None = None,
                        dialect: Dialect = DEFAULT_DIALECT) -> list[Any]:
    """Apply-actions for ``action`` (``group_id``: the id of its next-hop set's group);
    ``drop`` is an empty instruction list; ``arp_reply``: :func:`.arp.reply_actions`."""
    p, o = dialect.parser, dialect.ofp
    if action.kind == "output":
        if not 1 <= action.port <= o.OFPP_MAX:
            raise EncodeError(f"output port {action.port} outside 1..{o.OFPP_MAX:#x}")
        actions = [p.OFPActionOutput(action.port)]
    elif action.kind == "next_hops":
        if group_id is None:
            raise EncodeError(f"{action}: no group id for its next-hop set")
        actions = [p.OFPActionGroup(group_id)]
    elif action.kind == "controller":
        actions = [p.OFPActionOutput(o.OFPP_CONTROLLER, o.OFPCML_NO_BUFFER)]
    elif action.kind == "drop":
        return []
    elif action.arp is not None:
        actions = reply_actions(action.arp, dialect)
    else:  # pragma: no cover - Action.kind is a Literal
        raise EncodeError(f"unknown action kind {action.kind!r}")
    return [p.OFPInstructionActions(o.OFPIT_APPLY_ACTIONS, actions)]


# -- flows ---------------------------------------------------------------------------------------
def flow_add(flow: FlowIntent, group_id: int | None = None,
             dialect: Dialect = DEFAULT_DIALECT) -> OFMsg:
    """``OFPFC_ADD`` for ``flow`` with :data:`COOKIE` (replaces an entry with the same table,
    priority and match, §6.4)."""
    return dialect.flow_mod(dialect.ofp.OFPFC_ADD, flow.table, flow.priority,
                            encode_match(flow.match, dialect),
                            encode_instructions(flow.action, group_id, dialect), COOKIE, 0)


def flow_modify(flow: FlowIntent, group_id: int | None = None,
                dialect: Dialect = DEFAULT_DIALECT) -> OFMsg:
    """``OFPFC_MODIFY_STRICT`` of our entry with ``flow.key``: new instructions."""
    return dialect.flow_mod(dialect.ofp.OFPFC_MODIFY_STRICT, flow.table, flow.priority,
                            encode_match(flow.match, dialect),
                            encode_instructions(flow.action, group_id, dialect), COOKIE,
                            COOKIE_MASK)


def flow_delete(flow: FlowIntent, dialect: Dialect = DEFAULT_DIALECT) -> OFMsg:
    """``OFPFC_DELETE_STRICT`` of our entry with ``flow.key`` (cookie-masked: never another's)."""
    return dialect.flow_mod(dialect.ofp.OFPFC_DELETE_STRICT, flow.table, flow.priority,
                            encode_match(flow.match, dialect), [], COOKIE, COOKIE_MASK)


def record_delete(rec: Record, dialect: Dialect = DEFAULT_DIALECT) -> OFMsg:
    """Strict, cookie-masked delete of an entry of ours as read back (one we cannot decode)."""
    match = encode_match(rec.match, dialect) if isinstance(rec.match, Match) else rec.match
    return dialect.flow_mod(dialect.ofp.OFPFC_DELETE_STRICT, rec.table, rec.priority, match,
                            [], COOKIE, COOKIE_MASK)


def delete_our_flows(dialect: Dialect = DEFAULT_DIALECT) -> OFMsg:
    """``OFPFC_DELETE`` of every entry with :data:`COOKIE` in every table (foreign ones stay)."""
    p, o = dialect.parser, dialect.ofp
    return dialect.flow_mod(o.OFPFC_DELETE, o.OFPTT_ALL, 0, p.OFPMatch(), [], COOKIE, COOKIE_MASK)


# -- groups --------------------------------------------------------------------------------------
def group_add(group_id: int, nhs: NextHopSet, dialect: Dialect = DEFAULT_DIALECT) -> OFMsg:
    """``OFPGC_ADD`` of the group for ``nhs`` (module docstring).

    Raises
    ------
    EncodeError
        An ECMP set with a hash on a dialect without group selection properties; a failover
        set that sends back out of the in-port (``bounce``) or judges ports by probe timers:
        P4 data-plane protection, which an OpenFlow fast-failover group cannot express.
    """
    o = dialect.ofp
    if nhs.bounce or nhs.liveness is not None:
        raise EncodeError(f"{nhs}: a bounce or probe-timed failover set is P4 data-plane "
                          "protection (fabric.p4's pin_egress_protected); an OpenFlow switch "
                          "forwards by its ports' status")
    if nhs.kind == "ecmp":
        if nhs.hash is not None and CAP_ECMP_HASH not in dialect.capabilities:
            raise EncodeError(
                f"{nhs}: the policy's routing.ecmp hash fields and seed need OpenFlow 1.5 group "
                f"selection properties (Open vSwitch selection_method=hash), but the switch "
                f"speaks {dialect.name}: allow OpenFlow15 in the bridge's protocols, or let "
                "the switches hash their default way (routing.ecmp.selection: switch_default)")
        return dialect.group_mod(o.OFPGC_ADD, o.OFPGT_SELECT, group_id,
                                 [(p, 1) for p in nhs.ports], nhs.hash)
    return dialect.group_mod(o.OFPGC_ADD, o.OFPGT_FF, group_id, [(p, 0) for p in nhs.ports],
                             None)


def group_delete(group_id: int, dialect: Dialect = DEFAULT_DIALECT) -> OFMsg:
    """``OFPGC_DELETE`` of ``group_id``."""
    o = dialect.ofp
    return dialect.group_mod(o.OFPGC_DELETE, o.OFPGT_SELECT, group_id, [], None)


# -- id allocation -------------------------------------------------------------------------------
@dataclass(frozen=True)
class GroupIds:
    """One switch's allocation: next-hop set → group id (values in our range, distinct)."""

    ids: Mapping[NextHopSet, int] = field(default_factory=dict)

    def used(self) -> frozenset[int]:
        return frozenset(self.ids.values())

    def with_sets(self, needed: Iterable[NextHopSet]) -> tuple[GroupIds, list[NextHopSet]]:
        """The allocation extended by every set of ``needed`` lacking an id (lowest free ids,
        in set order), and the sets that got one.

        Raises
        ------
        EncodeError
            The range is exhausted.
        """
        new = [s for s in sorted(set(needed), key=_nhs_key) if s not in self.ids]
        if not new:
            return self, []
        taken = set(self.ids.values())
        out = dict(self.ids)
        gid = GROUP_ID_BASE
        for s in new:
            while gid in taken:
                gid += 1
            if gid >= GROUP_ID_BASE + GROUP_ID_COUNT:
                raise EncodeError(f"no group id left in {GROUP_ID_BASE:#x}+{GROUP_ID_COUNT}")
            out[s] = gid
            taken.add(gid)
        return GroupIds(out), new

    def without(self, sets: Iterable[NextHopSet]) -> GroupIds:
        drop = set(sets)
        return GroupIds({s: g for s, g in self.ids.items() if s not in drop})


def _nhs_key(s: NextHopSet) -> tuple[str, tuple[int, ...], tuple[str, ...], int]:
    h = s.hash
    return (s.kind, s.ports, h.fields if h else (), h.seed if h else -1)


# -- a change ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Op:
    """One message of a change: ``kind`` (``group-add``, ``flow-add``, ``flow-modify``,
    ``flow-delete``, ``record-delete``: an entry of ours read back that decodes to no intent,
    ``group-delete``) and what it needs."""

    kind: str
    flow: FlowIntent | None = None
    group_id: int | None = None
    nhs: NextHopSet | None = None
    record: Record | None = None


@dataclass(frozen=True)
class Encoded:
    """A change as messages, in the order to send them (``ops``; :attr:`messages` as os-ken
    objects, :func:`bundle_wire` as wire bytes); ``entries[i]`` is the entry message ``i`` is
    for (a group's: the first entry that needs it), to name it in an error; ``groups``: the
    allocation once the change is in force."""

    ops: tuple[Op, ...]
    entries: tuple[FlowIntent | None, ...]
    groups: GroupIds
    counts: Mapping[str, int]
    dialect: Dialect = DEFAULT_DIALECT

    @property
    def messages(self) -> tuple[OFMsg, ...]:
        """The messages as os-ken objects (what a transport without a wire is given)."""
        return tuple(_message(op, self.dialect) for op in self.ops)


def _message(op: Op, dialect: Dialect) -> OFMsg:
    if op.kind == "group-add":
        assert op.group_id is not None and op.nhs is not None
        return group_add(op.group_id, op.nhs, dialect)
    if op.kind == "group-delete":
        assert op.group_id is not None
        return group_delete(op.group_id, dialect)
    if op.kind == "record-delete":
        assert op.record is not None
        return record_delete(op.record, dialect)
    assert op.flow is not None
    if op.kind == "flow-add":
        return flow_add(op.flow, op.group_id, dialect)
    if op.kind == "flow-modify":
        return flow_modify(op.flow, op.group_id, dialect)
    return flow_delete(op.flow, dialect)


@functools.lru_cache(maxsize=1 << 16)
def _serialized(kind: str, flow: FlowIntent, group_id: int | None, dialect: Dialect) -> bytes:
    """os-ken's wire bytes of the flow-mod ``kind`` of ``flow`` with xid 0 (memoised: the ARP
    responder's entries are the same on every edge switch)."""
    return dialect.serialize(_message(Op(kind, flow, group_id), dialect), 0)


def bundle_wire(enc: Encoded, bundle_id: int, xids: Sequence[int]) -> bytes:
    """The bundle adds of ``enc``'s messages as wire bytes (message ``i`` with ``xids[i]``;
    flags ATOMIC|ORDERED): flow-mods packed by :mod:`.wire`, the few others (groups, record
    deletes, the ARP responder's entries: fields and actions :mod:`.wire` does not pack)
    serialised by os-ken."""
    d = enc.dialect
    v = d.version
    flags = BUNDLE_FLAGS
    out = []
    for op, xid in zip(enc.ops, xids, strict=True):
        f = op.flow
        if f is not None and f.action.arp is None and f.match.arp_op is None \
                and f.match.arp_tpa is None:
            m = wire.match_bytes(f.match)
            if op.kind == "flow-add":
                inner = wire.flow_mod(v, xid, OFPFC_ADD, f.table, f.priority, m,
                                      wire.instructions_bytes(f.action, op.group_id), COOKIE, 0)
            elif op.kind == "flow-modify":
                inner = wire.flow_mod(v, xid, OFPFC_MODIFY_STRICT, f.table, f.priority, m,
                                      wire.instructions_bytes(f.action, op.group_id), COOKIE,
                                      COOKIE_MASK)
            else:
                inner = wire.flow_mod(v, xid, OFPFC_DELETE_STRICT, f.table, f.priority, m,
                                      b"", COOKIE, COOKIE_MASK)
        elif f is not None:
            # the ARP responder's entries: the same on every edge switch; os-ken serialises
            # each (kind, entry) once per dialect, the xid is set in the bytes
            inner = wire.with_xid(_serialized(op.kind, f, op.group_id, d), xid)
        else:
            inner = d.serialize(_message(op, d), xid)
        out.append(wire.bundle_add(v, xid, bundle_id, flags, inner))
    return b"".join(out)


def encode_changes(changes: SwitchChanges, installed: SwitchPlan, groups: GroupIds,
                   dialect: Dialect = DEFAULT_DIALECT,
                   stale: Iterable[Record] = (), orphans: Iterable[int] = ()) -> Encoded:
    """The messages that turn a switch holding ``installed`` (with ``groups`` allocated) into
    ``changes.apply_to(installed)``, in the safe order (module docstring).

    ``stale``: entries of ours read back that decode to no intent (deleted first among the
    deletes); ``orphans``: ids of our groups no entry uses (deleted last).

    Raises
    ------
    EncodeError
        An intent this switch cannot hold (the message names it).
    KeyError
        ``changes`` do not apply to ``installed``.
    """
    stale = tuple(stale)
    touched = {f.action.next_hops for f in (*changes.add_flows, *changes.modify_flows,
                                            *changes.delete_flows, *changes.modified_from)
               if f.action.next_hops is not None}
    if touched or orphans:
        after = changes.apply_to(installed)
        needed = after.next_hop_sets()
        alloc, new_sets = groups.with_sets(needed)
        gone = [s for s in groups.ids if s not in needed]
    else:
        # no changed entry uses a next-hop set: the switch needs the sets it has (the
        # allocation is what the installed entries use: built from each read-back, kept by
        # each change), and the plan of thousands of entries is not scanned for them
        changes.check_applies(installed)  # KeyError when the change does not fit
        alloc, new_sets, gone = groups, [], []
    first_user: dict[NextHopSet, FlowIntent] = {}
    for f in (*changes.add_flows, *changes.modify_flows):
        if f.action.next_hops is not None:
            first_user.setdefault(f.action.next_hops, f)
    ops: list[Op] = []
    ents: list[FlowIntent | None] = []
    checked: set[Match] = set()

    def flow(kind: str, f: FlowIntent) -> None:
        gid = alloc.ids[f.action.next_hops] if f.action.next_hops is not None else None
        try:
            if f.match not in checked:
                check_match(f.match)
                checked.add(f.match)
            if kind != "flow-delete":
                check_action(f.action, gid, dialect)
        except EncodeError as exc:
            raise EncodeError(f"{changes.switch}: entry {f} ('{f.origin}'): {exc}") from None
        ops.append(Op(kind, f, gid))
        ents.append(f)

    for s in new_sets:
        user = first_user.get(s)
        try:
            group_add(alloc.ids[s], s, dialect)  # refuses what the switch cannot hold
        except EncodeError as exc:
            what = f"entry {user} ('{user.origin}')" if user else str(s)
            raise EncodeError(f"{changes.switch}: {what}: {exc}") from None
        ops.append(Op("group-add", group_id=alloc.ids[s], nhs=s))
        ents.append(user)
    for f in changes.add_flows:
        flow("flow-add", f)
    for f in changes.modify_flows:
        flow("flow-modify", f)
    for rec in stale:
        ops.append(Op("record-delete", record=rec))
        ents.append(None)
    for f in changes.delete_flows:
        flow("flow-delete", f)
    gone_ids = sorted({groups.ids[s] for s in gone} | set(orphans))
    for gid in gone_ids:
        ops.append(Op("group-delete", group_id=gid))
        ents.append(None)
    n_flow = len(changes.add_flows) + len(changes.modify_flows) + len(changes.delete_flows)
    n_flow += len(stale)
    counts = {"flow-mod": n_flow, "group-mod": len(new_sets) + len(gone_ids)}
    return Encoded(tuple(ops), tuple(ents), alloc.without(gone), counts, dialect)


def encode_full(plan: SwitchPlan, dialect: Dialect = DEFAULT_DIALECT) -> list[OFMsg]:
    """The naive full re-push of a switch (for comparison, and to load the simulator): delete
    every entry with our cookie, add the groups and the entries (sorted, deterministic).
    Foreign entries stay; our groups from an earlier allocation must be deleted by the caller."""
    alloc, _ = GroupIds().with_sets(plan.next_hop_sets())
    msgs: list[OFMsg] = [delete_our_flows(dialect)]
    msgs += [group_add(g, s, dialect) for s, g in sorted(alloc.ids.items(), key=lambda x: x[1])]
    for f in sorted(plan.flows, key=FlowIntent.sort_key):
        gid = alloc.ids[f.action.next_hops] if f.action.next_hops is not None else None
        msgs.append(flow_add(f, gid, dialect))
    return msgs


# -- read-back -----------------------------------------------------------------------------------
_DECODE = {"eth_type": "eth_type", "ipv4_src": "ipv4_src", "ipv4_dst": "ipv4_dst",
           "ip_proto": "ip_proto", "ip_dscp": "ip_dscp", "tcp_src": "l4_src",
           "tcp_dst": "l4_dst", "udp_src": "l4_src", "udp_dst": "l4_dst", "arp_op": "arp_op",
           "arp_tpa": "arp_tpa"}


def decode_match(match: Any) -> Match | None:
    """The plan :class:`Match` an OFPMatch of ours encodes (inverse of :func:`encode_match`), or
    None when it has a field :class:`Match` cannot hold (not one of our entries)."""
    if isinstance(match, Match):  # read from the wire (controller.drivers.openflow.wire)
        return match
    fields: dict[str, Any] = {}
    for key, value in match.items():
        name = _DECODE.get(key)
        if name is None or isinstance(value, tuple):  # unknown field or a masked value
            return None
        fields[name] = value
    try:
        return Match(**fields)
    except TypeError:
        return None


def decode_group(rec: GroupRecord, dialect: Dialect = DEFAULT_DIALECT) -> NextHopSet | None:
    """The next-hop set a group of ours encodes, or None (not a shape we write)."""
    o = dialect.ofp
    ports = []
    for b in rec.buckets:
        if len(b.outputs) != 1 or b.other_actions or b.watch_port != b.outputs[0]:
            return None
        ports.append(b.outputs[0])
    try:
        if rec.type == o.OFPGT_SELECT:
            if any(b.weight != 1 for b in rec.buckets):
                return None
            return NextHopSet("ecmp", tuple(sorted(ports)), rec.selection)
        if rec.type == o.OFPGT_FF:
            return NextHopSet("failover", tuple(ports))
    except ValueError:
        return None
    return None


def decode_action(instructions: Iterable[Any], groups: Mapping[int, NextHopSet],
                  dialect: Dialect = DEFAULT_DIALECT,
                  cache: dict[tuple[str, int], Any] | None = None) -> Action | None:
    """The plan action of an entry's instructions, or None (not a shape we write); ``cache``
    shares one :class:`Action` per port and per group among a switch's entries, and one per
    instructions tuple that several entries share (os-ken's parse of the same bytes:
    :meth:`.dialect.OF13.wire_flow_stats`)."""
    p, o = dialect.parser, dialect.ofp
    memo = cache if cache is not None else {}
    if isinstance(instructions, SharedInstructions):
        # parsed once and shared by every entry with those bytes (the ARP responder's, the
        # same on every edge switch): an ARP reply decoded once for every switch, any other
        # action (it may name a group of this switch) once per switch
        if instructions.decoded is not UNDECODED:
            free: Action | None = instructions.decoded
            return free
        shared = memo.get(("parsed", id(instructions)))
        if shared is not None and shared[0] is instructions:
            kept: Action | None = shared[1]
            return kept
        got_action = decode_action(list(instructions), groups, dialect, memo)
        if got_action is not None and got_action.arp is not None:
            instructions.decoded = got_action   # an ARP reply reads no group id
        else:
            memo[("parsed", id(instructions))] = (instructions, got_action)
        return got_action
    ins = list(instructions)
    if not ins:
        return Action("drop")
    if len(ins) == 1 and isinstance(ins[0], wire.WireAction):
        w = ins[0]
        if w.kind == "drop":
            return Action("drop")
        if w.kind == "output":
            if w.value == o.OFPP_CONTROLLER:
                return Action("controller")
            if not 1 <= w.value <= o.OFPP_MAX:
                return None
        key = ("output" if w.kind == "output" else "group", w.value)
        got = memo.get(key)
        if got is None:
            if w.kind == "output":
                got = memo[key] = Action("output", w.value)
            else:
                nhs = groups.get(w.value)
                if nhs is None:
                    return None
                got = memo[key] = Action.via(nhs)
        return got
    if len(ins) != 1 or not isinstance(ins[0], p.OFPInstructionActions) or \
            ins[0].type != o.OFPIT_APPLY_ACTIONS:
        return None
    if len(ins[0].actions) != 1:
        reply = decode_reply(ins[0].actions, dialect)
        return None if reply is None else Action.answer(reply)
    a = ins[0].actions[0]
    if isinstance(a, p.OFPActionOutput):
        if a.port == o.OFPP_CONTROLLER:
            return Action("controller")
        if not 1 <= a.port <= o.OFPP_MAX:
            return None
        got = memo.get(("output", a.port))
        if got is None:
            got = memo[("output", a.port)] = Action("output", a.port)
        return got
    if isinstance(a, p.OFPActionGroup):
        got = memo.get(("group", a.group_id))
        if got is None:
            nhs = groups.get(a.group_id)
            if nhs is None:
                return None
            got = memo[("group", a.group_id)] = Action.via(nhs)
        return got
    return None


@dataclass(frozen=True)
class Decoded:
    """A switch read back: our entries as a plan, the group allocation they use, our entries
    and groups that decode to nothing (to delete with the next change), foreign counts."""

    plan: SwitchPlan
    groups: GroupIds
    stale: tuple[Record, ...] = ()
    orphan_groups: tuple[int, ...] = ()
    foreign_flows: int = 0
    foreign_groups: int = 0


def decode_state(switch: str, dpid: int, flows: Iterable[Record],
                 groups: Iterable[GroupRecord], dialect: Dialect = DEFAULT_DIALECT) -> Decoded:
    """Decode what a switch reported (flows: those with our cookie; groups: all) into intents.

    Our groups that decode to a next-hop set give the allocation (two with the same set: the
    lower id wins, the other is an orphan); our entries pointing at a group that is not ours
    or not decodable are stale. Two entries with one key cannot exist on a switch.
    """
    by_id: dict[int, NextHopSet] = {}
    alloc: dict[NextHopSet, int] = {}
    orphans: list[int] = []
    foreign_groups = 0
    for g in sorted(groups, key=lambda r: r.group_id):
        if not is_our_group(g.group_id):
            foreign_groups += 1
            continue
        nhs = decode_group(g, dialect)
        if nhs is None or nhs in alloc:
            orphans.append(g.group_id)
            continue
        by_id[g.group_id] = nhs
        alloc[nhs] = g.group_id
    intents: list[FlowIntent] = []
    stale: list[Record] = []
    foreign = 0
    memo: dict[tuple[str, int], Any] = {}
    for r in flows:
        if r.cookie != COOKIE:
            foreign += 1
            continue
        m = decode_match(r.match)
        a = decode_action(r.instructions, by_id, dialect, memo) if m is not None else None
        if m is None or a is None:
            stale.append(r)
            continue
        try:
            intents.append(FlowIntent(r.table, r.priority, m, a))
        except ValueError:  # an ARP reply on another match: not an entry we write
            stale.append(r)
    plan = SwitchPlan(switch, dpid, frozenset(intents))
    used = plan.next_hop_sets()
    for nhs in [s for s in alloc if s not in used]:
        orphans.append(alloc.pop(nhs))
    return Decoded(plan, GroupIds(alloc), tuple(stale), tuple(sorted(orphans)), foreign,
                   foreign_groups)


def describe(msg: OFMsg) -> str:
    """A short label of a message's kind (metrics, logs): ``flow-mod``, ``group-mod``,
    ``bundle``, ``barrier``, ``packet-out``, ``stats``, ``role``."""
    name = type(msg).__name__
    if name == "OFPFlowMod":
        return "flow-mod"
    if name == "OFPGroupMod":
        return "group-mod"
    if "Bundle" in name:
        return "bundle"
    if name == "OFPBarrierRequest":
        return "barrier"
    if name == "OFPPacketOut":
        return "packet-out"
    if name == "OFPRoleRequest":
        return "role"
    if name.endswith("StatsRequest"):
        return "stats"
    return name
