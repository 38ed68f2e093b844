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
from typing import Any, Protocol

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


# -- the service ----------------------------------------------------------------------------------
class NorthboundService(Protocol):
    """What the northbound API can do with a running controller (implemented by the runtime).

    Every coroutine runs on the controller's one asyncio event loop, the loop the gRPC server
    runs on; ``subscribe``/``unsubscribe`` are plain calls on that loop.
    """

    async def register(self, req: CollectiveRequest) -> Registration:
        """Validate, pin and program a collective; return once every switch concerned confirmed
        or the confirmation timeout passed (:class:`Confirmation` says which). Concurrent calls
        may be batched into one plan change.

        Raises :class:`FieldError` (the field named), :class:`Unavailable`, :class:`Busy`."""
        ...

    async def unregister(self, name: str) -> tuple[Confirmation, int]:
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

    async def apply_policy(self, document: str, source_name: str,
                           dry_run: bool) -> PolicyApplyResult:
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

    def subscribe(self, kinds: frozenset[str] | None) -> Subscription:
        """A new event subscription (``kinds``: only those; None: every kind).

        Raises :class:`FieldError` ``kinds`` on an unknown kind, :class:`Busy` when too many
        subscriptions are open."""
        ...

    def unsubscribe(self, sub: Subscription) -> None:
        """End ``sub`` (idempotent)."""
        ...
