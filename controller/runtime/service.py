"""The northbound service: :class:`~controller.northbound.model.NorthboundService` over a running
:class:`~controller.runtime.controller.Controller`, on its event loop. Every write goes one way,
alone or in a cluster (:mod:`controller.runtime.intentstore`): validate, preview the plan,
commit to the intent store, wait for the masters of the switches concerned; a change a switch
refuses is put back (the last good intent is committed again), so nothing stays half-applied.

* **register** and **unregister** validate the request at once (the field named:
  :class:`~controller.northbound.model.FieldError`), then queue it; a batcher takes every queued
  request of one kind (up to ``max_batch``) as one batch: registrations are validated again
  against the state and the batch so far (names and matches stay unique) and their new flows
  placed together around the installed ones (:func:`controller.runtime.registration.
  place_new_flows`, off the loop); the batch is one commit — one plan change, every switch
  confirming it (bundle commit reply / P4Runtime write response). Each caller gets its
  collective's paths and whether the switches on them confirmed. A full queue answers
  :class:`~controller.northbound.model.Busy`.
* **apply_policy** parses and validates a policy document in a child process within
  :class:`~controller.runtime.policycheck.DocumentLimits` (size, nesting depth, time: a
  document beyond one is :class:`~controller.northbound.model.FieldError` ``document`` naming
  the limit, INVALID_ARGUMENT; the loop never parses, :mod:`controller.runtime.policycheck`);
  every problem is located ``FILE:LINE:COL`` and nothing changes; it keeps the paths of flows
  that stay (same collective, hosts and match) and places only new ones (off the loop), and
  commits it (or only computes the per-switch difference: dry run). The policy in force gets
  the commit's generation and the document's sha256 digest; ``policy-applied``/``apply-failed``
  events and log lines say what happened.
* **paths**, **status**, **subscribe** read the state.
* **audit** reads the audit trail (:mod:`controller.runtime.audit`): :meth:`FabricService.
  _propose` keeps a record of every change it is asked for, with who asked (the
  :class:`~controller.northbound.model.Caller` the northbound server names) and the outcome;
  so does :meth:`~FabricService.apply_policy` for a document it refuses. **drift** reads the
  switches back and compares (:mod:`controller.runtime.drift`), one check at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from controller.cluster.auditlog import DEFAULT_RETENTION
from controller.cluster.store import MAX_CHANGES, StaleGeneration
from controller.errors import ConfigError, ConfigProblem, DocumentLimitError, PlanInvariantError
from controller.model.topology import Fabric
from controller.northbound.model import (
    UNKNOWN_CALLER,
    AuditPage,
    AuditSubject,
    Busy,
    Caller,
    CollectiveRequest,
    Confirmation,
    DriftReport,
    FieldError,
    FlowInfo,
    InaJobGrant,
    InaJobRequest,
    NotConfirmed,
    NotFound,
    PolicyApplyResult,
    Registration,
    SwitchDiff,
    Unavailable,
)
from controller.plan.model import SwitchChanges
from controller.plan.pinned import path_is_up, pinned_match
from controller.policy.model import Collective, Policy
from controller.runtime import core
from controller.runtime.audit import AuditTrail, Proposal, registrations_digest
from controller.runtime.auditlog import AuditLog, open_audit_log
from controller.runtime.cluster import ClusterRuntime, EtcdIntent
from controller.runtime.clustercodec import registered_spec
from controller.runtime.controller import Controller
from controller.runtime.drift import check_drift
from controller.runtime.events import BatchAnswered
from controller.runtime.ina import InaManager
from controller.runtime.intent import (
    intended_plan,
    placed_by_collective,
    placed_by_match,
    plan_tables,
)
from controller.runtime.intentstore import (
    InForce,
    IntentStore,
    IntentUpdate,
    MemoryIntent,
    synced,
    undo,
)
from controller.runtime.placement import pinned_demands_bps
from controller.runtime.policycheck import (
    DEFAULT_DOCUMENT_LIMITS,
    CheckerBusy,
    CheckerUnavailable,
    DocumentLimits,
    PolicyChecker,
)
from controller.runtime.registration import (
    collective_from_request,
    place_new_flows,
    qualified_name,
)
from controller.runtime.state import Path, PolicyInForce, Registered, RuntimeState, digest_of
from controller.te.collectives import FlowDemand, expand_collective, expand_policy
from controller.telemetry.events import Subscription

LOG = logging.getLogger("aifabric.northbound")


class _Refused(Exception):
    """A switch refused a committed change; the last good intent was put back."""


@dataclass
class _Pending:
    kind: Literal["register", "unregister"]
    req: CollectiveRequest | str
    future: asyncio.Future[Any]
    t0: float
    caller: Caller


def switches_of(placement: Mapping[FlowDemand, Path], collectives: Collection[str]) -> set[str]:
    """The switches on the paths of the flows of ``collectives``."""
    names = set(collectives)
    return {n for d, p in placement.items() if d.collective in names for n in p[1:-1]}


def _switches(st: RuntimeState, collectives: Collection[str]) -> set[str]:
    """:func:`switches_of` the state's placement, from its per-collective index."""
    by = placed_by_collective(st)
    return {n for c in collectives for p in by.get(c, {}).values() for n in p[1:-1]}


def _placed_of(st: RuntimeState, coll: Collective) -> dict[FlowDemand, Path]:
    """The placed flows of ``coll``: looked up by its own flows when every one is placed (a
    registration just committed), else from the per-collective index (built once per
    generation over every placed flow: ~15 ms at k = 16, for each registration batch)."""
    want = expand_collective(coll)
    got = {d: st.placement[d] for d in want if d in st.placement}
    return got if len(got) == len(want) else placed_by_collective(st).get(coll.name, {})


def _collective_names(st: RuntimeState) -> frozenset[str]:
    return frozenset(c.name for c in st.effective_policy.collectives)


class FabricService:
    """The northbound service of a running controller (module docstring).

    Parameters
    ----------
    controller : Controller
    sample_interval_s : float
        The statistics interval (reported by ``status``).
    max_batch : int
        Registrations (or unregistrations) committed together at most.
    max_queue : int
        Requests waiting at most; beyond, :class:`Busy`.
    wall, mono : callable
        Wall-clock and monotonic seconds.
    policy_targets : collection of str
        Render targets whose checks a new policy must pass (``check_policy_for_targets``).
    cluster : ClusterRuntime, optional
        A replica of a cluster: the intent lives in etcd (:class:`~controller.runtime.cluster.
        EtcdIntent`); ``status`` says who masters which switch. Alone, the intent lives in
        memory (:class:`~controller.runtime.intentstore.MemoryIntent`). The cluster's policy
        documents from etcd are checked by the same checker (off the loop).
    document_limits : DocumentLimits
        Bounds of a policy document (ApplyPolicy, SIGHUP); its checker is started here.
    ina : InaManager, optional
        The controller's aggregation switch (:mod:`controller.runtime.ina`); None: the
        northbound's CreateInaJob and DeleteInaJob are refused (FAILED_PRECONDITION).
    audit : AuditLog, optional
        Where the audit trail is kept (:mod:`controller.runtime.auditlog`); None: etcd in a
        cluster (10,000 records), memory alone.
    """

    def __init__(self, controller: Controller, *, sample_interval_s: float = 0.0,
                 policy_targets: Collection[str] = (),
                 max_batch: int = 512, max_queue: int = 4096,
                 wall: Callable[[], float] = time.time,
                 mono: Callable[[], float] = time.monotonic,
                 cluster: ClusterRuntime | None = None,
                 confirm_timeout_s: float = 10.0,
                 document_limits: DocumentLimits = DEFAULT_DOCUMENT_LIMITS,
                 ina: InaManager | None = None,
                 audit: AuditLog | None = None) -> None:
        self.controller = controller
        self.ina = ina
        self.cluster = cluster
        self.store: IntentStore = (EtcdIntent(cluster) if cluster is not None
                                   else MemoryIntent(controller, confirm_timeout_s))
        self.sample_interval_s = sample_interval_s
        self.policy_targets = frozenset(policy_targets)
        self.max_batch = min(max_batch, MAX_CHANGES)
        self.max_queue = max_queue
        self._arrived = asyncio.Event()   # a request was queued (wakes the batch gathering)
        self.wall = wall
        self.mono = mono
        self._queue: list[_Pending] = []
        self._batcher: asyncio.Task[None] | None = None
        self.batches = 0
        self.checker = PolicyChecker(document_limits)
        if cluster is not None:
            cluster.use_checker(self._check_document)
        if audit is None:
            audit = open_audit_log(None, DEFAULT_RETENTION, controller.executor, cluster)
        self.replica = cluster.opts.replica if cluster is not None else ""
        self.trail = AuditTrail(audit, replica=self.replica, publish=controller.publish,
                                wall=wall)
        self.trail.watch_roles(controller)
        self._drift: asyncio.Lock | None = None

    @property
    def state(self) -> RuntimeState:
        return self.controller.state

    def close(self) -> None:
        """Kill the policy checker's worker process (a check in flight fails Unavailable)."""
        self.checker.close()

    # -- the one write path ------------------------------------------------------------------------
    async def _propose(self, st: RuntimeState, update: IntentUpdate, switches: Collection[str],
                       what: str, ask: Proposal,
                       previewed: tuple[SwitchDiff, ...] | None = None) -> InForce:
        """Preview ``update`` on ``st`` (its plan must pass every invariant; off the loop;
        ``previewed``: the caller did, this is its diff), commit it, and wait for the masters
        of ``switches``. A refusal puts ``st``'s intent back. Every outcome but a stale
        generation (tried again by :meth:`_retrying`) is kept in the audit trail as ``ask``.

        Raises StaleGeneration, PlanInvariantError / ValueError (nothing committed),
        NotConfirmed / NotFound (the store did not take it), _Refused."""
        planned: RuntimeState | None = None
        if previewed is not None:
            diff = previewed
        else:
            try:
                planned, _, diff = await asyncio.get_running_loop().run_in_executor(
                    self.controller.executor, _preview, st, update, self.wall(), self.mono())
            except (PlanInvariantError, ValueError) as exc:
                await self.trail.proposed(ask, "not-applied",
                                          policy_generation=st.policy.generation,
                                          detail=f"its plan is invalid: {exc}")
                raise
        try:
            gen = await self.store.commit(update, st, planned)
        except (NotConfirmed, NotFound, ValueError) as exc:
            await self.trail.proposed(ask, "not-applied", diff=diff,
                                      policy_generation=st.policy.generation, detail=str(exc))
            raise
        res = await self.store.wait_in_force(switches, gen)
        if res.refusal is None:
            await self.trail.proposed(
                ask, "pending" if res.pending else "in-force", diff=diff,
                intent_generation=gen, policy_generation=self.state.policy.generation,
                detail=f"not confirmed yet by {', '.join(res.pending)}" if res.pending else "")
            return res
        ref = res.refusal
        back = ""
        now = self.state
        if now.intent_generation == gen:
            try:
                back_gen = await self.store.commit(undo(st, update), now)
                back = (f"; intent generation {back_gen} puts back the last good intent "
                        f"(policy generation {st.policy.generation})")
            except (StaleGeneration, NotConfirmed, ValueError) as exc:
                back = f"; putting the last good intent back failed: {exc}"
        else:
            back = (f"; the intent moved on (generation {now.intent_generation}) and is not put "
                    "back")
        LOG.error("[fabric %s] %s refused by %s, rolled back: %s%s", st.fabric.name, what,
                  ref.switch, ref.error, back)
        await self.trail.proposed(ask, "refused", diff=diff, intent_generation=gen,
                                  policy_generation=self.state.policy.generation,
                                  detail=f"refused by {ref.switch}: {ref.error}{back}")
        raise _Refused(f"{ref.error}{back}")

    async def _retrying(self, attempt: Callable[[], Any], what: str) -> Any:
        """``attempt()`` again while the intent moves on under it (at most three times)."""
        for _ in range(3):
            try:
                return await attempt()
            except StaleGeneration as exc:
                await self.store.wait_generation(exc.actual, self.store.confirm_timeout_s)
        raise NotConfirmed(f"{what}: the intent kept changing while it was decided; retry")

    # -- registration ---------------------------------------------------------------------------
    async def register(self, req: CollectiveRequest,
                       caller: Caller = UNKNOWN_CALLER) -> Registration:
        st = self.state
        if st.policy.policy.routing.mode != "pinned":
            raise Unavailable(f"routing.mode is {st.policy.policy.routing.mode!r}: the "
                              "controller pins collectives only in 'pinned' mode")
        again = await self._registered_again(req)
        if again is not None:
            return again
        collective_from_request(req, st.fabric, st.effective_policy,
                                names=_collective_names(st), matches=placed_by_match(st))
        reg: Registration = await self._enqueue("register", req, caller)
        return reg

    async def unregister(self, name: str,
                         caller: Caller = UNKNOWN_CALLER) -> tuple[Confirmation, int]:
        st = self.state
        if any(c.name == name for c in st.policy.policy.collectives):
            raise Unavailable(f"collective {name!r} is declared by the policy file, not "
                              "registered; change the policy instead")
        if name not in st.registered:
            raise NotFound(f"no registered collective {name[:64]!r}")
        out: tuple[Confirmation, int] = await self._enqueue("unregister", name, caller)
        return out

    async def _enqueue(self, kind: Literal["register", "unregister"],
                       req: CollectiveRequest | str, caller: Caller) -> Any:
        if len(self._queue) >= self.max_queue:
            raise Busy(f"{len(self._queue)} requests are waiting (limit {self.max_queue}); "
                       "retry later")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(kind, req, fut, self.wall(), caller))
        self._arrived.set()
        if self._batcher is None or self._batcher.done():
            self._batcher = asyncio.create_task(self._batches(), name="northbound-batcher")
        return await fut

    async def _registered_again(self, req: CollectiveRequest) -> Registration | None:
        """A request repeated after UNAVAILABLE (exactly the same collective is in the intent)
        waits for it to be in force; None otherwise."""
        st = self.state
        name = qualified_name(req.job, req.name)
        r = st.registered.get(name)
        if r is None:
            return None
        pol = st.effective_policy
        others = pol.model_copy(update={"collectives": tuple(
            c for c in pol.collectives if c.name != name)})
        try:
            coll = collective_from_request(req, st.fabric, others,
                                           [d for d in st.placement if d.collective != name])
        except FieldError:
            return None
        if not (r.collective == coll and r.job == req.job
                and r.expected_bytes == req.expected_bytes):
            return None
        t0 = self.wall()
        res = await self.store.wait_in_force(_switches(st, [name]), st.intent_generation)
        conf = self._confirmation(res, t0, f"collective {name}", st.intent_generation)
        return Registration(name, tuple(self._flows(name)), conf, self.state.plan_generation)

    async def _gather(self) -> None:
        """Let concurrent callers join the batch (:meth:`~controller.runtime.batching.
        BatchWindow.wait_s`: while they keep arriving within its quiet time, or those expected
        have not all come, at most its window). A lone request waits the quiet time."""
        loop = asyncio.get_running_loop()
        start = last = loop.time()
        seen = len(self._queue)
        while True:
            now = loop.time()
            if len(self._queue) != seen:
                seen, last = len(self._queue), now
            wait = self.state.batching.wait_s(seen, self.max_batch, now - start, now - last)
            if wait <= 0:
                return
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), wait)

    async def _batches(self) -> None:
        while self._queue:
            await self._gather()
            kind = self._queue[0].kind
            batch = [p for p in self._queue if p.kind == kind][:self.max_batch]
            taken = {id(p) for p in batch}
            self._queue = [p for p in self._queue if id(p) not in taken]
            t0 = asyncio.get_running_loop().time()
            try:
                if kind == "register":
                    await self._register_batch(batch)
                else:
                    await self._unregister_batch(batch)
            except (NotConfirmed, Unavailable, NotFound) as exc:
                LOG.warning("[northbound] %s: %s", kind, exc)
                self._fail(batch, exc)
            except Exception as exc:  # noqa: BLE001 - every caller gets an answer
                LOG.exception("[northbound] %s batch failed", kind)
                self._fail(batch, Unavailable(f"{kind} failed: {exc}"))
            finally:
                self.controller.handle(BatchAnswered(
                    len(batch), asyncio.get_running_loop().time() - t0, len(self._queue)))

    @staticmethod
    def _fail(batch: list[_Pending], exc: Exception) -> None:
        for p in batch:
            if not p.future.done():
                p.future.set_exception(exc)

    async def _register_batch(self, batch: list[_Pending]) -> None:
        async def attempt() -> None:
            st = self.state
            ok: list[tuple[_Pending, Collective]] = []
            policy = st.effective_policy
            # the names and matches taken so far, the batch's included (built once: checking
            # each request against the whole placement made a batch quadratic)
            taken = set(_collective_names(st))
            matches = dict(placed_by_match(st))
            for p in batch:
                if p.future.done():
                    continue
                assert isinstance(p.req, CollectiveRequest)
                try:
                    coll = collective_from_request(p.req, st.fabric, policy, names=taken,
                                                   matches=matches)
                except FieldError as exc:
                    p.future.set_exception(exc)
                    continue
                ok.append((p, coll))
                taken.add(coll.name)
                for d in expand_collective(coll):
                    matches[pinned_match(st.fabric, d)] = d
            if not ok:
                return
            new = [d for _, c in ok for d in expand_collective(c)]
            loop = asyncio.get_running_loop()
            try:
                placement = await loop.run_in_executor(
                    self.controller.executor, _place, st.fabric, dict(st.placement), new,
                    st.down_links)
            except ValueError as exc:
                for p, _ in ok:
                    p.future.set_exception(FieldError("ranks", str(exc)))
                return
            entries = tuple(Registered(c, p.req.job, p.req.expected_bytes, p.t0)  # type: ignore[union-attr]
                            for p, c in ok)
            names = [c.name for _, c in ok]
            what = f"registering {', '.join(names)}"
            ask = Proposal("register", tuple(AuditSubject(c.name, p.caller) for p, c in ok),
                           registrations_digest([registered_spec(e) for e in entries]))
            try:
                res = await self._propose(st, IntentUpdate(register=entries, placement=placement),
                                          switches_of(placement, names), what, ask)
            except (PlanInvariantError, ValueError) as exc:
                raise Unavailable(f"the plan with {', '.join(names)} is invalid: {exc}") from None
            except _Refused as exc:
                raise Unavailable(f"the plan with {', '.join(names)} was not applied: "
                                  f"{exc}") from None
            self.batches += 1
            now = self.state
            gen = now.intent_generation
            for p, coll in ok:
                placed = _placed_of(now, coll)
                conf = self._confirmation(res, p.t0, f"registering {coll.name}", gen,
                                          {n for path in placed.values() for n in path[1:-1]})
                reg = Registration(coll.name, tuple(self._flow_infos(placed)), conf,
                                   now.plan_generation)
                self.controller.publish(
                    "registered", f"collective {coll.name} registered: {len(reg.flows)} pinned "
                    f"flow(s), {len(conf.switches_updated)} switch(es) updated, "
                    f"{'in force' if conf.in_force else 'pending'}", collective=coll.name)
                LOG.info("[fabric %s] northbound: registered %s (%s) with %d flows; %s in "
                         "%.1f ms", st.fabric.name, coll.name, " ".join(coll.ranks),
                         len(reg.flows), "in force" if conf.in_force
                         else f"pending on {', '.join(conf.switches_pending)}", conf.apply_ms)
                if not p.future.done():
                    p.future.set_result(reg)

        await self._retrying(attempt, "registering")

    async def _unregister_batch(self, batch: list[_Pending]) -> None:
        async def attempt() -> None:
            st = self.state
            names: list[str] = []
            callers: dict[str, Caller] = {}
            for p in batch:
                if p.future.done():
                    continue
                name = str(p.req)
                if name not in st.registered:
                    p.future.set_exception(NotFound(f"no registered collective {name[:64]!r}"))
                elif name not in names:
                    names.append(name)
                    callers[name] = p.caller
            if not names:
                return
            gone = set(names)
            on = _switches(st, gone)
            placement = {d: p for d, p in st.placement.items() if d.collective not in gone}
            what = f"unregistering {', '.join(names)}"
            ask = Proposal("unregister", tuple(AuditSubject(n, callers[n]) for n in names))
            try:
                res = await self._propose(st, IntentUpdate(unregister=frozenset(gone),
                                                           placement=placement), on, what, ask)
            except (PlanInvariantError, ValueError, _Refused) as exc:
                raise Unavailable(f"{what} failed: {exc}") from None
            self.batches += 1
            gen = self.state.intent_generation
            for p in batch:
                name = str(p.req)
                if p.future.done() or name not in gone:
                    continue
                conf = self._confirmation(res, p.t0, f"unregistering {name}", gen,
                                          _switches(st, [name]))
                self.controller.publish("unregistered", f"collective {name} unregistered",
                                        collective=name)
                LOG.info("[fabric %s] northbound: unregistered %s", st.fabric.name, name)
                p.future.set_result((conf, self.state.plan_generation))

        await self._retrying(attempt, "unregistering")

    def _confirmation(self, res: InForce, t0: float, what: str, generation: int,
                      on: Collection[str] | None = None) -> Confirmation:
        """The confirmation of one request from what its batch's wait saw (``on``: the
        switches that request concerns). Raises NotConfirmed when the wait timed out with
        switches pending (the change is in the intent and goes in force when they answer)."""
        want = set(res.confirmed) | set(res.pending) if on is None else set(on)
        pending = tuple(sorted(want & set(res.pending)))
        if pending and res.timed_out:
            raise NotConfirmed(
                f"{what} is in the cluster's intent (generation {generation}) but the masters of "
                f"{', '.join(pending)} did not confirm within {self.store.confirm_timeout_s:g} s "
                "(no live master during a failover?); it goes in force when they answer; the "
                "same request again waits again")
        updated = tuple(sorted(want & set(res.confirmed)))
        now = self.wall()
        if pending:
            return Confirmation(False, 0.0, 0.0, updated, pending)
        return Confirmation(True, now, (now - t0) * 1e3, updated, ())

    # -- reading ------------------------------------------------------------------------------------
    def _flows(self, collective: str = "") -> list[FlowInfo]:
        st = self.state
        return self._flow_infos(placed_by_collective(st).get(collective, {}) if collective
                                else st.placement)

    def _flow_infos(self, placed: Mapping[FlowDemand, Path]) -> list[FlowInfo]:
        st = self.state
        tel = self.controller.telemetry
        fb = tel.flow_bytes if tel is not None else {}
        out = []
        for d, p in sorted(placed.items()):
            m = pinned_match(st.fabric, d).fields()
            out.append(FlowInfo(d, p, fb.get(d, 0), ",".join(f"{k}={v}" for k, v in m.items()
                                                             if k != "eth_type")))
        return out

    async def paths(self, collective: str = "") -> list[FlowInfo]:
        st = self.state
        names = {c.name for c in st.effective_policy.collectives}
        if collective and collective not in names:
            known = ", ".join(sorted(names)) or "none"
            raise NotFound(f"no collective {collective[:64]!r} (known: {known})")
        return self._flows(collective)

    async def status(self) -> Mapping[str, Any]:
        st = self.state
        tel = self.controller.telemetry
        now = self.mono()
        last = tel.last_sample_s if tel is not None else {}
        switches = [{"name": s.name, "dpid": s.dpid, "connected": st.session(s.name).connected,
                     "last_sample_age_s": (now - last[s.name]) if s.name in last else -1.0,
                     "southbound": st.kind_of(s.name),
                     "role": st.session(s.name).role} for s in st.fabric.switches]
        colls = []
        if tel is not None:
            for c in tel.collective_status():
                r = st.registered.get(c.name)
                colls.append({"name": c.name, "source": "northbound" if r else "policy",
                              "flows": len(c.flows), "bytes_total": c.bytes_total,
                              "collision_links": len(c.collision_links),
                              "expected_bytes": (r.expected_bytes if r else None) or 0})
        p = st.policy
        rep = plan_tables(st)
        tables = None if rep is None else {
            "switches": [{"switch": t.switch, "pinned_needed": t.pinned_needed,
                          "pinned": t.pinned, "room": -1 if t.room is None else t.room,
                          "source": t.capacity.source}
                         for t in sorted(rep.switches.values(), key=lambda t: (-t.pinned,
                                                                               t.switch))],
            "notes": list(rep.notes), "fallback_flows": [d.label for d in rep.fallback]}
        return {
            "fabric": st.fabric.name, "routing_mode": p.policy.routing.mode,
            "sample_interval_s": self.sample_interval_s, "plan_generation": st.plan_generation,
            "switches": switches, "links": tel.link_status() if tel is not None else [],
            "collectives": colls,
            "alerts": [{"alert": a.kind, "subject": a.subject, "switch": a.switch,
                        "age_s": now - a.since_s, "message": a.message}
                       for a in (tel.active_alerts() if tel is not None else [])],
            "traffic": tel.traffic_matrix() if tel is not None else {},
            "policy": {"generation": p.generation, "digest": p.digest, "source": p.source,
                       "applied_unix_s": p.applied_unix_s},
            "tables": tables,
            "cluster": self.cluster.view() if self.cluster is not None else None,
        }

    async def create_ina_job(self, req: InaJobRequest) -> InaJobGrant:
        """:meth:`controller.runtime.ina.InaManager.create` (the protocol's contract)."""
        if self.ina is None:
            raise Unavailable("this controller has no in-network aggregation switch (start it "
                              "with --ina-switch ADDRESS --ina-host HOST)")
        return await self.ina.create(req)

    async def delete_ina_job(self, name: str) -> None:
        """:meth:`controller.runtime.ina.InaManager.delete`."""
        if self.ina is None:
            raise Unavailable("this controller has no in-network aggregation switch")
        await self.ina.delete(name)
    async def audit(self, after: int, limit: int) -> AuditPage:
        """The audit records after ``after`` (at most ``limit``). Raises Unavailable."""
        return await self.trail.page(after, limit)

    async def drift(self, switches: tuple[str, ...]) -> DriftReport:
        """Every switch (or those named) read back against its intended plan
        (:func:`~controller.runtime.drift.check_drift`; each read has the confirmation
        timeout). Raises NotFound, Busy (a check is running)."""
        if self._drift is None:
            self._drift = asyncio.Lock()
        if self._drift.locked():
            raise Busy("a drift check is running; retry when it is done")
        async with self._drift:
            return await check_drift(self.controller, switches,
                                     timeout_s=self.state.settings.confirm_timeout_s,
                                     replica=self.replica, wall=self.wall)

    def subscribe(self, kinds: frozenset[str] | None) -> Subscription:
        bus = self.controller.events
        if bus is None:
            raise Unavailable("this controller publishes no events")
        try:
            sub: Subscription = bus.subscribe(kinds)
        except ValueError as exc:
            raise FieldError("kinds", str(exc)) from None
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        bus = self.controller.events
        if bus is not None:
            bus.unsubscribe(sub)

    # -- policy ---------------------------------------------------------------------------------------
    async def _check_document(self, document: str, source_name: str) -> Policy:
        """The policy of ``document`` checked for this fabric and its targets, in the checker's
        child process. Raises ConfigError (located problems), DocumentLimitError, CheckerBusy,
        CheckerUnavailable."""
        return await self.checker.check(document, source_name, self.state.fabric,
                                        self.policy_targets)

    async def apply_policy(self, document: str, source_name: str, dry_run: bool,
                           caller: Caller = UNKNOWN_CALLER) -> PolicyApplyResult:
        """Raises FieldError (``document`` beyond a limit of :class:`DocumentLimits`, the limit
        named), Busy (too many documents being checked), Unavailable (no checker process).
        Unless ``dry_run``, the outcome is kept in the audit trail with ``caller``."""
        loop = asyncio.get_running_loop()
        ask = Proposal("policy", (AuditSubject(source_name, caller),), digest_of(document))
        try:
            policy = await self._check_document(document, source_name)
        except DocumentLimitError as exc:
            self._beyond_limit(exc, dry_run, source_name)
            if not dry_run:
                await self.trail.proposed(ask, "invalid",
                                          policy_generation=self.state.policy.generation,
                                          detail=f"limit {exc.limit}: {exc.problems[0]}")
            raise FieldError("document", str(exc.problems[0])) from None
        except ConfigError as exc:
            return await self._invalid(exc.problems, dry_run, source_name, ask)
        except CheckerBusy as exc:
            raise Busy(str(exc)) from None
        except CheckerUnavailable as exc:
            raise Unavailable(str(exc)) from None
        problems = _registration_problems(policy, self.state, source_name)
        if problems:
            return await self._invalid(problems, dry_run, source_name, ask)
        diff: tuple[SwitchDiff, ...] = ()

        async def attempt() -> PolicyApplyResult:
            nonlocal diff
            st = self.state
            cur = st.policy
            try:
                placement = await loop.run_in_executor(
                    self.controller.executor, _replace_policy_placement, st, policy)
            except ValueError as exc:
                return await self._invalid([_problem(source_name, "collectives", str(exc))],
                                           dry_run, source_name, ask)
            pif = PolicyInForce(policy, document, source_name, st.intent_generation + 1,
                                digest_of(document), self.wall())
            update = IntentUpdate(policy=pif, placement=placement)
            try:   # the plan of a large policy takes long: off the loop
                _, changes, diff = await loop.run_in_executor(
                    self.controller.executor, _preview, st, update, pif.applied_unix_s,
                    self.mono())
            except (PlanInvariantError, ValueError) as exc:
                if not dry_run:
                    await self.trail.proposed(ask, "not-applied",
                                              policy_generation=cur.generation,
                                              detail=f"its plan is invalid: {exc}")
                return self._failed(source_name, dry_run, str(exc), ())
            if dry_run:
                LOG.info("[fabric %s] policy %s (dry run): %s", st.fabric.name, source_name,
                         _summary(diff))
                return PolicyApplyResult(True, True, (), diff, cur.generation, cur.digest)
            try:
                res = await self._propose(st, update, set(changes), f"policy {source_name}",
                                          ask, previewed=diff)
            except (_Refused, NotConfirmed, PlanInvariantError, ValueError) as exc:
                return self._failed(source_name, False, str(exc), diff)
            now_in = self.state.policy
            now = self.wall()
            conf = Confirmation(not res.pending, now if not res.pending else 0.0,
                                (now - pif.applied_unix_s) * 1e3 if not res.pending else 0.0,
                                res.confirmed, res.pending)
            LOG.info("[fabric %s] policy generation %d applied from %s (sha256 %s): %s%s",
                     st.fabric.name, now_in.generation, source_name, now_in.digest,
                     _summary(diff), f"; not yet confirmed on {', '.join(res.pending)}"
                     if res.pending else "")
            self.controller.publish("policy-applied", f"policy generation {now_in.generation} "
                                    f"(sha256 {now_in.digest[:12]}) from {source_name}: "
                                    f"{_summary(diff)}")
            return PolicyApplyResult(True, False, (), diff, now_in.generation, now_in.digest,
                                     "", conf)

        try:
            out: PolicyApplyResult = await self._retrying(attempt, f"policy {source_name}")
        except NotConfirmed as exc:
            if not dry_run:
                await self.trail.proposed(ask, "not-applied", diff=diff,
                                          policy_generation=self.state.policy.generation,
                                          detail=str(exc))
            return self._failed(source_name, dry_run, str(exc), diff)
        return out

    async def _invalid(self, problems: Any, dry_run: bool, source: str,
                       ask: Proposal) -> PolicyApplyResult:
        """:meth:`_refused`, kept in the audit trail (unless ``dry_run``)."""
        probs = tuple(problems)
        res = self._refused(probs, dry_run, source)
        if not dry_run:
            await self.trail.proposed(ask, "invalid", policy_generation=res.generation,
                                      detail=f"{len(probs)} problem(s); first: "
                                             f"{probs[0] if probs else '?'}")
        return res

    def _beyond_limit(self, exc: DocumentLimitError, dry_run: bool, source: str) -> None:
        cur = self.state.policy
        LOG.error("[fabric %s] policy %s refused (limit %s), generation %d stays in force: %s",
                  self.state.fabric.name, source, exc.limit, cur.generation, exc.problems[0])
        if not dry_run:
            self.controller.publish("apply-failed", f"policy {source} refused (limit "
                                    f"{exc.limit}); generation {cur.generation} stays in force")

    def _failed(self, source: str, dry_run: bool, error: str,
                diff: tuple[SwitchDiff, ...]) -> PolicyApplyResult:
        cur = self.state.policy
        if not dry_run:
            LOG.error("[fabric %s] policy %s not applied, generation %d stays in force: %s",
                      self.state.fabric.name, source, cur.generation, error)
            self.controller.publish("apply-failed", f"policy {source} not applied, generation "
                                    f"{cur.generation} stays: {error}")
        return PolicyApplyResult(False, dry_run, (), diff, cur.generation, cur.digest, error)

    def _refused(self, problems: Any, dry_run: bool, source: str) -> PolicyApplyResult:
        cur = self.state.policy
        probs = tuple(problems)
        for p in probs:
            LOG.error("%s", p)
        if not dry_run:
            self.controller.publish("apply-failed", f"policy {source} refused ({len(probs)} "
                                    f"problem(s); first: {probs[0] if probs else '?'}); "
                                    f"generation {cur.generation} stays in force")
        return PolicyApplyResult(False, dry_run, probs, (), cur.generation, cur.digest,
                                 "the policy has problems; nothing changed")


def _preview(st: RuntimeState, update: IntentUpdate, applied_unix_s: float, now_s: float
             ) -> tuple[RuntimeState, dict[str, SwitchChanges], tuple[SwitchDiff, ...]]:
    """The state committing ``update`` on ``st`` adopts (its plan computed: the commit takes
    it over, :attr:`~controller.runtime.events.IntentSynced.planned`) and what it would
    change, per switch (pure; run in the executor). Raises PlanInvariantError / ValueError
    when its plan breaks an invariant."""
    preview = core.adopt(st, synced(st, update, st.intent_generation + 1, applied_unix_s),
                         now_s)
    changes = dict(core.plan_diff(st, preview))
    if preview.generation != st.generation:
        preview.memo.diffs = (intended_plan(st), intended_plan(preview), changes)
    return preview, changes, switch_diffs(changes)


def _place(fabric: Fabric, installed: Mapping[FlowDemand, Path], new: list[FlowDemand],
           down: frozenset[frozenset[str]]) -> dict[FlowDemand, Path]:
    live = {d: p for d, p in installed.items() if path_is_up(p, down)}
    demands = pinned_demands_bps(fabric, [*live, *new])
    placed = place_new_flows(fabric, live, demands, new, down)
    return {**installed, **{d: placed[d] for d in new}}  # stranded flows wait for their repair


def _flow_key(d: FlowDemand) -> tuple[Any, ...]:
    return (d.collective, d.src, d.dst, d.dscp, d.ip_proto, d.l4_src, d.l4_dst)


def _replace_policy_placement(st: RuntimeState, policy: Policy) -> dict[FlowDemand, Path]:
    """The placement under ``policy``: flows that stay (same collective, hosts and match) keep
    their paths; new ones are placed around them; registered collectives keep theirs."""
    if policy.routing.mode != "pinned":
        return {}
    down = st.down_links
    old = {_flow_key(d): p for d, p in st.placement.items() if path_is_up(p, down)}
    regs = tuple(r.collective for r in st.registered.values())
    full = policy.model_copy(update={"collectives": (*policy.collectives, *regs)})
    keep: dict[FlowDemand, Path] = {}
    new: list[FlowDemand] = []
    for d in expand_policy(full, st.fabric):
        p = old.get(_flow_key(d))
        if p is not None:
            keep[d] = p
        else:
            new.append(d)
    if not new:
        return keep
    demands = pinned_demands_bps(st.fabric, [*keep, *new])
    return place_new_flows(st.fabric, keep, demands, new, down)


def _problem(source: str, field: str, message: str) -> ConfigProblem:
    return ConfigProblem(source, 0, 0, field, message)


def _registration_problems(policy: Policy, st: RuntimeState, source: str) -> list[Any]:
    out = []
    if st.registered and policy.routing.mode != "pinned":
        out.append(_problem(source, "routing.mode", f"{policy.routing.mode!r} would drop the "
                            f"{len(st.registered)} collective(s) registered through the "
                            "northbound API; unregister them first"))
    taken = set(st.registered) & {c.name for c in policy.collectives}
    for name in sorted(taken):
        out.append(_problem(source, "collectives", f"{name!r} is registered through the "
                            "northbound API; unregister it or rename the policy's"))
    return out


def switch_diffs(changes: Mapping[str, SwitchChanges]) -> tuple[SwitchDiff, ...]:
    """One :class:`SwitchDiff` per changed switch (next-hop sets counted as groups)."""
    out = []
    for name in sorted(changes):
        ch = changes[name]
        old_sets = {f.action.next_hops for f in (*ch.delete_flows, *ch.modified_from)
                    if f.action.next_hops is not None}
        new_sets = {f.action.next_hops for f in (*ch.add_flows, *ch.modify_flows)
                    if f.action.next_hops is not None}
        out.append(SwitchDiff(name, len(ch.add_flows), len(ch.modify_flows),
                              len(ch.delete_flows), len(new_sets - old_sets), 0,
                              len(old_sets - new_sets), ch.lines()))
    return tuple(out)


def _summary(diff: tuple[SwitchDiff, ...]) -> str:
    if not diff:
        return "no entry changes"
    a = sum(d.flows_added for d in diff)
    m = sum(d.flows_modified for d in diff)
    r = sum(d.flows_deleted for d in diff)
    return (f"{len(diff)} switch(es): +{a} ~{m} -{r} entries ("
            + ", ".join(f"{d.switch} +{d.flows_added} ~{d.flows_modified} -{d.flows_deleted}"
                        for d in diff) + ")")


__all__ = ["FabricService", "switch_diffs"]
