"""The intent store: where every operator decision goes before any switch sees it — etcd in a
cluster (:class:`controller.runtime.cluster.EtcdIntent`), memory for a lone controller
(:class:`MemoryIntent`: a cluster of one). One interface, one code path in the service
(:mod:`controller.runtime.service`):

1. the service validates the change and previews its plan (:func:`controller.runtime.core.
   adopt`: nothing invalid is ever committed);
2. :meth:`IntentStore.commit` commits it as one compare-and-swap on the intent generation the
   service read (a concurrent commit makes it :class:`~controller.cluster.store.
   StaleGeneration`: wait for the newer intent, decide again);
3. the committed intent reaches the runtime as an :class:`~controller.runtime.events.
   IntentSynced` event (at once in memory; from the watch in a cluster), and every master
   converges its switches to it;
4. :meth:`IntentStore.wait_in_force` waits until the masters of the switches the change
   concerns hold it, or one of them refused it (:class:`InForce`); a refused change is put back
   by the service (the previous policy record, registrations and placement committed again), so
   the last good intent stays in force.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from controller.cluster.store import StaleGeneration
from controller.runtime.events import IntentSynced
from controller.runtime.state import Path, PolicyInForce, Refusal, Registered, RuntimeState
from controller.runtime.transaction import Transaction
from controller.runtime.writes import target_of
from controller.te.collectives import FlowDemand


@dataclass(frozen=True)
class IntentUpdate:
    """One commit: a new ``policy`` (its generation becomes the commit's), collectives to
    ``register`` and names to ``unregister``, the ``placement`` that goes with them (None: kept),
    and ``restore_policy``: a policy record put back exactly as it was (a refused change
    undone)."""

    policy: PolicyInForce | None = None
    register: tuple[Registered, ...] = ()
    unregister: frozenset[str] = frozenset()
    placement: Mapping[FlowDemand, Path] | None = None
    restore_policy: PolicyInForce | None = None


def synced(state: RuntimeState, update: IntentUpdate, generation: int,
           now_unix_s: float, planned: RuntimeState | None = None) -> IntentSynced:
    """The intent ``update`` makes of ``state``'s, as intent ``generation`` (``planned``: a
    preview's adopted state, :attr:`IntentSynced.planned`)."""
    policy = state.policy
    if update.restore_policy is not None:
        policy = update.restore_policy
    elif update.policy is not None:
        policy = replace(update.policy, generation=generation,
                         applied_unix_s=update.policy.applied_unix_s or now_unix_s)
    reg = {n: r for n, r in state.registered.items() if n not in update.unregister}
    for r in update.register:
        reg[r.collective.name] = r
    placement = state.placement if update.placement is None else update.placement
    return IntentSynced(policy, reg, dict(placement), generation, planned)


def undo(before: RuntimeState, update: IntentUpdate) -> IntentUpdate:
    """The update that puts ``before``'s intent back after ``update`` was committed."""
    added = frozenset(r.collective.name for r in update.register)
    return IntentUpdate(
        register=tuple(r for n, r in sorted(before.registered.items())
                       if n in update.unregister or n in added),
        unregister=frozenset(n for n in added if n not in before.registered),
        placement=dict(before.placement),
        restore_policy=before.policy if update.policy is not None else None)


@dataclass(frozen=True)
class InForce:
    """What :meth:`IntentStore.wait_in_force` saw: the switches whose masters hold the intent
    (or a later one), those that don't (yet), the refusal of a master (None: none), and whether
    it gave up waiting (``timed_out``: the pending ones may still take it)."""

    confirmed: tuple[str, ...]
    pending: tuple[str, ...]
    refusal: Refusal | None = None
    timed_out: bool = False


class IntentStore(Protocol):
    """Where the intent lives (module docstring)."""

    confirm_timeout_s: float

    async def commit(self, update: IntentUpdate, state: RuntimeState,
                     planned: RuntimeState | None = None) -> int:
        """Commit ``update`` onto ``state``'s intent (compare-and-swap on its
        ``intent_generation``); returns the new intent generation. ``planned``: the state
        a preview of ``update`` on ``state`` adopted, whose plan the runtime may take over
        (:attr:`~controller.runtime.events.IntentSynced.planned`; a store may ignore it).

        Raises :class:`~controller.cluster.store.StaleGeneration` (the intent moved on),
        :class:`~controller.northbound.model.NotConfirmed` (the store did not take it)."""
        ...

    async def wait_generation(self, generation: int, timeout_s: float) -> bool:
        """Wait until the runtime holds intent ``generation`` (or later); False on timeout."""
        ...

    async def wait_in_force(self, switches: Collection[str], generation: int) -> InForce:
        """Wait until the masters of ``switches`` hold intent ``generation`` or one refused
        it, at most :attr:`confirm_timeout_s`."""
        ...


class Runtime(Protocol):
    """What :class:`MemoryIntent` needs of the runtime (:class:`~controller.runtime.controller.
    Controller`)."""

    @property
    def state(self) -> RuntimeState: ...

    def handle(self, ev: IntentSynced) -> object: ...

    @property
    def after_write(self) -> list[Callable[[Transaction | None], None]]: ...


def in_force(state: RuntimeState, switches: Collection[str]) -> frozenset[str]:
    """Those of ``switches`` this runtime masters that hold the plan of its state."""
    return frozenset(n for n in switches
                     if state.known(n) and state.switches[n].held == target_of(state, n))


class MemoryIntent:
    """The intent store of a lone controller: the runtime's state is the store (module
    docstring). A commit is adopted at once; a switch that is not connected (no master will
    write it) is pending at once, not after a timeout."""

    def __init__(self, runtime: Runtime, confirm_timeout_s: float = 10.0) -> None:
        self.runtime = runtime
        self.confirm_timeout_s = confirm_timeout_s
        self._waiters: set[asyncio.Future[None]] = set()
        runtime.after_write.append(self._poke)

    def _poke(self, _: Transaction | None = None) -> None:
        for f in self._waiters:
            if not f.done():
                f.set_result(None)
        self._waiters.clear()

    async def commit(self, update: IntentUpdate, state: RuntimeState,
                     planned: RuntimeState | None = None) -> int:
        cur = self.runtime.state
        if state.intent_generation != cur.intent_generation:
            raise StaleGeneration(state.intent_generation, cur.intent_generation)
        ev = synced(cur, update, cur.intent_generation + 1, time.time(), planned)
        self.runtime.handle(ev)
        if self.runtime.state.intent_generation != ev.generation:
            raise ValueError(f"intent generation {ev.generation} was not adopted (its plan "
                             "breaks an invariant here)")
        self._poke()
        return ev.generation

    async def wait_generation(self, generation: int, timeout_s: float) -> bool:
        return self.runtime.state.intent_generation >= generation

    async def wait_in_force(self, switches: Collection[str], generation: int) -> InForce:
        want = frozenset(switches)
        end = asyncio.get_running_loop().time() + self.confirm_timeout_s
        while True:
            st = self.runtime.state
            ref = st.last_refusal
            if ref is not None and ref.intent_generation == generation:
                return InForce((), tuple(sorted(want)), ref)
            got = in_force(st, want) if st.intent_generation >= generation else frozenset()
            busy = st.txn is not None or bool(st.converge) or any(
                st.switches[n].reading for n in want if n in st.switches)
            hopeless = {n for n in want - got
                        if not st.session(n).connected or st.session(n).role == "backup"}
            left = end - asyncio.get_running_loop().time()
            if got | hopeless == want and not busy or left <= 0:
                return InForce(tuple(sorted(got)), tuple(sorted(want - got)),
                               timed_out=left <= 0 and got != want)
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.add(fut)
            try:
                await asyncio.wait_for(fut, left)
            except TimeoutError:
                pass
            finally:
                self._waiters.discard(fut)
