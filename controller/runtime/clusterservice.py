"""Northbound writes of a cluster replica: intent first.

Any replica answers RegisterCollective, UnregisterCollective and ApplyPolicy (and SIGHUP) the
same way (:class:`~controller.runtime.service.FabricService` validates and places as alone):

1. the new state is stepped as a preview (its plan must pass every invariant: nothing invalid
   ever reaches etcd);
2. the change — registrations, an unregistration or a policy document, *with the placement that
   goes with it* — is one etcd transaction, compare-and-swap on the intent generation this
   replica holds (:class:`~controller.cluster.store.IntentStore`; a concurrent commit makes it
   :class:`~controller.cluster.store.StaleGeneration`: the caller waits for the newer intent
   and decides again);
3. every replica adopts the commit from its watch and converges the switches it masters; the
   answering replica waits until the masters of the switches the change concerns said they hold
   it (:meth:`~controller.runtime.cluster.ClusterRuntime.wait_confirmed`).

Outcomes: etcd did not take the change → :class:`~controller.northbound.model.NotConfirmed`
(gRPC UNAVAILABLE), nothing changed; taken but not confirmed within ``confirm_timeout_s`` (a
switch without a live master during a failover) → UNAVAILABLE saying it is in the intent and
goes in force when a master answers; the same registration sent again then waits again
(:func:`already_registered`). Nothing is ever half-registered: the intent in etcd is whole, and
every master converges to it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controller.cluster.store import (
    IntentChange,
    StaleGeneration,
    StoreUnavailable,
    UnknownCollective,
)
from controller.northbound.model import (
    Confirmation,
    NotConfirmed,
    NotFound,
    Registration,
)
from controller.plan.model import SwitchChanges
from controller.policy.model import Collective
from controller.runtime import core
from controller.runtime.cluster import ClusterRuntime
from controller.runtime.clustercodec import encode_placement, registered_spec
from controller.runtime.events import CollectivesRegistered, PolicyApplied
from controller.runtime.state import Path, Registered, RuntimeState
from controller.te.collectives import FlowDemand

#: collectives per commit (etcd's --max-txn-ops 128, less the generation, commit id, placement)
MAX_BATCH = 100


def switches_of(placement: Mapping[FlowDemand, Path], collectives: Iterable[str]) -> set[str]:
    """The switches on the paths of the flows of ``collectives``."""
    names = set(collectives)
    return {n for d, p in placement.items() if d.collective in names for n in p[1:-1]}


def _unavailable(exc: StoreUnavailable) -> NotConfirmed:
    known = ("nothing changed" if exc.applied is False
             else "it may or may not be in the intent: GetStatus on any replica tells")
    return NotConfirmed(f"etcd did not take the change ({exc}); {known}")


def _late(what: str, generation: int, pending: Iterable[str], timeout_s: float) -> NotConfirmed:
    return NotConfirmed(
        f"{what} is in the cluster's intent (generation {generation}) but the masters of "
        f"{', '.join(pending)} did not confirm within {timeout_s:g} s (no live master during "
        "a failover?); it goes in force when they answer; the same request again waits again")


async def commit_registrations(cluster: ClusterRuntime, st: RuntimeState,
                               entries: tuple[Registered, ...],
                               placement: Mapping[FlowDemand, Path]) -> int:
    """Steps 1 and 2 for a batch of registrations; returns the intent generation committed.

    Raises StaleGeneration (the caller waits and retries), NotConfirmed (etcd did not take it),
    PlanInvariantError (the plan with them is invalid; nothing committed)."""
    core.step(st, CollectivesRegistered(entries, placement), time.monotonic())
    change = IntentChange(register={r.collective.name: registered_spec(r) for r in entries},
                          placement=encode_placement(placement))
    try:
        snap = await cluster.commit(change, st.intent_generation)
    except StoreUnavailable as exc:
        raise _unavailable(exc) from None
    return snap.generation


async def wait_in_force(cluster: ClusterRuntime, generation: int, switches: set[str],
                        what: str) -> tuple[tuple[str, ...], float]:
    """Step 3: wait for this replica to hold ``generation`` and for the masters of ``switches``
    to confirm it. Returns (switches confirmed, unix time). Raises NotConfirmed on timeout."""
    timeout = cluster.opts.confirm_timeout_s
    t_end = time.monotonic() + timeout
    if not await cluster.wait_generation(generation, timeout):
        raise _late(what, generation, ["this replica"], timeout)
    confirmed, pending = await cluster.wait_confirmed(switches, generation,
                                                      max(0.0, t_end - time.monotonic()))
    if pending:
        raise _late(what, generation, pending, timeout)
    return confirmed, time.time()


def already_registered(st: RuntimeState, coll: Collective, job: str,
                       expected_bytes: int | None) -> bool:
    """True when ``coll`` is registered exactly so (a client repeating a request whose answer
    was UNAVAILABLE); a different collective of that name is refused as usual."""
    r = st.registered.get(coll.name)
    return r is not None and r.collective == coll and r.job == job \
        and r.expected_bytes == expected_bytes


async def confirm_existing(cluster: ClusterRuntime, st: RuntimeState, name: str,
                           t0: float) -> tuple[Confirmation, int]:
    """Wait for a collective already in the intent to be in force on its switches."""
    gen = st.intent_generation
    on = switches_of(st.placement, [name])
    confirmed, now = await wait_in_force(cluster, gen, on, f"collective {name}")
    return Confirmation(True, now, (now - t0) * 1e3, confirmed, ()), gen


async def unregister(cluster: ClusterRuntime, service: Any, name: str) -> tuple[
        Confirmation, int]:
    """UnregisterCollective through etcd (module docstring). Raises NotFound, NotConfirmed."""
    t0 = time.time()
    for _attempt in range(3):
        st: RuntimeState = service.state
        if name not in st.registered:
            raise NotFound(f"no registered collective {name[:64]!r}")
        on = switches_of(st.placement, [name])
        placement = {d: p for d, p in st.placement.items() if d.collective != name}
        change = IntentChange(unregister=frozenset({name}),
                              placement=encode_placement(placement))
        try:
            snap = await cluster.commit(change, st.intent_generation)
        except StaleGeneration as exc:
            await cluster.wait_generation(exc.actual, cluster.opts.confirm_timeout_s)
            continue
        except UnknownCollective:
            raise NotFound(f"no registered collective {name[:64]!r}") from None
        except StoreUnavailable as exc:
            raise _unavailable(exc) from None
        confirmed, now = await wait_in_force(cluster, snap.generation, on,
                                             f"unregistering {name}")
        return (Confirmation(True, now, (now - t0) * 1e3, confirmed, ()),
                service.state.plan_generation)
    raise NotConfirmed(f"unregistering {name}: the cluster's intent kept changing; retry")


@dataclass(frozen=True)
class PolicyCommitted:
    """What :func:`apply_policy` did: the intent generation, the per-switch changes of the
    intended plan, the switches whose masters confirmed it and those that did not (yet), and
    when the last confirmed (unix s; 0 while some are pending)."""

    generation: int
    changes: Mapping[str, SwitchChanges]
    confirmed: tuple[str, ...]
    pending: tuple[str, ...]
    in_force_unix_s: float


async def apply_policy(cluster: ClusterRuntime, st: RuntimeState, document: str, source: str,
                       pif: Any, placement: Mapping[FlowDemand, Path]) -> PolicyCommitted:
    """ApplyPolicy through etcd: commit the document with its placement, wait for the masters
    of the switches it changes. Raises StaleGeneration, NotConfirmed (etcd did not take it),
    PlanInvariantError (nothing committed)."""
    preview = core.step(st, PolicyApplied(pif, placement), time.monotonic())
    change = IntentChange(policy=(document, source), placement=encode_placement(placement))
    try:
        snap = await cluster.commit(change, st.intent_generation)
    except StoreUnavailable as exc:
        raise _unavailable(exc) from None
    timeout = cluster.opts.confirm_timeout_s
    t_end = time.monotonic() + timeout
    await cluster.wait_generation(snap.generation, timeout)
    confirmed, pending = await cluster.wait_confirmed(set(preview.changes), snap.generation,
                                                      max(0.0, t_end - time.monotonic()))
    return PolicyCommitted(snap.generation, preview.changes, confirmed, pending,
                           0.0 if pending else time.time())


def registration_reply(service: Any, coll: Collective, confirmed: tuple[str, ...],
                       now: float, t0: float) -> Registration:
    """The RegisterCollective reply once the masters confirmed."""
    flows = tuple(service._flows(coll.name))  # noqa: SLF001 - the service's own helper
    on = {n for f in flows for n in f.path[1:-1]}
    conf = Confirmation(True, now, (now - t0) * 1e3, tuple(sorted(on & set(confirmed))), ())
    return Registration(coll.name, flows, conf, service.state.plan_generation)


__all__ = ["MAX_BATCH", "PolicyCommitted", "already_registered", "apply_policy",
           "commit_registrations", "confirm_existing", "registration_reply", "switches_of",
           "unregister", "wait_in_force"]
