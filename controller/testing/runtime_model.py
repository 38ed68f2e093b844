"""A model-based test of the whole runtime (issue 22): the real :class:`~controller.runtime.
controller.Controller`, both real drivers and the northbound service on one fabric of fake
switches — leaves on P4Runtime (:class:`~.fakep4.FakeP4Switch`), spines on OpenFlow
(:class:`~.fakeswitch.FakeSwitch` over the flow-table simulator) — driven by random sequences of
what happens to a controller in production (``tests/test_runtime_model.py`` and
``bench/runtime_model.py`` draw them with hypothesis):

connect, disconnect, reconnect holding arbitrary entries (ours changed or missing, stale ones of
ours, foreign ones), mastership lost and regained (fencing tokens), a fabric port down and up, a
policy applied (valid or broken), collectives registered and unregistered, a switch refusing an
entry, a switch acknowledging late (within and past the confirmation deadline).

:meth:`ModelFabric.violations` checks, at a quiescent point (every effect carried out, the retry
timer past every backoff), the invariants of the one write path:

1. every switch this process may write holds exactly the intended entries;
2. foreign entries are untouched;
3. no entry was sent to a switch that already held it (an OpenFlow add or modify that changed
   nothing, a P4Runtime modify to the same value);
4. nothing was sent to a switch this process did not master (the fake switches record every
   write they receive with the role they had granted);
5. after a refusal every switch holds the last good state (1 with the intent the service put
   back).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller.drivers.openflow import encode
from controller.drivers.openflow.driver import OpenFlowDriver
from controller.drivers.p4runtime.decode import decode_entities, owned
from controller.drivers.p4runtime.driver import P4RuntimeDriver
from controller.drivers.p4runtime.entities import Entity, Exact, SwitchEntities, TableEntry
from controller.drivers.p4runtime.reconcile import Reconciliation
from controller.drivers.southbound import Role, SouthboundKind
from controller.model.topology import Fabric
from controller.northbound.model import (
    CollectiveRequest,
    FieldError,
    NotConfirmed,
    NotFound,
    Unavailable,
)
from controller.plan.model import SwitchPlan
from controller.policy.model import Policy
from controller.runtime.controller import Controller
from controller.runtime.events import Tick
from controller.runtime.process import ControllerOptions, build_state
from controller.runtime.service import FabricService
from controller.runtime.writes import target_of
from controller.testing.fakeoftable import FakeFabric, _Flow
from controller.testing.fakep4 import FakeP4Switch, factory
from controller.testing.fakeswitch import FakeSwitch, RoleArbiter

FOREIGN_COOKIE = 0xBEEF
FOREIGN_P4 = TableEntry("dscp_to_priority", (("dscp", Exact(26)),), 0, "set_priority",
                        (("priority", 3),))


class ModelMastership:
    """The test's coordination service: per switch, whether we are master, with a fencing token
    that grows with every change (as etcd terms do)."""

    def __init__(self, switches: list[str]) -> None:
        self.master = dict.fromkeys(switches, True)
        self.token = dict.fromkeys(switches, 1)

    def role_for(self, switch: str) -> tuple[Role, int | None]:
        return ("master" if self.master[switch] else "backup"), self.token[switch]

    def set(self, switch: str, master: bool) -> None:
        self.master[switch] = master
        self.token[switch] += 1


@dataclass
class Audit:
    """What the fake switches saw: writes that changed nothing, writes while not master."""

    redundant: list[str] = field(default_factory=list)
    unmastered: list[str] = field(default_factory=list)


class _Executor(concurrent.futures.ThreadPoolExecutor):
    """A thread pool that knows how many jobs are unfinished."""

    def __init__(self) -> None:
        super().__init__(2, thread_name_prefix="model-compute")
        self.unfinished = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        self.unfinished += 1
        fut = super().submit(fn, *args, **kwargs)

        def done(_: Any) -> None:
            self.unfinished -= 1
        fut.add_done_callback(done)
        return fut


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock jumps to the next timer whenever nothing is ready and
    ``busy()`` is false (no computation running in a thread): timeouts, reconnect delays and
    late acknowledgements keep their order and their deadlines, but the model does not wait
    for them in real time."""

    def __init__(self, busy: Callable[[], bool]) -> None:
        super().__init__()
        self.busy = busy
        self.skipped_s = 0.0

    def time(self) -> float:
        return super().time() + self.skipped_s

    def _run_once(self) -> None:
        heap: list[Any] = self._scheduled  # type: ignore[attr-defined]
        if not self._ready and heap and not self.busy():  # type: ignore[attr-defined]
            # asyncio's own timer heap (cancelled handles stay until it pops them)
            live = [h._when for h in heap if not h._cancelled]  # noqa: SLF001
            ahead = min(live) - self.time() if live else 0.0
            if ahead > 0:
                self.skipped_s += ahead
        super()._run_once()  # type: ignore[misc]


class ModelFabric:
    """The controller on fake switches, stepped by the model's actions (module docstring).

    Parameters
    ----------
    fabric : Fabric
        A leaf-spine fabric: its leaves speak P4Runtime, its spines OpenFlow.
    policy, document
        The policy it starts with and its text.
    confirm_timeout_s : float
        How long a switch has to acknowledge a write (a late one is read back).
    """

    def __init__(self, fabric: Fabric, policy: Policy, document: str,
                 confirm_timeout_s: float = 0.2) -> None:
        self.fabric = fabric
        self.now = 0.0
        self.executor = _Executor()
        self.loop = VirtualTimeLoop(self._computing)
        self.audit = Audit()
        self.trace: list[str] = []   # the actions so far (in settle's TimeoutError)
        self.p4_names = [s.name for s in fabric.switches if s.role == "leaf"]
        self.of_names = [s.name for s in fabric.switches if s.role != "leaf"]
        sb: dict[str, SouthboundKind] = {
            s.name: ("p4runtime" if s.name in self.p4_names else "openflow")
            for s in fabric.switches}
        opts = ControllerOptions(confirm_timeout_s=confirm_timeout_s)
        state = build_state(fabric, policy, document, "policy.yaml", sb, opts,
                            frozenset({"openflow"}))
        self.ff = FakeFabric.empty(fabric)
        self.mastership = ModelMastership([s.name for s in fabric.switches])
        self.p4 = {s.name: FakeP4Switch(s.name, s.dpid, SwitchEntities(
            s.name, s.dpid, frozenset({FOREIGN_P4}))) for s in fabric.switches
            if s.name in self.p4_names}
        for name, p4sw in self.p4.items():
            self._audit_p4(name, p4sw)
        self.p4drv = P4RuntimeDriver({n: ("fake", fabric.switch_by_name[n].dpid)
                                      for n in self.p4_names},
                                     client_factory=factory(self.p4), reconnect_s=0.3,
                                     clock=lambda: self.now)
        self.ofdrv = OpenFlowDriver({s.dpid: s.name for s in fabric.switches
                                     if s.name in self.of_names}, clock=lambda: self.now)
        self.ctl = Controller(state, {"openflow": self.ofdrv, "p4runtime": self.p4drv},
                              mastership=self.mastership, executor=self.executor,
                              clock=lambda: self.now, tick_s=3600.0)
        self.service = FabricService(self.ctl, confirm_timeout_s=2.0)
        self.arbiters = {n: RoleArbiter() for n in self.of_names}
        self.of = {n: FakeSwitch(self.ofdrv, fabric.switch_by_name[n].dpid, self.ff.tables[n],
                                 arbiter=self.arbiters[n], name=n) for n in self.of_names}
        for name, sw in self.of.items():
            self._audit_of(name, sw)
        self.foreign_of: dict[str, list[_Flow]] = {n: [] for n in self.of_names}
        self.loop.run_until_complete(self.ctl.start())
        self.settle()

    # -- the loop --------------------------------------------------------------------------------
    def _computing(self) -> bool:
        """A computation runs in a thread: the compute pool's, or the policy checker's (virtual
        time must not jump while a document is checked: how far it jumped would depend on how
        long the check took in real time, and a replayed example would run differently)."""
        service = getattr(self, "service", None)   # None while the constructor builds it
        return self.executor.unfinished > 0 or (
            service is not None and service.checker._waiting > 0)  # noqa: SLF001

    def settle(self) -> None:
        """Run the loop until nothing is left to do: no callback ready, no timer due within
        0.25 s (the tick timer is an hour away; the P4Runtime driver's retries of an unreachable
        switch, every 0.3 s, are not waited for: :meth:`_futile_retry`), no computation or
        transaction in flight."""
        loop: Any = self.loop

        async def quiet() -> None:
            calm = 0
            for _ in range(200000):
                due = [h.when() - loop.time() for h in loop._scheduled  # noqa: SLF001
                       if not h.cancelled() and not self._futile_retry(h)]
                soon = min((d for d in due if d < 0.25), default=None)
                busy = (self.executor.unfinished or self.ctl.busy or loop._ready  # noqa: SLF001
                        or self.service._queue or soon is not None)  # noqa: SLF001
                calm = 0 if busy else calm + 1
                if calm >= 3:
                    return
                await asyncio.sleep(max(0.0, min(soon, 0.002)) if soon is not None
                                    else 0.0005 if self.executor.unfinished else 0)
            raise TimeoutError(f"the controller never settled after {self.trace}: "
                               f"{self._busy_with()}")
        loop.run_until_complete(quiet())

    def _futile_retry(self, timer: Any) -> bool:
        """``timer`` only ends the P4Runtime driver's wait before it tries an unreachable
        switch again (every 0.3 s; it will fail again, changing nothing). Two unreachable
        switches retried out of phase always have a timer within 0.25 s: without this, a
        sequence that left two leaves down never settled."""
        fut = timer._args[0] if getattr(timer, "_args", None) else None  # noqa: SLF001
        waiters = getattr(fut, "_callbacks", None) or ()
        for cb, _ in waiters:
            task = getattr(cb, "__self__", None)
            coro = task.get_coro() if isinstance(task, asyncio.Task) else None
            frame = getattr(coro, "cr_frame", None)
            if frame is None or frame.f_code is not P4RuntimeDriver._run.__code__:
                return False
            sess = frame.f_locals.get("s")
            if sess is None or self.p4[sess.switch].reachable:
                return False
        return bool(waiters)

    def _busy_with(self) -> str:
        """What kept :meth:`settle` from a quiescent point (for its TimeoutError)."""
        loop: Any = self.loop
        st = self.ctl.state
        timers = sorted(round(h.when() - loop.time(), 3)
                        for h in loop._scheduled if not h.cancelled())[:6]  # noqa: SLF001
        waiting = [f"{getattr(t.get_coro(), '__qualname__', t.get_coro())}@"
                   f"{f.f_code.co_filename.rsplit('/', 1)[-1]}:{f.f_lineno}"
                   for t in asyncio.all_tasks(loop) for f in t.get_stack(limit=1)]
        return (f"computations {self.executor.unfinished}, tasks "
                f"{[repr(t)[:100] for t in self.ctl._tasks][:4]}, "  # noqa: SLF001
                f"transaction {st.txn!r:.400}, converge {st.converge!r}, ready "
                f"{[repr(h)[:80] for h in loop._ready][:4]}, "  # noqa: SLF001
                f"queued requests {len(self.service._queue)}, timers in {timers} s, tasks at "  # noqa: SLF001
                f"{sorted(waiting)}, "
                f"sessions {[(n, s.role, s.connected, s.reading) for n, s in st.switches.items()]}")

    def run(self, coro: Any) -> Any:
        out = self.loop.run_until_complete(coro)
        self.settle()
        return out

    def tick(self, dt_s: float) -> None:
        self.now += dt_s
        self.ctl.handle(Tick(self.now))
        self.settle()

    def close(self) -> None:
        self.service.close()   # its policy checker's worker process
        self.loop.run_until_complete(self.ctl.stop())
        self.executor.shutdown(wait=True)
        self.loop.close()

    # -- auditing what the switches receive --------------------------------------------------------
    def _audit_of(self, name: str, sw: FakeSwitch) -> None:
        handle = sw._handle  # noqa: SLF001 - the fake's own dispatcher, wrapped

        def audited(m: Any) -> None:
            kind = type(m).__name__
            writes = ("OFPFlowMod", "OFPGroupMod", "ONFBundleCtrlMsg", "OFPBundleCtrlMsg",
                      "ONFBundleAddMsg", "OFPBundleAddMsg")
            if kind in writes and not self.mastership.master[name]:
                self.audit.unmastered.append(f"{name}: {kind} while backup")
            inner = getattr(m, "message", None)
            if inner is not None and type(inner).__name__ == "OFPFlowMod":
                self._redundant_of(name, sw, inner)
            handle(m)
        sw._handle = audited  # type: ignore[method-assign]

    def _redundant_of(self, name: str, sw: FakeSwitch, fm: Any) -> None:
        o = sw.dialect.ofp
        if fm.command not in (o.OFPFC_ADD, o.OFPFC_MODIFY_STRICT):
            return
        from controller.testing.fakeoftable import _match_dict

        match = _match_dict(fm.match)
        for f in sw.table.flows:
            if (f.table_id, f.priority, f.match) == (fm.table_id, fm.priority, match) \
                    and f.cookie == fm.cookie and str(f.instructions) == str(fm.instructions):
                self.audit.redundant.append(f"{name}: {fm.command} of an entry it holds: "
                                            f"prio {fm.priority} {match}")
                return

    def _audit_p4(self, name: str, sw: FakeP4Switch) -> None:
        write = sw.write_phases

        async def audited(rec: Reconciliation) -> int:
            if not self.mastership.master[name]:
                self.audit.unmastered.append(f"{name}: P4Runtime write while backup")
            st = sw.state
            ents: list[Entity] = [*st.entries, *st.members, *st.groups, *st.multicast]
            have = {e.key: e for e in ents}
            for ph in rec.phases:
                for u in ph:
                    h = have.get(u.entity.key)
                    if u.op == "modify" and h is not None and h == u.entity:
                        self.audit.redundant.append(f"{name}: modify to the value it holds: "
                                                    f"{u.entity}")
            return await write(rec)
        sw.write_phases = audited  # type: ignore[method-assign]

    # -- what happens to switches --------------------------------------------------------------
    def connect(self, name: str) -> None:
        self.trace.append(f"connect({name!r})")
        if name in self.of:
            sw = self.of[name]
            if sw.closed or name not in self.ofdrv.connected():
                sw.connect()
        else:
            self.p4[name].reachable = True

            async def up() -> None:
                for _ in range(300):
                    if name in self.p4drv.connected():
                        return
                    await asyncio.sleep(0.005)
            self.loop.run_until_complete(up())
        self.settle()

    def disconnect(self, name: str) -> None:
        self.trace.append(f"disconnect({name!r})")
        if name in self.of:
            self.of[name].disconnect()
        else:
            p = self.p4[name]
            p.reachable = False
            p.drop()
        self.settle()

    def tamper(self, name: str, how: int) -> None:
        """Change what ``name`` holds behind our back — while it is disconnected, or while
        another master writes it (``how`` picks: drop one of our entries, add a foreign one,
        add a stale one of ours, change one of ours)."""
        self.trace.append(f"tamper({name!r}, {how!r})")
        if name in self.of:
            t = self.ff.tables[name]
            ours = [f for f in t.flows if f.cookie == encode.COOKIE]
            if how == 0 and ours:
                t.flows.remove(ours[len(ours) // 2])
            elif how == 1:
                f = _Flow(0, 7, {"eth_type": 0x0800, "ipv4_dst": f"10.99.0.{len(t.flows) % 250}"},
                          [], FOREIGN_COOKIE)
                t.flows.append(f)
                self.foreign_of[name].append(f)
            elif how == 2:
                t.flows.append(_Flow(0, 1234, {"eth_type": 0x0800, "ipv4_dst": "10.98.0.1"}, [],
                                     encode.COOKIE))
            elif ours:
                victim = ours[-1]
                victim.instructions = []
        else:
            p = self.p4[name]
            st = p.state
            mine = sorted(owned(st).entries, key=repr)
            if how == 0 and mine:
                p.state = SwitchEntities(st.switch, st.device_id, st.entries - {mine[0]},
                                         st.members, st.groups, st.multicast)
            elif how == 1:
                # another application's entry (dscp 32..61: never FOREIGN_P4's key)
                extra = TableEntry("dscp_to_priority",
                                   (("dscp", Exact(32 + len(st.entries) % 30)),), 0,
                                   "set_priority", (("priority", 1),))
                p.state = SwitchEntities(st.switch, st.device_id, st.entries | {extra},
                                         st.members, st.groups, st.multicast)

    def reconnect_holding(self, name: str, how: int) -> None:
        self.disconnect(name)
        self.tamper(name, how)
        self.connect(name)

    def mastership_change(self, name: str, master: bool) -> None:
        self.trace.append(f"mastership_change({name!r}, {master!r})")
        if self.mastership.master[name] == master:
            return
        self.mastership.set(name, master)
        self.ctl.role_changed(name)
        self.settle()

    def port(self, spine: str, leaf: str, up: bool) -> None:
        """A spine's port towards ``leaf`` goes down or up (the spine reports it)."""
        self.trace.append(f"port({spine!r}, {leaf!r}, {up!r})")
        sw = self.of[spine]
        if not sw.closed:
            sw.port_status(self.fabric.port_towards(spine, leaf), up)
        self.settle()

    def refuse_next(self, name: str) -> None:
        """The switch refuses the next entry it is sent (once)."""
        self.trace.append(f"refuse_next({name!r})")
        if name in self.of:
            self.of[name].refuse_next = "OFPFMFC_TABLE_FULL: refused by the model"
        else:
            p = self.p4[name]
            armed = [True]

            def refuse(u: Any) -> str | None:
                if armed[0] and u.op != "delete":
                    armed[0] = False
                    return "table full (refused by the model)"
                return None
            p.refuse = refuse

    def slow(self, name: str, delay_s: float) -> None:
        self.trace.append(f"slow({name!r}, {delay_s!r})")
        if name in self.of:
            self.of[name].commit_delay_s = delay_s

    def apply_policy(self, document: str, source: str) -> bool:
        self.trace.append(f"apply_policy({source!r})")
        res = self.run(self.service.apply_policy(document, source, False))
        return bool(res.ok)

    def register(self, req: CollectiveRequest) -> None:
        self.trace.append(f"register({req.name!r})")
        try:
            self.run(self.service.register(req))
        except (FieldError, Unavailable, NotConfirmed, NotFound):
            pass

    def unregister(self, name: str) -> None:
        self.trace.append(f"unregister({name!r})")
        try:
            self.run(self.service.unregister(name))
        except (NotFound, Unavailable, NotConfirmed):
            pass

    # -- the invariants ----------------------------------------------------------------------------
    def quiesce(self) -> None:
        """Clear refusals and delays, let every backoff pass and the retry timer run."""
        self.trace.append("quiesce")
        for sw in self.of.values():
            sw.refuse_next, sw.commit_delay_s = None, 0.0
        for p in self.p4.values():
            p.refuse = lambda u: None
        self.settle()
        for _ in range(2):
            self.tick(61.0)

    def holds(self, name: str) -> SwitchPlan:
        """What ``name`` holds of ours now, decoded as the driver would."""
        if name in self.of:
            sw = self.of[name]
            d = sw.dialect
            flows = d.flow_records(sw.flow_body(encode.COOKIE, encode.COOKIE_MASK))
            groups = d.group_records(sw.group_body())
            return encode.decode_state(name, sw.dpid, flows, groups, d).plan
        return decode_entities(owned(self.p4[name].state)).plan

    def violations(self) -> list[str]:
        """The invariants of the module docstring broken now (empty: none)."""
        out = list(self.audit.redundant) + list(self.audit.unmastered)
        st = self.ctl.state
        for name in itertools.chain(self.of_names, self.p4_names):
            connected = (not self.of[name].closed) if name in self.of else self.p4[name].reachable
            if not connected or not self.mastership.master[name]:
                continue
            s = st.session(name)
            if not s.connected or s.role != "master":
                out.append(f"{name}: connected and ours, but the runtime has it {s.role} "
                           f"(connected {s.connected})")
                continue
            want = target_of(st, name)
            got = self.holds(name)
            if got != want:
                extra = sorted(map(str, got.flows - want.flows))[:2]
                missing = sorted(map(str, want.flows - got.flows))[:2]
                out.append(f"{name}: holds {len(got.flows)} entries, {len(want.flows)} "
                           f"intended (extra {extra}, missing {missing})")
        for name, flows in self.foreign_of.items():
            table = self.ff.tables[name].flows
            for f in flows:
                if not any(g is f or (g.cookie == f.cookie and g.match == f.match)
                           for g in table):
                    out.append(f"{name}: foreign entry {f.match} gone")
        for name, p in self.p4.items():
            if FOREIGN_P4 not in p.state.entries:
                out.append(f"{name}: foreign P4 entry gone")
        return out
