"""The northbound service: :class:`~controller.northbound.model.NorthboundService` over a running
:class:`~controller.runtime.controller.Controller`, on its event loop.

* **register** validates the request at once (the field named: :class:`~controller.northbound.
  model.FieldError`), then queues it; a batcher takes every queued request (up to
  ``max_batch``) as one batch: each is validated again against the state and the batch so far
  (names and matches stay unique), the new flows are placed together around the installed ones
  (:func:`controller.runtime.registration.place_new_flows`, off the loop), and the batch is one
  proposal — one plan change, one transaction, every switch confirming it (bundle commit reply /
  P4Runtime write response). Each caller gets its collective's paths and whether the switches on
  them confirmed. A full queue answers :class:`~controller.northbound.model.Busy`.
* **apply_policy** validates a policy document (every problem located ``FILE:LINE:COL``;
  nothing changes), keeps the paths of flows that stay (same collective, hosts and match) and
  places only new ones, and applies the difference as one transaction (or only computes it:
  dry run). The policy in force gets the next generation and the document's sha256 digest;
  ``policy-applied``/``apply-failed`` events and log lines say what happened.
* **unregister**, **paths**, **status**, **subscribe** read or change the state the same way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from controller.cluster.store import StaleGeneration
from controller.errors import ConfigError, PlanInvariantError
from controller.model.topology import Fabric
from controller.northbound.model import (
    Busy,
    CollectiveRequest,
    Confirmation,
    FieldError,
    FlowInfo,
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
from controller.qos.validate import check_policy_for_targets
from controller.runtime import clusterservice
from controller.runtime.cluster import ClusterRuntime
from controller.runtime.controller import Controller, Proposal
from controller.runtime.events import (
    CollectivesRegistered,
    CollectiveUnregistered,
    PolicyApplied,
)
from controller.runtime.intent import plan_tables
from controller.runtime.placement import pinned_demands_bps
from controller.runtime.registration import (
    collective_from_request,
    place_new_flows,
    qualified_name,
)
from controller.runtime.state import Path, PolicyInForce, Registered, RuntimeState, digest_of
from controller.te.collectives import FlowDemand, expand_collective, expand_policy
from controller.telemetry.events import Subscription
from controller.yamlsrc import parse_document

LOG = logging.getLogger("aifabric.northbound")


@dataclass
class _Pending:
    req: CollectiveRequest
    future: asyncio.Future[Registration]
    t0: float


class FabricService:
    """The northbound service of a running controller (module docstring).

    Parameters
    ----------
    controller : Controller
    sample_interval_s : float
        The statistics interval (reported by ``status``).
    max_batch : int
        Registrations planned together at most.
    max_queue : int
        Registrations waiting at most; beyond, :class:`Busy`.
    batch_window_s, batch_quiet_s : float
        A batch waits for more concurrent requests while they keep coming (each within
        ``batch_quiet_s`` of the last), at most ``batch_window_s`` (s).
    wall, mono : callable
        Wall-clock and monotonic seconds.
    policy_targets : collection of str
        Render targets whose checks a new policy must pass (``check_policy_for_targets``).
    cluster : ClusterRuntime, optional
        A replica of a cluster: writes go to etcd first (:mod:`controller.runtime.
        clusterservice`); ``status`` says who masters which switch.
    """

    def __init__(self, controller: Controller, *, sample_interval_s: float = 0.0,
                 policy_targets: Collection[str] = (),
                 max_batch: int = 512, max_queue: int = 4096,
                 batch_window_s: float = 0.05, batch_quiet_s: float = 0.005,
                 wall: Callable[[], float] = time.time,
                 mono: Callable[[], float] = time.monotonic,
                 cluster: ClusterRuntime | None = None) -> None:
        self.controller = controller
        self.cluster = cluster
        self.sample_interval_s = sample_interval_s
        self.policy_targets = frozenset(policy_targets)
        if cluster is not None:
            max_batch = min(max_batch, clusterservice.MAX_BATCH)
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.batch_window_s = batch_window_s
        self.batch_quiet_s = batch_quiet_s
        self.wall = wall
        self.mono = mono
        self._queue: list[_Pending] = []
        self._wake = asyncio.Event()
        self._batcher: asyncio.Task[None] | None = None
        self.batches = 0

    @property
    def state(self) -> RuntimeState:
        return self.controller.state

    # -- registration ---------------------------------------------------------------------------
    async def register(self, req: CollectiveRequest) -> Registration:
        st = self.state
        if st.policy.policy.routing.mode != "pinned":
            raise Unavailable(f"routing.mode is {st.policy.policy.routing.mode!r}: the "
                              "controller pins collectives only in 'pinned' mode")
        if self.cluster is not None:
            again = await self._registered_again(req)
            if again is not None:
                return again
        collective_from_request(req, st.fabric, st.effective_policy, st.placement)
        if len(self._queue) >= self.max_queue:
            raise Busy(f"{len(self._queue)} registrations are waiting (limit {self.max_queue}); "
                       "retry later")
        fut: asyncio.Future[Registration] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(req, fut, self.wall()))
        self._wake.set()
        if self._batcher is None or self._batcher.done():
            self._batcher = asyncio.create_task(self._batches(), name="registration-batcher")
        return await fut

    async def _registered_again(self, req: CollectiveRequest) -> Registration | None:
        """A cluster replica answers a request repeated after UNAVAILABLE (exactly the same
        collective is in the intent) by waiting for it to be in force; None otherwise."""
        st = self.state
        name = qualified_name(req.job, req.name)
        if name not in st.registered or self.cluster is None:
            return None
        pol = st.effective_policy
        others = pol.model_copy(update={"collectives": tuple(
            c for c in pol.collectives if c.name != name)})
        try:
            coll = collective_from_request(req, st.fabric, others,
                                           [d for d in st.placement if d.collective != name])
        except FieldError:
            return None
        if not clusterservice.already_registered(st, coll, req.job, req.expected_bytes):
            return None
        t0 = self.wall()
        conf, _ = await clusterservice.confirm_existing(self.cluster, st, name, t0)
        return Registration(name, tuple(self._flows(name)), conf, self.state.plan_generation)

    async def _gather(self) -> None:
        """Let concurrent callers join the batch: wait while requests keep arriving (each
        within ``batch_quiet_s`` of the last), at most ``batch_window_s``."""
        t_end = asyncio.get_running_loop().time() + self.batch_window_s
        seen = -1
        while len(self._queue) != seen and len(self._queue) < self.max_batch:
            seen = len(self._queue)
            left = t_end - asyncio.get_running_loop().time()
            if left <= 0:
                return
            await asyncio.sleep(min(self.batch_quiet_s, left))

    async def _batches(self) -> None:
        while self._queue:
            await self._gather()
            batch, self._queue = self._queue[:self.max_batch], self._queue[self.max_batch:]
            try:
                await self._register_batch(batch)
            except Exception as exc:  # noqa: BLE001 - every caller gets an answer
                LOG.exception("[northbound] registration batch failed")
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(Unavailable(f"registration failed: {exc}"))

    async def _register_batch(self, batch: list[_Pending]) -> None:
        for attempt in range(3):
            st = self.state
            ok: list[tuple[_Pending, Collective]] = []
            policy = st.effective_policy
            pinned = dict(st.placement)
            for p in batch:
                if p.future.done():
                    continue
                try:
                    coll = collective_from_request(p.req, st.fabric, policy, pinned)
                except FieldError as exc:
                    p.future.set_exception(exc)
                    continue
                ok.append((p, coll))
                policy = policy.model_copy(update={"collectives": (*policy.collectives, coll)})
                for d in expand_collective(coll):
                    pinned[d] = ()
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
            entries = tuple(Registered(c, p.req.job, p.req.expected_bytes, p.t0) for p, c in ok)
            if self.cluster is not None:
                if await self._register_in_cluster(ok, entries, placement, st, attempt):
                    return
                continue
            ev = CollectivesRegistered(entries, placement)
            prop = await self.controller.propose(_expecting(st.generation, ev))
            if not prop.ok and prop.error == _MOVED_ON and attempt < 2:
                continue
            self.batches += 1
            self._answer(ok, prop)
            return

    async def _register_in_cluster(self, ok: list[tuple[_Pending, Collective]],
                                   entries: tuple[Registered, ...],
                                   placement: Mapping[FlowDemand, Path], st: RuntimeState,
                                   attempt: int) -> bool:
        """A batch through etcd (:mod:`controller.runtime.clusterservice`); False: the intent
        moved on meanwhile, place the batch again."""
        assert self.cluster is not None
        cl = self.cluster
        names = [c.name for _, c in ok]

        def fail(exc: Exception) -> bool:
            for p, _ in ok:
                if not p.future.done():
                    p.future.set_exception(exc)
            return True

        try:
            gen = await clusterservice.commit_registrations(cl, st, entries, placement)
        except StaleGeneration as exc:
            if attempt >= 2:
                return fail(NotConfirmed("the cluster's intent kept changing while the "
                                         "registration was placed; retry"))
            await cl.wait_generation(exc.actual, cl.opts.confirm_timeout_s)
            return False
        except (PlanInvariantError, ValueError) as exc:
            return fail(Unavailable(f"the plan with {', '.join(names)} is invalid: {exc}"))
        except NotConfirmed as exc:
            return fail(exc)
        self.batches += 1
        try:
            confirmed, now = await clusterservice.wait_in_force(
                cl, gen, clusterservice.switches_of(placement, names),
                f"registering {', '.join(names)}")
        except NotConfirmed as exc:
            LOG.warning("[fabric %s] northbound: %s", st.fabric.name, exc)
            return fail(exc)
        for p, coll in ok:
            reg = clusterservice.registration_reply(self, coll, confirmed, now, p.t0)
            self.controller.publish("registered", f"collective {coll.name} registered: "
                                    f"{len(reg.flows)} pinned flow(s), intent generation "
                                    f"{gen}, in force", collective=coll.name)
            LOG.info("[fabric %s] northbound: registered %s (%s) with %d flows; intent "
                     "generation %d in force in %.1f ms", st.fabric.name, coll.name,
                     " ".join(coll.ranks), len(reg.flows), gen, reg.confirmation.apply_ms)
            if not p.future.done():
                p.future.set_result(reg)
        return True

    def _answer(self, ok: list[tuple[_Pending, Collective]], prop: Proposal) -> None:
        now = self.wall()
        st = self.state
        res = prop.result
        for p, coll in ok:
            if not prop.ok:
                p.future.set_exception(Unavailable(
                    f"the plan with {coll.name} was not applied: {prop.error}"))
                continue
            flows = tuple(self._flows(coll.name))
            on = {n for f in flows for n in f.path[1:-1]}
            pending = sorted(on & set(res.pending if res else ())) + sorted(
                on - st.writable() - set(res.pending if res else ()))
            updated = sorted(on & set(res.confirmed if res else ()))
            conf = (Confirmation(True, now, (now - p.t0) * 1e3, tuple(updated), ())
                    if not pending else Confirmation(False, 0.0, 0.0, tuple(updated),
                                                     tuple(pending)))
            reg = Registration(coll.name, flows, conf, st.plan_generation)
            self.controller.publish(
                "registered", f"collective {coll.name} registered: {len(flows)} pinned flow(s), "
                f"{len(updated)} switch(es) updated, {'in force' if conf.in_force else 'pending'}",
                collective=coll.name)
            LOG.info("[fabric %s] northbound: registered %s (%s) with %d flows; %s in %.1f ms",
                     st.fabric.name, coll.name, " ".join(coll.ranks), len(flows),
                     "in force" if conf.in_force else f"pending on {', '.join(pending)}",
                     conf.apply_ms)
            p.future.set_result(reg)

    async def unregister(self, name: str) -> tuple[Confirmation, int]:
        t0 = self.wall()
        st = self.state
        if any(c.name == name for c in st.policy.policy.collectives):
            raise Unavailable(f"collective {name!r} is declared by the policy file, not "
                              "registered; change the policy instead")
        if name not in st.registered:
            raise NotFound(f"no registered collective {name[:64]!r}")
        if self.cluster is not None:
            conf, gen = await clusterservice.unregister(self.cluster, self, name)
            self.controller.publish("unregistered", f"collective {name} unregistered",
                                    collective=name)
            LOG.info("[fabric %s] northbound: unregistered %s", st.fabric.name, name)
            return conf, gen
        on = {n for d, p in st.placement.items() if d.collective == name for n in p[1:-1]}
        prop = await self.controller.propose(lambda s: CollectiveUnregistered(name))
        if not prop.ok:
            if name not in self.state.registered:
                raise NotFound(f"no registered collective {name[:64]!r}")
            raise Unavailable(f"unregistering {name} failed: {prop.error}")
        res = prop.result
        pending = tuple(sorted(on & set(res.pending if res else ())))
        now = self.wall()
        conf = Confirmation(not pending, now if not pending else 0.0,
                            (now - t0) * 1e3 if not pending else 0.0,
                            tuple(sorted(on & set(res.confirmed if res else ()))), pending)
        self.controller.publish("unregistered", f"collective {name} unregistered",
                                collective=name)
        LOG.info("[fabric %s] northbound: unregistered %s", st.fabric.name, name)
        return conf, self.state.plan_generation

    # -- reading ------------------------------------------------------------------------------------
    def _flows(self, collective: str = "") -> list[FlowInfo]:
        st = self.state
        tel = self.controller.telemetry
        fb = tel.flow_bytes if tel is not None else {}
        out = []
        for d, p in sorted(st.placement.items()):
            if collective and d.collective != collective:
                continue
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
    async def apply_policy(self, document: str, source_name: str,
                           dry_run: bool) -> PolicyApplyResult:
        st = self.state
        cur = st.policy
        try:
            policy = check_policy_for_targets(parse_document(document, source_name), st.fabric,
                                              self.policy_targets).policy
        except ConfigError as exc:
            return self._refused(exc.problems, dry_run, source_name)
        problems = _registration_problems(policy, st, source_name)
        if problems:
            return self._refused(problems, dry_run, source_name)
        if self.cluster is not None and not dry_run:
            return await self._apply_in_cluster(document, source_name, policy)
        loop = asyncio.get_running_loop()
        try:
            placement = await loop.run_in_executor(
                self.controller.executor, _replace_policy_placement, st, policy)
        except ValueError as exc:
            return self._refused([_problem(source_name, "collectives", str(exc))], dry_run,
                                 source_name)
        pif = PolicyInForce(policy, document, source_name, cur.generation + 1,
                            digest_of(document), self.wall())
        prop = await self.controller.propose(
            _expecting(st.generation, PolicyApplied(pif, placement)), dry_run=dry_run)
        diff = switch_diffs(prop.changes)
        now_in = self.state.policy
        if dry_run:
            LOG.info("[fabric %s] policy %s (dry run): %s", st.fabric.name, source_name,
                     _summary(diff))
            return PolicyApplyResult(prop.ok, True, (), diff, now_in.generation, now_in.digest,
                                     prop.error)
        if not prop.ok:
            LOG.error("[fabric %s] policy %s not applied, generation %d stays in force: %s",
                      st.fabric.name, source_name, now_in.generation, prop.error)
            self.controller.publish("apply-failed", f"policy {source_name} not applied, "
                                    f"generation {now_in.generation} stays: {prop.error}",
                                    switch=prop.result.failed_switch if prop.result else "")
            return PolicyApplyResult(False, False, (), diff, now_in.generation, now_in.digest,
                                     prop.error)
        res = prop.result
        now = self.wall()
        pending = tuple(res.pending) if res else ()
        conf = Confirmation(not pending, now if not pending else 0.0,
                            (now - pif.applied_unix_s) * 1e3 if not pending else 0.0,
                            tuple(res.confirmed) if res else (), pending)
        LOG.info("[fabric %s] policy generation %d applied from %s (sha256 %s): %s",
                 st.fabric.name, now_in.generation, source_name, now_in.digest, _summary(diff))
        self.controller.publish("policy-applied", f"policy generation {now_in.generation} "
                                f"(sha256 {now_in.digest[:12]}) from {source_name}: "
                                f"{_summary(diff)}")
        return PolicyApplyResult(True, False, (), diff, now_in.generation, now_in.digest, "",
                                 conf)

    async def _apply_in_cluster(self, document: str, source: str,
                                policy: Policy) -> PolicyApplyResult:
        """ApplyPolicy through etcd (:mod:`controller.runtime.clusterservice`)."""
        assert self.cluster is not None
        cl = self.cluster
        loop = asyncio.get_running_loop()
        err = "the cluster's intent kept changing; apply again"
        for _attempt in range(3):
            st = self.state
            cur = st.policy
            try:
                placement = await loop.run_in_executor(
                    self.controller.executor, _replace_policy_placement, st, policy)
            except ValueError as exc:
                return self._refused([_problem(source, "collectives", str(exc))], False, source)
            pif = PolicyInForce(policy, document, source, cur.generation + 1,
                                digest_of(document), self.wall())
            try:
                done = await clusterservice.apply_policy(cl, st, document, source, pif,
                                                         placement)
            except StaleGeneration as exc:
                await cl.wait_generation(exc.actual, cl.opts.confirm_timeout_s)
                continue
            except (PlanInvariantError, ValueError, NotConfirmed) as exc:
                err = str(exc)
                break
            diff = switch_diffs(done.changes)
            now_in = self.state.policy
            conf = Confirmation(not done.pending, done.in_force_unix_s,
                                (done.in_force_unix_s - pif.applied_unix_s) * 1e3
                                if not done.pending else 0.0, done.confirmed, done.pending)
            LOG.info("[fabric %s] policy generation %d (intent generation %d) applied from %s "
                     "(sha256 %s): %s%s", st.fabric.name, now_in.generation, done.generation,
                     source, now_in.digest, _summary(diff),
                     f"; not yet confirmed on {', '.join(done.pending)}" if done.pending
                     else "")
            self.controller.publish("policy-applied", f"policy generation {now_in.generation} "
                                    f"(sha256 {now_in.digest[:12]}) from {source}: "
                                    f"{_summary(diff)}")
            return PolicyApplyResult(True, False, (), diff, now_in.generation, now_in.digest,
                                     "", conf)
        cur = self.state.policy
        LOG.error("[fabric %s] policy %s not applied, generation %d stays in force: %s",
                  self.state.fabric.name, source, cur.generation, err)
        self.controller.publish("apply-failed", f"policy {source} not applied, generation "
                                f"{cur.generation} stays: {err}")
        return PolicyApplyResult(False, False, (), (), cur.generation, cur.digest, err)

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


_MOVED_ON = "the controller's state changed while the change was computed; retrying"


def _expecting(generation: int, ev: Any) -> Callable[[RuntimeState], Any]:
    """``ev`` if the state is still at ``generation`` (the placement was computed for it)."""
    def make(state: RuntimeState) -> Any:
        if state.generation != generation:
            raise ValueError(_MOVED_ON)
        return ev
    return make


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


def _problem(source: str, field: str, message: str) -> Any:
    from controller.errors import ConfigProblem

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
