"""The northbound contract without grpc: the request and reply values, the errors, and the
:class:`NorthboundService` protocol the runtime implements (``controller.runtime.service``).

The gRPC server (:mod:`controller.northbound.server`) converts protobuf messages to these values,
awaits the service's coroutines on the controller's one asyncio event loop, and maps the errors
to status codes:

=========================  ======================================================================
:class:`FieldError`        ``INVALID_ARGUMENT``, details ``"field: message"`` (``ranks[2]``)
:class:`NotFound`          ``NOT_FOUND``
:class:`Unavailable`       ``FAILED_PRECONDITION`` (the controller's state forbids it)
:class:`Busy`              ``RESOURCE_EXHAUSTED`` (the controller cannot take it now; retry)
:class:`NotConfirmed`      ``UNAVAILABLE`` (a cluster: etcd or the switches' masters did not
                           confirm in time)
=========================  ======================================================================

No message quotes more than :data:`ECHO_MAX_CHARS` characters of a value a client sent
(:func:`clip`): a 1 MB name is reported by its length, never echoed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from controller.errors import ConfigProblem
from controller.te.collectives import FlowDemand
from controller.telemetry.events import Subscription

#: most characters of a client's value an error message quotes
ECHO_MAX_CHARS = 64

Path = tuple[str, ...]
"""host, switch, …, host"""


def clip(value: str, limit: int = ECHO_MAX_CHARS) -> str:
    """``repr(value)``, shortened to ``limit`` characters of ``value`` plus how many were left
    out (``'aaaa…' (1048576 characters)``), for error messages that quote client input."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… ({len(value)} characters)"


# -- errors ---------------------------------------------------------------------------------------
class FieldError(ValueError):
    """A request field is invalid. ``field`` names it as the request spells it (``ranks[2]``,
    ``l4.proto``); the gRPC server answers ``INVALID_ARGUMENT`` with ``"field: message"``.
    ``message`` quotes client values through :func:`clip` only."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class NotFound(LookupError):
    """The named collective does not exist (gRPC ``NOT_FOUND``)."""


class Unavailable(RuntimeError):
    """The controller cannot do this in its current state (gRPC ``FAILED_PRECONDITION``), e.g.
    registering in ``routing.mode: ecmp``, or unregistering a collective of the policy file."""


class Busy(RuntimeError):
    """The controller cannot take this request now (gRPC ``RESOURCE_EXHAUSTED``): a bounded
    queue is full. The client may retry later with back-off; nothing was changed."""


class NotConfirmed(RuntimeError):
    """A replica of a cluster could not get the change confirmed (gRPC ``UNAVAILABLE``): etcd
    did not take it (nothing changed), or it is in etcd's intent but the masters of some
    switches did not confirm in time (it goes in force when they do; the same request again
    waits again). The message says which; it starts with ``cluster: ``."""

    def __init__(self, message: str) -> None:
        super().__init__(f"cluster: {message}")


# -- requests -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class L4Request:
    """Transport match: ``proto`` ``tcp``/``udp``; ports 1–65535, 0 = any."""

    proto: str
    src_port: int = 0
    dst_port: int = 0


@dataclass(frozen=True)
class CollectiveRequest:
    """A collective to register: ranks in rank order (host names or IPv4 addresses);
    ``expected_bytes``: bytes each rank contributes per step (None: unknown)."""

    job: str
    name: str
    algorithm: str
    ranks: tuple[str, ...]
    bidirectional: bool = False
    dscp: int | None = None
    l4: L4Request | None = None
    expected_bytes: int | None = None


# -- replies --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Confirmation:
    """Whether every switch concerned confirmed a change (OpenFlow barrier reply, P4Runtime write
    response), and when.

    ``in_force_unix_s``: time of the last confirmation (s since the epoch; 0 if not in force);
    ``apply_ms``: from the request to that confirmation, ms; ``switches_pending``: not
    connected, or no confirmation within the confirmation timeout."""

    in_force: bool
    in_force_unix_s: float = 0.0
    apply_ms: float = 0.0
    switches_updated: tuple[str, ...] = ()
    switches_pending: tuple[str, ...] = ()


@dataclass(frozen=True)
class FlowInfo:
    """A pinned flow: its path (host … host), the bytes its entry at the first switch counted
    since it was installed, and its match (``"ipv4_src=10.0.0.1,ipv4_dst=10.0.0.3"``)."""

    flow: FlowDemand
    path: Path
    bytes: int
    match: str


@dataclass(frozen=True)
class Registration:
    """A registered collective: its qualified name (``job.name``), its pinned flows, whether the
    switches confirmed them, and the plan generation that holds them."""

    collective: str
    flows: tuple[FlowInfo, ...]
    confirmation: Confirmation
    plan_generation: int


@dataclass(frozen=True)
class InaWorkerRequest:
    """A worker of an aggregation job: where its results go (``ipv4``, ``mac``, ``udp_port``)."""

    ipv4: str
    mac: str
    udp_port: int


@dataclass(frozen=True)
class InaJobRequest:
    """An in-network aggregation job to set up: its ``name``, its workers in rank order
    (worker id = position), slots per worker (``pool_size``; 0: the controller's default)."""

    name: str
    workers: tuple[InaWorkerRequest, ...]
    pool_size: int = 0


@dataclass(frozen=True)
class InaJobGrant:
    """A job set up on the aggregation switch: what the workers put in their packets
    (``job_id``, ``pool_size``, ``elements_per_packet``), where they send them
    (``service_ipv4``:``service_port``), the job's slot region start, the switch's name."""

    name: str
    job_id: int
    pool_size: int
    elements_per_packet: int
    service_ipv4: str
    service_port: int
    slot_base: int
    switch: str


PolicyProblem = ConfigProblem
"""One validation problem of a policy document, as ``aifabric policy check`` prints it:
``file``, 1-based ``line`` and ``column`` (0: unknown), dotted ``field``, ``message``;
``str()`` is ``"FILE:LINE:COL: field: message"``."""


@dataclass(frozen=True)
class SwitchDiff:
    """What a policy change does to one switch: entry counts by change, and one human-readable
    line per entry (``"+ ..."`` added, ``"~ ..."`` modified, ``"- ..."`` deleted)."""

    switch: str
    flows_added: int = 0
    flows_modified: int = 0
    flows_deleted: int = 0
    groups_added: int = 0
    groups_modified: int = 0
    groups_deleted: int = 0
    lines: tuple[str, ...] = ()

    @property
    def changed(self) -> int:
        """Entries (flows and groups) this change adds, modifies or deletes on the switch."""
        return (self.flows_added + self.flows_modified + self.flows_deleted
                + self.groups_added + self.groups_modified + self.groups_deleted)


@dataclass(frozen=True)
class PolicyApplyResult:
    """The outcome of :meth:`NorthboundService.apply_policy`.

    ``ok`` is False when ``problems`` is not empty (nothing changed) or the apply failed and was
    rolled back (``error`` names the switch and the entry). ``generation`` and ``digest``
    (sha256 hex of the document) are those of the policy in force after the call: unchanged by
    a dry run or a failure."""

    ok: bool
    dry_run: bool
    problems: tuple[PolicyProblem, ...]
    diff: tuple[SwitchDiff, ...]
    generation: int
    digest: str
    error: str = ""
    confirmation: Confirmation | None = None


# -- who asked ------------------------------------------------------------------------------------
CallerVia = Literal["grpc", "signal", "controller"]


@dataclass(frozen=True)
class Caller:
    """Who asked for a change, as the controller knows it (the audit trail's "who").

    ``via``: ``grpc`` (a northbound call), ``signal`` (SIGHUP re-read the policy file) or
    ``controller`` (its own decision: a role change). ``token``: the name of the bearer token in
    the tokens file (its role label when the line names none; "" when no token was checked:
    ``--insecure``); ``role``: that token's role, capped by the client certificate's
    (``read-only``/``operator``); ``certificate``: the subject of the client certificate
    (RFC 4514, ``CN=alice,OU=operator,O=aifabric``; "" without mutual TLS); ``peer``: the
    client's address as gRPC names it (``ipv4:10.0.0.5:41234``), the signal, or the replica
    that decided."""

    via: CallerVia = "grpc"
    token: str = ""
    role: str = ""
    certificate: str = ""
    peer: str = ""

    def __str__(self) -> str:
        if self.via == "signal":
            return f"{self.peer or 'a signal'} (the policy file re-read)"
        if self.via == "controller":
            return f"replica {self.peer}" if self.peer else "the controller"
        parts = [f"token {self.token} ({self.role})" if self.token else "no token"]
        if self.certificate:
            parts.append(f"certificate {self.certificate}")
        return ", ".join(parts) + (f" from {self.peer}" if self.peer else "")


#: a caller the service was not told about (a call from code, not the northbound)
UNKNOWN_CALLER = Caller("controller")


# -- the audit trail ---------------------------------------------------------------------------------
AuditKind = Literal["policy", "register", "unregister", "role"]
AuditOutcome = Literal["in-force", "pending", "refused", "not-applied", "invalid"]
AUDIT_KINDS: tuple[AuditKind, ...] = ("policy", "register", "unregister", "role")
AUDIT_OUTCOMES: tuple[AuditOutcome, ...] = ("in-force", "pending", "refused", "not-applied",
                                             "invalid")


@dataclass(frozen=True)
class AuditSubject:
    """One thing a record is about, and who asked for it: a policy (its source name), a
    collective (its qualified name), a switch (a role change)."""

    name: str
    caller: Caller


@dataclass(frozen=True)
class AuditSwitch:
    """What a change did (or would have done) to one switch: flow entries added, modified and
    deleted; for a role change the role this controller took (``master``/``backup``) and, as
    master, its fencing token (OpenFlow ``generation_id``, P4Runtime ``election_id``; None:
    none)."""

    switch: str
    flows_added: int = 0
    flows_modified: int = 0
    flows_deleted: int = 0
    role: str = ""
    token: int | None = None


@dataclass(frozen=True)
class AuditRecord:
    """One entry of the audit trail (:mod:`controller.runtime.audit`).

    ``sequence`` numbers the records from 1 in the order they were kept (0: not kept yet);
    ``time_unix_s``: when the outcome was known; ``kind``: ``policy`` (ApplyPolicy, SIGHUP),
    ``register``/``unregister`` (one batch committed together), ``role`` (this controller's
    role on switches changed); ``outcome``: ``in-force`` (every switch concerned confirmed;
    for a role: taken), ``pending`` (committed; some switches' masters did not confirm within
    the timeout, it goes in force when they do), ``refused`` (a switch refused it and the last
    good intent was put back: ``detail`` says so, or why it could not be), ``not-applied``
    (nothing was committed: an invalid plan, the intent store unavailable), ``invalid`` (a
    policy document with problems or beyond a limit; nothing changed). ``replica``: the
    replica that kept it ("" alone); ``digest``: sha256 hex of the policy document, or of the
    registrations' canonical JSON; ``intent_generation``: the commit's (0: none);
    ``policy_generation``: the policy in force after it; ``switches``: per-switch entry
    counts (or roles); ``detail``: the error, the first problem, the reasons of role changes."""

    sequence: int
    time_unix_s: float
    kind: AuditKind
    outcome: AuditOutcome
    subjects: tuple[AuditSubject, ...] = ()
    replica: str = ""
    digest: str = ""
    intent_generation: int = 0
    policy_generation: int = 0
    switches: tuple[AuditSwitch, ...] = ()
    detail: str = ""

    def who(self) -> str:
        """The distinct callers, in order (``token alice (operator) from ipv4:...``)."""
        seen: list[str] = []
        for s in self.subjects:
            text = str(s.caller)
            if text not in seen:
                seen.append(text)
        return "; ".join(seen) or "the controller"

    def summary(self) -> str:
        """One line: what, by whom, and how it ended."""
        names = ", ".join(s.name for s in self.subjects[:5])
        if len(self.subjects) > 5:
            names += f" and {len(self.subjects) - 5} more"
        if self.kind == "role":
            roles = ", ".join(f"{w.switch} {w.role}" for w in self.switches[:8])
            more = f" and {len(self.switches) - 8} more" if len(self.switches) > 8 else ""
            return f"role by {self.who()}: {roles}{more}"
        a = sum(w.flows_added for w in self.switches)
        m = sum(w.flows_modified for w in self.switches)
        d = sum(w.flows_deleted for w in self.switches)
        digest = f" (sha256 {self.digest[:12]})" if self.digest else ""
        return (f"{self.kind} {names}{digest} by {self.who()}: {self.outcome}; "
                f"{len(self.switches)} switch(es) +{a} ~{m} -{d}"
                + (f"; {self.detail}" if self.detail else ""))


@dataclass(frozen=True)
class AuditPage:
    """Records after a sequence number, oldest first; ``first_sequence``/``last_sequence``: the
    oldest and newest records kept (0, 0: none; retention dropped those before the first)."""

    records: tuple[AuditRecord, ...]
    first_sequence: int = 0
    last_sequence: int = 0


# -- drift ---------------------------------------------------------------------------------------------
DriftKind = Literal["missing", "extra", "modified"]


@dataclass(frozen=True)
class DriftEntry:
    """One entry of ours that differs from the intended state on a switch: ``missing`` (intended,
    not on the switch), ``extra`` (on the switch with our cookie, not intended), ``modified``
    (the same table, priority and match with another action: ``found`` is what the switch
    holds). ``entry``: the intended entry (the one found, for ``extra``), as the plan prints it."""

    kind: DriftKind
    entry: str
    found: str = ""


@dataclass(frozen=True)
class SwitchDrift:
    """One switch read back against its intended plan. ``read`` False: it could not be read
    (``error`` says why) and nothing is known of its drift. ``entries_read``: entries of ours
    it holds; ``entries_intended``: entries its plan has; ``foreign_entries``: entries that are
    not ours (left alone, never drift); ``note``: why differences may be passing (a change
    being applied to it, the plan changed while it was read)."""

    switch: str
    read: bool
    error: str = ""
    entries_read: int = 0
    entries_intended: int = 0
    foreign_entries: int = 0
    entries: tuple[DriftEntry, ...] = ()
    note: str = ""

    def count(self, kind: DriftKind) -> int:
        return sum(1 for e in self.entries if e.kind == kind)

    @property
    def drifted(self) -> bool:
        return bool(self.entries)


@dataclass(frozen=True)
class DriftReport:
    """Every switch asked for, read back and compared with the intended plan of
    ``intent_generation``/``plan_generation`` (when the check began), at ``checked_unix_s``;
    ``replica``: the replica that read them ("" alone)."""

    switches: tuple[SwitchDrift, ...]
    intent_generation: int
    plan_generation: int
    checked_unix_s: float
    replica: str = ""

    @property
    def drifted(self) -> tuple[str, ...]:
        """The switches whose entries differ from the intended state."""
        return tuple(s.switch for s in self.switches if s.drifted)

    @property
    def unread(self) -> tuple[str, ...]:
        return tuple(s.switch for s in self.switches if not s.read)


# -- the service ----------------------------------------------------------------------------------
class NorthboundService(Protocol):
    """What the northbound API can do with a running controller (implemented by the runtime).

    Every coroutine runs on the controller's one asyncio event loop, the loop the gRPC server
    runs on; ``subscribe``/``unsubscribe`` are plain calls on that loop.
    """

    async def register(self, req: CollectiveRequest,
                       caller: Caller = UNKNOWN_CALLER) -> Registration:
        """Validate, pin and program a collective; return once every switch concerned confirmed
        or the confirmation timeout passed (:class:`Confirmation` says which). Concurrent calls
        may be batched into one plan change. ``caller``: who asked (the audit trail).

        Raises :class:`FieldError` (the field named), :class:`Unavailable`, :class:`Busy`."""
        ...

    async def unregister(self, name: str,
                         caller: Caller = UNKNOWN_CALLER) -> tuple[Confirmation, int]:
        """Remove a registered collective; (confirmation, plan generation).

        Raises :class:`NotFound`, :class:`Unavailable` (a collective of the policy file)."""
        ...

    async def paths(self, collective: str) -> list[FlowInfo]:
        """The pinned flows of ``collective`` (every one when empty). Raises :class:`NotFound`."""
        ...

    async def status(self) -> Mapping[str, Any]:
        """Everything ``aifabric status`` shows, as plain values.

        Keys: ``fabric``, ``routing_mode`` (str), ``sample_interval_s`` (float),
        ``plan_generation`` (int); ``switches``: list of mappings with ``name``, ``dpid``,
        ``connected``, ``last_sample_age_s`` (-1: never), ``southbound`` (``openflow`` |
        ``p4runtime``), ``role`` (``master`` | ``backup`` | ``none``); ``links``: list of
        :class:`controller.telemetry.LinkStatus`; ``collectives``: mappings with ``name``,
        ``source``, ``flows``, ``bytes_total``, ``collision_links``, ``expected_bytes``;
        ``alerts``: mappings with ``alert``, ``subject``, ``switch``, ``age_s``, ``message``;
        ``traffic``: {(src, dst): bytes}; ``policy``: mapping with ``generation`` (int),
        ``digest`` (sha256 hex), ``source`` (file name), ``applied_unix_s`` (float);
        ``tables`` (None: no capacity known): mapping with ``switches`` (mappings with
        ``switch``, ``pinned_needed``, ``pinned``, ``room`` (-1: unlimited), ``source``),
        ``notes`` and ``fallback_flows`` (str lists);
        ``cluster`` (None alone): ``replica``, ``replicas`` (live, by name), ``masters``
        ({switch: (replica, token)}), ``intent_generation``."""
        ...

    async def apply_policy(self, document: str, source_name: str, dry_run: bool,
                           caller: Caller = UNKNOWN_CALLER) -> PolicyApplyResult:
        """Validate ``document`` (problems located in ``source_name``), compute the per-switch
        diff and, unless ``dry_run``, apply it atomically (rolled back whole on a switch
        error). Never raises for a bad document: the result carries the problems."""
        ...

    async def create_ina_job(self, req: InaJobRequest) -> InaJobGrant:
        """Set up an aggregation job on the controller's aggregation switch (replacing one of
        the same name).

        Raises :class:`FieldError`, :class:`Unavailable` (no aggregation switch, or not
        reachable), :class:`Busy` (no free job id or slot region)."""
        ...

    async def delete_ina_job(self, name: str) -> None:
        """Remove an aggregation job. Raises :class:`NotFound`, :class:`Unavailable`."""
        ...

    async def audit(self, after: int, limit: int) -> AuditPage:
        """The audit records whose sequence is above ``after``, oldest first, at most
        ``limit``."""
        ...

    async def drift(self, switches: tuple[str, ...]) -> DriftReport:
        """Read ``switches`` (every switch when empty) back and compare each with its intended
        plan; nothing is written and the controller's record of what they hold is untouched.

        Raises :class:`NotFound` (a switch the fabric does not have), :class:`Busy` (a check
        is running)."""
        ...

    def subscribe(self, kinds: frozenset[str] | None) -> Subscription:
        """A new event subscription (``kinds``: only those; None: every kind).

        Raises :class:`FieldError` ``kinds`` on an unknown kind, :class:`Busy` when too many
        subscriptions are open."""
        ...

    def unsubscribe(self, sub: Subscription) -> None:
        """End ``sub`` (idempotent)."""
        ...
