"""Controller replicas of a cluster in one process, on fake switches, for tests: each replica is
the real runtime (:class:`~controller.runtime.controller.Controller`, the OpenFlow driver, the
:class:`~controller.runtime.service.FabricService`, :class:`~controller.runtime.cluster.
ClusterRuntime` on a real etcd), and each switch is one :class:`~.fakeoftable.FakeOFTable`
with one :class:`~.fakeswitch.RoleArbiter` that every replica's connection to it shares — as an
Open vSwitch bridge with one Controller row per replica: the arbiter grants roles by
``generation_id`` and the table refuses a SLAVE's writes.

Usage (inside ``asyncio.run``)::

    rs = ReplicaSet(fabric, policy, document, etcd.url)
    await rs.start("r1"); await rs.start("r2")
    await rs.until(rs.balanced)
    await rs.stop("r1")            # SIGTERM: steps down, revokes its lease
    await rs.cut("r2")             # loses etcd and its switches (a crash, seen from outside)
    await rs.close()

Every replica runs on the caller's event loop with the real clock (leases need it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from controller.cluster.lease import LeaseSettings
from controller.drivers.openflow.driver import OpenFlowDriver
from controller.model.topology import Fabric
from controller.policy.model import Policy
from controller.runtime import core
from controller.runtime.cluster import ClusterOptions, ClusterRuntime
from controller.runtime.controller import Controller
from controller.runtime.process import ControllerOptions, build_state
from controller.runtime.service import FabricService
from controller.telemetry.events import EventBus
from controller.testing.fakeoftable import FakeFabric
from controller.testing.fakeswitch import FakeSwitch, RoleArbiter

#: the etcd client calls :meth:`ReplicaSet.isolate` makes fail (and :meth:`ReplicaSet.rejoin`
#: restores)
_ETCD_CALLS = ("refresh_lease", "transaction", "get", "get_prefix", "put", "lease",
               "revoke_lease", "watch_prefix")

#: the tuned lease of the README (etcd with --election-timeout 500 ms grants 1 s)
TEST_LEASE = LeaseSettings(ttl_s=1, keepalive_interval_s=0.2, margin_s=0.1)


@dataclass
class Replica:
    """One replica: its runtime, service, cluster link and its connections to the switches."""

    name: str
    ctl: Controller
    driver: OpenFlowDriver
    service: FabricService
    cluster: ClusterRuntime
    switches: dict[str, FakeSwitch]
    alive: bool = True

    def masters(self) -> set[str]:
        """Switches this replica writes now (its state says master and its lease is valid)."""
        return {n for n in self.ctl.writable()
                if self.cluster.mastership.role_for(n)[0] == "master"}

    def sent(self) -> int:
        """Flow and group mods this replica's connections carried so far."""
        return sum(len(s.writes()) for s in self.switches.values())


@dataclass
class ReplicaSet:
    """Replicas of one fabric sharing fake switches (module docstring)."""

    fabric: Fabric
    policy: Policy
    document: str
    etcd_url: str
    lease: LeaseSettings = TEST_LEASE
    confirm_timeout_s: float = 10.0
    commit_timeout_s: float = 5.0
    options: dict[str, Any] = field(default_factory=dict)
    ff: FakeFabric | None = None
    replicas: dict[str, Replica] = field(default_factory=dict)
    arbiters: dict[str, RoleArbiter] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.ff is None:
            self.ff = FakeFabric.empty(self.fabric)
        self.arbiters = {s.name: RoleArbiter() for s in self.fabric.switches}

    async def start(self, name: str, *, connect: bool = True,
                    connect_wait_s: float = 5.0) -> Replica:
        """Start replica ``name`` as ``aifabric controller --cluster ... --replica name`` does;
        its switches connect (``connect``) before it claims its share."""
        assert self.ff is not None
        opts = ControllerOptions(**self.options)
        state = build_state(self.fabric, self.policy, self.document, "policy.yaml",
                            {s.name: "openflow" for s in self.fabric.switches}, opts,
                            frozenset({"openflow"}))
        copts = ClusterOptions(self.etcd_url, name, lease=self.lease,
                               confirm_timeout_s=self.confirm_timeout_s,
                               commit_timeout_s=self.commit_timeout_s,
                               connect_wait_s=connect_wait_s)
        policy = self.policy
        cluster = ClusterRuntime(copts, self.fabric, state.southbound,
                                 lambda doc, src: policy if doc == self.document
                                 else _parse(doc, src, self.fabric))
        since = await cluster.read_or_seed(state)
        state = core.step(state, cluster.resolve(since, state), time.monotonic()).state
        await cluster.observe()
        driver = OpenFlowDriver({s.dpid: s.name for s in self.fabric.switches})
        ctl = Controller(state, {"openflow": driver}, mastership=cluster.mastership,
                         events=EventBus(), tick_s=0.1, executor=ThreadPoolExecutor(2))
        cluster.attach(ctl)
        service = FabricService(ctl, cluster=cluster)
        await ctl.start()
        await service.trail.start()
        sws = {s.name: FakeSwitch(driver, s.dpid, self.ff.tables[s.name], 4,
                                  address=f"{name}:{s.name}", arbiter=self.arbiters[s.name],
                                  name=s.name)
               for s in self.fabric.switches}
        rep = Replica(name, ctl, driver, service, cluster, sws)
        self.replicas[name] = rep
        if connect:
            for sw in sws.values():
                sw.connect()
        await cluster.start(since)
        return rep

    async def stop(self, name: str) -> None:
        """A graceful stop (SIGTERM): step down, revoke the lease, close the connections."""
        rep = self.replicas[name]
        if not rep.alive:
            return
        rep.alive = False
        await rep.service.trail.stop()
        rep.service.close()
        await rep.cluster.stop()
        for sw in rep.switches.values():
            sw.close()
        await rep.ctl.stop()

    async def cut(self, name: str) -> None:
        """The replica dies as seen from outside: its switch connections drop and etcd stops
        hearing from it (its lease expires after the TTL; it never revokes it)."""
        rep = self.replicas[name]
        if not rep.alive:
            return
        rep.alive = False
        rep.service.trail.abandon()   # a dead process keeps no more records
        rep.service.close()           # nor its policy checker
        for sw in rep.switches.values():
            sw.close()
        await rep.cluster.client.close()   # keep-alives fail from now on
        await asyncio.sleep(0)
        for t in rep.cluster._tasks:  # noqa: SLF001 - the test harness stops it hard
            t.cancel()
        await rep.ctl.stop()
        svc = rep.cluster.service
        svc._running = False  # noqa: SLF001 - no stop(): a dead process revokes nothing
        for t in svc._tasks:  # noqa: SLF001
            t.cancel()
        lease = svc._lease  # noqa: SLF001
        if lease is not None and lease._task is not None:  # noqa: SLF001
            lease._task.cancel()  # noqa: SLF001
            if lease._timer is not None:  # noqa: SLF001
                lease._timer.cancel()  # noqa: SLF001

    def isolate(self, name: str) -> None:
        """Replica ``name`` can no longer reach etcd (every new call fails as a dead member's
        does); its switch connections stay: a partitioned or stalled master."""
        import aetcd

        client = self.replicas[name].cluster.client

        async def unreachable(*args: Any, **kw: Any) -> Any:
            raise aetcd.ConnectionFailedError("isolated by the test")

        for attr in _ETCD_CALLS:
            setattr(client, attr, unreachable)
        client.sync_keepalive = lambda lease_id: None  # type: ignore[method-assign]  # no answer

    def rejoin(self, name: str) -> None:
        """Undo :meth:`isolate`: replica ``name`` reaches etcd again (as a paused process that
        is resumed, or a healed partition)."""
        client = self.replicas[name].cluster.client
        for attr in (*_ETCD_CALLS, "sync_keepalive"):
            client.__dict__.pop(attr, None)

    async def close(self) -> None:
        for name in list(self.replicas):
            await self.stop(name)

    # -- what the switches and replicas say ----------------------------------------------------
    def live(self) -> list[Replica]:
        return [r for r in self.replicas.values() if r.alive]

    def masters(self) -> dict[str, list[str]]:
        """Switch → the live replicas that write it now (one each when all is well)."""
        out: dict[str, list[str]] = {s.name: [] for s in self.fabric.switches}
        for r in self.live():
            for n in r.masters():
                out[n].append(r.name)
        return out

    def switch_master(self, switch: str) -> str | None:
        """The replica whose connection the switch itself holds as master."""
        arb = self.arbiters[switch]
        for r in self.replicas.values():
            if arb.master is r.switches[switch]:
                return r.name
        return None

    def balanced(self) -> bool:
        """Every switch has exactly one live master, the switch agrees, and the loads of the
        live replicas differ by at most one."""
        m = self.masters()
        if any(len(v) != 1 for v in m.values()):
            return False
        if any(self.switch_master(s) != v[0] for s, v in m.items()):
            return False
        loads = [sum(1 for v in m.values() if v[0] == r.name) for r in self.live()]
        return bool(loads) and max(loads) - min(loads) <= 1

    async def until(self, pred: Callable[[], bool], timeout_s: float = 20.0,
                    what: str = "condition") -> float:
        """Wait until ``pred()``; returns the seconds it took (AssertionError on timeout)."""
        t0 = time.monotonic()
        while not pred():
            if time.monotonic() - t0 > timeout_s:
                raise AssertionError(f"{what} not reached within {timeout_s:g} s; masters "
                                     f"{self.masters()}")
            await asyncio.sleep(0.02)
        return time.monotonic() - t0

    def sent(self, names: Iterable[str] | None = None) -> int:
        return sum(r.sent() for n, r in self.replicas.items()
                   if names is None or n in set(names))


def _parse(document: str, source: str, fabric: Fabric) -> Policy:
    from controller.qos.validate import check_policy_for_targets
    from controller.yamlsrc import parse_document

    return check_policy_for_targets(parse_document(document, source), fabric,
                                    frozenset()).policy
