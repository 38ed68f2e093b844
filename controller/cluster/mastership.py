"""Per-switch mastership across controller replicas, held with etcd leases (ONOS's model).

Every replica runs one :class:`MastershipService`. It

1. grants a lease (:mod:`controller.cluster.lease`) and registers ``ha/replicas/<name>`` under it;
2. watches ``ha/`` (replicas and masters) from one consistent snapshot on;
3. computes the balanced assignment (:mod:`controller.cluster.balance`) from what it sees, claims
   the free switches assigned to it and releases the switches it holds that are assigned to another
   live replica. A claim is one etcd transaction: "my registration is the one I made, and
   ``ha/masters/S`` does not exist" → create it under my lease. The key's ``create_revision`` is the
   term's fencing token (:mod:`controller.cluster.fencing`). Two replicas can never both succeed;
4. tells the runtime, synchronously and before anything else happens, every change of this
   replica's role per switch (:class:`MastershipEvent`): MASTER with its term, BACKUP with the
   current master's term (None while there is none), NONE once stopped.

When the lease ends (stop → revoked; crash or stall → expired; this replica cut off from etcd →
its own deadline passes first, see :mod:`controller.cluster.lease`), every mastership key under it
goes in the same etcd revision, the other replicas see it in their watch and claim. The runtime
must call :meth:`MastershipService.term` right before writing to a switch: it answers from the
lease deadline and the clock, not from the last event.

With ``detector`` (:mod:`controller.cluster.detector`) the replicas also heartbeat and revoke the
lease of a replica that stopped heartbeating while their own heartbeats committed: a crashed or
paused master's switches move after the detector's window instead of the lease's TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import aetcd
from aetcd.rtypes import KeyValue

from controller.cluster.balance import balanced_assignment
from controller.cluster.detector import DetectorSettings, FailureDetector
from controller.cluster.etcd import TRANSIENT_ERRORS
from controller.cluster.fencing import MastershipTerm, backup_election_id
from controller.cluster.keys import ClusterKeys
from controller.cluster.lease import LeaseSettings, ReplicaLease

LOG = logging.getLogger("aifabric.cluster")
#: The longest a balance release waits for this replica's write to the switch (s): make before
#: break, bounded (a write that never ends does not keep the switch from its new master).
RELEASE_HOLD_MAX_S = 10.0

#: etcd's default --max-txn-ops is 128; each claim or release is one operation of a transaction
TXN_BATCH = 100
RETRY_PAUSE_S = 0.05


class Role(enum.StrEnum):
    """This replica's role for one switch."""

    MASTER = "master"   # writes to the switch with its term's election_id / generation_id
    BACKUP = "backup"   # connected, state loaded, does not write (P4Runtime backup, OpenFlow SLAVE)
    NONE = "none"       # this replica is stopping or not registered


@dataclass(frozen=True)
class MastershipEvent:
    """A change of this replica's role for ``switch``.

    ``term``: for MASTER this replica's term; for BACKUP the current master's term (its token is
    the OpenFlow ``generation_id`` a backup sends with its SLAVE role request), None while the
    switch has no master; None for NONE. ``reason`` is for logs (``claimed``, ``released``,
    ``lease-lost: ...``, ``master-changed``, ``stopped``).
    """

    switch: str
    role: Role
    term: MastershipTerm | None
    reason: str


class ReplicaNameInUse(RuntimeError):
    """Another live process registered this replica name."""


Listener = Callable[[MastershipEvent], None]


class MastershipService:
    """One replica's side of the mastership protocol (see the module docstring).

    Parameters
    ----------
    client:
        a connected or connectable aetcd client (:class:`controller.cluster.etcd.EtcdClient` for a
        cluster); not closed by this object.
    replica:
        this replica's name, unique among live replicas.
    switches:
        the switches of the fabric (names).
    keys, lease:
        key layout and lease settings.
    advertise:
        what other replicas learn about this one (e.g. ``{"northbound": "10.0.0.5:50051"}``, so a
        replica can forward a write to the master of a switch): :meth:`replica_info`.
    detector:
        run the failure detector with these timings (None: leases alone end a silent replica).
    """

    def __init__(self, client: aetcd.Client, replica: str, switches: Iterable[str], *,
                 keys: ClusterKeys | None = None, lease: LeaseSettings | None = None,
                 advertise: Mapping[str, str] | None = None,
                 detector: DetectorSettings | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.client = client
        self.replica = replica
        self.advertise = dict(advertise or {})
        self.keys = keys or ClusterKeys()
        self.keys.replica(replica)  # validates the name
        self.lease_settings = lease or LeaseSettings()
        self._clock = clock
        self.detector = (FailureDetector(client, replica, detector, keys=self.keys, clock=clock)
                         if detector is not None else None)
        self._switches = frozenset(switches)
        self._lease: ReplicaLease | None = None
        self._registration_rev = 0
        self._old_leases: set[int] = set()
        # the etcd view (from the watch): replica -> lease id; switch -> master's term
        self._replicas: dict[str, int] = {}
        self._replica_info: dict[str, dict[str, str]] = {}
        self._masters: dict[str, MastershipTerm] = {}
        self._revision = 0
        # what this replica holds and what it last told its listeners
        self._mine: dict[str, MastershipTerm] = {}
        self._suspended: dict[str, MastershipTerm] = {}
        self._reported: dict[str, tuple[Role, int]] = {}
        self._listeners: list[Listener] = []
        self._running = False
        self._synced = asyncio.Event()
        self._registered = asyncio.Event()
        self._dirty = asyncio.Event()
        self._lease_ended = asyncio.Event()
        self._reconciled = asyncio.Event()
        # switch -> True while this replica's write to it is in flight (hold_releases)
        self._busy: Callable[[str], bool] = lambda _switch: False
        self._held_since: dict[str, float] = {}   # releases waiting for a write, since
        self._kicks = 0          # reconcile requests so far
        self._done_kicks = 0     # requests covered by a completed round
        self._tasks: list[asyncio.Task[None]] = []
        self._watch_task: asyncio.Task[None] | None = None
        self._watch: Any = None

    # -- the runtime's API -----------------------------------------------------------------------
    async def observe(self, timeout_s: float = 10.0) -> None:
        """Load the view and follow it (:meth:`masters`, :meth:`replicas`) without registering:
        no other replica sees this one yet, so nothing is rebalanced towards it. A runtime calls
        it first, connects its switches as a backup with the current masters' tokens, then
        :meth:`start`. Raises asyncio.TimeoutError when etcd is not reachable in ``timeout_s``
        (the watch keeps trying in the background until :meth:`stop`)."""
        if self._watch_task is None:
            self._watch_task = asyncio.get_running_loop().create_task(self._watch_loop())
            self._tasks.append(self._watch_task)
        await asyncio.wait_for(self._synced.wait(), timeout_s)

    async def start(self, timeout_s: float = 10.0) -> None:
        """Register, load the view, claim this replica's share; returns after the first round
        (raises asyncio.TimeoutError when etcd is not reachable in ``timeout_s``; the service then
        keeps trying in the background until :meth:`stop`)."""
        if self._running:
            return
        self._running = True
        loop = asyncio.get_running_loop()
        if self._watch_task is None:
            self._watch_task = loop.create_task(self._watch_loop())
            self._tasks.append(self._watch_task)
        elif self._synced.is_set():
            for s in sorted(self._switches):   # the view was loaded before we ran: report it
                self._update_role(s, "synced")
        for coro in (self._session_loop(), self._reconcile_loop()):
            self._tasks.append(loop.create_task(coro))
        if self.detector is not None:
            self.detector.start()
        await asyncio.wait_for(self._first_round(), timeout_s)

    async def stop(self) -> None:
        """Step down from every switch (NONE events), revoke the lease (the other replicas take
        over at once) and end the background tasks."""
        if not self._running and self._watch_task is None:
            return
        if self._running:
            self._running = False
            self._step_down_all(Role.NONE, "stopped")
        self._watch_task = None
        if self.detector is not None:
            await self.detector.stop()
        lease, self._lease = self._lease, None
        if lease is not None:
            await lease.revoke()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks.clear()
        if self._watch is not None:
            with contextlib.suppress(Exception):
                await self._watch.cancel()

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(event)`` on every role change, synchronously on the event loop (a step
        down is delivered before this replica releases anything in etcd)."""
        self._listeners.append(listener)

    def hold_releases(self, busy: Callable[[str], bool]) -> None:
        """Make before break: while ``busy(switch)`` (this replica's write to it in flight), a
        release that balances the replicas waits — at most :data:`RELEASE_HOLD_MAX_S` — and
        the switch keeps its master; call :meth:`kick` when a write ends. A switch taken over
        in the middle of a write refuses the rest of it, and a refused write is rolled back on
        every switch it touched: three replicas registering 2 s apart at k = 16 rolled back the
        first two's cold-start writes on ~40 switches each. Leaving the cluster (stop, lease
        lost) does not wait."""
        self._busy = busy

    def kick(self) -> None:
        """Ask for a round of claims and releases (a write this replica held a release for
        ended: :meth:`hold_releases`)."""
        if self._held_since:
            self._kick()

    def remove_listener(self, listener: Listener) -> None:
        with contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    async def events(self) -> AsyncIterator[MastershipEvent]:
        """The role changes from now on, as an async iterator (ends when the caller stops
        iterating)."""
        queue: asyncio.Queue[MastershipEvent] = asyncio.Queue()
        self.add_listener(queue.put_nowait)
        try:
            while True:
                yield await queue.get()
        finally:
            self.remove_listener(queue.put_nowait)

    def term(self, switch: str, now_s: float | None = None) -> MastershipTerm | None:
        """This replica's term for ``switch`` if it is master *now* (lease still valid by the
        clock), else None. Call it right before writing to the switch."""
        term = self._mine.get(switch)
        if term is None or self._lease is None or not self._lease.valid(now_s):
            return None
        return term

    def role(self, switch: str) -> Role:
        """This replica's role for ``switch`` now."""
        if not self._running or self._lease is None:
            return Role.NONE
        return Role.MASTER if self.term(switch) is not None else Role.BACKUP

    def masters(self) -> dict[str, MastershipTerm]:
        """Who masters which switch, as this replica last saw etcd (:meth:`view_known` says
        whether that is etcd's view now)."""
        return dict(self._masters)

    def view_known(self, now_s: float | None = None) -> tuple[bool, str]:
        """(True, "") while what :meth:`masters` and :meth:`replicas` say is etcd's view now:
        the view is loaded and this replica's lease is valid (a keep-alive answered within the
        TTL: etcd has a leader and this replica reaches it, so its watch is live). Else
        (False, why): during an etcd outage every master steps down, and the last view would
        show masters that cannot write (issue 23)."""
        now = self._clock() if now_s is None else now_s
        if not self._synced.is_set():
            return False, "this replica has not loaded the view of etcd yet"
        lease = self._lease
        if lease is None:
            return False, ("this replica holds no lease (not registered with etcd, or "
                           "registering again)")
        if not lease.valid(now):
            return False, (f"etcd has not answered this replica for {now - lease.answered_s:.1f}"
                           f" s (its lease is {lease.state.value}): no replica may be writing")
        return True, ""

    def replicas(self) -> tuple[str, ...]:
        """The live replicas, as this replica sees etcd."""
        return tuple(sorted(self._replicas))

    def replica_info(self, replica: str) -> Mapping[str, str]:
        """What a live replica advertised (empty when unknown)."""
        return dict(self._replica_info.get(replica, {}))

    @property
    def lease_id(self) -> int:
        """The current lease id (0 while unregistered)."""
        return self._lease.lease_id if self._lease is not None else 0

    @property
    def granted_ttl_s(self) -> int:
        """The TTL etcd granted to the current lease (0 while unregistered)."""
        return self._lease.granted_ttl_s if self._lease is not None else 0

    @property
    def backup_election_id(self) -> int:
        """The P4Runtime election_id this replica uses as a backup (0 while unregistered)."""
        return backup_election_id(self.lease_id) if self.lease_id else 0

    # -- the session: lease + registration -------------------------------------------------------
    async def _first_round(self) -> None:
        await self._registered.wait()
        await self._synced.wait()
        self._kick()
        wanted = self._kicks
        # a round that began after this kick (one in flight may have started on an older view)
        while self._done_kicks < wanted:
            self._reconciled.clear()
            await self._reconciled.wait()

    async def _session_loop(self) -> None:
        while self._running:
            lease = ReplicaLease(self.client, self.lease_settings,
                                 on_expired=self._on_lease_expired,
                                 on_suspended=self._on_lease_suspended,
                                 on_resumed=self._on_lease_resumed,
                                 heartbeat_window_s=(self.detector.settings.window_s
                                                     if self.detector is not None else None),
                                 clock=self._clock)
            self._lease_ended.clear()
            try:
                await lease.grant()
                self._lease = lease
                if self.detector is not None:
                    self.detector.attach(lease)
                await self._register(lease)
            except ReplicaNameInUse as exc:
                LOG.error("%s; retrying in %d s", exc, lease.granted_ttl_s or 1)
                await lease.revoke()
                self._lease = None
                await asyncio.sleep(max(1, lease.granted_ttl_s))
                continue
            except (*TRANSIENT_ERRORS, aetcd.ClientError) as exc:
                LOG.warning("replica %s: cannot register with etcd (%s); retrying", self.replica, exc)
                await lease.close()
                self._lease = None
                await asyncio.sleep(RETRY_PAUSE_S * 4)
                continue
            LOG.info("replica %s registered, lease %x (TTL %d s)", self.replica, lease.lease_id,
                     lease.granted_ttl_s)
            self._registered.set()
            self._kick()
            await self._lease_ended.wait()
            self._old_leases.add(lease.lease_id)
            if self._running:
                # the lease may still be alive at etcd (our deadline passed first): revoke it so
                # its masterships go now rather than at expiry. We have stepped down already.
                asyncio.get_running_loop().create_task(self._revoke_quietly(lease.lease_id))

    async def _register(self, lease: ReplicaLease) -> None:
        key = self.keys.replica(self.replica)
        value = json.dumps({"replica": self.replica, "lease": lease.lease_id,
                            "advertise": self.advertise}).encode()
        tx = self.client.transactions
        for _ in range(3):
            ok, responses = await self.client.transaction(
                compare=[tx.create(key) == 0],
                success=[tx.put(key, value, lease=lease.lease_id), tx.get(key)],
                failure=[tx.get(key)])
            if ok:
                self._registration_rev = responses[1][0][1].create_revision
                return
            existing = responses[0][0][1] if responses and responses[0] else None
            if existing is not None and existing.lease in self._old_leases | {0}:
                await self._revoke_quietly(existing.lease)   # our own previous session
                continue
            raise ReplicaNameInUse(f"replica name {self.replica!r} is registered by another "
                                   f"live process (lease {existing.lease if existing else 0:x})")
        raise ReplicaNameInUse(f"replica name {self.replica!r}: could not take over the old "
                               "registration")

    async def _revoke_quietly(self, lease_id: int) -> None:
        with contextlib.suppress(*TRANSIENT_ERRORS, aetcd.ClientError):
            await self.client.revoke_lease(lease_id)

    def _on_lease_suspended(self, reason: str) -> None:
        # synchronous: the runtime hears "not master" before anything else runs on the loop
        self._suspended = dict(self._mine)
        self._step_down_all(Role.BACKUP, f"lease-suspended: {reason}")

    def _on_lease_resumed(self) -> None:
        # the lease never ended at etcd, so nothing attached to it was taken: same terms again
        suspended, self._suspended = self._suspended, {}
        for switch, term in sorted(suspended.items()):
            if self._masters.get(switch) == term and switch in self._switches:
                self._mine[switch] = term
                self._emit(switch, Role.MASTER, term, "lease-resumed")
        self._kick()

    def _on_lease_expired(self, reason: str) -> None:
        self._suspended = {}
        self._step_down_all(Role.BACKUP, f"lease-lost: {reason}")
        self._registered.clear()
        self._lease_ended.set()

    # -- the view: watch ha/ ---------------------------------------------------------------------
    async def _watch_loop(self) -> None:
        prefix = self.keys.ha_prefix
        need_snapshot = True
        while self._running or self._watch_task is not None:
            try:
                if need_snapshot:
                    snap = await self.client.get_prefix(prefix)
                    self._load_snapshot(list(snap), snap.header.revision)
                    need_snapshot = False
                self._watch = await self.client.watch_prefix(prefix,
                                                             start_revision=self._revision + 1)
                async for ev in self._watch:
                    self._apply_event(ev)
                if not self._running and self._watch_task is None:
                    return
            except aetcd.RevisionCompactedError:
                need_snapshot = True
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 (any stream failure: resume from the revision)
                LOG.debug("watch of %s failed (%s); resuming at revision %d", prefix, exc,
                          self._revision + 1)
                await asyncio.sleep(RETRY_PAUSE_S)

    def _load_snapshot(self, kvs: list[KeyValue], revision: int) -> None:
        self._replicas.clear()
        self._replica_info.clear()
        self._masters.clear()
        for kv in kvs:
            self._put(kv)
        self._revision = revision
        for s in sorted(self._switches | set(self._mine)):
            self._update_role(s, "synced")
        self._synced.set()
        self._kick()

    def _apply_event(self, ev: aetcd.Event) -> None:
        kv = ev.kv
        self._revision = max(self._revision, kv.mod_revision)
        if ev.kind == "PUT":
            self._put(kv)
        else:
            self._delete(kv.key)
        if kv.key.startswith(self.keys.masters_prefix):
            self._update_role(kv.key[len(self.keys.masters_prefix):].decode(), "master-changed")
        self._kick()

    def _put(self, kv: KeyValue) -> None:
        try:
            value = json.loads(kv.value)
        except ValueError:
            LOG.warning("ignoring malformed value at %r", kv.key)
            return
        if kv.key.startswith(self.keys.replicas_prefix):
            self._replicas[value["replica"]] = int(kv.lease)
            self._replica_info[value["replica"]] = {str(k): str(v) for k, v in
                                                    dict(value.get("advertise") or {}).items()}
        elif kv.key.startswith(self.keys.masters_prefix):
            switch = kv.key[len(self.keys.masters_prefix):].decode()
            self._masters[switch] = MastershipTerm(token=kv.create_revision, switch=switch,
                                                   replica=value["replica"], lease_id=int(kv.lease))

    def _delete(self, key: bytes) -> None:
        if key.startswith(self.keys.replicas_prefix):
            name = key[len(self.keys.replicas_prefix):].decode()
            self._replicas.pop(name, None)
            self._replica_info.pop(name, None)
        elif key.startswith(self.keys.masters_prefix):
            self._masters.pop(key[len(self.keys.masters_prefix):].decode(), None)

    # -- roles and events ------------------------------------------------------------------------
    def _update_role(self, switch: str, reason: str) -> None:
        if not self._running:
            return   # stopped: the last word was NONE
        seen = self._masters.get(switch)
        mine = self._mine.get(switch)
        lease = self._lease
        if mine is not None and (seen is None or seen.token != mine.token):
            # our key is gone or someone else's: we lost it (lease expiry or revoke elsewhere)
            del self._mine[switch]
            self._emit(switch, Role.BACKUP, seen, reason)
            return
        if (mine is None and seen is not None and lease is not None and lease.valid()
                and seen.replica == self.replica and seen.lease_id == lease.lease_id):
            # our claim landed but its answer was lost: adopt it (reconcile releases if unwanted)
            self._mine[switch] = seen
            self._emit(switch, Role.MASTER, seen, "claimed")
            return
        if mine is None and switch in self._switches:
            self._emit(switch, Role.BACKUP, seen, reason)

    def _emit(self, switch: str, role: Role, term: MastershipTerm | None, reason: str) -> None:
        key = (role, term.token if term is not None else 0)
        if self._reported.get(switch) == key:
            return
        self._reported[switch] = key
        event = MastershipEvent(switch, role, term, reason)
        if role is Role.MASTER:
            LOG.info("replica %s: master of %s, token %d (%s)", self.replica, switch,
                     term.token if term else 0, reason)
        else:
            LOG.info("replica %s: %s for %s (%s)", self.replica, role.value, switch, reason)
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # noqa: BLE001 (a listener's bug must not stop the protocol)
                LOG.exception("mastership listener failed on %s", event)

    def _step_down_all(self, role: Role, reason: str) -> None:
        for switch in sorted(self._mine):
            del self._mine[switch]
            self._emit(switch, role, None, reason)
        if role is Role.NONE:
            for switch in sorted(self._switches):
                self._emit(switch, Role.NONE, None, reason)

    def _release_locally(self, switch: str, reason: str) -> MastershipTerm | None:
        term = self._mine.pop(switch, None)
        if term is not None:
            self._emit(switch, Role.BACKUP, None, reason)
        return term

    # -- reconcile: claim and release ------------------------------------------------------------
    def _kick(self) -> None:
        self._kicks += 1
        self._dirty.set()

    async def _reconcile_loop(self) -> None:
        while self._running:
            await self._dirty.wait()
            self._dirty.clear()
            await asyncio.sleep(0)   # let the rest of one watch response land first
            kicks = self._kicks
            try:
                if await self._reconcile_once():
                    self._done_kicks = max(self._done_kicks, kicks)
                    self._reconciled.set()
            except asyncio.CancelledError:
                raise
            except (*TRANSIENT_ERRORS, aetcd.ClientError) as exc:
                LOG.debug("reconcile failed (%s); retrying", exc)
                await asyncio.sleep(RETRY_PAUSE_S)
                self._kick()

    async def _reconcile_once(self) -> bool:
        """One round of claims and releases; False when this replica can't act yet (no valid
        lease, view not loaded, or its own registration not yet seen in the view)."""
        lease = self._lease
        if (lease is None or not lease.valid() or not self._synced.is_set()
                or not self._registered.is_set()
                or self._replicas.get(self.replica) != lease.lease_id):
            return False
        current = {s: t.replica for s, t in self._masters.items() if t.replica in self._replicas}
        desired = balanced_assignment(self._switches, list(self._replicas), current)
        # keys of this lease that this replica does not act on: a release whose delete failed
        # (a timeout: stepped down, key kept) or a claim whose answer was lost. Left alone, no
        # one masters those switches (seen at k = 16: 53 switches): adopt or delete them.
        orphans = [t for s, t in sorted(self._masters.items())
                   if t.replica == self.replica and t.lease_id == lease.lease_id
                   and s not in self._mine]
        for t in orphans:
            if t.switch in self._switches and desired.get(t.switch) == self.replica:
                self._mine[t.switch] = t
                self._emit(t.switch, Role.MASTER, t, "adopted")
        stale = [t for t in orphans if t.switch not in self._mine]
        if stale:
            await self._delete_terms(stale)
        release = sorted(s for s, t in self._mine.items()
                         if desired.get(s, self.replica) != self.replica)
        release = self._not_held(release)
        claim = sorted(s for s, r in desired.items()
                       if r == self.replica and s not in self._masters and s not in self._mine)
        if release:
            await self._release(release)
        if claim:
            return await self._claim(claim, lease)
        return True

    def _not_held(self, release: list[str]) -> list[str]:
        """Those of ``release`` this replica is not writing (:meth:`hold_releases`), and those
        it has held for :data:`RELEASE_HOLD_MAX_S`."""
        now = self._clock()
        out = []
        for s in release:
            if self._busy(s):
                since = self._held_since.setdefault(s, now)
                if now - since < RELEASE_HOLD_MAX_S:
                    continue
            out.append(s)
        wanted = set(release)
        for s in list(self._held_since):
            if s in out or s not in wanted:
                del self._held_since[s]
        if len(out) < len(release):   # look again when the hold ends, write or no write
            asyncio.get_running_loop().call_later(RELEASE_HOLD_MAX_S, self._kick)
        return out

    async def _release(self, switches: list[str]) -> None:
        terms = []
        for s in switches:
            term = self._release_locally(s, "released")   # step down first, then delete
            if term is not None:
                terms.append(term)
        await self._delete_terms(terms)

    async def _delete_terms(self, terms: list[MastershipTerm]) -> None:
        """Delete these terms' keys (each only if it is still that term); raises on an etcd
        error: the next round finds what is left (:meth:`_reconcile_once`)."""
        tx = self.client.transactions
        for i in range(0, len(terms), TXN_BATCH):
            batch = terms[i:i + TXN_BATCH]
            ops = [tx.txn(compare=[tx.create(self.keys.master(t.switch)) == t.token],
                          success=[tx.delete(self.keys.master(t.switch))], failure=[])
                   for t in batch]
            await self.client.transaction(compare=[], success=ops, failure=[])
            for t in batch:   # gone at etcd (or another term by now): not ours to adopt again
                if self._masters.get(t.switch) == t:
                    del self._masters[t.switch]

    async def _claim(self, switches: list[str], lease: ReplicaLease) -> bool:
        """Claim ``switches`` (batches of one transaction each); False when this replica's
        registration or lease ended meanwhile."""
        tx = self.client.transactions
        reg_key = self.keys.replica(self.replica)
        value = json.dumps({"replica": self.replica, "lease": lease.lease_id}).encode()
        for i in range(0, len(switches), TXN_BATCH):
            batch = switches[i:i + TXN_BATCH]
            ops = [tx.txn(compare=[tx.create(self.keys.master(s)) == 0],
                          success=[tx.put(self.keys.master(s), value, lease=lease.lease_id),
                                   tx.get(self.keys.master(s))],
                          failure=[]) for s in batch]
            ok, responses = await self.client.transaction(
                compare=[tx.create(reg_key) == self._registration_rev], success=ops, failure=[])
            if not ok:
                return False   # our registration is gone: the session loop registers again
            if not lease.valid() or self._lease is not lease:
                return False   # the lease ended while we waited: the watch reports what etcd did
            for s, resp in zip(batch, responses, strict=True):
                sub = resp.response_txn
                if not sub.succeeded:
                    continue
                kv = sub.responses[1].response_range.kvs[0]
                if self._revision >= kv.mod_revision and s not in self._masters:
                    continue   # the watch already saw this key deleted again
                term = MastershipTerm(token=kv.create_revision, switch=s, replica=self.replica,
                                      lease_id=lease.lease_id)
                if s in self._switches and s not in self._mine:
                    self._mine[s] = term
                    self._masters.setdefault(s, term)
                    self._emit(s, Role.MASTER, term, "claimed")
        return True
