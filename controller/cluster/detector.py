"""A failure detector among replicas: heartbeats in etcd, suspicion only while etcd makes progress.

Why: a crashed (``kill -9``) or paused (SIGSTOP) master's switches move when its lease ends, and
etcd 3.4 cannot end a lease sooner than ``TTL`` (whole seconds) plus its lessor's 500 ms expiry
check (:mod:`controller.cluster.lease`): 1.0-1.5 s with a 1 s lease. With this detector the other
replicas revoke the silent replica's lease themselves (``LeaseRevoke`` by id: etcd lets any client
do it), which deletes its mastership keys at once.

The protocol (every replica that runs it):

* it writes ``/aifabric/<fabric>/hb/<replica>`` every ``heartbeat_interval_s``, attached to its
  lease (:meth:`ClusterKeys.heartbeat <controller.cluster.keys.ClusterKeys.heartbeat>`);
* it watches ``hb/`` (one watch stream: etcd delivers its events in revision order, so an own
  heartbeat that arrives after a peer's was committed after it);
* **suspicion rule** (:class:`SuspicionRule`): a peer is suspected once this replica has seen its
  *own* heartbeats arrive, one after another with gaps of at most ``stall_s``, for ``window_s`` in
  all since the peer's last heartbeat. While etcd commits nothing (a leader election, this
  replica cut off), its own heartbeats stall too and nobody is suspected; a gap longer than
  ``stall_s`` does not count as progress;
* the suspecting replica revokes the suspect's lease (the heartbeat key carries its id).

Judged against ONOS's phi-accrual detector (Hayashibara et al., "The phi accrual failure
detector", SRDS 2004; ONOS ``PhiAccrualFailureDetector`` between cluster nodes): phi adapts its
threshold to the observed inter-arrival times, so it gives no fixed bound on how soon a replica
can be suspected, and it cannot tell "the peer stopped" from "the coordination service stopped"
(both stop the arrivals). Here the bound is fixed (``window_s``) and the own-progress condition
tells the two apart, and the fixed bound is what makes the next point possible.

**Self-fencing** (what the proposal that revocation is safe "because of the tokens" misses): a
replica paused for less than its lease TTL resumes with a lease it still believes valid, although
a peer revoked it; the switches refuse its writes only once the new master's role request has
reached them, and between the claim in etcd and that request the zombie could write. So a
replica must stop acting before anyone can suspect it. A peer receives this replica's heartbeat
after it was committed, which is after it was sent at ``t_send``, and suspects only ``window_s``
of progress after receiving it: no suspicion before ``t_send + window_s``. The replica treats its
lease as valid only until ``t_send + window_s - margin_s`` of its last *acknowledged* heartbeat
(:meth:`controller.cluster.lease.ReplicaLease.heartbeat_acked`; the lease is SUSPENDED past it and
resumes with the same terms when a heartbeat is acknowledged again), in addition to the lease's
own deadline. The price: during an etcd leader election (no heartbeat acknowledged) masters
suspend after ``window_s - margin_s`` instead of ``TTL - margin_s``, and resume once it ends.

Trade-off: a replica starved of CPU (or whose etcd member is slow) for longer than ``window_s``
is suspected although alive. That is safe (it is fenced as above and re-registers with a new
lease) but moves its switches for nothing. A controller's event loop is busy for hundreds of ms
at times (planning, reconciling six switches after a start): heartbeats sent from it made a
starting replica flap (suspected, revoked, registered again) in the ha_failover lab. So with an
:class:`~controller.cluster.etcd.EtcdClient` the heartbeats are sent by a thread of their own
(a synchronous gRPC channel to etcd, no event loop of its own; CPython switches threads at least
every 5 ms): they stop
when the process dies or is frozen, not when its event loop is merely busy. The watch and the
suspicion stay on the event loop: a busy observer receives the heartbeats late and in a burst,
which counts as little progress, so it suspects later, never sooner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aetcd
import aetcd.rpc
import grpc

from controller.cluster.etcd import EtcdClient, EtcdSettings, sync_channel
from controller.cluster.keys import ClusterKeys

LOG = logging.getLogger("aifabric.cluster")
RETRY_PAUSE_S = 0.05
#: heartbeats of the thread awaiting their answer at once (each lives at most one window)
MAX_BEATS_IN_FLIGHT = 4


@dataclass(frozen=True)
class DetectorSettings:
    """Timings of the failure detector (module docstring).

    Attributes
    ----------
    window_s:
        ``W``: own progress (seconds of own heartbeats arriving) after a peer's last heartbeat
        before the peer is suspected; also how long after its last acknowledged heartbeat a
        replica stops acting (minus the lease's ``margin_s``).
    heartbeat_interval_s:
        ``H``: time between this replica's heartbeats; at most ``window_s / 2``.
    stall_s:
        the longest gap between two own heartbeats that still counts as progress (default
        ``2 x H``): a longer gap is a stall of etcd or of this replica, not evidence.
    startup_grace_s:
        a peer whose heartbeats span less than this (it just started: connecting its switches,
        loading its plan, the busiest seconds of a controller) needs this much own progress,
        not ``window_s``, to be suspected. A replica that dies while starting is then found
        by the grace or its lease, whichever ends first.
    """

    window_s: float = 0.4
    heartbeat_interval_s: float = 0.1
    stall_s: float = 0.0
    startup_grace_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat_interval_s <= self.window_s / 2:
            raise ValueError(f"heartbeat_interval_s must be in (0, window_s/2], got "
                             f"{self.heartbeat_interval_s} with window_s {self.window_s}")
        if self.stall_s == 0.0:
            object.__setattr__(self, "stall_s", 2 * self.heartbeat_interval_s)
        if not self.heartbeat_interval_s <= self.stall_s <= self.window_s:
            raise ValueError(f"stall_s must be in [heartbeat_interval_s, window_s], got "
                             f"{self.stall_s}")
        if self.startup_grace_s < self.window_s:
            raise ValueError(f"startup_grace_s must be >= window_s, got {self.startup_grace_s}")

    @classmethod
    def from_window_ms(cls, window_ms: int, heartbeat_ms: int = 100) -> DetectorSettings:
        """``--failure-detector-ms`` and ``--heartbeat-interval-ms`` (raises ValueError)."""
        window_s = window_ms / 1e3
        return cls(window_s=window_s, heartbeat_interval_s=heartbeat_ms / 1e3,
                   startup_grace_s=max(cls.startup_grace_s, window_s))


@dataclass
class _Peer:
    first_s: float                # when its first heartbeat arrived
    seen_s: float                 # when its last heartbeat arrived
    progress_s: float = 0.0       # own progress since then


@dataclass
class SuspicionRule:
    """The suspicion rule, pure (times in seconds from one monotonic clock, passed in).

    Feed it the heartbeat events in the order the watch delivers them: :meth:`own` for this
    replica's, :meth:`peer` for another's, :meth:`forget` when a peer's key is deleted.
    Invariant (what self-fencing rests on): a peer is suspected at ``now`` only if
    ``now - seen >= window_s``, ``seen`` being when its last heartbeat arrived, because progress
    is counted only inside ``(seen, now]``. A peer whose heartbeats so far span less than
    ``startup_grace_s`` needs ``startup_grace_s`` of progress (``DetectorSettings``).
    """

    window_s: float
    stall_s: float
    startup_grace_s: float = 0.0
    _last_own_s: float | None = None
    _peers: dict[str, _Peer] = field(default_factory=dict)

    def peer(self, name: str, now_s: float) -> None:
        """A heartbeat of ``name`` arrived: it is not suspected, and its progress restarts."""
        old = self._peers.get(name)
        self._peers[name] = _Peer(old.first_s if old is not None else now_s, now_s)

    def forget(self, name: str) -> None:
        """``name``'s heartbeat key is gone (its lease ended): stop watching it."""
        self._peers.pop(name, None)

    def own(self, now_s: float) -> list[str]:
        """One of this replica's heartbeats arrived; returns the peers suspected from now on
        (sorted; each is returned at every call while it stays suspected)."""
        last, self._last_own_s = self._last_own_s, now_s
        if last is not None and 0 <= now_s - last <= self.stall_s:
            for p in self._peers.values():
                p.progress_s += max(0.0, now_s - max(last, p.seen_s))
        return self.suspects()

    def suspects(self) -> list[str]:
        """The peers suspected now."""
        return sorted(n for n, p in self._peers.items()
                      if p.progress_s >= (self.window_s if p.seen_s - p.first_s
                                          >= self.startup_grace_s else self.startup_grace_s))

    def peers(self) -> list[str]:
        """The peers whose heartbeats are watched."""
        return sorted(self._peers)


class FailureDetector:
    """One replica's heartbeats and its watch of the others' (module docstring).

    :meth:`start` begins the watch; :meth:`attach` begins heartbeats under a lease (again after
    each new lease); :meth:`stop` ends both. Revocations are logged at WARNING with the suspect's
    name and lease; :attr:`revoked` counts them.
    """

    def __init__(self, client: aetcd.Client, replica: str, settings: DetectorSettings, *,
                 keys: ClusterKeys | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.client = client
        self.replica = replica
        self.settings = settings
        self.keys = keys or ClusterKeys()
        self._clock = clock
        self.rule = SuspicionRule(settings.window_s, settings.stall_s, settings.startup_grace_s)
        self._leases: dict[str, int] = {}     # peer -> lease id of its heartbeat key
        self._revoking: set[int] = set()
        self.revoked = 0
        self._watch_task: asyncio.Task[None] | None = None
        self._beat_task: asyncio.Task[None] | None = None
        self._beater: _BeatThread | None = None
        self._watch: Any = None

    def start(self) -> None:
        """Start watching the heartbeats (idempotent)."""
        if self._watch_task is None:
            self._watch_task = asyncio.get_running_loop().create_task(self._watch_loop())

    def attach(self, lease: Any) -> None:
        """Heartbeat under ``lease`` (a :class:`~controller.cluster.lease.ReplicaLease`; its
        :meth:`heartbeat_acked` is called after each acknowledged heartbeat) until it ends."""
        if self._beat_task is not None:
            self._beat_task.cancel()
            self._beat_task = None
        if self._beater is not None:
            self._beater.stop.set()
        loop = asyncio.get_running_loop()
        if isinstance(self.client, EtcdClient):
            self._beater = _BeatThread(self.client.settings, self.keys.heartbeat(self.replica),
                                       lease, self.settings.heartbeat_interval_s, loop,
                                       self._clock)
            self._beater.start()
        else:
            self._beat_task = loop.create_task(self._beat_loop(lease))

    async def stop(self) -> None:
        beater, self._beater = self._beater, None
        if beater is not None:
            beater.stop.set()
            await asyncio.to_thread(beater.join, 5.0)
        tasks = [t for t in (self._beat_task, self._watch_task) if t is not None]
        self._beat_task = self._watch_task = None
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if self._watch is not None:
            with contextlib.suppress(Exception):
                await self._watch.cancel()

    # -- heartbeats ------------------------------------------------------------------------------
    async def _beat_loop(self, lease: Any) -> None:
        from controller.cluster.lease import LeaseState

        key = self.keys.heartbeat(self.replica)
        interval = self.settings.heartbeat_interval_s
        seq = 0
        while lease.state is not LeaseState.EXPIRED:
            t_send = self._clock()
            try:
                await self.client.put(key, str(seq).encode(), lease=lease.lease_id)
                lease.heartbeat_acked(t_send)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 (etcd unreachable or lease gone: retry)
                LOG.debug("heartbeat of %s failed: %s", self.replica, exc)
            seq += 1
            await asyncio.sleep(max(0.0, t_send + interval - self._clock()))

    # -- the watch -------------------------------------------------------------------------------
    async def _watch_loop(self) -> None:
        prefix = self.keys.heartbeats_prefix
        revision = 0
        while True:
            try:
                if revision == 0:
                    snap = await self.client.get_prefix(prefix)
                    now = self._clock()
                    for kv in snap:
                        self._seen(kv.key, int(kv.lease), now)
                    revision = snap.header.revision
                self._watch = await self.client.watch_prefix(prefix, start_revision=revision + 1)
                async for ev in self._watch:
                    revision = max(revision, ev.kv.mod_revision)
                    if ev.kind == "PUT":
                        self._seen(ev.kv.key, int(ev.kv.lease), self._clock())
                    else:
                        name = ev.kv.key[len(prefix):].decode()
                        self.rule.forget(name)
                        self._leases.pop(name, None)
            except aetcd.RevisionCompactedError:
                revision = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 (any stream failure: resume)
                LOG.debug("watch of %s failed (%s); resuming", prefix, exc)
                await asyncio.sleep(RETRY_PAUSE_S)

    def _seen(self, key: bytes, lease_id: int, now_s: float) -> None:
        name = key[len(self.keys.heartbeats_prefix):].decode()
        if name != self.replica:
            self.rule.peer(name, now_s)
            self._leases[name] = lease_id
            return
        for suspect in self.rule.own(now_s):
            lease = self._leases.get(suspect, 0)
            if lease and lease not in self._revoking:
                self._revoking.add(lease)
                asyncio.get_running_loop().create_task(self._revoke(suspect, lease))

    async def _revoke(self, suspect: str, lease_id: int) -> None:
        LOG.warning("replica %s: suspecting replica %s (no heartbeat while ours committed for "
                    "%.0f ms): revoking its lease %x", self.replica, suspect,
                    self.settings.window_s * 1e3, lease_id)
        try:
            await self.client.revoke_lease(lease_id)
            self.revoked += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 (already gone, or etcd busy: the next own
            # heartbeat retries while the suspect's key is still there)
            LOG.info("revoking lease %x of %s: %s", lease_id, suspect, exc)
            self._revoking.discard(lease_id)


class _BeatThread(threading.Thread):
    """Heartbeats from a thread of their own on a synchronous gRPC channel to etcd (module
    docstring; no event loop of its own: each heartbeat is a ``KV.Put`` future whose answer a
    gRPC callback handles). Each acknowledged heartbeat extends ``lease.heartbeat_until_s`` at
    once (one float store: :meth:`ReplicaLease.valid` sees it even while the main loop is busy)
    and then calls ``lease.heartbeat_acked`` on the main loop (resume, re-arm)."""

    def __init__(self, settings: EtcdSettings, key: bytes, lease: Any, interval_s: float,
                 loop: asyncio.AbstractEventLoop, clock: Callable[[], float]) -> None:
        super().__init__(name=f"heartbeat {key.decode(errors='replace')}", daemon=True)
        self.settings, self.key, self.lease = settings, key, lease
        self.interval_s, self.main_loop, self.clock = interval_s, loop, clock
        self.stop = threading.Event()
        self._in_flight = 0
        self._lock = threading.Lock()

    def run(self) -> None:
        from controller.cluster.lease import LeaseState

        channel = sync_channel(self.settings)
        put = aetcd.rpc.KVStub(channel).Put
        lease, seq = self.lease, 0
        try:
            while not self.stop.is_set() and lease.state is not LeaseState.EXPIRED:
                t_send = self.clock()
                # one heartbeat per interval, without waiting for the previous answer: a put
                # lost with a dying etcd member would otherwise hold the next ones back for
                # the whole call timeout while the other replicas' heartbeats already commit
                with self._lock:
                    room = self._in_flight < MAX_BEATS_IN_FLIGHT
                    if room:
                        self._in_flight += 1
                if room:
                    window = lease.heartbeat_window_s
                    fut = put.future(aetcd.rpc.PutRequest(key=self.key,
                                                          value=str(seq).encode(),
                                                          lease=lease.lease_id),
                                     timeout=window or self.settings.rpc_timeout_s)
                    fut.add_done_callback(lambda f, t=t_send, w=window: self._answered(f, t, w))
                seq += 1
                self.stop.wait(max(0.0, t_send + self.interval_s - self.clock()))
        finally:
            channel.close()

    def _answered(self, fut: grpc.Future[Any], t_send: float, window: float | None) -> None:
        """A heartbeat's answer (on a gRPC callback thread)."""
        from controller.cluster.lease import LeaseState

        with self._lock:
            self._in_flight -= 1
        lease = self.lease
        if fut.cancelled() or fut.exception() is not None:
            LOG.debug("heartbeat %s failed: %s", self.key,
                      "cancelled" if fut.cancelled() else fut.exception())
            return
        if window is not None and lease.state is not LeaseState.EXPIRED:
            lease.heartbeat_until_s = max(lease.heartbeat_until_s,
                                          t_send + window - lease.settings.margin_s)
        with contextlib.suppress(RuntimeError):   # the main loop closed
            self.main_loop.call_soon_threadsafe(lease.heartbeat_acked, t_send)
