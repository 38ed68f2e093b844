"""The runtime's state as one immutable value: :class:`RuntimeState`.

Everything the controller decides from lives here — the policy in force (with its generation and
digest), the collectives registered at run time, the placement of every pinned flow, the ports
and links that are down, each switch's connection and role, and the re-balancer's and the LLDP
check's memory — and nothing else: counters and rates (the meter, telemetry) are measurements
kept beside it by the controller process. The intended plan is a pure function of this value
(:func:`controller.runtime.intent.intended_plan`), so the value can be stored and replicated
(the policy, the registrations and the placement are what a coordination service keeps; a new
master recomputes the same plan from them and finds nothing to send).

Transitions are pure functions returning a new value (:mod:`controller.runtime.core`); mappings
here are never mutated after construction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from controller.drivers.southbound import SouthboundKind, SwitchFeatures
from controller.model.topology import Fabric
from controller.plan.model import FlowIntent, SwitchPlan
from controller.policy.model import Collective, Policy
from controller.runtime.batching import BatchWindow
from controller.runtime.liveness import LivenessMemory
from controller.runtime.lldp import LldpMemory
from controller.runtime.transaction import Transaction
from controller.te.collectives import FlowDemand
from controller.te.placement import Placement as TePlacement
from controller.te.recovery import Move
from controller.te.reroute import Hysteresis

Path = tuple[str, ...]  # host, switch, ..., host
DirectedLink = tuple[str, str]
DownLinks = frozenset[frozenset[str]]
RoleName = Literal["master", "backup", "none"]


def digest_of(document: str) -> str:
    """sha256 hex of a policy document's text (UTF-8)."""
    return hashlib.sha256(document.encode()).hexdigest()


@dataclass(frozen=True)
class PolicyInForce:
    """The policy the controller runs: the validated model, the document it came from,
    ``source`` (a path, or ``grpc``), a ``generation`` counting applied policies (1 = the one it
    started with), the document's sha256 ``digest`` and when it was applied (Unix s)."""

    policy: Policy
    document: str = ""
    source: str = ""
    generation: int = 1
    digest: str = ""
    applied_unix_s: float = 0.0


@dataclass(frozen=True)
class Registered:
    """A collective registered through the northbound API, with what the caller said of it."""

    collective: Collective
    job: str = ""
    expected_bytes: int | None = None
    registered_unix_s: float = 0.0


@dataclass(frozen=True)
class Refused:
    """A switch refused its part of a transaction aiming at ``target``: it is left out of
    transactions towards that same target until ``until_s`` (monotonic s); ``wait_s`` doubles
    with every refusal in a row (up to 60 s)."""

    target: SwitchPlan | None
    until_s: float
    wait_s: float


@dataclass(frozen=True)
class SwitchSession:
    """A switch as the runtime sees it: its southbound, whether it is connected (``session``
    numbers its connections), our role, what it said when it connected, and since when.

    ``held``: what aifabric knows the switch holds of its own entries — read back when we
    became its master, then updated by every write it acknowledged; None while unknown (not
    master, a read-back on its way, a write whose outcome is unknown): nothing is written to a
    switch whose holdings are unknown. ``reading``: a read-back is on its way.
    ``role_request``: the number of the latest role request (only its answer counts).
    ``refused``: its last refusal (backoff). ``reconciling``: what the last read-back found
    (entries of ours, foreign entries, foreign groups) until the reconcile it started is
    logged."""

    southbound: SouthboundKind = "openflow"
    connected: bool = False
    session: int = 0
    role: RoleName = "none"
    features: SwitchFeatures | None = None
    connected_at_s: float = 0.0
    held: SwitchPlan | None = None
    reading: bool = False
    role_request: int = 0
    refused: Refused | None = None
    reconciling: tuple[int, int, int] | None = None


@dataclass(frozen=True)
class RebalanceMemory:
    """The re-balancer's history: when each flow last moved (s, statistics clock), the last
    rounds' background estimates per directed link (bit/s), when the plan last changed (rates
    spanning it are not used), and the hot links already reported (each is logged once)."""

    last_moved_s: Mapping[FlowDemand, float] = field(default_factory=dict)
    background_bps: Mapping[DirectedLink, tuple[float, ...]] = field(default_factory=dict)
    changed_at_s: float = float("-inf")
    hot_reported: frozenset[DirectedLink] = frozenset()


@dataclass(frozen=True)
class RuntimeSettings:
    """How the runtime decides (fixed for a run).

    ``fast_failover``: protect pinned entries with failover next-hop sets on switches whose
    southbound offers them; ``rebalance``: the re-balancer's hysteresis (None: off);
    ``persist_rounds``: rounds a link's background must persist; intervals in seconds
    (``stats_interval_s`` None: no counters requested); ``lldp_grace_s``: how long a switch
    must have been connected before a declared link of it may be reported missing;
    ``confirm_timeout_s``: how long a switch has to confirm a change; ``failover_switches``:
    the switches whose southbound offers failover next-hop sets (their driver says so);
    ``probed_switches``: those of them that judge their ports by the liveness probes (P4:
    their failover sets carry :class:`~controller.plan.model.LivenessTimers` of the liveness
    settings, and a hop without an alternative sends back to the hop before, ``bounce``);
    ``liveness_interval_s`` (None: off), ``liveness_misses``, ``liveness_hold_s``: LLDP link
    liveness of P4Runtime switches (:mod:`controller.runtime.liveness`);
    ``liveness_dataplane_misses``: the probed switches' own window, in intervals (None:
    ``liveness_misses``); ``standing_depth``
    (the switch's depth unit: packets on BMv2; None: queue depth not used) and
    ``queued_fraction``: the re-balancer counts a link congested at once when at least that
    share of its packets found that depth ahead of them (:mod:`controller.runtime.rebalance`;
    switches whose counters carry queue depth are then asked for queue counters)."""

    fast_failover: bool = False
    failover_switches: frozenset[str] = frozenset()
    probed_switches: frozenset[str] = frozenset()
    rebalance: Hysteresis | None = None
    persist_rounds: int = 2
    lldp_interval_s: float = 5.0
    lldp_grace_s: float = 15.0
    stats_interval_s: float | None = None
    telemetry: bool = False
    confirm_timeout_s: float = 5.0
    retry_interval_s: float = 2.0
    liveness_interval_s: float | None = None
    liveness_misses: int = 3
    liveness_hold_s: float = 10.0
    liveness_dataplane_misses: int | None = None
    standing_depth: int | None = None
    queued_fraction: float = 0.5


@dataclass(frozen=True)
class Refusal:
    """A transaction a switch refused: the intent generation and plan generation it aimed at,
    the switch, the entry it named (None: not known) and the error."""

    intent_generation: int
    plan_generation: int
    switch: str
    entry: FlowIntent | None
    error: str


@dataclass(frozen=True)
class Reoptimisation:
    """A re-optimisation being applied make-before-break (:mod:`controller.runtime.core`):
    its moves in ``batches``, the next one to adopt (``index``), the placement after the last
    batch (``final``) with its te form, and the generation the state must still be at for the
    next batch to be adopted."""

    batches: tuple[tuple[Move, ...], ...]
    final: Mapping[FlowDemand, Path]
    te: TePlacement | None
    expected_generation: int
    index: int = 0


@dataclass(frozen=True)
class TeForm:
    """The placement in force as a te placement (link ids, :func:`controller.runtime.
    placement.te_placement`): a repair starts from it. Valid while ``placement`` is the state's
    placement (the same object)."""

    placement: Mapping[FlowDemand, Path]
    te: TePlacement


class PlanMemo:
    """What is derived from one generation of a state, computed once: shared by the states
    :meth:`RuntimeState.bump` did not separate, and used only while the plan's inputs are the
    very objects it was computed from (``key``; a ``replace`` of an input recomputes). Owned by
    the state value; never a module global (:func:`controller.runtime.intent.intended_plan`).

    ``pinned``: the plan before table fitting, the live pinned flows and each switch's pinned
    entry count; ``binding``: the capacities the plan was fitted with
    (:func:`controller.runtime.intent.fits_as_before`); ``plan``: the fitted plan and the fit's
    report; ``report``: the table report for one ``switches`` mapping (capacities as known
    then); ``routes``, ``previous``: the route plan and the plan of the generation before
    (carried over by :meth:`RuntimeState.bump`: equal routes and equal switch plans are
    reused)."""

    __slots__ = ("binding", "by_collective", "demands", "entries", "generation", "key",
                 "diffs", "effective", "match_of", "matches", "pinned", "plan", "previous",
                 "report", "routes", "switch_reuse")

    def __init__(self, routes: tuple[Any, Any] | None = None, previous: Any = None,
                 entries: tuple[Any, Any] | None = None,
                 match_of: tuple[Any, dict[FlowDemand, Any]] | None = None,
                 switch_reuse: dict[str, Any] | None = None) -> None:
        self.generation = -1
        self.key: tuple[Any, ...] = ()
        self.pinned: Any = None
        self.binding: Any = None
        self.plan: Any = None
        self.report: Any = None
        self.demands: dict[FlowDemand, float] | None = None
        self.matches: Any = None  # placed flows by match (intent.placed_by_match)
        self.by_collective: Any = None  # placed flows by collective
        #: (route inputs, route plan): carried over to the next generation, which reuses it
        #: when its route inputs (ECMP hash settings, down links) are equal
        self.routes = routes
        self.previous = previous
        #: (route inputs and failover switches, flow entries by (flow, path)): carried over
        #: while those inputs stay (controller.plan.pinned.with_pinned's cache)
        self.entries = entries
        #: (fabric, each placed flow's match): carried over; the next generation computes
        #: the matches of its new flows only (intent.placed_by_match)
        self.match_of = match_of
        #: (policy, registrations, the policy with them appended): RuntimeState.
        #: effective_policy, kept while both are the very objects it was made from
        self.effective: tuple[Any, Any, Any] | None = None
        #: (the plan before, this generation's plan, the per-switch changes between them): what
        #: a preview computed (service._preview), taken by writes.drive for a switch holding
        #: the plan before
        self.diffs: tuple[Any, Any, Mapping[str, Any]] | None = None
        #: each switch's plan with its pinned entries, made last (plan.pinned.SwitchReuse):
        #: carried over; a switch whose route plan and pinned entries stay keeps its plan
        self.switch_reuse: dict[str, Any] = switch_reuse if switch_reuse is not None else {}

    def carried(self) -> PlanMemo:
        """A memo for the next generation: the routes and the plan of this one carried over."""
        return PlanMemo(self.routes, self.plan[0] if self.plan is not None else self.previous,
                        self.entries, self.match_of, self.switch_reuse)


@dataclass(frozen=True)
class RuntimeState:
    """Everything the controller decides from (module docstring).

    ``generation`` increases with every change of what the plan depends on (policy,
    registrations, placement, down links); a computation started for one generation is applied
    only if the state is still at it. ``plan_generation`` counts plans made current (exported).
    ``timers``: when each periodic job is next due (s, monotonic). ``intent_generation``: the
    generation of the intent (etcd, or the in-memory store of a lone controller) this state
    holds.

    The write path (:mod:`controller.runtime.core`): ``txn`` is the transaction in flight
    (None: none), ``next_txn`` the next one's number; ``converge`` the reason the switches must
    be compared with the plan again once nothing is in flight ("" : nothing to do);
    ``unsettled``: some switch did not take the last change (refused, or lost mid-way), so the
    retry timer compares again; ``programmed``: the switches that held the plan at least
    once (the start-up line "all N switches programmed"); ``last_refusal``: the last
    transaction that a switch refused (intent generation, switch, error), for the service that
    proposed it; ``tables_reported``: the table-capacity notes last reported (each overflow is
    reported once).
    """

    fabric: Fabric
    policy: PolicyInForce
    settings: RuntimeSettings = RuntimeSettings()
    southbound: Mapping[str, SouthboundKind] = field(default_factory=dict)
    registered: Mapping[str, Registered] = field(default_factory=dict)
    placement: Mapping[FlowDemand, Path] = field(default_factory=dict)
    down_ports: frozenset[tuple[str, int]] = frozenset()
    down_host_ports: frozenset[tuple[str, int]] = frozenset()
    switches: Mapping[str, SwitchSession] = field(default_factory=dict)
    rebalance: RebalanceMemory = RebalanceMemory()
    lldp: LldpMemory = LldpMemory()
    liveness: LivenessMemory = LivenessMemory()
    generation: int = 0
    plan_generation: int = 0
    timers: Mapping[str, float] = field(default_factory=dict)
    intent_generation: int = 0
    txn: Transaction | None = None
    next_txn: int = 1
    converge: str = ""
    unsettled: bool = False
    programmed: frozenset[str] = frozenset()
    last_refusal: Refusal | None = None
    reopt: Reoptimisation | None = None
    tables_reported: tuple[str, ...] = ()
    te_form: TeForm | None = None
    batching: BatchWindow = BatchWindow()
    memo: PlanMemo = field(default_factory=lambda: PlanMemo(), compare=False, repr=False)

    @property
    def down_links(self) -> DownLinks:
        """Switch–switch links that are down: either end reported its port down."""
        port_map = self.fabric.port_map
        return frozenset(frozenset((sw, port_map[(sw, p)][0])) for sw, p in self.down_ports)

    @property
    def effective_policy(self) -> Policy:
        """The policy with the registered collectives appended (what the planner plans); made
        once per policy and registrations (a copy of a policy with a thousand collectives, asked
        several times by every registration request)."""
        if not self.registered:
            return self.policy.policy
        pol = self.policy.policy
        kept = self.memo.effective
        if kept is not None and kept[0] is pol and kept[1] is self.registered:
            got: Policy = kept[2]
            return got
        got = pol.model_copy(update={"collectives": (
            *pol.collectives, *(r.collective for r in self.registered.values()))})
        self.memo.effective = (pol, self.registered, got)
        return got

    def session(self, switch: str) -> SwitchSession:
        return self.switches.get(switch) or SwitchSession(self.southbound.get(switch, "openflow"))

    def kind_of(self, switch: str) -> SouthboundKind:
        return self.southbound.get(switch, "openflow")

    def connected(self) -> frozenset[str]:
        return frozenset(n for n, s in self.switches.items() if s.connected)

    def holdings(self) -> dict[str, SwitchPlan]:
        """What each switch whose holdings are known holds (our entries)."""
        return {n: s.held for n, s in self.switches.items() if s.held is not None}

    def known(self, switch: str) -> bool:
        """We may write ``switch`` and know what it holds."""
        s = self.switches.get(switch)
        return s is not None and s.connected and s.role == "master" and s.held is not None

    def writable(self) -> frozenset[str]:
        """Connected switches we may write to (master, or the only controller)."""
        return frozenset(n for n, s in self.switches.items()
                         if s.connected and s.role == "master")

    def bump(self, **changes: Any) -> RuntimeState:
        """``replace`` with ``generation`` + 1 (what the plan depends on changed)."""
        return replace(self, generation=self.generation + 1, memo=self.memo.carried(),
                       **changes)


def initial_state(fabric: Fabric, policy: PolicyInForce, settings: RuntimeSettings,
                  southbound: Mapping[str, SouthboundKind] | None = None,
                  placement: Mapping[FlowDemand, Path] | None = None) -> RuntimeState:
    """The state a controller starts from (no switch connected yet)."""
    sb = {s.name: (southbound or {}).get(s.name, "openflow") for s in fabric.switches}
    return RuntimeState(fabric, policy, settings, sb, placement=dict(placement or {}),
                        switches={n: SwitchSession(k) for n, k in sb.items()},
                        intent_generation=1)
