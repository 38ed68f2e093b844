"""The failure detector among replicas (controller/cluster/detector.py).

The suspicion rule is pure: a peer is suspected once this replica's *own* heartbeats kept arriving
(gaps of at most ``stall_s``) for ``window_s`` since the peer's last heartbeat; a stall of etcd
(nobody's heartbeats arrive, e.g. a leader election) suspects nobody; and nobody is ever suspected
sooner than ``window_s`` after its last heartbeat arrived (the bound self-fencing rests on: module
docstring of controller/cluster/detector.py). The lease half of self-fencing: a replica stops
acting ``window - margin`` after its last acknowledged heartbeat, and resumes with the same lease
when one is acknowledged again.

With processes on a real 3-member etcd: a SIGSTOPped master's switches move although its lease
(10 s here) is far from expiring, because a peer revoked it; and the paused replica, resumed while
it still believes its lease valid, writes nothing with its old terms (no test asserts how fast:
bench/ha_failover.py and the ha_failover lab measure that).
"""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from controller.cluster.detector import DetectorSettings, SuspicionRule
from controller.cluster.keys import ClusterKeys
from controller.cluster.lease import LeaseSettings, LeaseState, ReplicaLease
from controller.testing.replica import ReplicaProcess, masters_from_events

H, W = 0.1, 0.4


def _rule() -> SuspicionRule:
    s = DetectorSettings(window_s=W, heartbeat_interval_s=H)
    return SuspicionRule(s.window_s, s.stall_s)


def test_settings_default_stall_is_two_heartbeats_and_bad_values_are_refused():
    assert DetectorSettings(window_s=0.4, heartbeat_interval_s=0.1).stall_s == pytest.approx(0.2)
    assert DetectorSettings.from_window_ms(300, 50) == DetectorSettings(0.3, 0.05)
    assert DetectorSettings.from_window_ms(5000, 100).startup_grace_s == 5.0
    with pytest.raises(ValueError, match="startup_grace_s"):
        DetectorSettings(window_s=3.0, heartbeat_interval_s=0.1, startup_grace_s=2.0)
    with pytest.raises(ValueError, match="heartbeat_interval_s"):
        DetectorSettings(window_s=0.1, heartbeat_interval_s=0.1)
    with pytest.raises(ValueError, match="stall_s"):
        DetectorSettings(window_s=0.4, heartbeat_interval_s=0.1, stall_s=0.5)


def test_peer_suspected_after_window_of_own_progress():
    r = SuspicionRule(window_s=0.5, stall_s=0.25)   # binary fractions: exact sums
    r.own(-0.0625)
    r.peer("b", 0.0)
    suspected_at = None
    for i in range(1, 10):
        t = i * 0.125
        if r.own(t) and suspected_at is None:
            suspected_at = t
        if i == 2:
            assert r.own(t) == []   # a repeated own beat at the same instant adds nothing
    assert suspected_at == 0.5
    assert r.suspects() == ["b"]


def test_peer_beating_is_never_suspected():
    r = _rule()
    for i in range(1, 50):
        r.peer("b", i * H - 0.05)
        assert r.own(i * H) == []


def test_nobody_suspected_while_own_writes_stall():
    """An etcd leader election: nothing commits for 2 s, then our beats and the peer's come back.
    The stall is no evidence: the first own beat after it adds nothing."""
    r = _rule()
    r.peer("b", 0.0)
    assert r.own(0.1) == []
    assert r.own(2.1) == []           # first own beat after a 2 s stall
    r.peer("b", 2.15)                 # the peer's beat lands right after ours
    for t in (2.2, 2.3, 2.4, 2.5):
        assert r.own(t) == []
        r.peer("b", t + 0.05)


def test_progress_interrupted_by_stalls_accumulates_only_the_progress():
    r = _rule()
    r.own(-0.05)
    r.peer("b", 0.0)
    for t in (0.1, 0.2, 0.3):         # 0.3 s of progress
        r.own(t)
    assert r.own(1.3) == []           # stall: not counted
    assert r.own(1.35) == []          # 0.35 s
    assert r.own(1.45) == ["b"]       # 0.45 s >= W


def test_never_suspected_sooner_than_window_after_its_last_beat():
    """The invariant self-fencing rests on, over many irregular own-beat sequences."""
    import random

    rnd = random.Random(14)
    for _ in range(200):
        r = _rule()
        seen = rnd.uniform(0, 1)
        t = seen - rnd.uniform(0, H)
        r.own(t)
        r.peer("b", seen)
        while t < seen + 3:
            t += rnd.choice([0.0, 0.01, H / 2, H, 1.5 * H, 2 * H, 3 * H])
            if "b" in r.own(t):
                assert t - seen >= W - 1e-9
                break


def test_a_starting_peer_gets_the_startup_grace_then_the_window():
    """DetectorSettings.startup_grace_s: while a peer's heartbeats span less than the grace (it
    is starting), it needs the grace of own progress to be suspected; afterwards the window."""
    r = SuspicionRule(window_s=0.5, stall_s=0.25, startup_grace_s=2.0)
    r.own(-0.125)
    r.peer("new", 0.0)               # its first heartbeat
    t = 0.0
    while t < 1.875:
        t += 0.125
        assert r.own(t) == [], t     # 1.875 s of progress: still within the grace
    assert r.own(2.0) == ["new"]
    # a peer seen for 2 s already is suspected after the window
    r2 = SuspicionRule(window_s=0.5, stall_s=0.25, startup_grace_s=2.0)
    r2.own(-0.125)
    for k in range(17):              # heartbeats at 0 .. 2 s, ours in between
        r2.peer("old", k * 0.125)
        r2.own(k * 0.125 + 0.0625)
    got = [r2.own(2.0 + k * 0.125) for k in range(1, 6)]
    assert got[:3] == [[], [], []] and got[3] == ["old"]   # 0.5 s after its last beat


def test_forgotten_peer_is_not_suspected():
    r = _rule()
    r.peer("b", 0.0)
    r.forget("b")
    assert [r.own(i * H) for i in range(1, 10)][-1] == []
    assert r.peers() == []


# -- the lease's heartbeat deadline (self-fencing) --------------------------------------------
class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_lease_is_valid_only_window_minus_margin_after_last_acked_heartbeat():
    """ReplicaLease with ``heartbeat_window_s``: valid until ``t_send + W - margin`` of the last
    acknowledged heartbeat (controller/cluster/lease.py); suspended past it; resumed by the next
    acknowledged heartbeat (the lease never ended: same terms)."""

    async def go() -> None:
        clock = _Clock()
        events: list[str] = []
        lease = ReplicaLease(None, LeaseSettings(ttl_s=10, keepalive_interval_s=1, margin_s=0.1),  # type: ignore[arg-type]
                             on_expired=lambda r: events.append("expired"),
                             on_suspended=lambda r: events.append(f"suspended: {r}"),
                             on_resumed=lambda: events.append("resumed"),
                             heartbeat_window_s=W, clock=clock)
        # granted at t=100 (what grant() does, without etcd)
        lease.state = LeaseState.VALID
        lease.heartbeat_until_s = 100.0 + W - 0.1
        lease._extend(100.0, 10)  # noqa: SLF001
        assert lease.valid(100.29) and not lease.valid(100.31)
        lease.heartbeat_acked(100.1)
        assert lease.valid(100.39) and not lease.valid(100.41)
        clock.t = 100.45
        lease._check()  # noqa: SLF001 (the timer's callback)
        assert lease.state is LeaseState.SUSPENDED and events == [
            "suspended: heartbeat deadline passed"]
        assert not lease.valid()
        lease.heartbeat_acked(100.44)
        assert lease.state is LeaseState.VALID and events[-1] == "resumed" and lease.valid()
        lease.heartbeat_acked(90.0)   # an old answer never shortens the deadline
        assert lease.heartbeat_until_s == pytest.approx(100.44 + W - 0.1)
        await lease.close()
        assert events[-1] == "expired"

    asyncio.run(go())


def test_heartbeat_key_is_outside_the_mastership_prefix():
    k = ClusterKeys("f")
    assert k.heartbeat("r1") == b"/aifabric/f/hb/r1"
    assert not k.heartbeat("r1").startswith(k.ha_prefix)


# -- replicas as processes on a real etcd -----------------------------------------------------
SWITCHES = [f"s{i}" for i in range(1, 7)]
#: a 10 s lease: without the detector a paused master's switches would stay put for >= 10 s
LONG_LEASE = ["--ttl-s", "10", "--keepalive-interval-s", "0.5", "--margin-s", "0.1",
              "--write-interval-s", "0.02", "--failure-detector-ms", "400",
              "--heartbeat-interval-ms", "100"]


def _until(pred, timeout_s: float = 20.0) -> None:
    end = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def _settled(procs) -> bool:
    own = masters_from_events([x for p in procs.values() for x in p.snapshot()])
    loads = [sum(1 for r, _, _ in own.values() if r == name) for name in procs]
    return set(own) == set(SWITCHES) and max(loads) - min(loads) <= 1 and min(loads) > 0


def test_paused_master_is_revoked_long_before_its_lease_and_fenced_after_resuming(etcd_cluster):
    procs = {f"r{i}": ReplicaProcess(etcd_cluster.url, f"r{i}", SWITCHES, LONG_LEASE)
             for i in range(3)}
    try:
        for p in procs.values():
            p.wait_ready()
        _until(lambda: _settled(procs))

        def lines() -> list[dict]:
            return [x for p in procs.values() for x in p.snapshot()]

        own = masters_from_events(lines())
        victim = own["s1"][0]
        held = {s: tok for s, (r, tok, _) in own.items() if r == victim}
        t_stop = procs[victim].signal(signal.SIGSTOP)
        _until(lambda: all(masters_from_events(lines()).get(s, (victim,))[0] != victim
                           for s in held))
        t_moved = time.monotonic()
        new = masters_from_events(lines())
        assert all(new[s][1] > tok for s, tok in held.items())   # higher tokens fence the old
        # the lease (10 s, kept alive until the pause) cannot have expired yet: a peer revoked it
        assert t_moved - t_stop < 10 - 0.5
        # resume it while its lease deadline is still ahead by its own clock: only the
        # heartbeat deadline stops it from writing with its old terms
        t_cont = procs[victim].signal(signal.SIGCONT)
        assert t_cont - t_stop < 9
        _until(lambda: _settled(procs))
        zombie = [x for x in procs[victim].snapshot() if x["t"] >= t_cont]
        assert not [x for x in zombie if "write" in x and x["token"] == held.get(x["write"])]
        first = next(x for x in zombie if "switch" in x)
        assert first["role"] == "backup" and first["reason"].startswith("lease-"), first
    finally:
        for p in procs.values():
            p.stop()
