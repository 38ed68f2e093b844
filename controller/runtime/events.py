"""What the runtime core consumes and produces, besides the southbound events
(:mod:`controller.drivers.southbound`).

**Runtime events** (in): :class:`Tick` (the clock, with ``now``); the outcomes of the effects
the core asked for — :class:`RoleAssigned` (the role a switch granted us, for the role request
it answers), :class:`ReadBackDone` (a switch read back), :class:`WriteAnswered` (a switch's
answer to its part of a transaction), :class:`PlacementReady` (a repair, re-optimisation or
re-balance computed off the loop, for the generation it was computed from),
:class:`TeFormReady`; :class:`MastershipChanged` (the coordination service moved a switch's
mastership); :class:`IntentSynced` (the intent committed to the intent store — etcd in a
cluster, memory alone — which every operator decision goes through); :class:`BatchAnswered` (the
northbound answered a batch of registrations: the next batch's gathering window follows).

**Effects** (out): what the controller process does after a step — log, publish an event,
send a frame, ask for counters, take a role, read a switch back, write one switch's part of a
transaction, say a transaction finished, compute a placement off the loop, tell telemetry. The
core never does any of it; every message a switch gets comes from a :class:`Write`,
:class:`ReadBack`, :class:`TakeRole`, :class:`SendPacket` or :class:`RequestCounters` effect.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from controller.drivers.southbound import CounterKind, SouthboundEvent, SwitchState
from controller.plan.model import FlowIntent, SwitchChanges, SwitchPlan
from controller.runtime.state import Path, PolicyInForce, Registered, RoleName, RuntimeState
from controller.runtime.transaction import Outcome, Transaction
from controller.te.collectives import FlowDemand
from controller.te.placement import Placement as TePlacement

if TYPE_CHECKING:
    from controller.runtime.placement import PlacementDecision
    from controller.runtime.rebalance import RebalanceOutcome

ComputeKind = Literal["repair", "reoptimise", "rebalance"]


# -- events ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tick:
    """The clock: ``now_s`` (monotonic s). Timers (LLDP, counters, re-balancing, retries) fire
    from ticks."""

    now_s: float


@dataclass(frozen=True)
class RoleAssigned:
    """The switch granted us ``role`` in answer to role request ``request`` of connection
    ``session`` (0: whatever the latest request was)."""

    switch: str
    role: RoleName
    session: int = 0
    request: int = 0


@dataclass(frozen=True)
class MastershipChanged:
    """The coordination service says whether we may write ``switch`` now (``master``)."""

    switch: str
    master: bool


@dataclass(frozen=True)
class ReadBackDone:
    """``switch`` (connection ``session``) read back: our entries as ``read.plan`` (None with
    ``error``: the read-back failed) and how long it took (ms)."""

    switch: str
    session: int
    read: SwitchState | None
    error: str = ""
    elapsed_ms: float = 0.0


@dataclass(frozen=True)
class WriteAnswered:
    """``switch``'s answer to its part of transaction ``txn`` (:data:`~controller.runtime.
    transaction.Outcome`), with the refused entry and the error when refused, the messages sent
    by kind and the confirmation time (ms)."""

    txn: int
    switch: str
    session: int
    outcome: Outcome
    entry: FlowIntent | None = None
    error: str = ""
    messages: Mapping[str, int] = field(default_factory=dict)
    confirm_ms: float = 0.0


@dataclass(frozen=True)
class TeFormReady:
    """``placement`` (the object the state held) converted to its te form."""

    placement: Mapping[FlowDemand, Path]
    te: TePlacement


@dataclass(frozen=True)
class PlacementReady:
    """A placement decision computed off the loop for state ``generation``: ``placement`` (None:
    keep the current one), and for a re-balance its outcome
    (:class:`controller.runtime.rebalance.RebalanceOutcome`)."""

    kind: ComputeKind
    generation: int
    placement: Mapping[FlowDemand, Path] | None
    outcome: PlacementDecision | RebalanceOutcome | None = None
    error: str = ""


@dataclass(frozen=True)
class IntentSynced:
    """The intent at intent ``generation`` (:mod:`controller.runtime.intentstore`): the policy
    in force, the registered collectives and the placement every replica programs.

    ``planned``: the state a preview of this very intent adopted off the loop (the service's,
    :func:`controller.runtime.core.adopt`), or None; its plan is taken over when its inputs are
    this intent's on the state the event meets (not part of the event's value)."""

    policy: PolicyInForce
    registered: Mapping[str, Registered]
    placement: Mapping[FlowDemand, Path]
    generation: int
    planned: RuntimeState | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class BatchAnswered:
    """The northbound answered a batch of ``size`` registrations (or unregistrations) that took
    ``took_s`` seconds from its start to its answers, with ``waiting`` requests queued when it
    ended (:meth:`controller.runtime.batching.BatchWindow.after`)."""

    size: int
    took_s: float
    waiting: int


RuntimeEvent = (Tick | RoleAssigned | MastershipChanged | ReadBackDone | WriteAnswered
                | PlacementReady | TeFormReady | IntentSynced | BatchAnswered)
Event = SouthboundEvent | RuntimeEvent


# -- effects -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Log:
    """A log line; ``switch`` (a name, or "" for the fabric) prefixes it."""

    level: Literal["debug", "info", "warning", "error"]
    switch: str
    text: str


@dataclass(frozen=True)
class Publish:
    """An event for subscribers (:class:`controller.telemetry.EventBus` kinds)."""

    kind: str
    message: str
    fields: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class SendPacket:
    switch: str
    port: int
    data: bytes


@dataclass(frozen=True)
class RequestCounters:
    switch: str
    kinds: frozenset[CounterKind]


@dataclass(frozen=True)
class ReadBack:
    """Read ``switch`` back (answered by :class:`ReadBackDone`)."""

    switch: str
    session: int


@dataclass(frozen=True)
class TakeRole:
    """Ask the mastership for our role on ``switch`` and request it from the switch (answered
    by :class:`RoleAssigned` with ``request``)."""

    switch: str
    session: int
    request: int = 0


@dataclass(frozen=True)
class Write:
    """Send ``part`` (one switch's part of transaction ``txn``) to ``switch`` as one unit;
    ``held``: what the switch holds before it (the driver encodes the difference). Answered by
    :class:`WriteAnswered`."""

    txn: int
    switch: str
    session: int
    part: SwitchChanges
    held: SwitchPlan


@dataclass(frozen=True)
class Written:
    """Transaction ``txn`` finished (confirmed, or refused and rolled back); ``reconciled``:
    the switches whose reconcile it carried, with the entries of ours their read-back found."""

    txn: Transaction
    reconciled: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Compute:
    """Run the ``kind`` decision off the loop on the state of ``generation``."""

    kind: ComputeKind
    generation: int


@dataclass(frozen=True)
class TelemetryPaths:
    """The pinned paths changed (telemetry attributes counters to flows by them)."""

    paths: Mapping[FlowDemand, Path]


@dataclass(frozen=True)
class TelemetryLinks:
    """Links went down or up: telemetry raises/clears link alerts (published by the process);
    ``lost``: flows whose path lost a link."""

    down_links: frozenset[frozenset[str]]
    lost: Mapping[FlowDemand, Path]
    now_s: float


@dataclass(frozen=True)
class AlertRound:
    """Evaluate telemetry alerts on the counters so far."""

    now_s: float


@dataclass(frozen=True)
class Inject:
    """Feed ``event`` back into the runtime as if a driver had sent it (LLDP liveness turns a
    silent P4 port into the PortStatus an OpenFlow switch would have sent)."""

    event: SouthboundEvent


@dataclass(frozen=True)
class ForgetCounters:
    """A switch (re)connected: its counters restart."""

    switch: str


@dataclass(frozen=True)
class ComputeTeForm:
    """Convert the placement in force to its te form off the loop (:class:`TeFormReady`)."""

    placement: Mapping[FlowDemand, Path]


Effect = (Log | Publish | SendPacket | RequestCounters | TakeRole | ReadBack | Write | Written
          | Compute | ComputeTeForm | TelemetryPaths | TelemetryLinks | AlertRound
          | ForgetCounters | Inject)

