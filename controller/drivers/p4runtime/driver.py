"""The P4Runtime driver: :class:`~controller.drivers.southbound.SouthboundDriver` over finsy
clients (:class:`~.client.P4Switch`), on the runtime's asyncio loop.

* **connect**: one client per switch named in the targets (address, device id = dpid), primary
  with the configured ``election_id`` (P4Runtime spec v1.3 §5); the pipeline is installed when
  the switch lacks it. A switch that cannot be reached is retried every ``reconnect_s``.
* **ownership**: aifabric owns the tables it writes (:data:`OWNED_TABLES`: ``punt``,
  ``routes``, ``pinned``, ``ecmp_hash``) and the ``ecmp_selector`` action profile; entries of
  other tables (QoS tables written by a lab or another client) are neither read back as ours
  nor ever deleted.
* **read back** (:meth:`P4RuntimeDriver.read_state`): P4Runtime Read, decoded into plan intents
  (:func:`decode_entities`) — routes to a member or an ECMP group, pinned entries (plan priority
  = P4 priority // 8), punts; the ``ecmp_hash`` entry gives the ECMP sets' hash; group ids of the
  read-back groups are kept (the driver's allocation: port set → id).
* **apply**: the new plan is encoded (:func:`~.encode.encode_switch`) and reconciled against
  the entities the switch holds (:func:`~.reconcile.reconcile`): ordered WriteRequests, one per
  phase (members, groups, entries, deletes). P4Runtime applies a batch update by update, so a
  refused update leaves the switch half-changed: the driver then reads it back and writes the
  previous plan again before raising :class:`~controller.drivers.southbound.ApplyError` naming
  the refused entity, so nothing of the change stays in force.
* **packets**: packet-ins become :class:`~controller.drivers.southbound.PacketIn` events (the
  runtime answers ARP and hears LLDP); packet-outs go out of the named port.
* **roles**: the election id is the fencing token; ``set_role("master", token)`` with another
  token reconnects with it; a backup never writes.

Not here (issue 13): counters and queue depth from P4 switches, LLDP liveness without port
status, data-plane failover.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from controller.drivers.p4runtime.client import P4Switch, P4SwitchError, WriteError
from controller.drivers.p4runtime.encode import (
    PRIORITY_SCALE,
    EncodeError,
    encode_switch,
    plan_ecmp_hash,
)
from controller.drivers.p4runtime.entities import (
    Lpm,
    ProfileGroup,
    ProfileMember,
    SwitchEntities,
    TableEntry,
    Ternary,
)
from controller.drivers.p4runtime.pipeline import (
    BMV2,
    ECMP_HASH,
    ECMP_SELECTOR,
    HASH_FIELD_BITS,
    PINNED,
    PUNT,
    ROUTES,
    P4Target,
)
from controller.drivers.p4runtime.reconcile import reconcile
from controller.drivers.southbound import (
    ApplyError,
    ApplyReceipt,
    CounterKind,
    EventSink,
    NotConnected,
    NotMaster,
    PacketIn,
    Role,
    SouthboundKind,
    SwitchConnected,
    SwitchFeatures,
    SwitchGone,
    SwitchState,
)
from controller.plan.model import (
    ETH_TYPE_IPV4,
    PRIO_ROUTE,
    Action,
    EcmpHash,
    FlowIntent,
    Match,
    NextHopSet,
    SwitchChanges,
    SwitchPlan,
)
from controller.plan.pinned import TABLE

LOG = logging.getLogger("aifabric.p4runtime")
OWNED_TABLES = frozenset({PUNT.name, ROUTES.name, PINNED.name, ECMP_HASH.name})
_PINNED_FIELDS = {"ipv4_src": "ipv4_src", "ipv4_dst": "ipv4_dst", "ip_proto": "ip_proto",
                  "dscp": "ip_dscp", "l4_src": "l4_src", "l4_dst": "l4_dst"}


class P4Client(Protocol):
    """What the driver needs of a switch client (:class:`~.client.P4Switch`; a fake in tests)."""

    name: str
    requests: int

    async def __aenter__(self) -> Any: ...
    async def __aexit__(self, *exc: Any) -> None: ...
    async def read_state(self) -> SwitchEntities: ...
    async def write_phases(self, rec: Any) -> int: ...
    async def packet_out(self, port: int, frame: bytes) -> None: ...
    def packets_in(self) -> AsyncIterator[tuple[int, bytes]]: ...


ClientFactory = Callable[[str, str, int, int], P4Client]
"""``factory(name, address, device_id, election_id)``."""


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


def decode_entities(ents: SwitchEntities) -> DecodedP4:
    """Our entities of a switch as plan intents (module docstring)."""
    ents = owned(ents)
    ports = {m.member_id: dict(m.params).get("port") for m in ents.members
             if m.action == "set_egress"}
    h = _hash_of(ents)
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
        fi = _decode_entry(e, ports, groups)
        if fi is None:
            bad += e.table != ECMP_HASH.name
        else:
            flows.append(fi)
    return DecodedP4(SwitchPlan(ents.switch, ents.device_id, frozenset(flows)), ids, bad)


def _decode_entry(e: TableEntry, ports: Mapping[int, int | None],
                  groups: Mapping[int, NextHopSet]) -> FlowIntent | None:
    m = dict(e.match)
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
            p = ports.get(e.member_id)
            return None if p is None else FlowIntent(TABLE, PRIO_ROUTE, match,
                                                     Action("output", p))
        if e.group_id is not None and e.group_id in groups:
            return FlowIntent(TABLE, PRIO_ROUTE, match, Action.via(groups[e.group_id]))
        return None
    if e.table == PINNED.name:
        fields: dict[str, Any] = {"eth_type": ETH_TYPE_IPV4}
        for k, v in m.items():
            name = _PINNED_FIELDS.get(k)
            if name is None or not isinstance(v, Ternary):
                return None
            if v.mask != (1 << {"ipv4_src": 32, "ipv4_dst": 32, "ip_proto": 8, "dscp": 6,
                                "l4_src": 16, "l4_dst": 16}[k]) - 1:
                return None
            fields[name] = str(ipaddress.IPv4Address(v.value)) if k.startswith("ipv4") else \
                v.value
        if e.action == "set_egress":
            action = Action("output", dict(e.params).get("port", 0))
        elif e.action == "drop":
            action = Action("drop")
        else:
            return None
        return FlowIntent(TABLE, e.priority // PRIORITY_SCALE, Match(**fields), action)
    return None


@dataclass
class _Session:
    switch: str
    address: str
    dpid: int
    election_id: int
    client: P4Client | None = None
    session: int = 0
    role: Role = "equal"
    installed: SwitchPlan | None = None
    current: SwitchEntities | None = None
    group_ids: dict[tuple[int, ...], int] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    connected: asyncio.Event = field(default_factory=asyncio.Event)


def _default_factory(target: P4Target, p4info: Path, p4blob: Any,
                     credentials: Any = None) -> ClientFactory:
    def make(name: str, address: str, device_id: int, election_id: int) -> P4Client:
        return P4Switch(name, address, device_id, election_id=election_id, p4info=p4info,
                        p4blob=p4blob, credentials=credentials)
    return make


class P4RuntimeDriver:
    """The P4Runtime southbound (module docstring).

    Parameters
    ----------
    switches : mapping of str to (str, int)
        switch name → (gRPC address, device id).
    target : P4Target
        The program (fabric.p4 on BMv2, fabric_tna.p4 on Tofino).
    p4info, p4blob
        Pipeline installed when the switch lacks it.
    election_id : int
        Our election id (the token until :meth:`set_role` gives another).
    client_factory : callable, optional
        Builds a client (tests pass a fake); default :class:`~.client.P4Switch`.
    reconnect_s : float
        Seconds between connection attempts.
    credentials : finsy.GRPCCredentialsTLS, optional
        TLS towards the switches (None: plain text).
    """

    kind: SouthboundKind = "p4runtime"
    capabilities = frozenset({"roles", "ecmp_hash"})

    def __init__(self, switches: Mapping[str, tuple[str, int]], *, target: P4Target = BMV2,
                 p4info: Path | None = None, p4blob: Any = None, election_id: int = 10,
                 client_factory: ClientFactory | None = None, reconnect_s: float = 1.0,
                 credentials: Any = None) -> None:
        self.target = target
        self.factory = client_factory or _default_factory(target, p4info or target.p4info,
                                                          p4blob, credentials)
        self.reconnect_s = reconnect_s
        self._sessions = {n: _Session(n, a, d, election_id) for n, (a, d) in switches.items()}
        self._sink: EventSink | None = None
        self._sent: Counter[tuple[str, str]] = Counter()
        self._next_session = 0
        self._stopping = False

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self, sink: EventSink) -> None:
        self._sink = sink
        for s in self._sessions.values():
            s.task = asyncio.create_task(self._run(s), name=f"p4runtime {s.switch}")

    async def stop(self) -> None:
        self._stopping = True
        tasks = [s.task for s in self._sessions.values() if s.task is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def connected(self) -> frozenset[str]:
        return frozenset(n for n, s in self._sessions.items() if s.connected.is_set())

    def messages_sent(self) -> Mapping[tuple[str, str], int]:
        return dict(self._sent)

    def _emit(self, ev: Any) -> None:
        if self._sink is not None:
            self._sink(ev)

    async def _run(self, s: _Session) -> None:
        while not self._stopping:
            client = self.factory(s.switch, s.address, s.dpid, s.election_id)
            try:
                await client.__aenter__()
            except P4SwitchError as exc:
                LOG.warning("[%s] %s; retrying in %g s", s.switch, exc, self.reconnect_s)
                await asyncio.sleep(self.reconnect_s)
                continue
            self._next_session += 1
            s.client, s.session, s.installed, s.current = client, self._next_session, None, None
            s.connected.set()
            feats = SwitchFeatures("p4runtime", s.dpid, "P4Runtime 1.3", s.address,
                                   capabilities=self.capabilities)
            LOG.info("[%s] connected to %s (P4Runtime, election_id %d)", s.switch, s.address,
                     s.election_id)
            self._emit(SwitchConnected(s.switch, feats, s.session))
            reason = "stream closed"
            try:
                async for port, frame in client.packets_in():
                    self._emit(PacketIn(s.switch, port, frame))
            except asyncio.CancelledError:
                reason = "stopping"
                raise
            except Exception as exc:  # noqa: BLE001 - finsy raises gRPC and its own errors
                reason = str(exc)
            finally:
                s.connected.clear()
                s.client = None
                self._emit(SwitchGone(s.switch, s.session, reason))
                try:
                    await client.__aexit__(None, None, None)
                except Exception:  # noqa: BLE001 - closing anyway
                    pass
            if not self._stopping:
                await asyncio.sleep(self.reconnect_s)

    def _session(self, switch: str) -> _Session:
        s = self._sessions.get(switch)
        if s is None or s.client is None or not s.connected.is_set():
            raise NotConnected(switch, "not connected")
        return s

    # -- requests ------------------------------------------------------------------------------
    async def read_state(self, switch: str) -> SwitchState:
        s = self._session(switch)
        assert s.client is not None
        try:
            ents = await s.client.read_state()
        except P4SwitchError as exc:
            raise ApplyError(switch, f"read-back failed: {exc}") from None
        ours = owned(ents)
        dec = decode_entities(ours)
        s.current, s.installed, s.group_ids = ours, dec.plan, dict(dec.group_ids)
        foreign = ents.count - ours.count - len(ents.multicast)
        return SwitchState(dec.plan, foreign, 0)

    def _allocate(self, s: _Session, plan: SwitchPlan) -> dict[tuple[int, ...], int]:
        need = {n.ports for n in plan.next_hop_sets() if n.kind == "ecmp"}
        ids = {p: g for p, g in s.group_ids.items() if p in need}
        taken = set(ids.values())
        gid = 1
        for ports in sorted(need - ids.keys()):
            while gid in taken:
                gid += 1
            ids[ports] = gid
            taken.add(gid)
        return ids

    def _encode(self, s: _Session, plan: SwitchPlan,
                ids: Mapping[tuple[int, ...], int]) -> SwitchEntities:
        return encode_switch(plan, None, plan_ecmp_hash(plan), self.target, ids)

    async def apply(self, switch: str, changes: SwitchChanges, timeout_s: float) -> ApplyReceipt:
        s = self._session(switch)
        if s.role == "backup":
            raise NotMaster(switch, f"we are backup of {switch}: no write sent")
        async with s.write_lock:
            if s.installed is None or s.current is None:
                await self.read_state(switch)
            assert s.installed is not None and s.current is not None and s.client is not None
            try:
                after = changes.apply_to(s.installed)
                ids = self._allocate(s, after)
                want = self._encode(s, after, ids)
            except (EncodeError, KeyError) as exc:
                raise ApplyError(switch, str(exc)) from None
            rec = reconcile(want, s.current)
            if rec.empty:
                s.installed, s.group_ids = after, ids
                return ApplyReceipt(switch, {}, 0.0)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            before = s.client.requests
            try:
                await asyncio.wait_for(s.client.write_phases(rec), timeout_s)
            except WriteError as exc:
                await self._restore(s)
                failed = exc.failures[0] if exc.failures else None
                entry = _intent_for(after, failed.update.entity if failed else None)
                raise ApplyError(switch, f"{failed.code}: {failed.message}" if failed
                                 else str(exc), entry) from None
            except (P4SwitchError, TimeoutError) as exc:
                s.installed = s.current = None
                raise ApplyError(switch, f"write failed: {exc}") from None
            n_req = s.client.requests - before
            counts = {"p4-update": rec.count, "p4-write": n_req}
            for k, v in counts.items():
                self._sent[(switch, k)] += v
            s.current, s.installed, s.group_ids = want, after, ids
            return ApplyReceipt(switch, counts, (loop.time() - t0) * 1e3)

    async def _restore(self, s: _Session) -> None:
        """After a refused batch: read back and write the last confirmed plan again."""
        assert s.client is not None and s.installed is not None
        try:
            now = owned(await s.client.read_state())
            want = self._encode(s, s.installed, s.group_ids)
            rec = reconcile(want, now)
            if not rec.empty:
                await s.client.write_phases(rec)
            s.current = want
        except (P4SwitchError, EncodeError) as exc:
            LOG.error("[%s] could not restore the previous entries after a refused write: %s",
                      s.switch, exc)
            s.installed = s.current = None

    async def packet_out(self, switch: str, port: int, data: bytes) -> None:
        s = self._session(switch)
        assert s.client is not None
        await s.client.packet_out(port, data)
        self._sent[(switch, "packet-out")] += 1

    async def request_counters(self, switch: str, kinds: frozenset[CounterKind]) -> None:
        """P4 counters reach the runtime in issue 13; nothing is requested yet."""
        self._session(switch)

    async def set_role(self, switch: str, role: Role, token: int | None) -> Role:
        s = self._session(switch)
        if role == "backup":
            s.role = "backup"
            return s.role
        if token is not None and token != s.election_id:
            s.election_id = token
            if s.task is not None:  # reconnect with the new election id
                s.task.cancel()
                s.task = asyncio.create_task(self._run(s), name=f"p4runtime {s.switch}")
            raise NotConnected(switch, f"reconnecting with election_id {token}")
        s.role = "master" if token is not None else "equal"
        return s.role


def _intent_for(plan: SwitchPlan, entity: Any) -> FlowIntent | None:
    """The intent whose entry ``entity`` is (by its origin), if any."""
    origin = getattr(entity, "origin", "")
    if not origin or isinstance(entity, ProfileMember | ProfileGroup):
        return None
    return next((f for f in plan.flows if f.origin == origin), None)
