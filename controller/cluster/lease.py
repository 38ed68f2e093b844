"""A replica's etcd lease, kept alive, and how long this replica may believe it still holds it.

The timing argument (why a replica steps down before anyone else can become master):

* etcd expires a lease ``TTL`` seconds after the etcd leader processed its last keep-alive, no
  sooner (``lessor.Renew`` sets ``expiry = now + TTL``); a change of etcd leader only *extends*
  leases (the new leader restarts every lease's TTL). The mastership keys are deleted only when the
  lease expires or is revoked, and another replica can claim a switch only after that deletion.
* A keep-alive sent at local time ``t_send`` (monotonic clock) reaches the leader after
  ``t_send``, so the server's expiry is later than ``t_send + TTL``.
* This replica therefore treats the lease as valid until ``t_send + TTL - margin`` of its last
  *answered* keep-alive (``margin_s`` covers clock-rate error between two hosts, ~1e-4, and the
  lateness of the step-down timer). :meth:`ReplicaLease.valid` reads the clock itself, so a caller
  that checks it right before writing to a switch never writes on an expired belief, even when the
  event loop ran late.
* A process that is frozen (SIGSTOP, a VM pause, a GC pause) cannot step down while frozen; when it
  runs again its first :meth:`~ReplicaLease.valid` check fails. A write already past that check
  when it froze is refused by the switch: the new master's token is larger (see
  :mod:`controller.cluster.fencing`).

* When the deadline passes without an answer, the lease is SUSPENDED, not lost: the replica stops
  acting, but if a later keep-alive is answered with the lease alive (etcd was electing a new
  leader, or this replica's member died and the channel moved to another), nothing attached to the
  lease can have been taken, and the replica resumes with the same terms (Chubby's "jeopardy",
  Burrows, OSDI 2006, §2.8). Only etcd saying the lease is gone (or a revoke) ends it.

Failover time after a master dies without revoking (``kill -9``): the lease expires
``TTL - (time since its last keep-alive)`` later, etcd notices within its lessor's 500 ms check
period, and the other replicas claim within one watch notification and one transaction: between
``TTL - keepalive_interval_s`` and ``TTL + 0.5 s`` plus a few milliseconds. A stop (SIGTERM) revokes
the lease: failover within milliseconds. An etcd leader election stalls every keep-alive for up to
``2 x --election-timeout``: a TTL below that suspends every master for the rest of the election.

Where the keep-alives are sent from: with an :class:`~controller.cluster.etcd.EtcdClient`, a
thread of their own (:class:`_KeepaliveThread`: a synchronous gRPC channel, no event loop), as the
failure detector's heartbeats are. On the event loop they stopped whenever the loop was busy: at
k = 16 with three replicas on two cores the loops ran 1-5 s late, every lease (2 s) was suspended
and taken over again and again, and each hand-over's read-backs kept the loops busy (thousands of
hand-overs, the fabric never programmed). The thread extends ``valid_until_s`` itself (one float
store, seen by :meth:`ReplicaLease.valid` at once) and hands resume, re-arm and expiry to the loop.
It stops sending when the event loop has not run for ``loop_stall_s`` (a task on the loop marks
each interval): a wedged controller still loses its lease, ``loop_stall_s + TTL`` after it wedged;
a dead or frozen one as before. Other clients (tests): keep-alives on the event loop.

With the failure detector (:mod:`controller.cluster.detector`, ``heartbeat_window_s``), other
replicas may revoke this lease ``window`` after this replica's last heartbeat: the lease is then
valid only until ``t_send + window - margin`` of the last *acknowledged* heartbeat too
(:meth:`ReplicaLease.heartbeat_acked`), and suspended/resumed on that deadline as on the
keep-alive one.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import aetcd

from controller.cluster.etcd import EtcdClient

LOG = logging.getLogger("aifabric.cluster")


@dataclass(frozen=True)
class LeaseSettings:
    """The lease of a replica.

    Attributes
    ----------
    ttl_s:
        requested TTL in whole seconds (etcd's unit). etcd grants at least
        ``ceil(1.5 * election timeout)``: 1 s needs ``--election-timeout`` <= 666 ms; with etcd's
        default of 1000 ms it grants 2 s (the granted TTL is what counts, see ``granted_ttl_s``).
    keepalive_interval_s:
        time between keep-alives; must leave room for a few retries within the TTL.
    margin_s:
        this replica steps down this long before ``t_send + TTL`` (see the module docstring).
    loop_stall_s:
        the keep-alive thread stops sending when the event loop has not run for this long
        (module docstring); None: keep-alives from the event loop itself.
    """

    ttl_s: int = 1
    keepalive_interval_s: float = 0.2
    margin_s: float = 0.1
    loop_stall_s: float | None = 10.0

    def __post_init__(self) -> None:
        if self.ttl_s < 1:
            raise ValueError(f"ttl_s must be >= 1 (etcd leases are whole seconds), got {self.ttl_s}")
        if not 0 < self.keepalive_interval_s <= self.ttl_s / 3:
            raise ValueError(f"keepalive_interval_s must be in (0, ttl_s/3], got "
                             f"{self.keepalive_interval_s}")
        if not 0 <= self.margin_s < self.ttl_s - self.keepalive_interval_s:
            raise ValueError(f"margin_s must be in [0, ttl_s - keepalive_interval_s), got {self.margin_s}")
        if self.loop_stall_s is not None and self.loop_stall_s < self.keepalive_interval_s:
            raise ValueError(f"loop_stall_s must be >= keepalive_interval_s, got "
                             f"{self.loop_stall_s}")


class LeaseState(enum.StrEnum):
    """VALID: this replica may act as the holder. SUSPENDED: its local deadline passed without an
    answered keep-alive (etcd unreachable, or an etcd leader election longer than the TTL); it must
    not act, but the lease may still be alive at etcd (a leader change extends leases). EXPIRED:
    etcd said the lease is gone, or it was revoked or closed; final."""

    VALID = "valid"
    SUSPENDED = "suspended"
    EXPIRED = "expired"


class ReplicaLease:
    """One granted lease with its keep-alive loop.

    The callbacks run synchronously on the event loop, at the moment the state changes:
    ``on_suspended(reason)`` when the local deadline passes (VALID → SUSPENDED),
    ``on_resumed()`` when a keep-alive is answered again with the lease alive (SUSPENDED → VALID:
    as the lease never ended, no other replica could take what was attached to it), and
    ``on_expired(reason)`` once, when the lease is over (→ EXPIRED). Chubby's "jeopardy" and
    grace period are the same idea (Burrows, "The Chubby lock service", OSDI 2006, §2.8).
    """

    def __init__(self, client: aetcd.Client, settings: LeaseSettings, *,
                 on_expired: Callable[[str], None],
                 on_suspended: Callable[[str], None] | None = None,
                 on_resumed: Callable[[], None] | None = None,
                 heartbeat_window_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self._client = client
        self.settings = settings
        self._on_expired = on_expired
        self._on_suspended = on_suspended or (lambda reason: None)
        self._on_resumed = on_resumed or (lambda: None)
        self._clock = clock
        self.lease_id = 0
        self.granted_ttl_s = 0
        self.valid_until_s = 0.0
        #: when (this replica's monotonic clock) the last answered keep-alive (or the grant) was
        #: sent: etcd answered this replica at least then
        self.answered_s = 0.0
        self.heartbeat_window_s = heartbeat_window_s
        #: the failure detector's deadline (module docstring); inf without the detector
        self.heartbeat_until_s = float("inf")
        self.state = LeaseState.EXPIRED
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._keeper: _KeepaliveThread | None = None
        #: when the event loop last ran the lease's marker task (read by the keep-alive thread)
        self.loop_alive_s = 0.0

    async def grant(self) -> int:
        """Ask etcd for the lease; start keeping it alive. Returns the lease id."""
        t_send = self._clock()
        lease = await self._client.lease(self.settings.ttl_s)
        self.lease_id = int(lease.id)
        self.granted_ttl_s = int(lease.ttl)
        if self.granted_ttl_s != self.settings.ttl_s:
            LOG.warning("etcd granted a %d s lease instead of %d s (etcd's minimum is "
                        "ceil(1.5 x --election-timeout)); failover takes that much longer",
                        self.granted_ttl_s, self.settings.ttl_s)
        self.state = LeaseState.VALID
        self.answered_s = t_send
        if self.heartbeat_window_s is not None:
            # no heartbeat can be older than the grant
            self.heartbeat_until_s = t_send + self.heartbeat_window_s - self.settings.margin_s
        self._extend(t_send, self.granted_ttl_s)
        loop = asyncio.get_running_loop()
        if self.settings.loop_stall_s is not None and isinstance(self._client, EtcdClient):
            self.loop_alive_s = self._clock()
            self._task = loop.create_task(self._mark_loop())
            self._keeper = _KeepaliveThread(self._client, self, loop)
            self._keeper.start()
        else:
            self._task = loop.create_task(self._keepalive_loop())
        return self.lease_id

    def valid(self, now_s: float | None = None) -> bool:
        """True while this replica may act as the lease's holder (reads the clock when ``now_s`` is
        None)."""
        now = self._clock() if now_s is None else now_s
        return self.state is LeaseState.VALID and now < self.deadline_s

    @property
    def deadline_s(self) -> float:
        """Until when this replica may act (the earlier of the keep-alive and the heartbeat
        deadlines)."""
        return min(self.valid_until_s, self.heartbeat_until_s)

    def heartbeat_acked(self, t_send: float) -> None:
        """The failure detector's heartbeat sent at ``t_send`` was acknowledged: extend the
        heartbeat deadline, and resume a lease that was suspended only by it."""
        if self.heartbeat_window_s is None or self.state is LeaseState.EXPIRED:
            return
        self.heartbeat_until_s = max(self.heartbeat_until_s, t_send + self.heartbeat_window_s
                                     - self.settings.margin_s)
        self._maybe_resume()
        if self.state is LeaseState.VALID:
            self._arm()

    def _maybe_resume(self) -> None:
        if self.state is LeaseState.SUSPENDED and self._clock() < self.deadline_s:
            self.state = LeaseState.VALID
            LOG.warning("lease %x resumed", self.lease_id)
            self._on_resumed()

    async def revoke(self) -> None:
        """Stop keeping alive and revoke the lease at etcd (its keys go at once). Calls
        ``on_expired("revoked")`` first. Errors reaching etcd are logged: the lease then expires
        by itself."""
        lease_id = self.lease_id if self.state is not LeaseState.EXPIRED else 0
        self._expire("revoked")
        await self._stop_task()
        if lease_id:
            try:
                await self._client.revoke_lease(lease_id)
            except (TimeoutError, aetcd.ClientError) as exc:
                LOG.warning("could not revoke lease %x (%s): it expires within its TTL",
                            lease_id, exc)

    async def close(self) -> None:
        """Stop keeping alive without revoking (the lease expires by itself at etcd, as after a
        crash)."""
        self._expire("closed")
        await self._stop_task()

    # -- internals -------------------------------------------------------------------------------
    async def _stop_task(self) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.stop.set()
            if keeper is not threading.current_thread():
                await asyncio.to_thread(keeper.join, 2.0)
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def _extend(self, t_send: float, ttl_s: int) -> None:
        self.valid_until_s = max(self.valid_until_s, t_send + ttl_s - self.settings.margin_s)
        self._arm()

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0.0, self.deadline_s - self._clock())
        self._timer = asyncio.get_running_loop().call_later(delay, self._check)

    def _check(self) -> None:
        self._timer = None
        if self.state is LeaseState.VALID:
            if self.valid():
                self._arm()
            else:
                self._suspend("keep-alive deadline passed"
                              if self._clock() >= self.valid_until_s else
                              "heartbeat deadline passed")

    def _suspend(self, reason: str) -> None:
        if self.state is not LeaseState.VALID:
            return
        self.state = LeaseState.SUSPENDED
        LOG.warning("lease %x suspended: %s", self.lease_id, reason)
        self._on_suspended(reason)

    def _expire(self, reason: str) -> None:
        if self.state is LeaseState.EXPIRED:
            return
        self.state = LeaseState.EXPIRED
        self.valid_until_s = 0.0
        self.heartbeat_until_s = 0.0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        LOG.info("lease %x ended: %s", self.lease_id, reason)
        self._on_expired(reason)

    async def _mark_loop(self) -> None:
        """Tell the keep-alive thread the event loop runs (module docstring)."""
        interval = self.settings.keepalive_interval_s
        while self.state is not LeaseState.EXPIRED:
            self.loop_alive_s = self._clock()
            await asyncio.sleep(interval)

    def _keepalive_answered(self, t_send: float, ttl: int | None) -> None:
        """On the loop: the keep-alive thread's answer sent at ``t_send`` (``ttl`` None: it
        failed; <= 0: etcd says the lease is gone)."""
        if self.state is LeaseState.EXPIRED:
            return
        if ttl is None:
            if self.state is LeaseState.VALID and not self.valid():
                self._suspend("keep-alive deadline passed")
            return
        if ttl <= 0:
            self._expire("etcd says the lease is gone")
            return
        self.valid_until_s = max(self.valid_until_s, t_send + ttl - self.settings.margin_s)
        self.answered_s = max(self.answered_s, t_send)
        self._maybe_resume()
        if self.state is LeaseState.VALID:
            if self.valid():
                self._arm()
            else:
                self._suspend("keep-alive or heartbeat answered too late")

    async def _keepalive_loop(self) -> None:
        """Keep-alives from the event loop (``loop_stall_s`` None, or a client other than
        :class:`~controller.cluster.etcd.EtcdClient`)."""
        interval = self.settings.keepalive_interval_s
        retry = min(0.05, interval)
        while self.state is not LeaseState.EXPIRED:
            t_send = self._clock()
            ttl: int | None
            try:
                reply = await self._client.refresh_lease(self.lease_id)
                if reply is None:
                    raise aetcd.ClientError("keep-alive stream ended without an answer")
                ttl = int(reply.TTL)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 (any failure: retry until etcd answers)
                LOG.debug("keep-alive of lease %x failed: %s", self.lease_id, exc)
                ttl = None
            self._keepalive_answered(t_send, ttl)
            await asyncio.sleep(retry if ttl is None else
                                max(0.0, t_send + interval - self._clock()))

class _KeepaliveThread(threading.Thread):
    """A lease's keep-alives from a thread of their own on a synchronous gRPC channel (module
    docstring): one ``LeaseKeepAlive`` exchange per interval, each bounded by the call timeout.
    An answer extends ``lease.valid_until_s`` at once and is handed to the loop
    (:meth:`ReplicaLease._keepalive_answered`); nothing is sent while the loop has not marked
    itself alive for ``loop_stall_s``."""

    def __init__(self, client: EtcdClient, lease: ReplicaLease,
                 loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(name=f"keep-alive {lease.lease_id:x}", daemon=True)
        self.client, self.lease, self.main_loop = client, lease, loop
        self.stop = threading.Event()

    def run(self) -> None:
        lease, clock = self.lease, self.lease._clock
        interval = lease.settings.keepalive_interval_s
        stall_s = lease.settings.loop_stall_s or float("inf")
        retry = min(0.05, interval)
        stalled = False
        while not self.stop.is_set() and lease.state is not LeaseState.EXPIRED:
            if self.main_loop.is_closed():
                return   # the process's loop ended without stopping the lease: nobody to serve
            t_send = clock()
            if t_send - lease.loop_alive_s > stall_s:
                if not stalled:
                    LOG.warning("lease %x: the event loop has not run for %.1f s: keep-alives "
                                "stop (the lease ends within its TTL unless it runs again)",
                                lease.lease_id, t_send - lease.loop_alive_s)
                stalled = True
                self.stop.wait(interval)
                continue
            stalled = False
            ttl = self.client.sync_keepalive(lease.lease_id)
            if ttl is not None and ttl > 0 and lease.state is not LeaseState.EXPIRED:
                # etcd renewed the lease after t_send (module docstring)
                lease.valid_until_s = max(lease.valid_until_s,
                                          t_send + ttl - lease.settings.margin_s)
            with contextlib.suppress(RuntimeError):   # the main loop closed
                self.main_loop.call_soon_threadsafe(lease._keepalive_answered, t_send, ttl)
            if ttl is not None and ttl <= 0:
                return
            self.stop.wait(retry if ttl is None else max(0.0, t_send + interval - clock()))
