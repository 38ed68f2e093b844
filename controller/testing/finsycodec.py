"""Entities (:mod:`controller.drivers.p4runtime.entities`) ↔ finsy objects; names are resolved
through the P4Info by finsy. An oracle for the tests: the driver encodes with its own codec
(:mod:`controller.drivers.p4runtime.wire`), and what it encodes must also pass finsy's encoding.

finsy encodes names to ids and integers to canonical byte strings (P4Runtime spec v1.3 §8.4)
with the P4Info schema, and raises on a value wider than its field. Decoding accepts every
form finsy returns for a match value (int, ``(value, mask)``, ``(value, prefix)``, IPv4
address/network), so read-back compares equal to what the encoder produced.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import finsy as fy

from controller.drivers.p4runtime.entities import (
    Entity,
    Exact,
    FieldMatch,
    Lpm,
    MulticastGroup,
    ProfileGroup,
    ProfileMember,
    TableEntry,
    Ternary,
)


def _short(name: str) -> str:
    """``FabricIngress.routes`` → ``routes`` (our names are P4Info aliases)."""
    return name.rsplit(".", 1)[-1]


def to_finsy(e: Entity) -> Any:
    """The finsy entity for ``e`` (for ``+e`` / ``~e`` / ``-e`` updates)."""
    if isinstance(e, TableEntry):
        match = fy.P4TableMatch({k: _match_value(v) for k, v in e.match})
        if e.action is not None:
            action: Any = fy.P4TableAction(e.action, **dict(e.params))
        elif e.member_id is not None:
            action = fy.P4IndirectAction(member_id=e.member_id)
        else:
            action = fy.P4IndirectAction(group_id=e.group_id)
        return fy.P4TableEntry(e.table, match=match, action=action, priority=e.priority)
    if isinstance(e, ProfileMember):
        return fy.P4ActionProfileMember(e.profile, member_id=e.member_id,
                                        action=fy.P4TableAction(e.action, **dict(e.params)))
    if isinstance(e, ProfileGroup):
        return fy.P4ActionProfileGroup(
            e.profile, group_id=e.group_id, max_size=e.max_size,
            members=[fy.P4Member(m, weight=1) for m in e.member_ids])
    return fy.P4MulticastGroupEntry(e.group_id, replicas=[(p, 0) for p in e.ports])


def _match_value(v: FieldMatch) -> Any:
    if isinstance(v, Exact):
        return v.value
    if isinstance(v, Ternary):
        return (v.value, v.mask)
    return (v.value, v.prefix_len)


def as_int(v: Any) -> int:
    """An integer from a finsy-decoded value (int, address, or big-endian bytes)."""
    if isinstance(v, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return int(v)
    if isinstance(v, bytes):
        return int.from_bytes(v, "big")
    return int(v)


def decode_match(kind: str, value: Any) -> FieldMatch:
    """Our :data:`FieldMatch` for a finsy-decoded match value of P4Info match ``kind``
    ("EXACT", "TERNARY", "LPM").

    Raises
    ------
    ValueError
        A match kind fabric.p4 does not use (range, optional).
    """
    if kind == "EXACT":
        return Exact(as_int(value))
    if kind == "TERNARY":
        if isinstance(value, ipaddress.IPv4Network):
            return Ternary(int(value.network_address), int(value.netmask))
        if isinstance(value, tuple):
            return Ternary(as_int(value[0]), as_int(value[1]))
        return Ternary(as_int(value), (1 << 128) - 1)  # full mask; callers compare per field width
    if kind == "LPM":
        if isinstance(value, ipaddress.IPv4Network):
            return Lpm(int(value.network_address), value.prefixlen)
        if isinstance(value, tuple):
            return Lpm(as_int(value[0]), int(value[1]))
    raise ValueError(f"unsupported match kind {kind} for value {value!r}")


def table_name(e: fy.P4TableEntry, schema: fy.P4Schema) -> str:
    """The short name (alias) of the table of an entry read from a switch."""
    table = schema.tables[e.table_id]
    return _short(table.alias or table.name)


def from_finsy_entry(e: fy.P4TableEntry, schema: fy.P4Schema) -> TableEntry:
    """Our :class:`TableEntry` for a table entry read from a switch."""
    table = schema.tables[e.table_id]
    fields = table.match_fields
    match: list[tuple[str, FieldMatch]] = []
    for k, v in (e.match or {}).items():
        f = fields[k]
        mt = f.match_type
        fm = decode_match(mt if isinstance(mt, str) else mt.name, v)
        if isinstance(fm, Ternary) and fm.mask >> f.bitwidth:
            fm = Ternary(fm.value, (1 << f.bitwidth) - 1)
        match.append((f.alias, fm))
    order = {f.alias: i for i, f in enumerate(fields)}
    match.sort(key=lambda kv: order[kv[0]])
    a = e.action
    short = _short(table.alias or table.name)
    if isinstance(a, fy.P4IndirectAction):
        return TableEntry(short, tuple(match), e.priority,
                          member_id=a.member_id, group_id=a.group_id)
    if isinstance(a, fy.P4TableAction):
        return TableEntry(short, tuple(match), e.priority, _short(a.name),
                          tuple(sorted((k, as_int(v)) for k, v in a.args.items())))
    return TableEntry(short, tuple(match), e.priority)


def from_finsy_member(m: fy.P4ActionProfileMember) -> ProfileMember:
    assert m.action is not None
    return ProfileMember(_short(m.action_profile_id), m.member_id, _short(m.action.name),
                         tuple(sorted((k, as_int(v)) for k, v in m.action.args.items())))


def from_finsy_group(g: fy.P4ActionProfileGroup) -> ProfileGroup:
    return ProfileGroup(_short(g.action_profile_id), g.group_id,
                        tuple(sorted(m.member_id for m in (g.members or ()))), g.max_size)


def from_finsy_multicast(g: fy.P4MulticastGroupEntry) -> MulticastGroup:
    """finsy gives each replica as its port (instance 0) or as ``(port, instance)``."""
    ports = []
    for r in g.replicas:
        if isinstance(r, tuple):
            ports.append(as_int(r[0]))
        elif isinstance(r, int):
            ports.append(r)
        else:
            ports.append(as_int(r.port))
    return MulticastGroup(g.multicast_group_id, tuple(sorted(ports)))
