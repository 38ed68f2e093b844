"""Plan → P4 entities for ``p4/fabric/fabric.p4``. Pure: no P4Info, no switch.

Per switch (:func:`encode_switch`), every :class:`~controller.plan.model.FlowIntent` lands in
one table of the program (names in :mod:`.pipeline`):

* action ``controller`` on an ``eth_type``-only match → ``punt`` (ternary ``eth_type``) →
  ``send_to_cpu``; the packet reaches the controller as packet-in;
* an :class:`~controller.plan.model.ArpReply` (on the match of an ARP request for its address)
  → ``arp_responder`` (exact ``arp_tpa``) → ``arp_reply(mac)``: the switch answers the request
  itself (fabric.p4's header comment);
* a route (match exactly ``eth_type=IPv4, ipv4_dst``) to a port or an ECMP
  :class:`~controller.plan.model.NextHopSet` → ``routes`` (LPM /32) pointing at a member or
  group of the ``ecmp_selector`` action selector. Member ids are port numbers (one
  ``set_egress(port)`` member per port used); group ids are the driver's (``group_ids``: port
  set → id; by default :func:`allocate_groups`, 1, 2, ... over the sorted port sets), members
  sorted, each weight 1. fabric.p4 has no fast-failover groups: a failover set is refused;
* any other IPv4 match (pinned flows) → ``pinned`` (ternary on each given field) →
  ``set_egress(port)`` or ``drop``; a pinned hop protected by a failover
  :class:`~controller.plan.model.NextHopSet` (planned port, backup port) →
  ``pin_egress_protected(port, backup_port)``: the switch sends to the backup while the planned
  port is dead by its liveness probes and the backup is not; a ``bounce`` set (planned port
  only) → ``pin_egress_protected(port, 0)``: back out of the ingress port instead
  (:data:`~.pipeline.BOUNCE_PORT`; fabric.p4's header comment). fabric.p4 keeps one backup
  per hop. P4Runtime orders overlapping ternary entries by priority,
  higher first (P4Runtime spec v1.3 §9.1); the entry's priority is ``8 × plan priority +
  number of fields given``, so the plan's order is kept and, within one plan priority, a more
  specific match wins (a flow with DSCP over one without).

* the :class:`~controller.plan.model.LivenessTimers` the switch's failover sets carry → one
  ``liveness`` entry (every frame: ``eth_type`` wildcarded) → ``set_liveness(timeout_us,
  hold_us)``: how the switch judges its ports from what they hear. None without failover
  sets that carry timers (the protected entries then keep their planned port).

* the hash the switch's ECMP sets carry (the policy's ``routing.ecmp``, per switch:
  :mod:`controller.plan.hashing`; by default the 5-tuple with a seed derived from the switch's
  datapath id, :func:`plan_ecmp_hash`) → one ``ecmp_hash`` entry (ternary ``eth_type`` = IPv4)
  → ``set_hash(seed, <field>_mask...)``: all ones for a hashed field, 0 for the others.
  fabric.p4 hashes crc32(seed, masked fields) through fmix32 and the action selector takes that
  value mod the group size. Sets that carry no hash (``selection: switch_default``) get no
  entry: the table's default action hashes the 5-tuple with seed 0.

:func:`qos_entries` turns a ``bmv2`` QoS rendering (:mod:`controller.render.bmv2`) into
``dscp_to_priority`` and ``ecn_threshold`` entries.

Nothing is half-encoded: a plan object the program cannot express raises :class:`EncodeError`
naming the switch and the intent.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.drivers.p4runtime.entities import (
    Exact,
    FieldMatch,
    MulticastGroup,
    ProfileGroup,
    ProfileMember,
    SwitchEntities,
    TableEntry,
    lpm,
    ternary,
)
from controller.drivers.p4runtime.pipeline import (
    ARP_RESPONDER,
    BMV2,
    BOUNCE_PORT,
    ECMP_HASH,
    ECMP_HASH_PRIORITY,
    ECMP_SELECTOR,
    HASH_FIELD_BITS,
    LIVENESS,
    LIVENESS_PRIORITY,
    PINNED,
    PORTS,
    PUNT,
    ROUTES,
    P4Target,
)
from controller.model.topology import Fabric
from controller.plan.hashing import ecmp_hashes
from controller.plan.model import (
    DEFAULT_HASH_FIELDS,
    ETH_TYPE_IPV4,
    FabricPlan,
    FlowIntent,
    LivenessTimers,
    SwitchPlan,
)
from controller.plan.model import EcmpHash as PlanHash
from controller.policy.model import EcmpSettings

#: Multiplier that leaves room for the specificity tie-break in ``pinned`` priorities.
PRIORITY_SCALE = 8


class EncodeError(ValueError):
    """A plan object that fabric.p4 cannot express; the message names switch and intent."""


def _port(switch: str, what: object, port: int, cpu_port: int = BMV2.cpu_port) -> int:
    if not 0 <= port < PORTS or port == cpu_port:
        raise EncodeError(
            f"{switch}: {what}: port {port} outside 0..{PORTS - 1} or equal to CPU_PORT {cpu_port}"
        )
    return port


def _ipv4(value: str) -> int:
    return int(ipaddress.IPv4Address(value))


def _mac(value: str) -> int:
    return int(value.replace(":", ""), 16)


def _member(port: int) -> ProfileMember:
    return ProfileMember(ECMP_SELECTOR, port, "set_egress", (("port", port),))


def _pinned_entry(switch: str, flow: FlowIntent, cpu_port: int,
                  protected_ok: bool = True) -> TableEntry:
    m = flow.match
    given = {
        "ipv4_src": None if m.ipv4_src is None else _ipv4(m.ipv4_src),
        "ipv4_dst": None if m.ipv4_dst is None else _ipv4(m.ipv4_dst),
        "ip_proto": m.ip_proto,
        "dscp": m.ip_dscp,
        "l4_src": m.l4_src,
        "l4_dst": m.l4_dst,
    }
    if (m.l4_src is not None or m.l4_dst is not None) and m.ip_proto not in (6, 17):
        raise EncodeError(f"{switch}: {flow.origin or flow}: l4 ports need ip_proto 6 or 17")
    match: list[tuple[str, FieldMatch]] = []
    for name, _kind, width in PINNED.keys:
        v = given[name]
        if v is None:
            continue
        try:
            match.append((name, ternary(v, width)))
        except ValueError as e:
            raise EncodeError(f"{switch}: {flow.origin or flow}: {name}: {e}") from None
    params: tuple[tuple[str, int], ...]
    nhs = flow.action.next_hops
    if flow.action.kind == "output":
        action, params = "set_egress", (("port", _port(switch, flow.origin, flow.action.port,
                                                       cpu_port)),)
    elif flow.action.kind == "drop":
        action, params = "drop", ()
    elif nhs is not None and nhs.kind == "failover" and (
            len(nhs.ports) == 1 if nhs.bounce else len(nhs.ports) >= 2):
        if not protected_ok:
            raise EncodeError(f"{switch}: {flow.origin or flow}: {nhs}: this target's program "
                              "has no pin_egress_protected")
        primary = _port(switch, flow.origin, nhs.ports[0], cpu_port)
        backup = (BOUNCE_PORT if nhs.bounce
                  else _port(switch, flow.origin, nhs.ports[1], cpu_port))
        if backup == BOUNCE_PORT and not nhs.bounce:
            raise EncodeError(f"{switch}: {flow.origin or flow}: {nhs}: port {BOUNCE_PORT} "
                              "means 'back out of the ingress port' in pin_egress_protected")
        action, params = "pin_egress_protected", (("backup_port", backup), ("port", primary))
    else:
        raise EncodeError(
            f"{switch}: {flow.origin or flow}: table pinned takes output, drop or a failover "
            f"pair (or one port and a bounce), not {flow.action} (fabric.p4 has no ECMP "
            "groups on pinned entries and keeps one backup per hop)"
        )
    prio = flow.priority * PRIORITY_SCALE + len(match)
    return TableEntry(PINNED.name, tuple(match), prio, action, params, origin=flow.origin)


@dataclass(frozen=True)
class EcmpHash:
    """What one switch's ECMP hashes: ``fields`` (names of
    :data:`~.pipeline.HASH_FIELD_BITS`) and its 32-bit ``seed``."""

    fields: tuple[str, ...]
    seed: int


def plan_ecmp_hash(plan: SwitchPlan) -> EcmpHash | None:
    """The hash a switch's plan asks of its ECMP sets; None when they ask none or it has none
    (no ``ecmp_hash`` entry then: fabric.p4's default action, the 5-tuple with seed 0, which
    :mod:`.decode` reads back as no hash).

    Raises
    ------
    EncodeError
        Two ECMP sets of the switch ask for different hashes (fabric.p4 hashes once per switch).
    """
    hashes = {s.hash for s in plan.next_hop_sets() if s.kind == "ecmp"}
    if len(hashes) > 1:
        raise EncodeError(f"{plan.switch}: ECMP sets ask for different hashes "
                          f"{sorted(map(str, hashes))}; fabric.p4 hashes one way per switch")
    h: PlanHash | None = next(iter(hashes), None)
    return None if h is None else EcmpHash(h.fields, h.seed)


def allocate_groups(port_sets: Any) -> dict[tuple[int, ...], int]:
    """Group ids 1, 2, ... for ``port_sets`` in sorted order (a deterministic allocation)."""
    return {ports: i for i, ports in enumerate(sorted(set(port_sets)), 1)}


def ecmp_hash_settings(fabric: Fabric, ecmp: EcmpSettings) -> dict[str, EcmpHash]:
    """Switch name → its :class:`EcmpHash` for the policy's ``routing.ecmp``
    (:func:`controller.plan.hashing.ecmp_hashes`: its fields and its own seed; the 5-tuple with
    seed 0, fabric.p4's default, under ``selection: switch_default``)."""
    return {name: EcmpHash(DEFAULT_HASH_FIELDS, 0) if h is None else EcmpHash(h.fields, h.seed)
            for name, h in ecmp_hashes(fabric, ecmp).items()}


def ecmp_hash_entry(switch: str, setting: EcmpHash) -> TableEntry:
    """The ``ecmp_hash`` entry for ``setting``: IPv4 packets → ``set_hash(seed, masks)``.

    Raises
    ------
    EncodeError
        No field, a field fabric.p4 cannot hash, or a seed outside 0..2**32-1.
    """
    unknown = sorted(set(setting.fields) - set(HASH_FIELD_BITS))
    if unknown or not setting.fields:
        raise EncodeError(f"{switch}: ecmp hash fields {unknown or '[]'}: fabric.p4 hashes a "
                          f"non-empty subset of {list(HASH_FIELD_BITS)}")
    if not 0 <= setting.seed < 1 << 32:
        raise EncodeError(f"{switch}: ecmp hash seed {setting.seed} outside 0..2**32-1")
    params = [("seed", setting.seed)]
    for name, width in HASH_FIELD_BITS.items():
        params.append((f"{name}_mask", (1 << width) - 1 if name in setting.fields else 0))
    return TableEntry(ECMP_HASH.name, (("eth_type", ternary(ETH_TYPE_IPV4, 16)),),
                      ECMP_HASH_PRIORITY, "set_hash", tuple(sorted(params)),
                      origin=f"ecmp hash {'+'.join(setting.fields)} seed {setting.seed}")


def encode_flow(switch: str, flow: FlowIntent, target: P4Target = BMV2,
                group_ids: Mapping[tuple[int, ...], int] | None = None) -> TableEntry:
    """The table entry for one flow intent (see the module docstring for the table rules);
    ``target`` supplies the CPU port no entry may forward to; ``group_ids`` the id of each ECMP
    port set.

    Raises
    ------
    EncodeError
        A match the program has no table for (non-IPv4 forwarding, a punt on more than
        ``eth_type``), a next-hop set on a pinned entry, a failover set, a set without an id,
        a port outside bit<9> or equal to CPU_PORT.
    """
    m = flow.match
    fields = m.fields()
    what = flow.origin or str(flow)
    if flow.action.arp is not None:  # FlowIntent checked the match: the request for this IP
        reply = flow.action.arp
        return TableEntry(ARP_RESPONDER.name, (("arp_tpa", Exact(_ipv4(reply.ipv4))),), 0,
                          "arp_reply", (("mac", _mac(reply.mac)),), origin=flow.origin)
    if flow.action.kind == "controller":
        if set(fields) != {"eth_type"}:
            raise EncodeError(f"{switch}: {what}: punt matches eth_type only, got {sorted(fields)}")
        return TableEntry(PUNT.name, (("eth_type", ternary(m.eth_type or 0, 16)),),
                          max(1, flow.priority), "send_to_cpu", (), origin=flow.origin)
    if m.eth_type != ETH_TYPE_IPV4:
        raise EncodeError(f"{switch}: {what}: fabric.p4 forwards IPv4 only (eth_type {m.eth_type!r})")
    if set(fields) == {"eth_type", "ipv4_dst"} and flow.action.kind in ("output", "next_hops"):
        key = (("ipv4_dst", lpm(_ipv4(m.ipv4_dst or "0.0.0.0"), 32, 32)),)
        if flow.action.kind == "output":
            return TableEntry(ROUTES.name, key, 0,
                              member_id=_port(switch, what, flow.action.port, target.cpu_port),
                              origin=flow.origin)
        nhs = flow.action.next_hops
        assert nhs is not None
        if nhs.kind != "ecmp":
            raise EncodeError(f"{switch}: {what}: {nhs}: routes take select groups only (fast "
                              "failover protects pinned hops)")
        gid = (group_ids or {}).get(nhs.ports)
        if gid is None:
            raise EncodeError(f"{switch}: {what}: {nhs} has no group id")
        return TableEntry(ROUTES.name, key, 0, group_id=gid, origin=flow.origin)
    return _pinned_entry(switch, flow, target.cpu_port,
                         "pin_egress_protected" in target.actions)


def plan_liveness(plan: SwitchPlan) -> LivenessTimers | None:
    """The liveness timers a switch's failover sets carry (None: none carries any).

    Raises
    ------
    EncodeError
        Two failover sets of the switch carry different timers (fabric.p4 judges its ports
        one way per switch).
    """
    timers = {s.liveness for s in plan.next_hop_sets()
              if s.kind == "failover" and s.liveness is not None}
    if len(timers) > 1:
        raise EncodeError(f"{plan.switch}: failover sets carry different liveness timers "
                          f"{sorted(map(str, timers))}; fabric.p4 judges its ports one way")
    return next(iter(timers), None)


def liveness_entry(switch: str, timers: LivenessTimers) -> TableEntry:
    """The ``liveness`` entry of ``timers``: every frame (``eth_type`` wildcarded) →
    ``set_liveness(timeout_us, hold_us)`` (fabric.p4's header comment: any frame a port hears
    proves its link alive; LLDP probes also mark the port as a switch's)."""
    return TableEntry(LIVENESS.name, (), LIVENESS_PRIORITY, "set_liveness",
                      (("hold_us", timers.hold_us), ("timeout_us", timers.timeout_us)),
                      origin=f"liveness: {timers}")


def encode_switch(plan: SwitchPlan, qos: Mapping[str, Any] | None = None,
                  ecmp_hash: EcmpHash | None = None, target: P4Target = BMV2,
                  group_ids: Mapping[tuple[int, ...], int] | None = None) -> SwitchEntities:
    """All entities of one switch: ``plan``'s flows and groups, plus the QoS entries of
    ``qos`` (one switch's document of :func:`controller.render.bmv2.render_bmv2`, or of
    :func:`controller.render.tofino.render_tofino` for ``target`` TOFINO) and the
    ``ecmp_hash`` entry of ``ecmp_hash`` when given (without it the switch hashes the 5-tuple
    with seed 0, fabric.p4's default; :func:`plan_ecmp_hash` gives the plan's). ``target``
    (:data:`~.pipeline.BMV2` or :data:`~.pipeline.TOFINO`) is the program the entities are
    for: both share every name except ``mark_ecn``'s threshold parameter.

    ``device_id`` is the switch's dpid (simple_switch_grpc ``--device-id``); ``group_ids``:
    ECMP port set → group id (default: :func:`allocate_groups` over the plan's sets). The
    ``liveness`` entry comes from the plan's failover sets (:func:`plan_liveness`).

    Raises
    ------
    EncodeError
        An intent the program cannot express (see :func:`encode_flow`); two flows that become
        the same entry with different actions; failover sets with different timers.
    """
    sw = plan.switch
    sets = {s.ports: s for s in plan.next_hop_sets() if s.kind == "ecmp"}
    ids = dict(group_ids) if group_ids is not None else allocate_groups(sets)
    groups = {ids[p]: p for p in sets if p in ids}
    entries: dict[tuple[Any, ...], TableEntry] = {}
    ports_used: set[int] = set()
    groups_used: set[int] = set()
    for flow in sorted(plan.flows, key=FlowIntent.sort_key):
        e = encode_flow(sw, flow, target, ids)
        old = entries.get(e.key)
        if old is not None and old.value != e.value:
            raise EncodeError(f"{sw}: '{old.origin}' and '{e.origin}' both become {e} "
                              "with different actions")
        entries[e.key] = e
        if e.member_id is not None:
            ports_used.add(e.member_id)
        if e.group_id is not None:
            groups_used.add(e.group_id)
    pgroups: set[ProfileGroup] = set()
    for gid in sorted(groups_used):
        ports = tuple(sorted(_port(sw, f"group {gid:#x}", p, target.cpu_port)
                             for p in groups[gid]))
        ports_used.update(ports)
        pgroups.add(ProfileGroup(ECMP_SELECTOR, gid, ports))
    out_entries = set(entries.values())
    if qos is not None:
        out_entries |= set(qos_entries(sw, qos, target))
    if ecmp_hash is not None:
        out_entries.add(ecmp_hash_entry(sw, ecmp_hash))
    timers = plan_liveness(plan)
    if timers is not None:
        out_entries.add(liveness_entry(sw, timers))
    return SwitchEntities(
        switch=sw, device_id=plan.dpid, entries=frozenset(out_entries),
        members=frozenset(_member(p) for p in ports_used), groups=frozenset(pgroups),
    )


def qos_entries(switch: str, doc: Mapping[str, Any], target: P4Target = BMV2
                ) -> list[TableEntry]:
    """Entries for the ``tables`` list of a QoS rendering document: ``bmv2``'s for
    fabric.p4 (``target`` BMV2), ``tofino``'s for fabric_tna.p4 (``target`` TOFINO).

    Raises
    ------
    EncodeError
        A table, key, action or parameter name the program lacks, or a value wider than its
        field (the message names the switch and the rendered entry).
    """
    out: list[TableEntry] = []
    for i, t in enumerate(doc.get("tables", [])):
        where = f"{switch}: qos tables[{i}] {t.get('table')}"
        spec = target.tables.get(t.get("table", ""))
        if spec is None or t.get("action") not in spec.actions:
            raise EncodeError(f"{where}: unknown table or action {t.get('action')!r}")
        if set(t.get("match", {})) != {k[0] for k in spec.keys}:
            raise EncodeError(f"{where}: keys {sorted(t.get('match', {}))} != "
                              f"{sorted(k[0] for k in spec.keys)}")
        match: list[tuple[str, FieldMatch]] = []
        for name, kind, width in spec.keys:
            v = int(t["match"][name])
            if kind != "exact" or not 0 <= v < (1 << width):
                raise EncodeError(f"{where}: {name}={v} does not fit {width} bits ({kind})")
            match.append((name, Exact(v)))
        params = []
        for pname, width in target.actions[t["action"]]:
            if pname not in t.get("params", {}):
                raise EncodeError(f"{where}: missing parameter {pname}")
            v = int(t["params"][pname])
            if not 0 <= v < (1 << width):
                raise EncodeError(f"{where}: {pname}={v} does not fit {width} bits")
            params.append((pname, v))
        out.append(TableEntry(spec.name, tuple(match), 0, t["action"], tuple(params),
                              origin=f"qos {spec.name}"))
    return out


def multicast_group(group_id: int, ports: tuple[int, ...] | list[int]) -> MulticastGroup:
    """A multicast group replicating to ``ports`` (sorted; for in-network aggregation results).

    Raises
    ------
    EncodeError
        ``group_id`` 0 (reserved, P4Runtime spec v1.3 §9.5.1) or a bad port.
    """
    if group_id <= 0:
        raise EncodeError(f"multicast group id {group_id}: must be >= 1")
    return MulticastGroup(group_id, tuple(sorted(_port("multicast", group_id, p) for p in ports)))


def encode_fabric(plan: FabricPlan, qos: Mapping[str, Mapping[str, Any]] | None = None,
                  ecmp_hash: Mapping[str, EcmpHash] | None = None, target: P4Target = BMV2
                  ) -> dict[str, SwitchEntities]:
    """:func:`encode_switch` for every switch; ``qos`` maps switch name → its QoS document
    (bmv2's, or tofino's for ``target`` TOFINO), ``ecmp_hash`` switch name → its hash setting
    (:func:`ecmp_hash_settings`)."""
    return {name: encode_switch(sp, (qos or {}).get(name), (ecmp_hash or {}).get(name), target)
            for name, sp in sorted(plan.switches.items())}
