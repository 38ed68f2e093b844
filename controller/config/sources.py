"""Where each configuration value comes from: flag > environment > file > default.

:func:`resolve` merges the sources into one :class:`~controller.config.model.ServiceConfig`,
validated once, and records each key's :class:`Origin` (``aifabric config show`` prints it).
A problem names where the bad value came from: ``FILE:LINE:COL: key: message`` for the file
(unknown keys included), ``AIFABRIC_X: key: message`` for the environment, ``--flag: key:
message`` for the command line. Nothing is started when any is found.

Environment variables are ``AIFABRIC_`` + the dotted key in upper case with ``_`` for ``.``
(``openflow.limits.hello_timeout_s`` → ``AIFABRIC_OPENFLOW_LIMITS_HELLO_TIMEOUT_S``); their
text is read as a YAML scalar (``true``, ``0.5``, ``null``). The client commands' own variables
(``AIFABRIC_CONTROLLER``, ``AIFABRIC_CA``, ...) are not configuration keys and are left alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr, ValidationError

from controller.config.model import SECRET_KEYS, ServiceConfig, leaf_keys, path_keys
from controller.errors import ConfigError, ConfigProblem
from controller.yamlsrc import Document, format_path, load_document

Key = tuple[str, ...]
ENV_PREFIX = "AIFABRIC_"
#: AIFABRIC_* variables of the client commands and of --config itself: not configuration keys.
CLIENT_ENV = frozenset({"AIFABRIC_CONTROLLER", "AIFABRIC_CA", "AIFABRIC_CERT", "AIFABRIC_KEY",
                        "AIFABRIC_TOKEN", "AIFABRIC_CONFIG"})
REDACTED = "<redacted>"


@dataclass(frozen=True)
class Flag:
    """A command-line option of ``aifabric controller`` that overrides one key."""

    decls: tuple[str, ...]     # click declarations: ("--listen",) or ("--topology", "-t")
    dest: str                  # the click parameter name
    key: str                   # the dotted configuration key
    help: str
    boolean: bool = False      # --x/--no-x

    @property
    def name(self) -> str:
        return self.decls[0]


def _f(decls: str, dest: str, key: str, help: str, boolean: bool = False) -> Flag:
    return Flag(tuple(decls.split()), dest, key, help, boolean)


#: Every option of ``aifabric controller`` and the key it overrides (the help is the
#: command's; type, range and default are the model's).
FLAGS: tuple[Flag, ...] = (
    _f("--topology -t", "topology", "topology", "Topology file."),
    _f("--policy -p", "policy_file", "policy", "Policy file (SIGHUP re-reads it)."),
    _f("--listen", "listen", "openflow.listen", "OpenFlow listen address HOST:PORT."),
    _f("--log-level", "log_level", "log.level", "DEBUG, INFO, WARNING or ERROR."),
    _f("--log-format", "log_format", "log.format",
       "text, or json: one JSON object per line (level, event, switch, collective, "
       "generation, digest)."),
    _f("--apply-qos", "apply_qos", "qos.apply",
       "Also apply the policy's QoS (linux-htb queues, DSCP filters) to the Open vSwitch "
       "bridges reachable through --ovsdb.", True),
    _f("--ovsdb", "ovsdb", "qos.ovsdb", "OVSDB endpoint used by --apply-qos."),
    _f("--stats-interval", "stats_interval_s", "telemetry.stats_interval_s",
       "Seconds between port/flow statistics requests, 0 or 0.05..3600 (default: off; 1.0 "
       "with --rebalance, metrics or the northbound)."),
    _f("--rebalance", "rebalance", "rebalance.enabled",
       "Move pinned flows off links that measured background load makes hot.", True),
    _f("--rebalance-threshold", "rebalance_threshold", "rebalance.threshold",
       "Act when (background + pinned demand) / capacity of a link exceeds this."),
    _f("--rebalance-margin", "rebalance_margin", "rebalance.margin",
       "Move only if the maximum utilisation falls by at least this much (and count a link's "
       "background only above this fraction of its rate)."),
    _f("--rebalance-hold", "rebalance_hold_s", "rebalance.hold_s",
       "Seconds a moved flow stays on its new path before it may move again."),
    _f("--rebalance-queue-depth", "rebalance_standing_depth", "rebalance.queue_depth",
       "Queue depth (packets on BMv2, cells on Tofino) that counts as a standing queue; 0 = "
       "queue depth not used."),
    _f("--rebalance-queued-fraction", "rebalance_queued_fraction", "rebalance.queued_fraction",
       "Share of a link's packets that must find a standing queue."),
    _f("--fast-failover", "fast_failover", "runtime.fast_failover",
       "Protect pinned entries with fast-failover next hops where a switch has another next "
       "hop towards the destination.", True),
    _f("--metrics-listen", "metrics_listen", "metrics.listen",
       "Serve Prometheus metrics at http://HOST:PORT/metrics (enables telemetry)."),
    _f("--grpc-listen", "grpc_listen", "northbound.listen",
       "Serve the northbound gRPC API (aifabric.v1.Northbound) on HOST:PORT (enables "
       "telemetry)."),
    _f("--view-listen", "view_listen", "view.listen",
       "Serve the live view (a web page of the fabric, its link load, a collective's paths, "
       "events) on HOST:PORT, over TLS with the northbound's tokens (enables telemetry)."),
    _f("--util-ceiling", "util_ceiling", "alerts.util_ceiling",
       "Alert when a link's mean utilisation over --util-window exceeds this."),
    _f("--util-window", "util_window_s", "alerts.util_window_s",
       "Seconds the mean utilisation is taken over."),
    _f("--util-peak", "util_peak", "alerts.util_peak",
       "Alert when one sampling interval exceeds this utilisation."),
    _f("--loss-threshold", "loss_threshold", "alerts.loss_threshold",
       "Alert when a link direction loses more than this fraction of its frames."),
    _f("--microburst-threshold", "microburst_threshold", "telemetry.microburst_threshold",
       "Utilisation of one sampling interval counted as a microburst."),
    _f("--p4-targets", "p4_targets", "p4runtime.targets_file",
       'DEPRECATED: declare southbound: p4runtime and address with the switch in the topology. '
       'JSON {switch: "host:port"} naming the P4Runtime switches.'),
    _f("--p4-target", "p4_target", "p4runtime.target",
       "bmv2: fabric.p4 on simple_switch_grpc; tofino: fabric_tna.p4 (untested here)."),
    _f("--tofino-build", "tofino_build", "p4runtime.tofino_build",
       "bf-p4c output directory of fabric_tna.p4 (pipe/tofino.bin, pipe/context.json)."),
    _f("--p4-liveness-interval", "p4_liveness_interval_s", "p4runtime.liveness.interval_s",
       "Seconds between LLDP liveness probes on the P4Runtime switches' fabric ports; 0 = off."),
    _f("--p4-liveness-misses", "p4_liveness_misses", "p4runtime.liveness.misses",
       "A P4 port is down after this many intervals without a probe."),
    _f("--p4-liveness-hold", "p4_liveness_hold_s", "p4runtime.liveness.hold_s",
       "Seconds a P4 port taken down must hear probes without a gap before it is up again."),
    _f("--p4-dataplane-misses", "p4_dataplane_misses", "p4runtime.liveness.dataplane_misses",
       "With --fast-failover: a P4 switch's protected hop judges a port dead after this many "
       "intervals without a frame (default: --p4-liveness-misses)."),
    _f("--ina-switch", "ina_address", "ina.address",
       "P4Runtime address (host:port or unix:PATH) of the in-network aggregation switch "
       "(p4/aggregation) the northbound CreateInaJob sets jobs up on."),
    _f("--ina-host", "ina_host", "ina.host",
       "The topology host standing for the aggregation switch (its address is the service "
       "address workers send to)."),
    _f("--ina-device-id", "ina_device_id", "ina.device_id",
       "P4Runtime device id of the aggregation switch."),
    _f("--ina-port", "ina_port", "ina.port", "The aggregation switch's port facing the fabric."),
    _f("--ina-pool-size", "ina_pool_size", "ina.pool_size", "Default slots per aggregation job."),
    _f("--election-id", "p4_election_id", "p4runtime.election_id",
       "P4Runtime election_id (the highest connected client is primary)."),
    _f("--openflow-role", "openflow_role", "openflow.role",
       "OpenFlow role to request (with --generation-id): equal, master or backup."),
    _f("--generation-id", "generation_id", "openflow.generation_id",
       "OpenFlow role request generation_id (the fencing token of --openflow-role)."),
    _f("--hello-timeout", "hello_timeout_s", "openflow.limits.hello_timeout_s",
       "Seconds an OpenFlow connection may take to send its HELLO before it is closed."),
    _f("--handshake-timeout", "handshake_timeout_s", "openflow.limits.handshake_timeout_s",
       "Seconds an OpenFlow switch may take to finish the handshake."),
    _f("--max-unfinished", "max_unfinished", "openflow.limits.max_unfinished",
        "OpenFlow connections that may be unfinished at once (default: the fabric's OpenFlow "
        "switches + 64); a new one beyond closes the oldest without its HELLO (of the busiest "
        "source), or is refused when none is."),
    _f("--certs", "certs", "tls.certs_dir",
       "Directory of `aifabric certs init`: controller.crt/.key, ca.crt and tokens (single "
       "files override it)."),
    _f("--cert", "cert", "tls.cert",
       "The controller's certificate (PEM): OpenFlow listener, gRPC northbound, P4Runtime "
       "client."),
    _f("--key", "key", "tls.key", "Its private key (PEM)."),
    _f("--ca", "ca", "tls.ca",
       "CA of the peers' certificates (switches, P4Runtime targets, --mtls clients)."),
    _f("--tokens", "tokens", "northbound.tokens_file",
       "Bearer token file (ROLE TOKEN [NAME] per line)."),
    _f("--mtls", "mtls", "northbound.mtls",
       "Northbound clients must present a certificate signed by --ca.", True),
    _f("--insecure", "insecure", "tls.insecure",
       "Allow plain text (and calls without a token) on every channel without TLS material; "
       "each is logged as INSECURE. For labs on loopback only.", True),
    _f("--etcd-ca", "etcd_ca", "cluster.etcd_ca", "CA of the etcd members' certificates."),
    _f("--etcd-cert", "etcd_cert", "cluster.etcd_cert",
       "Client certificate for etcd's --client-cert-auth."),
    _f("--etcd-key", "etcd_key", "cluster.etcd_key", "Its private key."),
    _f("--metrics-tls", "metrics_tls", "metrics.tls",
       "Serve the metrics over HTTPS with the controller's certificate.", True),
    _f("--metrics-user", "metrics_user", "metrics.user",
       "Require HTTP basic auth on the metrics endpoint (this user)."),
    _f("--metrics-password-file", "metrics_password_file", "metrics.password_file",
       "File holding the metrics password (at least 12 characters)."),
    _f("--cluster", "cluster_url", "cluster.url",
       "etcd://HOST:PORT[,...]: run as one replica of a cluster whose state lives in etcd."),
    _f("--replica", "replica", "cluster.replica",
       "This replica's name, unique among the live replicas."),
    _f("--lease-ttl", "lease_ttl_s", "cluster.lease_ttl_s",
       "Mastership lease TTL, s (etcd grants at least ceil(1.5 x its --election-timeout))."),
    _f("--keepalive-interval", "keepalive_interval_s", "cluster.keepalive_interval_s",
       "Seconds between lease keep-alives (at most TTL/3)."),
    _f("--failure-detector-ms", "failure_detector_ms", "cluster.failure_detector.window_ms",
       "Revoke the lease of a replica whose heartbeat stopped for this many ms (0: off)."),
    _f("--heartbeat-interval-ms", "heartbeat_interval_ms",
       "cluster.failure_detector.heartbeat_interval_ms",
       "Milliseconds between heartbeats (at most half the detector's window)."),
    _f("--cluster-confirm-timeout", "cluster_confirm_timeout_s", "cluster.confirm_timeout_s",
       "How long a northbound write waits for the masters of the switches it changes."),
    _f("--audit-file", "audit_file", "audit.file",
       "Keep the audit trail (who changed what, and the outcome) in this append-only JSON-lines "
       "file; a cluster keeps it in etcd."),
)


@dataclass(frozen=True)
class Origin:
    """Where a key's value came from: ``kind`` is default, file, environment or flag;
    ``where`` says which (``aifabric.yaml:3:9``, ``AIFABRIC_LOG_LEVEL``, ``--log-level``)."""

    kind: str
    where: str = ""

    def __str__(self) -> str:
        return self.kind if not self.where else f"{self.kind} {self.where}"


@dataclass(frozen=True)
class Resolved:
    """The effective configuration, each leaf key's origin, and warnings (unknown
    ``AIFABRIC_*`` variables, deprecated keys)."""

    config: ServiceConfig
    origins: Mapping[Key, Origin]
    warnings: tuple[str, ...] = ()


def env_name(key: Key) -> str:
    """``('openflow', 'listen')`` → ``AIFABRIC_OPENFLOW_LISTEN``."""
    return ENV_PREFIX + "_".join(key).upper()


def _set(data: dict[str, Any], key: Key, value: Any) -> None:
    node = data
    for part in key[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[key[-1]] = value


def _scalar(text: str) -> Any:
    """An environment variable's text as a YAML scalar (``true``, ``0.5``, ``null``)."""
    from ruamel.yaml import YAML

    try:
        value = YAML(typ="safe", pure=True).load(text)
    except Exception:  # not YAML: the text itself (the model says what is wrong with it)
        return text
    return value if value is None or isinstance(value, str | int | float | bool) else text


def _file_leaves(doc: Document) -> list[Key]:
    """The keys the file sets (leaves: scalars, lists, and mappings that are not sections)."""
    sections = {p[:i] for p, _ in leaf_keys() for i in range(1, len(p))}
    out: list[Key] = []

    def walk(node: Any, path: Key) -> None:
        if isinstance(node, dict) and (not path or path in sections):
            for k, v in node.items():
                walk(v, path + (str(k),))
        elif path:
            out.append(path)

    walk(doc.data, ())
    return out


def resolve(file: str | Path | None = None, env: Mapping[str, str] | None = None,
            flags: Mapping[str, Any] | None = None) -> Resolved:
    """Merge ``file`` (YAML), ``env`` (``os.environ`` when None) and ``flags`` (dotted key →
    value, only the flags given) into one validated configuration.

    Raises
    ------
    ConfigError
        Every problem of every source (the file's at FILE:LINE:COL; unknown keys refused).
    """
    env = os.environ if env is None else env
    data: dict[str, Any] = {}
    origins: dict[Key, Origin] = {}
    doc: Document | None = None
    paths = path_keys()
    if file is not None:
        doc = load_document(file)
        data = doc.data
        base = Path(file).resolve().parent
        for key in _file_leaves(doc):
            line, col = doc.where(key)
            origins[key] = Origin("file", f"{doc.file}:{line}:{col}")
            if key in paths:
                node: Any = data
                for part in key[:-1]:
                    node = node[part]
                v = node[key[-1]]
                if isinstance(v, str) and v and not Path(v).is_absolute():
                    node[key[-1]] = os.path.normpath(base / v)
    known = {env_name(k): k for k, _ in leaf_keys()}
    warnings = [f"environment {name}: not a configuration key (ignored)"
                for name in sorted(env) if name.startswith(ENV_PREFIX)
                and name not in known and name not in CLIENT_ENV]
    for name, key in known.items():
        if name in env:
            _set(data, key, _scalar(env[name]))
            origins[key] = Origin("environment", name)
    by_key = {f.key: f for f in FLAGS}
    for dotted, value in (flags or {}).items():
        key = tuple(dotted.split("."))
        _set(data, key, value)
        origins[key] = Origin("flag", by_key[dotted].name if dotted in by_key else dotted)
    try:
        config = ServiceConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_problems(exc, data, doc, origins)) from None
    full = {k: origins.get(k, Origin("default")) for k, _ in leaf_keys()}
    if config.p4runtime.targets_file is not None:
        warnings.append(f"p4runtime.targets_file ({full[('p4runtime', 'targets_file')]}) is "
                        "deprecated: declare southbound: p4runtime and address with each switch "
                        "in the topology (switches: section)")
    return Resolved(config, full, tuple(warnings))


def _problems(exc: ValidationError, data: Any, doc: Document | None,
              origins: Mapping[Key, Origin]) -> list[ConfigProblem]:
    from controller.yamlsrc import _loc_to_path, _message

    out = []
    for err in exc.errors(include_url=False):
        path = tuple(str(p) for p in _loc_to_path(tuple(err["loc"]), data))
        msg = "required field is missing" if err["type"] == "missing" else _message(err)
        origin = None
        for i in range(len(path), 0, -1):
            origin = origins.get(path[:i])
            if origin is not None:
                break
        if origin is not None and origin.kind != "file":
            out.append(ConfigProblem(origin.where, 0, 0, format_path(path), msg))
        elif doc is not None:
            out.append(doc.problem(path, msg, key=err["type"] == "extra_forbidden"))
        else:
            out.append(ConfigProblem("configuration", 0, 0, format_path(path), msg))
    return sorted(out, key=lambda p: (p.file, p.line, p.column))


def render_problem(p: ConfigProblem) -> str:
    """``FILE:LINE:COL: key: message`` for the file; ``SOURCE: key: message`` for a flag or an
    environment variable (they have no line)."""
    if p.line:
        return str(p)
    what = f"{p.field}: {p.message}" if p.field else p.message
    return f"{p.file}: {what}"


def value_of(config: ServiceConfig, key: Key) -> Any:
    node: Any = config
    for part in key:
        node = getattr(node, part)
    return node


def show_lines(res: Resolved) -> list[str]:
    """``key: value  # origin`` per key, secrets redacted (``aifabric config show``)."""
    rows = []
    for key, _ in leaf_keys():
        v = value_of(res.config, key)
        dotted = ".".join(key)
        if dotted in SECRET_KEYS or isinstance(v, SecretStr):
            text = "null" if v is None else REDACTED
        elif v is None:
            text = "null"
        elif isinstance(v, bool):
            text = "true" if v else "false"
        else:
            text = str(v)
        rows.append((dotted, text, str(res.origins[key])))
    width = max(len(d) + len(t) for d, t, _ in rows) + 3
    return [f"{(d + ': ' + t).ljust(width)}# {o}" for d, t, o in rows]
