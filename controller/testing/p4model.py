"""A Python model of fabric.p4's ingress forwarding over :class:`~controller.drivers.p4runtime.
entities.SwitchEntities`.

The P4 analogue of :mod:`controller.testing.fakeoftable`: tests push encoded entities into it
and ask where a packet goes, then trace every host pair across the fabric. The BMv2 tests send
the same packets through the real program and check it agrees with this model, so the model is
itself tested against the target.

Semantics (fabric.p4 ``FabricIngress.apply``): an ARP request whose ``arp_tpa`` has an
``arp_responder`` entry → back out of its ingress port, as the reply (:func:`arp_reply`);
``punt`` hit → controller; non-IPv4 → drop;
``pinned`` (highest priority matching entry) → its port or drop; else ``routes`` (longest
prefix) → its member's port, or the set of its group's members' ports (the action selector's
hash picks one; :func:`forward` returns all, :func:`forward_hashed` the one fabric.p4's hash
picks); no route → drop.

The ECMP hash (:func:`ecmp_hash_value`) is fabric.p4's: ``fmix32(crc32(seed, fields & masks))``
with the seed and masks of the ``ecmp_hash`` entry (or the program's default: 5-tuple, seed 0).
crc32 is BMv2's (reflected 0x04C11DB7, init and final XOR 0xFFFFFFFF: zlib's) over the fields
concatenated big-endian in :data:`~controller.drivers.p4runtime.pipeline.HASH_FIELD_BITS`
order; fmix32 is MurmurHash3's finaliser (Appleby, smhasher, ``MurmurHash3.cpp``). BMv2's
action selector takes the member of rank ``hash mod group size`` among the group's member
handles; :func:`forward_hashed` assumes handles ascend with member ids (true when the members
were inserted in id order, as :mod:`controller.drivers.p4runtime.reconcile` writes them into an
empty profile).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from controller.drivers.p4runtime.entities import (
    Exact,
    FieldMatch,
    Lpm,
    SwitchEntities,
    TableEntry,
    Ternary,
)
from controller.drivers.p4runtime.pipeline import ACTIONS, HASH_FIELD_BITS

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
    eth_src: int = 0
    eth_dst: int = 0
    arp_op: int = 0
    arp_tpa: int = 0
    in_port: int = 0


def _hits(fm: FieldMatch, width: int, v: int) -> bool:
    if isinstance(fm, Exact):
        return v == fm.value
    if isinstance(fm, Ternary):
        return v & fm.mask == fm.value
    assert isinstance(fm, Lpm)
    shift = width - fm.prefix_len
    return v >> shift == fm.value >> shift


_WIDTH = {"eth_type": 16, "eth_src": 48, "eth_dst": 48, "ipv4_src": 32, "ipv4_dst": 32,
          "ip_proto": 8, "dscp": 6, "l4_src": 16, "l4_dst": 16, "arp_tpa": 32}
ETH_TYPE_ARP = 0x0806
ARP_OP_REQUEST = 1


def arp_reply(state: SwitchEntities, pkt: Packet) -> int | None:
    """The MAC (48-bit integer) the switch answers the ARP request ``pkt`` with, or None when
    ``pkt`` is not a request or no ``arp_responder`` entry holds its ``arp_tpa``. The reply
    leaves by ``pkt.in_port`` (fabric.p4's ``arp_reply``)."""
    if pkt.eth_type != ETH_TYPE_ARP or pkt.arp_op != ARP_OP_REQUEST:
        return None
    for e in state.entries:
        if e.table == "arp_responder" and _matches(e, pkt):
            return int(dict(e.params)["mac"])
    return None


def _matches(e: TableEntry, pkt: Packet) -> bool:
    return all(_hits(fm, _WIDTH[k], getattr(pkt, k)) for k, fm in e.match)


def forward(state: SwitchEntities, pkt: Packet) -> str | frozenset[int]:
    """Where ``pkt`` goes: :data:`CONTROLLER`, :data:`DROP`, or the set of possible egress ports.

    Raises
    ------
    LookupError
        A route points at a member or group the state lacks (the switch would refuse it).
    """
    if arp_reply(state, pkt) is not None:
        return frozenset([pkt.in_port])
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
        # pin_egress_protected forwards to its planned port while that port hears probes
        # (the model has no clock: liveness is the data plane's, tested on BMv2)
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


_M32 = 0xFFFFFFFF
#: fabric.p4's ``ecmp_hash`` default action: the 5-tuple, seed 0.
DEFAULT_HASH_PARAMS: dict[str, int] = {
    "seed": 0, "eth_src_mask": 0, "eth_dst_mask": 0, "ipv4_src_mask": _M32,
    "ipv4_dst_mask": _M32, "ip_proto_mask": 0xFF, "l4_src_mask": 0xFFFF, "l4_dst_mask": 0xFFFF,
}


def fmix32(x: int) -> int:
    """MurmurHash3's 32-bit finaliser (fabric.p4 applies it to the crc32).

    >>> hex(fmix32(0)), hex(fmix32(1))
    ('0x0', '0x514e28b7')
    """
    x ^= x >> 16
    x = x * 0x85EBCA6B & _M32
    x ^= x >> 13
    x = x * 0xC2B2AE35 & _M32
    return x ^ x >> 16


def ecmp_hash_value(state: SwitchEntities, pkt: Packet) -> int:
    """The 32-bit value fabric.p4's action selector uses for ``pkt`` on a switch holding
    ``state`` (module docstring)."""
    hits = [e for e in state.entries if e.table == "ecmp_hash" and _matches(e, pkt)]
    params = dict(max(hits, key=lambda e: e.priority).params) if hits else DEFAULT_HASH_PARAMS
    assert set(params) == {p for p, _ in ACTIONS["set_hash"]}, params
    data = params["seed"].to_bytes(4, "big")
    for name, width in HASH_FIELD_BITS.items():
        data += (getattr(pkt, name) & params[f"{name}_mask"]).to_bytes(width // 8, "big")
    return fmix32(zlib.crc32(data))


def forward_hashed(state: SwitchEntities, pkt: Packet) -> str | int:
    """Like :func:`forward`, but an ECMP group yields the one port fabric.p4 picks for ``pkt``
    (:func:`ecmp_hash_value` mod the group size, members in id order)."""
    out = forward(state, pkt)
    if isinstance(out, str) or len(out) == 1:
        return out if isinstance(out, str) else next(iter(out))
    hits = [e for e in state.entries if e.table == "pinned" and _matches(e, pkt)]
    assert not hits  # a pinned entry yields one port
    route = max((e for e in state.entries if e.table == "routes" and _matches(e, pkt)),
                key=lambda e: dict(e.match)["ipv4_dst"].prefix_len)  # type: ignore[union-attr]
    group = next(g for g in state.groups if g.group_id == route.group_id)
    members = {m.member_id: dict(m.params)["port"] for m in state.members}
    ids = sorted(group.member_ids)
    return members[ids[ecmp_hash_value(state, pkt) % len(ids)]]
