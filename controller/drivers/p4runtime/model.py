"""A Python model of fabric.p4's ingress forwarding over :class:`~.entities.SwitchEntities`.

The P4 analogue of :mod:`controller.testing.fakeoftable`: tests push encoded entities into it
and ask where a packet goes, then trace every host pair across the fabric. The BMv2 tests send
the same packets through the real program and check it agrees with this model, so the model is
itself tested against the target.

Semantics (fabric.p4 ``FabricIngress.apply``): ``punt`` hit → controller; non-IPv4 → drop;
``pinned`` (highest priority matching entry) → its port or drop; else ``routes`` (longest
prefix) → its member's port, or the set of its group's members' ports (the action selector's
hash picks one; the model returns all); no route → drop.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.drivers.p4runtime.entities import (
    Exact,
    FieldMatch,
    Lpm,
    SwitchEntities,
    TableEntry,
    Ternary,
)

CONTROLLER = "controller"
DROP = "drop"


@dataclass(frozen=True)
class Packet:
    """Header fields the ingress looks at (absent L4: ports 0, as the parser leaves them)."""

    eth_type: int
    ipv4_src: int = 0
    ipv4_dst: int = 0
    ip_proto: int = 0
    dscp: int = 0
    l4_src: int = 0
    l4_dst: int = 0


def _hits(fm: FieldMatch, width: int, v: int) -> bool:
    if isinstance(fm, Exact):
        return v == fm.value
    if isinstance(fm, Ternary):
        return v & fm.mask == fm.value
    assert isinstance(fm, Lpm)
    shift = width - fm.prefix_len
    return v >> shift == fm.value >> shift


_WIDTH = {"eth_type": 16, "ipv4_src": 32, "ipv4_dst": 32, "ip_proto": 8, "dscp": 6,
          "l4_src": 16, "l4_dst": 16}


def _matches(e: TableEntry, pkt: Packet) -> bool:
    return all(_hits(fm, _WIDTH[k], getattr(pkt, k)) for k, fm in e.match)


def forward(state: SwitchEntities, pkt: Packet) -> str | frozenset[int]:
    """Where ``pkt`` goes: :data:`CONTROLLER`, :data:`DROP`, or the set of possible egress ports.

    Raises
    ------
    LookupError
        A route points at a member or group the state lacks (the switch would refuse it).
    """
    by_table: dict[str, list[TableEntry]] = {}
    for e in state.entries:
        by_table.setdefault(e.table, []).append(e)
    if any(_matches(e, pkt) for e in by_table.get("punt", ())):
        return CONTROLLER
    if pkt.eth_type != 0x0800:
        return DROP
    pinned = [e for e in by_table.get("pinned", ()) if _matches(e, pkt)]
    if pinned:
        best = max(pinned, key=lambda e: e.priority)
        return DROP if best.action == "drop" else frozenset([dict(best.params)["port"]])
    routes = [e for e in by_table.get("routes", ()) if _matches(e, pkt)]
    if not routes:
        return DROP
    best = max(routes, key=lambda e: dict(e.match)["ipv4_dst"].prefix_len)  # type: ignore[union-attr]
    members = {m.member_id: dict(m.params)["port"] for m in state.members}
    if best.member_id is not None:
        if best.member_id not in members:
            raise LookupError(f"{state.switch}: {best} points at a missing member")
        return frozenset([members[best.member_id]])
    groups = {g.group_id: g for g in state.groups}
    if best.group_id not in groups:
        raise LookupError(f"{state.switch}: {best} points at a missing group")
    return frozenset(members[m] for m in groups[best.group_id].member_ids)
