"""The controller's service configuration: one typed, immutable object, in sections.

``aifabric controller --config aifabric.yaml`` reads it from a YAML file; every command-line
option and every ``AIFABRIC_<SECTION>_<KEY>`` environment variable overrides one key
(:mod:`controller.config.sources`: flag > environment > file > default). The model is the one
definition of every key: its type, unit (in its name: ``_s`` seconds, ``_ms`` milliseconds),
default and range; the command-line flags are generated from the same table
(:data:`controller.config.sources.FLAGS`).

Keys that name files are resolved relative to the configuration file's directory when they
come from the file (as a policy's or experiment's relative paths are), relative to the working
directory when they come from a flag or the environment. Keys whose value is a secret
(:data:`SECRET_KEYS`) are never printed (``aifabric config show`` redacts them).

Sources of the constraints (the same ranges the command line has always had): the statistics
interval's lower bound (a shorter one polls every switch in a busy loop), etcd's whole-second
leases and ``ceil(1.5 x election timeout)`` minimum (:mod:`controller.cluster.lease`), the
failure detector's window and heartbeat (:mod:`controller.cluster.detector`), the OpenFlow
listener's limits (:mod:`controller.drivers.openflow.listener`), P4Runtime's 128-bit
election_id (P4Runtime spec v1.3 §5.3).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

#: Marks a key whose value is a file or directory path (resolved against the config file).
PATH = "path"
#: Dotted keys whose values are secrets: redacted whenever the configuration is printed.
SECRET_KEYS = frozenset({"metrics.password"})
#: The shortest statistics interval (s) other than 0 (off): shorter polls in a busy loop.
MIN_STATS_INTERVAL_S = 0.05
DEFAULT_OVSDB = "unix:/var/run/openvswitch/db.sock"

Seconds = Annotated[float, Field(allow_inf_nan=False)]
FilePath = Annotated[str | None, PATH]


def _host_port(value: str | None, allow_zero: bool) -> str | None:
    """``HOST:PORT`` with PORT in 1..65535 (0 allowed for listeners that may take any port)."""
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    lo = 0 if allow_zero else 1
    if not sep or not host or not port.isdigit() or not lo <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT with PORT in {lo}..65535, got {value!r}")
    return value


class Section(BaseModel):
    """Every section refuses unknown keys and is immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=False)


class LogSection(Section):
    """``log``: ``level`` and ``format`` (``text``: one human line per event; ``json``: one
    JSON object per line with level, event, switch, collective, generation, digest)."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["text", "json"] = "text"

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v


class OpenFlowLimits(Section):
    """``openflow.limits``: what an unfinished OpenFlow connection may cost the listener.
    ``max_unfinished`` None: the fabric's OpenFlow switches + 64 (every switch may be in its
    handshake at once when the controller starts; 64 more for anything else)."""

    hello_timeout_s: Annotated[Seconds, Field(ge=0.1, le=600.0)] = 5.0
    handshake_timeout_s: Annotated[Seconds, Field(ge=0.1, le=600.0)] = 10.0
    max_unfinished: Annotated[int, Field(ge=1, le=100_000)] | None = None


class OpenFlowSection(Section):
    """``openflow``: the listener OpenFlow switches connect to, and the role requested."""

    listen: str = "127.0.0.1:6653"
    role: Literal["equal", "master", "backup"] = "equal"
    generation_id: Annotated[int, Field(ge=0, le=2**64 - 1)] | None = None
    lldp_interval_s: Annotated[Seconds, Field(gt=0.0, le=3600.0)] = 5.0
    limits: OpenFlowLimits = OpenFlowLimits()

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str | None:
        return _host_port(v, allow_zero=False)

    @field_validator("generation_id")
    @classmethod
    def _generation(cls, v: int | None, info: ValidationInfo) -> int | None:
        if v is not None and info.data.get("role") == "equal":
            raise ValueError("a generation_id goes with role master or backup")
        return v


class LivenessSection(Section):
    """``p4runtime.liveness``: LLDP probes on every switch-switch port of the P4Runtime
    switches (P4Runtime has no port status); ``interval_s`` 0 turns them off. The controller
    takes a port down after ``misses`` silent intervals; with fast failover, the switches' own
    protected hops judge a port dead after ``dataplane_misses`` intervals without a frame
    (None: ``misses``). The data plane hears every frame, the controller only its probes
    (whose timing jitters with the controller's CPU), so the data plane can afford the
    shorter window."""

    interval_s: Annotated[Seconds, Field(ge=0.0, le=3600.0)] = 0.25
    misses: Annotated[int, Field(ge=1, le=1000)] = 3
    hold_s: Annotated[Seconds, Field(gt=0.0, le=4294.0)] = 10.0
    dataplane_misses: Annotated[int | None, Field(ge=1, le=1000)] = None


class P4RuntimeSection(Section):
    """``p4runtime``: the P4 target of the switches the topology declares with ``southbound:
    p4runtime`` (a switch's own ``target`` wins), the election_id, and liveness.

    ``targets_file`` is the deprecated ``--p4-targets`` JSON ``{switch: "host:port"}``."""

    target: Literal["bmv2", "tofino"] = "bmv2"
    tofino_build: FilePath = None
    election_id: Annotated[int, Field(ge=1, le=2**128 - 1)] = 10
    targets_file: FilePath = None
    liveness: LivenessSection = LivenessSection()


class QosSection(Section):
    """``qos``: apply the policy's queues and DSCP filters to Open vSwitch through OVSDB."""

    apply: bool = False
    ovsdb: str = DEFAULT_OVSDB


class TlsSection(Section):
    """``tls``: the controller's certificate and key (OpenFlow listener, gRPC northbound,
    P4Runtime client), the CA of its peers, or ``certs_dir`` (``aifabric certs init``'s
    layout; single files override it). ``insecure`` allows plain text on channels without TLS
    material (each logged as INSECURE): labs on loopback only."""

    certs_dir: FilePath = None
    cert: FilePath = None
    key: FilePath = None
    ca: FilePath = None
    insecure: bool = False


class NorthboundSection(Section):
    """``northbound``: the gRPC API (``aifabric.v1.Northbound``), off unless ``listen`` is set;
    bearer tokens (``tokens_file``: ROLE TOKEN [NAME] per line), client certificates
    (``mtls``)."""

    listen: str | None = None
    tokens_file: FilePath = None
    mtls: bool = False

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str | None) -> str | None:
        return _host_port(v, allow_zero=True)


class MetricsSection(Section):
    """``metrics``: the Prometheus endpoint, off unless ``listen`` is set; HTTPS (``tls``, the
    controller's certificate) and basic auth (``user`` with ``password_file`` or ``password``,
    at least 12 characters; prefer the file or the environment to the configuration file)."""

    listen: str | None = None
    tls: bool = False
    user: str | None = None
    password_file: FilePath = None
    password: SecretStr | None = None

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str | None) -> str | None:
        return _host_port(v, allow_zero=True)

    @field_validator("password")
    @classmethod
    def _one_password(cls, v: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if v is not None and info.data.get("password_file") is not None:
            raise ValueError("give password_file or password, not both")
        return v


class ViewSection(Section):
    """``view``: the live view, a web page of the fabric (link utilisation, a collective's
    paths, events, mastership, the policy in force), off unless ``listen`` is set. It runs
    over TLS with the controller's certificate (``tls``) and takes the northbound's bearer
    tokens (``northbound.tokens_file``, any role); plain text and no token only with
    ``tls.insecure``. Bounded: ``max_connections`` open at once (``max_streams`` of them live
    event streams), ``read_timeout_s`` for a TLS handshake and for a whole request,
    ``write_timeout_s`` for every write to a client (:mod:`controller.view.http`)."""

    listen: str | None = None
    max_connections: Annotated[int, Field(ge=2, le=10_000)] = 64
    max_streams: Annotated[int, Field(ge=1, le=9_999)] = 16
    read_timeout_s: Annotated[Seconds, Field(ge=0.1, le=600.0)] = 10.0
    write_timeout_s: Annotated[Seconds, Field(ge=0.1, le=600.0)] = 10.0

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str | None) -> str | None:
        return _host_port(v, allow_zero=True)

    @model_validator(mode="after")
    def _streams_below_connections(self) -> ViewSection:
        if self.max_streams >= self.max_connections:
            raise ValueError(f"max_streams ({self.max_streams}) must be below max_connections "
                             f"({self.max_connections}): a page must still load")
        return self


class TelemetrySection(Section):
    """``telemetry``: statistics requests (``stats_interval_s``: 0 or 0.05..3600; default off,
    1 s when re-balancing, the metrics endpoint or the northbound is on) and what counts as a
    microburst (the utilisation of one sampling interval)."""

    stats_interval_s: Annotated[Seconds, Field(ge=0.0, le=3600.0)] | None = None
    microburst_threshold: Annotated[float, Field(gt=0.0, le=10.0, allow_inf_nan=False)] = 0.95

    @field_validator("stats_interval_s")
    @classmethod
    def _not_busy(cls, v: float | None) -> float | None:
        if v is not None and 0 < v < MIN_STATS_INTERVAL_S:
            raise ValueError(f"{v:g} s would poll every switch in a busy loop; use 0 (off) or "
                             f"{MIN_STATS_INTERVAL_S:g}..3600")
        return v


Ratio = Annotated[float, Field(gt=0.0, le=10.0, allow_inf_nan=False)]


class AlertsSection(Section):
    """``alerts``: a link's mean utilisation over ``util_window_s`` above ``util_ceiling``, one
    sampling interval above ``util_peak``, a direction losing more than ``loss_threshold`` of
    its frames."""

    util_ceiling: Ratio = 0.8
    util_window_s: Annotated[Seconds, Field(gt=0.0, le=86400.0)] = 10.0
    util_peak: Ratio = 0.95
    loss_threshold: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)] = 0.01


class RebalanceSection(Section):
    """``rebalance``: move pinned flows off links that measured background load makes hot.

    ``margin`` 0.25: Open vSwitch's userspace datapath reported pinned-entry bytes ~20 % below
    its port counters for the same traffic in the lab. ``queue_depth`` is in the switch's unit
    (packets on BMv2, cells on Tofino); 0 = queue depth not used."""

    enabled: bool = False
    threshold: Ratio = 0.9
    margin: Annotated[float, Field(ge=0.0, le=10.0, allow_inf_nan=False)] = 0.25
    hold_s: Annotated[Seconds, Field(ge=0.0, le=86400.0)] = 5.0
    queue_depth: Annotated[int, Field(ge=0, le=1_000_000)] = 8
    queued_fraction: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)] = 0.5


class FailureDetectorSection(Section):
    """``cluster.failure_detector``: heartbeats in etcd; a replica whose heartbeat stopped for
    ``window_ms`` while ours kept committing loses its lease (0: off, leases alone)."""

    window_ms: Annotated[int, Field(ge=0, le=60_000)] = 0
    heartbeat_interval_ms: Annotated[int, Field(ge=10, le=30_000)] = 100


class ClusterSection(Section):
    """``cluster``: one replica of a cluster whose state lives in etcd (``url`` and ``replica``
    together), its lease, TLS to etcd and the failure detector."""

    url: str | None = None
    replica: str | None = None
    lease_ttl_s: Annotated[int, Field(ge=1, le=60)] = 1
    keepalive_interval_s: Annotated[Seconds, Field(ge=0.01, le=20.0)] = 0.2
    confirm_timeout_s: Annotated[Seconds, Field(ge=0.1, le=3600.0)] = 10.0
    start_timeout_s: Annotated[Seconds, Field(gt=0.0, le=3600.0)] = 15.0
    connect_wait_s: Annotated[Seconds, Field(ge=0.0, le=3600.0)] = 10.0
    etcd_ca: FilePath = None
    etcd_cert: FilePath = None
    etcd_key: FilePath = None
    failure_detector: FailureDetectorSection = FailureDetectorSection()

    @model_validator(mode="after")
    def _together(self) -> ClusterSection:
        if (self.url is None) != (self.replica is None):
            raise ValueError("url and replica go together (one replica of the cluster at url)")
        return self


class InaSection(Section):
    """``ina``: the controller's in-network aggregation switch (a switch running
    p4/aggregation, attached to the fabric where the topology's host ``host`` is: that host's
    address is the service address workers send to). The controller sets jobs up on it over
    P4Runtime (``address``, ``device_id``; its role ``aifabric.ina``) when the northbound
    ``CreateInaJob`` asks; ``port`` is the switch's port facing the fabric, ``pool_size`` the
    default slots per job. No ``address``: no aggregation switch (CreateInaJob is refused)."""

    address: str | None = None
    device_id: Annotated[int, Field(ge=0, le=2**64 - 1)] = 1
    host: str | None = None
    port: Annotated[int, Field(ge=0, le=510)] = 1
    pool_size: Annotated[int, Field(ge=1, le=4096)] = 64
    election_id: Annotated[int, Field(ge=1, le=2**128 - 1)] = 10


class RuntimeSection(Section):
    """``runtime``: fast failover (pinned entries protected by a failover next hop where the
    switch has another towards the destination), how long a write waits for a switch's
    confirmation, and how long start-up waits for every switch before it says READY to
    systemd anyway (``ready_timeout_s``)."""

    fast_failover: bool = False
    confirm_timeout_s: Annotated[Seconds, Field(gt=0.0, le=3600.0)] = 5.0
    ready_timeout_s: Annotated[Seconds, Field(gt=0.0, le=86400.0)] = 60.0


class AuditSection(Section):
    """``audit``: the audit trail (who applied which policy, registered or unregistered which
    collective, and this controller's role changes; :mod:`controller.runtime.audit`). A
    cluster keeps it in etcd; a controller alone in ``file``, an append-only JSON-lines file
    (null: in memory only, lost at a restart). ``retention_records``: the newest records kept
    (etcd deletes older ones as it appends; the file is rotated to ``FILE.1`` when it holds that
    many, so up to twice as many are on disk). Sized for etcd: 10,000 records of a few KiB."""

    file: FilePath = None
    retention_records: Annotated[int, Field(ge=1, le=1_000_000)] = 10_000


class ServiceConfig(Section):
    """The whole configuration of ``aifabric controller`` (module docstring)."""

    topology: FilePath = None
    policy: FilePath = None
    log: LogSection = LogSection()
    openflow: OpenFlowSection = OpenFlowSection()
    p4runtime: P4RuntimeSection = P4RuntimeSection()
    qos: QosSection = QosSection()
    tls: TlsSection = TlsSection()
    northbound: NorthboundSection = NorthboundSection()
    metrics: MetricsSection = MetricsSection()
    view: ViewSection = ViewSection()
    telemetry: TelemetrySection = TelemetrySection()
    alerts: AlertsSection = AlertsSection()
    rebalance: RebalanceSection = RebalanceSection()
    cluster: ClusterSection = ClusterSection()
    runtime: RuntimeSection = RuntimeSection()
    ina: InaSection = InaSection()
    audit: AuditSection = AuditSection()


def leaf_keys(model: type[BaseModel] = ServiceConfig, prefix: tuple[str, ...] = ()
              ) -> list[tuple[tuple[str, ...], Any]]:
    """Every leaf key of ``model`` as (path, pydantic FieldInfo), in declaration order."""
    out: list[tuple[tuple[str, ...], Any]] = []
    for name, info in model.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, Section):
            out.extend(leaf_keys(ann, prefix + (name,)))
        else:
            out.append((prefix + (name,), info))
    return out


def path_keys() -> frozenset[tuple[str, ...]]:
    """The keys whose values are file or directory paths (marked :data:`PATH`)."""
    return frozenset(p for p, info in leaf_keys() if PATH in info.metadata)
