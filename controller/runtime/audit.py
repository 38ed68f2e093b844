"""The audit trail: who changed what, when, and how it ended.

:class:`AuditTrail` keeps one :class:`~controller.northbound.model.AuditRecord` for

* every change an operator asked for that reached the one write path
  (:meth:`controller.runtime.service.FabricService._propose`: a policy, a batch of
  registrations, a batch of unregistrations) with its outcome — in force, pending, refused and
  put back, not applied — and every policy document refused before it (``invalid``: problems,
  a limit). Dry runs change nothing and are not recorded;
* every change of this controller's role on its switches (master with its fencing token, or
  backup), seen from the shell (:meth:`watch_roles`: a step listener of the
  :class:`~controller.runtime.controller.Controller`; the core stays free of I/O). The changes
  of :data:`ROLE_WINDOW_S` seconds are one record, so a start or a failover that moves many
  switches writes one record, not one per switch.

The records go to an :class:`~controller.runtime.auditlog.AuditLog` (etcd in a cluster, a
JSON-lines file or memory alone), each with its sequence number, and are announced as
``audit`` events (:class:`~controller.telemetry.EventBus`: the northbound ``WatchEvents``
stream); in a cluster the records other replicas keep are announced too (the log's
:meth:`~controller.runtime.auditlog.AuditLog.follow`). A reply to the operator is sent after
its record is kept. A record the log does not take (etcd unreachable, the disk full) is logged
as an error and kept in memory (at most :data:`MAX_UNWRITTEN`), written before the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from controller.cluster.store import StoreUnavailable
from controller.drivers.southbound import RoleChanged
from controller.northbound.model import (
    AuditKind,
    AuditOutcome,
    AuditPage,
    AuditRecord,
    AuditSubject,
    AuditSwitch,
    Caller,
    SwitchDiff,
    Unavailable,
)
from controller.runtime.auditlog import AuditLog
from controller.runtime.controller import Controller
from controller.runtime.core import Step
from controller.runtime.events import Event, MastershipChanged, RoleAssigned

LOG = logging.getLogger("aifabric.audit")
#: seconds of role changes gathered into one record
ROLE_WINDOW_S = 0.5
#: records kept in memory while the log does not take them
MAX_UNWRITTEN = 1000

Publish = Callable[..., None]
"""``publish(kind, message, **fields)``: :meth:`~controller.runtime.controller.Controller.
publish`."""


@dataclass(frozen=True)
class Proposal:
    """What was asked of the write path, before its outcome: the kind, each subject with who
    asked for it, and the digest of what was asked (a policy document's sha256, or the
    registrations')."""

    kind: AuditKind
    subjects: tuple[AuditSubject, ...]
    digest: str = ""


def registrations_digest(specs: Sequence[Mapping[str, Any]]) -> str:
    """sha256 hex of registrations (their stored specs, :func:`~controller.runtime.
    clustercodec.registered_spec`) as canonical JSON, in the order given."""
    text = json.dumps(list(specs), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def switch_counts(diff: Sequence[SwitchDiff]) -> tuple[AuditSwitch, ...]:
    """Per-switch flow entry counts of a change."""
    return tuple(AuditSwitch(d.switch, d.flows_added, d.flows_modified, d.flows_deleted)
                 for d in diff)


class AuditTrail:
    """Keeps, announces and reads the audit records of one controller (module docstring).

    Parameters
    ----------
    log : AuditLog
    replica : str
        This replica's name in a cluster ("" alone): every record says which replica kept it.
    publish : callable, optional
        Where ``audit`` events go (None: nowhere).
    wall : callable
        Seconds since the epoch.
    """

    def __init__(self, log: AuditLog, *, replica: str = "", publish: Publish | None = None,
                 wall: Callable[[], float] = time.time,
                 role_window_s: float = ROLE_WINDOW_S) -> None:
        self.log = log
        self.replica = replica
        self.publish = publish
        self.wall = wall
        self.role_window_s = role_window_s
        self.unwritten: deque[AuditRecord] = deque(maxlen=MAX_UNWRITTEN)
        self.written_total = 0
        self.failed_total = 0
        self._order = asyncio.Lock()
        self._ctl: Controller | None = None
        self._roles: dict[str, tuple[str, int | None]] = {}
        self._pending: dict[str, tuple[str, int | None, str]] = {}
        self._flush: asyncio.Task[None] | None = None
        self._follow: asyncio.Task[None] | None = None

    # -- keeping records ----------------------------------------------------------------------------
    async def record(self, rec: AuditRecord) -> AuditRecord | None:
        """Keep ``rec`` (after any the log did not take before) and announce it. Returns it
        with its sequence, or None when the log did not take it (logged; kept in memory and
        tried again with the next record)."""
        async with self._order:
            if len(self.unwritten) == MAX_UNWRITTEN:
                LOG.error("[audit] %d records wait for the log: the oldest is dropped: %s",
                          MAX_UNWRITTEN, self.unwritten[0].summary())
            self.unwritten.append(replace(rec, replica=self.replica))
            kept: list[AuditRecord] = []
            while self.unwritten:   # one at a time: a failure keeps what is not kept, once
                try:
                    kept += await self.log.append([self.unwritten[0]])
                except (OSError, StoreUnavailable) as exc:
                    self.failed_total += 1
                    LOG.error("[audit] record not kept (%s; %d waiting): %s", exc,
                              len(self.unwritten), self.unwritten[-1].summary())
                    break
                self.unwritten.popleft()
        self.written_total += len(kept)
        for r in kept:
            self._announce(r)
        return kept[-1] if kept and not self.unwritten else None

    async def proposed(self, ask: Proposal, outcome: AuditOutcome, *,
                       diff: Sequence[SwitchDiff] = (), intent_generation: int = 0,
                       policy_generation: int = 0, detail: str = "") -> AuditRecord | None:
        """Keep the record of a proposal's outcome (:meth:`record`)."""
        return await self.record(AuditRecord(
            0, self.wall(), ask.kind, outcome, ask.subjects, self.replica, ask.digest,
            intent_generation, policy_generation, switch_counts(diff), detail))

    def _announce(self, r: AuditRecord) -> None:
        if self.publish is None:
            return
        try:
            self.publish("audit", f"#{r.sequence} {r.summary()}", audit_sequence=r.sequence)
        except ValueError:
            LOG.exception("[audit] announcing record %d failed", r.sequence)

    async def page(self, after: int, limit: int) -> AuditPage:
        """Records after ``after`` (at most ``limit``). Raises Unavailable (the log cannot be
        read now: etcd unreachable, the file unreadable)."""
        try:
            return await self.log.page(after, limit)
        except (OSError, StoreUnavailable) as exc:
            raise Unavailable(f"the audit trail cannot be read now: {exc}") from None

    # -- role changes --------------------------------------------------------------------------------
    def watch_roles(self, ctl: Controller) -> None:
        """Record ``ctl``'s role changes (module docstring)."""
        self._ctl = ctl
        ctl.listeners.append(self._on_step)

    def _on_step(self, ev: Event, step: Step) -> None:
        match ev:
            case RoleAssigned():
                why = "the switch granted it"
            case RoleChanged():
                why = f"the switch says {ev.reason or 'another controller is master'}"
            case MastershipChanged():
                why = "the cluster moved it" if not ev.master else "the cluster gave it"
            case _:
                return
        assert self._ctl is not None
        role = step.state.session(ev.switch).role
        if role not in ("master", "backup"):
            return
        token = self._ctl.mastership.role_for(ev.switch)[1] if role == "master" else None
        if self._roles.get(ev.switch) == (role, token):
            self._pending.pop(ev.switch, None)
            return
        self._pending[ev.switch] = (role, token, why)
        if self._flush is None or self._flush.done():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:   # a step driven without a loop (a model test): kept for later
                return
            self._flush = loop.create_task(self._flush_roles(), name="audit-roles")

    async def _flush_roles(self) -> None:
        await asyncio.sleep(self.role_window_s)
        await self.flush_roles()

    async def flush_roles(self) -> AuditRecord | None:
        """Keep the role changes gathered so far as one record (None: there were none, or
        the log did not take it)."""
        pending, self._pending = self._pending, {}
        if not pending:
            return None
        for sw, (role, token, _) in pending.items():
            self._roles[sw] = (role, token)
        names = sorted(pending)
        whys: dict[str, list[str]] = {}
        for sw in names:
            whys.setdefault(pending[sw][2], []).append(sw)
        caller = Caller("controller", peer=self.replica)
        detail = "; ".join(f"{why}: {', '.join(sws)}" for why, sws in whys.items())
        return await self.record(AuditRecord(
            0, self.wall(), "role", "in-force",
            tuple(AuditSubject(sw, caller) for sw in names), self.replica,
            switches=tuple(AuditSwitch(sw, role=pending[sw][0], token=pending[sw][1])
                           for sw in names), detail=detail))

    # -- others' records ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Announce the records other replicas keep (a cluster's log), from now on."""
        src = self.log.follow()
        if src is None or self._follow is not None:
            return

        async def follow() -> None:
            async for r in src:
                if r.replica != self.replica:
                    self._announce(r)

        self._follow = asyncio.get_running_loop().create_task(follow(), name="audit-follow")

    def abandon(self) -> None:
        """Stop at once, keeping nothing more (a process that dies: tests)."""
        self._pending.clear()
        for t in (self._flush, self._follow):
            if t is not None:
                t.cancel()
        self._flush = self._follow = None

    async def stop(self) -> None:
        """Keep the role changes still gathered; stop announcing others' records."""
        if self._flush is not None and not self._flush.done():
            self._flush.cancel()
        with contextlib.suppress(Exception):
            await self.flush_roles()
        if self._follow is not None:
            self._follow.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._follow
            self._follow = None
