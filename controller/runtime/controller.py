"""The controller process's core loop: one asyncio event loop owns the
:class:`~controller.runtime.state.RuntimeState`, folds every event into it with
:func:`controller.runtime.core.step` and carries out the effects. It decides nothing: every
message a switch gets is an effect the core emitted, and every outcome comes back as an event.

* Drivers report on the loop through :meth:`Controller.post` (the OpenFlow driver hands os-ken's
  messages over through one queue; finsy runs on the loop); the northbound gRPC server runs on
  the same loop.
* A **tick** every ``tick_s`` drives the timers of the core (LLDP, counters, re-balancing,
  retries).
* **Effects that talk to switches** (:class:`~controller.runtime.events.TakeRole`,
  :class:`~controller.runtime.events.ReadBack`, :class:`~controller.runtime.events.Write`,
  packet-outs, counter requests) run as tasks (writes and read-backs a window at a time:
  :data:`WRITE_WINDOW` entries, :data:`READ_WINDOW` switches); their outcomes are posted back as
  :class:`~controller.runtime.events.RoleAssigned`, :class:`~controller.runtime.events.
  ReadBackDone` and :class:`~controller.runtime.events.WriteAnswered` events. Right before a
  write the mastership is asked again: a deposed master sends nothing (the write is answered
  ``lost``), and the switches refuse a deposed master's writes themselves (fencing tokens).
* **Decisions that cost** (a repair after a link event, a re-optimisation, a re-balance round,
  the te form of a new placement) run in an executor on a snapshot of the state; their results
  come back as events for the generation they were computed from, and the core drops them if
  the state moved on.

Mastership (which switches we may write) comes from a :class:`Mastership`: the only controller
(:class:`SoleController`, the default) writes everywhere without a role request; a fixed role
and ``generation_id`` (:class:`StaticMastership`) exercises the drivers' fencing; a replica of a
cluster asks etcd (:class:`controller.runtime.cluster.ClusterMastership`), whose changes come in
as :class:`~controller.runtime.events.MastershipChanged` (:meth:`Controller.role_changed`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol, assert_never

from controller.drivers.southbound import (
    ApplyError,
    ApplyTimeout,
    CounterSample,
    NotConnected,
    NotMaster,
    Role,
    RoleError,
    SouthboundDriver,
    SouthboundError,
    SouthboundEvent,
)
from controller.plan.model import PRIO_PINNED
from controller.runtime import core
from controller.runtime.collector import PauseMeter, freeze_heap
from controller.runtime.events import (
    AlertRound,
    Compute,
    ComputeTeForm,
    Effect,
    Event,
    ForgetCounters,
    Inject,
    Log,
    MastershipChanged,
    PlacementReady,
    Publish,
    ReadBack,
    ReadBackDone,
    RequestCounters,
    RoleAssigned,
    SendPacket,
    TakeRole,
    TeFormReady,
    TelemetryLinks,
    TelemetryPaths,
    Tick,
    Write,
    WriteAnswered,
    Written,
)
from controller.runtime.intent import pinned_demands
from controller.runtime.meter import TrafficMeter, link_loads
from controller.runtime.placement import (
    PlacementInput,
    Reoptimise,
    Repair,
    reoptimise_moves,
    repair_moved,
    te_placement,
)
from controller.runtime.rebalance import rebalance_round
from controller.runtime.state import RuntimeState
from controller.runtime.transaction import Transaction
from controller.telemetry import EventBus, Telemetry
from controller.telemetry.alerts import Alert

LOG = logging.getLogger("aifabric.runtime")

WRITE_WINDOW = 16_000
"""Entries being written at once (the messages of the writes in flight: one bundle or batch per
switch; a write larger than the window goes alone). A switch answers a bundle only after the
ones queued before it: Open vSwitch handles every bridge's OpenFlow in one thread, so 320
bundles of ~1,000 entries sent at once (a k = 16 fat-tree's cold start) were confirmed all
together at the end, and the switches whose bundle open waited longer than the confirmation
timeout failed ("no reply to the bundle open within 5 s"). With a window, a bundle waits for
at most ~16 such others (Open vSwitch commits ~3,000 entries a second per bridge on this
machine: bench/fabric_scale.py phase b), while the small bundles of a registration (a few
entries on each of a hundred switches) all go at once."""
WRITES_IN_FLIGHT_MIN = 16
"""Switches written at once however large their writes: a write weighs at most
``WRITE_WINDOW // WRITES_IN_FLIGHT_MIN`` entries (:func:`write_weight`). Open vSwitch reads at
most 50 messages of a connection per turn of its main loop (``ofproto/connmgr.c``,
``ofconn_run``: "Limit the number of iterations to avoid starving other tasks"), and a turn
costs more the more bridges it serves. At k = 32 (1,280 bridges, 8,193 to 16,402 entries per
switch) the entries-only window let two bundles in at a time and Open vSwitch took ~2,800
messages a second (``ovs-appctl coverage/show``, ``ofproto_recv_openflow``), sixteen at once
~23,500."""
LOOP_LATE_S = 0.5
"""A tick this late is logged (at most every 10 s): the loop was busy that long at once."""
READ_WINDOW = 32
"""Read-backs in flight at once (each switch dumps its entries: ~100 kB per switch at k = 16)."""


def write_weight(entries: int) -> int:
    """What a write of ``entries`` entries (one bundle or batch) takes of the write window
    (:data:`WRITE_WINDOW`, :data:`WRITES_IN_FLIGHT_MIN`): its messages, at most a
    sixteenth of the window."""
    return min(entries + 1, WRITE_WINDOW // WRITES_IN_FLIGHT_MIN)


class _Window:
    """A weighted semaphore: acquires of total weight up to ``capacity`` at once, in order of
    arrival; one heavier than the capacity goes when nothing else is in."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def acquire(self, weight: int) -> None:
        if not self._waiters and self._fits(weight):
            self.used += weight
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((weight, fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(weight)  # granted meanwhile: give it back
            elif (weight, fut) in self._waiters:
                self._waiters.remove((weight, fut))
            raise

    def _fits(self, weight: int) -> bool:
        return self.used == 0 or self.used + weight <= self.capacity

    def release(self, weight: int) -> None:
        self.used -= weight
        while self._waiters and self._fits(self._waiters[0][0]):
            w, fut = self._waiters.popleft()
            if fut.done():
                continue
            self.used += w
            fut.set_result(None)


class Mastership(Protocol):
    """Which role we hold on each switch, and the fencing token that proves it."""

    def role_for(self, switch: str) -> tuple[Role, int | None]:
        """(``master``/``backup``/``equal``, token: OpenFlow ``generation_id`` / P4Runtime
        ``election_id``; None: no token)."""
        ...


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


@dataclass
class ControllerStats:
    """Counters the metrics export (since start)."""

    reconciles: int = 0
    reconcile_entries_sent: int = 0
    transactions: int = 0
    transactions_failed: int = 0
    rollbacks: int = 0
    last_reconcile: dict[str, tuple[int, int]] = field(default_factory=dict)  # read, sent


WriteListener = Callable[[Transaction | None], None]
"""Called after every transaction (and every read-back): what the switches hold changed."""
StepListener = Callable[[Event, core.Step], None]


class Controller:
    """The loop owner (module docstring).

    Parameters
    ----------
    state : RuntimeState
        The initial state (policy, placement, settings).
    drivers : mapping of str to SouthboundDriver
        By southbound kind (``openflow``, ``p4runtime``).
    telemetry, events
        The counters' store and the event bus (None: none).
    repair, reoptimise
        The two steps of link-event handling (:mod:`controller.runtime.placement`).
    mastership : Mastership
    executor : Executor
        Where costly decisions run (the process creates it: only its edge makes threads).
    clock
        Monotonic seconds.
    """

    def __init__(self, state: RuntimeState, drivers: Mapping[str, SouthboundDriver], *,
                 telemetry: Telemetry | None = None, events: EventBus | None = None,
                 repair: Repair = repair_moved,
                 reoptimise: Reoptimise | None = reoptimise_moves,
                 mastership: Mastership | None = None, executor: Executor,
                 clock: Callable[[], float] = time.monotonic, tick_s: float = 0.1) -> None:
        self.state = state
        self.drivers = dict(drivers)
        self.telemetry = telemetry
        self.events = events
        self.repair = repair
        self.reoptimise = reoptimise
        self.mastership: Mastership = mastership or SoleController()
        self.executor = executor
        self.clock = clock
        self.tick_s = tick_s
        self.meter = TrafficMeter()
        self.stats = ControllerStats()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._writes = _Window(WRITE_WINDOW)
        self._reads = asyncio.Semaphore(READ_WINDOW)
        self._tasks: set[asyncio.Future[Any]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self.listeners: list[StepListener] = []
        #: called after every transaction and read-back (what the switches hold changed)
        self.after_write: list[WriteListener] = []

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

    @property
    def busy(self) -> bool:
        """Effects still running (tasks, computations) or a transaction in flight."""
        return bool(self._tasks) or self.state.txn is not None or bool(self.state.converge)

    async def _tick_loop(self) -> None:
        late_s, said = 0.0, self.clock()
        pauses = PauseMeter()
        try:
            while True:
                due = self.clock() + self.tick_s
                await asyncio.sleep(self.tick_s)
                now = self.clock()
                late_s = max(late_s, now - due)
                if now - said >= 10.0:
                    gc_s, gc_longest_s, gen = pauses.take()
                    if late_s >= LOOP_LATE_S:
                        # what a replica's lease keep-alive (same loop) suffers too
                        LOG.warning("[controller] the event loop ran up to %.2f s late in the "
                                    "last %.0f s (garbage collections: %.2f s in all, the "
                                    "longest %.2f s, generation %d)", late_s, now - said, gc_s,
                                    gc_longest_s, gen)
                    late_s, said = 0.0, now
                self.handle(Tick(now))
        finally:
            pauses.close()

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        assert self._loop is not None, "start() first"
        task = self._loop.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            LOG.error("[controller] %s failed: %s", getattr(task, "get_name", lambda: "?")(),
                      exc, exc_info=exc)

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
        before = self.state.placement
        st = core.step(self.state, ev, now)
        self.state = st.state
        if st.state.placement is not before or (isinstance(ev, ReadBackDone)
                                                 and ev.read is not None):
            # a placement adopted, or what a switch holds read back (~1,400 entries' objects
            # at k = 16): what survives is frozen, so a later collection traverses only what
            # is allocated since (controller.runtime.collector). Unfrozen read-backs made every
            # full collection traverse all of them: 0.3-0.45 s each, 2-4 s in every 10 s of a
            # replica at k = 16 while mastership moved.
            freeze_heap()
        for fn in self.listeners:
            fn(ev, st)
        for fx in st.effects:
            self._effect(fx)
        if isinstance(ev, ReadBackDone):
            self._written(None)
        return st

    def role_changed(self, switch: str) -> None:
        """The mastership of ``switch`` changed (on the loop): when we are no longer master,
        stop writing at once; then request the role we now hold from the switch."""
        role, _ = self.mastership.role_for(switch)
        self.handle(MastershipChanged(switch, role != "backup"))

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
        match fx:
            case Log():
                LOG.log(getattr(logging, fx.level.upper()), "%s %s", self.tag(fx.switch),
                        fx.text)
            case Publish():
                self.publish(fx.kind, fx.message, **dict(fx.fields))
            case SendPacket():
                self._spawn(self._send_packet(fx), f"packet-out {fx.switch}")
            case Inject():
                self.post(fx.event)
            case RequestCounters():
                self._spawn(self._counters(fx), f"counters {fx.switch}")
            case TakeRole():
                self._spawn(self._take_role(fx), f"role {fx.switch}")
            case ReadBack():
                self._spawn(self._read_back(fx), f"read-back {fx.switch}")
            case Write():
                self._spawn(self._write(fx), f"write {fx.switch}")
            case Written():
                self._transaction_done(fx)
            case Compute():
                self._compute(fx)
            case ComputeTeForm():
                self._te_form(fx)
            case TelemetryPaths():
                if self.telemetry is not None:
                    self.telemetry.set_paths(dict(fx.paths))
            case TelemetryLinks():
                if self.telemetry is not None:
                    for al in self.telemetry.links_changed(fx.down_links, dict(fx.lost),
                                                           fx.now_s):
                        self._alert("alert-raised", al)
            case AlertRound():
                self.alert_round(fx.now_s)
            case ForgetCounters():
                self.meter.forget_switch(fx.switch)
            case _:
                assert_never(fx)

    def publish(self, kind: str, message: str, **fields: Any) -> None:
        if self.events is not None:
            self.events.publish(kind, message, **fields)

    def _alert(self, kind: str, al: Alert) -> None:
        msg = al.message if kind == "alert-raised" else f"cleared: {al.message}"
        self.publish(kind, msg, switch=al.switch, alert=al.kind,
                     link=al.subject if al.kind.startswith("link") else "",
                     flow=al.subject if al.kind.startswith("pinned") else "")

    def alert_round(self, now_s: float) -> tuple[list[Alert], list[Alert]]:
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

    def writable(self) -> frozenset[str]:
        return self.state.writable()

    async def _send_packet(self, fx: SendPacket) -> None:
        s = self.state.switches.get(fx.switch)
        if s is None or not s.connected or s.role != "master":
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
        role, token = self.mastership.role_for(fx.switch)
        try:
            got = await self.driver_of(fx.switch).set_role(fx.switch, role, token)
        except RoleError as exc:
            if self.state.session(fx.switch).role_request == fx.request:
                # a stale token is routine while mastership moves (the switch saw a newer
                # term: fencing at work); anything else is not
                level = (logging.INFO if exc.stale and role == "backup" else
                         logging.WARNING if exc.stale else logging.ERROR)
                LOG.log(level, "%s %s; staying backup%s", self.tag(fx.switch), exc,
                        " (another controller holds a newer term)" if exc.stale else "")
            got = "backup"
        except SouthboundError as exc:
            LOG.warning("%s no role taken: %s", self.tag(fx.switch), exc)
            return
        if self.state.session(fx.switch).role_request != fx.request:
            return  # a later request was sent: its answer decides
        if got != "backup" and role == "master":
            LOG.info("%s master (token %s)", self.tag(fx.switch), token)
        self.handle(RoleAssigned(fx.switch, "backup" if got == "backup" else "master",
                                 fx.session, fx.request))

    async def _read_back(self, fx: ReadBack) -> None:
        async with self._reads:  # READ_WINDOW
            await self._read_back_now(fx)

    async def _read_back_now(self, fx: ReadBack) -> None:
        t0 = time.perf_counter()
        try:
            got = await self.driver_of(fx.switch).read_state(fx.switch)
        except SouthboundError as exc:
            self.handle(ReadBackDone(fx.switch, fx.session, None, str(exc)))
            return
        self.stats.reconciles += 1
        self.stats.last_reconcile[fx.switch] = (len(got.plan.flows), 0)
        self.handle(ReadBackDone(fx.switch, fx.session, got, "",
                                 (time.perf_counter() - t0) * 1e3))

    async def _write(self, fx: Write) -> None:
        weight = write_weight(fx.part.count)
        await self._writes.acquire(weight)  # WRITE_WINDOW
        try:
            await self._write_now(fx)
        finally:
            self._writes.release(weight)

    async def _write_now(self, fx: Write) -> None:
        role, _ = self.mastership.role_for(fx.switch)
        if role == "backup":
            # asked right before the write: a replica whose lease ended sends nothing
            self.handle(WriteAnswered(fx.txn, fx.switch, fx.session, "lost",
                                      error=f"no longer master of {fx.switch}: nothing sent"))
            return
        try:
            receipt = await self.driver_of(fx.switch).apply(
                fx.switch, fx.part, fx.held, self.state.settings.confirm_timeout_s)
        except ApplyError as exc:
            self.handle(WriteAnswered(fx.txn, fx.switch, fx.session,
                                      "refused" if exc.nothing_applied else "unknown",
                                      exc.entry, str(exc)))
            return
        except (NotMaster, NotConnected) as exc:
            self.handle(WriteAnswered(fx.txn, fx.switch, fx.session, "lost", error=str(exc)))
            return
        except (ApplyTimeout, SouthboundError) as exc:
            self.handle(WriteAnswered(fx.txn, fx.switch, fx.session, "unknown",
                                      error=str(exc)))
            return
        self.handle(WriteAnswered(fx.txn, fx.switch, fx.session, "done",
                                  messages=dict(receipt.messages),
                                  confirm_ms=receipt.confirm_ms))

    def _transaction_done(self, fx: Written) -> None:
        t = fx.txn
        self.stats.transactions += 1
        for name, read in fx.reconciled:
            n = sum(c.count for ph in t.phases for c in ph if c.switch == name)
            self.stats.reconcile_entries_sent += n
            self.stats.last_reconcile[name] = (read, n)
        if not t.ok:
            self.stats.transactions_failed += 1
            self.stats.rollbacks += len(t.rolled_back)
        self._written(t)

    def _written(self, t: Transaction | None) -> None:
        for fn in self.after_write:
            try:
                fn(t)
            except Exception:  # noqa: BLE001 - a listener's bug must not stop the writer
                LOG.exception("[controller] after-write listener failed")

    # -- computed decisions --------------------------------------------------------------------------
    def demands(self) -> dict[Any, float]:
        """Each pinned flow's demand (bit/s), once per generation."""
        return pinned_demands(self.state)

    def _offload(self, job: Callable[[], Event],
                 failed: Callable[[BaseException], Event | None]) -> None:
        """Run ``job`` in the executor; handle the event it returns (or ``failed(exc)``'s)."""
        loop = self._loop
        assert loop is not None, "start() first"
        fut = loop.run_in_executor(self.executor, job)
        self._tasks.add(fut)

        def done(f: asyncio.Future[Event]) -> None:
            self._tasks.discard(f)
            if f.cancelled():
                return
            exc = f.exception()
            ev = f.result() if exc is None else failed(exc)
            if ev is not None:
                self.handle(ev)
        fut.add_done_callback(done)

    def _te_form(self, fx: ComputeTeForm) -> None:
        st = self.state
        pl = fx.placement

        def failed(exc: BaseException) -> None:
            LOG.debug("[controller] te form not computed: %s", exc)
        self._offload(lambda: TeFormReady(pl, te_placement(st.fabric, pl, st.down_links)),
                      failed)

    def _compute(self, fx: Compute) -> None:
        st = self.state
        if fx.kind == "reoptimise" and self.reoptimise is None:
            return
        if fx.kind == "rebalance":
            now = self.clock()
            demands = self.demands()
            raw = link_loads(st.fabric, self.meter, st.placement, demands, st.down_links,
                             st.rebalance.changed_at_s, now,
                             standing_depth=st.settings.standing_depth)

            def rebalance_job() -> Event:
                out = rebalance_round(st, raw, demands, now)
                return PlacementReady("rebalance", out.generation, out.placement, out)
            self._offload(rebalance_job, lambda exc: PlacementReady(
                "rebalance", st.generation, None, error=str(exc)))
            return
        fn = self.repair if fx.kind == "repair" else self.reoptimise
        assert fn is not None
        form = st.te_form
        te = form.te if form is not None and form.placement is st.placement else None
        inp = PlacementInput(st.fabric, st.effective_policy, st.placement, st.down_links,
                             te.index.down if te is not None else st.down_links, te)
        kind, gen = fx.kind, fx.generation

        def placement_job() -> Event:
            dec = fn(inp)
            if dec is None:
                return PlacementReady(kind, gen, None)
            return PlacementReady(kind, gen, dec.paths, dec)
        self._offload(placement_job,
                      lambda exc: PlacementReady(kind, gen, None, error=str(exc)))
