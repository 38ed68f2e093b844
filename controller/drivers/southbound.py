"""The one southbound interface: what every driver (OpenFlow, P4Runtime) tells the runtime, and
what the runtime asks of it. Declared below the runtime; drivers implement it, the runtime
depends only on it.

**Events** (driver → runtime; frozen values, delivered through an :data:`EventSink`, which the
runtime makes thread-safe: os-ken calls it from its threads, finsy from the loop):
:class:`SwitchConnected` (with :class:`SwitchFeatures`), :class:`SwitchGone`,
:class:`PortStatus`, :class:`LinkSeen`, :class:`CounterSample`, :class:`PacketIn`,
:class:`RoleChanged`. Every event names the switch by its fabric name; a driver drops (and
logs) switches the fabric does not declare.

**Requests** (runtime → driver, :class:`SouthboundDriver`): read a switch back *decoded into
plan intents* (only our entries: OpenFlow — our cookie and our group-id range; P4Runtime — the
tables we write), apply a :class:`~controller.plan.model.SwitchChanges` atomically and say when
the switch confirmed it (an OpenFlow 1.4 bundle / ONF EXT-230 bundle committed with
ATOMIC|ORDERED; ordered P4Runtime batches, restored on failure), send a packet, ask for
counters, and take a role with a fencing token (OpenFlow role request ``generation_id``,
P4Runtime ``election_id``). A backup stays connected and reads; it never writes
(:class:`NotMaster`). Drivers allocate their own ids (groups, members) and rebuild them from
what they read back; the plan never sees ids.

Errors name the switch and, for a refused change, the entry (:class:`ApplyError`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from controller.plan.model import FlowIntent, SwitchChanges, SwitchPlan
from controller.telemetry.samples import EntryCounters, PortCounters, QueueCounters

SouthboundKind = Literal["openflow", "p4runtime"]
Role = Literal["master", "backup", "equal"]
CounterKind = Literal["ports", "queues", "entries"]


# -- features ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TableCapacity:
    """One table of a switch and how many entries it holds at most (None: not reported)."""

    table: str
    max_entries: int | None = None


@dataclass(frozen=True)
class SwitchFeatures:
    """What a switch told us when it connected.

    ``protocol``: e.g. ``"OpenFlow 1.5"``, ``"P4Runtime 1.3"``; ``ports``: port numbers it
    reported (None: not known); ``tables``: table capacities where known; ``capabilities``:
    what the driver can do on this switch — ``"atomic"`` (changes commit as one unit),
    ``"ecmp_hash"`` (ECMP sets hash the fields and seed asked for: OpenFlow 1.5 group selection
    properties on Open vSwitch; fabric.p4's ``ecmp_hash`` table), ``"failover"`` (fast-failover
    next-hop sets), ``"queue_depth"`` (counters carry queue depth), ``"roles"`` (master/backup
    with a fencing token)."""

    southbound: SouthboundKind
    dpid: int
    protocol: str
    address: str = ""
    ports: frozenset[int] | None = None
    tables: tuple[TableCapacity, ...] = ()
    capabilities: frozenset[str] = frozenset()


# -- events --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SwitchConnected:
    """A switch finished its handshake. ``session`` numbers its connections (a reconnect gets a
    new one), so late events of an old connection can be told apart."""

    switch: str
    features: SwitchFeatures
    session: int = 0


@dataclass(frozen=True)
class SwitchGone:
    """A switch's connection closed (``reason`` says why, for the log)."""

    switch: str
    session: int = 0
    reason: str = ""


@dataclass(frozen=True)
class PortStatus:
    """A port went up or down (OpenFlow port-status; P4: gNMI or probes)."""

    switch: str
    port: int
    up: bool


@dataclass(frozen=True)
class LinkSeen:
    """A probe sent from ``src_switch``:``src_port`` arrived at ``switch``:``port`` (LLDP, or a
    target's own discovery)."""

    switch: str
    port: int
    src_switch: str
    src_port: int


@dataclass(frozen=True)
class CounterSample:
    """Counters read from a switch at ``now_s`` (the runtime's monotonic clock, s); each part is
    None when it was not part of this reply. ``entries`` are our entries only."""

    switch: str
    now_s: float
    ports: tuple[PortCounters, ...] | None = None
    queues: tuple[QueueCounters, ...] | None = None
    entries: tuple[EntryCounters, ...] | None = None


@dataclass(frozen=True)
class PacketIn:
    """A frame punted to the controller: ``data`` (whole Ethernet frame) arrived on ``port``."""

    switch: str
    port: int
    data: bytes


@dataclass(frozen=True)
class RoleChanged:
    """The switch says our role changed (OpenFlow role-status: another controller became master;
    P4Runtime arbitration update)."""

    switch: str
    role: Role
    reason: str = ""


SouthboundEvent = (SwitchConnected | SwitchGone | PortStatus | LinkSeen | CounterSample
                   | PacketIn | RoleChanged)
EventSink = Callable[[SouthboundEvent], None]
"""Where a driver puts events; callable from any thread."""


# -- results and errors ----------------------------------------------------------------------------
@dataclass(frozen=True)
class SwitchState:
    """A switch read back: our entries as intents, plus how many foreign ones were seen (left
    alone; counted for the log)."""

    plan: SwitchPlan
    foreign_entries: int = 0
    foreign_groups: int = 0


@dataclass(frozen=True)
class ApplyReceipt:
    """A change the switch confirmed: ``messages`` sent by kind (``flow-mod``, ``group-mod``,
    ``bundle``, ``p4-update``, ``p4-write``), and how long from first send to confirmation (ms)."""

    switch: str
    messages: Mapping[str, int] = field(default_factory=dict)
    confirm_ms: float = 0.0


class SouthboundError(RuntimeError):
    """A driver could not do what was asked; the message names the switch."""

    def __init__(self, switch: str, message: str) -> None:
        super().__init__(f"{switch}: {message}")
        self.switch = switch


class NotConnected(SouthboundError):
    """The switch has no connection now."""


class NotMaster(SouthboundError):
    """We are not master of the switch (backup, or deposed): no write was sent."""


class ApplyError(SouthboundError):
    """The switch refused a change. ``nothing_applied``: nothing of it is in force on that switch
    (an OpenFlow bundle not committed); False: part of it may be (P4Runtime applies a batch
    update by update), so what the switch holds is unknown until read back. ``entry`` is the
    refused entry (None when the switch did not say which), ``reason`` the switch's error."""

    def __init__(self, switch: str, reason: str, entry: FlowIntent | None = None, *,
                 nothing_applied: bool = True) -> None:
        what = f"entry {entry}" + (f" ('{entry.origin}')" if entry and entry.origin else "")
        super().__init__(switch, f"{what if entry else 'change'} refused: {reason}")
        self.entry = entry
        self.reason = reason
        self.nothing_applied = nothing_applied


class ApplyTimeout(SouthboundError):
    """No confirmation within the deadline: whether the change is in force is unknown until
    the switch is read back."""


class RoleError(SouthboundError):
    """The switch refused a role request. ``stale``: because its ``generation_id`` /
    ``election_id`` is older than one the switch saw (OpenFlow 1.3.5 §6.3.6
    ``OFPRRFC_STALE``): another controller holds a newer term — routine while mastership moves
    (a backup restating an old token, a deposed master), fencing at work."""

    def __init__(self, switch: str, message: str, stale: bool = False) -> None:
        super().__init__(switch, message)
        self.stale = stale


# -- the driver protocol ---------------------------------------------------------------------------
class SouthboundDriver(Protocol):
    """What the runtime asks of a driver. Every coroutine runs on the runtime's event loop.

    Raises (all coroutines): :class:`NotConnected` when the switch has no connection.
    """

    kind: SouthboundKind
    capabilities: frozenset[str]
    """What every switch of this driver offers (``atomic``, ``failover``, ``roles``, ...)."""

    async def start(self, sink: EventSink) -> None:
        """Start serving switches; events go to ``sink``."""

    async def stop(self) -> None:
        """Close every switch connection and stop."""

    def connected(self) -> frozenset[str]:
        """Switches connected now (their handshake finished)."""

    async def read_state(self, switch: str, *, adopt: bool = True) -> SwitchState:
        """Our entries on ``switch``, decoded into plan intents (foreign ones counted, never
        returned). ``adopt``: rebuild the driver's id allocation for the switch from what was
        read (the runtime's read-back before it writes); False: only look (a drift check,
        which may run while a write is in flight): nothing of the driver changes."""

    async def apply(self, switch: str, changes: SwitchChanges, held: SwitchPlan,
                    timeout_s: float) -> ApplyReceipt:
        """Apply ``changes`` to a switch holding ``held`` (our entries, as the runtime knows
        them) as one unit, and wait for the switch's confirmation. The driver encodes the
        difference; it keeps no copy of what the switch holds.

        Raises :class:`ApplyError` (refused; see ``nothing_applied``), :class:`ApplyTimeout`
        (the outcome is unknown), :class:`NotMaster`, :class:`NotConnected`."""

    async def packet_out(self, switch: str, port: int, data: bytes) -> None:
        """Send the Ethernet frame ``data`` out of ``port``."""

    async def request_counters(self, switch: str, kinds: frozenset[CounterKind]) -> None:
        """Ask for counters; they arrive later as :class:`CounterSample` events."""

    async def set_role(self, switch: str, role: Role, token: int | None) -> Role:
        """Take ``role`` with fencing ``token`` (None: no token; the switch's default role).
        Returns the role in force. Raises :class:`RoleError` when the switch refuses."""

    def messages_sent(self) -> Mapping[tuple[str, str], int]:
        """Messages sent since start, by (switch, kind) (for the metrics)."""
