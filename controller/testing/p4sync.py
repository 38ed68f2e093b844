"""A P4Runtime switch brought to a given state without a runtime: for labs, tests and benches
that program one BMv2 switch by hand.

The controller never does this: its runtime decides every write (:mod:`controller.runtime.
writes`) and the driver only encodes it. Here the driver's two halves are used alone — read the
switch back, :func:`~controller.drivers.p4runtime.reconcile.reconcile` the read-back with the
wanted entities, send the phases (:meth:`~controller.drivers.p4runtime.client.P4Switch.
write_phases`).
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.drivers.p4runtime.client import P4Switch
from controller.drivers.p4runtime.entities import SwitchEntities
from controller.drivers.p4runtime.reconcile import reconcile


@dataclass(frozen=True)
class Synced:
    """What :func:`sync` found and did: ``read`` entities read back, ``written`` counts
    ``{"insert", "modify", "delete"}``, ``requests`` WriteRequests sent."""

    read: int
    written: dict[str, int]
    requests: int


async def sync(sw: P4Switch, intended: SwitchEntities) -> Synced:
    """Read ``sw`` back and write only the difference to ``intended`` (an entity equal on both
    sides is not touched). Raises what :meth:`P4Switch.write_phases` raises."""
    actual = await sw.read_state()
    rec = reconcile(intended, actual)
    return Synced(actual.count, rec.counts(), await sw.write_phases(rec))


__all__ = ["Synced", "sync"]
