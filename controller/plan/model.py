"""Per-switch forwarding intent, independent of OpenFlow or P4, and its diff.

A :class:`FabricPlan` maps each switch name to a :class:`SwitchPlan`: a set of :class:`FlowIntent`
(match → one action) and a set of :class:`GroupIntent` (ECMP next-hop sets). Drivers encode these;
:func:`diff_plans` tells what to add, modify and delete to go from one plan to the next, so a
recomputation reprograms only what changed.

Priorities (higher wins): :data:`PRIO_CONTROL` (ARP/LLDP to the controller) >
:data:`PRIO_PINNED` (per-collective pinned flows) > :data:`PRIO_ROUTE` (per-destination
ECMP/route) > table-miss (drop).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

PRIO_CONTROL = 1000
PRIO_PINNED = 500
PRIO_ROUTE = 100

ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_ARP = 0x0806
ETH_TYPE_LLDP = 0x88CC
IP_PROTO_TCP = 6
IP_PROTO_UDP = 17
OFPG_MAX = 0xFFFFFF00  # first reserved OpenFlow group id


@dataclass(frozen=True, order=True)
class Match:
    """Header fields to match; ``None`` means wildcard. IPv4 addresses are dotted strings,
    ``ip_dscp`` is the 6-bit DSCP (0–63), ``l4_src``/``l4_dst`` need ``ip_proto`` (6 or 17)."""

    eth_type: int | None = None
    ipv4_src: str | None = None
    ipv4_dst: str | None = None
    ip_proto: int | None = None
    ip_dscp: int | None = None
    l4_src: int | None = None
    l4_dst: int | None = None

    def fields(self) -> dict[str, int | str]:
        """The non-wildcard fields as a dict (for encoders and printing)."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True, order=True)
class Action:
    """One forwarding action: ``output`` to ``port``, to ECMP ``group`` ``group_id``, or to the
    ``controller`` (packet-in)."""

    kind: Literal["output", "group", "controller", "drop"]
    arg: int = 0

    def __str__(self) -> str:
        return {"output": f"output:{self.arg}", "group": f"group:{self.arg}"}.get(
            self.kind, self.kind
        )


@dataclass(frozen=True, order=True)
class FlowIntent:
    """A flow entry: in ``table``, at ``priority``, ``match`` → ``action``.

    ``origin`` says why the entry exists ("route h3", "pin ring-a h1->h3"); it is carried for logs
    and is not part of the entry's identity for diffing (the key is table, priority, match).
    """

    table: int
    priority: int
    match: Match
    action: Action
    origin: str = field(default="", compare=False)

    @property
    def key(self) -> tuple[int, int, Match]:
        return (self.table, self.priority, self.match)


@dataclass(frozen=True, order=True)
class GroupIntent:
    """An ECMP group: ``select`` over ``ports`` (sorted, each bucket weight 1)."""

    group_id: int
    ports: tuple[int, ...]
    kind: Literal["select"] = "select"


@dataclass(frozen=True)
class SwitchPlan:
    """Everything one switch should hold."""

    switch: str
    dpid: int
    flows: frozenset[FlowIntent]
    groups: frozenset[GroupIntent]


@dataclass(frozen=True)
class FabricPlan:
    """The intended state of every switch, keyed by switch name."""

    switches: Mapping[str, SwitchPlan]


@dataclass(frozen=True)
class SwitchChanges:
    """What to send one switch. Apply in this order: add/modify groups, add/modify flows,
    delete flows, delete groups (so no flow ever points at a missing group)."""

    switch: str
    add_groups: tuple[GroupIntent, ...] = ()
    modify_groups: tuple[GroupIntent, ...] = ()
    delete_groups: tuple[GroupIntent, ...] = ()
    add_flows: tuple[FlowIntent, ...] = ()
    modify_flows: tuple[FlowIntent, ...] = ()
    delete_flows: tuple[FlowIntent, ...] = ()

    @property
    def empty(self) -> bool:
        return not (
            self.add_groups or self.modify_groups or self.delete_groups
            or self.add_flows or self.modify_flows or self.delete_flows
        )

    @property
    def count(self) -> int:
        return sum(
            len(x)
            for x in (self.add_groups, self.modify_groups, self.delete_groups,
                      self.add_flows, self.modify_flows, self.delete_flows)
        )


def group_id_for_ports(ports: tuple[int, ...] | frozenset[int]) -> int:
    """A stable group id for an ECMP port set: bit (p-1) set for each port p.

    Stable ids mean a recomputation that keeps a port set keeps its group, so the diff stays small.

    Raises
    ------
    ValueError
        A port outside 1..32, or a port set whose id would reach OpenFlow's reserved group ids
        (``OFPG_MAX`` = 0xFFFFFF00 and above; OpenFlow 1.3.5 §7.3.4.2), i.e. one holding every
        port 9..32.
    """
    gid = 0
    for p in ports:
        if not 1 <= p <= 32:
            raise ValueError(f"ECMP group port {p} outside 1..32")
        gid |= 1 << (p - 1)
    if gid >= OFPG_MAX:
        raise ValueError(
            f"ECMP group for ports {sorted(ports)} would get id {gid:#x}, which OpenFlow reserves "
            f"(>= {OFPG_MAX:#x})"
        )
    return gid


def diff_switch(old: SwitchPlan | None, new: SwitchPlan | None) -> SwitchChanges:
    """Changes that turn ``old`` into ``new`` (either may be None: switch added or removed)."""
    name = (new or old).switch  # type: ignore[union-attr]
    og = {g.group_id: g for g in (old.groups if old else ())}
    ng = {g.group_id: g for g in (new.groups if new else ())}
    of = {f.key: f for f in (old.flows if old else ())}
    nf = {f.key: f for f in (new.flows if new else ())}
    return SwitchChanges(
        switch=name,
        add_groups=tuple(sorted(ng[g] for g in ng.keys() - og.keys())),
        modify_groups=tuple(sorted(ng[g] for g in ng.keys() & og.keys() if ng[g] != og[g])),
        delete_groups=tuple(sorted(og[g] for g in og.keys() - ng.keys())),
        add_flows=tuple(sorted(nf[k] for k in nf.keys() - of.keys())),
        modify_flows=tuple(
            sorted(nf[k] for k in nf.keys() & of.keys() if nf[k].action != of[k].action)
        ),
        delete_flows=tuple(sorted(of[k] for k in of.keys() - nf.keys())),
    )


def diff_plans(old: FabricPlan | None, new: FabricPlan) -> dict[str, SwitchChanges]:
    """Per-switch changes from ``old`` (None: empty switches) to ``new``; unchanged switches omitted."""
    out: dict[str, SwitchChanges] = {}
    old_sw = old.switches if old else {}
    for name in sorted(set(old_sw) | set(new.switches)):
        ch = diff_switch(old_sw.get(name), new.switches.get(name))
        if not ch.empty:
            out[name] = ch
    return out
