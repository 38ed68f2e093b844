"""P4Runtime entities as plain values: what the encoder produces and the reader reads back.

These mirror the P4Runtime ``Entity`` messages (P4Runtime spec v1.3 §9) with names instead of
ids and integers instead of byte strings; :mod:`.codec` converts them to finsy objects with the
P4Info. Identity follows the spec: a table entry is keyed by (table, match, priority) (§9.1),
an action-profile member by (profile, member id), a group by (profile, group id) (§9.2), a
multicast group by its id (§9.5.1). Everything else is the entry's value, which MODIFY replaces.

Match values are canonical: a ternary field with mask 0 and an LPM field of prefix length 0 are
"don't care" and must be omitted (§9.1.1); ternary values have no bits outside their mask; an
LPM value has no bits beyond its prefix. :func:`ternary` and :func:`lpm` build canonical values.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, order=True)
class Exact:
    """An exact match on ``value``."""

    value: int

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True, order=True)
class Ternary:
    """A ternary match: a key k matches when ``k & mask == value``."""

    value: int
    mask: int

    def __str__(self) -> str:
        return f"{self.value:#x}&&&{self.mask:#x}"


@dataclass(frozen=True, order=True)
class Lpm:
    """A longest-prefix match on the top ``prefix_len`` bits of ``value``."""

    value: int
    prefix_len: int

    def __str__(self) -> str:
        return f"{self.value:#x}/{self.prefix_len}"


FieldMatch = Exact | Ternary | Lpm


def ternary(value: int, bitwidth: int, mask: int | None = None) -> Ternary:
    """A canonical ternary match (``mask`` None: all ``bitwidth`` bits).

    Raises
    ------
    ValueError
        ``value`` or ``mask`` wider than ``bitwidth`` bits, or ``mask`` 0 (omit the field).
    """
    full = (1 << bitwidth) - 1
    m = full if mask is None else mask
    if not 0 <= value <= full or not 0 < m <= full:
        raise ValueError(f"ternary {value:#x}&&&{m:#x} does not fit {bitwidth} bits (or mask 0)")
    return Ternary(value & m, m)


def lpm(value: int, prefix_len: int, bitwidth: int) -> Lpm:
    """A canonical LPM match: bits beyond the prefix cleared.

    Raises
    ------
    ValueError
        ``value`` wider than ``bitwidth`` or ``prefix_len`` outside 1..bitwidth.
    """
    if not 0 <= value < (1 << bitwidth) or not 1 <= prefix_len <= bitwidth:
        raise ValueError(f"lpm {value:#x}/{prefix_len} does not fit {bitwidth} bits")
    keep = ((1 << prefix_len) - 1) << (bitwidth - prefix_len)
    return Lpm(value & keep, prefix_len)


Params = tuple[tuple[str, int], ...]


@dataclass(frozen=True, order=True)
class TableEntry:
    """A table entry. Exactly one of ``action`` (direct), ``member_id`` or ``group_id``
    (indirect, tables with an action profile) is set. ``priority`` is 0 for tables without
    ternary/range/optional keys and ≥ 1 otherwise, higher winning (§9.1). ``origin`` (why the
    entry exists) is for messages only; it is not part of identity or value."""

    table: str
    match: tuple[tuple[str, FieldMatch], ...]
    priority: int = 0
    action: str | None = None
    params: Params = ()
    member_id: int | None = None
    group_id: int | None = None
    origin: str = field(default="", compare=False)

    @property
    def key(self) -> tuple[str, tuple[tuple[str, FieldMatch], ...], int]:
        return (self.table, self.match, self.priority)

    @property
    def value(self) -> tuple[str | None, Params, int | None, int | None]:
        return (self.action, self.params, self.member_id, self.group_id)

    def __str__(self) -> str:
        m = " ".join(f"{k}={v}" for k, v in self.match)
        if self.action is not None:
            act = f"{self.action}({', '.join(f'{k}={v}' for k, v in self.params)})"
        elif self.member_id is not None:
            act = f"member {self.member_id}"
        else:
            act = f"group {self.group_id}"
        prio = f" prio {self.priority}" if self.priority else ""
        return f"{self.table}[{m}]{prio} -> {act}"


@dataclass(frozen=True, order=True)
class ProfileMember:
    """An action-profile member: ``action(params)`` known as ``member_id`` in ``profile``."""

    profile: str
    member_id: int
    action: str
    params: Params = ()

    @property
    def key(self) -> tuple[str, int]:
        return (self.profile, self.member_id)

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.params)
        return f"{self.profile} member {self.member_id} -> {self.action}({args})"


@dataclass(frozen=True, order=True)
class ProfileGroup:
    """An action-profile group: ``member_ids`` (sorted, weight 1 each) in ``profile``;
    ``max_size`` is the group capacity requested at insert (0: the target's default)."""

    profile: str
    group_id: int
    member_ids: tuple[int, ...]
    max_size: int = 0

    @property
    def key(self) -> tuple[str, int]:
        return (self.profile, self.group_id)

    def __str__(self) -> str:
        return f"{self.profile} group {self.group_id:#x} members {list(self.member_ids)}"


@dataclass(frozen=True, order=True)
class MulticastGroup:
    """A packet-replication-engine multicast group: one replica per egress port (instance 0)."""

    group_id: int
    ports: tuple[int, ...]

    @property
    def key(self) -> int:
        return self.group_id

    def __str__(self) -> str:
        return f"multicast group {self.group_id} ports {list(self.ports)}"


def format_match(name: str, v: FieldMatch) -> str:
    """Readable text of a match value: IPv4 fields (``ipv4_*``) dotted, ``eth_type`` hex, others decimal; a
    ternary with all bits cared for prints as its value alone (``10.0.0.1``), otherwise
    ``value&&&mask``; LPM as ``value/prefix_len``."""

    def val(x: int) -> str:
        if name.startswith("ipv4"):
            return str(ipaddress.IPv4Address(x))
        return f"{x:#06x}" if name == "eth_type" else str(x)

    if isinstance(v, Exact):
        return val(v.value)
    if isinstance(v, Lpm):
        return f"{val(v.value)}/{v.prefix_len}"
    if v.mask + 1 & v.mask == 0 and v.value <= v.mask:  # mask of all ones (of some width)
        return val(v.value)
    return f"{val(v.value)}&&&{v.mask:#x}"


Entity = TableEntry | ProfileMember | ProfileGroup | MulticastGroup


@dataclass(frozen=True)
class SwitchEntities:
    """Everything one switch should hold (or was read to hold)."""

    switch: str
    device_id: int
    entries: frozenset[TableEntry] = frozenset()
    members: frozenset[ProfileMember] = frozenset()
    groups: frozenset[ProfileGroup] = frozenset()
    multicast: frozenset[MulticastGroup] = frozenset()

    @property
    def count(self) -> int:
        return len(self.entries) + len(self.members) + len(self.groups) + len(self.multicast)

    def to_json(self) -> dict[str, Any]:
        """A deterministic JSON-able document (for golden files and ``aifabric p4 show``)."""

        def fm(name: str, v: FieldMatch) -> str:
            return format_match(name, v)

        def entry(e: TableEntry) -> dict[str, Any]:
            d: dict[str, Any] = {"table": e.table, "match": {k: fm(k, v) for k, v in e.match}}
            if e.priority:
                d["priority"] = e.priority
            if e.action is not None:
                d["action"] = e.action
                d["params"] = dict(e.params)
            elif e.member_id is not None:
                d["member_id"] = e.member_id
            else:
                d["group_id"] = e.group_id
            if e.origin:
                d["origin"] = e.origin
            return d

        return {
            "switch": self.switch,
            "device_id": self.device_id,
            "members": [{"profile": m.profile, "member_id": m.member_id, "action": m.action,
                         "params": dict(m.params)} for m in sorted(self.members)],
            "groups": [{"profile": g.profile, "group_id": g.group_id,
                        "member_ids": list(g.member_ids), "max_size": g.max_size}
                       for g in sorted(self.groups)],
            "multicast": [{"group_id": g.group_id, "ports": list(g.ports)}
                          for g in sorted(self.multicast)],
            "entries": [entry(e) for e in sorted(self.entries)],
        }
