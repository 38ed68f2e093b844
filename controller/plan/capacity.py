"""Switch table capacity: how many entries each switch holds, and what to do when pinning needs more.

Per-flow pinning at scale can overflow switch tables (a fat-tree edge switch under a 256-rank
all-to-all carries thousands of pinned flows). The planner knows each switch's capacity
(:class:`TableCapacity`) from

* the P4 program's P4Info (``size`` of the ``pinned`` and ``routes`` tables,
  :func:`p4info_table_sizes`; P4Runtime spec v1.3, §6.4 "Table": the size is the minimum number
  of entries the target guarantees);
* OpenFlow table features (``max_entries`` of table 0 in the ``OFPMP_TABLE_FEATURES`` reply,
  OpenFlow 1.3.5 §7.3.5.5.1), passed in by whoever talked to the switch
  (:func:`capacity_from_openflow`);
* the policy's ``tables`` section (an override, :class:`controller.policy.model.TableLimits`),
  which wins over both.

:func:`fit_tables` then, only on a switch whose pinned entries do not fit (its capacity minus
``headroom``, the entries kept free so make-before-break moves can hold two paths at once):

1. drops the pinned entries that repeat what the switch's route entry does anyway (the route to
   the flow's destination leaves by the same single port — every hop after a Clos path's peak);
2. merges the pinned entries towards one destination that all leave by the same port into one
   entry matching only ``ipv4_dst`` (safe: that port is on a shortest path to the destination,
   so any packet sent there still only gets closer);
3. if the switch still overflows, lets the least important flows fall back to ECMP — every
   entry of such a flow is removed, on every switch — least important first (collectives in
   policy order, most important first; within one, the last flow first), and says which
   switch overflowed, how many entries it needed, and which flows fell back.

Nothing is ever written that the switch cannot hold: the runtime sees the plan that fits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from controller.model.topology import Fabric
from controller.plan.model import ETH_TYPE_IPV4, PRIO_PINNED, FlowIntent, Match
from controller.te.collectives import FlowDemand
from controller.te.placement import Placement

P4_PINNED_TABLE = "FabricIngress.pinned"
P4_ROUTES_TABLE = "FabricIngress.routes"
DEFAULT_HEADROOM = 8
"""Entries kept free on every switch for make-before-break moves in flight
(:mod:`controller.te.recovery`: each move holds both paths' entries for a moment)."""


@dataclass(frozen=True)
class TableCapacity:
    """Entries one switch can hold (None: unknown / not limited).

    Attributes
    ----------
    pinned_entries : int or None
        The pinned-flow table (P4: ``pinned``'s size).
    route_entries : int or None
        The route table (P4: ``routes``'s size).
    total_entries : int or None
        One table shared by control, route and pinned entries (OpenFlow table 0).
    source : str
        Where the numbers come from (for messages).
    """

    pinned_entries: int | None = None
    route_entries: int | None = None
    total_entries: int | None = None
    source: str = "unknown"

    def pinned_room(self, routes: int, control: int) -> int | None:
        """Entries left for pinned flows (None: unlimited)."""
        room = [x for x in (self.pinned_entries,
                            None if self.total_entries is None
                            else self.total_entries - routes - control) if x is not None]
        return min(room) if room else None


def p4info_table_sizes(text: str) -> dict[str, int]:
    """Table name → ``size`` from a P4Info in protobuf text format (``*.p4info.txtpb``).

    A small reader of the text format's nesting (``tables { preamble { name: ... } size: N
    }``): no protobuf classes needed, so the pure core stays free of P4Runtime libraries.

    Raises
    ------
    ValueError
        A ``tables`` block without a name, or braces that do not balance.

    Examples
    --------
    >>> p4info_table_sizes('tables { preamble { id: 1 name: "I.pinned" } size: 4096 }')
    {'I.pinned': 4096}
    """
    text = re.sub(r"#[^\n]*", "", text)
    tokens = re.findall(r'"(?:[^"\\]|\\.)*"|[{}:]|[A-Za-z_][\w.]*|-?\d+(?:\.\d+)?', text)
    out: dict[str, int] = {}
    stack: list[str] = []
    table: dict[str, object] | None = None
    key = ""
    after_colon = False
    for tok in tokens:
        if tok == ":":
            after_colon = True
            continue
        if tok == "{":
            stack.append(key)
            if stack == ["tables"]:
                table = {}
            after_colon = False
            continue
        if tok == "}":
            if not stack:
                raise ValueError("P4Info: unbalanced '}'")
            closed = stack.pop()
            if not stack and closed == "tables" and table is not None:
                name = table.get("name")
                if not isinstance(name, str):
                    raise ValueError("P4Info: a table without a name")
                out[name] = int(table.get("size", 0))  # type: ignore[call-overload]
                table = None
            continue
        if not after_colon:
            key = tok  # a field name (of a value or of a block)
            continue
        after_colon = False
        if table is not None:
            if stack == ["tables", "preamble"] and key == "name":
                table["name"] = tok.strip('"')
            elif stack == ["tables"] and key == "size":
                table["size"] = int(tok)
    if stack:
        raise ValueError("P4Info: unbalanced '{'")
    return out


def capacity_from_p4info(text: str, source: str = "P4Info") -> TableCapacity:
    """The capacity of a switch running the fabric program of this P4Info (``pinned`` and
    ``routes`` sizes). Raises ValueError when the P4Info has no ``pinned`` table."""
    sizes = p4info_table_sizes(text)
    if P4_PINNED_TABLE not in sizes:
        raise ValueError(f"P4Info has no table {P4_PINNED_TABLE} (tables: {', '.join(sizes)})")
    return TableCapacity(pinned_entries=sizes[P4_PINNED_TABLE],
                         route_entries=sizes.get(P4_ROUTES_TABLE), source=source)


def capacity_from_openflow(max_entries: Mapping[str, int]) -> dict[str, TableCapacity]:
    """Per switch: table 0's ``max_entries`` from the switch's table features, as the one table
    every entry of the plan goes to."""
    return {sw: TableCapacity(total_entries=int(n), source="OpenFlow table features")
            for sw, n in max_entries.items()}


def capacities(fabric: Fabric, *, default: TableCapacity | None = None,
               per_switch: Mapping[str, TableCapacity] | None = None,
               policy_tables: object | None = None) -> dict[str, TableCapacity]:
    """Every switch's capacity: ``default``, then ``per_switch`` (e.g. from OpenFlow table
    features), then the policy's ``tables`` section (``TableLimits``) over both.

    Raises
    ------
    KeyError
        The policy or ``per_switch`` names a switch the fabric does not have.
    """
    out = {s.name: default or TableCapacity() for s in fabric.switches}
    for sw, cap in (per_switch or {}).items():
        if sw not in out:
            raise KeyError(f"no switch {sw!r} in fabric {fabric.name!r}")
        out[sw] = cap
    if policy_tables is not None:
        for sw in out:
            lim = policy_tables.limits_for(sw)  # type: ignore[attr-defined]
            if lim is None:
                continue
            pinned, routes, total = lim
            base = out[sw]
            out[sw] = TableCapacity(
                pinned if pinned is not None else base.pinned_entries,
                routes if routes is not None else base.route_entries,
                total if total is not None else base.total_entries,
                "policy tables" if any(x is not None for x in lim) else base.source)
        unknown = [sw for sw in policy_tables.switch_names() if sw not in out]  # type: ignore[attr-defined]
        if unknown:
            raise KeyError(f"policy tables: no switch {unknown[0]!r} in fabric {fabric.name!r}")
    return out


@dataclass(frozen=True)
class SwitchTables:
    """Table use of one switch in a fitted plan.

    ``pinned_needed``: pinned entries before any merging; ``pinned``: after; ``routes`` and
    ``control``: the other entries; ``room``: entries available to pinned flows (None:
    unlimited; headroom already taken off)."""

    switch: str
    pinned_needed: int
    pinned: int
    routes: int
    control: int
    capacity: TableCapacity
    room: int | None

    @property
    def fits(self) -> bool:
        return self.room is None or self.pinned <= self.room


@dataclass(frozen=True)
class CapacityReport:
    """What :func:`fit_tables` did: per-switch use, the flows that fell back to ECMP, and one
    message per switch that needed merging or fallback."""

    switches: Mapping[str, SwitchTables]
    fallback: tuple[FlowDemand, ...] = ()
    notes: tuple[str, ...] = ()
    merged: Mapping[str, int] = field(default_factory=dict)

    def largest(self) -> SwitchTables | None:
        """The switch with the most pinned entries (ties: name order)."""
        if not self.switches:
            return None
        return max(self.switches.values(), key=lambda s: (s.pinned, s.switch))


def fit_tables(
    fabric: Fabric,
    paths: Mapping[FlowDemand, Sequence[str]],
    pinned: Mapping[str, Mapping[Match, FlowIntent]],
    route_ports: Mapping[str, Mapping[str, tuple[int, ...]]],
    capacity: Mapping[str, TableCapacity],
    match_of: Callable[[FlowDemand], Match],
    *,
    control_entries: int | Mapping[str, int] = 1,
    headroom: int = DEFAULT_HEADROOM,
    importance: Sequence[str] = (),
) -> tuple[dict[str, dict[Match, FlowIntent]], CapacityReport]:
    """Fit the pinned entries of every switch into its table (module docstring).

    Parameters
    ----------
    fabric : Fabric
    paths : mapping of FlowDemand to sequence of str
        Pinned path of every flow (host … host), in planning order.
    pinned : mapping of str to mapping of Match to FlowIntent
        Switch → its pinned entries, by match (as the plan builder made them).
    route_ports : mapping of str to mapping of str to tuple of int
        Switch → destination host → ECMP ports of its route entry (:func:`ecmp_next_hops`).
    capacity : mapping of str to TableCapacity
        Every switch's capacity (:func:`capacities`).
    match_of : callable
        A flow's pinned match (:func:`controller.plan.build.pinned_match`).
    control_entries : int or mapping of str to int
        Entries every switch holds besides routes and pinned flows (LLDP to the controller;
        on an edge switch also its ARP responder, one entry per host): one number for every
        switch, or per switch (a switch left out: 1).
    headroom : int
        Entries kept free for make-before-break moves.
    importance : sequence of str
        Collective names, most important first (flows of unlisted collectives come last).

    Returns
    -------
    (dict of str to dict of Match to FlowIntent, CapacityReport)
        The pinned entries that fit, per switch, and what was done.
    """
    out = {sw: dict(entries) for sw, entries in pinned.items()}
    users: dict[tuple[str, Match], set[FlowDemand]] = {}
    where: dict[FlowDemand, list[tuple[str, Match]]] = {}
    for d, path in paths.items():
        m = match_of(d)
        for node in path[1:-1]:
            users.setdefault((node, m), set()).add(d)
            where.setdefault(d, []).append((node, m))
    rank = {name: i for i, name in enumerate(importance)}
    # larger = less important: later collectives, later flows, later sub-flows
    order = {d: (rank.get(d.collective, len(rank)), d.collective, d.index, d.subflow)
             for d in paths}
    needed = {sw: len(out.get(sw, {})) for sw in capacity}
    control = {sw: control_entries if isinstance(control_entries, int)
               else control_entries.get(sw, 1) for sw in capacity}
    room = {sw: capacity[sw].pinned_room(len(route_ports.get(sw, {})), control[sw])
            for sw in capacity}
    room = {sw: None if r is None else max(r - headroom, 0) for sw, r in room.items()}
    notes: list[str] = []
    merged: dict[str, int] = {}
    fallback: list[FlowDemand] = []
    host_ip = {h.ipv4: h.name for h in fabric.hosts}
    for sw in sorted(capacity, key=lambda s: (-needed[s], s)):
        r = room[sw]
        entries = out.get(sw, {})
        if r is None or len(entries) <= r:
            continue
        before = len(entries)
        ports = route_ports.get(sw, {})
        for m, fi in list(entries.items()):  # 1: what the route entry does anyway
            dst = host_ip.get(m.ipv4_dst or "")
            if dst is not None and fi.action.kind == "output" and ports.get(dst) == (fi.action.port,):
                del entries[m]
        if len(entries) > r:  # 2: one entry per destination whose flows share a port
            by_dst: dict[str, list[Match]] = {}
            for m in entries:
                by_dst.setdefault(m.ipv4_dst or "", []).append(m)
            for ip, ms in by_dst.items():
                acts = {entries[m].action for m in ms}
                if len(ms) > 1 and len(acts) == 1 and ip:
                    act = acts.pop()
                    dm = Match(eth_type=ETH_TYPE_IPV4, ipv4_dst=ip)
                    for m in ms:
                        del entries[m]
                    entries[dm] = FlowIntent(0, PRIO_PINNED, dm, act,
                                             f"pin merged dst {host_ip.get(ip, ip)}")
                    for m in ms:
                        users.setdefault((sw, dm), set()).update(users.get((sw, m), set()))
        merged[sw] = before - len(entries)
        dropped: list[FlowDemand] = []
        if len(entries) > r:  # 3: least important flows fall back to ECMP
            def weight(m: Match, sw: str = sw) -> tuple[object, ...]:
                """An entry matters as much as the most important flow using it."""
                who = users.get((sw, m), set())
                return min(order[d] for d in who) if who else (-1,)

            ranked = sorted(entries, key=weight, reverse=True)
            for m in ranked:
                if len(entries) <= r:
                    break
                gone = users.get((sw, m), set())
                del entries[m]
                for d in sorted(gone, key=lambda x: order[x], reverse=True):
                    if d in fallback:
                        continue
                    fallback.append(d)
                    dropped.append(d)
                    for node, mm in where.get(d, ()):
                        others = users.get((node, mm), set()) - {d}
                        users[(node, mm)] = others
                        if not others and mm in out.get(node, {}):
                            del out[node][mm]
        msg = (f"switch {sw}: {before} pinned entries, room for {r} "
               f"({capacity[sw].source}, {headroom} kept free for moves)")
        if merged[sw]:
            msg += f"; merging left {before - merged[sw]}"
        if dropped:
            names = ", ".join(d.label for d in dropped[:5]) + (" …" if len(dropped) > 5 else "")
            msg += f"; {len(dropped)} least important flows fall back to ECMP: {names}"
        notes.append(msg)
    switches = {
        sw: SwitchTables(sw, needed[sw], len(out.get(sw, {})), len(route_ports.get(sw, {})),
                         control[sw], capacity[sw], room[sw])
        for sw in capacity
    }
    return out, CapacityReport(switches, tuple(fallback), tuple(notes), merged)



def pinned_entries_per_switch(placement: Placement, *, up_only: bool = False) -> np.ndarray:
    """Pinned entries every switch needs for a placement, without building the plan.

    Parameters
    ----------
    placement : Placement
    up_only : bool
        Count only the switches where a path climbs (its source leaf and every switch before
        its peak): on a Clos every later hop has one shortest-path port to the destination,
        which its route entry already takes, so step 1 of :func:`fit_tables` drops those.

    Returns
    -------
    numpy.ndarray of int64, shape (n_switches,)
        Entries per switch, in fabric switch order (entries of one flow counted once per switch).
    """
    idx = placement.index
    tail, head, _, names = idx.link_ends()
    n_sw = len(idx.fabric.switches)
    tier = idx.fabric_memo("node-tiers", lambda: np.asarray(
        [s.tier for s in idx.fabric.switches] + [0] * (len(names) - n_sw), dtype=np.int64))
    assert isinstance(tier, np.ndarray)
    ids = placement.ids
    lengths = np.diff(placement.starts)
    pos = np.arange(len(ids)) - np.repeat(placement.starts[:-1], lengths)
    sel = pos > 0  # a flow's entries: at the tail of every link but its first (the host's)
    if up_only:
        sel &= tier[head[ids]] > tier[tail[ids]]
    nodes = tail[ids[sel]]
    return np.bincount(nodes[nodes < n_sw], minlength=n_sw).astype(np.int64)


def describe(report: CapacityReport, limit: int = 10) -> list[str]:
    """Lines for ``plan show``: the largest tables first, then the notes."""
    rows = sorted(report.switches.values(), key=lambda s: (-s.pinned, s.switch))[:limit]
    lines = [f"{s.switch}: {s.pinned} pinned / {'unlimited' if s.room is None else s.room} "
             f"({s.capacity.source})" for s in rows]
    return lines + list(report.notes)


def iter_fallback_labels(report: CapacityReport) -> Iterable[str]:
    return (d.label for d in report.fallback)
