"""A controller replica of a cluster: the runtime wired to etcd (``aifabric controller --cluster
etcd://HOST:PORT[,...] --replica NAME``).

What etcd holds (:mod:`controller.cluster.store`, :mod:`controller.runtime.clustercodec`): the
applied policy (document, generation, digest), the registered collectives and the placement of
the pinned flows — everything :func:`controller.runtime.intent.intended_plan` depends on besides
the down links, which every replica hears from the switches. Every replica follows that intent
(:meth:`ClusterRuntime.start`: a watch turned into :class:`~controller.runtime.events.
IntentSynced` events), so a replica that takes over a switch computes the plan its predecessor
had and, reading the switch back, finds nothing to send.

Mastership is per switch (:class:`~controller.cluster.mastership.MastershipService`: etcd leases,
balanced across the live replicas). :class:`ClusterMastership` is the runtime's
:class:`~controller.runtime.controller.Mastership` on it: master with the term's token
(OpenFlow ``generation_id`` = token; P4Runtime ``election_id`` = token << 64), otherwise backup
(OpenFlow SLAVE with the current master's token; P4Runtime with this replica's lease id, below
every master's). Every role change becomes a role request to the switch
(:meth:`~controller.runtime.controller.Controller.role_changed`); the runtime asks again right
before every write, and the switches refuse a deposed master's writes themselves.

Start-up order (:meth:`ClusterRuntime.start`): the intent is read (the first replica of an empty
cluster commits its policy file and the initial placement), the mastership view is loaded
without registering (:meth:`~controller.cluster.mastership.MastershipService.observe`), the
switches connect as backups with the masters' tokens, and only then does the replica register
and claim its share (a restarted replica takes switches only once it can write to them).

Writes from the northbound go to etcd first (:class:`EtcdIntent`, the
:class:`~controller.runtime.intentstore.IntentStore` of a cluster); each replica converges the
switches it masters to the intent it watches and then says so under its lease
(``acks/<replica>``: the intent generation, the switches that hold its plan, and the last
refusal), which :meth:`ClusterRuntime.wait_confirmed` waits for. A placement a replica
computes itself (a repair, a re-balance, a re-optimisation batch) is committed too, so every
replica programs the same one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aetcd

from controller.cluster.detector import DetectorSettings
from controller.cluster.etcd import TRANSIENT_ERRORS, EtcdClient, EtcdSettings, EtcdTLS
from controller.cluster.keys import ClusterKeys
from controller.cluster.lease import LeaseSettings
from controller.cluster.mastership import MastershipEvent, MastershipService
from controller.cluster.store import (
    IntentChange,
    IntentSnapshot,
    IntentStore,
    PolicyRecord,
    StaleGeneration,
    StoreUnavailable,
    UnknownCollective,
)
from controller.drivers.southbound import Role, SouthboundKind
from controller.errors import ConfigError
from controller.model.topology import Fabric
from controller.northbound.model import NotConfirmed, NotFound
from controller.policy.model import Policy
from controller.runtime.clustercodec import (
    IntentDecodeError,
    check_placement,
    decode_placement,
    encode_placement,
    policy_in_force,
    registered_from_spec,
    registered_spec,
)
from controller.runtime.controller import Controller
from controller.runtime.core import Step
from controller.runtime.events import Event, IntentSynced
from controller.runtime.intentstore import InForce, IntentUpdate, in_force
from controller.runtime.state import Refusal, Registered, RuntimeState
from controller.runtime.transaction import Transaction

LOG = logging.getLogger("aifabric.cluster")


@dataclass(frozen=True)
class ClusterOptions:
    """``--cluster``/``--replica`` and their timings.

    ``confirm_timeout_s``: how long a northbound write waits for the masters of the switches
    it changes (then UNAVAILABLE); ``connect_wait_s``: how long a starting replica waits for
    its switches to connect before it claims its share; ``start_timeout_s``: how long it waits
    for etcd at start (then it exits).
    """

    url: str
    replica: str
    lease: LeaseSettings = LeaseSettings()
    rpc_timeout_s: float = 0.5
    etcd_tls: EtcdTLS | None = None
    confirm_timeout_s: float = 10.0
    connect_wait_s: float = 10.0
    start_timeout_s: float = 15.0
    commit_timeout_s: float = 5.0
    advertise: Mapping[str, str] = field(default_factory=dict)
    #: ``--failure-detector-ms``: revoke a silent replica's lease (None: leases alone)
    detector: DetectorSettings | None = None


class ClusterMastership:
    """The runtime's :class:`~controller.runtime.controller.Mastership` on etcd (module
    docstring). ``role_for`` reads the lease's validity from the clock each time."""

    def __init__(self, service: MastershipService,
                 southbound: Mapping[str, SouthboundKind]) -> None:
        self.service = service
        self.southbound = dict(southbound)
        self._tokens: dict[str, int] = {}

    def note(self, ev: MastershipEvent) -> None:
        """Remember the latest token seen for a switch (a backup's SLAVE request carries it
        while no master is known)."""
        if ev.term is not None:
            self._tokens[ev.switch] = max(self._tokens.get(ev.switch, 0), ev.term.token)

    def role_for(self, switch: str) -> tuple[Role, int | None]:
        term = self.service.term(switch)
        p4 = self.southbound.get(switch) == "p4runtime"
        if term is not None:
            return "master", term.election_id if p4 else term.generation_id
        if p4:
            return "backup", self.service.backup_election_id or None
        seen = self.service.masters().get(switch)
        token = seen.token if seen is not None else self._tokens.get(switch)
        return "backup", token


class ClusterRuntime:
    """One replica's link to the cluster (module docstring).

    Parameters
    ----------
    opts : ClusterOptions
    fabric : Fabric
    southbound : mapping
        Switch → ``openflow``/``p4runtime`` (the tokens differ).
    resolve_policy : callable
        ``(document, source) -> Policy``: a stored policy document validated as at start
        (raises ConfigError).
    client : EtcdClient, optional
        Made from ``opts`` when None (tests pass their own).
    """

    def __init__(self, opts: ClusterOptions, fabric: Fabric,
                 southbound: Mapping[str, SouthboundKind],
                 resolve_policy: Callable[[str, str], Policy], *,
                 client: aetcd.Client | None = None) -> None:
        self.opts = opts
        self.fabric = fabric
        self.keys = ClusterKeys(fabric.name)
        self.client = client or EtcdClient(EtcdSettings.from_url(
            opts.url, rpc_timeout_s=opts.rpc_timeout_s, tls=opts.etcd_tls))
        self.store = IntentStore(self.client, self.keys, deadline_s=opts.start_timeout_s)
        self.service = MastershipService(self.client, opts.replica,
                                         [s.name for s in fabric.switches], keys=self.keys,
                                         lease=opts.lease, advertise=opts.advertise,
                                         detector=opts.detector)
        self.mastership = ClusterMastership(self.service, southbound)
        self._resolve_policy = resolve_policy
        self._check_policy: Callable[[str, str], Awaitable[Policy]] | None = None
        self._policies: dict[str, Policy] = {}
        self._ctl: Controller | None = None
        self._placement: object = None
        self._tasks: list[asyncio.Task[None]] = []
        self._acks: dict[str, tuple[int, frozenset[str], Refusal | None]] = {}
        self._waiters: set[asyncio.Future[None]] = set()
        self._ack_dirty = asyncio.Event()
        self.last_snapshot: IntentSnapshot | None = None

    # -- the intent --------------------------------------------------------------------------
    async def read_or_seed(self, state: RuntimeState) -> IntentSnapshot:
        """The intent in etcd; an empty cluster gets ``state``'s policy document and placement
        first (one commit; a replica seeding at the same moment loses and reads the winner's).
        Raises StoreUnavailable."""
        snap = await self.store.snapshot()
        if snap.generation == 0:
            pol = state.policy
            try:
                snap = await self.store.commit(
                    IntentChange(policy=(pol.document, pol.source),
                                 placement=encode_placement(state.placement)),
                    expected_generation=0, now_unix_s=pol.applied_unix_s or time.time())
                LOG.info("[cluster] replica %s: the cluster had no intent; committed the "
                         "policy %s (sha256 %s) as generation %d", self.opts.replica,
                         pol.source, pol.digest[:12], snap.generation)
            except StaleGeneration:
                snap = await self.store.snapshot()
        self.last_snapshot = snap
        return snap

    def use_checker(self, check: Callable[[str, str], Awaitable[Policy]]) -> None:
        """Check the policy documents that come from etcd with ``check(document, source)``
        (off the loop: :class:`~controller.runtime.policycheck.PolicyChecker`) instead of
        ``resolve_policy`` (which then serves only the start, before the loop runs anything
        else)."""
        self._check_policy = check

    def remember_policy(self, digest: str, policy: Policy) -> None:
        """The policy of a document this replica checked and committed itself (sha256
        ``digest``): its own commit coming back from the watch is not checked again."""
        self._policies = {digest: policy}

    async def _load_policy(self, snap: IntentSnapshot) -> None:
        """Check a policy document from etcd not seen yet with the checker (off the loop),
        so that :meth:`resolve` finds it. Raises IntentDecodeError."""
        rec = snap.policy
        if rec is None or rec.digest in self._policies or self._check_policy is None:
            return
        try:
            policy = await self._check_policy(rec.document, rec.source)
        except ConfigError as exc:
            raise IntentDecodeError(
                f"the policy of intent generation {snap.generation} ({rec.source}) is "
                f"invalid here: " + "; ".join(map(str, exc.problems[:3]))) from None
        except Exception as exc:  # noqa: BLE001 - the checker's own failure: say it, go on
            raise IntentDecodeError(f"the policy of intent generation {snap.generation} "
                                    f"({rec.source}) could not be checked: {exc}") from None
        self._policies = {rec.digest: policy}

    def resolve(self, snap: IntentSnapshot, state: RuntimeState) -> IntentSynced:
        """The runtime event for a stored intent. Raises IntentDecodeError (the value named)."""
        rec = snap.policy
        if rec is None:
            raise IntentDecodeError(f"intent generation {snap.generation} has no policy")
        policy = self._policies.get(rec.digest)
        if policy is None:
            try:
                policy = self._resolve_policy(rec.document, rec.source)
            except ConfigError as exc:
                raise IntentDecodeError(
                    f"the policy of intent generation {snap.generation} ({rec.source}) is "
                    f"invalid here: " + "; ".join(map(str, exc.problems[:3]))) from None
            self._policies = {rec.digest: policy}
        registered: dict[str, Registered] = {
            n: registered_from_spec(n, c.spec) for n, c in sorted(snap.collectives.items())}
        pif = policy_in_force(policy, rec.document, rec.source, rec.generation,
                              rec.applied_unix_s)
        effective = policy
        if registered:
            effective = policy.model_copy(update={"collectives": (
                *policy.collectives, *(r.collective for r in registered.values()))})
        placement = decode_placement(snap.placement) if snap.placement is not None else None
        problems = (check_placement(self.fabric, effective, placement)
                    if placement is not None else ["none stored"])
        if placement is None or problems:
            from controller.runtime.placement import initial_placement

            LOG.warning("[cluster] the stored placement of intent generation %d does not fit "
                        "(%s); pinning every flow again (the same on every replica)",
                        snap.generation, "; ".join(problems))
            placement = initial_placement(self.fabric, effective, state.down_links)
        return IntentSynced(pif, registered, placement, snap.generation)

    async def commit(self, change: IntentChange, expected_generation: int) -> IntentSnapshot:
        """One intent commit (:meth:`~controller.cluster.store.IntentStore.commit`)."""
        return await self.store.commit(change, expected_generation=expected_generation,
                                       now_unix_s=time.time(),
                                       deadline_s=self.opts.commit_timeout_s)

    # -- start and stop ----------------------------------------------------------------------
    async def observe(self) -> None:
        """Load the mastership view (no registration yet): role requests get the masters'
        tokens from the first connection on."""
        await self.service.observe(self.opts.start_timeout_s)

    @property
    def ctl(self) -> Controller:
        assert self._ctl is not None, "attach() first"
        return self._ctl

    def attach(self, ctl: Controller) -> None:
        """Feed ``ctl`` (whose mastership is :attr:`mastership`) with role changes; write acks
        after its writes; commit the placements it computes."""
        self._ctl = ctl
        self._placement = ctl.state.placement
        self.service.add_listener(self._on_role)
        self.service.hold_releases(self._writing)
        ctl.after_write.append(self._written)
        ctl.listeners.append(self._on_step)

    def _writing(self, switch: str) -> bool:
        """Whether a transaction in flight writes ``switch`` (its balance release waits:
        :meth:`~controller.cluster.mastership.MastershipService.hold_releases`)."""
        t = self.ctl.state.txn
        return t is not None and switch in t.switches

    def _written(self, _: Transaction | None) -> None:
        self._ack_dirty.set()
        self.service.kick()

    async def start(self, since: IntentSnapshot) -> None:
        """Follow the intent from ``since``, write acks, wait (at most ``connect_wait_s``) for
        the switches to connect, then register and claim this replica's share."""
        loop = asyncio.get_running_loop()
        for coro in (self._follow_intent(since), self._follow_acks(), self._write_acks()):
            self._tasks.append(loop.create_task(coro))
        t0 = time.monotonic()
        names = [s.name for s in self.fabric.switches]
        while time.monotonic() - t0 < self.opts.connect_wait_s:
            if all(self.ctl.state.session(n).connected for n in names):
                break
            await self._changed(self.opts.connect_wait_s - (time.monotonic() - t0))
        n = sum(1 for x in names if self.ctl.state.session(x).connected)
        LOG.info("[cluster] replica %s: %d of %d switches connected as backup after %.1f s; "
                 "registering with the cluster", self.opts.replica, n, len(names),
                 time.monotonic() - t0)
        await self.service.start(self.opts.start_timeout_s)
        LOG.info("[cluster] replica %s registered (lease %x, TTL %d s); live replicas: %s",
                 self.opts.replica, self.service.lease_id, self.service.granted_ttl_s,
                 ", ".join(self.service.replicas()))

    async def stop(self) -> None:
        """Step down from every switch (the others take over at once: the lease is revoked),
        end the watches, close the client."""
        try:
            await asyncio.wait_for(self.service.stop(), 5.0)
        except (TimeoutError, *TRANSIENT_ERRORS, aetcd.ClientError) as exc:
            LOG.warning("[cluster] stopping the mastership: %s (the lease expires by itself)",
                        exc)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
        with contextlib.suppress(Exception):
            await self.client.close()

    # -- following etcd ------------------------------------------------------------------------
    async def _follow_intent(self, since: IntentSnapshot) -> None:
        async for snap in self.store.watch(since):
            self.last_snapshot = snap
            try:
                await self._load_policy(snap)
                ev = self.resolve(snap, self.ctl.state)
            except IntentDecodeError as exc:
                LOG.error("[cluster] intent generation %d not adopted: %s", snap.generation,
                          exc)
                continue
            self.ctl.handle(ev)
            self._ack_dirty.set()
            self._poke()

    def _on_role(self, ev: MastershipEvent) -> None:
        self.mastership.note(ev)
        self._poke()
        self._ack_dirty.set()
        if self._ctl is not None:
            self._ctl.role_changed(ev.switch)

    def _on_step(self, ev: Event, step: Step) -> None:
        """A placement this replica adopted from its own decision (not from etcd) is
        committed; every step may end a wait for acks or connections."""
        st = step.state
        if st.placement is not self._placement:
            self._placement = st.placement
            if not isinstance(ev, IntentSynced):
                asyncio.get_running_loop().create_task(self._commit_placement(st))
        self._poke()

    async def _commit_placement(self, st: RuntimeState) -> None:
        """A placement this replica computed (a repair, a re-balance) goes to etcd, so every
        replica programs the same one; a concurrent commit wins and brings its own."""
        try:
            await self.commit(IntentChange(placement=encode_placement(st.placement)),
                              st.intent_generation)
        except StaleGeneration:
            return
        except Exception as exc:  # noqa: BLE001 - etcd unreachable: the next decision retries
            LOG.warning("[cluster] placement not committed: %s", exc)

    async def _follow_acks(self) -> None:
        prefix = self.keys.acks_prefix
        revision = 0
        while True:
            try:
                if revision == 0:
                    rng = await self.client.get_prefix(prefix)
                    self._acks = {}
                    for kv in rng:
                        self._ack_put(kv.value)
                    revision = rng.header.revision
                    self._poke()
                watch = await self.client.watch_prefix(prefix, start_revision=revision + 1)
                async for ev in watch:
                    revision = max(revision, ev.kv.mod_revision)
                    if ev.kind == "PUT":
                        self._ack_put(ev.kv.value)
                    else:
                        self._acks.pop(ev.kv.key[len(prefix):].decode(), None)
                    self._poke()
            except aetcd.RevisionCompactedError:
                revision = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any stream failure: resume
                LOG.debug("[cluster] ack watch failed (%s); resuming", exc)
                await asyncio.sleep(0.05)

    def _ack_put(self, raw: bytes) -> None:
        try:
            d = json.loads(raw)
            r = d.get("refused")
            ref = (Refusal(int(r["generation"]), 0, str(r["switch"]), None, str(r["error"]))
                   if r else None)
            self._acks[str(d["replica"])] = (int(d["generation"]), frozenset(d["in_force"]),
                                             ref)
        except (ValueError, KeyError, TypeError):
            LOG.warning("[cluster] ignoring a malformed ack %r", raw[:80])

    def in_force(self) -> frozenset[str]:
        """The switches this replica masters that hold the plan of its state now."""
        st = self.ctl.state
        return in_force(st, st.writable())

    async def _write_acks(self) -> None:
        last: tuple[int, bytes] | None = None
        while True:
            await self._ack_dirty.wait()
            self._ack_dirty.clear()
            await asyncio.sleep(0)   # one write for a burst of changes
            lease = self.service.lease_id
            if not lease:
                continue
            st = self.ctl.state
            ref = st.last_refusal
            value = json.dumps({"replica": self.opts.replica,
                                "generation": st.intent_generation,
                                "in_force": sorted(self.in_force()),
                                "refused": {"generation": ref.intent_generation,
                                            "switch": ref.switch, "error": ref.error}
                                if ref is not None else None}).encode()
            if last == (lease, value):
                continue
            try:
                await self.client.put(self.keys.ack(self.opts.replica), value, lease=lease)
                last = (lease, value)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - etcd away or the lease ended: retry
                LOG.debug("[cluster] ack not written (%s); retrying", exc)
                await asyncio.sleep(0.1)
                self._ack_dirty.set()

    # -- waiting for confirmations -------------------------------------------------------------
    def _poke(self) -> None:
        for f in self._waiters:
            if not f.done():
                f.set_result(None)
        self._waiters.clear()

    async def _changed(self, timeout_s: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(fut)
        try:
            await asyncio.wait_for(fut, max(timeout_s, 0.0))
        except TimeoutError:
            pass
        finally:
            self._waiters.discard(fut)

    def confirmed(self, switches: Iterable[str], generation: int) -> frozenset[str]:
        """Those of ``switches`` whose current master said it holds the plan of intent
        ``generation`` (or a later one)."""
        masters = self.service.masters()
        live = set(self.service.replicas())
        out = set()
        for s in switches:
            m = masters.get(s)
            if m is None or m.replica not in live:
                continue
            ack = self._acks.get(m.replica)
            if ack is not None and ack[0] >= generation and s in ack[1]:
                out.add(s)
        return frozenset(out)

    def refusal(self, generation: int) -> Refusal | None:
        """A live replica's refusal of intent ``generation`` (None: none said so)."""
        live = set(self.service.replicas())
        for name, (_, _, ref) in sorted(self._acks.items()):
            if name in live and ref is not None and ref.intent_generation == generation:
                return ref
        return None

    async def wait_generation(self, generation: int, timeout_s: float) -> bool:
        """Wait until this replica's state holds intent ``generation`` (the watch brought it);
        False on timeout."""
        end = time.monotonic() + timeout_s
        while self.ctl.state.intent_generation < generation:
            left = end - time.monotonic()
            if left <= 0:
                return False
            await self._changed(left)
        return True

    async def wait_confirmed(self, switches: Collection[str], generation: int,
                             timeout_s: float | None = None
                             ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Wait until the masters of ``switches`` confirmed intent ``generation``, at most
        ``timeout_s`` (default ``confirm_timeout_s``). Returns (confirmed, pending)."""
        want = frozenset(switches)
        end = time.monotonic() + (self.opts.confirm_timeout_s if timeout_s is None
                                  else timeout_s)
        while True:
            got = self.confirmed(want, generation)
            left = end - time.monotonic()
            if got == want or left <= 0 or self.refusal(generation) is not None:
                return tuple(sorted(got)), tuple(sorted(want - got))
            await self._changed(left)

    # -- status ---------------------------------------------------------------------------------
    def view(self) -> dict[str, Any]:
        """Who masters which switch, the live replicas, and this replica's intent generation
        (for ``aifabric status``). While etcd's view is not known now (:meth:`~controller.
        cluster.mastership.MastershipService.view_known`: etcd unreachable from here) no master
        and no replica is reported — the last ones seen may no longer write — and
        ``mastership_unknown`` says why."""
        known, why = self.service.view_known()
        masters = self.service.masters() if known else {}
        return {"replica": self.opts.replica,
                "replicas": list(self.service.replicas()) if known else [],
                "masters": {s: (t.replica, t.token) for s, t in masters.items()},
                "intent_generation": self.ctl.state.intent_generation if self._ctl else 0,
                "mastership_unknown": not known, "mastership_note": why}


class EtcdIntent:
    """The :class:`~controller.runtime.intentstore.IntentStore` of a replica: the intent in etcd
    (:mod:`controller.runtime.intentstore`). Outcomes: etcd did not take the change →
    :class:`~controller.northbound.model.NotConfirmed` (nothing changed, or not known whether
    it did: the message says which); taken but not confirmed within ``confirm_timeout_s`` (a
    switch without a live master during a failover) → ``timed_out`` with the switches
    pending."""

    def __init__(self, cluster: ClusterRuntime) -> None:
        self.cluster = cluster
        self.confirm_timeout_s = cluster.opts.confirm_timeout_s

    async def commit(self, update: IntentUpdate, state: RuntimeState,
                     planned: RuntimeState | None = None) -> int:
        # ``planned`` is not used: the intent comes back through etcd's watch
        rp = update.restore_policy
        change = IntentChange(
            policy=(update.policy.document, update.policy.source) if update.policy else None,
            register={r.collective.name: registered_spec(r) for r in update.register},
            unregister=update.unregister,
            placement=encode_placement(update.placement) if update.placement is not None
            else None,
            restore_policy=PolicyRecord(rp.document, rp.source, rp.digest, rp.generation,
                                        rp.applied_unix_s) if rp is not None else None)
        if update.policy is not None:
            self.cluster.remember_policy(update.policy.digest, update.policy.policy)
        try:
            snap = await self.cluster.commit(change, state.intent_generation)
        except StoreUnavailable as exc:
            known = ("nothing changed; retry" if exc.applied is False
                     else "the change may still land (etcd commits a proposal it took once "
                     "its quorum is back): GetStatus on any replica tells; the same request "
                     "again is safe")
            raise NotConfirmed(f"etcd did not take the change ({exc}); {known}") from None
        except UnknownCollective as exc:
            raise NotFound(str(exc)) from None
        return snap.generation

    async def wait_generation(self, generation: int, timeout_s: float) -> bool:
        return await self.cluster.wait_generation(generation, timeout_s)

    async def wait_in_force(self, switches: Collection[str], generation: int) -> InForce:
        t_end = time.monotonic() + self.confirm_timeout_s
        if not await self.cluster.wait_generation(generation, self.confirm_timeout_s):
            return InForce((), tuple(sorted(switches)), None, True)
        confirmed, pending = await self.cluster.wait_confirmed(
            switches, generation, max(0.0, t_end - time.monotonic()))
        ref = self.cluster.refusal(generation)
        return InForce(confirmed, pending, ref, bool(pending) and ref is None)
