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
from typing import Literal

from controller.drivers.southbound import SouthboundKind, SwitchFeatures
from controller.model.topology import Fabric
from controller.policy.model import Collective, Policy
from controller.runtime.liveness import LivenessMemory
from controller.runtime.lldp import LldpMemory
from controller.te.collectives import FlowDemand
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
class SwitchSession:
    """A switch as the runtime sees it: its southbound, whether it is connected (``session``
    numbers its connections), our role, what it said when it connected, and since when."""

    southbound: SouthboundKind = "openflow"
    connected: bool = False
    session: int = 0
    role: RoleName = "none"
    features: SwitchFeatures | None = None
    connected_at_s: float = 0.0


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
    ``liveness_interval_s`` (None: off), ``liveness_misses``, ``liveness_hold_s``: LLDP link
    liveness of P4Runtime switches (:mod:`controller.runtime.liveness`); ``standing_depth``
    (the switch's depth unit: packets on BMv2; None: queue depth not used) and
    ``queued_fraction``: the re-balancer counts a link congested at once when at least that
    share of its packets found that depth ahead of them (:mod:`controller.runtime.rebalance`;
    switches whose counters carry queue depth are then asked for queue counters)."""

    fast_failover: bool = False
    failover_switches: frozenset[str] = frozenset()
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
    standing_depth: int | None = None
    queued_fraction: float = 0.5


@dataclass(frozen=True)
class RuntimeState:
    """Everything the controller decides from (module docstring).

    ``generation`` increases with every change of what the plan depends on (policy,
    registrations, placement, down links); a computation started for one generation is applied
    only if the state is still at it. ``plan_generation`` counts plans made current (exported).
    ``timers``: when each periodic job is next due (s, monotonic). ``intent_generation``: in a
    cluster, the generation of the intent in etcd this state holds (0 alone).
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

    @property
    def down_links(self) -> DownLinks:
        """Switch–switch links that are down: either end reported its port down."""
        port_map = self.fabric.port_map
        return frozenset(frozenset((sw, port_map[(sw, p)][0])) for sw, p in self.down_ports)

    @property
    def effective_policy(self) -> Policy:
        """The policy with the registered collectives appended (what the planner plans)."""
        if not self.registered:
            return self.policy.policy
        pol = self.policy.policy
        return pol.model_copy(update={"collectives": (
            *pol.collectives, *(r.collective for r in self.registered.values()))})

    def session(self, switch: str) -> SwitchSession:
        return self.switches.get(switch) or SwitchSession(self.southbound.get(switch, "openflow"))

    def kind_of(self, switch: str) -> SouthboundKind:
        return self.southbound.get(switch, "openflow")

    def connected(self) -> frozenset[str]:
        return frozenset(n for n, s in self.switches.items() if s.connected)

    def writable(self) -> frozenset[str]:
        """Connected switches we may write to (master, or the only controller)."""
        return frozenset(n for n, s in self.switches.items()
                         if s.connected and s.role == "master")

    def bump(self, **changes: object) -> RuntimeState:
        """``replace`` with ``generation`` + 1 (what the plan depends on changed)."""
        return replace(self, generation=self.generation + 1, **changes)  # type: ignore[arg-type]


def initial_state(fabric: Fabric, policy: PolicyInForce, settings: RuntimeSettings,
                  southbound: Mapping[str, SouthboundKind] | None = None,
                  placement: Mapping[FlowDemand, Path] | None = None) -> RuntimeState:
    """The state a controller starts from (no switch connected yet)."""
    sb = {s.name: (southbound or {}).get(s.name, "openflow") for s in fabric.switches}
    return RuntimeState(fabric, policy, settings, sb, placement=dict(placement or {}),
                        switches={n: SwitchSession(k) for n, k in sb.items()})
