"""What the runtime core consumes and produces, besides the southbound events
(:mod:`controller.drivers.southbound`).

**Runtime events** (in): :class:`Tick` (the clock, with ``now``), :class:`RoleAssigned` (the
role a switch granted us), :class:`PlacementReady` (a repair, re-optimisation or re-balance
computed off the loop, for the generation it was computed from), :class:`PolicyApplied`,
:class:`CollectivesRegistered`, :class:`CollectiveUnregistered` (operator decisions, stepped
once the switches confirmed them), :class:`IntentSynced` (a replica of a cluster adopts the
intent committed to etcd).

**Effects** (out): what the controller process does after a step — log, publish an event,
send a frame, ask for counters, read a switch back and reconcile it, take a role, compute a
placement off the loop, drive the switches to the intended plan, tell telemetry. The core never
does any of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from controller.drivers.southbound import CounterKind, SouthboundEvent
from controller.runtime.state import Path, PolicyInForce, Registered, RoleName
from controller.te.collectives import FlowDemand

ComputeKind = Literal["repair", "reoptimise", "rebalance"]


# -- events ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tick:
    """The clock: ``now_s`` (monotonic s). Timers (LLDP, counters, re-balancing, retries) fire
    from ticks."""

    now_s: float


@dataclass(frozen=True)
class RoleAssigned:
    """The switch granted us ``role`` (after a role request, or by default)."""

    switch: str
    role: RoleName
    session: int = 0


@dataclass(frozen=True)
class PlacementReady:
    """A placement decision computed off the loop for state ``generation``: ``placement`` (None:
    keep the current one), and for a re-balance its outcome
    (:class:`controller.runtime.rebalance.RebalanceOutcome`)."""

    kind: ComputeKind
    generation: int
    placement: Mapping[FlowDemand, Path] | None
    outcome: object = None
    error: str = ""


@dataclass(frozen=True)
class PolicyApplied:
    """A new policy in force, with the placement computed for it."""

    policy: PolicyInForce
    placement: Mapping[FlowDemand, Path]


@dataclass(frozen=True)
class CollectivesRegistered:
    """Collectives registered at run time (one batch), with the placement that includes them."""

    entries: tuple[Registered, ...]
    placement: Mapping[FlowDemand, Path]


@dataclass(frozen=True)
class CollectiveUnregistered:
    name: str


@dataclass(frozen=True)
class IntentSynced:
    """The cluster's intent (etcd) at intent ``generation``: the policy in force, the registered
    collectives and the placement every replica programs (:mod:`controller.runtime.cluster`)."""

    policy: PolicyInForce
    registered: Mapping[str, Registered]
    placement: Mapping[FlowDemand, Path]
    generation: int


RuntimeEvent = (Tick | RoleAssigned | PlacementReady | PolicyApplied | CollectivesRegistered
                | CollectiveUnregistered | IntentSynced)
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
class Reconcile:
    """Read ``switch`` back and send only the difference to the intended plan."""

    switch: str
    session: int


@dataclass(frozen=True)
class TakeRole:
    """Ask the mastership for our role on ``switch`` and request it from the switch."""

    switch: str
    session: int


@dataclass(frozen=True)
class Compute:
    """Run the ``kind`` decision off the loop on the state of ``generation``."""

    kind: ComputeKind
    generation: int


@dataclass(frozen=True)
class Converge:
    """Drive every writable switch from what it holds to the intended plan (one transaction)."""

    reason: str


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


Effect = (Log | Publish | SendPacket | RequestCounters | Reconcile | TakeRole | Compute | Converge
          | TelemetryPaths | TelemetryLinks | AlertRound | ForgetCounters | Inject)

