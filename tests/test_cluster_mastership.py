"""Per-switch mastership on a real 3-member etcd cluster (tuned timings: 1 s leases).

In-process replicas for balance, stop and a stalled keep-alive; replica processes
(``controller.testing.replica``) for SIGKILL, SIGTERM and SIGSTOP. Waits are bounded generously
(seconds); no test asserts how fast anything was (bench/ha_failover.py measures that).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from dataclasses import replace

import aetcd
import pytest

from controller.cluster.etcd import EtcdClient, EtcdSettings
from controller.cluster.keys import ClusterKeys
from controller.cluster.lease import LeaseSettings
from controller.cluster.mastership import MastershipEvent, MastershipService, Role
from controller.testing.replica import ReplicaProcess, masters_from_events

SWITCHES = [f"s{i}" for i in range(1, 7)]
LEASE = LeaseSettings(ttl_s=1, keepalive_interval_s=0.2, margin_s=0.1)


async def _until(pred: Callable[[], bool], timeout_s: float = 15.0) -> None:
    end = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


def _until_sync(pred: Callable[[], bool], timeout_s: float = 15.0) -> None:
    end = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


class Replica:
    """An in-process replica and every event it emitted."""

    def __init__(self, cluster, name: str, fabric: str = "t", lease: LeaseSettings = LEASE):
        self.client = EtcdClient(EtcdSettings.from_url(cluster.url, rpc_timeout_s=0.5))
        self.svc = MastershipService(self.client, name, SWITCHES, keys=ClusterKeys(fabric),
                                     lease=lease, advertise={"northbound": f"{name}.example:50051"})
        self.events: list[MastershipEvent] = []
        self.svc.add_listener(self.events.append)

    def mastered(self) -> set[str]:
        return {s for s in SWITCHES if self.svc.term(s) is not None}

    async def close(self) -> None:
        await self.svc.stop()
        await self.client.close()


def _exclusive_and_complete(replicas: list[Replica]) -> bool:
    held = [r.mastered() for r in replicas]
    union = set().union(*held)
    return union == set(SWITCHES) and sum(len(h) for h in held) == len(SWITCHES)


def _balanced(replicas: list[Replica]) -> bool:
    loads = [len(r.mastered()) for r in replicas]
    return _exclusive_and_complete(replicas) and max(loads) - min(loads) <= 1


def test_balance_with_one_two_three_replicas_and_stop(etcd_cluster):
    async def go() -> None:
        reps: list[Replica] = []
        for i, expected in enumerate(([6], [3, 3], [2, 2, 2])):
            reps.append(Replica(etcd_cluster, f"r{i}"))
            await reps[-1].svc.start()
            await _until(lambda: _balanced(reps))
            assert sorted(len(r.mastered()) for r in reps) == expected
        # the view every replica has agrees with what each holds, and tokens are etcd revisions
        view = reps[0].svc.masters()
        for r in reps:
            for s in r.mastered():
                term = r.svc.term(s)
                assert term is not None and view[s] == term and term.replica == r.svc.replica
        assert reps[0].svc.replicas() == ("r0", "r1", "r2")
        assert reps[0].svc.replica_info("r2") == {"northbound": "r2.example:50051"}
        # stop r0: it revokes its lease; its switches go to r1 and r2 with higher tokens
        gone = reps[0]
        old_terms = {s: gone.svc.term(s) for s in gone.mastered()}
        await gone.close()
        assert [e.role for e in gone.events[-len(SWITCHES):]] == [Role.NONE] * len(SWITCHES)
        assert gone.svc.role("s1") is Role.NONE
        rest = reps[1:]
        await _until(lambda: _balanced(rest))
        for s, t in old_terms.items():
            new = next(r.svc.term(s) for r in rest if s in r.mastered())
            assert new is not None and t is not None and new.token > t.token
        for r in rest:
            await r.close()

    asyncio.run(go())


def test_a_switch_being_written_moves_to_a_new_replica_after_the_write(etcd_cluster):
    """Make before break: a replica joining takes its share, but not a switch the current
    master is writing (a switch taken over in the middle of a write refuses the rest and the
    whole write is rolled back); it moves once the write ends (``kick``)."""
    async def go() -> None:
        first = Replica(etcd_cluster, "r0", fabric="hold")
        writing = {"s1", "s2", "s3", "s4", "s5"}   # all but s6
        first.svc.hold_releases(lambda sw: sw in writing)
        await first.svc.start()
        await _until(lambda: len(first.mastered()) == 6)
        second = Replica(etcd_cluster, "r1", fabric="hold")
        await second.svc.start()
        # of its share (three) only what is not being written moves; the rest stays
        await _until(lambda: second.svc.replicas() == ("r0", "r1"))
        await asyncio.sleep(1.0)
        assert _exclusive_and_complete([first, second])
        assert writing <= first.mastered() and second.mastered() <= {"s6"}
        writing.clear()                               # the write ended
        first.svc.kick()
        await _until(lambda: _balanced([first, second]))
        for r in (first, second):
            await r.close()

    asyncio.run(go())


@pytest.mark.parametrize("sender", ["thread", "loop"])
def test_stalled_keepalive_steps_down_before_the_switch_moves(etcd_cluster, sender):
    """A replica that stops sending keep-alives (its event loop otherwise alive) suspends its
    mastership at its own deadline, before etcd expires the lease and another replica claims;
    keep-alives from their thread (the default) or from the event loop (``loop_stall_s`` None)."""

    async def go() -> None:
        lease_settings = LEASE if sender == "thread" else replace(LEASE, loop_stall_s=None)
        a = Replica(etcd_cluster, "a", lease=lease_settings)
        b = Replica(etcd_cluster, "b", lease=lease_settings)
        await a.svc.start()
        await b.svc.start()
        await _until(lambda: _balanced([a, b]))
        held = {s: a.svc.term(s) for s in a.mastered()}
        lost_at: dict[str, float] = {}
        won_at: dict[str, tuple[float, int]] = {}
        a.svc.add_listener(lambda e: lost_at.setdefault(e.switch, time.monotonic())
                           if e.role is not Role.MASTER and e.switch in held else None)
        b.svc.add_listener(lambda e: won_at.setdefault(e.switch, (time.monotonic(), e.term.token))
                           if e.role is Role.MASTER and e.term is not None else None)
        lease = a.svc._lease  # noqa: SLF001 (the test stalls its keep-alive on purpose)
        assert lease is not None
        if sender == "thread":
            assert lease._keeper is not None  # noqa: SLF001
            lease._keeper.stop.set()  # noqa: SLF001 (the keep-alive thread stops sending)
        else:
            assert lease._keeper is None and lease._task is not None  # noqa: SLF001
            lease._task.cancel()  # noqa: SLF001 (the keep-alive task stops)
        await _until(lambda: set(won_at) >= set(held))
        for s, term in held.items():
            assert term is not None
            assert lost_at[s] < won_at[s][0]            # stepped down before the other took over
            assert won_at[s][1] > term.token            # and the new token is higher
            assert a.svc.term(s) is None
        await a.close()
        await b.close()

    asyncio.run(go())


def test_a_busy_event_loop_keeps_its_lease(etcd_cluster):
    """Keep-alives go from a thread (controller/cluster/lease.py): an event loop busy for 2.5 s
    (2.5 TTLs) keeps every lease and mastership; from the loop both replicas' leases ended."""

    async def go() -> None:
        a, b = Replica(etcd_cluster, "a"), Replica(etcd_cluster, "b")
        await a.svc.start()
        await b.svc.start()
        await _until(lambda: _balanced([a, b]))
        before = {s: (r.svc.replica, r.svc.term(s)) for r in (a, b) for s in r.mastered()}
        seen = len(a.events) + len(b.events)
        time.sleep(2.5)   # the loop (both replicas') runs nothing
        await asyncio.sleep(1.0)
        after = {s: (r.svc.replica, r.svc.term(s)) for r in (a, b) for s in r.mastered()}
        assert after == before
        assert len(a.events) + len(b.events) == seen, (a.events[-3:], b.events[-3:])  # no step-down
        await a.close()
        await b.close()

    asyncio.run(go())


def test_the_keepalive_thread_stops_when_the_event_loop_stops_marking(etcd_cluster):
    """A wedged loop (its marker task gone) loses the lease: ``loop_stall_s`` + TTL."""

    async def go() -> None:
        a = Replica(etcd_cluster, "a", lease=LeaseSettings(ttl_s=1, keepalive_interval_s=0.2,
                                                             margin_s=0.1, loop_stall_s=0.5))
        await a.svc.start()
        await _until(lambda: len(a.mastered()) == len(SWITCHES))
        lease = a.svc._lease  # noqa: SLF001
        assert lease is not None and lease._task is not None  # noqa: SLF001
        lease._task.cancel()  # noqa: SLF001 (the loop stops marking itself alive)
        await _until(lambda: a.mastered() == set(), timeout_s=5.0)
        await a.close()

    asyncio.run(go())


def test_a_release_whose_delete_failed_is_not_left_without_a_master(etcd_cluster):
    """A release steps down first and deletes the key second; when the delete fails (a call
    timeout under load) the key stays with the releasing replica's lease. The next round deletes
    it (or adopts it again), so the other replica gets its share: at k = 16, 53 switches were
    left with a key nobody acted on and no master at all."""

    async def go() -> None:
        a = Replica(etcd_cluster, "a")
        await a.svc.start()
        await _until(lambda: len(a.mastered()) == len(SWITCHES))
        real = a.client.transaction
        failed: list[int] = []

        async def flaky(*args, **kw):
            if kw.get("compare") == [] and not failed:   # the first release's deletes
                failed.append(1)
                raise aetcd.ConnectionTimeoutError("injected: the answer did not come")
            return await real(*args, **kw)

        a.client.transaction = flaky
        b = Replica(etcd_cluster, "b")
        await b.svc.start()
        await _until(lambda: _balanced([a, b]), timeout_s=10.0)
        assert failed == [1]
        await a.close()
        await b.close()

    asyncio.run(go())


def test_events_iterator(etcd_cluster):
    async def go() -> None:
        r = Replica(etcd_cluster, "solo")
        seen: list[MastershipEvent] = []

        async def collect() -> None:
            async for ev in r.svc.events():
                seen.append(ev)
                if sum(1 for e in seen if e.role is Role.MASTER) == len(SWITCHES):
                    return

        task = asyncio.create_task(collect())
        await asyncio.sleep(0)
        await r.svc.start()
        await asyncio.wait_for(task, 10)
        masters = [e for e in seen if e.role is Role.MASTER]
        assert sorted(e.switch for e in masters) == SWITCHES
        assert all(e.term is not None and e.term.replica == "solo" for e in masters)
        assert r.svc.backup_election_id == r.svc.lease_id > 0
        await r.close()

    asyncio.run(go())


# -- replicas as processes ------------------------------------------------------------------------
ARGS = ["--ttl-s", "1", "--keepalive-interval-s", "0.2", "--margin-s", "0.1",
        "--write-interval-s", "0.02"]


@pytest.fixture
def three_replicas(etcd_cluster):
    procs = {f"r{i}": ReplicaProcess(etcd_cluster.url, f"r{i}", SWITCHES, ARGS) for i in range(3)}
    try:
        for p in procs.values():
            p.wait_ready()
        yield etcd_cluster, procs
    finally:
        for p in procs.values():
            p.stop()


def _lines(procs) -> list[dict]:
    return [x for p in procs.values() for x in p.snapshot()]


def _settled(procs, expect: int = 3) -> bool:
    own = masters_from_events(_lines(procs))
    loads = [sum(1 for r, _, _ in own.values() if r == name) for name in procs]
    return set(own) == set(SWITCHES) and max(loads) - min(loads) <= 1 and \
        len([x for x in loads if x]) == min(expect, len(SWITCHES))


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_or_stopped_replica_loses_its_switches(three_replicas, sig):
    _, procs = three_replicas
    _until_sync(lambda: _settled(procs))
    own = masters_from_events(_lines(procs))
    victim = own["s1"][0]
    held = {s: tok for s, (r, tok, _) in own.items() if r == victim}
    procs[victim].signal(sig)
    alive = {k: v for k, v in procs.items() if k != victim}
    _until_sync(lambda: _settled(alive, expect=2))
    after = masters_from_events(_lines(alive))
    for s, tok in held.items():
        assert after[s][0] != victim and after[s][1] > tok
    if sig == signal.SIGTERM:
        assert procs[victim].proc.wait(timeout=10) == 0
        assert any(x.get("stopped") for x in procs[victim].snapshot())


def test_paused_replica_is_fenced_and_writes_nothing_after_resuming(three_replicas):
    _, procs = three_replicas
    _until_sync(lambda: _settled(procs))
    own = masters_from_events(_lines(procs))
    victim = own["s1"][0]
    held = {s: tok for s, (r, tok, _) in own.items() if r == victim}
    procs[victim].signal(signal.SIGSTOP)
    _until_sync(lambda: all(masters_from_events(_lines(procs)).get(s, (victim,))[0] != victim
                            for s in held))
    new = masters_from_events(_lines(procs))
    assert all(new[s][1] > tok for s, tok in held.items())    # the new terms fence the old
    t_cont = procs[victim].signal(signal.SIGCONT)
    _until_sync(lambda: _settled(procs))                        # it comes back as a replica
    zombie = [x for x in procs[victim].snapshot() if x["t"] >= t_cont]
    # it wrote nothing with its old terms after resuming, and its first word was a step-down
    assert not [x for x in zombie if "write" in x and x["token"] == held.get(x["write"])]
    first = next(x for x in zombie if "switch" in x)
    assert first["role"] == "backup" and first["reason"].startswith("lease-")


def test_one_etcd_member_killed_mastership_still_works(three_replicas):
    cluster, procs = three_replicas
    _until_sync(lambda: _settled(procs))
    cluster.kill_member(cluster.leader_index() or 0)
    time.sleep(3)   # let the etcd election and any lease suspension play out (3 TTLs)
    # every switch has a master again (a replica whose keep-alives stalled during the etcd
    # election resumes its lease), and a replica that leaves is still replaced
    _until_sync(lambda: _settled(procs))
    own = masters_from_events(_lines(procs))
    victim = own["s1"][0]
    procs[victim].signal(signal.SIGTERM)
    alive = {k: v for k, v in procs.items() if k != victim}
    _until_sync(lambda: _settled(alive, expect=2))
