"""The northbound service behind the gRPC server: register and unregister collectives, report
paths, status and events. Runtime side (it changes the plan and programs switches through the
OpenFlow app); the gRPC server (:mod:`controller.northbound.server`) only converts messages.

Registering: validate (:func:`controller.runtime.registration.collective_from_request`; a bad
field raises :class:`~controller.northbound.model.FieldError`), pin the new flows around the
installed ones (:meth:`ControllerRuntime.register_collective`), send the per-switch changes
followed by a barrier, and wait up to ``confirm_timeout_s`` for every barrier reply: the
:class:`Confirmation` says whether and when the change was in force on every switch concerned.
A switch that is not connected gets the change in full when it connects; it is listed as
pending.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.errors import PlanInvariantError
from controller.northbound.model import (
    CollectiveRequest,
    Confirmation,
    FieldError,
    FlowInfo,
    NotFound,
    Registration,
    Unavailable,
)
from controller.plan.build import pinned_match
from controller.plan.model import SwitchChanges
from controller.runtime.registration import collective_from_request
from controller.runtime.state import ControllerRuntime
from controller.telemetry import EventBus, Subscription, Telemetry

LOG = logging.getLogger("aifabric.northbound")


Applier = Callable[[Mapping[str, SwitchChanges], float], tuple[tuple[str, ...], tuple[str, ...]]]
"""``apply(changes, timeout_s) -> (confirmed switches, pending switches)``: sends every switch's
changes with a barrier and waits for the barrier replies (the OpenFlow app's
``apply_and_confirm``)."""


@dataclass
class FabricService:
    """What the northbound API can do with a running controller.

    ``apply`` is set once the OpenFlow app runs (until then changes wait for the switches to
    connect, which push the whole plan). ``clock``: wall clock for confirmations; ``mono``: the
    statistics clock (ages of samples and alerts).
    """

    runtime: ControllerRuntime
    telemetry: Telemetry
    events: EventBus
    apply: Applier | None = None
    sample_interval_s: float = 0.0
    confirm_timeout_s: float = 5.0
    clock: Callable[[], float] = time.time
    mono: Callable[[], float] = time.monotonic
    _policy_names: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        self._policy_names = frozenset(c.name for c in self.runtime.policy.collectives)

    # -- collectives -----------------------------------------------------------------------------
    def register(self, req: CollectiveRequest) -> Registration:
        """Register a collective and program it (module docstring).

        Raises
        ------
        FieldError
            A request field is invalid (named).
        Unavailable
            ``routing.mode`` is not ``pinned``, or the plan with it breaks an invariant.
        """
        t0 = self.clock()
        rt = self.runtime
        if rt.policy.routing.mode != "pinned":
            raise Unavailable(f"routing.mode is {rt.policy.routing.mode!r}: the controller pins "
                              "collectives only in 'pinned' mode")
        coll = collective_from_request(req, rt.fabric, rt.policy, rt.paths)
        meta = {"job": req.job, "expected_bytes": req.expected_bytes, "registered_unix_s": t0}
        try:
            changes = rt.register_collective(coll, meta)
        except PlanInvariantError as exc:
            raise Unavailable(f"the plan with {coll.name} breaks an invariant: {exc}") from None
        except ValueError as exc:
            raise FieldError("ranks", str(exc)) from None
        conf = self._apply(changes, t0)
        flows = tuple(f for f in self.paths(coll.name))
        self.events.publish("registered", f"collective {coll.name} registered: {len(flows)} "
                            f"pinned flow(s), {len(changes)} switch(es) updated, "
                            f"{'in force' if conf.in_force else 'pending'}",
                            collective=coll.name)
        LOG.info("[fabric %s] northbound: registered %s (%s) with %d flows; %s in %.1f ms",
                 rt.fabric.name, coll.name, " ".join(coll.ranks), len(flows),
                 "in force" if conf.in_force else f"pending on {', '.join(conf.switches_pending)}",
                 conf.apply_ms)
        return Registration(coll.name, flows, conf, rt.plan_generation)

    def unregister(self, name: str) -> tuple[Confirmation, int]:
        """Remove a registered collective's pinned entries.

        Raises
        ------
        NotFound
            No such collective.
        Unavailable
            It comes from the policy file (edit the policy instead).
        """
        t0 = self.clock()
        if name in self._policy_names:
            raise Unavailable(f"collective {name!r} is declared by the policy file, not "
                              "registered; change the policy instead")
        try:
            changes = self.runtime.unregister_collective(name)
        except KeyError:
            raise NotFound(f"no registered collective {name!r}") from None
        conf = self._apply(changes, t0)
        self.events.publish("unregistered", f"collective {name} unregistered", collective=name)
        LOG.info("[fabric %s] northbound: unregistered %s", self.runtime.fabric.name, name)
        return conf, self.runtime.plan_generation

    def _apply(self, changes: Mapping[str, SwitchChanges], t0: float) -> Confirmation:
        if not changes:
            now = self.clock()
            return Confirmation(True, now, (now - t0) * 1e3)
        if self.apply is None:
            return Confirmation(False, switches_pending=tuple(sorted(changes)))
        done, pending = self.apply(changes, self.confirm_timeout_s)
        now = self.clock()
        if pending:
            return Confirmation(False, 0.0, 0.0, tuple(done), tuple(pending))
        return Confirmation(True, now, (now - t0) * 1e3, tuple(done), ())

    def paths(self, collective: str = "") -> list[FlowInfo]:
        """The pinned flows of ``collective`` (all when empty), by flow.

        Raises
        ------
        NotFound
            ``collective`` names no collective of the policy or the registrations.
        """
        rt = self.runtime
        if collective and collective not in {c.name for c in rt.policy.collectives}:
            known = ", ".join(sorted(c.name for c in rt.policy.collectives)) or "none"
            raise NotFound(f"no collective {collective!r} (known: {known})")
        fb = self.telemetry.flow_bytes
        out = []
        for d, p in sorted(rt.paths.items()):
            if collective and d.collective != collective:
                continue
            m = pinned_match(rt.fabric, d).fields()
            out.append(FlowInfo(d, p, fb.get(d, 0), ",".join(f"{k}={v}" for k, v in m.items()
                                                             if k != "eth_type")))
        return out

    # -- status and events ----------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Everything ``aifabric status`` shows, as plain values (the server converts it)."""
        rt, tel = self.runtime, self.telemetry
        now = self.mono()
        switches = [{"name": s.name, "dpid": s.dpid, "connected": rt.connected.get(s.name, False),
                     "last_sample_age_s": (now - tel.last_sample_s[s.name])
                     if s.name in tel.last_sample_s else -1.0} for s in rt.fabric.switches]
        colls = []
        for c in tel.collective_status():
            meta = rt.registered.get(c.name)
            colls.append({"name": c.name, "source": "northbound" if meta is not None else "policy",
                          "flows": len(c.flows), "bytes_total": c.bytes_total,
                          "collision_links": len(c.collision_links),
                          "expected_bytes": (meta or {}).get("expected_bytes") or 0})
        return {
            "fabric": rt.fabric.name, "routing_mode": rt.policy.routing.mode,
            "sample_interval_s": self.sample_interval_s, "plan_generation": rt.plan_generation,
            "switches": switches, "links": tel.link_status(), "collectives": colls,
            "alerts": [{"alert": a.kind, "subject": a.subject, "switch": a.switch,
                        "age_s": now - a.since_s, "message": a.message}
                       for a in tel.active_alerts()],
            "traffic": tel.traffic_matrix(),
        }

    def subscribe(self, kinds: frozenset[str] | None = None) -> Subscription:
        """Subscribe to events (FieldError ``kinds`` on an unknown kind)."""
        try:
            return self.events.subscribe(kinds)
        except ValueError as exc:
            raise FieldError("kinds", str(exc)) from None

    def unsubscribe(self, sub: Subscription) -> None:
        self.events.unsubscribe(sub)
