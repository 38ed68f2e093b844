"""The controller process's core loop: one asyncio event loop owns the
:class:`~controller.runtime.state.RuntimeState`, folds every event into it with
:func:`controller.runtime.core.step` and carries out the effects.

* Drivers report from their own threads (os-ken) or the loop (finsy) through :meth:`Controller.
  post`, which hops onto the loop; the northbound gRPC server runs on the same loop.
* A **tick** every ``tick_s`` drives the timers of the core (LLDP, counters, re-balancing,
  retries).
* **Decisions that cost** (a repair after a link event, a re-optimisation, a re-balance round)
  run in an executor on a snapshot of the state; their result comes back as a
  :class:`~controller.runtime.events.PlacementReady` event for the generation it was computed
  from, and is dropped if the state moved on. Link events are handled in two phases
  (:mod:`controller.runtime.placement`): the repair moves only the flows on a dead link and is
  adopted at once; the re-optimisation that follows it is applied make-before-break, its moves
  in order and in batches that keep every table within its headroom, each batch one
  transaction adopted only if the state is still where the previous batch left it. The te
  form of the placement (link ids) is kept beside the state, so a repair starts from it.
* **Writes** go through one writer at a time (an ``asyncio.Lock``): reconciling a switch that
  (re)connected (read back, diff, send the difference: nothing when nothing changed), converging
  every writable switch to the intended plan after a fact changed (a port, a computed
  placement), and operator proposals (:meth:`Controller.propose`: a new policy, registered
  collectives), which are validated whole, applied as one transaction
  (:mod:`controller.runtime.transaction`) and committed to the state only once every switch
  confirmed — or rolled back, leaving the last good state in force.
* ``installed`` records, per switch, the intended entries it confirmed (read back at connect
  and at every master assignment, updated by every confirmed change, forgotten as soon as the
  switch is not writable); converging diffs against it, so a switch that missed a change
  (refused, disconnected) is brought up to date by the next retry or reconnect, and a switch
  another master wrote meanwhile is read back before anything is sent to it.

Mastership (which switches we may write) comes from a :class:`Mastership`: the only controller
(:class:`SoleController`, the default) writes everywhere without a role request; a fixed role
and ``generation_id`` (:class:`StaticMastership`) exercises the drivers' fencing; a replica of a
cluster asks etcd (:class:`controller.runtime.cluster.ClusterMastership`). The mastership is
asked again right before every write (a deposed master sends nothing), and
:meth:`Controller.role_changed` turns a change of it into a role request to the switch (only
the answer to the latest request per switch counts).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from controller.drivers.southbound import (
    CounterSample,
    NotMaster,
    Role,
    RoleError,
    SouthboundDriver,
    SouthboundError,
    SouthboundEvent,
)
from controller.errors import PlanInvariantError
from controller.plan.capacity import DEFAULT_HEADROOM
from controller.plan.model import (
    PRIO_PINNED,
    SwitchChanges,
    SwitchPlan,
    diff_switch,
    empty_plan,
)
from controller.runtime import core
from controller.runtime.events import (
    AlertRound,
    Compute,
    Converge,
    Effect,
    Event,
    ForgetCounters,
    Inject,
    Log,
    PlacementReady,
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
from controller.runtime.intent import intended_plan
from controller.runtime.meter import TrafficMeter, link_loads
from controller.runtime.placement import (
    PlacementDecision,
    PlacementInput,
    Reoptimise,
    Repair,
    apply_moves,
    move_batches,
    pinned_demands_bps,
    reoptimise_moves,
    repair_moved,
    te_placement,
)
from controller.runtime.rebalance import rebalance_round
from controller.runtime.state import RuntimeState
from controller.runtime.transaction import TransactionResult, apply_transaction
from controller.te.collectives import FlowDemand
from controller.te.placement import Placement as TePlacement

LOG = logging.getLogger("aifabric.runtime")


class Mastership(Protocol):
    """Which role we hold on each switch, and the fencing token that proves it."""

    def role_for(self, switch: str) -> tuple[Role, int | None]:
        """(``master``/``backup``/``equal``, token: OpenFlow ``generation_id`` / P4Runtime
        ``election_id``; None: no token)."""


class SoleController:
    """The only controller: full access everywhere, no role request (OpenFlow's default role
    EQUAL; P4Runtime: the driver's configured election id)."""

    def role_for(self, switch: str) -> tuple[Role, int | None]:
        return "equal", None


@dataclass(frozen=True)
class StaticMastership:
    """One role and token for every switch (a fixed ``generation_id``)."""

    role: Role
    token: int

    def role_for(self, switch: str) -> tuple[Role, int | None]:
        return self.role, self.token


@dataclass(frozen=True)
class Proposal:
    """What :meth:`Controller.propose` did: ``ok``; the per-switch changes (for a dry run: what
    would be sent); the transaction's result; the error (a plan invariant, or the switch and
    entry a switch refused)."""

    ok: bool
    changes: Mapping[str, SwitchChanges]
    result: TransactionResult | None = None
    error: str = ""
    state: RuntimeState | None = None


@dataclass
class ControllerStats:
    """Counters the metrics export (since start)."""

    reconciles: int = 0
    reconcile_entries_sent: int = 0
    transactions: int = 0
    transactions_failed: int = 0
    rollbacks: int = 0
    last_reconcile: dict[str, tuple[int, int]] = field(default_factory=dict)  # read, sent


class Controller:
    """The loop owner (module docstring).

    Parameters
    ----------
    state : RuntimeState
        The initial state (policy, placement, settings).
    drivers : mapping of str to SouthboundDriver
        By southbound kind (``openflow``, ``p4runtime``).
    telemetry, events
        :class:`controller.telemetry.Telemetry` and :class:`controller.telemetry.EventBus`
        (None: none).
    repair, reoptimise
        The two steps of link-event handling (:mod:`controller.runtime.placement`).
    mastership : Mastership
    executor : Executor, optional
        Where costly decisions run (a 2-thread pool when None).
    clock, wall
        Monotonic and wall-clock seconds.
    """

    def __init__(self, state: RuntimeState, drivers: Mapping[str, SouthboundDriver], *,
                 telemetry: Any = None, events: Any = None, repair: Repair = repair_moved,
                 reoptimise: Reoptimise | None = reoptimise_moves,
                 mastership: Mastership | None = None, executor: Executor | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, tick_s: float = 0.1) -> None:
        self.state = state
        self.drivers = dict(drivers)
        self.telemetry = telemetry
        self.events = events
        self.repair = repair
        self.reoptimise = reoptimise
        self.mastership: Mastership = mastership or SoleController()
        self.executor = executor or ThreadPoolExecutor(2, thread_name_prefix="aifabric-compute")
        self.clock = clock
        self.wall = wall
        self.tick_s = tick_s
        self.installed: dict[str, SwitchPlan] = {}
        self.meter = TrafficMeter()
        self.stats = ControllerStats()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._writer = asyncio.Lock()
        self._converge_due: str | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._demands: tuple[Any, dict[FlowDemand, float]] = (None, {})
        self._programmed: set[str] = set()
        # switches whose last change was refused: no periodic retry before (time, backoff s)
        self._backoff: dict[str, tuple[float, float]] = {}
        self.listeners: list[Callable[[Event, core.Step], None]] = []
        # the placement in force as a te placement (link ids): (state.placement it holds, value)
        self._te: tuple[Mapping[FlowDemand, Any], TePlacement] | None = None
        self._te_building: Mapping[FlowDemand, Any] | None = None
        #: called after every reconcile, converge and proposal (what the switches hold changed)
        self.after_write: list[Callable[[], None]] = []
        self._role_requests: dict[str, int] = {}

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the drivers (events flow in) and the clock."""
        self._loop = asyncio.get_running_loop()
        for d in self.drivers.values():
            await d.start(self.post)
        self._ticker = asyncio.create_task(self._tick_loop(), name="aifabric-tick")
        if self.telemetry is not None:
            self.telemetry.set_paths(dict(self.state.placement))

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for d in self.drivers.values():
            try:
                await d.stop()
            except Exception:  # noqa: BLE001 - stopping anyway
                LOG.exception("[controller] stopping a driver failed")
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            self.handle(Tick(self.clock()))

    def _spawn(self, coro: Any, name: str) -> None:
        assert self._loop is not None, "start() first"
        task = self._loop.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            LOG.error("[controller] %s failed: %s", task.get_name(), exc, exc_info=exc)

    # -- events ----------------------------------------------------------------------------------
    def post(self, ev: SouthboundEvent | Event) -> None:
        """Queue ``ev`` for the loop (callable from any thread)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            loop.call_soon(self.handle, ev)
        else:
            loop.call_soon_threadsafe(self.handle, ev)

    def handle(self, ev: Event) -> core.Step:
        """Fold ``ev`` into the state and carry out the effects (on the loop)."""
        now = self.clock()
        if isinstance(ev, CounterSample):
            self._record(ev)
        st = core.step(self.state, ev, now)
        self.state = st.state
        self._forget_unwritable()
        for fn in self.listeners:
            fn(ev, st)
        for fx in st.effects:
            self._effect(fx)
        self._prepare_te()
        return st

    def _forget_unwritable(self) -> None:
        """Forget what a switch we may no longer write holds: another master may change it
        meanwhile, so when we are master again a converge must not diff against the old
        record. The switch is left out of converges until the reconcile that every master
        assignment brings reads it back."""
        if not self.installed:
            return
        writable = self.state.writable()
        for name in [n for n in self.installed if n not in writable]:
            del self.installed[name]

    def _prepare_te(self) -> None:
        """Convert a new placement to its te form in the background, so the repair of the
        next link event starts from it (:func:`controller.runtime.placement.te_placement`)."""
        st = self.state
        pl = st.placement
        if not pl or self._loop is None or (self._te is not None and self._te[0] is pl) \
                or self._te_building is pl:
            return
        self._te_building = pl
        fut = self._loop.run_in_executor(self.executor, te_placement, st.fabric, pl,
                                         st.down_links)

        def done(f: asyncio.Future[TePlacement]) -> None:
            if self._te_building is pl:
                self._te_building = None
            if f.cancelled() or f.exception() is not None:
                return
            if self.state.placement is pl:
                self._te = (pl, f.result())
        fut.add_done_callback(done)

    def _record(self, s: CounterSample) -> None:
        tel = self.telemetry
        if s.ports is not None:
            self.meter.ports(s.switch, {c.port: c.tx_bytes for c in s.ports}, s.now_s)
            if tel is not None:
                tel.record_ports(s.switch, list(s.ports), s.now_s)
        if s.entries is not None:
            self.meter.entries(s.switch, {e.match: e.bytes for e in s.entries
                                          if e.priority == PRIO_PINNED}, s.now_s)
            if tel is not None:
                tel.record_entries(s.switch, list(s.entries), s.now_s)
        if s.queues is not None:
            self.meter.queues(s.switch, s.queues, s.now_s)
            if tel is not None:
                tel.record_queues(s.switch, list(s.queues), s.now_s)

    def tag(self, switch: str) -> str:
        """``[leaf1 dpid=0x3]`` (``[fabric NAME]`` for "")."""
        if not switch:
            return f"[fabric {self.state.fabric.name}]"
        sw = self.state.fabric.switch_by_name.get(switch)
        return f"[{switch} dpid={sw.dpid:#x}]" if sw else f"[{switch}]"

    def _effect(self, fx: Effect) -> None:
        if isinstance(fx, Log):
            LOG.log(getattr(logging, fx.level.upper()), "%s %s", self.tag(fx.switch), fx.text)
        elif isinstance(fx, Publish):
            self.publish(fx.kind, fx.message, **dict(fx.fields))
        elif isinstance(fx, SendPacket):
            self._spawn(self._send_packet(fx), f"packet-out {fx.switch}")
        elif isinstance(fx, Inject):
            self.post(fx.event)
        elif isinstance(fx, RequestCounters):
            self._spawn(self._counters(fx), f"counters {fx.switch}")
        elif isinstance(fx, TakeRole):
            self._spawn(self._take_role(fx), f"role {fx.switch}")
        elif isinstance(fx, Reconcile):
            self._spawn(self.reconcile(fx.switch, fx.session), f"reconcile {fx.switch}")
        elif isinstance(fx, Compute):
            self._compute(fx)
        elif isinstance(fx, Converge):
            self.request_converge(fx.reason)
        elif isinstance(fx, TelemetryPaths):
            if self.telemetry is not None:
                self.telemetry.set_paths(dict(fx.paths))
        elif isinstance(fx, TelemetryLinks):
            if self.telemetry is not None:
                for al in self.telemetry.links_changed(fx.down_links, dict(fx.lost), fx.now_s):
                    self._alert("alert-raised", al)
        elif isinstance(fx, AlertRound):
            self.alert_round(fx.now_s)
        elif isinstance(fx, ForgetCounters):
            self.meter.forget_switch(fx.switch)

    def publish(self, kind: str, message: str, **fields: object) -> None:
        if self.events is not None:
            self.events.publish(kind, message, **fields)

    def _alert(self, kind: str, al: Any) -> None:
        msg = al.message if kind == "alert-raised" else f"cleared: {al.message}"
        self.publish(kind, msg, switch=al.switch, alert=al.kind,
                     link=al.subject if al.kind.startswith("link") else "",
                     flow=al.subject if al.kind.startswith("pinned") else "")

    def alert_round(self, now_s: float) -> tuple[list[Any], list[Any]]:
        """Evaluate telemetry alerts at ``now_s``; log and publish each change. Returns
        (raised, cleared)."""
        if self.telemetry is None:
            return [], []
        raised, cleared = self.telemetry.evaluate(now_s)
        for al in raised:
            LOG.warning("%s alert %s: %s", self.tag(al.switch), al.kind, al.message)
            self._alert("alert-raised", al)
        for al in cleared:
            LOG.info("%s alert %s cleared: %s", self.tag(al.switch), al.kind, al.message)
            self._alert("alert-cleared", al)
        return raised, cleared

    # -- driver calls ------------------------------------------------------------------------------
    def driver_of(self, switch: str) -> SouthboundDriver:
        return self.drivers[self.state.kind_of(switch)]

    async def _send_packet(self, fx: SendPacket) -> None:
        if fx.switch not in self.writable():
            return  # a backup answers nothing (OpenFlow SLAVE / P4Runtime backup may not send)
        try:
            await self.driver_of(fx.switch).packet_out(fx.switch, fx.port, fx.data)
        except SouthboundError as exc:
            LOG.debug("%s packet-out on port %d not sent: %s", self.tag(fx.switch), fx.port, exc)

    async def _counters(self, fx: RequestCounters) -> None:
        try:
            await self.driver_of(fx.switch).request_counters(fx.switch, fx.kinds)
        except SouthboundError as exc:
            LOG.debug("%s counters not requested: %s", self.tag(fx.switch), exc)

    async def _take_role(self, fx: TakeRole) -> None:
        n = self._role_requests.get(fx.switch, 0) + 1
        self._role_requests[fx.switch] = n
        role, token = self.mastership.role_for(fx.switch)
        try:
            got = await self.driver_of(fx.switch).set_role(fx.switch, role, token)
        except RoleError as exc:
            if self._role_requests.get(fx.switch) == n:
                LOG.error("%s %s; staying backup", self.tag(fx.switch), exc)
            got = "backup"
        except SouthboundError as exc:
            LOG.warning("%s no role taken: %s", self.tag(fx.switch), exc)
            return
        if self._role_requests.get(fx.switch) != n:
            return  # a later request was sent: its answer decides
        if got != "backup" and role == "master":
            LOG.info("%s master (token %s)", self.tag(fx.switch), token)
        self.handle(RoleAssigned(fx.switch, "backup" if got == "backup" else "master",
                                 fx.session))

    def role_changed(self, switch: str) -> None:
        """The mastership of ``switch`` changed (on the loop): when we are no longer master,
        stop writing at once; then request the role we now hold from the switch."""
        s = self.state.session(switch)
        if not s.connected:
            return
        role, _ = self.mastership.role_for(switch)
        if role != "master" and s.role == "master":
            self.handle(RoleAssigned(switch, "backup", s.session))
        self._spawn(self._take_role(TakeRole(switch, s.session)), f"role {switch}")

    # -- computed decisions --------------------------------------------------------------------------
    def demands(self) -> dict[FlowDemand, float]:
        """Each pinned flow's demand (bit/s), cached per placement."""
        pl = self.state.placement
        if self._demands[0] is not pl:
            self._demands = (pl, pinned_demands_bps(self.state.fabric, pl))
        return self._demands[1]

    def _compute(self, fx: Compute) -> None:
        st = self.state
        if fx.kind == "reoptimise" and self.reoptimise is None:
            return
        loop = self._loop
        assert loop is not None, "start() first"
        if fx.kind == "rebalance":
            now = self.clock()
            raw = link_loads(st.fabric, self.meter, st.placement, self.demands(), st.down_links,
                             st.rebalance.changed_at_s, now,
                             standing_depth=st.settings.standing_depth)
            demands = self.demands()
            job: Callable[[], PlacementReady] = lambda: _rebalance_job(st, raw, demands, now)  # noqa: E731
        else:
            fn = self.repair if fx.kind == "repair" else self.reoptimise
            assert fn is not None
            te = self._te[1] if self._te is not None and self._te[0] is st.placement else None
            inp = PlacementInput(st.fabric, st.effective_policy, st.placement, st.down_links,
                                 te.index.down if te is not None else st.down_links,
                                 te)
            job = lambda: _placement_job(fx.kind, fx.generation, fn, inp)  # noqa: E731
        fut = loop.run_in_executor(self.executor, job)
        fut.add_done_callback(lambda f: self._computed(fx, f))

    def _computed(self, fx: Compute, fut: asyncio.Future[PlacementReady]) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            self.handle(PlacementReady(fx.kind, fx.generation, None, error=str(exc)))
            return
        ready = fut.result()
        dec = ready.outcome
        if fx.kind == "reoptimise" and isinstance(dec, PlacementDecision):
            self._spawn(self._reoptimised(ready.generation, dec), "re-optimisation")
            return
        self.handle(ready)
        if isinstance(dec, PlacementDecision) and dec.te is not None \
                and self.state.placement is ready.placement:
            self._te = (ready.placement, dec.te)

    async def _reoptimised(self, generation: int, dec: PlacementDecision) -> None:
        """Apply a re-optimisation make-before-break (module docstring): its moves in order,
        in batches that add at most the table headroom of entries to any switch
        (:func:`controller.runtime.placement.move_batches`), each batch adopted only if the
        state is still at the generation the previous one left, and converged (one
        transaction: downstream entries, then the divergence switch, deletes last) before the
        next."""
        pol = self.state.effective_policy
        headroom = pol.tables.headroom if pol.tables is not None else DEFAULT_HEADROOM
        batches = move_batches(dec.moves, headroom)
        LOG.info("%s re-optimisation: %s; applying in %d batch(es) make-before-break",
                 self.tag(""), dec.describe(), len(batches))
        expected, paths = generation, self.state.placement
        for i, batch in enumerate(batches, 1):
            async with self._writer:
                # what is in force first (the repair this follows may not be sent yet)
                pre = await self._converge_locked("before a re-optimisation batch")
                if self.state.generation != expected or (pre is not None and not pre.ok):
                    LOG.info("%s re-optimisation dropped after %d of %d batch(es): %s",
                             self.tag(""), i - 1, len(batches),
                             f"the state moved on (generation {self.state.generation}, not "
                             f"{expected})" if self.state.generation != expected
                             else "the switches did not take the plan in force")
                    return
                last = i == len(batches)
                paths = dec.paths if last else apply_moves(paths, batch)
                self.handle(PlacementReady("reoptimise", expected, paths))
                if self.state.placement is not paths:
                    return  # refused (the core said why)
                if last and dec.te is not None:
                    self._te = (paths, dec.te)
                res = await self._converge_locked(
                    f"re-optimisation batch {i}/{len(batches)}")
            self._written()
            if res is not None and not res.ok:
                LOG.warning("%s re-optimisation stopped after batch %d of %d: %s",
                            self.tag(""), i, len(batches), res.error)
                return
            expected = self.state.generation

    # -- writing ------------------------------------------------------------------------------------
    def writable(self) -> frozenset[str]:
        return self.state.writable()

    def _confirmed(self, switch: str, part: SwitchChanges) -> None:
        cur = self.installed.get(switch)
        if cur is None:
            return
        try:
            self.installed[switch] = part.apply_to(cur)
        except KeyError:
            del self.installed[switch]  # out of step: read back at the next reconcile

    async def _apply(self, switch: str, part: SwitchChanges) -> Any:
        role, _ = self.mastership.role_for(switch)
        if role == "backup":
            # asked right before the write: a replica whose lease ended sends nothing
            raise NotMaster(switch, f"no longer master of {switch}: nothing sent")
        drv = self.driver_of(switch)
        receipt = await drv.apply(switch, part, self.state.settings.confirm_timeout_s)
        n = sum(v for k, v in receipt.messages.items() if k != "bundle")
        LOG.info("%s sent %d messages (flows +%d ~%d -%d; %s)", self.tag(switch), n,
                 len(part.add_flows), len(part.modify_flows), len(part.delete_flows),
                 ", ".join(f"{k} {v}" for k, v in sorted(receipt.messages.items())))
        return receipt

    async def transaction(self, changes: Mapping[str, SwitchChanges]) -> TransactionResult:
        """Apply ``changes`` as one transaction (caller holds the writer lock)."""
        res = await apply_transaction(changes, self._apply, self.writable(), self._confirmed)
        self.stats.transactions += 1
        if not res.ok:
            self.stats.transactions_failed += 1
            self.stats.rollbacks += len(res.rolled_back)
            LOG.error("%s change refused, rolled back on %s%s: %s", self.tag(res.failed_switch),
                      ", ".join(res.rolled_back) or "no other switch",
                      f" (could not restore {', '.join(res.rollback_failed)}: read back when "
                      "they return)" if res.rollback_failed else "", res.error)
            for sw in res.rollback_failed:
                self.installed.pop(sw, None)
        return res

    def changes_to(self, target: Mapping[str, SwitchPlan],
                   skip: frozenset[str] = frozenset()) -> dict[str, SwitchChanges]:
        """Per writable switch with a known installed state: installed → ``target``."""
        out = {}
        for name in sorted(self.writable() - skip):
            cur = self.installed.get(name)
            want = target.get(name)
            if cur is None or want is None or cur == want:
                continue
            ch = diff_switch(cur, want)
            if not ch.empty:
                out[name] = ch
        return out

    def request_converge(self, reason: str) -> None:
        """Schedule one converge (requests while one is pending coalesce)."""
        if self._converge_due is not None:
            return
        self._converge_due = reason
        self._spawn(self._converge(), "converge")

    def _written(self) -> None:
        for fn in self.after_write:
            try:
                fn()
            except Exception:  # noqa: BLE001 - a listener's bug must not stop the writer
                LOG.exception("[controller] after-write listener failed")

    async def _converge(self) -> None:
        try:
            async with self._writer:
                reason, self._converge_due = self._converge_due or "", None
                await self._converge_locked(reason)
        finally:
            self._written()

    async def _converge_locked(self, reason: str) -> TransactionResult | None:
        """Send every writable switch the difference to the intended plan, as one transaction
        (caller holds the writer lock). Returns its result (None: nothing to send)."""
        try:
            target = intended_plan(self.state).switches
        except (PlanInvariantError, ValueError) as exc:
            LOG.error("%s intended plan invalid, nothing sent: %s", self.tag(""), exc)
            return None
        now = self.clock()
        waiting = frozenset(n for n, (t, _) in self._backoff.items() if t > now)
        changes = self.changes_to(target, waiting if reason == "retry" else frozenset())
        if not changes:
            return None
        res = await self.transaction(changes)
        self._note(res)
        if not res.ok:
            self.publish("apply-failed", f"{reason}: {res.error}; rolled back",
                         switch=res.failed_switch)
        return res

    async def reconcile(self, switch: str, session: int) -> None:
        """Read ``switch`` back and send only the difference to the intended plan."""
        try:
            await self._reconcile(switch, session)
        finally:
            self._written()

    async def _reconcile(self, switch: str, session: int) -> None:
        async with self._writer:
            s = self.state.session(switch)
            if not s.connected or s.session != session or s.role != "master":
                return
            drv = self.driver_of(switch)
            t0 = time.perf_counter()
            try:
                got = await drv.read_state(switch)
            except SouthboundError as exc:
                LOG.error("%s read-back failed: %s", self.tag(switch), exc)
                return
            self.installed[switch] = got.plan
            want = intended_plan(self.state).switches.get(switch)
            if want is None:
                sw = self.state.fabric.switch_by_name[switch]
                want = empty_plan(switch, sw.dpid)
            ch = diff_switch(got.plan, want)
            self.stats.reconciles += 1
            self.stats.reconcile_entries_sent += ch.count
            self.stats.last_reconcile[switch] = (len(got.plan.flows), ch.count)
            foreign = (f"; {got.foreign_entries} foreign entries and {got.foreign_groups} "
                       "foreign groups left alone"
                       if got.foreign_entries or got.foreign_groups else "")
            if ch.empty:
                LOG.info("%s reconciled: read %d entries of ours, all as intended: nothing "
                         "sent%s (%.1f ms)", self.tag(switch), len(got.plan.flows), foreign,
                         (time.perf_counter() - t0) * 1e3)
                self._note_programmed(switch)
                return
            res = await self.transaction({switch: ch})
            self._note(res)
            if res.ok:
                self._note_programmed(switch)
            verdict = "sent" if res.ok else "refused"
            LOG.info("%s reconciled: read %d entries of ours, %s +%d ~%d -%d%s (%.1f ms)",
                     self.tag(switch), len(got.plan.flows), verdict, len(ch.add_flows),
                     len(ch.modify_flows), len(ch.delete_flows), foreign,
                     (time.perf_counter() - t0) * 1e3)
            if not res.ok:
                self.publish("apply-failed", f"reconciling {switch}: {res.error}",
                             switch=switch)

    def _note(self, res: TransactionResult) -> None:
        """Back off periodic retries of a switch that refused a change (doubling, up to 60 s);
        forget it once a change of it is confirmed."""
        for sw in res.confirmed:
            self._backoff.pop(sw, None)
        if not res.ok and res.failed_switch:
            _, prev = self._backoff.get(res.failed_switch, (0.0, 0.0))
            wait = min(60.0, max(self.state.settings.retry_interval_s, 2 * prev))
            self._backoff[res.failed_switch] = (self.clock() + wait, wait)
            LOG.warning("%s will be retried in %.0f s (or at the next change)",
                        self.tag(res.failed_switch), wait)

    def _note_programmed(self, switch: str) -> None:
        if switch in self._programmed:
            return
        self._programmed.add(switch)
        n = len(self.state.fabric.switches)
        if len(self._programmed) == n:
            LOG.info("[controller] all %d switches programmed", n)

    async def propose(self, make: Callable[[RuntimeState], Event], *,
                      dry_run: bool = False) -> Proposal:
        """An operator decision: ``make(state)`` gives the event; validate the new intended
        plan whole, apply the difference as one transaction, and step the state only once every
        switch confirmed (module docstring). A dry run computes the changes only."""
        async with self._writer:
            old = self.state
            try:
                ev = make(old)
                st = core.step(old, ev, self.clock())
                target = intended_plan(st.state).switches
            except (PlanInvariantError, ValueError, KeyError) as exc:
                return Proposal(False, {}, None, str(exc), old)
            changes = self.changes_to(target)
            shown = dict(st.changes)
            for n, ch in changes.items():
                shown[n] = ch
            if dry_run:
                return Proposal(True, shown, None, "", old)
            res = await self.transaction(changes)
            if not res.ok:
                return Proposal(False, shown, res, res.error, self.state)
            self.handle(ev)
            if self.state.generation != st.state.generation:
                self.request_converge("facts changed during the change")
            self._written()
            return Proposal(True, shown, res, "", self.state)


def _placement_job(kind: Any, generation: int, fn: Callable[[PlacementInput], Any],
                   inp: PlacementInput) -> PlacementReady:
    dec = fn(inp)
    if dec is None:
        return PlacementReady(kind, generation, None)
    return PlacementReady(kind, generation, dec.paths, dec)


def _rebalance_job(st: RuntimeState, raw: Mapping[Any, Any], demands: Mapping[FlowDemand, float],
                   now: float) -> PlacementReady:
    out = rebalance_round(st, raw, demands, now)
    return PlacementReady("rebalance", out.generation, out.placement, out)


def counts_by_kind(sent: Mapping[tuple[str, str], int]) -> Counter[str]:
    """Messages by kind summed over switches."""
    c: Counter[str] = Counter()
    for (_, k), n in sent.items():
        c[k] += n
    return c
