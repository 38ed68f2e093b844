"""The controller process: load and validate, compute the initial plan, run the os-ken app.

``run_controller`` is what ``aifabric controller`` calls. os-ken is imported inside the function,
so importing this module is cheap.

Shutdown: SIGTERM and SIGINT set a stop event watched by the main thread, which closes the
listening socket and every switch connection, stops the os-ken apps, and returns 0. os-ken's
native hub runs everything on plain threads that cannot be killed; all of them are started from
one daemon thread (threads inherit the daemon flag), so none can keep the process alive after
``run_controller`` returns.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

from controller.errors import ConfigError, PlanInvariantError
from controller.model.topology import Fabric, load_topology
from controller.qos.validate import load_policy_checked
from controller.runtime.state import ControllerRuntime
from controller.te.reroute import Hysteresis

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2

APP_MODULE = "controller.drivers.openflow.app"
DEFAULT_OVSDB = "unix:/var/run/openvswitch/db.sock"
LOG = logging.getLogger("aifabric.runtime")


def pinning_summary(pinning: Any) -> tuple[int, int]:
    """(number of pinned flows, most pinned flows on one directed link); (0, 0) in ECMP mode.

    ``pinning`` is :class:`controller.te.pinning.Pinning` (``paths``, ``max_link_flows``) or None.
    """
    if pinning is None:
        return 0, 0
    return len(pinning.paths), int(pinning.max_link_flows)


def summary_lines(fabric: Fabric, runtime: ControllerRuntime) -> list[str]:
    """The short start-up summary printed by :func:`run_controller`."""
    result = runtime.result
    pinned, max_per_link = pinning_summary(getattr(result, "pinning", None))
    plan = runtime.plan
    flows = sum(len(sp.flows) for sp in plan.switches.values())
    groups = sum(len(sp.groups) for sp in plan.switches.values())
    return [
        f"fabric {fabric.name} ({fabric.kind}, {fabric.source}): {len(fabric.switches)} switches, "
        f"{len(fabric.hosts)} hosts, {len(fabric.links)} links",
        f"routing mode {runtime.policy.routing.mode}: {pinned} pinned flow(s), "
        f"at most {max_per_link} pinned flow(s) per link (per direction)",
        f"plan: {flows} flow entries and {groups} groups on {len(plan.switches)} switches",
    ]


def adaptive_lines(runtime: ControllerRuntime, stats_interval_s: float | None,
                   rebalance: Hysteresis | None) -> list[str]:
    """Start-up lines describing statistics, re-balancing and fast failover (empty when off)."""
    out = []
    if stats_interval_s:
        out.append(f"statistics: port and flow counters every {stats_interval_s:g} s")
    if rebalance is not None:
        demands = sorted(set(runtime.demands_bps.values()))
        shown = ", ".join(f"{d / 1e6:g}" for d in demands) or "none"
        out.append(f"re-balancing: threshold {rebalance.threshold:g}, margin {rebalance.margin:g}, "
                   f"hold {rebalance.min_hold_s:g} s; pinned flow demands {shown} Mbit/s")
    if runtime.fast_failover:
        n = sum(1 for sp in runtime.plan.switches.values() for g in sp.groups
                if g.kind == "fast-failover")
        out.append(f"fast failover: {n} fast-failover group(s) protect pinned entries")
    return out


def _print_problems(problems: Iterable[object], err: TextIO) -> None:
    for p in problems:
        print(str(p), file=err)


def run_controller(
    topology_path: str | Path,
    policy_path: str | Path,
    listen_host: str = "127.0.0.1",
    listen_port: int = 6653,
    log_level: str = "INFO",
    *,
    lldp_interval_s: float = 5.0,
    stop_event: threading.Event | None = None,
    apply_qos: bool = False,
    ovsdb: str = DEFAULT_OVSDB,
    stats_interval_s: float | None = None,
    rebalance: Hysteresis | None = None,
    fast_failover: bool = False,
    metrics_listen: tuple[str, int] | None = None,
    grpc_listen: tuple[str, int] | None = None,
    alert_rules: Any = None,
    microburst_threshold: float | None = None,
) -> int:
    """Run the OpenFlow controller until SIGTERM/SIGINT (or ``stop_event``) and return an exit code.

    Parameters
    ----------
    topology_path, policy_path
        The fabric and policy YAML files; both are validated before anything starts.
    listen_host, listen_port
        Where switches connect (OpenFlow over TCP).
    log_level
        ``DEBUG``, ``INFO``, ``WARNING``, …
    lldp_interval_s
        Seconds between LLDP probe rounds.
    stop_event
        Optional; setting it stops the controller like a signal (for embedding and tests).
        Signal handlers are installed only when called from the main thread.
    apply_qos
        Also apply the policy's ``openflow`` QoS rendering (``aifabric policy render --target
        openflow``) to the Open vSwitch bridges reachable through ``ovsdb``: linux-htb queues per
        fabric port and tc u32 DSCP filters (:mod:`controller.drivers.ovs.qos`). The policy must
        have ``traffic_classes``. Bridges are matched to fabric switches by datapath id and
        configured as they appear.
    ovsdb
        OVSDB endpoint for ``apply_qos`` (``unix:PATH`` or ``tcp:HOST:PORT``).
    stats_interval_s
        Seconds between port/flow statistics requests to every switch (None: none are sent).
    rebalance
        Move pinned flows off links that measured background load makes hot, with this
        hysteresis (:mod:`controller.runtime.state`); needs ``stats_interval_s``.
    fast_failover
        Protect pinned entries with OpenFlow fast-failover groups where a switch has another
        next hop towards the destination.
    metrics_listen
        (host, port) to serve Prometheus metrics at ``/metrics`` (:mod:`.metrics`); enables
        telemetry (statistics every ``stats_interval_s``, 1 s when not given).
    grpc_listen
        (host, port) of the northbound gRPC service (:mod:`controller.northbound`); enables
        telemetry likewise.
    alert_rules
        :class:`controller.telemetry.AlertRules` (default thresholds when None).
    microburst_threshold
        Utilisation of one interval that counts as a microburst (default 0.95).

    Returns
    -------
    int
        0 after a clean stop; 2 for invalid input (each problem printed to stderr as
        ``FILE:LINE:COL: field: message``, or an invalid plan) before anything listens;
        1 if a listening socket (OpenFlow, metrics, gRPC) could not be opened.
    """
    try:
        fabric = load_topology(topology_path)
        policy = load_policy_checked(policy_path, fabric).policy
    except ConfigError as exc:
        _print_problems(exc.problems, sys.stderr)
        return EXIT_INVALID
    if rebalance is not None and not stats_interval_s:
        print("re-balancing needs a statistics interval (--stats-interval > 0)", file=sys.stderr)
        return EXIT_INVALID
    telemetry = events = None
    if metrics_listen is not None or grpc_listen is not None:
        from controller.telemetry import AlertRules, EventBus, Telemetry
        from controller.telemetry.derive import DEFAULT_MICROBURST_THRESHOLD

        stats_interval_s = stats_interval_s or 1.0
        telemetry = Telemetry(fabric, alert_rules or AlertRules(),
                              microburst_threshold or DEFAULT_MICROBURST_THRESHOLD)
        events = EventBus()
    runtime = ControllerRuntime(fabric, policy, fast_failover=fast_failover,
                                hysteresis=rebalance, telemetry=telemetry, events=events)
    try:
        runtime.initial_plan()
    except PlanInvariantError as exc:
        print(f"{policy_path}: the plan for {fabric.name} breaks an invariant: {exc}",
              file=sys.stderr)
        return EXIT_INVALID
    qos = None
    if apply_qos:
        from controller.drivers.ovs.qos import OvsQosApplier
        from controller.render import render_policy

        try:
            rendering = render_policy(policy, fabric, "openflow", str(policy_path), require_classes=True)
        except ConfigError as exc:
            _print_problems(exc.problems, sys.stderr)
            return EXIT_INVALID
        qos = OvsQosApplier(rendering, ovsdb)
    for line in summary_lines(fabric, runtime):
        print(line, flush=True)
    for line in adaptive_lines(runtime, stats_interval_s, rebalance):
        print(line, flush=True)
    if qos is not None:
        print(qos.summary(), flush=True)
    edges = None
    if telemetry is not None:
        assert stats_interval_s is not None
        try:
            edges = _start_edges(runtime, stats_interval_s, metrics_listen, grpc_listen)
        except (OSError, RuntimeError) as exc:
            print(f"controller failed: {exc}", file=sys.stderr)
            return EXIT_FAILED
        for line in edges.lines:
            print(line, flush=True)

    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = stop_event or threading.Event()
    in_main = threading.current_thread() is threading.main_thread()
    old_handlers: dict[int, Any] = {}
    if in_main:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            old_handlers[sig] = signal.signal(sig, lambda signum, frame: stop.set())
    try:
        if qos is not None:
            qos.start(stop)
        return _serve(runtime, listen_host, listen_port, lldp_interval_s, stop,
                      {"stats_interval_s": stats_interval_s, "rebalance": rebalance is not None},
                      on_app=edges.attach if edges is not None else None)
    finally:
        if edges is not None:
            edges.close()
        if qos is not None:
            qos.join(2.0)
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)


class _Edges:
    """The telemetry edges of a running controller: the Prometheus endpoint and the gRPC
    northbound service (each optional), and how to stop them."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.metrics: Any = None
        self.grpc: Any = None
        self.service: Any = None

    def attach(self, app: Any) -> None:
        """The OpenFlow app runs: registrations can now be sent and confirmed."""
        if self.service is not None:
            self.service.apply = app.apply_and_confirm

    def close(self) -> None:
        if self.grpc is not None:
            self.grpc.close(1.0)
        if self.metrics is not None:
            self.metrics.shutdown()
            self.metrics.server_close()


def _start_edges(runtime: ControllerRuntime, interval_s: float,
                 metrics_listen: tuple[str, int] | None,
                 grpc_listen: tuple[str, int] | None) -> _Edges:
    """Start the metrics endpoint and the gRPC server. Raises OSError/RuntimeError when an
    address cannot be bound (whatever started is stopped first)."""
    edges = _Edges()
    edges.lines.append(f"telemetry: port, queue and flow counters every {interval_s:g} s; "
                       "alerts on link state, loss and utilisation")
    try:
        if metrics_listen is not None:
            from controller.runtime.metrics import start_metrics_server

            h, p = metrics_listen
            edges.metrics, _, bound = start_metrics_server(runtime, interval_s, h, p)
            edges.lines.append(f"metrics: http://{h}:{bound}/metrics")
        if grpc_listen is not None:
            # --- issue 12 (i12nb) TEMPORARY bridge, dropped at merge: the synchronous
            # FabricService served by the grpc.aio server on a loop thread of its own.
            from controller.northbound.threaded import NorthboundThread, ThreadedService
            from controller.runtime.service import FabricService

            edges.service = FabricService(runtime, runtime.telemetry, runtime.events,
                                          sample_interval_s=interval_s)
            h, p = grpc_listen
            edges.grpc = NorthboundThread(ThreadedService(edges.service), h, p)
            bound = edges.grpc.port
            # --- end of the bridge
            edges.lines.append(f"northbound: gRPC aifabric.v1.Northbound on {h}:{bound}")
    except (OSError, RuntimeError):
        edges.close()
        raise
    return edges


def _serve(runtime: ControllerRuntime, host: str, port: int, lldp_interval_s: float,
           stop: threading.Event, app_kwargs: dict[str, Any] | None = None,
           on_app: Any = None) -> int:
    """Start os-ken with the app, wait for ``stop``, and shut everything down.

    ``app_kwargs`` go to :class:`controller.drivers.openflow.app.AifabricApp` (statistics
    interval, re-balancing); ``on_app(app)`` is called once the app exists."""
    # isort: off
    # app_manager must be imported before os_ken.controller.controller (an import cycle).
    from os_ken.base.app_manager import AppManager
    import os_ken.controller.controller as of_controller  # registers the ofp-* options
    from os_ken import cfg
    from os_ken.lib import hub
    # isort: on

    servers: list[Any] = []
    errors: list[BaseException] = []
    listening = threading.Event()

    class ClosableStreamServer(hub.StreamServer):  # type: ignore[misc,name-defined]
        """os-ken's server, recorded so shutdown can close it and stop accepting quietly."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.closing = False
            try:
                super().__init__(*args, **kwargs)
            except BaseException as exc:
                errors.append(exc)
                stop.set()
                raise
            servers.append(self)
            listening.set()

        def serve_forever(self) -> None:
            while not self.closing:
                try:
                    sock, addr = self.server.accept()
                except OSError:
                    if self.closing:
                        return
                    raise
                hub.spawn(self.handle, sock, addr)

        def close(self) -> None:
            self.closing = True
            try:
                self.server.shutdown(2)
            except OSError:
                pass
            self.server.close()

    cfg.CONF(args=[f"--ofp-listen-host={host}", f"--ofp-tcp-listen-port={port}"],
             project="os_ken", default_config_files=[])
    original_server = of_controller.StreamServer
    of_controller.StreamServer = ClosableStreamServer
    app_mgr = AppManager.get_instance()
    try:
        app_mgr.load_apps([APP_MODULE])
        contexts = app_mgr.create_contexts()

        def boot() -> None:
            try:
                services = app_mgr.instantiate_apps(runtime=runtime,
                                                    lldp_interval_s=lldp_interval_s,
                                                    **(app_kwargs or {}), **contexts)
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                errors.append(exc)
                stop.set()
                return
            hub.joinall(services)

        threading.Thread(target=boot, name="os-ken", daemon=True).start()
        if listening.wait(5.0):
            LOG.info("[controller] listening for OpenFlow 1.3 switches on %s:%d", host, port)
        while not stop.wait(0.2):
            if on_app is not None:
                app = app_mgr.applications.get("AifabricApp")
                if app is not None:
                    on_app(app)
                    on_app = None
    finally:
        for server in servers:
            server.close()
        of_controller.StreamServer = original_server
        app = app_mgr.applications.get("AifabricApp")
        if app is not None:
            app.close()
        closer = threading.Thread(target=app_mgr.close, name="os-ken-close", daemon=True)
        closer.start()
        closer.join(2.0)
        AppManager._instance = None
    if errors:
        print(f"controller failed on {host}:{port}: {errors[0]}", file=sys.stderr)
        return EXIT_FAILED
    LOG.info("[controller] stopped cleanly")
    return EXIT_OK
