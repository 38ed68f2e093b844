"""A fake :class:`~controller.northbound.model.NorthboundService` for the northbound tests: no
runtime, no switches; it keeps registrations in a dict, validates policy documents with the real
policy loader, and lets a test hold calls (``gate``), fail them, or script an apply's outcome.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Mapping
from typing import Any

from controller.errors import ConfigError
from controller.northbound.model import (
    UNKNOWN_CALLER,
    AuditPage,
    AuditRecord,
    AuditSubject,
    AuditSwitch,
    Caller,
    CollectiveRequest,
    Confirmation,
    DriftEntry,
    DriftReport,
    FieldError,
    FlowInfo,
    NotFound,
    PolicyApplyResult,
    Registration,
    SwitchDiff,
    SwitchDrift,
)
from controller.policy.load import policy_from_document
from controller.te.collectives import FlowDemand
from controller.telemetry import EventBus, LinkStatus, Subscription
from controller.yamlsrc import parse_document

SWITCHES = ({"name": "leaf1", "dpid": 0x11, "southbound": "openflow"},
            {"name": "leaf2", "dpid": 0x12, "southbound": "p4runtime"})


class FakeService:
    """Registrations in a dict; ``gate`` (set by a test) holds every register until set;
    ``fail_with`` makes register raise it; ``apply_error`` makes a non-dry-run apply fail
    and roll back with that text; ``diff`` is what any policy change does."""

    def __init__(self, bus: EventBus | None = None) -> None:
        self.bus = bus or EventBus()
        self.registered: dict[str, Registration] = {}
        self.gate: asyncio.Event | None = None
        self.fail_with: BaseException | None = None
        self.apply_error = ""
        self.diff: tuple[SwitchDiff, ...] = (
            SwitchDiff("leaf1", flows_added=1, flows_modified=1,
                       lines=("+ table 0 priority 500 ipv4_dst=10.0.0.3 -> group 2",
                              "~ table 0 priority 100 ipv4_dst=10.0.0.2 -> port 1")),)
        self.policy = {"generation": 1, "digest": hashlib.sha256(b"start").hexdigest(),
                       "source": "policies/start.yaml", "applied_unix_s": 1_700_000_000.0}
        self.started = 0  # register calls that entered the service
        self.finished = 0  # ... and completed
        self.callers: list[tuple[str, Caller]] = []  # (method, who asked) of every change
        self.audit_reads: list[int] = []  # the after_sequence of every ListAudit
        self.records: list[AuditRecord] = [
            AuditRecord(i + 1, 1_700_000_000.0 + i, "register", "in-force",
                        (AuditSubject(f"job.c{i}", Caller("grpc", "alice", "operator")),),
                        switches=(AuditSwitch("leaf1", flows_added=2),))
            for i in range(7)]
        self.drift_report = DriftReport(
            (SwitchDrift("leaf1", True, entries_read=3, entries_intended=4, foreign_entries=1,
                         entries=tuple(DriftEntry("missing", f"table 0 priority 500 e{i}")
                                       for i in range(3))),
             SwitchDrift("leaf2", False, error="not connected to this controller")),
            intent_generation=5, plan_generation=6, checked_unix_s=1_700_000_100.0)

    async def register(self, req: CollectiveRequest,
                       caller: Caller = UNKNOWN_CALLER) -> Registration:
        self.callers.append(("register", caller))
        self.started += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_with is not None:
            raise self.fail_with
        if not req.name:
            raise FieldError("name", "must not be empty")
        name = f"{req.job}.{req.name}" if req.job else req.name
        flows = tuple(FlowInfo(FlowDemand(name, i, a, b), (a, "leaf1", b), 0,
                               f"src={a},dst={b}")
                      for i, (a, b) in enumerate(zip(req.ranks, req.ranks[1:] + req.ranks[:1],
                                                     strict=True)))
        reg = Registration(name, flows, Confirmation(True, time.time(), 1.0, ("leaf1",)),
                           len(self.registered) + 2)
        self.registered[name] = reg
        self.bus.publish("registered", f"collective {name} registered", collective=name)
        self.finished += 1
        return reg

    async def unregister(self, name: str,
                         caller: Caller = UNKNOWN_CALLER) -> tuple[Confirmation, int]:
        self.callers.append(("unregister", caller))
        if name not in self.registered:
            raise NotFound(f"no registered collective {name[:64]!r}")
        del self.registered[name]
        return Confirmation(True, time.time(), 1.0, ("leaf1",)), len(self.registered) + 2

    async def paths(self, collective: str) -> list[FlowInfo]:
        if collective and collective not in self.registered:
            raise NotFound(f"no collective {collective[:64]!r}")
        return [f for n, r in sorted(self.registered.items()) if not collective or n == collective
                for f in r.flows]

    async def status(self) -> Mapping[str, Any]:
        return {
            "fabric": "fake", "routing_mode": "pinned", "sample_interval_s": 1.0,
            "plan_generation": len(self.registered) + 1,
            "switches": [{**s, "connected": True, "last_sample_age_s": 0.5,
                          "role": "master" if s["southbound"] == "p4runtime" else "none"}
                         for s in SWITCHES],
            "links": [LinkStatus(link=("leaf1", "leaf2"), name="leaf1->leaf2", fabric_link=True,
                                 up=True, capacity_bps=15e6, rate_bps=3e6, utilisation=0.2,
                                 loss_ratio=0.0, bytes_total=1000, dropped_total=0, microbursts=0,
                                 pinned_flows=len(self.registered), measured_at_s=1.0)],
            "collectives": [{"name": n, "source": "northbound", "flows": len(r.flows),
                             "bytes_total": 0, "collision_links": 0, "expected_bytes": 0}
                            for n, r in sorted(self.registered.items())],
            "alerts": [], "traffic": {("h1", "h2"): 1234}, "policy": dict(self.policy),
        }

    async def apply_policy(self, document: str, source_name: str, dry_run: bool,
                           caller: Caller = UNKNOWN_CALLER) -> PolicyApplyResult:
        self.callers.append(("apply_policy", caller))
        gen, digest = self.policy["generation"], self.policy["digest"]
        try:
            policy_from_document(parse_document(document, source_name))
        except ConfigError as exc:
            return PolicyApplyResult(False, dry_run, exc.problems, (), gen, digest)
        if dry_run:
            return PolicyApplyResult(True, True, (), self.diff, gen, digest)
        if self.apply_error:
            self.bus.publish("apply-failed", self.apply_error)
            return PolicyApplyResult(False, False, (), self.diff, gen, digest,
                                     error=self.apply_error)
        new = hashlib.sha256(document.encode()).hexdigest()
        self.policy = {"generation": gen + 1, "digest": new, "source": source_name,
                       "applied_unix_s": time.time()}
        self.bus.publish("policy-applied", f"policy {source_name} applied",
                         policy_generation=gen + 1, policy_digest=new)
        return PolicyApplyResult(True, False, (), self.diff, gen + 1, new,
                                 confirmation=Confirmation(True, time.time(), 2.0, ("leaf1",)))

    async def audit(self, after: int, limit: int) -> AuditPage:
        self.audit_reads.append(after)
        got = tuple(r for r in self.records if r.sequence > after)[:limit]
        return AuditPage(got, self.records[0].sequence if self.records else 0,
                         self.records[-1].sequence if self.records else 0)

    async def drift(self, switches: tuple[str, ...]) -> DriftReport:
        unknown = [n for n in switches if n not in ("leaf1", "leaf2")]
        if unknown:
            raise NotFound(f"no switch {unknown[0]!r}")
        return self.drift_report

    def subscribe(self, kinds: frozenset[str] | None) -> Subscription:
        try:
            return self.bus.subscribe(kinds)
        except ValueError as exc:
            raise FieldError("kinds", str(exc)) from None

    def unsubscribe(self, sub: Subscription) -> None:
        self.bus.unsubscribe(sub)
