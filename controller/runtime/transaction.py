"""A fabric change as one transaction, decided by the core: validated whole, applied per switch
atomically, make-before-break across switches, rolled back whole on a switch error. Pure: a
:class:`Transaction` is a value the core (:mod:`controller.runtime.core`) advances with the
switches' answers; it sends nothing itself.

The core computes the whole intended plan before anything is sent; :func:`start` then splits the
per-switch changes into three phases, each switch's part of a phase one unit (an OpenFlow bundle
committed with ATOMIC|ORDERED; ordered P4Runtime batches):

1. **make** — every switch's added entries (the switches downstream on the new paths get
   their entries before anything sends traffic onto them);
2. **move** — every switch's modified entries (the switch that moves traffic onto the new path);
3. **break** — every switch's deletes (entries, and next-hop sets no entry uses any more).

The parts of one phase are written concurrently (:func:`parts`); the next phase starts when every
part of this one is answered (:func:`answer`). A transaction on one switch is one unit. A switch
whose mastership moved away or whose connection dropped meanwhile is **lost**, not a failure: its
new master (or its next session's read-back) decides what it gets. When a switch refuses its part
(nothing of it is in force, or — P4Runtime applies a batch update by update — its holdings are
unknown until read back), every part already confirmed is undone with its inverse, the phases in
reverse order, and the failure names the switch and the entry. A part that cannot be undone (the
switch went away) is reported; that switch is read back and reconciled when it returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from controller.plan.model import FlowIntent, SwitchChanges

Outcome = Literal["done", "refused", "unknown", "lost"]
"""A switch's answer to its part: ``done`` (acknowledged: in force), ``refused`` (nothing of it
is in force), ``unknown`` (refused or timed out with the switch possibly half-changed: read it
back), ``lost`` (not written: not master, or not connected)."""


@dataclass(frozen=True)
class Failure:
    """The switch that refused, the entry it named (None: not known) and its error."""

    switch: str
    entry: FlowIntent | None
    error: str


@dataclass(frozen=True)
class Transaction:
    """One transaction in flight (module docstring).

    ``phases``: the make / move / break parts; ``phase``: the phase being written; ``waiting``:
    switches of that phase not answered yet; ``done``: parts in force, in the order they were
    confirmed; ``lost``: switches not written; ``failure``: the first refusal; ``undo``: the
    rollback phases still to write (after a failure); ``rolled_back`` / ``rollback_failed``:
    switches restored or not; ``messages``: messages sent by kind; ``started_s``: when the first
    part went out (monotonic s); ``reason``: why (for the log); ``plan_generation`` and
    ``intent_generation``: the plan it drives the switches to.
    """

    id: int
    reason: str
    plan_generation: int
    intent_generation: int
    phases: tuple[tuple[SwitchChanges, ...], ...]
    started_s: float = 0.0
    phase: int = 0
    waiting: frozenset[str] = frozenset()
    done: tuple[SwitchChanges, ...] = ()
    lost: frozenset[str] = frozenset()
    failure: Failure | None = None
    undo: tuple[tuple[SwitchChanges, ...], ...] = ()
    undoing: bool = False
    rolled_back: frozenset[str] = frozenset()
    rollback_failed: frozenset[str] = frozenset()
    messages: Mapping[str, int] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        """Every part answered and nothing left to write (or undo)."""
        return not self.waiting and (
            not self.undo if self.undoing else self.phase >= len(self.phases))

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def switches(self) -> frozenset[str]:
        return frozenset(c.switch for ph in self.phases for c in ph)

    @property
    def confirmed(self) -> frozenset[str]:
        """Switches whose change is in force (not lost, not rolled back)."""
        if self.failure is not None:
            return frozenset()
        return frozenset(c.switch for c in self.done) - self.lost


def phases(changes: Mapping[str, SwitchChanges]) -> tuple[tuple[SwitchChanges, ...], ...]:
    """The make / move / break parts of ``changes`` (module docstring); empty parts omitted.
    A transaction on one switch is one part."""
    live = {n: c for n, c in changes.items() if not c.empty}
    if len(live) == 1:
        return ((next(iter(live.values())),),)
    make, move, brk = [], [], []
    for name in sorted(live):
        ch = live[name]
        if ch.add_flows:
            make.append(SwitchChanges(name, add_flows=ch.add_flows))
        if ch.modify_flows:
            move.append(SwitchChanges(name, modify_flows=ch.modify_flows,
                                      modified_from=ch.modified_from))
        if ch.delete_flows:
            brk.append(SwitchChanges(name, delete_flows=ch.delete_flows))
    return tuple(tuple(p) for p in (make, move, brk) if p)


def start(txn_id: int, reason: str, plan_generation: int, intent_generation: int,
          changes: Mapping[str, SwitchChanges], now_s: float) -> Transaction:
    """A new transaction, its first phase waiting (``changes`` must not be empty)."""
    ph = phases(changes)
    assert ph, "a transaction needs a change"
    return Transaction(txn_id, reason, plan_generation, intent_generation, ph, now_s, 0,
                       frozenset(c.switch for c in ph[0]))


def parts(txn: Transaction) -> tuple[SwitchChanges, ...]:
    """The parts to write now: the current phase's, or the current rollback phase's."""
    if txn.undoing:
        return txn.undo[0] if txn.undo else ()
    return txn.phases[txn.phase] if txn.phase < len(txn.phases) else ()


def part_of(txn: Transaction, switch: str) -> SwitchChanges | None:
    """``switch``'s part now (None: it has none)."""
    return next((c for c in parts(txn) if c.switch == switch), None)


def answer(txn: Transaction, switch: str, outcome: Outcome, *, entry: FlowIntent | None = None,
           error: str = "", messages: Mapping[str, int] | None = None) -> Transaction:
    """``txn`` with ``switch``'s answer to its current part; when the phase is complete, the
    next one (or the rollback) is waiting. An answer from a switch not waited for changes
    nothing."""
    if switch not in txn.waiting:
        return txn
    part = part_of(txn, switch)
    assert part is not None
    msgs = dict(txn.messages)
    for k, v in (messages or {}).items():
        msgs[k] = msgs.get(k, 0) + v
    t = replace(txn, waiting=txn.waiting - {switch}, messages=msgs)
    if t.undoing:
        if outcome == "done":
            t = replace(t, rolled_back=t.rolled_back | {switch})
        else:
            t = replace(t, rollback_failed=t.rollback_failed | {switch})
    elif outcome == "done":
        t = replace(t, done=(*t.done, part))
    elif outcome == "lost":
        t = replace(t, lost=t.lost | {switch})
    elif t.failure is None:
        t = replace(t, failure=Failure(switch, entry, error or f"{switch}: refused"))
    if t.waiting:
        return t
    return _next(t)


def _next(t: Transaction) -> Transaction:
    if t.undoing:
        left = t.undo[1:]
        return replace(t, undo=left, waiting=frozenset(c.switch for c in left[0]) if left
                       else frozenset())
    if t.failure is not None:
        undo = _rollback(t)
        t = replace(t, undoing=True, undo=undo, phase=len(t.phases))
        return replace(t, waiting=frozenset(c.switch for c in undo[0]) if undo else frozenset())
    nxt = t.phase + 1
    if nxt >= len(t.phases):
        return replace(t, phase=nxt)
    return replace(t, phase=nxt, waiting=frozenset(c.switch for c in t.phases[nxt]))


def _rollback(t: Transaction) -> tuple[tuple[SwitchChanges, ...], ...]:
    """The inverses of the confirmed parts, phase by phase in reverse order (a switch lost
    meanwhile is read back instead)."""
    by_phase: list[list[SwitchChanges]] = [[] for _ in t.phases]
    for c in t.done:
        if c.switch in t.lost:
            continue
        k = next(i for i, ph in enumerate(t.phases) if c in ph)
        by_phase[k].append(c.inverse())
    return tuple(tuple(p) for p in reversed(by_phase) if p)
