"""The controller's state, without os-ken: the current plan, the links that are down, and what to
send when a port changes state. Also the LLDP check of discovered links against the fabric.

Port events (decided here, documented for the driver):

* Each end of a **switch–switch link** is tracked on its own (``down_ports``); the link is down
  while *either* end last reported down, and up only when both ends report up. Open vSwitch
  sends several port-status messages per transition, and the far end's "up" can arrive after
  the near end's "down" (seen in the failover lab): a per-link flag would bring the link back on
  that stale "up". When ``down_links`` changes, the plan is recomputed with
  ``build_plan(fabric, policy, down_links)`` and only the per-switch differences are returned;
  when the link is up again the original plan (and an empty diff against it) comes back.
* A port of a **host link** changes nothing in the fabric plan: a host has one link, so no
  re-route can reach it; routes towards it stay installed (the leaf drops its traffic while the
  port is down) and are valid again the moment it comes back. The state is recorded in
  ``down_host_ports`` for logs.
* A port the fabric does not declare (OVS ``LOCAL``, spare ports) is ignored.
* An event that leaves ``down_links`` unchanged (the second end of a link reporting the same
  thing, one end "up" while the other is still down, a repeat) returns ``{}``.
* If recomputation fails (:class:`PlanInvariantError`, e.g. the fabric is partitioned), the link
  stays recorded as down, the previous plan stays installed, and the error propagates so the
  caller logs it; the next event recomputes with every recorded failure.
* A port event re-plans from scratch (the planner's pinning with the down links removed); moves
  made earlier by the re-balancer are re-evaluated at its next round.

Load-adaptive re-balancing (``routing.mode: pinned``; pure, the driver feeds counters and a clock):

* :meth:`ControllerRuntime.port_counters` and :meth:`ControllerRuntime.entry_counters` take the
  byte counters of a switch's ports (tx) and of its pinned entries, as read from port and flow
  statistics; :class:`TrafficMeter` turns consecutive samples into rates (bit/s).
* Per directed switch–switch link u→v, :meth:`ControllerRuntime.link_loads` gives the measured
  total (port u→v tx rate), the measured rate of our pinned entries at u leaving towards v, and
  their difference, the **background** (traffic the controller does not place). A link is left
  out of a round when a pinned entry on it has no rate yet (just installed) or when a rate spans
  the last plan change (the paths it is attributed to were not those the bytes took).
* The background a round acts on is, per link, the **minimum of the last**
  ``persist_rounds`` **rounds' estimates** (2 by default). Open vSwitch refreshes flow-entry
  counters from its datapath only every revalidation (up to 500 ms), while port counters are
  current, so when rates change the difference shows a transient "background" on links that
  carry none (up to a third of the link in the adaptive lab); a real background persists.
* :meth:`ControllerRuntime.rebalance` asks :func:`controller.te.reroute.rebalance` to move the
  fewest pinned flows so that (background + pinned *demand*) / capacity falls under the
  threshold, with its hysteresis (margin, hold time). Demands are the link-rate-bound rates of
  :func:`controller.te.patterns.demand_rates_bps` with every pinned flow running at once: what
  the collective needs, not what it gets while squeezed.

Fast failover (``fast_failover=True``): a pinned entry on a switch with more than one shortest
next hop towards the flow's destination (a leaf's uplinks) outputs to an OpenFlow 1.3 fast-failover
group instead of a port: its planned port first, then the other next hops, each bucket watching
its port (OpenFlow 1.3.5 §5.6.1), so the switch moves the flow the moment the port goes down,
before the controller re-pins. Where only one next hop exists (a spine towards a leaf), nothing
local can help and the re-pin on port-status restores the flow.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.errors import PlanInvariantError
from controller.model.topology import Fabric
from controller.plan.build import TABLE, pinned_match
from controller.plan.model import (
    PRIO_PINNED,
    Action,
    FabricPlan,
    FlowIntent,
    GroupIntent,
    Match,
    SwitchChanges,
    SwitchPlan,
    diff_plans,
)
from controller.policy.model import Policy
from controller.te.collectives import FlowDemand
from controller.te.invariants import check_path
from controller.te.patterns import Group, Traffic, demand_rates_bps
from controller.te.reroute import Hysteresis
from controller.te.reroute import rebalance as te_rebalance

DownLinks = frozenset[frozenset[str]]
Planner = Callable[..., Any]  # build_plan(fabric, policy, down_links=...) -> PlanResult
Endpoint = tuple[int, int]  # (dpid, port)
Path = tuple[str, ...]  # host, switch, ..., host
DirectedLink = tuple[str, str]
FF_GROUP_BASE = 0x8000_0000
"""Fast-failover group ids: ``FF_GROUP_BASE | primary << 24 | mask of the backup ports``
(ports 1..24); ECMP select groups use plain port bitmasks (:func:`group_id_for_ports`)."""
FF_KIND = "fast-failover"


def _default_planner(fabric: Fabric, policy: Policy, down_links: DownLinks = frozenset()) -> Any:
    from controller.plan.build import build_plan

    return build_plan(fabric, policy, down_links=down_links)


def switch_label(fabric: Fabric, name_or_dpid: str | int) -> str:
    """``[leaf1 dpid=0x5]`` (or ``[dpid=0x63 unknown]``) for log lines."""
    if isinstance(name_or_dpid, int):
        sw = fabric.switch_by_dpid.get(name_or_dpid)
        if sw is None:
            return f"[dpid={name_or_dpid:#x} unknown]"
        return f"[{sw.name} dpid={sw.dpid:#x}]"
    sw = fabric.switch_by_name[name_or_dpid]
    return f"[{sw.name} dpid={sw.dpid:#x}]"


# -- measured load ------------------------------------------------------------------------------
class TrafficMeter:
    """Byte counters → rates (bit/s), per switch port and per pinned entry (pure; no clock).

    Each sample is ``(bytes, now_s)``; a rate is 8 × Δbytes / Δt over the two latest samples of
    the same counter. A counter that went backwards (the entry was re-created, the port
    re-added) or a non-increasing time gives no rate until the next sample.

    Attributes
    ----------
    port_rate_bps : dict of (str, int) to (float, float, float)
        (switch, port) → (tx rate in bit/s, times of the older and newer samples in s).
    entry_rate_bps : dict of (str, Match) to (float, float, float)
        (switch, match of a pinned entry) → (rate in bit/s, times of the two samples in s).
    """

    def __init__(self) -> None:
        self._ports: dict[tuple[str, int], tuple[int, float]] = {}
        self._entries: dict[tuple[str, Match], tuple[int, float]] = {}
        self.port_rate_bps: dict[tuple[str, int], tuple[float, float, float]] = {}
        self.entry_rate_bps: dict[tuple[str, Match], tuple[float, float, float]] = {}

    @staticmethod
    def _update(last: dict[Any, tuple[int, float]], rates: dict[Any, tuple[float, float, float]],
                key: Any, nbytes: int, now_s: float) -> None:
        prev = last.get(key)
        last[key] = (int(nbytes), now_s)
        if prev is None:
            return
        db, dt = int(nbytes) - prev[0], now_s - prev[1]
        if db < 0 or dt <= 0:
            rates.pop(key, None)
            return
        rates[key] = (8.0 * db / dt, prev[1], now_s)

    def ports(self, switch: str, tx_bytes: Mapping[int, int], now_s: float) -> None:
        """Record the tx byte counter of each port of ``switch`` read at ``now_s`` (s)."""
        for port, nbytes in tx_bytes.items():
            self._update(self._ports, self.port_rate_bps, (switch, port), nbytes, now_s)

    def entries(self, switch: str, byte_counts: Mapping[Match, int], now_s: float) -> None:
        """Record the byte counter of each pinned entry (by match) of ``switch`` at ``now_s``.
        Entries that are no longer reported are forgotten."""
        for match, nbytes in byte_counts.items():
            self._update(self._entries, self.entry_rate_bps, (switch, match), nbytes, now_s)
        for key in [k for k in self._entries if k[0] == switch and k[1] not in byte_counts]:
            del self._entries[key]
            self.entry_rate_bps.pop(key, None)


@dataclass(frozen=True)
class LinkLoad:
    """Measured load of one directed switch–switch link u→v over the last statistics interval.

    ``total_bps``: port u→v tx rate; ``pinned_bps``: the rate of our pinned entries at u that
    leave towards v; ``background_bps`` = max(total − pinned, 0); ``planned_bps``: the pinned
    flows' *demands* on the link; all bit/s. ``capacity_bps`` is the link rate.
    """

    link: DirectedLink
    capacity_bps: float
    total_bps: float
    pinned_bps: float
    planned_bps: float

    @property
    def background_bps(self) -> float:
        return max(self.total_bps - self.pinned_bps, 0.0)

    @property
    def utilisation(self) -> float:
        """(background + planned demand) / capacity: what :func:`te_rebalance` acts on."""
        return (self.background_bps + self.planned_bps) / self.capacity_bps

    def describe(self) -> str:
        """``leaf1->spine1 at 1.60 (background 9.0 Mbit/s + pinned demand 15.0 Mbit/s of 15.0;
        measured 15.0 Mbit/s, of which pinned 6.0)``."""
        mb = 1e6
        return (f"{self.link[0]}->{self.link[1]} at {self.utilisation:.2f} (background "
                f"{self.background_bps / mb:.1f} Mbit/s + pinned demand "
                f"{self.planned_bps / mb:.1f} Mbit/s of {self.capacity_bps / mb:.1f}; measured "
                f"{self.total_bps / mb:.1f} Mbit/s, of which pinned {self.pinned_bps / mb:.1f})")


@dataclass(frozen=True)
class FlowMove:
    """A pinned flow the re-balancer moved: its old and new paths (host … host)."""

    flow: FlowDemand
    old_path: Path
    new_path: Path


@dataclass(frozen=True)
class RebalanceOutcome:
    """What one :meth:`ControllerRuntime.rebalance` round decided.

    ``changes``: per-switch changes to send (empty when nothing moved); ``moves``: the moved
    flows; ``hot``: the links above the threshold (their measured loads), hottest first;
    ``max_utilisation_before/after``: (background + demand) / capacity over all links, before
    and after the moves (equal when nothing moved); ``reason``: why nothing moved, if so.
    """

    changes: dict[str, SwitchChanges] = field(default_factory=dict)
    moves: tuple[FlowMove, ...] = ()
    hot: tuple[LinkLoad, ...] = ()
    max_utilisation_before: float = 0.0
    max_utilisation_after: float = 0.0
    reason: str = ""


# -- pinned entries (with fast-failover protection) ---------------------------------------------
def ff_group_id(ports: tuple[int, ...]) -> int:
    """The id of the fast-failover group whose buckets are ``ports`` in that order (the first is
    the planned port, the others backups, ascending): ``FF_GROUP_BASE | primary << 24 | mask``.

    Raises
    ------
    ValueError
        Fewer than two ports, a repeated port, a port outside 1..24, or backups not ascending.
    """
    if len(ports) < 2 or len(set(ports)) != len(ports):
        raise ValueError(f"a fast-failover group needs ≥ 2 distinct ports, got {ports}")
    if any(not 1 <= p <= 24 for p in ports):
        raise ValueError(f"fast-failover group ports {ports}: only ports 1..24 have ids")
    if list(ports[1:]) != sorted(ports[1:]):
        raise ValueError(f"fast-failover group ports {ports}: backups must be ascending")
    mask = 0
    for p in ports[1:]:
        mask |= 1 << (p - 1)
    return FF_GROUP_BASE | ports[0] << 24 | mask


def compose_plan(fabric: Fabric, base: FabricPlan, paths: Mapping[FlowDemand, Path],
                 down_links: DownLinks, next_hops: Mapping[str, Mapping[str, tuple[int, ...]]]
                 | None = None, fast_failover: bool = False) -> FabricPlan:
    """``base`` with its pinned entries replaced by entries for ``paths``.

    Parameters
    ----------
    base
        A plan from the planner (its control and route entries and ECMP groups are kept).
    paths
        The pinned path of every flow (host … host); each must pass
        :func:`controller.te.invariants.check_path` with ``down_links``.
    next_hops
        ``next_hops[switch][host]`` → shortest-path ports (the planner's ECMP next hops with
        ``down_links`` removed); needed for ``fast_failover``.
    fast_failover
        Entries on a switch with ≥ 2 next hops towards the destination output to a
        fast-failover group (planned port first, then the other next hops ascending).

    Raises
    ------
    PlanInvariantError
        A path breaks an invariant, two flows with one match need different ports on a switch,
        or a fast-failover group id collides with an ECMP group's.
    """
    entries: dict[str, dict[Match, FlowIntent]] = {}
    ff_groups: dict[str, set[GroupIntent]] = {}
    for demand, path in paths.items():
        check_path(fabric, path, down_links, src=demand.src, dst=demand.dst)
        match = pinned_match(fabric, demand)
        origin = f"pin {demand.label}"
        for i in range(1, len(path) - 1):
            node, nxt = path[i], path[i + 1]
            port = fabric.port_towards(node, nxt)
            action = Action("output", port)
            if fast_failover and next_hops is not None:
                alts = tuple(p for p in next_hops.get(node, {}).get(demand.dst, ()) if p != port)
                if alts and max(port, *alts) <= 24:
                    ports = (port, *sorted(alts))
                    grp = GroupIntent(ff_group_id(ports), ports, kind=FF_KIND)  # type: ignore[arg-type]
                    ff_groups.setdefault(node, set()).add(grp)
                    action = Action("group", grp.group_id)
            fi = FlowIntent(TABLE, PRIO_PINNED, match, action, origin)
            at = entries.setdefault(node, {})
            old = at.get(match)
            if old is not None and old.action != fi.action:
                raise PlanInvariantError(
                    f"switch {node}: pinned flows '{old.origin}' and '{origin}' have the same "
                    f"match but leave differently ({old.action} vs {fi.action})")
            at[match] = fi
    out: dict[str, SwitchPlan] = {}
    for name, sp in base.switches.items():
        flows = {f for f in sp.flows if f.priority != PRIO_PINNED}
        flows |= set(entries.get(name, {}).values())
        groups = {g for g in sp.groups if g.kind != FF_KIND}
        ff = ff_groups.get(name, set())
        clash = {g.group_id for g in groups} & {g.group_id for g in ff}
        if clash:
            raise PlanInvariantError(f"switch {name}: fast-failover group id(s) "
                                     f"{sorted(hex(c) for c in clash)} collide with ECMP groups")
        out[name] = SwitchPlan(sp.switch, sp.dpid, frozenset(flows), frozenset(groups | ff))
    return FabricPlan(out)


def pinned_demands_bps(fabric: Fabric, flows: Iterable[FlowDemand]) -> dict[FlowDemand, float]:
    """Each pinned flow's demand, bit/s: its rate in the link-rate-bound schedule with every
    pinned flow running at once (:func:`controller.te.patterns.demand_rates_bps`, one phase)."""
    fl = tuple(flows)
    if not fl:
        return {}
    return demand_rates_bps(fabric, [Traffic("pinned", 0.0, ((Group(fl, 0.0),),))])


class ControllerRuntime:
    """The running controller's state for one fabric and policy.

    Parameters
    ----------
    fabric, policy
        The validated fabric and policy.
    planner
        ``planner(fabric, policy, down_links=...)`` returning an object with ``.plan``
        (a :class:`FabricPlan`) and, for re-balancing and fast failover, ``.pinning``
        (``.paths``) and ``.next_hops``; defaults to :func:`controller.plan.build.build_plan`.
    fast_failover
        Protect pinned entries with fast-failover groups where a switch has another next hop
        (module docstring).
    hysteresis
        When :meth:`rebalance` moves flows (:class:`controller.te.reroute.Hysteresis`).
    persist_rounds
        Re-balancing rounds a link's background must persist (the minimum over them is used).
    telemetry
        A :class:`controller.telemetry.Telemetry` fed with every statistics reply, told the
        pinned paths and link failures (None: no telemetry beyond re-balancing).
    events
        A :class:`controller.telemetry.EventBus` that gets link-down/up, re-pin, re-plan
        failure and alert events (None: none are published).

    Methods are serialised by an internal lock (os-ken handlers run on several threads).
    """

    def __init__(self, fabric: Fabric, policy: Policy, planner: Planner | None = None, *,
                 fast_failover: bool = False, hysteresis: Hysteresis | None = None,
                 persist_rounds: int = 2, telemetry: Any = None, events: Any = None) -> None:
        self.fabric = fabric
        self.telemetry = telemetry
        self.events = events
        self.connected: dict[str, bool] = {}
        self.plan_generation = 0
        self.registered: dict[str, dict[str, Any]] = {}
        self.policy = policy
        self._planner = planner or _default_planner
        self._lock = threading.RLock()
        self.fast_failover = fast_failover
        self.hysteresis = hysteresis or Hysteresis()
        self.down_links: DownLinks = frozenset()
        self.down_ports: frozenset[tuple[str, int]] = frozenset()
        self.down_host_ports: frozenset[tuple[str, int]] = frozenset()
        self.result: Any = None
        self._plan: FabricPlan | None = None
        self.paths: dict[FlowDemand, Path] = {}
        self.demands_bps: dict[FlowDemand, float] = {}
        self.last_moved_s: dict[FlowDemand, float] = {}
        self.meter = TrafficMeter()
        self.persist_rounds = persist_rounds
        self.changed_at_s = float("-inf")
        self._background_history: dict[DirectedLink, list[float]] = {}

    @property
    def plan(self) -> FabricPlan:
        """The plan currently intended (computes the initial plan on first use)."""
        with self._lock:
            if self._plan is None:
                self.initial_plan()
            assert self._plan is not None
            return self._plan

    def _adopt(self, result: Any, paths: Mapping[FlowDemand, Path] | None = None) -> FabricPlan:
        """Make ``result`` (a planner answer) current, with ``paths`` instead of its pinning
        when given, and fast-failover groups when enabled. Returns the new plan (not yet
        current if this raises)."""
        pinning = getattr(result, "pinning", None)
        new_paths = dict(paths if paths is not None
                         else (pinning.paths if pinning is not None else {}))
        plan = result.plan
        if paths is not None or (self.fast_failover and new_paths):
            plan = compose_plan(self.fabric, result.plan, new_paths, self.down_links,
                                getattr(result, "next_hops", None), self.fast_failover)
        self.result = result
        self._plan = plan
        if set(new_paths) != set(self.paths):
            self.demands_bps = pinned_demands_bps(self.fabric, new_paths)
        self.paths = new_paths
        self.plan_generation += 1
        if self.telemetry is not None:
            self.telemetry.set_paths(new_paths)
        return plan

    def initial_plan(self) -> FabricPlan:
        """Compute the plan with no failures (raises PlanInvariantError) and make it current."""
        with self._lock:
            self.down_links = frozenset()
            self.down_ports = frozenset()
            self.down_host_ports = frozenset()
            result = self._planner(self.fabric, self.policy, down_links=frozenset())
            return self._adopt(result)

    def switch_plan(self, switch: str) -> SwitchPlan | None:
        """The current plan of ``switch`` (None if the plan has nothing for it)."""
        return self.plan.switches.get(switch)

    def port_status(self, switch_name: str, port_no: int, is_up: bool,
                    now_s: float | None = None) -> dict[str, SwitchChanges]:
        """Record a port going down or up and return the per-switch changes to send (only the
        switches whose plan changed; ``{}`` if none). See the module docstring for the rules.

        ``now_s`` (s, the statistics clock) stamps the alerts a failure raises; events and
        alerts go to ``events``/``telemetry`` when set (also when recomputation fails).

        Raises
        ------
        KeyError
            ``switch_name`` is not a switch of the fabric.
        PlanInvariantError
            The recomputed plan is invalid; nothing changes but the recorded link state.
        """
        if switch_name not in self.fabric.switch_by_name:
            raise KeyError(f"no switch {switch_name!r} in fabric {self.fabric.name!r}")
        with self._lock:
            old = self.plan
            peer = self.fabric.port_map.get((switch_name, port_no))
            if peer is None:
                return {}
            node = peer[0]
            if self.fabric.is_host(node):
                key = (switch_name, port_no)
                hp = set(self.down_host_ports)
                hp.discard(key) if is_up else hp.add(key)
                self.down_host_ports = frozenset(hp)
                return {}
            key = (switch_name, port_no)
            ports = set(self.down_ports)
            ports.discard(key) if is_up else ports.add(key)
            self.down_ports = frozenset(ports)
            down: DownLinks = frozenset(frozenset((sw, self.fabric.port_map[(sw, p)][0]))
                                        for sw, p in ports)
            if down == self.down_links:
                return {}
            before_down, before_paths = self.down_links, dict(self.paths)
            self.down_links = down
            try:
                result = self._planner(self.fabric, self.policy, down_links=self.down_links)
                changes = diff_plans(old, self._adopt(result))
            except (PlanInvariantError, ValueError) as exc:
                self._report_links(before_down, before_paths, now_s, failed=str(exc))
                raise
            self.changed_at_s = self._last_counter_s()
            self._background_history.clear()
            self._report_links(before_down, before_paths, now_s)
            return changes

    def _report_links(self, before_down: DownLinks, before_paths: Mapping[FlowDemand, Path],
                      now_s: float | None, failed: str | None = None) -> None:
        """Tell telemetry and the event bus what a port event changed: links down/up, the
        pinned flows that lost a link (alerts), the flows re-pinned, or the failed re-plan."""
        new_down = self.down_links - before_down
        new_up = before_down - self.down_links
        lost = {d: p for d, p in before_paths.items()
                if any(frozenset(e) in new_down for e in zip(p, p[1:], strict=False))}
        t = now_s if now_s is not None else max(self._last_counter_s(), 0.0)
        raised = []
        if self.telemetry is not None:
            raised = self.telemetry.links_changed(self.down_links, lost, t)
        bus = self.events
        if bus is None:
            return
        for kind, links in (("link-down", new_down), ("link-up", new_up)):
            for ln in sorted(links, key=sorted):
                a, b = sorted(ln)
                bus.publish(kind, f"link {a}-{b} {kind[5:]}"
                            + (f"; {len(lost)} pinned flow(s) lost a link" if kind == "link-down"
                               else ""), switch=a, link=f"{a}-{b}")
        for al in raised:
            bus.publish("alert-raised", al.message, switch=al.switch, alert=al.kind,
                        link=al.subject if al.kind.startswith("link") else "",
                        flow=al.subject if al.kind.startswith("pinned") else "")
        if failed is not None:
            bus.publish("replan-failed", f"recomputation failed, the installed plan stays: "
                                         f"{failed}")
            return
        self.publish_repins(before_paths, "link state changed")

    def publish_repins(self, before: Mapping[FlowDemand, Path], why: str) -> int:
        """Publish a ``repin`` event for every flow of ``before`` whose path is now different
        (not for flows that appeared or disappeared). Returns how many."""
        if self.events is None:
            return 0
        n = 0
        for d, old in sorted(before.items()):
            new = self.paths.get(d)
            if new is None or new == old:
                continue
            k = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), 2)
            self.events.publish("repin", f"{d.label} moved from {' '.join(old)} to "
                                         f"{' '.join(new)} ({why})", switch=old[max(k - 1, 1)],
                                collective=d.collective, flow=d.label, old_path=old,
                                new_path=new)
            n += 1
        return n

    def _last_counter_s(self) -> float:
        """The newest counter sample time (the runtime has no clock of its own): rates from
        samples up to it span a plan change and are not used."""
        times = [r[2] for r in self.meter.port_rate_bps.values()]
        return max(times, default=float("-inf"))

    # -- measured load and re-balancing ------------------------------------------------------
    def port_counters(self, switch: str, tx_bytes: Mapping[int, int], now_s: float) -> None:
        """Record ``switch``'s port tx byte counters (from port statistics) read at ``now_s``."""
        with self._lock:
            self.meter.ports(switch, tx_bytes, now_s)

    def entry_counters(self, switch: str, byte_counts: Mapping[tuple[int, Match], int],
                       now_s: float) -> None:
        """Record byte counters of ``switch``'s flow entries, keyed by (priority, match), read
        at ``now_s``; the meter keeps only the pinned entries (:data:`PRIO_PINNED`), telemetry
        also the route entries (host-pair traffic)."""
        with self._lock:
            self.meter.entries(switch, {m: b for (prio, m), b in byte_counts.items()
                                        if prio == PRIO_PINNED}, now_s)
            if self.telemetry is not None:
                from controller.telemetry.samples import EntryCounters

                self.telemetry.record_entries(
                    switch, [EntryCounters(prio, m, b) for (prio, m), b in byte_counts.items()],
                    now_s)

    def port_stats(self, switch: str, counters: Iterable[Any], now_s: float) -> None:
        """Record ``switch``'s full port counters (:class:`controller.telemetry.PortCounters`)
        read at ``now_s``: tx bytes for re-balancing, everything for telemetry."""
        cs = list(counters)
        with self._lock:
            self.meter.ports(switch, {c.port: c.tx_bytes for c in cs}, now_s)
            if self.telemetry is not None:
                self.telemetry.record_ports(switch, cs, now_s)

    def queue_stats(self, switch: str, counters: Iterable[Any], now_s: float) -> None:
        """Record ``switch``'s queue counters (:class:`controller.telemetry.QueueCounters`)."""
        if self.telemetry is not None:
            self.telemetry.record_queues(switch, list(counters), now_s)

    def switch_connection(self, switch: str, connected: bool) -> None:
        """Record that ``switch`` connected (True) or disconnected (False)."""
        with self._lock:
            self.connected[switch] = connected

    def telemetry_round(self, now_s: float) -> tuple[list[Any], list[Any]]:
        """Evaluate alerts on the counters so far (telemetry clock ``now_s``, s); publish an
        ``alert-raised``/``alert-cleared`` event for each change. Returns (raised, cleared)."""
        if self.telemetry is None:
            return [], []
        with self._lock:
            raised, cleared = self.telemetry.evaluate(now_s)
        if self.events is not None:
            for kind, alerts in (("alert-raised", raised), ("alert-cleared", cleared)):
                for al in alerts:
                    msg = al.message if kind == "alert-raised" else f"cleared: {al.message}"
                    self.events.publish(kind, msg, switch=al.switch, alert=al.kind,
                                        link=al.subject if al.kind.startswith("link") else "",
                                        flow=al.subject if al.kind.startswith("pinned") else "")
        return raised, cleared

    # -- collectives registered at run time (northbound) -----------------------------------------
    def register_collective(self, coll: Any, meta: Mapping[str, Any] | None = None
                            ) -> dict[str, SwitchChanges]:
        """Add a validated policy :class:`~controller.policy.model.Collective` and pin its
        flows around the installed ones (:func:`controller.runtime.registration.place_new_flows`);
        returns the per-switch changes to send. ``meta`` (job, expected bytes, …) is kept in
        :attr:`registered`.

        Raises
        ------
        ValueError
            Not in ``routing.mode: pinned``, the name is taken, or a flow has no path.
        PlanInvariantError
            The new plan breaks an invariant; nothing changes.
        """
        from controller.runtime.registration import place_new_flows

        with self._lock:
            if self.policy.routing.mode != "pinned":
                raise ValueError(f"routing.mode is {self.policy.routing.mode!r}: collectives are "
                                 "pinned only in 'pinned' mode")
            if any(c.name == coll.name for c in self.policy.collectives):
                raise ValueError(f"collective {coll.name!r} exists")
            old = self.plan
            policy = self.policy.model_copy(update={"collectives": (*self.policy.collectives,
                                                                    coll)})
            result = self._planner(self.fabric, policy, down_links=self.down_links)
            new = [d for d in result.pinning.paths if d.collective == coll.name]
            demands = pinned_demands_bps(self.fabric, [*self.paths, *new])
            paths = place_new_flows(self.fabric, self.paths, demands, new, self.down_links)
            plan = self._adopt(result, paths)
            self.policy = policy
            self.registered[coll.name] = dict(meta or {})
            return diff_plans(old, plan)

    def unregister_collective(self, name: str) -> dict[str, SwitchChanges]:
        """Remove a registered collective and its pinned entries (other flows stay put);
        returns the changes. Raises KeyError when ``name`` was not registered at run time."""
        with self._lock:
            if name not in self.registered:
                raise KeyError(name)
            old = self.plan
            policy = self.policy.model_copy(update={"collectives": tuple(
                c for c in self.policy.collectives if c.name != name)})
            result = self._planner(self.fabric, policy, down_links=self.down_links)
            paths = {d: p for d, p in self.paths.items() if d.collective != name}
            plan = self._adopt(result, paths)
            self.policy = policy
            del self.registered[name]
            return diff_plans(old, plan)

    def link_loads(self, now_s: float, max_age_s: float = 5.0) -> dict[DirectedLink, LinkLoad]:
        """Measured load of every directed switch–switch link whose counters are fresh (newer
        than ``now_s - max_age_s``), measured after the last plan change, and whose pinned
        entries all have rates (module docstring). Bit/s; one round, no persistence filter."""
        with self._lock:
            fab = self.fabric
            on_link: dict[DirectedLink, list[FlowDemand]] = {}
            for d, p in self.paths.items():
                for u, v in zip(p[1:-2], p[2:-1], strict=True):
                    on_link.setdefault((u, v), []).append(d)
            out: dict[DirectedLink, LinkLoad] = {}
            for ln in fab.links:
                if fab.is_host(ln.a) or fab.is_host(ln.b):
                    continue
                for u, v in ((ln.a, ln.b), (ln.b, ln.a)):
                    if frozenset((u, v)) in self.down_links:
                        continue
                    def fresh(r: tuple[float, float, float] | None) -> bool:
                        return (r is not None and r[2] >= now_s - max_age_s
                                and r[1] > self.changed_at_s)

                    tot = self.meter.port_rate_bps.get((u, fab.port_towards(u, v)))
                    if not fresh(tot):
                        continue
                    assert tot is not None
                    flows = on_link.get((u, v), [])
                    rates = [self.meter.entry_rate_bps.get((u, pinned_match(fab, d)))
                             for d in flows]
                    if not all(fresh(r) for r in rates):
                        continue
                    pinned = sum(r[0] for r in rates if r is not None)
                    planned = sum(self.demands_bps.get(d, 0.0) for d in flows)
                    out[(u, v)] = LinkLoad((u, v), float(ln.capacity_bps), tot[0], pinned,
                                           planned)
            return out

    def rebalance(self, now_s: float) -> RebalanceOutcome:
        """One re-balancing round on the latest measured loads (module docstring).

        Returns
        -------
        RebalanceOutcome
            With the per-switch changes to send when flows moved (the new plan is then
            current); ``reason`` says why nothing moved otherwise.

        Raises
        ------
        PlanInvariantError
            The plan for the new paths breaks an invariant; nothing changes.
        """
        with self._lock:
            if not self.paths:
                return RebalanceOutcome(reason="no pinned flows")
            raw = self.link_loads(now_s)
            hist = self._background_history
            for k in [k for k in hist if k not in raw]:
                del hist[k]
            loads: dict[DirectedLink, LinkLoad] = {}
            for k, ld in raw.items():
                h = hist.setdefault(k, [])
                h.append(ld.background_bps)
                del h[:-self.persist_rounds]
                if len(h) == self.persist_rounds:
                    bg = min(h)  # total - pinned = bg  →  pinned' = total - bg
                    loads[k] = LinkLoad(k, ld.capacity_bps, ld.total_bps,
                                        ld.total_bps - bg, ld.planned_bps)
            if not loads:
                return RebalanceOutcome(reason="no link loads measured yet")
            hys = self.hysteresis
            floor = hys.margin
            hot = tuple(sorted((ld for ld in loads.values() if ld.utilisation > hys.threshold
                                and ld.background_bps >= floor * ld.capacity_bps),
                               key=lambda ld: -ld.utilisation))
            measured = {k: ld.background_bps + ld.planned_bps for k, ld in loads.items()}
            res = te_rebalance(self.fabric, self.paths, self.demands_bps, measured, now_s,
                               self.last_moved_s, hys, self.down_links)
            u0, u1 = res.max_utilisation_before, res.max_utilisation_after
            if not res.moved:
                why = ("no link above the threshold with background" if not hot else
                       "no move lowers the maximum utilisation by the margin, or the flows on "
                       "the hot links moved less than the hold time ago")
                return RebalanceOutcome({}, (), hot, u0, u0, why)
            old, before = self.plan, dict(self.paths)
            new_paths = dict(res.paths)
            self._adopt(self.result, new_paths)
            for d in res.moved:
                self.last_moved_s[d] = now_s
            self.changed_at_s = now_s
            self._background_history.clear()
            moves = tuple(FlowMove(d, before[d], new_paths[d]) for d in res.moved)
            self.publish_repins({d: before[d] for d in res.moved}, "re-balance")
            return RebalanceOutcome(diff_plans(old, self.plan), moves, hot, u0, u1, "")


    def link_of(self, switch_name: str, port_no: int) -> tuple[str, int] | None:
        """The (peer node, peer port) on the other end of ``switch_name``:``port_no``."""
        return self.fabric.port_map.get((switch_name, port_no))

    def check_links(self, discovered: Iterable[tuple[Endpoint, Endpoint]],
                    connected: Iterable[int] | None = None) -> LinkReport:
        """:func:`compare_links` against this runtime's fabric."""
        return compare_links(self.fabric, discovered, connected)


# -- LLDP ----------------------------------------------------------------------------------------
@dataclass(frozen=True, order=True)
class LinkProblem:
    """One difference between declared and discovered links.

    ``kind`` is ``missing``, ``unexpected`` or ``miswired``; ``dpids`` the switches involved
    (for per-switch logs); ``message`` names both ends with switch names and dpids.
    """

    kind: str
    dpids: tuple[int, ...]
    message: str


@dataclass(frozen=True)
class LinkReport:
    missing: tuple[LinkProblem, ...]
    unexpected: tuple[LinkProblem, ...]
    miswired: tuple[LinkProblem, ...]

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.miswired)

    def __iter__(self):  # allows ``missing, unexpected, miswired = compare_links(...)``
        return iter((self.missing, self.unexpected, self.miswired))


def _ep(fabric: Fabric, ep: Endpoint) -> str:
    dpid, port = ep
    sw = fabric.switch_by_dpid.get(dpid)
    name = sw.name if sw else "unknown switch"
    return f"{name} (dpid={dpid:#x}) port {port}"


def declared_switch_links(fabric: Fabric) -> set[frozenset[Endpoint]]:
    """Every switch–switch link as an unordered pair of (dpid, port) endpoints."""
    out: set[frozenset[Endpoint]] = set()
    for ln in fabric.links:
        if ln.a in fabric.switch_by_name and ln.b in fabric.switch_by_name:
            a = (fabric.switch_by_name[ln.a].dpid, ln.a_port)
            b = (fabric.switch_by_name[ln.b].dpid, ln.b_port)
            out.add(frozenset((a, b)))
    return out


def compare_links(fabric: Fabric, discovered: Iterable[tuple[Endpoint, Endpoint]],
                  connected: Iterable[int] | None = None) -> LinkReport:
    """Compare LLDP-discovered links with the declared fabric.

    Parameters
    ----------
    discovered
        ``((src_dpid, src_port), (dst_dpid, dst_port))`` pairs (direction does not matter).
    connected
        If given, only links whose two switches are in this set of dpids can be ``missing``
        (a switch that is not connected cannot be probed).

    Returns
    -------
    LinkReport
        Unpackable as ``(missing, unexpected, miswired)``: *missing*, a declared switch link not
        seen; *miswired*, a link seen between two ports the fabric declares as switch ports
        (host or switch), but not with each other; *unexpected*, a link seen with an end the
        fabric does not declare at all (unknown dpid or undeclared port).
    """
    declared = declared_switch_links(fabric)
    declared_ports: dict[Endpoint, str] = {}  # switch port -> "peer port n" it should reach
    for ln in fabric.links:
        for node, port in ((ln.a, ln.a_port), (ln.b, ln.b_port)):
            if node in fabric.switch_by_name:
                peer = ln.other(node)
                declared_ports[(fabric.switch_by_name[node].dpid, port)] = (
                    f"{peer} port {ln.port_of(peer)}")
    seen = {frozenset((a, b)) for a, b in discovered if a != b}
    conn = set(connected) if connected is not None else None
    missing: list[LinkProblem] = []
    for link in declared - seen:
        a, b = sorted(link)
        if conn is not None and not (a[0] in conn and b[0] in conn):
            continue
        missing.append(LinkProblem("missing", (a[0], b[0]),
                                   f"declared link {_ep(fabric, a)} <-> {_ep(fabric, b)} "
                                   "not seen by LLDP"))
    unexpected: list[LinkProblem] = []
    miswired: list[LinkProblem] = []
    for link in seen - declared:
        a, b = sorted(link)
        if a in declared_ports and b in declared_ports:
            miswired.append(LinkProblem(
                "miswired", (a[0], b[0]),
                f"miswired: {_ep(fabric, a)} is connected to {_ep(fabric, b)}; declared: "
                f"{_ep(fabric, a)} <-> {declared_ports[a]}, "
                f"{_ep(fabric, b)} <-> {declared_ports[b]}"))
        else:
            unexpected.append(LinkProblem(
                "unexpected", (a[0], b[0]),
                f"unexpected link {_ep(fabric, a)} <-> {_ep(fabric, b)} is not in the "
                "declared topology"))
    return LinkReport(tuple(sorted(missing)), tuple(sorted(unexpected)), tuple(sorted(miswired)))
