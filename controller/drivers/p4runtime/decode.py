"""A P4 switch read back → plan intents (the inverse of :mod:`.encode`). Pure.

aifabric owns the tables it writes (:data:`OWNED_TABLES`: ``arp_responder``, ``punt``,
``routes``, ``pinned``, ``ecmp_hash``) and the ``ecmp_selector`` action profile; entries of
other tables (QoS tables written by a lab or another client) are neither read back as ours nor
ever deleted. :func:`decode_entities` turns our entities into a
:class:`~controller.plan.model.SwitchPlan`: routes to a member or an ECMP group, pinned entries
(plan priority = P4 priority // :data:`~.encode.PRIORITY_SCALE`; ``pin_egress_protected`` as a
failover next-hop set of the planned port and its backup, or a ``bounce`` set when the backup
is :data:`~.pipeline.BOUNCE_PORT`), punts, ARP replies (``arp_reply(mac)`` on ``arp_tpa``: the
reply for that address); the ``ecmp_hash`` entry gives the ECMP sets' hash and the
``liveness`` entry the failover sets' :class:`~controller.plan.model.LivenessTimers`; the group
ids of the read-back groups are kept (the driver's allocation: port set → id).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.drivers.p4runtime.encode import PRIORITY_SCALE
from controller.drivers.p4runtime.entities import (
    Exact,
    Lpm,
    SwitchEntities,
    TableEntry,
    Ternary,
)
from controller.drivers.p4runtime.pipeline import (
    ARP_RESPONDER,
    BOUNCE_PORT,
    ECMP_HASH,
    ECMP_SELECTOR,
    HASH_FIELD_BITS,
    LIVENESS,
    PINNED,
    PUNT,
    ROUTES,
)
from controller.plan.model import (
    ETH_TYPE_IPV4,
    PRIO_ARP_REPLY,
    PRIO_ROUTE,
    Action,
    ArpReply,
    EcmpHash,
    FlowIntent,
    LivenessTimers,
    Match,
    NextHopSet,
    SwitchPlan,
    arp_request_match,
)
from controller.plan.pinned import TABLE

OWNED_TABLES = frozenset({ARP_RESPONDER.name, PUNT.name, ROUTES.name, PINNED.name,
                          ECMP_HASH.name, LIVENESS.name})
#: Tables whose entries are settings of other intents (the ECMP sets' hash, the failover sets'
#: liveness timers), not intents of their own.
_SETTINGS_TABLES = frozenset({ECMP_HASH.name, LIVENESS.name})
_PINNED_FIELDS = {"ipv4_src": "ipv4_src", "ipv4_dst": "ipv4_dst", "ip_proto": "ip_proto",
                  "dscp": "ip_dscp", "l4_src": "l4_src", "l4_dst": "l4_dst"}
_PINNED_BITS = {k: w for k, _, w in PINNED.keys}


def owned(ents: SwitchEntities) -> SwitchEntities:
    """``ents`` restricted to what aifabric writes (:data:`OWNED_TABLES`, the ECMP selector)."""
    return SwitchEntities(ents.switch, ents.device_id,
                          frozenset(e for e in ents.entries if e.table in OWNED_TABLES),
                          frozenset(m for m in ents.members if m.profile == ECMP_SELECTOR),
                          frozenset(g for g in ents.groups if g.profile == ECMP_SELECTOR))


@dataclass(frozen=True)
class DecodedP4:
    """A P4 switch read back: our entries as a plan, the group allocation (ports → id), and how
    many entities of ours decode to no intent (they go at the next change)."""

    plan: SwitchPlan
    group_ids: Mapping[tuple[int, ...], int]
    undecoded: int = 0


def _hash_of(ents: SwitchEntities) -> EcmpHash | None:
    for e in ents.entries:
        if e.table == ECMP_HASH.name and e.action == "set_hash":
            params = dict(e.params)
            fields = tuple(f for f in HASH_FIELD_BITS if params.get(f"{f}_mask", 0))
            if fields and 0 <= params.get("seed", 0) < 1 << 32:
                return EcmpHash(fields, params.get("seed", 0))
    return None


def _liveness_of(ents: SwitchEntities) -> LivenessTimers | None:
    for e in ents.entries:
        if e.table == LIVENESS.name and e.action == "set_liveness":
            params = dict(e.params)
            try:
                return LivenessTimers(params.get("timeout_us", 0), params.get("hold_us", 0))
            except ValueError:
                return None
    return None


def decode_entities(ents: SwitchEntities) -> DecodedP4:
    """Our entities of a switch as plan intents (module docstring)."""
    ents = owned(ents)
    ports = {m.member_id: dict(m.params).get("port") for m in ents.members
             if m.action == "set_egress"}
    h = _hash_of(ents)
    timers = _liveness_of(ents)
    groups: dict[int, NextHopSet] = {}
    ids: dict[tuple[int, ...], int] = {}
    for g in sorted(ents.groups, key=lambda g: g.group_id):
        gp = [ports.get(m) for m in g.member_ids]
        if None in gp or len(set(gp)) < 2:
            continue
        nhs = NextHopSet("ecmp", tuple(sorted(p for p in gp if p is not None)), h)
        if nhs.ports in ids:
            continue
        groups[g.group_id] = nhs
        ids[nhs.ports] = g.group_id
    flows: list[FlowIntent] = []
    bad = 0
    for e in ents.entries:
        fi = decode_entry(e, ports, groups, timers)
        if fi is None:
            bad += e.table not in _SETTINGS_TABLES
        else:
            flows.append(fi)
    return DecodedP4(SwitchPlan(ents.switch, ents.device_id, frozenset(flows)), ids, bad)


def decode_entry(e: TableEntry, ports: Mapping[int, int | None] | None = None,
                 groups: Mapping[int, NextHopSet] | None = None,
                 liveness: LivenessTimers | None = None) -> FlowIntent | None:
    """The plan intent of one of our entries (None: not one the encoder writes). ``ports``:
    member id → port, ``groups``: group id → next-hop set (for routes), ``liveness``: the
    switch's liveness timers (its ``liveness`` entry), carried by its failover sets."""
    m = dict(e.match)
    if e.table == ARP_RESPONDER.name:
        tpa, mac = m.get("arp_tpa"), dict(e.params).get("mac")
        if not isinstance(tpa, Exact) or e.action != "arp_reply" or mac is None or \
                not 0 <= mac < 1 << 48 or not 0 <= tpa.value < 1 << 32:
            return None
        ip = str(ipaddress.IPv4Address(tpa.value))
        text = ":".join(f"{(mac >> s) & 0xFF:02x}" for s in range(40, -8, -8))
        return FlowIntent(TABLE, PRIO_ARP_REPLY, arp_request_match(ip),
                          Action.answer(ArpReply(ip, text)))
    if e.table == PUNT.name:
        et = m.get("eth_type")
        if isinstance(et, Ternary) and et.mask == 0xFFFF and e.action == "send_to_cpu":
            return FlowIntent(TABLE, e.priority, Match(eth_type=et.value), Action("controller"))
        return None
    if e.table == ROUTES.name:
        dst = m.get("ipv4_dst")
        if not isinstance(dst, Lpm) or dst.prefix_len != 32:
            return None
        match = Match(eth_type=ETH_TYPE_IPV4, ipv4_dst=str(ipaddress.IPv4Address(dst.value)))
        if e.member_id is not None:
            p = (ports or {}).get(e.member_id)
            return None if p is None else FlowIntent(TABLE, PRIO_ROUTE, match,
                                                     Action("output", p))
        if e.group_id is not None and e.group_id in (groups or {}):
            return FlowIntent(TABLE, PRIO_ROUTE, match, Action.via((groups or {})[e.group_id]))
        return None
    if e.table == PINNED.name:
        fields: dict[str, Any] = {"eth_type": ETH_TYPE_IPV4}
        for k, v in m.items():
            name = _PINNED_FIELDS.get(k)
            if name is None or not isinstance(v, Ternary) or v.mask != (1 << _PINNED_BITS[k]) - 1:
                return None
            fields[name] = str(ipaddress.IPv4Address(v.value)) if k.startswith("ipv4") else \
                v.value
        params = dict(e.params)
        if e.action == "set_egress":
            action = Action("output", params.get("port", 0))
        elif e.action == "drop":
            action = Action("drop")
        elif e.action == "pin_egress_protected" and params.get("port", 0) >= 1 and \
                params.get("backup_port") == BOUNCE_PORT:
            action = Action.via(NextHopSet("failover", (params["port"],), bounce=True,
                                           liveness=liveness))
        elif e.action == "pin_egress_protected" and params.get("port") != params.get(
                "backup_port") and params.get("port", 0) >= 1:
            action = Action.via(NextHopSet("failover", (params.get("port", 0),
                                                        params.get("backup_port", 0)),
                                           liveness=liveness))
        else:
            return None
        return FlowIntent(TABLE, e.priority // PRIORITY_SCALE, Match(**fields), action)
    return None
