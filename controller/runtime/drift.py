"""Drift: what the switches hold against what they should (``aifabric drift``, the northbound
``CheckDrift``).

:func:`check_drift` reads every switch asked for back through its driver *without adopting
what it reads* (``read_state(adopt=False)``: the driver's ids stay as they are) and compares our
entries with the switch's intended plan (:func:`controller.runtime.writes.target_of`):

* **missing**: in the plan, not on the switch (deleted by hand, lost by a switch restart);
* **extra**: on the switch with our cookie (OpenFlow) or in our tables (P4Runtime), not in
  the plan;
* **modified**: the same table, priority and match with another action.

Entries that are not ours are counted and never drift (Faucet's and our rule: what is not ours
is left alone). Nothing is written, and the runtime's record of what each switch holds
(:attr:`~controller.runtime.state.SwitchSession.held`) is not touched: a check cannot start a
write, hold one back, or make the controller believe a switch holds what it read. Repairing is
the write path's: a switch is read back and converged when it reconnects or we become its master
again.

A difference can be passing: a change being applied to the switch, or a plan that changed while
it was read; :attr:`~controller.northbound.model.SwitchDrift.note` says so, and a second check
tells.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from controller.drivers.southbound import SouthboundError, SwitchState
from controller.errors import PlanInvariantError
from controller.northbound.model import DriftEntry, DriftReport, NotFound, SwitchDrift
from controller.plan.model import FlowIntent, SwitchPlan, diff_switch
from controller.runtime.controller import Controller
from controller.runtime.state import RuntimeState
from controller.runtime.writes import target_of

#: switches read back at once
MAX_CONCURRENT_READS = 16


def switch_drift(switch: str, got: SwitchState, want: SwitchPlan, note: str = ""
                 ) -> SwitchDrift:
    """``got`` (a switch read back) against ``want`` (its intended plan). Pure."""
    ch = diff_switch(got.plan, want)
    entries = ([DriftEntry("missing", _line(f)) for f in ch.add_flows]
               + [DriftEntry("modified", _line(f), str(old))
                  for f, old in zip(ch.modify_flows, ch.modified_from, strict=True)]
               + [DriftEntry("extra", str(f)) for f in ch.delete_flows])
    return SwitchDrift(switch, True, "", len(got.plan.flows), len(want.flows),
                       got.foreign_entries, tuple(entries), note if entries else "")


def _line(f: FlowIntent) -> str:
    """An intended entry as the plan prints it, with what it is for (``'pin ring-a h1->h3'``)."""
    return f"{f} ('{f.origin}')" if f.origin else str(f)


def _note(before: RuntimeState, after: RuntimeState, switch: str) -> str:
    """Why a difference on ``switch`` may be passing (read between ``before`` and ``after``)."""
    notes = []
    for st in (before, after):
        t = st.txn
        if t is not None and switch in t.switches:
            notes.append(f"a change was being applied to it (transaction {t.id}: {t.reason})")
            break
    if after.plan_generation != before.plan_generation:
        notes.append(f"the plan changed while it was read (generation "
                     f"{before.plan_generation} -> {after.plan_generation})")
    s = after.session(switch)
    if s.role == "master" and s.held is None:
        notes.append("the controller is reading it back to converge it")
    return "; ".join(notes) + ("; check again" if notes else "")


async def check_drift(ctl: Controller, switches: Sequence[str], *, timeout_s: float,
                      replica: str = "", wall: Callable[[], float] = time.time) -> DriftReport:
    """Read ``switches`` (every switch of the fabric when empty) back and compare (module
    docstring). Each read has ``timeout_s`` seconds; one that fails or times out is reported
    unread, with the reason.

    Raises
    ------
    NotFound
        A name the fabric has no switch for.
    """
    st = ctl.state
    known = st.fabric.switch_by_name
    unknown = [n for n in switches if n not in known]
    if unknown:
        shown = ", ".join(repr(n[:64]) for n in unknown[:5])
        raise NotFound(f"no switch {shown} in fabric {st.fabric.name}")
    names = sorted(set(switches)) if switches else [s.name for s in st.fabric.switches]
    gate = asyncio.Semaphore(MAX_CONCURRENT_READS)

    async def one(name: str) -> SwitchDrift:
        if not ctl.state.session(name).connected:
            return SwitchDrift(name, False, "not connected to this controller")
        before = ctl.state
        async with gate:
            try:
                got = await asyncio.wait_for(
                    ctl.driver_of(name).read_state(name, adopt=False), timeout_s)
            except SouthboundError as exc:
                return SwitchDrift(name, False, str(exc))
            except TimeoutError:
                return SwitchDrift(name, False, f"no answer to the read within {timeout_s:g} s")
        after = ctl.state
        try:
            want = target_of(after, name)
        except (PlanInvariantError, ValueError) as exc:
            return SwitchDrift(name, False, f"its intended plan is invalid here: {exc}")
        return switch_drift(name, got, want, _note(before, after, name))

    out = await asyncio.gather(*(one(n) for n in names))
    return DriftReport(tuple(out), st.intent_generation, st.plan_generation, wall(), replica)
