"""The P4Runtime driver: :class:`~controller.drivers.southbound.SouthboundDriver` over P4Runtime
clients (:class:`~.client.P4Switch`), on the runtime's asyncio loop.

* **connect**: one client per switch named in the targets (address, device id = dpid), with
  the configured ``election_id`` and ``role_name`` (P4Runtime spec v1.3 §5), over TLS when
  ``credentials`` are given. The pipeline is installed when we are primary and the switch
  lacks it. A switch that cannot be reached is retried every ``reconnect_s``. The client is
  **primary or backup** and the driver says which (log, :class:`SwitchConnected` followed by
  the role the runtime asks for); a backup stays connected, reads, and never writes.
* **roles and fencing** (:meth:`P4RuntimeDriver.set_role`): the runtime's fencing token is the
  election id — ``master`` with token *t* bids ``election_id = t << 64`` (the term in the high
  64 bits, so every later term outbids every earlier one), ``backup`` with token *t* bids
  ``election_id = t`` (below every master's: an etcd lease id, say), ``equal`` or no token
  the configured ``election_id``. A new election id is a new stream (P4Runtime allows a re-bid
  on an open stream, but BMv2 aborts after a refused one: :mod:`.session`); ``set_role`` then
  raises :class:`~controller.drivers.southbound.NotConnected` and the switch reconnects
  (:class:`SwitchConnected`, and the runtime asks again). A **demotion** (another client took
  primary with a higher election id; or a write refused as not primary) is reported as one:
  a :class:`~controller.drivers.southbound.RoleChanged` to ``backup`` with the reason, and
  :class:`~controller.drivers.southbound.NotMaster` for the write.
* **ownership**: aifabric owns the tables it writes (:data:`~.decode.OWNED_TABLES`); entries
  of other tables are neither read back as ours nor ever deleted (:mod:`.decode`).
* **apply**: what the switch holds (as the runtime knows it) and what it should hold after the
  change are encoded (:func:`~.encode.encode_switch`) and their difference written
  (:func:`~.reconcile.reconcile`): ordered WriteRequests, one per phase (members, groups,
  entries, deletes). P4Runtime applies a batch update by update, so a refused update may leave
  the switch half-changed: :class:`~controller.drivers.southbound.ApplyError` then names the
  refused entity with ``nothing_applied=False``, and the runtime reads the switch back and
  writes it from there. The driver keeps no copy of what a switch holds: only the group ids
  (rebuilt from every read-back).
* **counters**: :meth:`P4RuntimeDriver.request_counters` reads the program's port, queue
  (with ECN marks and the queue-depth histogram) and pinned-entry counters
  (:mod:`.counters`) and reports them as one :class:`CounterSample`.
* **packets**: packet-ins become :class:`~controller.drivers.southbound.PacketIn` events (the
  runtime answers ARP and hears LLDP, which is also how it tells P4 links alive); packet-outs
  go out of the named port.
* **data-plane protection**: a pinned hop with a failover next-hop set becomes
  ``pin_egress_protected(port, backup_port)`` (:mod:`.encode`): the switch itself moves to
  the backup when the planned port stops hearing LLDP probes (capability ``failover``), and a
  hop with no alternative sends back to the hop before (a ``bounce`` set); the ``liveness``
  entry carries the timers the plan's failover sets carry (capability ``liveness-failover``:
  the runtime gives them the liveness settings). fabric.p4 keeps one backup per hop: the
  runtime plans failover pairs for P4 switches.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from finsy.grpcutil import GRPCCredentialsTLS

from controller.drivers.p4runtime import counters as p4counters
from controller.drivers.p4runtime.client import (
    ElectionIdError,
    NotPrimaryError,
    P4Switch,
    P4SwitchError,
    Pipeline,
    WriteError,
)
from controller.drivers.p4runtime.decode import (
    OWNED_TABLES,
    DecodedP4,
    decode_entities,
    decode_entry,
    owned,
)
from controller.drivers.p4runtime.encode import (
    EncodeError,
    encode_switch,
    plan_ecmp_hash,
)
from controller.drivers.p4runtime.entities import ProfileGroup, ProfileMember, SwitchEntities
from controller.drivers.p4runtime.pipeline import BMV2, P4Target
from controller.drivers.p4runtime.reconcile import reconcile
from controller.drivers.southbound import (
    ApplyError,
    ApplyReceipt,
    ApplyTimeout,
    CounterKind,
    EventSink,
    NotConnected,
    NotMaster,
    PacketIn,
    Role,
    RoleChanged,
    RoleError,
    SouthboundKind,
    SwitchConnected,
    SwitchFeatures,
    SwitchGone,
    SwitchState,
    TableCapacity,
)
from controller.plan.capacity import p4info_table_sizes
from controller.plan.model import FlowIntent, SwitchChanges, SwitchPlan
from controller.security.transport import TLSFiles

__all__ = ["OWNED_TABLES", "DecodedP4", "P4RuntimeDriver", "decode_entities", "decode_entry",
           "master_election_id", "owned"]

LOG = logging.getLogger("aifabric.p4runtime")
#: The role name aifabric's routing controller takes on P4 switches (P4Runtime spec §5).
ROUTING_ROLE = "aifabric.routing"


def master_election_id(token: int) -> int:
    """The election id of a master holding fencing token ``token``: ``token << 64``.

    Raises
    ------
    RoleError
        ``token`` outside 1..2**64-1.
    """
    if not 1 <= token < 1 << 64:
        raise RoleError("", f"fencing token {token} outside 1..2**64-1")
    return token << 64


class P4Client(Protocol):
    """What the driver needs of a switch client (:class:`~.client.P4Switch`; a fake in tests)."""

    name: str
    requests: int

    @property
    def role(self) -> str:
        """``primary`` or ``backup`` (the switch's arbitration)."""

    async def __aenter__(self) -> Any: ...
    async def __aexit__(self, *exc: Any) -> None: ...
    async def read_state(self) -> SwitchEntities: ...
    async def write_phases(self, rec: Any) -> int: ...
    async def packet_out(self, port: int, frame: bytes) -> None: ...
    def packets_in(self) -> AsyncIterator[tuple[int, bytes]]: ...


ClientFactory = Callable[..., P4Client]
"""``factory(name, address, device_id, election_id, on_role=..., highest_seen=...)``."""


@dataclass
class _Session:
    switch: str
    address: str
    dpid: int
    election_id: int
    client: P4Client | None = None
    session: int = 0
    want: Role = "equal"
    highest_seen: int = 0
    #: what the last read-back found beyond (extra) and short of (missing) the canonical
    #: encoding of the plan it decoded to; folded into the next write, then forgotten
    extra: SwitchEntities | None = None
    missing: SwitchEntities | None = None
    group_ids: dict[tuple[int, ...], int] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    reading: bool = False


def program_tables(p4info: Path) -> tuple[TableCapacity, ...]:
    """Every table's ``size`` from the program's P4Info (P4Runtime spec v1.3 §6.4: the
    minimum number of entries the target guarantees); () when the file cannot be read."""
    try:
        sizes = p4info_table_sizes(Path(p4info).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ()
    return tuple(TableCapacity(name, n) for name, n in sorted(sizes.items()) if n > 0)


def _credentials(tls: GRPCCredentialsTLS | TLSFiles | None) -> GRPCCredentialsTLS | None:
    if tls is None or isinstance(tls, GRPCCredentialsTLS):
        return tls
    if tls.ca is None:
        raise ValueError("P4Runtime over TLS needs the CA certificate of the switches' "
                         "certificates")
    return GRPCCredentialsTLS(cacert=tls.ca, cert=tls.cert, private_key=tls.key)


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
        Our election id until :meth:`set_role` gives a token (≥ 1; a client without one
        never becomes primary).
    role_name : str
        Our P4Runtime role (:data:`ROUTING_ROLE`; "" = the default role).
    credentials : finsy.GRPCCredentialsTLS or TLSFiles, optional
        TLS for every switch channel (None: plain text; the caller decides whether that is
        allowed, :func:`controller.security.southbound.p4runtime_client_credentials`).
    ports : mapping of str to sequence of int, optional
        Each switch's fabric ports (whose counters are read).
    priorities : sequence of int
        Queues (priorities) whose counters are read on each port.
    client_factory : callable, optional
        Builds a client (tests pass a fake); default :class:`~.client.P4Switch`.
    reconnect_s : float
        Seconds between connection attempts.
    """

    kind: SouthboundKind = "p4runtime"

    def __init__(self, switches: Mapping[str, tuple[str, int]], *, target: P4Target = BMV2,
                 p4info: Path | None = None, p4blob: Any = None, election_id: int = 10,
                 role_name: str = ROUTING_ROLE,
                 credentials: GRPCCredentialsTLS | TLSFiles | None = None,
                 ports: Mapping[str, Sequence[int]] | None = None,
                 priorities: Sequence[int] = tuple(range(8)),
                 client_factory: ClientFactory | None = None, reconnect_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 1 <= election_id < 1 << 128:
            raise ValueError(f"election_id must be 1..2**128-1 (P4Runtime spec §5), got "
                             f"{election_id}")
        self.target = target
        self.role_name = role_name
        self.credentials = _credentials(credentials)
        self.election_id = election_id
        self.factory = client_factory or self._default_factory(p4info or target.p4info,
                                                               p4blob or target_blob(target))
        self.reconnect_s = reconnect_s
        self.tables = program_tables(p4info or target.p4info)
        self.ports = {n: tuple(sorted(p)) for n, p in (ports or {}).items()}
        self.priorities = tuple(priorities)
        self.clock = clock
        caps = {"roles", "ecmp_hash", "queue_depth"}
        if "pin_egress_protected" in target.actions:
            caps.add("failover")
        if "set_liveness" in target.actions:
            caps.add("liveness-failover")  # its failover sets carry the probes' timers
        self.capabilities = frozenset(caps)
        self._sessions = {n: _Session(n, a, d, election_id) for n, (a, d) in switches.items()}
        self._sink: EventSink | None = None
        self._sent: Counter[tuple[str, str]] = Counter()
        self._next_session = 0
        self._stopping = False

    def _default_factory(self, p4info: Path, p4blob: Any) -> ClientFactory:
        pipeline: list[Pipeline] = []  # parsed at the first connection, for every switch

        def make(name: str, address: str, device_id: int, election_id: int, *,
                 on_role: Any = None, highest_seen: int | None = None) -> P4Client:
            if not pipeline:
                pipeline.append(Pipeline.load(p4info, p4blob))
            return P4Switch(name, address, device_id, election_id=election_id, p4info=p4info,
                            p4blob=p4blob, role_name=self.role_name,
                            credentials=self.credentials, backup_ok=True, on_role=on_role,
                            highest_seen=highest_seen, pipeline=pipeline[0])
        return make

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

    def role_of(self, switch: str) -> str:
        """``primary``, ``backup`` (what the switch's arbitration says of us) or
        ``disconnected``."""
        s = self._sessions.get(switch)
        if s is None or s.client is None or not s.connected.is_set():
            return "disconnected"
        return "backup" if s.want == "backup" else str(s.client.role)

    def _emit(self, ev: Any) -> None:
        if self._sink is not None:
            self._sink(ev)

    def _on_role(self, s: _Session, session: int) -> Callable[[str, str], None]:
        def cb(role: str, reason: str) -> None:
            if s.session != session:
                return
            self._emit(RoleChanged(s.switch, "backup" if role == "backup" else "master",
                                   reason))
        return cb

    async def _run(self, s: _Session) -> None:
        while not self._stopping:
            session = self._next_session + 1
            self._next_session = session
            client = self.factory(s.switch, s.address, s.dpid, s.election_id,
                                  on_role=self._on_role(s, session),
                                  highest_seen=s.highest_seen or None)
            try:
                await client.__aenter__()
            except ElectionIdError as exc:
                LOG.error("[%s] %s; retrying in %g s", s.switch, exc, self.reconnect_s)
                await asyncio.sleep(self.reconnect_s)
                continue
            except P4SwitchError as exc:
                LOG.warning("[%s] %s; retrying in %g s", s.switch, exc, self.reconnect_s)
                await asyncio.sleep(self.reconnect_s)
                continue
            s.client, s.session = client, session
            s.connected.set()
            ports = self.ports.get(s.switch)
            feats = SwitchFeatures("p4runtime", s.dpid, "P4Runtime 1.3", s.address,
                                   ports=frozenset(ports) if ports else None,
                                   tables=self.tables, capabilities=self.capabilities)
            LOG.info("[%s] connected to %s (P4Runtime %s, election_id %d%s)", s.switch,
                     s.address, client.role, s.election_id,
                     f", role {self.role_name}" if self.role_name else "")
            self._emit(SwitchConnected(s.switch, feats, s.session))
            reason = "stream closed"
            try:
                async for port, frame in client.packets_in():
                    self._emit(PacketIn(s.switch, port, frame))
                reason = getattr(getattr(client, "session", None), "close_reason", "") or reason
            except asyncio.CancelledError:
                reason = "stopping"
                raise
            except Exception as exc:  # noqa: BLE001 - gRPC and finsy errors end the session
                reason = str(exc)
            finally:
                s.connected.clear()
                s.client = None
                seen = getattr(getattr(client, "session", None), "highest_seen", 0)
                s.highest_seen = max(s.highest_seen, int(seen or 0))
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
    async def read_state(self, switch: str, *, adopt: bool = True) -> SwitchState:
        s = self._session(switch)
        assert s.client is not None
        try:
            ents = await s.client.read_state()
        except P4SwitchError as exc:
            raise ApplyError(switch, f"read-back failed: {exc}") from None
        ours = owned(ents)
        dec = decode_entities(ours)
        foreign = ents.count - ours.count - len(ents.multicast)
        if not adopt:
            return SwitchState(dec.plan, foreign, 0)
        s.group_ids = dict(dec.group_ids)
        try:
            canon = self._encode(s, dec.plan, s.group_ids)
            s.extra, s.missing = _minus(ours, canon), _minus(canon, ours)
        except (EncodeError, KeyError):
            s.extra, s.missing = ours, None
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

    def _writable(self, s: _Session) -> None:
        assert s.client is not None
        if s.want == "backup":
            raise NotMaster(s.switch, f"we are backup of {s.switch}: no write sent")
        if s.client.role != "primary":
            raise NotMaster(s.switch, f"another client is primary of {s.switch} (we hold "
                                      f"election_id {s.election_id}): no write sent")

    async def apply(self, switch: str, changes: SwitchChanges, held: SwitchPlan,
                    timeout_s: float) -> ApplyReceipt:
        s = self._session(switch)
        self._writable(s)
        async with s.write_lock:
            assert s.client is not None
            try:
                after = changes.apply_to(held)
                ids = self._allocate(s, after)
                want = self._encode(s, after, ids)
                have = _plus(_minus(self._encode(s, held, s.group_ids), s.missing), s.extra)
            except (EncodeError, KeyError) as exc:
                raise ApplyError(switch, str(exc)) from None
            rec = reconcile(want, have)
            if rec.empty:
                s.group_ids, s.extra, s.missing = ids, None, None
                return ApplyReceipt(switch, {}, 0.0)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            before = s.client.requests
            try:
                await asyncio.wait_for(s.client.write_phases(rec), timeout_s)
            except NotPrimaryError as exc:
                raise NotMaster(switch, f"demoted while writing: {exc}") from None
            except WriteError as exc:
                failed = exc.failures[0] if exc.failures else None
                entry = _intent_for(after, failed.update.entity if failed else None)
                more = f" (and {len(exc.failures) - 1} more)" if len(exc.failures) > 1 else ""
                raise ApplyError(switch, f"{failed.code}: {failed.message}{more}" if failed
                                 else str(exc), entry, nothing_applied=False) from None
            except TimeoutError:
                raise ApplyTimeout(switch, f"no answer to the write within {timeout_s:g} s") \
                    from None
            except P4SwitchError as exc:
                raise ApplyError(switch, f"write failed: {exc}", nothing_applied=False) from None
            n_req = s.client.requests - before
            counts = {"p4-update": rec.count, "p4-write": n_req}
            for k, v in counts.items():
                self._sent[(switch, k)] += v
            s.group_ids, s.extra, s.missing = ids, None, None
            return ApplyReceipt(switch, counts, (loop.time() - t0) * 1e3)

    async def packet_out(self, switch: str, port: int, data: bytes) -> None:
        s = self._session(switch)
        assert s.client is not None
        if s.want == "backup" or s.client.role != "primary":
            raise NotMaster(switch, "backup: no packet-out")
        await s.client.packet_out(port, data)
        self._sent[(switch, "packet-out")] += 1

    async def request_counters(self, switch: str, kinds: frozenset[CounterKind]) -> None:
        """Read the program's counters (:mod:`.counters`) and report one CounterSample; a
        request while the previous read of the switch is still running is skipped."""
        s = self._session(switch)
        if s.reading:
            LOG.debug("[%s] counters still being read: request skipped", switch)
            return
        s.reading = True
        try:
            sample = await p4counters.read_sample(
                s.client, switch, self.ports.get(switch, ()), kinds, self.target,
                self.priorities, self.clock)
        except P4SwitchError as exc:
            LOG.warning("[%s] counters not read: %s", switch, exc)
            return
        finally:
            s.reading = False
        self._sent[(switch, "p4-read")] += 1
        self._emit(sample)

    async def set_role(self, switch: str, role: Role, token: int | None) -> Role:
        """Take ``role`` with fencing ``token`` (module docstring: master → ``token << 64``,
        backup → ``token``, equal / None → the configured election id).

        Raises
        ------
        NotConnected
            Re-arbitrating with a new election id (a new stream): the switch reconnects and
            the runtime asks again.
        RoleError
            A token out of range.
        """
        s = self._session(switch)
        assert s.client is not None
        if role == "master" and token is not None:
            try:
                eid = master_election_id(token)
            except RoleError as exc:
                raise RoleError(switch, str(exc).lstrip(": ")) from None
        elif role == "backup" and token is not None:
            if not 1 <= token < 1 << 128:
                raise RoleError(switch, f"backup election_id {token} outside 1..2**128-1")
            eid = token
        elif role == "backup":
            eid = s.election_id
        else:
            eid = self.election_id
        s.want = role
        if eid != s.election_id:
            s.election_id = eid
            if s.task is not None:  # a new stream with the new election id
                s.task.cancel()
                s.task = asyncio.create_task(self._run(s), name=f"p4runtime {s.switch}")
            raise NotConnected(switch, f"re-arbitrating with election_id {eid} on a new stream")
        if role == "backup":
            LOG.info("[%s] P4Runtime backup (election_id %d): reading, never writing",
                     switch, eid)
            return "backup"
        if s.client.role == "primary":
            return "master"
        LOG.warning("[%s] P4Runtime backup: another client is primary (we hold election_id "
                    "%d); no write will be sent", switch, eid)
        return "backup"


def _minus(a: SwitchEntities, b: SwitchEntities | None) -> SwitchEntities:
    """The entities of ``a`` not in ``b`` (equal keys and values)."""
    if b is None:
        return a
    return SwitchEntities(a.switch, a.device_id, a.entries - b.entries, a.members - b.members,
                          a.groups - b.groups, a.multicast - b.multicast)


def _plus(a: SwitchEntities, b: SwitchEntities | None) -> SwitchEntities:
    if b is None:
        return a
    return SwitchEntities(a.switch, a.device_id, a.entries | b.entries, a.members | b.members,
                          a.groups | b.groups, a.multicast | b.multicast)


def target_blob(target: P4Target) -> Any:
    """The device config of ``target`` when it has a committed one (BMv2's JSON), else None."""
    from controller.drivers.p4runtime.pipeline import BMV2_JSON

    return BMV2_JSON if target.name == "bmv2" else None


def _intent_for(plan: SwitchPlan, entity: Any) -> FlowIntent | None:
    """The intent whose entry ``entity`` is (by its origin), if any."""
    origin = getattr(entity, "origin", "")
    if not origin or isinstance(entity, ProfileMember | ProfileGroup):
        return None
    return next((f for f in plan.flows if f.origin == origin), None)
