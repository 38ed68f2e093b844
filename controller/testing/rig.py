"""A whole controller on fake switches, driven step by step: the runtime
(:class:`~controller.runtime.controller.Controller`) with the real OpenFlow driver, whose
connections are :class:`~.fakeswitch.FakeSwitch` es over the tables of a
:class:`~.fakeoftable.FakeFabric`, a clock the test sets, and a private event loop that
:meth:`Rig.settle` runs until nothing is left to do (tasks, executor jobs, queued callbacks).

Usage::

    rig = Rig(fabric, policy)
    rig.connect()                     # every switch connects; reconcile writes the plan
    rig.fail_link("leaf1", "spine1")  # both ends report the port down; repair; converge
    rig.ff.trace("h1", packet)        # where packets go now
    rig.close()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from controller.drivers.openflow.driver import OpenFlowDriver
from controller.model.topology import Fabric
from controller.policy.model import Policy
from controller.runtime.controller import Controller, Mastership
from controller.runtime.events import Tick
from controller.runtime.process import ControllerOptions, build_state
from controller.runtime.service import FabricService
from controller.testing.fakeoftable import FakeFabric
from controller.testing.fakeswitch import FakeSwitch, RoleArbiter


class _CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """A thread pool that knows how many jobs are unfinished (for :meth:`Rig.settle`)."""

    def __init__(self) -> None:
        super().__init__(2, thread_name_prefix="rig-compute")
        self.unfinished = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        self.unfinished += 1
        fut = super().submit(fn, *args, **kwargs)

        def done(_: Any) -> None:
            self.unfinished -= 1
        fut.add_done_callback(done)
        return fut


class Rig:
    """A controller on fake switches (module docstring).

    Parameters
    ----------
    fabric, policy
        The fabric and a validated policy (``document``: its text, for the policy digest).
    version : int
        OpenFlow version the fake switches speak (4: 1.3, 6: 1.5).
    options : dict
        :class:`~controller.runtime.process.ControllerOptions` fields (fast_failover,
        rebalance, stats_interval_s, metrics_listen to enable telemetry, ...).
    tables : mapping, optional
        Switch name → FakeOFTable keyword arguments (``ports``, ``max_flows``, ``hash_fields``).
    live : bool
        Run the loop in a thread of its own (for servers on it, e.g. the gRPC northbound);
        :meth:`run` and :meth:`settle` then wait for it.
    """

    def __init__(self, fabric: Fabric, policy: Policy, *, document: str = "",
                 source: str = "policy.yaml", version: int = 4,
                 options: Mapping[str, Any] | None = None,
                 tables: Mapping[str, Mapping[str, Any]] | None = None,
                 mastership: Mastership | None = None, telemetry: bool | Any = False,
                 events: Any = None, ff: FakeFabric | None = None,
                 live: bool = False) -> None:
        self.fabric = fabric
        self.now = 0.0
        self.loop = asyncio.new_event_loop()
        self.live = live
        self._thread: threading.Thread | None = None
        if live:
            self._thread = threading.Thread(target=self.loop.run_forever, name="rig-loop",
                                            daemon=True)
            self._thread.start()
        opts = ControllerOptions(**(options or {}))
        if telemetry:
            opts = ControllerOptions(**{**(options or {}), "grpc_listen": ("127.0.0.1", 0)})
        state = build_state(fabric, policy, document, source,
                            {s.name: "openflow" for s in fabric.switches}, opts,
                            frozenset({"openflow"}))
        self.driver = OpenFlowDriver({s.dpid: s.name for s in fabric.switches},
                                     clock=lambda: self.now)
        tel = None
        if telemetry:
            from controller.telemetry import EventBus, Telemetry

            tel = telemetry if not isinstance(telemetry, bool) else Telemetry(fabric)
            events = events or EventBus()
        self.executor = _CountingExecutor()
        self.ctl = Controller(state, {"openflow": self.driver}, telemetry=tel, events=events,
                              mastership=mastership, executor=self.executor,
                              clock=lambda: self.now, tick_s=3600.0)
        self.service = FabricService(self.ctl, sample_interval_s=1.0)
        if ff is None:
            ff = FakeFabric.empty(fabric)
            for name, kw in (tables or {}).items():
                t = ff.tables[name]
                for k, v in kw.items():
                    setattr(t, k, frozenset(v) if k == "ports" else v)
        self.ff = ff
        self.arbiters = {s.name: RoleArbiter() for s in fabric.switches}
        self.journal: list[tuple[str, list[Any]]] = []
        self.switches = {s.name: FakeSwitch(self.driver, s.dpid, ff.tables[s.name], version,
                                            arbiter=self.arbiters[s.name], journal=self.journal,
                                            name=s.name)
                         for s in fabric.switches}
        self.run(self.ctl.start())

    # -- the loop --------------------------------------------------------------------------------
    def _wait(self, coro: Any) -> Any:
        if self.live:
            return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)
        return self.loop.run_until_complete(coro)

    def run(self, coro: Any) -> Any:
        """Run ``coro`` on the rig's loop, then settle."""
        out = self._wait(coro)
        self.settle()
        return out

    def settle(self, rounds: int = 3) -> None:
        """Run the loop until no task, executor job or callback is left (``rounds`` quiet
        passes in a row)."""
        async def quiet() -> None:
            calm = 0
            for _ in range(20000):
                await asyncio.sleep(0.001)
                busy = self.executor.unfinished or self.ctl.busy
                calm = 0 if busy else calm + 1
                if calm >= rounds:
                    return
            raise TimeoutError("the controller never settled")

        self._wait(quiet())

    def tick(self, to_s: float) -> None:
        """Advance the clock to ``to_s`` and deliver one tick."""
        self.now = to_s
        self.loop.call_soon_threadsafe(self.ctl.handle, Tick(to_s))
        self.settle()

    # -- switches --------------------------------------------------------------------------------
    def connect(self, *names: str) -> None:
        for n in names or tuple(self.switches):
            self.switches[n].connect()
        self.settle()

    def disconnect(self, *names: str) -> None:
        for n in names or tuple(self.switches):
            self.switches[n].disconnect()
        self.settle()

    def fail_link(self, u: str, v: str, up: bool = False) -> None:
        """The link u–v goes down (or back up): both ports die, both ends report it."""
        self.ff.set_link(u, v, up)
        link = self.fabric.link_between(u, v)
        for node in (u, v):
            sw = self.switches.get(node)
            if sw is not None and not sw.closed:
                sw.port_status(link.port_of(node), up)
        self.settle()

    def sample(self, now_s: float, kinds: frozenset[str] = frozenset(
            {"ports", "entries", "queues"})) -> None:
        """Every connected switch is asked for its counters at ``now_s`` (the replies come from
        the simulator's counters, through the driver)."""
        self.now = now_s

        async def ask() -> None:
            for name in sorted(self.driver.connected()):
                await self.driver.request_counters(name, kinds)  # type: ignore[arg-type]

        self.run(ask())

    def writes(self) -> dict[str, int]:
        """Flow and group mods each switch received so far."""
        return {n: len(s.writes()) for n, s in self.switches.items()}

    def clear(self) -> None:
        for s in self.switches.values():
            s.received.clear()
        self.journal.clear()

    def close(self) -> None:
        self.service.close()
        self._wait(self.ctl.stop())
        if self._thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)
        self.loop.close()


def load(topology: str | Path, policy: str | Path) -> tuple[Fabric, Policy, str]:
    """(fabric, policy, policy text) from files."""
    from controller.model.topology import load_topology
    from controller.policy import load_policy

    fabric = load_topology(topology)
    return fabric, load_policy(policy, fabric), Path(policy).read_text()
