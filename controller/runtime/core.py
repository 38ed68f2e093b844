"""The runtime's one transition function: ``step(state, event, now) -> Step``. Pure: no I/O, no
clock (``now`` is passed in), no os-ken, grpc or driver; Faucet's ``valve`` is the model.

A :class:`Step` carries the new :class:`~controller.runtime.state.RuntimeState` and the effects
for the process to carry out (:mod:`controller.runtime.events`). Every message a switch gets is
one of those effects, decided here; the write path — what each switch holds, transactions,
rollbacks, backoff — is :mod:`controller.runtime.writes`.

Rules per event:

* **SwitchConnected** — record the session and features, forget its counters, take a role
  (:class:`~controller.runtime.events.TakeRole`, numbered: only the latest request's answer
  counts); a table capacity that changes the fit of the plan makes every switch converge (one
  its entries fit in changes nothing: :func:`controller.runtime.intent.fits_as_before`).
  **RoleAssigned** master → read the switch back (:class:`~controller.runtime.events.ReadBack`)
  and send the difference; backup → stay connected, never write, forget what it holds.
  **MastershipChanged** — the coordination service moved the switch: a master that lost it
  stops writing at once, then a role request follows. **SwitchGone** — record it; its LLDP
  discoveries and holdings are forgotten.
* **ReadBackDone / WriteAnswered** — the switches' answers (:mod:`controller.runtime.writes`).
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
  one computed for an older generation is dropped (a repair is computed again). A
  re-optimisation is applied in batches (:func:`controller.runtime.writes.
  begin_reoptimisation`). **TeFormReady** — the placement's te form, for the next repair.
* **PacketIn** — an aifabric LLDP probe is a :class:`~controller.drivers.southbound.LinkSeen`.
  The switches answer ARP themselves (the plan's ARP responder, :func:`controller.plan.build.
  arp_reply_flows`) and never punt it; an ARP request that reaches the controller anyway (a
  switch still holding an older release's punt entry until it converges, or another
  application's entry) is answered from the address plan out of the port it came in by;
  nothing is ever flooded.
* **Tick** — LLDP rounds (check, then probes), counter requests and re-balancing rounds, and a
  retry of switches that did not take the last change, each on its own interval; LLDP and
  counters yield to programming and counter requests are spread over their round
  (:func:`_tick`).
* **IntentSynced** — the intent committed to the intent store (etcd in a cluster, memory
  alone: every operator decision — a policy, registrations, an unregistration — goes through
  it) replaces the state's; the masters converge to it. LLDP links are checked only between
  switches this replica masters (a backup neither probes nor gets packet-ins).

After every event, :func:`controller.runtime.writes.drive` starts what is due.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import assert_never

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
from controller.runtime import liveness, lldp, writes
from controller.runtime.events import (
    AlertRound,
    BatchAnswered,
    Compute,
    ComputeTeForm,
    Effect,
    Event,
    ForgetCounters,
    Inject,
    IntentSynced,
    Log,
    MastershipChanged,
    PlacementReady,
    Publish,
    ReadBackDone,
    RequestCounters,
    RoleAssigned,
    SendPacket,
    TakeRole,
    TeFormReady,
    TelemetryLinks,
    TelemetryPaths,
    Tick,
    WriteAnswered,
)
from controller.runtime.intent import (
    ECMP_HASH_CAPABILITY,
    fits_as_before,
    hash_notes,
    intended_plan,
    switch_capacity,
)
from controller.runtime.placement import PlacementDecision
from controller.runtime.rebalance import RebalanceOutcome
from controller.runtime.state import RebalanceMemory, RuntimeState, SwitchSession, TeForm


@dataclass(frozen=True)
class Step:
    """A step's result (module docstring)."""

    state: RuntimeState
    effects: tuple[Effect, ...] = ()


def plan_diff(old: RuntimeState, new: RuntimeState) -> dict[str, SwitchChanges]:
    """The per-switch changes of the intended plan from ``old`` to ``new`` (what a switch
    holding ``old``'s plan would be sent)."""
    if new.generation == old.generation:
        return {}
    return diff_plans(intended_plan(old), intended_plan(new))


def _changed(old: RuntimeState, new: RuntimeState, reason: str, fx: list[Effect]) -> RuntimeState:
    """``new`` after a change of what the plan depends on: the switches converge to it (a
    table overflow it brings is reported when the converge computes it:
    :func:`controller.runtime.writes.table_lines`)."""
    if new.generation == old.generation:
        return new
    fx += _hash_lines(old, new)
    if new.placement and (new.te_form is None or new.te_form.placement is not new.placement):
        fx.append(ComputeTeForm(new.placement))
    return replace(new, converge=new.converge or reason)


def _hash_lines(old: RuntimeState, new: RuntimeState) -> list[Effect]:
    """A warning for each switch that cannot hash ECMP as the policy asks and could before (or
    was not heard from): :func:`controller.runtime.intent.hash_notes`. Logged when the switch
    connects, before it is reconciled, and when a policy asks what it cannot do."""
    before = set(hash_notes(old))
    return [Log("warning", n.split(": ", 1)[0], n.split(": ", 1)[1])
            for n in hash_notes(new) if n not in before]


def step(state: RuntimeState, event: Event, now_s: float) -> Step:
    """Fold ``event`` into ``state`` at ``now_s`` (module docstring), then start what is due."""
    fx: list[Effect] = []
    new = _fold(state, event, now_s, fx)
    new = writes.drive(new, now_s, fx)
    return Step(new, tuple(fx))


def _fold(state: RuntimeState, event: Event, now_s: float, fx: list[Effect]) -> RuntimeState:
    match event:
        case Tick():
            return _tick(state, event.now_s, fx)
        case CounterSample():
            return state
        case SwitchConnected():
            return _connected(state, event, now_s, fx)
        case RoleAssigned():
            return _role(state, event, fx)
        case RoleChanged():
            s = state.session(event.switch)
            return _role(state, RoleAssigned(event.switch, "backup" if event.role == "backup"
                                             else "master", s.session), fx, event.reason)
        case MastershipChanged():
            return _mastership(state, event, fx)
        case SwitchGone():
            return _gone(state, event)
        case ReadBackDone():
            return writes.read_back_done(state, event, fx)
        case WriteAnswered():
            return writes.answered(state, event, now_s, fx)
        case PortStatus():
            return _port(state, event, now_s, fx)
        case PacketIn():
            return _packet_in(state, event, now_s, fx)
        case LinkSeen():
            return _link_seen(state, event, now_s, fx)
        case PlacementReady():
            return _placement(state, event, now_s, fx)
        case TeFormReady():
            if event.placement is state.placement:
                return replace(state, te_form=TeForm(event.placement, event.te))
            return state
        case IntentSynced():
            return _intent(state, event, now_s, fx)
        case BatchAnswered():
            return replace(state, batching=state.batching.after(event.size, event.took_s,
                                                                 event.waiting))
        case _:
            assert_never(event)


def adopt(state: RuntimeState, ev: IntentSynced, now_s: float) -> RuntimeState:
    """``state`` holding the intent of ``ev`` (policy, registrations, placement), not yet
    converged: what a commit of that intent would make current.

    Raises
    ------
    PlanInvariantError, ValueError
        Its plan breaks an invariant here.
    """
    same_policy = (state.policy.digest == ev.policy.digest
                   and state.policy.generation == ev.policy.generation)
    if (same_policy and dict(state.registered) == dict(ev.registered)
            and dict(state.placement) == dict(ev.placement)):
        return replace(state, intent_generation=ev.generation)
    changes: dict[str, object] = {"registered": dict(ev.registered),
                                  "placement": dict(ev.placement),
                                  "plan_generation": state.plan_generation + 1,
                                  "intent_generation": ev.generation}
    if not same_policy:
        changes.update(policy=ev.policy, rebalance=RebalanceMemory(changed_at_s=now_s))
    new = state.bump(**changes)
    hint = ev.planned
    if hint is not None and _plans_alike(hint, new):
        # the preview planned this very intent off the loop: its plan, not a second one
        new = replace(new, registered=hint.registered, placement=hint.placement,
                      memo=hint.memo)
    intended_plan(new)
    return new


def _plans_alike(planned: RuntimeState, new: RuntimeState) -> bool:
    """Whether ``planned`` (a preview's adopted state) has ``new``'s plan: the same generation
    (a capacity that changed the fit made a new one) and the plan's inputs — fabric, policy,
    settings and down ports the very objects, registrations and placement equal."""
    return (planned.generation == new.generation and planned.fabric is new.fabric
            and planned.policy is new.policy and planned.settings is new.settings
            and planned.down_ports is new.down_ports
            and planned.registered == new.registered and planned.placement == new.placement)


def _intent(state: RuntimeState, ev: IntentSynced, now_s: float, fx: list[Effect]) -> RuntimeState:
    """Adopt the intent (:func:`adopt`): nothing changes when policy, registrations and
    placement are those in force (a commit of ours coming back); an intent whose plan breaks an
    invariant here is logged and not adopted (its generation is not reached)."""
    try:
        new = adopt(state, ev, now_s)
    except (PlanInvariantError, ValueError) as exc:
        fx.append(Log("error", "", f"intent generation {ev.generation} not adopted: its plan "
                                   f"breaks an invariant here: {exc}"))
        fx.append(Publish("apply-failed", f"intent generation {ev.generation} not adopted: "
                                          f"{exc}"))
        return state
    if new.generation == state.generation:
        return new
    p = ev.policy
    if p.digest != state.policy.digest or p.generation != state.policy.generation:
        fx.append(Log("info", "", f"policy generation {p.generation} (sha256 {p.digest[:12]}) "
                                  f"from {p.source} in force"))
    fx.append(Log("info", "", f"intent generation {ev.generation} in force: policy generation "
                              f"{p.generation} (sha256 {p.digest[:12]}), "
                              f"{len(ev.registered)} registered collective(s), "
                              f"{len(ev.placement)} pinned flow(s)"))
    fx.append(TelemetryPaths(new.placement))
    return _changed(state, new, f"intent generation {ev.generation}", fx)


# -- switches ----------------------------------------------------------------------------------
def _sessions(state: RuntimeState, switch: str, s: SwitchSession) -> RuntimeState:
    return replace(state, switches={**state.switches, switch: s})


def _connected(state: RuntimeState, ev: SwitchConnected, now_s: float,
               fx: list[Effect]) -> RuntimeState:
    old = state.session(ev.switch)
    s = SwitchSession(old.southbound, True, ev.session, "none", ev.features, now_s,
                      role_request=old.role_request + 1, refused=old.refused)
    new = _sessions(state, ev.switch, s)
    dpid = state.fabric.switch_by_name[ev.switch].dpid
    new = replace(new, lldp=lldp.forget(new.lldp, dpid))
    fx += [ForgetCounters(ev.switch), TakeRole(ev.switch, ev.session, s.role_request)]
    cap_old, cap_new = switch_capacity(old.features), switch_capacity(ev.features)
    if cap_new is None and cap_old is not None:  # an unreported capacity stays as it was known
        new = _sessions(new, ev.switch, replace(s, features=replace(
            ev.features, tables=old.features.tables if old.features else ())))
    if unhashed_changed(old, s):
        # the switch cannot hash ECMP as asked (or now can): its plan changes
        new = new.bump(plan_generation=new.plan_generation + 1)
        if cap_new is not None and cap_new != cap_old:
            fx.append(Log("info", ev.switch, f"table capacity {_capacity_text(cap_new)}"))
        return _changed(state, new, f"{ev.switch}'s ECMP hashing", fx)
    if cap_new is None or cap_new == cap_old:
        return new
    try:
        same_fit = fits_as_before(state, new)
    except (PlanInvariantError, ValueError, KeyError):
        same_fit = False
    if same_fit:  # its entries fit: nothing of the plan depends on this capacity
        return new
    # the plan fits differently now (table capacity): every switch converges to it
    new = new.bump(plan_generation=new.plan_generation + 1)
    fx.append(Log("info", ev.switch, f"table capacity {_capacity_text(cap_new)}"))
    return _changed(state, new, "table capacity reported", fx)


def unhashed_changed(old: SwitchSession, new: SwitchSession) -> bool:
    """Whether the switch's ability to hash ECMP as asked (:data:`~controller.runtime.intent.
    ECMP_HASH_CAPABILITY`) differs between two of its sessions (not reported: able)."""
    def able(s: SwitchSession) -> bool:
        return s.features is None or ECMP_HASH_CAPABILITY in s.features.capabilities
    return able(old) != able(new)


def _capacity_text(cap: TableCapacity) -> str:
    parts = [f"{k} {v}" for k, v in (("total entries", cap.total_entries),
                                     ("pinned entries", cap.pinned_entries),
                                     ("route entries", cap.route_entries)) if v is not None]
    return f"{', '.join(parts)} ({cap.source})"


def _role(state: RuntimeState, ev: RoleAssigned, fx: list[Effect],
          why: str = "") -> RuntimeState:
    s = state.session(ev.switch)
    if not s.connected or (ev.session and ev.session != s.session) \
            or (ev.request and ev.request != s.role_request):
        return state
    if ev.role == "master":
        if s.role == "master" and (s.held is not None or s.reading):
            return state
        new = _sessions(state, ev.switch, replace(s, role="master"))
        return writes.read_back(new, ev.switch, fx)
    fx.append(Log("warning" if why else "info", ev.switch,
                  f"backup: connected and reading, never writing{f' ({why})' if why else ''}"))
    return _sessions(state, ev.switch, replace(s, role=ev.role, held=None, reading=False))


def _mastership(state: RuntimeState, ev: MastershipChanged, fx: list[Effect]) -> RuntimeState:
    """The coordination service moved ``ev.switch``: a master that lost it stops writing at
    once (and forgets what it holds), then the role it holds now is requested."""
    s = state.session(ev.switch)
    if not s.connected:
        return state
    if not ev.master and s.role == "master":
        s = replace(s, role="backup", held=None, reading=False)
    s = replace(s, role_request=s.role_request + 1)
    fx.append(TakeRole(ev.switch, s.session, s.role_request))
    return _sessions(state, ev.switch, s)


def _gone(state: RuntimeState, ev: SwitchGone) -> RuntimeState:
    s = state.session(ev.switch)
    if ev.session and s.session != ev.session:
        return state
    new = _sessions(state, ev.switch, replace(s, connected=False, role="none", held=None,
                                              reading=False, reconciling=None))
    dpid = state.fabric.switch_by_name[ev.switch].dpid
    return replace(new, lldp=lldp.forget(new.lldp, dpid),
                   liveness=liveness.forget(new.liveness, ev.switch))


# -- ports and links -----------------------------------------------------------------------------
def _port(state: RuntimeState, ev: PortStatus, now_s: float, fx: list[Effect]) -> RuntimeState:
    fab = state.fabric
    word = "up" if ev.up else "down"
    peer = fab.port_map.get((ev.switch, ev.port))
    if peer is None:
        fx.append(Log("debug", ev.switch, f"port {ev.port} {word}: not a fabric port, ignored"))
        return state
    key = (ev.switch, ev.port)
    if fab.is_host(peer[0]):
        hp = set(state.down_host_ports)
        hp.discard(key) if ev.up else hp.add(key)
        fx.append(Log("info", ev.switch, f"port {ev.port} (to host {peer[0]}) {word}"))
        return replace(state, down_host_ports=frozenset(hp))
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
        return new
    new = new.bump(rebalance=RebalanceMemory(new.rebalance.last_moved_s, {}, now_s),
                   plan_generation=new.plan_generation + 1)
    went_down, came_up = after - before, before - after
    lost = {d: p for d, p in state.placement.items()
            if any(frozenset(e) in went_down for e in zip(p, p[1:], strict=False))}
    changed = ", ".join(f"{'-'.join(sorted(ln))} {'down' if ln in went_down else 'up'}"
                        for ln in sorted(went_down | came_up, key=sorted))
    # the plan without (or with) the link is computed when the switches converge to it: link
    # events arriving meanwhile (every port of a failed switch) are folded into one converge
    fx.append(Log("info", ev.switch,
                  f"port {ev.port} (to {peer[0]} port {peer[1]}) {word}: link {changed}; the "
                  "switches converge to the plan" + (
                      f"; {len(lost)} pinned flow(s) fall back to ECMP until repaired"
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
    return _changed(state, new, f"link {word}", fx)


def _link_seen(state: RuntimeState, ev: LinkSeen, now_s: float, fx: list[Effect]) -> RuntimeState:
    fab = state.fabric
    src_sw = fab.switch_by_name.get(ev.src_switch)
    dst = (fab.switch_by_name[ev.switch].dpid, ev.port)
    src = (src_sw.dpid if src_sw else 0, ev.src_port)
    return _seen(state, src, dst, now_s, fx)


def _seen(state: RuntimeState, src: lldp.Endpoint, dst: lldp.Endpoint, now_s: float,
          fx: list[Effect]) -> RuntimeState:
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
    return new


def _packet_in(state: RuntimeState, ev: PacketIn, now_s: float, fx: list[Effect]) -> RuntimeState:
    fab = state.fabric
    sender = frames.parse_lldp(ev.data)
    if sender is not None:
        return _seen(state, sender, (fab.switch_by_name[ev.switch].dpid, ev.port), now_s, fx)
    a = frames.parse_arp(ev.data)
    if a is None or a.oper != frames.ARP_REQUEST:
        fx.append(Log("debug", ev.switch, f"packet-in on port {ev.port} ignored (not an ARP "
                                          f"request or our LLDP, {len(ev.data)} bytes)"))
        return state
    if frames.is_gratuitous(a):
        fx.append(Log("debug", ev.switch, f"gratuitous ARP for {a.target_ip} from "
                                          f"{a.sender_mac} on port {ev.port} ignored"))
        return state
    host = fab.host_by_ip.get(a.target_ip)
    if host is None:
        fx.append(Log("debug", ev.switch, f"ARP who-has {a.target_ip} from {a.sender_ip} on "
                                          f"port {ev.port} ignored: not a fabric host"))
        return state
    fx.append(SendPacket(ev.switch, ev.port, frames.arp_reply(a, host.mac)))
    fx.append(Log("info", ev.switch, f"ARP who-has {a.target_ip} (from {a.sender_ip}, port "
                                     f"{ev.port}): replied {host.name} is-at {host.mac}"))
    return state


# -- computed placements ---------------------------------------------------------------------------
def _placement(state: RuntimeState, ev: PlacementReady, now_s: float,
               fx: list[Effect]) -> RuntimeState:
    out = ev.outcome if isinstance(ev.outcome, RebalanceOutcome) else None
    if ev.generation != state.generation:
        if ev.kind == "repair" and state.placement:
            fx.append(Compute("repair", state.generation))
        fx.append(Log("debug", "", f"{ev.kind} for generation {ev.generation} dropped: the "
                                   f"state moved on to {state.generation}"))
        return state
    if ev.error:
        fx += writes.replan_failed(ev.kind, ev.error)
        return state
    if ev.placement is None:
        if out is not None:
            fx += _hot_lines(state, out)
            hot = frozenset(ld.link for ld in out.hot)
            return replace(state, rebalance=replace(out.memory, hot_reported=hot))
        return state
    down = state.down_links
    bad = [d.label for d, p in ev.placement.items() if not path_is_up(p, down)]
    if bad:
        fx.append(Log("error", "", f"{ev.kind}: flows {bad[:3]} still cross a down link; the "
                                   "installed plan stays"))
        return state
    dec = ev.outcome if isinstance(ev.outcome, PlacementDecision) else None
    if ev.kind == "reoptimise" and dec is not None:
        return writes.begin_reoptimisation(state, dec.moves, dec.paths, dec.te, dec.describe(),
                                           fx)
    mem = out.memory if out is not None else state.rebalance
    placed = ev.placement if isinstance(ev.placement, dict) else dict(ev.placement)
    new = state.bump(placement=placed, plan_generation=state.plan_generation + 1,
                     rebalance=replace(mem, hot_reported=frozenset()))
    try:
        intended_plan(new)
    except (PlanInvariantError, ValueError) as exc:
        fx += writes.replan_failed(ev.kind, exc)
        return state
    why = {"repair": "link state changed", "reoptimise": "re-optimisation",
           "rebalance": "re-balance"}[ev.kind]
    if out is not None:
        fx += _move_lines(state, out)
    if dec is not None:
        what = "repair" if ev.kind == "repair" else "re-optimisation"
        fx.append(Log("info", "", f"{what}: {dec.describe()}"))
        if dec.te is not None:
            new = replace(new, te_form=TeForm(new.placement, dec.te))
    fx += writes.repins(state.placement, new.placement, why)
    fx.append(TelemetryPaths(new.placement))
    if ev.kind == "repair":
        fx.append(Compute("reoptimise", new.generation))
    return _changed(state, new, ev.kind, fx)


def _hot_lines(state: RuntimeState, out: RebalanceOutcome) -> list[Effect]:
    thr = state.settings.rebalance.threshold if state.settings.rebalance else 0.0
    return [Log("info", ld.link[0], f"{ld.describe()} above threshold {thr:.2f}; nothing moved: "
                                    f"{out.reason}")
            for ld in out.hot if ld.link not in state.rebalance.hot_reported]


def _move_lines(state: RuntimeState, out: RebalanceOutcome) -> list[Effect]:
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
                                {k: fab.port_map[k][0] for k in watched},
                                {k: fab.port_map[k] for k in watched})
    for t in moves:
        fx.append(Log("warning" if not t.up else "info", t.switch,
                      f"port {t.port} {'up' if t.up else 'down'} by LLDP liveness: {t.reason}"))
        fx.append(Inject(PortStatus(t.switch, t.port, t.up)))
    return replace(state, liveness=mem)


ENTRY_COUNTERS_PER_S = 5_000
"""Entry counters the telemetry asks the fabric for per second at most: a statistics round
lasts the configured interval or as long as this budget needs for the entries polled. The
leaves of a k = 16 fat-tree hold ~140,000 entries; reading, decoding and recording one costs
the loop ~15 µs (``bench/fabric_scale.py --profile``), so at most ~7 % of a core goes to entry
counters (a round of 28 s there; 1 s up to ~5,000 entries)."""


def programming(state: RuntimeState) -> bool:
    """Whether the switches are being programmed: a transaction in flight or due, or a switch we
    write whose holdings are not known yet (being read back) or that never held its plan.
    Telemetry yields to it (:func:`_tick`)."""
    if state.txn is not None or state.converge:
        return True
    return any(s.connected and s.role == "master"
               and (s.held is None or n not in state.programmed)
               for n, s in state.switches.items())


def _tick(state: RuntimeState, now_s: float, fx: list[Effect]) -> RuntimeState:
    """The timers (module docstring). Telemetry — LLDP rounds and counter requests — yields to
    programming (:func:`programming`): nothing is asked of a switch while the fabric is being
    written, and the LLDP check after such a pause waits for one round of probes. Counter
    requests are spread over the statistics round (a slice of the switches every tick), whose
    length grows with the fabric (:data:`ENTRY_COUNTERS_PER_S`); entry counters are asked
    only of switches with hosts (where the telemetry counts them) unless the re-balancer needs
    them everywhere."""
    cfg = state.settings
    timers = dict(state.timers)
    new = state
    busy = programming(state)
    if _due(state, "lldp", cfg.lldp_interval_s, now_s, timers):
        if busy:
            timers["lldp_paused"] = 1.0
        else:
            if not timers.pop("lldp_paused", 0.0):
                new = _lldp_check(new, now_s, fx)
            ports = lldp.probe_ports(state.fabric)
            for name in sorted(state.writable()):
                dpid = state.fabric.switch_by_name[name].dpid
                for p in ports.get(name, ()):
                    fx.append(SendPacket(name, p, frames.build_lldp(dpid, p)))
    if cfg.liveness_interval_s and _due(state, "liveness", cfg.liveness_interval_s, now_s,
                                        timers):
        new = _liveness(new, now_s, fx)
    if cfg.stats_interval_s:
        if _due(state, "stats", cfg.stats_interval_s, now_s, timers):
            if cfg.rebalance is not None and state.placement:
                fx.append(Compute("rebalance", state.generation))
            if cfg.telemetry:
                fx.append(AlertRound(now_s))
        if not busy:
            _counter_slice(new, now_s, timers, fx)
    if _due(state, "retry", cfg.retry_interval_s, now_s, timers):
        new = _retry(new, fx)
    return replace(new, timers=timers)


def _lldp_check(state: RuntimeState, now_s: float, fx: list[Effect]) -> RuntimeState:
    cfg = state.settings
    connected_at = {state.fabric.switch_by_name[n].dpid: s.connected_at_s
                    for n, s in state.switches.items() if s.connected and s.role == "master"}
    mem, _report, lines = lldp.check_round(state.lldp, state.fabric, connected_at, now_s,
                                           cfg.lldp_interval_s, cfg.lldp_grace_s)
    for ln in lines:
        sw = state.fabric.switch_by_dpid.get(ln.dpid)
        fx.append(Log(ln.level, sw.name if sw else "", ln.text))  # type: ignore[arg-type]
    return replace(state, lldp=mem)


def _counter_slice(state: RuntimeState, now_s: float, timers: dict[str, float],
                   fx: list[Effect]) -> None:
    """The counter requests due at ``now_s``: the switches we write in name order, taken in
    turn from a cursor (``timers["counters_cursor"]``), as many per tick as a round of
    ``max(stats interval, entries polled / ENTRY_COUNTERS_PER_S)`` seconds needs for the time
    since the last tick (``timers["counters_tick"]``): ticks of 0.1 s spread a round over ten
    of them; a tick a whole round after the last asks every switch."""
    cfg = state.settings
    assert cfg.stats_interval_s
    # the switches we write: a replica of a cluster polls its own share (its telemetry covers
    # them; every replica polling every switch tripled the load on the switches and the loops)
    names = sorted(state.writable())
    if not names:
        return
    last = timers.get("counters_tick")
    timers["counters_tick"] = now_s
    entries = _entry_switches(state)
    length = _round_s(state, entries)
    if last is None:
        count = 1
    else:
        share = min(1.0, (now_s - last) / length) if length > 0 else 1.0
        count = min(len(names), max(1, math.ceil(len(names) * share - 1e-9)))
    start = int(timers.get("counters_cursor", 0)) % len(names)
    kinds = frozenset({"ports", "queues"} if cfg.telemetry else {"ports"})
    depth = cfg.rebalance is not None and cfg.standing_depth is not None
    for i in range(count):
        name = names[(start + i) % len(names)]
        feats = state.switches[name].features
        k = kinds | {"entries"} if name in entries else kinds
        if depth and feats is not None and "queue_depth" in feats.capabilities:
            k = k | {"queues"}
        fx.append(RequestCounters(name, k))  # type: ignore[arg-type]
    timers["counters_cursor"] = float((start + count) % len(names))


def _entry_switches(state: RuntimeState) -> frozenset[str]:
    """The switches whose entry counters are read: those with hosts (the telemetry counts a
    pinned flow and a route at the source's leaf), every switch for the re-balancer."""
    fab = state.fabric
    if state.settings.rebalance is not None:
        return frozenset(s.name for s in fab.switches)
    return frozenset(h.leaf for h in fab.hosts)


def _round_s(state: RuntimeState, entries: frozenset[str]) -> float:
    cfg = state.settings
    assert cfg.stats_interval_s
    try:
        plan = intended_plan(state).switches
    except (PlanInvariantError, ValueError):
        return cfg.stats_interval_s
    polled = sum(len(plan[n].flows) for n in entries if n in plan)
    return max(cfg.stats_interval_s, polled / ENTRY_COUNTERS_PER_S)


def _retry(state: RuntimeState, fx: list[Effect]) -> RuntimeState:
    """The retry timer: switches we master whose holdings are unknown (a failed read-back)
    are read back; when a switch did not take the last change, compare again."""
    for name in sorted(state.writable()):
        s = state.switches[name]
        if s.held is None and not s.reading:
            state = writes.read_back(state, name, fx)
    if state.unsettled and not state.converge:
        state = replace(state, converge="retry")
    return state
