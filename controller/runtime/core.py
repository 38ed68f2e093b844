"""The runtime's one transition function: ``step(state, event, now) -> Step``. Pure: no I/O, no
clock (``now`` is passed in), no os-ken, grpc or driver; Faucet's ``valve`` is the model.

A :class:`Step` carries the new :class:`~controller.runtime.state.RuntimeState`, the per-switch
changes of the intended plan (:func:`controller.runtime.intent.intended_plan` of the new state
against the old; empty when nothing it depends on changed) and the effects for the process to
carry out (:mod:`controller.runtime.events`).

Rules per event:

* **SwitchConnected** — record the session and features, forget its counters, take a role
  (:class:`~controller.runtime.events.TakeRole`); **RoleAssigned** master → reconcile it (read
  back, send the difference); backup → stay connected, never write. **SwitchGone** — record it;
  its LLDP discoveries are forgotten.
* **PortStatus** — each end of a switch–switch link is tracked on its own (``down_ports``); the
  link is down while *either* end last reported down, up only when both report up (Open
  vSwitch sends several port-status messages per transition, and the far end's "up" can arrive
  after the near end's "down"). When the down links change, the intended plan changes at once
  (pinned entries whose path crosses a down link are left out; the ECMP routes avoid it), a
  repair is computed off the loop, and the switches converge. A host port changes nothing
  (a host has one link: no re-route can reach it); a port the fabric does not declare is
  ignored; a repeat changes nothing.
* **PlacementReady** — a placement computed for the current generation is adopted (its plan
  must pass every invariant, or the installed plan stays and ``replan-failed`` is published);
  one computed for an older generation is dropped (a repair is computed again).
* **PacketIn** — an aifabric LLDP probe is a :class:`~controller.drivers.southbound.LinkSeen`;
  an ARP request for a fabric host is answered from the address plan out of the port it came
  in by; nothing is ever flooded.
* **Tick** — LLDP rounds (check, then probes), counter requests and re-balancing rounds, and a
  retry of switches that do not hold the intended plan, each on its own interval.
* **PolicyApplied / CollectivesRegistered / CollectiveUnregistered** — the operator's decisions
  (stepped by the process once the switches confirmed them).
* **IntentSynced** — in a cluster, the intent committed to etcd (policy, registrations,
  placement) replaces the state's; the masters converge to it. LLDP links are checked only
  between switches this replica masters (a backup neither probes nor gets packet-ins).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from controller.drivers import frames
from controller.drivers.southbound import (
    CounterSample,
    LinkSeen,
    PacketIn,
    PortStatus,
    RoleChanged,
    SwitchConnected,
    SwitchGone,
)
from controller.errors import PlanInvariantError
from controller.plan.capacity import TableCapacity
from controller.plan.model import SwitchChanges, diff_plans
from controller.plan.pinned import path_is_up
from controller.runtime import liveness, lldp
from controller.runtime.events import (
    AlertRound,
    CollectivesRegistered,
    CollectiveUnregistered,
    Compute,
    Converge,
    Effect,
    Event,
    ForgetCounters,
    Inject,
    IntentSynced,
    Log,
    PlacementReady,
    PolicyApplied,
    Publish,
    Reconcile,
    RequestCounters,
    RoleAssigned,
    SendPacket,
    TakeRole,
    TelemetryLinks,
    TelemetryPaths,
    Tick,
)
from controller.runtime.intent import hash_notes, intended_plan, plan_tables, switch_capacity
from controller.runtime.placement import PlacementDecision
from controller.runtime.state import RebalanceMemory, RuntimeState, SwitchSession
from controller.te.collectives import FlowDemand


@dataclass(frozen=True)
class Step:
    """A step's result (module docstring)."""

    state: RuntimeState
    changes: Mapping[str, SwitchChanges] = field(default_factory=dict)
    effects: tuple[Effect, ...] = ()


def _with_changes(old: RuntimeState, new: RuntimeState, effects: list[Effect]) -> Step:
    if new.generation == old.generation:
        return Step(new, {}, tuple(effects))
    changes = diff_plans(intended_plan(old), intended_plan(new))
    return Step(new, changes, tuple(effects + _table_lines(old, new) + _hash_lines(old, new)))


def _hash_lines(old: RuntimeState, new: RuntimeState) -> list[Effect]:
    """A warning for each switch that cannot hash ECMP as the policy asks and could before (or
    was not heard from): :func:`controller.runtime.intent.hash_notes`. Logged when the switch
    connects, before it is reconciled, and when a policy asks what it cannot do."""
    before = set(hash_notes(old))
    return [Log("warning", n.split(": ", 1)[0], n.split(": ", 1)[1])
            for n in hash_notes(new) if n not in before]


def _table_lines(old: RuntimeState, new: RuntimeState) -> list[Effect]:
    """A switch whose pinned entries do not fit its table (:func:`controller.runtime.intent.
    plan_tables`): one warning per note and a ``table-overflow`` event, when the notes differ
    from the old state's (each overflow is reported once, and again when it changes)."""
    rep = plan_tables(new)
    notes = rep.notes if rep is not None else ()
    before = plan_tables(old)
    if not notes or notes == (before.notes if before is not None else ()):
        return []
    out: list[Effect] = []
    for note in notes:
        sw = note.split(":", 1)[0].removeprefix("switch ")
        out.append(Log("warning", sw if sw in new.fabric.switch_by_name else "",
                       f"table capacity: {note}"))
    assert rep is not None
    fell = ", ".join(d.label for d in rep.fallback[:5]) + (" …" if len(rep.fallback) > 5 else "")
    out.append(Publish("table-overflow", f"{len(notes)} switch(es) over table capacity; "
                       f"{len(rep.fallback)} pinned flow(s) fall back to ECMP"
                       + (f": {fell}" if fell else ""),
                       (("switch", notes[0].split(":", 1)[0].removeprefix("switch ")),)))
    return out


def step(state: RuntimeState, event: Event, now_s: float) -> Step:
    """Fold ``event`` into ``state`` at ``now_s`` (module docstring).

    Raises
    ------
    PlanInvariantError
        An operator decision (policy, registration) whose plan breaks an invariant; nothing
        changes. (A placement that does so is refused with an event instead.)
    """
    fx: list[Effect] = []
    if isinstance(event, Tick):
        return _tick(state, event.now_s, fx)
    if isinstance(event, CounterSample):
        return Step(state)
    if isinstance(event, SwitchConnected):
        return _connected(state, event, now_s, fx)
    if isinstance(event, RoleAssigned):
        return _role(state, event, fx)
    if isinstance(event, RoleChanged):
        return _role(state, RoleAssigned(event.switch, "backup" if event.role == "backup"
                                         else "master", state.session(event.switch).session),
                     fx, event.reason)
    if isinstance(event, SwitchGone):
        return _gone(state, event, fx)
    if isinstance(event, PortStatus):
        return _port(state, event, now_s, fx)
    if isinstance(event, PacketIn):
        return _packet_in(state, event, now_s, fx)
    if isinstance(event, LinkSeen):
        return _link_seen(state, event, now_s, fx)
    if isinstance(event, PlacementReady):
        return _placement(state, event, now_s, fx)
    if isinstance(event, PolicyApplied):
        new = state.bump(policy=event.policy, placement=dict(event.placement),
                         rebalance=RebalanceMemory(changed_at_s=now_s),
                         plan_generation=state.plan_generation + 1)
        intended_plan(new)  # raises PlanInvariantError: nothing changes
        p = event.policy
        fx.append(Log("info", "", f"policy generation {p.generation} (sha256 {p.digest[:12]}) "
                                  f"from {p.source} in force"))
        fx.append(TelemetryPaths(new.placement))
        return _with_changes(state, new, fx)
    if isinstance(event, CollectivesRegistered):
        reg = dict(state.registered)
        for r in event.entries:
            reg[r.collective.name] = r
        new = state.bump(registered=reg, placement=dict(event.placement),
                         plan_generation=state.plan_generation + 1)
        intended_plan(new)
        fx.append(TelemetryPaths(new.placement))
        return _with_changes(state, new, fx)
    if isinstance(event, IntentSynced):
        return _intent(state, event, now_s, fx)
    if isinstance(event, CollectiveUnregistered):
        if event.name not in state.registered:
            raise KeyError(event.name)
        reg = {k: v for k, v in state.registered.items() if k != event.name}
        placement = {d: p for d, p in state.placement.items() if d.collective != event.name}
        new = state.bump(registered=reg, placement=placement,
                         plan_generation=state.plan_generation + 1)
        fx.append(TelemetryPaths(new.placement))
        return _with_changes(state, new, fx)
    raise TypeError(f"unknown event {type(event).__name__}")


def _intent(state: RuntimeState, ev: IntentSynced, now_s: float, fx: list[Effect]) -> Step:
    """Adopt the cluster's intent: nothing changes when policy, registrations and placement are
    those in force (a replica's own commit coming back); an intent whose plan breaks an
    invariant here is logged and not adopted (its generation is not reached)."""
    same_policy = (state.policy.digest == ev.policy.digest
                   and state.policy.generation == ev.policy.generation)
    if (same_policy and dict(state.registered) == dict(ev.registered)
            and dict(state.placement) == dict(ev.placement)):
        return Step(replace(state, intent_generation=ev.generation))
    changes: dict[str, object] = {"registered": dict(ev.registered),
                                  "placement": dict(ev.placement),
                                  "plan_generation": state.plan_generation + 1,
                                  "intent_generation": ev.generation}
    if not same_policy:
        changes.update(policy=ev.policy, rebalance=RebalanceMemory(changed_at_s=now_s))
    new = state.bump(**changes)
    try:
        intended_plan(new)
    except (PlanInvariantError, ValueError) as exc:
        fx.append(Log("error", "", f"intent generation {ev.generation} not adopted: its plan "
                                   f"breaks an invariant here: {exc}"))
        fx.append(Publish("apply-failed", f"intent generation {ev.generation} not adopted: "
                                          f"{exc}"))
        return Step(state, {}, tuple(fx))
    fx.append(Log("info", "", f"intent generation {ev.generation} in force: policy generation "
                              f"{ev.policy.generation} (sha256 {ev.policy.digest[:12]}), "
                              f"{len(ev.registered)} registered collective(s), "
                              f"{len(ev.placement)} pinned flow(s)"))
    fx.append(TelemetryPaths(new.placement))
    fx.append(Converge(f"intent generation {ev.generation}"))
    return _with_changes(state, new, fx)


# -- switches ----------------------------------------------------------------------------------
def _sessions(state: RuntimeState, switch: str, s: SwitchSession) -> RuntimeState:
    return replace(state, switches={**state.switches, switch: s})


def _connected(state: RuntimeState, ev: SwitchConnected, now_s: float,
               fx: list[Effect]) -> Step:
    old = state.session(ev.switch)
    s = SwitchSession(old.southbound, True, ev.session, "none", ev.features, now_s)
    new = _sessions(state, ev.switch, s)
    dpid = state.fabric.switch_by_name[ev.switch].dpid
    new = replace(new, lldp=lldp.forget(new.lldp, dpid))
    fx += [ForgetCounters(ev.switch), TakeRole(ev.switch, ev.session)]
    cap_old, cap_new = switch_capacity(old.features), switch_capacity(ev.features)
    if cap_new is None or cap_new == cap_old:  # an unreported capacity stays as it was known
        if cap_new is None and cap_old is not None:
            new = _sessions(new, ev.switch, replace(s, features=replace(
                ev.features, tables=old.features.tables if old.features else ())))
        return Step(new, {}, tuple(fx + _hash_lines(state, new)))
    # the plan may fit differently now (table capacity): every switch converges to it
    new = new.bump(plan_generation=new.plan_generation + 1)
    fx.append(Log("info", ev.switch, f"table capacity {_capacity_text(cap_new)}"))
    fx.append(Converge("table capacity reported"))
    return _with_changes(state, new, fx)


def _capacity_text(cap: TableCapacity) -> str:
    parts = [f"{k} {v}" for k, v in (("total entries", cap.total_entries),
                                     ("pinned entries", cap.pinned_entries),
                                     ("route entries", cap.route_entries)) if v is not None]
    return f"{', '.join(parts)} ({cap.source})"


def _role(state: RuntimeState, ev: RoleAssigned, fx: list[Effect], why: str = "") -> Step:
    s = state.session(ev.switch)
    if not s.connected or (ev.session and ev.session != s.session):
        return Step(state)
    new = _sessions(state, ev.switch, replace(s, role=ev.role))
    if ev.role == "master":
        fx.append(Reconcile(ev.switch, s.session))
    else:
        fx.append(Log("warning" if why else "info", ev.switch,
                      f"backup: connected and reading, never writing{f' ({why})' if why else ''}"))
    return Step(new, {}, tuple(fx))


def _gone(state: RuntimeState, ev: SwitchGone, fx: list[Effect]) -> Step:
    s = state.session(ev.switch)
    if ev.session and s.session != ev.session:
        return Step(state)
    new = _sessions(state, ev.switch, replace(s, connected=False, role="none"))
    dpid = state.fabric.switch_by_name[ev.switch].dpid
    new = replace(new, lldp=lldp.forget(new.lldp, dpid),
                  liveness=liveness.forget(new.liveness, ev.switch))
    return Step(new, {}, tuple(fx))


# -- ports and links -----------------------------------------------------------------------------
def _port(state: RuntimeState, ev: PortStatus, now_s: float, fx: list[Effect]) -> Step:
    fab = state.fabric
    word = "up" if ev.up else "down"
    peer = fab.port_map.get((ev.switch, ev.port))
    if peer is None:
        fx.append(Log("debug", ev.switch, f"port {ev.port} {word}: not a fabric port, ignored"))
        return Step(state, {}, tuple(fx))
    key = (ev.switch, ev.port)
    if fab.is_host(peer[0]):
        hp = set(state.down_host_ports)
        hp.discard(key) if ev.up else hp.add(key)
        fx.append(Log("info", ev.switch, f"port {ev.port} (to host {peer[0]}) {word}"))
        return Step(replace(state, down_host_ports=frozenset(hp)), {}, tuple(fx))
    ports = set(state.down_ports)
    ports.discard(key) if ev.up else ports.add(key)
    new = replace(state, down_ports=frozenset(ports))
    if not ev.up:
        new = replace(new, lldp=lldp.forget(new.lldp, fab.switch_by_name[ev.switch].dpid,
                                            ev.port))
    before, after = state.down_links, new.down_links
    if before == after:
        fx.append(Log("info", ev.switch, f"port {ev.port} (to {peer[0]} port {peer[1]}) {word}: "
                                         "link state unchanged"))
        return Step(new, {}, tuple(fx))
    new = new.bump(rebalance=RebalanceMemory(new.rebalance.last_moved_s, {}, now_s),
                   plan_generation=new.plan_generation + 1)
    went_down, came_up = after - before, before - after
    lost = {d: p for d, p in state.placement.items()
            if any(frozenset(e) in went_down for e in zip(p, p[1:], strict=False))}
    step_ = _with_changes(state, new, [])
    fx.append(Log("info", ev.switch,
                  f"port {ev.port} (to {peer[0]} port {peer[1]}) {word}: "
                  f"{len(step_.changes)} switch(es) to update"
                  + (f"; {len(lost)} pinned flow(s) fall back to ECMP until repaired"
                     if lost else "")))
    fx.append(TelemetryLinks(after, lost, now_s))
    for kind, links in (("link-down", went_down), ("link-up", came_up)):
        for ln in sorted(links, key=sorted):
            a, b = sorted(ln)
            msg = f"link {a}-{b} {kind[5:]}" + (
                f"; {len(lost)} pinned flow(s) lost a link" if kind == "link-down" else "")
            fx.append(Publish(kind, msg, (("switch", a), ("link", f"{a}-{b}"))))
    if state.placement:
        fx.append(Compute("repair", new.generation))
    fx.append(Converge(f"link {word}"))
    return Step(step_.state, step_.changes, tuple(fx))


def _link_seen(state: RuntimeState, ev: LinkSeen, now_s: float, fx: list[Effect]) -> Step:
    fab = state.fabric
    src_sw = fab.switch_by_name.get(ev.src_switch)
    dst = (fab.switch_by_name[ev.switch].dpid, ev.port)
    src = (src_sw.dpid if src_sw else 0, ev.src_port)
    return _seen(state, src, dst, now_s, fx)


def _seen(state: RuntimeState, src: lldp.Endpoint, dst: lldp.Endpoint, now_s: float,
          fx: list[Effect]) -> Step:
    old = state.lldp.discovered.get(src)
    new = replace(state, lldp=lldp.seen(state.lldp, src, dst, now_s))
    cfg = state.settings
    if cfg.liveness_interval_s:
        at = state.fabric.switch_by_dpid.get(dst[0])
        if at is not None:
            new = replace(new, liveness=liveness.heard(new.liveness, (at.name, dst[1]), now_s,
                                                       cfg.liveness_interval_s,
                                                       cfg.liveness_misses))
    if old is None or old[0] != dst:
        fx.append(Log("debug", state.fabric.switch_by_dpid[dst[0]].name,
                      f"LLDP: port {dst[1]} hears dpid {src[0]:#x} port {src[1]}"))
    return Step(new, {}, tuple(fx))


def _packet_in(state: RuntimeState, ev: PacketIn, now_s: float, fx: list[Effect]) -> Step:
    fab = state.fabric
    sender = frames.parse_lldp(ev.data)
    if sender is not None:
        return _seen(state, sender, (fab.switch_by_name[ev.switch].dpid, ev.port), now_s, fx)
    a = frames.parse_arp(ev.data)
    if a is None or a.oper != frames.ARP_REQUEST:
        fx.append(Log("debug", ev.switch, f"packet-in on port {ev.port} ignored (not an ARP "
                                          f"request or our LLDP, {len(ev.data)} bytes)"))
        return Step(state, {}, tuple(fx))
    if frames.is_gratuitous(a):
        fx.append(Log("debug", ev.switch, f"gratuitous ARP for {a.target_ip} from "
                                          f"{a.sender_mac} on port {ev.port} ignored"))
        return Step(state, {}, tuple(fx))
    host = fab.host_by_ip.get(a.target_ip)
    if host is None:
        fx.append(Log("debug", ev.switch, f"ARP who-has {a.target_ip} from {a.sender_ip} on "
                                          f"port {ev.port} ignored: not a fabric host"))
        return Step(state, {}, tuple(fx))
    fx.append(SendPacket(ev.switch, ev.port, frames.arp_reply(a, host.mac)))
    fx.append(Log("info", ev.switch, f"ARP who-has {a.target_ip} (from {a.sender_ip}, port "
                                     f"{ev.port}): replied {host.name} is-at {host.mac}"))
    return Step(state, {}, tuple(fx))


# -- computed placements ---------------------------------------------------------------------------
def _placement(state: RuntimeState, ev: PlacementReady, now_s: float,
               fx: list[Effect]) -> Step:
    from controller.runtime.rebalance import RebalanceOutcome

    out = ev.outcome if isinstance(ev.outcome, RebalanceOutcome) else None
    if ev.generation != state.generation:
        if ev.kind == "repair" and state.placement:
            fx.append(Compute("repair", state.generation))
        fx.append(Log("debug", "", f"{ev.kind} for generation {ev.generation} dropped: the "
                                   f"state moved on to {state.generation}"))
        return Step(state, {}, tuple(fx))
    if ev.error:
        fx.append(Log("error", "", f"{ev.kind} failed, the installed plan stays: {ev.error}"))
        fx.append(Publish("replan-failed", f"recomputation failed, the installed plan stays: "
                                           f"{ev.error}"))
        return Step(state, {}, tuple(fx))
    if ev.placement is None:
        if out is not None:
            fx += _hot_lines(state, out)
            hot = frozenset(ld.link for ld in out.hot)
            return Step(replace(state, rebalance=replace(out.memory, hot_reported=hot)), {},
                        tuple(fx))
        return Step(state, {}, tuple(fx))
    down = state.down_links
    bad = [d.label for d, p in ev.placement.items() if not path_is_up(p, down)]
    if bad:
        fx.append(Log("error", "", f"{ev.kind}: flows {bad[:3]} still cross a down link; the "
                                   "installed plan stays"))
        return Step(state, {}, tuple(fx))
    mem = out.memory if out is not None else state.rebalance
    placed = ev.placement if isinstance(ev.placement, dict) else dict(ev.placement)
    new = state.bump(placement=placed, plan_generation=state.plan_generation + 1,
                     rebalance=replace(mem, hot_reported=frozenset()))
    try:
        intended_plan(new)
    except (PlanInvariantError, ValueError) as exc:
        fx.append(Log("error", "", f"{ev.kind}: recomputation failed, the installed plan "
                                   f"stays: {exc}"))
        fx.append(Publish("replan-failed", f"recomputation failed, the installed plan stays: "
                                           f"{exc}"))
        return Step(state, {}, tuple(fx))
    why = {"repair": "link state changed", "reoptimise": "re-optimisation",
           "rebalance": "re-balance"}[ev.kind]
    if out is not None:
        fx += _move_lines(state, out)
    if isinstance(ev.outcome, PlacementDecision):
        what = "repair" if ev.kind == "repair" else "re-optimisation"
        fx.append(Log("info", "", f"{what}: {ev.outcome.describe()}"))
    fx += _repins(state.placement, new.placement, why)
    fx.append(TelemetryPaths(new.placement))
    fx.append(Converge(ev.kind))
    if ev.kind == "repair":
        fx.append(Compute("reoptimise", new.generation))
    return _with_changes(state, new, fx)


def _repins(before: Mapping[FlowDemand, tuple[str, ...]],
            after: Mapping[FlowDemand, tuple[str, ...]], why: str) -> list[Effect]:
    """A ``repin`` event for every flow of ``before`` whose path is now different."""
    out: list[Effect] = []
    for d, old in sorted(before.items()):
        new = after.get(d)
        if new is None or new == old:
            continue
        k = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), 2)
        out.append(Publish("repin", f"{d.label} moved from {' '.join(old)} to {' '.join(new)} "
                                    f"({why})",
                           (("switch", old[max(k - 1, 1)]), ("collective", d.collective),
                            ("flow", d.label), ("old_path", old), ("new_path", new))))
    return out


def _hot_lines(state: RuntimeState, out: object) -> list[Effect]:
    from controller.runtime.rebalance import RebalanceOutcome

    assert isinstance(out, RebalanceOutcome)
    thr = state.settings.rebalance.threshold if state.settings.rebalance else 0.0
    return [Log("info", ld.link[0], f"{ld.describe()} above threshold {thr:.2f}; nothing moved: "
                                    f"{out.reason}")
            for ld in out.hot if ld.link not in state.rebalance.hot_reported]


def _move_lines(state: RuntimeState, out: object) -> list[Effect]:
    from controller.runtime.rebalance import RebalanceOutcome

    assert isinstance(out, RebalanceOutcome)
    hot_by_link = {ld.link: ld for ld in out.hot}
    lines: list[Effect] = []
    for mv in out.moves:
        old_links = set(zip(mv.old_path, mv.old_path[1:], strict=False))
        why = [hot_by_link[lk].describe() for lk in hot_by_link if lk in old_links]
        lines.append(Log("info", mv.switch(),
                         f"rebalance: moved {mv.flow.label} from {' '.join(mv.old_path)} to "
                         f"{' '.join(mv.new_path)} because "
                         f"{'; '.join(why) or 'its links are above the threshold'}; max "
                         f"utilisation {out.max_utilisation_before:.2f} -> "
                         f"{out.max_utilisation_after:.2f}"))
    return lines


# -- timers -------------------------------------------------------------------------------------------
def _due(state: RuntimeState, name: str, interval_s: float, now_s: float,
         timers: dict[str, float]) -> bool:
    at = timers.get(name)
    if at is None:
        timers[name] = now_s + interval_s
        return False
    if now_s < at:
        return False
    timers[name] = max(at + interval_s, now_s)
    return True


def _liveness(state: RuntimeState, now_s: float, fx: list[Effect]) -> RuntimeState:
    """LLDP liveness of P4Runtime switches (:mod:`.liveness`): probe every switch–switch port
    of the P4 switches we write, and turn ports that went silent (or came back) into the
    PortStatus events an OpenFlow switch would have sent."""
    cfg = state.settings
    assert cfg.liveness_interval_s
    fab = state.fabric
    connected = state.connected()
    p4 = sorted(n for n in connected if state.southbound.get(n) == "p4runtime")
    ports = lldp.probe_ports(fab)
    writable = state.writable()
    watched = []
    for name in p4:
        for p in ports.get(name, ()):
            peer, peer_port = fab.port_map[(name, p)]
            if peer in connected:
                watched.append((name, p))
            if name in writable:
                fx.append(SendPacket(name, p, frames.build_lldp(fab.switch_by_name[name].dpid,
                                                                p)))
            # a neighbour on another southbound probes towards the P4 switch as often (its
            # own probes go out only every lldp_interval_s)
            if peer in writable and state.southbound.get(peer) != "p4runtime":
                fx.append(SendPacket(peer, peer_port, frames.build_lldp(
                    fab.switch_by_name[peer].dpid, peer_port)))
    mem, moves = liveness.check(state.liveness, watched, now_s, cfg.liveness_interval_s,
                                cfg.liveness_misses, cfg.liveness_hold_s,
                                {k: fab.port_map[k][0] for k in watched})
    for t in moves:
        fx.append(Log("warning" if not t.up else "info", t.switch,
                      f"port {t.port} {'up' if t.up else 'down'} by LLDP liveness: {t.reason}"))
        fx.append(Inject(PortStatus(t.switch, t.port, t.up)))
    return replace(state, liveness=mem)


def _tick(state: RuntimeState, now_s: float, fx: list[Effect]) -> Step:
    cfg = state.settings
    timers = dict(state.timers)
    new = state
    if _due(state, "lldp", cfg.lldp_interval_s, now_s, timers):
        connected_at = {state.fabric.switch_by_name[n].dpid: s.connected_at_s
                        for n, s in state.switches.items() if s.connected and s.role == "master"}
        mem, _report, lines = lldp.check_round(state.lldp, state.fabric, connected_at, now_s,
                                               cfg.lldp_interval_s, cfg.lldp_grace_s)
        new = replace(new, lldp=mem)
        for ln in lines:
            sw = state.fabric.switch_by_dpid.get(ln.dpid)
            fx.append(Log(ln.level, sw.name if sw else "", ln.text))  # type: ignore[arg-type]
        ports = lldp.probe_ports(state.fabric)
        for name in sorted(state.writable()):
            dpid = state.fabric.switch_by_name[name].dpid
            for p in ports.get(name, ()):
                fx.append(SendPacket(name, p, frames.build_lldp(dpid, p)))
    if cfg.liveness_interval_s and _due(state, "liveness", cfg.liveness_interval_s, now_s,
                                        timers):
        new = _liveness(new, now_s, fx)
    if cfg.stats_interval_s and _due(state, "stats", cfg.stats_interval_s, now_s, timers):
        if cfg.rebalance is not None and state.placement:
            fx.append(Compute("rebalance", state.generation))
        if cfg.telemetry:
            fx.append(AlertRound(now_s))
        kinds = frozenset({"ports", "entries", "queues"} if cfg.telemetry
                          else {"ports", "entries"})
        # the re-balancer reads queue depth where a switch counts it (P4)
        depth = cfg.rebalance is not None and cfg.standing_depth is not None
        for name in sorted(state.connected()):
            feats = state.switches[name].features
            k = kinds | {"queues"} if depth and feats is not None \
                and "queue_depth" in feats.capabilities else kinds
            fx.append(RequestCounters(name, k))  # type: ignore[arg-type]
    if _due(state, "retry", cfg.retry_interval_s, now_s, timers):
        fx.append(Converge("retry"))
    return Step(replace(new, timers=timers), {}, tuple(fx))
