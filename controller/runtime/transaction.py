"""A fabric change as one transaction: validated whole, applied per switch atomically,
make-before-break across switches, rolled back whole on a switch error.

The caller validates (the whole intended plan is computed and checked before anything is sent);
:func:`apply_transaction` then sends each switch's part as one unit through its driver (an
OpenFlow bundle committed with ATOMIC|ORDERED; ordered P4Runtime batches) in three phases:

1. **make** — every switch's added entries (the switches downstream on the new paths get
   their entries before anything sends traffic onto them);
2. **move** — every switch's modified entries (the switch that moves traffic onto the new path);
3. **break** — every switch's deletes (entries, and next-hop sets no entry uses any more).

Switches of one phase are written concurrently; a switch whose change lies in one phase gets one
unit; a transaction on one switch only is one unit (no cross-switch order to keep). A switch
whose mastership moved away meanwhile (the driver or the mastership says "not master") is
pending, not a failure: its new master writes it. When a switch refuses its part (nothing of
that part is in force on it), every part already confirmed is undone with its inverse, in
reverse order, and the error names the switch and the entry. A part that cannot be undone (the
switch went away) is reported; that switch is read back and reconciled when it returns.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field

from controller.drivers.southbound import (
    ApplyError,
    ApplyReceipt,
    NotConnected,
    NotMaster,
    SouthboundError,
)
from controller.plan.model import FlowIntent, SwitchChanges

Apply = Callable[[str, SwitchChanges], Awaitable[ApplyReceipt]]
Confirmed = Callable[[str, SwitchChanges], None]


@dataclass(frozen=True)
class TransactionResult:
    """What a transaction did.

    ``ok``: every switch concerned confirmed (or is pending: not writable now, reconciled when
    it is); ``confirmed``: switches whose change is in force; ``pending``: switches not written
    (not connected or not master); on failure ``failed_switch``/``failed_entry``/``error`` and
    ``rolled_back`` (switches restored) / ``rollback_failed``; ``messages`` sent by kind;
    ``elapsed_ms`` from the first send to the last confirmation.
    """

    ok: bool
    confirmed: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()
    error: str = ""
    failed_switch: str = ""
    failed_entry: FlowIntent | None = None
    rolled_back: tuple[str, ...] = ()
    rollback_failed: tuple[str, ...] = ()
    messages: Mapping[str, int] = field(default_factory=dict)
    receipts: tuple[ApplyReceipt, ...] = ()
    elapsed_ms: float = 0.0


def phases(changes: Mapping[str, SwitchChanges]) -> list[list[SwitchChanges]]:
    """The make / move / break parts of ``changes`` (module docstring); empty parts omitted.
    A transaction on one switch is one part."""
    if len(changes) == 1:
        (ch,) = changes.values()
        return [[ch]] if not ch.empty else []
    make, move, brk = [], [], []
    for name in sorted(changes):
        ch = changes[name]
        if ch.add_flows:
            make.append(SwitchChanges(name, add_flows=ch.add_flows))
        if ch.modify_flows:
            move.append(SwitchChanges(name, modify_flows=ch.modify_flows,
                                      modified_from=ch.modified_from))
        if ch.delete_flows:
            brk.append(SwitchChanges(name, delete_flows=ch.delete_flows))
    return [p for p in (make, move, brk) if p]


async def apply_transaction(changes: Mapping[str, SwitchChanges], apply: Apply,
                            writable: Collection[str], on_confirmed: Confirmed | None = None
                            ) -> TransactionResult:
    """Apply ``changes`` (module docstring). ``apply(switch, part)`` sends one part and returns
    the switch's confirmation or raises
    :class:`~controller.drivers.southbound.SouthboundError`; ``on_confirmed(switch, part)`` is
    called for every part in force (and every inverse applied by a rollback), so the caller's
    record of what each switch holds stays exact."""
    todo = {n: c for n, c in changes.items() if not c.empty}
    pending = tuple(sorted(n for n in todo if n not in writable))
    live = {n: c for n, c in todo.items() if n in writable}
    done: list[SwitchChanges] = []
    receipts: list[ApplyReceipt] = []
    t0 = time.perf_counter()
    failure: tuple[str, FlowIntent | None, str] | None = None
    lost: set[str] = set()
    for part in phases(live):
        results = await asyncio.gather(*(apply(c.switch, c) for c in part),
                                       return_exceptions=True)
        for c, r in zip(part, results, strict=True):
            if isinstance(r, ApplyReceipt):
                done.append(c)
                receipts.append(r)
                if on_confirmed is not None:
                    on_confirmed(c.switch, c)
            elif isinstance(r, NotMaster):
                lost.add(c.switch)  # mastership moved meanwhile: its new master writes it
            elif failure is None:
                if isinstance(r, ApplyError):
                    failure = (c.switch, r.entry, str(r))
                elif isinstance(r, SouthboundError):
                    failure = (c.switch, None, str(r))
                elif isinstance(r, BaseException):
                    failure = (c.switch, None, f"{c.switch}: {type(r).__name__}: {r}")
        if failure is not None:
            break
    msgs: Counter[str] = Counter()
    for rc in receipts:
        msgs.update(rc.messages)
    if failure is None:
        confirmed = tuple(sorted({c.switch for c in done} - lost))
        pending = tuple(sorted({*pending, *lost}))
        return TransactionResult(True, confirmed, pending, messages=dict(msgs),
                                 receipts=tuple(receipts),
                                 elapsed_ms=(time.perf_counter() - t0) * 1e3)
    restored: list[str] = []
    stuck: list[str] = []
    for c in reversed(done):
        inv = c.inverse()
        try:
            rc = await apply(c.switch, inv)
        except (SouthboundError, NotConnected, NotMaster):
            stuck.append(c.switch)
            continue
        msgs.update(rc.messages)
        restored.append(c.switch)
        if on_confirmed is not None:
            on_confirmed(c.switch, inv)
    switch, entry, error = failure
    return TransactionResult(False, (), pending, error, switch, entry,
                             tuple(sorted(set(restored) - set(stuck))), tuple(sorted(set(stuck))),
                             dict(msgs), tuple(receipts), (time.perf_counter() - t0) * 1e3)
