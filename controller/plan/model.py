"""Per-switch forwarding intent, independent of OpenFlow or P4, and its diff.

A :class:`FabricPlan` maps each switch name to a :class:`SwitchPlan`: a set of
:class:`FlowIntent` (match → one action). An action sends to a port, to the controller, drops,
answers an ARP request in the data plane (:class:`ArpReply`), or forwards by a
:class:`NextHopSet` carried **by value**: "ECMP over ports (3, 4) hashing these
fields with this seed", or "fast failover: port 3, else 4". Nothing here names a group id,
a member id or a port bitmask, and no port number is too large: drivers allocate their own ids
for each distinct next-hop set (an OpenFlow group, a P4 action-profile group) and rebuild that
allocation from what they read back.

:func:`diff_plans` tells what to add, modify and delete to go from one plan to the next, so a
recomputation reprograms only what changed; :meth:`SwitchChanges.inverse` undoes a change (a
transaction's rollback) and :meth:`SwitchChanges.apply_to` replays it on a plan.

Priorities (higher wins): :data:`PRIO_ARP_REPLY` (ARP requests for fabric hosts, answered by
the switch) > :data:`PRIO_CONTROL` (LLDP to the controller) > :data:`PRIO_PINNED`
(per-collective pinned flows) > :data:`PRIO_ROUTE` (per-destination ECMP/route) > table-miss
(drop).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

PRIO_ARP_REPLY = 1100
PRIO_CONTROL = 1000
PRIO_PINNED = 500
PRIO_ROUTE = 100

ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_ARP = 0x0806
ETH_TYPE_LLDP = 0x88CC
IP_PROTO_TCP = 6
IP_PROTO_UDP = 17
ARP_OP_REQUEST = 1
ARP_OP_REPLY = 2

HASH_FIELD_NAMES = ("eth_src", "eth_dst", "ipv4_src", "ipv4_dst", "ip_proto", "l4_src", "l4_dst")
"""Header fields an ECMP hash may cover (the policy's ``routing.ecmp.hash_fields``)."""
DEFAULT_HASH_FIELDS = ("ipv4_src", "ipv4_dst", "ip_proto", "l4_src", "l4_dst")
"""The 5-tuple (TCP and UDP ports): the policy's default ``hash_fields``, and what fabric.p4's
``ecmp_hash`` default action hashes (seed 0). Open vSwitch's default select method is not this:
``dp_hash`` over a symmetric L3/L4 hash that leaves UDP ports out (ovs-ofctl(8) "Group Syntax";
measured by the ``ecmp_spread`` lab), so the plan asks for the hash explicitly."""


_MATCH_FIELDS = ("eth_type", "ipv4_src", "ipv4_dst", "ip_proto", "ip_dscp", "l4_src", "l4_dst",
                 "arp_op", "arp_tpa")


@dataclass(frozen=True, order=True)
class Match:
    """Header fields to match; ``None`` means wildcard. IPv4 addresses are dotted strings,
    ``ip_dscp`` is the 6-bit DSCP (0–63), ``l4_src``/``l4_dst`` need ``ip_proto`` (6 or 17);
    ``arp_op`` (1 request, 2 reply) and ``arp_tpa`` (the target protocol address, dotted) need
    ``eth_type`` 0x0806 (RFC 826)."""

    eth_type: int | None = None
    ipv4_src: str | None = None
    ipv4_dst: str | None = None
    ip_proto: int | None = None
    ip_dscp: int | None = None
    l4_src: int | None = None
    l4_dst: int | None = None
    arp_op: int | None = None
    arp_tpa: str | None = None

    def fields(self) -> dict[str, int | str]:
        """The non-wildcard fields as a dict (for encoders and printing)."""
        return {k: v for k in _MATCH_FIELDS if (v := getattr(self, k)) is not None}

    def sort_key(self) -> tuple[tuple[int, int | str], ...]:
        """A total order over matches (wildcards first in each field); computed once per
        object, like the hash."""
        try:
            return self.__dict__["_sort"]
        except KeyError:
            got = self.__dict__["_sort"] = tuple(
                (0, 0) if v is None else (1, v) for v in (getattr(self, k) for k in _MATCH_FIELDS))
            return got

    def __hash__(self) -> int:
        """The hash of the fields, computed once per object and kept in its ``__dict__``
        (entries are keyed and set-ed by match hundreds of thousands of times at k = 16; the
        dataclass's own hash re-hashes nine fields on every call). Not pickled
        (:meth:`__getstate__`): string hashes differ between processes."""
        try:
            return self.__dict__["_hash"]
        except KeyError:
            got = self.__dict__["_hash"] = hash((
                self.eth_type, self.ipv4_src, self.ipv4_dst, self.ip_proto, self.ip_dscp,
                self.l4_src, self.l4_dst, self.arp_op, self.arp_tpa))
            return got

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state.pop("_hash", None)
        state.pop("_sort", None)
        return state

    def __str__(self) -> str:
        return ",".join(f"{k}={v:#06x}" if k == "eth_type" and isinstance(v, int) else f"{k}={v}"
                        for k, v in self.fields().items()) or "any"


@dataclass(frozen=True, order=True)
class EcmpHash:
    """What an ECMP next-hop set hashes: ``fields`` (names of :data:`HASH_FIELD_NAMES`; kept in
    that canonical order, since a hash covers a set of fields) and a 32-bit ``seed`` (the
    switch's hash basis, :mod:`controller.plan.hashing`).

    Raises
    ------
    ValueError
        No field, an unknown or repeated field, or a seed outside 0..2**32-1.
    """

    fields: tuple[str, ...]
    seed: int = 0

    def __post_init__(self) -> None:
        unknown = [f for f in self.fields if f not in HASH_FIELD_NAMES]
        if not self.fields or unknown or len(set(self.fields)) != len(self.fields):
            raise ValueError(f"ECMP hash fields {list(self.fields)}: expected distinct names "
                             f"from {list(HASH_FIELD_NAMES)}")
        if not 0 <= self.seed < 1 << 32:
            raise ValueError(f"ECMP hash seed {self.seed} outside 0..2**32-1")
        object.__setattr__(self, "fields",
                           tuple(f for f in HASH_FIELD_NAMES if f in self.fields))

    def __str__(self) -> str:
        return f"hash({'+'.join(self.fields)} seed {self.seed})"


@dataclass(frozen=True, order=True)
class LivenessTimers:
    """How a switch that learns port liveness from probes (a P4 switch: no port status) judges
    a port, for its failover sets: a port is **dead** once it has heard no probe for
    ``timeout_us``, and a port whose probes came back after such a silence is used again only
    ``hold_us`` later (hold-down: a flapping link does not move traffic back and forth).
    The controller's own liveness (:mod:`controller.runtime.liveness`) uses the same numbers:
    ``timeout_us`` = misses × interval, ``hold_us`` = its hold time.

    Raises
    ------
    ValueError
        ``timeout_us`` outside 1..2**32-1 or ``hold_us`` outside 0..2**32-1 (µs: the data
        plane keeps 32-bit parameters).
    """

    timeout_us: int
    hold_us: int

    def __post_init__(self) -> None:
        if not 1 <= self.timeout_us < 1 << 32 or not 0 <= self.hold_us < 1 << 32:
            raise ValueError(f"liveness timeout {self.timeout_us} us / hold {self.hold_us} us: "
                             "expected 1..2**32-1 and 0..2**32-1")

    def __str__(self) -> str:
        return f"dead after {self.timeout_us / 1e3:g} ms, hold {self.hold_us / 1e3:g} ms"


@dataclass(frozen=True, order=True)
class NextHopSet:
    """A set of egress ports one entry forwards by, as a value.

    ``kind`` ``"ecmp"``: every packet leaves by one of ``ports`` (ascending), chosen by a hash of
    its headers (``hash``; None: whatever the switch hashes unasked, which differs between
    targets: :data:`DEFAULT_HASH_FIELDS`);
    a switch skips ports that are down (OpenFlow 1.3.5 §5.6.1 ``watch_port``).
    ``kind`` ``"failover"``: ``ports`` in order of preference, the planned port first; the
    switch forwards by the first live one (OpenFlow fast-failover groups, §5.6.1). With
    ``bounce``, the last resort is the port the packet came in by: a hop with no other next
    hop (a spine towards a leaf) sends a packet whose planned port is dead back to the hop
    before it, which has an alternative and takes it (fabric.p4's header comment: P4
    switches only; an OpenFlow switch never drops a packet back out of its in-port by a
    failover group, §5.6.1). ``liveness``: how a probe-driven switch judges its ports
    (:class:`LivenessTimers`; None: the switch knows its ports' state, OpenFlow port status).

    Raises
    ------
    ValueError
        Fewer than two ports (one with ``bounce``), a repeated or non-positive port, ECMP
        ports not ascending, or a hash, ``bounce`` or ``liveness`` on the wrong kind of set.
    """

    kind: Literal["ecmp", "failover"]
    ports: tuple[int, ...]
    hash: EcmpHash | None = None
    bounce: bool = False
    liveness: LivenessTimers | None = None

    def __post_init__(self) -> None:
        least = 1 if self.bounce else 2
        if len(self.ports) < least or len(set(self.ports)) != len(self.ports):
            raise ValueError(f"a next-hop set needs >= {least} distinct ports, got {self.ports}")
        if any(p < 1 for p in self.ports):
            raise ValueError(f"next-hop set ports {self.ports}: ports are >= 1")
        if self.kind == "ecmp" and list(self.ports) != sorted(self.ports):
            raise ValueError(f"ECMP ports {self.ports} must be ascending")
        if self.kind == "failover" and self.hash is not None:
            raise ValueError("a failover set has no hash")
        if self.kind == "ecmp" and (self.bounce or self.liveness is not None):
            raise ValueError("bounce and liveness timers belong to failover sets")
        if self.kind not in ("ecmp", "failover"):
            raise ValueError(f"unknown next-hop set kind {self.kind!r}")

    def __str__(self) -> str:
        if self.kind == "failover":
            hops = ">".join(map(str, self.ports)) + (">in-port" if self.bounce else "")
            return f"failover({hops}" + (f"; {self.liveness}" if self.liveness else "") + ")"
        h = f" {self.hash}" if self.hash is not None else ""
        return "ecmp(" + ",".join(map(str, self.ports)) + h + ")"


@dataclass(frozen=True, order=True)
class ArpReply:
    """The answer a switch gives, by itself, to an ARP request for ``ipv4``: "``ipv4`` is at
    ``mac``" (RFC 826 "Packet Reception": the request turned into a reply — operation 2,
    sender = (``mac``, ``ipv4``), target = the requester's sender addresses — sent back out of
    the port it came in by, Ethernet destination the requester's source, source ``mac``).
    Values from the topology's host table; a switch answers with no controller.

    Raises
    ------
    ValueError
        ``ipv4`` not a dotted IPv4 address, ``mac`` not six colon-separated hex bytes.
    """

    ipv4: str
    mac: str

    def __post_init__(self) -> None:
        parts = self.ipv4.split(".")
        if len(parts) != 4 or not all(p.isdigit() and 0 <= int(p) <= 255 for p in parts):
            raise ValueError(f"ARP reply: {self.ipv4!r} is not a dotted IPv4 address")
        octets = self.mac.split(":")
        if len(octets) != 6 or not all(len(o) == 2 and all(c in "0123456789abcdefABCDEF"
                                                            for c in o) for o in octets):
            raise ValueError(f"ARP reply: {self.mac!r} is not a MAC address (aa:bb:cc:dd:ee:ff)")
        object.__setattr__(self, "mac", self.mac.lower())

    def __str__(self) -> str:
        return f"arp-reply({self.ipv4} is-at {self.mac})"


def arp_request_match(ipv4: str) -> Match:
    """The match of an ARP request for ``ipv4`` (what :class:`ArpReply` answers)."""
    return Match(eth_type=ETH_TYPE_ARP, arp_op=ARP_OP_REQUEST, arp_tpa=ipv4)


@dataclass(frozen=True, order=True)
class Action:
    """One forwarding action: ``output`` to ``port``, ``next_hops`` (an ECMP or failover
    :class:`NextHopSet`), ``controller`` (packet-in), ``drop``, or ``arp_reply`` (answer the
    ARP request in the data plane, :class:`ArpReply`; only on :func:`arp_request_match`)."""

    kind: Literal["output", "next_hops", "controller", "drop", "arp_reply"]
    port: int = 0
    next_hops: NextHopSet | None = None
    arp: ArpReply | None = None

    def __post_init__(self) -> None:
        if (self.kind == "next_hops") != (self.next_hops is not None):
            raise ValueError("an action forwards by a next-hop set exactly when its kind is "
                             "'next_hops'")
        if (self.kind == "arp_reply") != (self.arp is not None):
            raise ValueError("an action carries an ARP reply exactly when its kind is "
                             "'arp_reply'")

    @staticmethod
    def via(nhs: NextHopSet) -> Action:
        """Forward by ``nhs``."""
        return Action("next_hops", 0, nhs)

    @staticmethod
    def answer(reply: ArpReply) -> Action:
        """Answer an ARP request with ``reply`` out of the port it came in by."""
        return Action("arp_reply", 0, None, reply)

    def ports(self) -> tuple[int, ...]:
        """Every port this action may send to (empty for controller/drop, and for an ARP reply,
        which leaves by the port the request came in by)."""
        if self.kind == "output":
            return (self.port,)
        if self.next_hops is not None:
            return self.next_hops.ports
        return ()

    def __str__(self) -> str:
        if self.kind == "output":
            return f"output:{self.port}"
        if self.next_hops is not None:
            return str(self.next_hops)
        if self.arp is not None:
            return str(self.arp)
        return self.kind


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

    def __post_init__(self) -> None:
        arp = self.action.arp
        if arp is not None and self.match != arp_request_match(arp.ipv4):
            raise ValueError(f"{self.origin or 'an entry'}: {arp} answers only the ARP request "
                             f"for {arp.ipv4} ({arp_request_match(arp.ipv4)}), not {self.match}")

    def __hash__(self) -> int:
        """The hash of table, priority, match and action (not ``origin``), computed once per
        object and kept in its ``__dict__``, as :meth:`Match.__hash__`."""
        try:
            return self.__dict__["_hash"]
        except KeyError:
            got = self.__dict__["_hash"] = hash((self.table, self.priority, self.match,
                                                 self.action))
            return got

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state.pop("_hash", None)
        state.pop("key", None)
        return state

    @cached_property
    def key(self) -> tuple[int, int, Match]:
        """(table, priority, match): what identifies the entry on a switch (computed once)."""
        return (self.table, self.priority, self.match)

    def sort_key(self) -> tuple[int, int, tuple[tuple[int, int | str], ...]]:
        """Table, then priority, then match: a total order over a switch's entries."""
        return (self.table, self.priority, self.match.sort_key())

    def __str__(self) -> str:
        return f"table={self.table} priority={self.priority} {self.match} -> {self.action}"


@dataclass(frozen=True)
class SwitchPlan:
    """Everything one switch should hold: its flow entries (next-hop sets inside them)."""

    switch: str
    dpid: int
    flows: frozenset[FlowIntent]

    def next_hop_sets(self) -> frozenset[NextHopSet]:
        """Every distinct next-hop set the entries use (a driver's groups)."""
        return frozenset(self._sets)

    @cached_property
    def _sets(self) -> dict[NextHopSet, int]:
        """Entries per next-hop set, counted once per plan (read-only)."""
        out: dict[NextHopSet, int] = {}
        for f in self.flows:
            nhs = f.action.next_hops
            if nhs is not None:
                out[nhs] = out.get(nhs, 0) + 1
        return out

    def by_key(self) -> dict[tuple[int, int, Match], FlowIntent]:
        return dict(self._keys)

    def indexed_like(self, equal: SwitchPlan) -> SwitchPlan:
        """This plan, given the indexes (entries by key, counts per next-hop set) ``equal``
        has built and it has not: the two hold equal entries (the caller's word), so the
        indexes are the same. A target plan that replaces the equal plan a switch was
        written to (compared by identity from then on, :func:`controller.runtime.writes.
        drive`) then does not rebuild them at its next change (1 ms per 1,440 entries; at
        k = 16 every registration batch paid it on ~160 switches)."""
        mine, theirs = self.__dict__, equal.__dict__
        for name in ("_keys", "_sets"):
            if name not in mine and name in theirs:
                mine[name] = theirs[name]
        return self

    @cached_property
    def _keys(self) -> dict[tuple[int, int, Match], FlowIntent]:
        """The entries by key, built once per plan (read-only: :meth:`by_key` copies it)."""
        return {f.key: f for f in self.flows}


@dataclass(frozen=True)
class FabricPlan:
    """The intended state of every switch, keyed by switch name."""

    switches: Mapping[str, SwitchPlan]


def empty_plan(switch: str, dpid: int) -> SwitchPlan:
    """A switch holding nothing of ours."""
    return SwitchPlan(switch, dpid, frozenset())


@dataclass(frozen=True)
class SwitchChanges:
    """What to change on one switch: entries to add, modify (new versions in ``modify_flows``,
    the versions they replace in ``modified_from``, same order) and delete.

    A driver applies the whole as one unit (an OpenFlow bundle; ordered P4Runtime batches):
    next-hop sets a new or modified entry needs exist before it, sets no entry uses any more go
    after the deletes.
    """

    switch: str
    add_flows: tuple[FlowIntent, ...] = ()
    modify_flows: tuple[FlowIntent, ...] = ()
    delete_flows: tuple[FlowIntent, ...] = ()
    modified_from: tuple[FlowIntent, ...] = ()

    def __post_init__(self) -> None:
        if len(self.modified_from) != len(self.modify_flows):
            raise ValueError("modified_from must hold the old version of every modified flow")

    @property
    def empty(self) -> bool:
        return not (self.add_flows or self.modify_flows or self.delete_flows)

    @property
    def count(self) -> int:
        """Entries touched."""
        return len(self.add_flows) + len(self.modify_flows) + len(self.delete_flows)

    def inverse(self) -> SwitchChanges:
        """The changes that undo this one (add ↔ delete, modify back)."""
        return SwitchChanges(self.switch, add_flows=self.delete_flows,
                             modify_flows=self.modified_from, delete_flows=self.add_flows,
                             modified_from=self.modify_flows)

    def _overlay(self, plan: SwitchPlan) -> dict[tuple[int, int, Match], FlowIntent | None]:
        """key → the entry these changes leave there (None: deleted), checked against
        ``plan``'s entries (raises KeyError as :meth:`apply_to`)."""
        cur = plan._keys  # noqa: SLF001 - read only
        over: dict[tuple[int, int, Match], FlowIntent | None] = {}

        def get(k: tuple[int, int, Match]) -> FlowIntent | None:
            return over[k] if k in over else cur.get(k)

        for f in self.delete_flows:
            if get(f.key) is None:
                raise KeyError(f"{self.switch}: delete of missing entry {f}")
            over[f.key] = None
        for f in self.modify_flows:
            if get(f.key) is None:
                raise KeyError(f"{self.switch}: modify of missing entry {f}")
            over[f.key] = f
        for f in self.add_flows:
            if get(f.key) is not None:
                raise KeyError(f"{self.switch}: add of existing entry {f}")
            over[f.key] = f
        return over

    def check_applies(self, plan: SwitchPlan) -> None:
        """Check that these changes apply to ``plan`` without making the new plan (no copy of
        its entries: the cost is the change).

        Raises
        ------
        KeyError
            As :meth:`apply_to`.
        """
        self._overlay(plan)

    def apply_to(self, plan: SwitchPlan) -> SwitchPlan:
        """``plan`` with these changes made.

        Raises
        ------
        KeyError
            An added entry exists already, or a modified/deleted one is missing (the changes
            were not computed from ``plan``).
        """
        cur = plan._keys  # noqa: SLF001 - read only
        over = self._overlay(plan)
        # set operations reuse the entries' stored hashes: the cost is the change, not the plan
        gone = [cur[k] for k in over if k in cur]
        came = [f for f in over.values() if f is not None]
        out = SwitchPlan(plan.switch, plan.dpid, plan.flows.difference(gone).union(came))
        # the new plan's indexes from the old one's (a copy keeps the stored hashes)
        keys = dict(cur)
        for k, v in over.items():
            if v is None:
                del keys[k]
            else:
                keys[k] = v
        out.__dict__["_keys"] = keys
        if "_sets" in plan.__dict__:
            sets = dict(plan._sets)  # noqa: SLF001
            for f, d in [(f, -1) for f in gone] + [(f, 1) for f in came]:
                nhs = f.action.next_hops
                if nhs is not None:
                    n = sets.get(nhs, 0) + d
                    if n:
                        sets[nhs] = n
                    else:
                        del sets[nhs]
            out.__dict__["_sets"] = sets
        return out

    def lines(self) -> tuple[str, ...]:
        """Human-readable ``+``/``~``/``-`` lines, one per entry touched."""
        out = [f"+ {f}  # {f.origin}" if f.origin else f"+ {f}" for f in self.add_flows]
        out += [f"~ {new}  (was {old.action})" for new, old in
                zip(self.modify_flows, self.modified_from, strict=True)]
        out += [f"- {f}" for f in self.delete_flows]
        return tuple(out)


def diff_switch(old: SwitchPlan | None, new: SwitchPlan | None) -> SwitchChanges:
    """Changes that turn ``old`` into ``new`` (either may be None: switch added or removed)."""
    base = new or old
    if base is None:
        raise ValueError("diff_switch needs at least one plan")
    # only the entries that differ (a set difference reuses the stored hashes), by key
    old_f = old.flows if old else frozenset()
    new_f = new.flows if new else frozenset()
    of = {f.key: f for f in old_f - new_f}
    nf = {f.key: f for f in new_f - old_f}
    mod = sorted((nf[k] for k in nf.keys() & of.keys() if nf[k].action != of[k].action),
                 key=FlowIntent.sort_key)
    return SwitchChanges(
        switch=base.switch,
        add_flows=tuple(sorted((nf[k] for k in nf.keys() - of.keys()), key=FlowIntent.sort_key)),
        modify_flows=tuple(mod),
        delete_flows=tuple(sorted((of[k] for k in of.keys() - nf.keys()),
                                  key=FlowIntent.sort_key)),
        modified_from=tuple(of[f.key] for f in mod),
    )


def diff_plans(old: FabricPlan | None, new: FabricPlan) -> dict[str, SwitchChanges]:
    """Per-switch changes from ``old`` (None: empty switches) to ``new``; unchanged switches omitted."""
    out: dict[str, SwitchChanges] = {}
    old_sw = old.switches if old else {}
    for name in sorted(set(old_sw) | set(new.switches)):
        a, b = old_sw.get(name), new.switches.get(name)
        if a is b:  # the same object: nothing changed (plans keep unchanged switches' objects)
            continue
        ch = diff_switch(a, b)
        if not ch.empty:
            out[name] = ch
    return out


def next_hop_set_counts(old: SwitchPlan | None, new: SwitchPlan | None) -> tuple[int, int]:
    """(next-hop sets added, removed) between two plans of one switch: the groups a driver
    creates and deletes."""
    a = old.next_hop_sets() if old else frozenset()
    b = new.next_hop_sets() if new else frozenset()
    return len(b - a), len(a - b)


def count_entries(plans: Iterable[SwitchPlan]) -> tuple[int, int]:
    """(flow entries, distinct next-hop sets per switch summed) over ``plans``."""
    flows = groups = 0
    for sp in plans:
        flows += len(sp.flows)
        groups += len(sp.next_hop_sets())
    return flows, groups
