"""The service configuration → what the runtime runs with.

:func:`controller_options` turns a validated
:class:`~controller.config.model.ServiceConfig` (file, environment and flags merged) into the
runtime's :class:`~controller.runtime.process.ControllerOptions`: the re-balancing hysteresis,
the alert rules, every channel's security options and the cluster's options, built once here
(they used to be built by the command line).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from controller.config.model import ServiceConfig

if TYPE_CHECKING:
    from controller.runtime.channels import SecurityOptions
    from controller.runtime.cluster import ClusterOptions
    from controller.runtime.process import ControllerOptions
    from controller.view.limits import ViewLimits


class OptionsError(ValueError):
    """A combination of keys the model alone cannot refuse (the message names the keys)."""


def _host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")  # validated HOST:PORT by the model
    return host, int(port)


def security_options(cfg: ServiceConfig) -> SecurityOptions:
    """Every channel's TLS and authentication options (``tls``, ``northbound``, ``metrics``,
    ``cluster.etcd_*``); ``tls.certs_dir`` fills the files not given one by one."""
    from controller.runtime.channels import SecurityOptions

    pw = cfg.metrics.password.get_secret_value() if cfg.metrics.password is not None else None
    kw = dict(cert=cfg.tls.cert, key=cfg.tls.key, ca=cfg.tls.ca,
              tokens=cfg.northbound.tokens_file, mtls=cfg.northbound.mtls,
              insecure=cfg.tls.insecure, etcd_ca=cfg.cluster.etcd_ca,
              etcd_cert=cfg.cluster.etcd_cert, etcd_key=cfg.cluster.etcd_key,
              metrics_tls=cfg.metrics.tls, metrics_user=cfg.metrics.user,
              metrics_password_file=cfg.metrics.password_file, metrics_password=pw)
    if cfg.tls.certs_dir is not None:
        return SecurityOptions.from_dir(cfg.tls.certs_dir, **kw)
    return SecurityOptions(**kw)  # type: ignore[arg-type]


def cluster_options(cfg: ServiceConfig) -> ClusterOptions | None:
    """The cluster's options (None: standalone). Raises OptionsError (a bad URL, a lease or a
    detector whose timings do not fit together)."""
    c = cfg.cluster
    if c.url is None or c.replica is None:
        return None
    from controller.cluster.detector import DetectorSettings
    from controller.cluster.etcd import ClusterURLError, parse_cluster_url
    from controller.cluster.lease import LeaseSettings
    from controller.runtime.cluster import ClusterOptions

    try:
        parse_cluster_url(c.url)
    except ClusterURLError as exc:
        raise OptionsError(f"cluster.url: {exc}") from None
    try:
        lease = LeaseSettings(ttl_s=c.lease_ttl_s, keepalive_interval_s=c.keepalive_interval_s,
                              margin_s=min(0.1, c.lease_ttl_s - c.keepalive_interval_s - 0.01))
    except ValueError as exc:
        raise OptionsError(f"cluster.lease_ttl_s/keepalive_interval_s: {exc}") from None
    detector = None
    if c.failure_detector.window_ms:
        try:
            detector = DetectorSettings.from_window_ms(c.failure_detector.window_ms,
                                                       c.failure_detector.heartbeat_interval_ms)
        except ValueError as exc:
            raise OptionsError(f"cluster.failure_detector: {exc}") from None
    adv = {"openflow": cfg.openflow.listen,
           **({"northbound": cfg.northbound.listen} if cfg.northbound.listen else {})}
    return ClusterOptions(c.url, c.replica, lease=lease, confirm_timeout_s=c.confirm_timeout_s,
                          start_timeout_s=c.start_timeout_s, connect_wait_s=c.connect_wait_s,
                          advertise=adv, detector=detector)


def view_limits(cfg: ServiceConfig) -> ViewLimits:
    """The live view's bounds (``view.*``)."""
    from controller.view.http import HTTPLimits
    from controller.view.limits import ViewLimits

    v = cfg.view
    return ViewLimits(HTTPLimits(max_connections=v.max_connections,
                                 read_timeout_s=v.read_timeout_s,
                                 write_timeout_s=v.write_timeout_s), max_streams=v.max_streams)


def controller_options(cfg: ServiceConfig) -> ControllerOptions:
    """The runtime's options for ``cfg``. Raises OptionsError."""
    from controller.runtime.ina import InaOptions
    from controller.runtime.process import ControllerOptions
    from controller.te.reroute import Hysteresis
    from controller.telemetry import AlertRules

    r, t = cfg.rebalance, cfg.telemetry
    stats_s = t.stats_interval_s
    if r.enabled and stats_s is None:
        stats_s = 1.0
    if r.enabled and not stats_s:
        raise OptionsError("rebalance.enabled needs statistics (telemetry.stats_interval_s > 0)")
    host, port = _host_port(cfg.openflow.listen)
    a = cfg.alerts
    try:
        rules = AlertRules(utilisation_ceiling=a.util_ceiling, utilisation_peak=a.util_peak,
                           window_s=a.util_window_s, loss_ratio=a.loss_threshold)
    except ValueError as exc:
        raise OptionsError(f"alerts: {exc}") from None
    of, p4 = cfg.openflow, cfg.p4runtime
    return ControllerOptions(
        listen_host=host, listen_port=port, log_level=cfg.log.level,
        log_format=cfg.log.format, lldp_interval_s=of.lldp_interval_s,
        apply_qos=cfg.qos.apply, ovsdb=cfg.qos.ovsdb, stats_interval_s=stats_s or None,
        rebalance=Hysteresis(r.threshold, r.margin, r.hold_s) if r.enabled else None,
        standing_depth=r.queue_depth or None, queued_fraction=r.queued_fraction,
        fast_failover=cfg.runtime.fast_failover,
        metrics_listen=_host_port(cfg.metrics.listen) if cfg.metrics.listen else None,
        grpc_listen=_host_port(cfg.northbound.listen) if cfg.northbound.listen else None,
        view_listen=_host_port(cfg.view.listen) if cfg.view.listen else None,
        view_limits=view_limits(cfg),
        alert_rules=rules, microburst_threshold=t.microburst_threshold,
        p4_targets=p4.targets_file, p4_target=p4.target, p4_election_id=p4.election_id,
        tofino_build=p4.tofino_build, openflow_role=of.role, generation_id=of.generation_id,
        hello_timeout_s=of.limits.hello_timeout_s,
        handshake_timeout_s=of.limits.handshake_timeout_s,
        max_unfinished=of.limits.max_unfinished, confirm_timeout_s=cfg.runtime.confirm_timeout_s,
        p4_liveness_interval_s=p4.liveness.interval_s,
        p4_liveness_misses=p4.liveness.misses, p4_liveness_hold_s=p4.liveness.hold_s,
        p4_dataplane_misses=p4.liveness.dataplane_misses,
        ina=InaOptions(cfg.ina.address, cfg.ina.device_id, cfg.ina.host, cfg.ina.port,
                       cfg.ina.pool_size, cfg.ina.election_id) if cfg.ina.address else None,
        ready_timeout_s=cfg.runtime.ready_timeout_s,
        audit_file=cfg.audit.file, audit_retention=cfg.audit.retention_records,
        security=security_options(cfg), cluster=cluster_options(cfg))
