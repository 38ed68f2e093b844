"""The one write path: what the core sends to switches, and what their answers change. Pure.

Every message that changes a switch comes from here, as an effect of a step
(:func:`controller.runtime.core.step`):

* **What a switch holds** is part of the state (:attr:`~controller.runtime.state.SwitchSession.
  held`): read back when we become its master (:class:`~controller.runtime.events.ReadBack`),
  then updated by every part it acknowledges. It is forgotten (None) the moment we may no
  longer write the switch, its connection drops, or a write's outcome is unknown; nothing is
  written to a switch whose holdings are unknown, so a master back from a pause reads back
  before it writes.
* **A converge** (:func:`drive`) compares every switch we may write and whose holdings are known
  with the intended plan (a switch found holding its target holds that very object from then
  on, so the next comparison is one identity check while the target stays the same object:
  :func:`controller.runtime.intent.intended_plan` keeps unchanged switch plans across
  generations), once nothing is in flight and something asked for it
  (:attr:`~controller.runtime.state.RuntimeState.converge`: a plan change, a read-back that
  differs, the retry timer after a refusal); the differences become one
  :class:`~controller.runtime.transaction.Transaction` (make-before-break across switches),
  whose parts go out as :class:`~controller.runtime.events.Write` effects, phase by phase, as the
  switches answer (:func:`answered`). A switch whose part holds nothing new gets nothing: a
  restarted controller reading back a correct switch sends nothing.
* **A refusal** rolls the transaction back on every switch that took its part, names the switch
  and the entry (``apply-failed``), and backs the switch off from that same target (2 s,
  doubling to 60 s; a new target is tried at once): :attr:`~controller.runtime.state.
  SwitchSession.refused`. The service that proposed the change reads
  :attr:`~controller.runtime.state.RuntimeState.last_refusal` and restores the last good
  intent.
* **A re-optimisation** is applied make-before-break (:func:`drive`): its moves in batches that
  keep every table within its headroom, each batch adopted only when the previous one is in
  force and the state is where that batch left it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from controller.errors import PlanInvariantError
from controller.plan.capacity import DEFAULT_HEADROOM
from controller.plan.model import SwitchChanges, SwitchPlan, diff_switch, empty_plan
from controller.runtime import transaction as tx
from controller.runtime.events import (
    Effect,
    Log,
    Publish,
    ReadBack,
    ReadBackDone,
    TelemetryPaths,
    Write,
    WriteAnswered,
    Written,
)
from controller.runtime.intent import intended_plan, table_notes
from controller.runtime.placement import apply_moves, move_batches
from controller.runtime.state import (
    Path,
    Refusal,
    Refused,
    Reoptimisation,
    RuntimeState,
    SwitchSession,
    TeForm,
)
from controller.te.collectives import FlowDemand
from controller.te.placement import Placement as TePlacement
from controller.te.recovery import Move

MAX_BACKOFF_S = 60.0


def _session(state: RuntimeState, switch: str, s: SwitchSession) -> RuntimeState:
    return replace(state, switches={**state.switches, switch: s})


def read_back(state: RuntimeState, switch: str, fx: list[Effect]) -> RuntimeState:
    """Ask for ``switch``'s holdings (we became its master, or an earlier read failed)."""
    s = state.session(switch)
    fx.append(ReadBack(switch, s.session))
    return _session(state, switch, replace(s, held=None, reading=True))


def target_of(state: RuntimeState, switch: str) -> SwitchPlan:
    plan = intended_plan(state).switches.get(switch)
    if plan is None:
        return empty_plan(switch, state.fabric.switch_by_name[switch].dpid)
    return plan


def read_back_done(state: RuntimeState, ev: ReadBackDone, fx: list[Effect]) -> RuntimeState:
    """A read-back answered: the switch's holdings are known; if they differ from its plan,
    a converge sends the difference (logged as the switch's reconcile)."""
    s = state.session(ev.switch)
    if not s.connected or s.session != ev.session or s.role != "master" or not s.reading:
        return state
    if ev.read is None:
        fx.append(Log("error", ev.switch, f"read-back failed: {ev.error}"))
        return replace(_session(state, ev.switch, replace(s, reading=False, held=None)),
                       unsettled=True)
    got = ev.read
    found = (len(got.plan.flows), got.foreign_entries, got.foreign_groups)
    new = _session(state, ev.switch, replace(s, reading=False, held=got.plan))
    try:
        want = target_of(new, ev.switch)
    except (PlanInvariantError, ValueError) as exc:
        fx.append(Log("error", ev.switch, f"intended plan invalid, nothing sent: {exc}"))
        return new
    if got.plan == want:
        fx.append(Log("info", ev.switch, f"reconciled: read {found[0]} entries of ours, all as "
                                         f"intended: nothing sent{_foreign(*found[1:])} "
                                         f"({ev.elapsed_ms:.1f} ms)"))
        # holds the target itself (equal): compared by identity from now on
        new = _session(new, ev.switch, replace(new.session(ev.switch), held=want))
        return programmed(new, (ev.switch,), fx)
    new = _session(new, ev.switch, replace(new.session(ev.switch), reconciling=found))
    return replace(new, converge=new.converge or f"reconcile {ev.switch}")


def _foreign(entries: int, groups: int) -> str:
    if not entries and not groups:
        return ""
    return f"; {entries} foreign entries and {groups} foreign groups left alone"


def programmed(state: RuntimeState, switches: tuple[str, ...] | frozenset[str],
               fx: list[Effect]) -> RuntimeState:
    """Note switches that hold their plan; the first time all do, say so."""
    new = state.programmed | frozenset(switches)
    if new == state.programmed:
        return state
    n = len(state.fabric.switches)
    if len(new) == n:
        fx.append(Log("info", "", f"all {n} switches programmed"))
    return replace(state, programmed=new)


def table_lines(state: RuntimeState) -> tuple[RuntimeState, list[Effect]]:
    """A switch whose pinned entries do not fit its table (:func:`controller.runtime.intent.
    table_notes`): one warning per note and a ``table-overflow`` event, when the notes differ
    from those reported last (``tables_reported``: each overflow is reported once, and again
    when it changes). Called when the plan is computed to converge to it
    (:func:`drive`)."""
    notes, fallback = table_notes(state)
    if notes == state.tables_reported:
        return state, []
    new = replace(state, tables_reported=notes)
    if not notes:
        return new, []
    out: list[Effect] = []
    for note in notes:
        sw = note.split(":", 1)[0].removeprefix("switch ")
        out.append(Log("warning", sw if sw in state.fabric.switch_by_name else "",
                       f"table capacity: {note}"))
    fell = ", ".join(d.label for d in fallback[:5]) + (" …" if len(fallback) > 5 else "")
    out.append(Publish("table-overflow", f"{len(notes)} switch(es) over table capacity; "
                       f"{len(fallback)} pinned flow(s) fall back to ECMP"
                       + (f": {fell}" if fell else ""),
                       (("switch", notes[0].split(":", 1)[0].removeprefix("switch ")),)))
    return new, out


# -- converging ------------------------------------------------------------------------------------
def drive(state: RuntimeState, now_s: float, fx: list[Effect]) -> RuntimeState:
    """Start what is due when nothing is in flight: a converge, else the next batch of a
    re-optimisation (module docstring)."""
    if state.txn is not None:
        return state
    if not state.converge and state.reopt is not None:
        state = _next_batch(state, fx)
    if not state.converge:
        return state
    reason = state.converge
    state = replace(state, converge="")
    try:
        target = intended_plan(state).switches
    except (PlanInvariantError, ValueError) as exc:
        fx.append(Log("error", "", f"intended plan invalid, nothing sent: {exc}"))
        return state
    state, lines = table_lines(state)
    fx += lines
    changes: dict[str, SwitchChanges] = {}
    same: list[str] = []
    canonical: dict[str, SwitchSession] = {}
    waiting = False
    # the per-switch changes a preview computed (off the loop) from the plan before to this
    # one: a switch holding the plan before takes them, not a diff of its own
    known = state.memo.diffs
    before, _, diffed = known if known is not None and \
        known[1].switches is target else (None, None, {})
    for name in sorted(state.switches):
        s = state.switches[name]
        if not s.connected or s.role != "master" or s.held is None:
            continue
        want = target.get(name) or empty_plan(name, state.fabric.switch_by_name[name].dpid)
        if s.held is want:
            same.append(name)
            continue
        if s.held == want:
            # hold the target itself: the next comparison is by identity, not entry by entry
            same.append(name)
            canonical[name] = replace(s, held=want.indexed_like(s.held))
            continue
        r = s.refused
        if r is not None and r.target == want and now_s < r.until_s:
            waiting = True
            continue
        got = diffed.get(name)
        if got is not None and before is not None and before.switches.get(name) is s.held:
            changes[name] = got
            continue
        changes[name] = diff_switch(s.held, want)
    if canonical:
        state = replace(state, switches={**state.switches, **canonical})
    state = programmed(state, tuple(same), fx)
    if not changes:
        return replace(state, unsettled=waiting)
    t = tx.start(state.next_txn, reason, state.plan_generation, state.intent_generation,
                 changes, now_s)
    state = replace(state, txn=t, next_txn=state.next_txn + 1, unsettled=waiting)
    return _send(state, fx, now_s)


def _stage(t: tx.Transaction) -> tuple[int, bool, int]:
    return t.phase, t.undoing, len(t.undo)


def _send(state: RuntimeState, fx: list[Effect], now_s: float) -> RuntimeState:
    """Write the parts of the transaction's current phase; a part for a switch we can't write
    now (or whose holdings became unknown) is answered ``lost`` at once."""
    while True:
        t = state.txn
        if t is None:
            return state
        if t.finished:
            return finish(state, fx, now_s)
        stage = _stage(t)
        lost = []
        for part in tx.parts(t):
            if part.switch not in t.waiting:
                continue
            s = state.session(part.switch)
            if not state.known(part.switch):
                lost.append(part.switch)
                continue
            assert s.held is not None
            fx.append(Write(t.id, part.switch, s.session, part, s.held))
        if not lost:
            return state
        for sw in lost:
            t = tx.answer(t, sw, "lost")
        state = replace(state, txn=t)
        if not t.finished and _stage(t) == stage:
            return state


def answered(state: RuntimeState, ev: WriteAnswered, now_s: float,
             fx: list[Effect]) -> RuntimeState:
    """A switch answered its part of the transaction in flight (module docstring)."""
    t = state.txn
    if t is None or t.id != ev.txn or ev.switch not in t.waiting:
        return state
    part = tx.part_of(t, ev.switch)
    assert part is not None
    s = state.session(ev.switch)
    if s.session == ev.session and s.connected:
        if ev.outcome == "done" and s.held is not None:
            try:
                s = replace(s, held=part.apply_to(s.held))
            except KeyError:
                s = replace(s, held=None)  # out of step with the switch: read back
        elif ev.outcome in ("unknown", "lost"):
            s = replace(s, held=None)
        state = _session(state, ev.switch, s)
        if s.held is None and s.role == "master" and not s.reading:
            fx.append(Log("warning", ev.switch, f"what it holds is not known ({ev.outcome}: "
                                                f"{ev.error or 'no answer'}): reading it back"))
            state = read_back(state, ev.switch, fx)
    if ev.outcome == "done" and not t.undoing:
        n = sum(v for k, v in ev.messages.items() if k != "bundle")
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(ev.messages.items()))
        fx.append(Log("info", ev.switch, f"sent {n} messages (flows +{len(part.add_flows)} "
                                         f"~{len(part.modify_flows)} -{len(part.delete_flows)}"
                                         f"; {kinds})"))
    stage = _stage(t)
    t = tx.answer(t, ev.switch, ev.outcome, entry=ev.entry, error=ev.error,
                  messages=ev.messages)
    state = replace(state, txn=t)
    if t.finished or _stage(t) != stage:
        return _send(state, fx, now_s)
    return state


def finish(state: RuntimeState, fx: list[Effect], now_s: float) -> RuntimeState:
    """The transaction in flight is over: log, back off a refusing switch, note the switches
    that hold their plan, and say so (:class:`~controller.runtime.events.Written`)."""
    t = state.txn
    assert t is not None and t.finished
    fx.append(Written(t, tuple((n, s.reconciling[0]) for n, s in sorted(state.switches.items())
                               if n in t.switches and s.reconciling is not None)))
    sw = dict(state.switches)
    for name in sorted(t.switches):
        s = sw.get(name)
        if s is None or s.reconciling is None:
            continue
        parts = [c for ph in t.phases for c in ph if c.switch == name]
        a = sum(len(c.add_flows) for c in parts)
        m = sum(len(c.modify_flows) for c in parts)
        d = sum(len(c.delete_flows) for c in parts)
        verdict = "sent" if name in t.confirmed else "refused" if not t.ok else "not sent"
        read, fe, fg = s.reconciling
        fx.append(Log("info", name, f"reconciled: read {read} entries of ours, {verdict} +{a} "
                                    f"~{m} -{d}{_foreign(fe, fg)} "
                                    f"({(now_s - t.started_s) * 1e3:.1f} ms)"))
        if verdict == "sent":
            sw[name] = replace(s, reconciling=None)
        # refused or not sent: still being reconciled; the retry that lands says so
    for name in t.lost:
        if name in sw and sw[name].connected and sw[name].role == "master":
            state = replace(state, unsettled=True)
    if t.ok:
        for name in t.confirmed:
            if sw[name].refused is not None:
                sw[name] = replace(sw[name], refused=None)
        state = replace(state, txn=None, switches=sw)
        return programmed(state, t.confirmed, fx)
    f = t.failure
    assert f is not None
    stuck = sorted(t.rollback_failed)
    fx.append(Log("error", f.switch, "change refused, rolled back on "
                  + (", ".join(sorted(t.rolled_back)) or "no other switch")
                  + (f" (could not restore {', '.join(stuck)}: read back when they return)"
                     if stuck else "") + f": {f.error}"))
    fx.append(Publish("apply-failed", f"{t.reason}: {f.error}; rolled back",
                      (("switch", f.switch),)))
    s = sw[f.switch]
    prev = s.refused.wait_s if s.refused is not None else 0.0
    wait = min(MAX_BACKOFF_S, max(state.settings.retry_interval_s, 2 * prev))
    state = replace(state, switches=sw)
    try:
        want: SwitchPlan | None = target_of(state, f.switch)
    except (PlanInvariantError, ValueError):
        want = None
    fx.append(Log("warning", f.switch, f"will be retried in {wait:.0f} s (or at the next "
                                       "change)"))
    sw[f.switch] = replace(s, refused=Refused(want, now_s + wait, wait))
    for name in t.rollback_failed:
        if sw[name].held is not None:
            sw[name] = replace(sw[name], held=None)
    return replace(state, txn=None, switches=sw, unsettled=True,
                   last_refusal=Refusal(t.intent_generation, t.plan_generation, f.switch,
                                        f.entry, f.error))


# -- re-optimisation in batches ----------------------------------------------------------------------
def begin_reoptimisation(state: RuntimeState, moves: tuple[Move, ...],
                         final: Mapping[FlowDemand, Path], te: TePlacement | None,
                         describe: str, fx: list[Effect]) -> RuntimeState:
    """Start applying a re-optimisation make-before-break (module docstring)."""
    pol = state.effective_policy
    headroom = pol.tables.headroom if pol.tables is not None else DEFAULT_HEADROOM
    batches = move_batches(moves, headroom)
    fx.append(Log("info", "", f"re-optimisation: {describe}; applying in {len(batches)} "
                              "batch(es) make-before-break"))
    return replace(state, reopt=Reoptimisation(batches, final, te, state.generation))


def _next_batch(state: RuntimeState, fx: list[Effect]) -> RuntimeState:
    r = state.reopt
    assert r is not None
    n = len(r.batches)
    if state.generation != r.expected_generation or state.unsettled:
        why = (f"the state moved on (generation {state.generation}, not "
               f"{r.expected_generation})" if state.generation != r.expected_generation
               else "the switches did not take the plan in force")
        fx.append(Log("info", "", f"re-optimisation dropped after {r.index} of {n} batch(es): "
                                  f"{why}"))
        return replace(state, reopt=None)
    last = r.index + 1 == n
    paths = dict(r.final) if last else apply_moves(state.placement, r.batches[r.index])
    new = state.bump(placement=paths, plan_generation=state.plan_generation + 1,
                     converge=f"re-optimisation batch {r.index + 1}/{n}")
    try:
        intended_plan(new)
    except (PlanInvariantError, ValueError) as exc:
        fx += replan_failed("reoptimise", exc)
        return replace(state, reopt=None)
    fx += repins(state.placement, new.placement, "re-optimisation")
    fx.append(TelemetryPaths(new.placement))
    if last and r.te is not None:
        new = replace(new, te_form=TeForm(new.placement, r.te))
    return replace(new, reopt=None if last else replace(
        r, index=r.index + 1, expected_generation=new.generation))


def replan_failed(kind: str, exc: object) -> list[Effect]:
    """The installed plan stays: a ``kind`` decision could not be adopted (``exc`` says why)."""
    return [Log("error", "", f"{kind}: recomputation failed, the installed plan stays: {exc}"),
            Publish("replan-failed", f"recomputation failed, the installed plan stays: {exc}")]


def repins(before: Mapping[FlowDemand, tuple[str, ...]],
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


__all__ = ["answered", "begin_reoptimisation", "drive", "finish",
           "programmed", "read_back", "read_back_done", "replan_failed", "repins", "table_lines",
           "target_of"]
