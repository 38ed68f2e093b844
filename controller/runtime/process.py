"""The controller process: ``aifabric controller`` (and its alias ``aifabric p4 controller``).

``run_controller`` takes the service configuration (:class:`~controller.config.model.ServiceConfig`:
the ``--config`` file, the environment and the flags merged), validates the topology (each
switch's southbound, address and device id are declared there), the policy and the deprecated
P4Runtime targets file (if any), binds the OpenFlow socket, computes
the initial placement, and runs one asyncio event loop that owns the runtime
(:class:`~controller.runtime.controller.Controller`): the OpenFlow driver (every switch
connection on the loop, behind a bounded accept stage in one thread), the P4Runtime driver
(finsy, on the loop), the northbound gRPC server (``grpc.aio``, on the loop), the live view
(:mod:`controller.view`, on the loop) and the Prometheus endpoint (a thread).

The OpenFlow socket is bound as early as possible — right after the input files are validated,
before the placement and the drivers — and connections are taken at once (the runtime gets
their events when it is ready). Why it matters: Open vSwitch retries a refused
controller after 1, 2, 4, then every ``max_backoff`` s (8 s by default; its rconn doubles the
wait after each failure and resets it only after a connection outlived the wait), so a switch
whose attempts met a controller still starting up came back up to 8 s after it listened; a
connection accepted but left without a HELLO for longer than that wait is dropped by the switch
and counts as a failure too. A controller that listens early and answers at once meets the
next attempt; ``max_backoff=1000`` on the Controller row (the labs set it) bounds the wait by
1 s.

Every channel is TLS or refused (:mod:`controller.runtime.channels`): without TLS material and
without ``--insecure`` the controller exits 2 before anything listens, naming the channel.

With ``--cluster etcd://...`` and ``--replica NAME`` it is one replica of a cluster
(:mod:`controller.runtime.cluster`): the policy, the registered collectives and the placement
come from etcd (an empty cluster gets this replica's policy file), the switches connect to it
as a backup, and it masters its share of them.

Signals: SIGTERM and SIGINT stop the controller (exit 0; a replica steps down first, so the
others take its switches at once); SIGHUP re-reads the policy file and applies it live
(:meth:`controller.runtime.service.FabricService.apply_policy`: validated whole, FILE:LINE:COL
problems logged and nothing changed on error, only differing entries sent, rolled back on a
switch error; a replica applies it to the whole cluster through etcd).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from controller.errors import ConfigError, ConfigProblem, PlanInvariantError

# The runtime, the planner (scipy) and the drivers are imported once the OpenFlow socket is bound
# (module docstring): only what validating the input needs is imported at the top.
if TYPE_CHECKING:
    import socket

    from controller.cluster.store import IntentSnapshot
    from controller.config.model import ServiceConfig
    from controller.drivers.ovs.qos import OvsQosApplier
    from controller.drivers.southbound import SouthboundDriver, SouthboundKind
    from controller.model.topology import Fabric
    from controller.northbound.server import NorthboundServer
    from controller.policy.model import Policy
    from controller.runtime.channels import Channels, SecurityOptions
    from controller.runtime.cluster import ClusterOptions, ClusterRuntime
    from controller.runtime.controller import Controller, Mastership
    from controller.runtime.ina import InaManager, InaOptions
    from controller.runtime.notify import Notifier
    from controller.runtime.service import FabricService
    from controller.runtime.state import RuntimeState
    from controller.security.metrics_http import MetricsServer
    from controller.te.reroute import Hysteresis
    from controller.telemetry.alerts import AlertRules
    from controller.view.limits import ViewLimits
    from controller.view.server import ViewServer

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2

DEFAULT_OVSDB = "unix:/var/run/openvswitch/db.sock"
LOG = logging.getLogger("aifabric.runtime")


@dataclass(frozen=True)
class ControllerOptions:
    """Everything ``aifabric controller`` takes beyond the topology and policy files."""

    listen_host: str = "127.0.0.1"
    listen_port: int = 6653
    log_level: str = "INFO"
    log_format: str = "text"
    ready_timeout_s: float = 60.0
    lldp_interval_s: float = 5.0
    apply_qos: bool = False
    ovsdb: str = DEFAULT_OVSDB
    stats_interval_s: float | None = None
    rebalance: Hysteresis | None = None
    standing_depth: int | None = None
    queued_fraction: float = 0.5
    fast_failover: bool = False
    metrics_listen: tuple[str, int] | None = None
    grpc_listen: tuple[str, int] | None = None
    view_listen: tuple[str, int] | None = None
    view_limits: ViewLimits | None = None
    alert_rules: AlertRules | None = None
    microburst_threshold: float | None = None
    p4_targets: str | None = None
    p4_target: str = "bmv2"
    p4_election_id: int = 10
    tofino_build: str | None = None
    openflow_role: str = "equal"
    generation_id: int | None = None
    hello_timeout_s: float = 5.0
    handshake_timeout_s: float = 10.0
    max_unfinished: int | None = None  # None: the fabric's OpenFlow switches + 64
    confirm_timeout_s: float = 5.0
    p4_liveness_interval_s: float = 0.25
    p4_liveness_misses: int = 3
    p4_liveness_hold_s: float = 10.0
    p4_dataplane_misses: int | None = None
    ina: InaOptions | None = None
    security: SecurityOptions | None = None
    cluster: ClusterOptions | None = None
    audit_file: str | None = None
    audit_retention: int = 10_000


#: unfinished OpenFlow connections admitted beyond the fabric's own switches (the listener's
#: limit before it was sized to the fabric)
ADMISSION_HEADROOM = 64


def admission_limit(configured: int | None, switches: int) -> int:
    """The listener's limit of unfinished connections: ``configured`` when set, else every
    OpenFlow switch of the fabric (they all connect at once when the controller starts: a
    switch refused at the limit comes back only after Open vSwitch's back-off, 1, 2, 4 s)
    plus :data:`ADMISSION_HEADROOM`."""
    return configured if configured is not None else switches + ADMISSION_HEADROOM


def summary_lines(state: RuntimeState) -> list[str]:
    """The short start-up summary."""
    from controller.plan.model import count_entries
    from controller.runtime.intent import intended_plan, plan_tables

    fabric = state.fabric
    plan = intended_plan(state)
    flows, groups = count_entries(plan.switches.values())
    tables = plan_tables(state)
    counts: dict[tuple[str, str], int] = {}
    for p in state.placement.values():
        for u, v in zip(p[1:-2], p[2:-1], strict=True):
            counts[(u, v)] = counts.get((u, v), 0) + 1
    kinds = sorted(set(state.southbound.values()))
    by_kind = ", ".join(f"{sum(1 for k in state.southbound.values() if k == kind)} {kind}"
                        for kind in kinds)
    return [
        f"fabric {fabric.name} ({fabric.kind}, {fabric.source}): {len(fabric.switches)} switches "
        f"({by_kind}), {len(fabric.hosts)} hosts, {len(fabric.links)} links",
        f"routing mode {state.policy.policy.routing.mode}: {len(state.placement)} pinned "
        f"flow(s), at most {max(counts.values(), default=0)} pinned flow(s) per link "
        "(per direction)",
        f"plan: {flows} flow entries and {groups} next-hop sets (groups) on "
        f"{len(plan.switches)} switches",
        f"policy generation {state.policy.generation} sha256 {state.policy.digest}",
    ] + [f"table capacity: {note}" for note in (tables.notes if tables is not None else ())]


def adaptive_lines(state: RuntimeState, opts: ControllerOptions) -> list[str]:
    """Start-up lines describing statistics, re-balancing and fast failover (empty when off)."""
    from controller.runtime.intent import intended_plan

    out = []
    cfg = state.settings
    if cfg.stats_interval_s:
        out.append(f"statistics: port and flow counters every {cfg.stats_interval_s:g} s")
    if opts.rebalance is not None:
        from controller.runtime.placement import pinned_demands_bps

        demands = sorted(set(pinned_demands_bps(state.fabric, state.placement).values()))
        shown = ", ".join(f"{d / 1e6:g}" for d in demands) or "none"
        r = opts.rebalance
        depth = (f"; a standing queue (>= {cfg.standing_depth} in {cfg.queued_fraction:.0%} "
                 "of a link's packets) on switches that count queue depth"
                 if cfg.standing_depth else "")
        out.append(f"re-balancing: threshold {r.threshold:g}, margin {r.margin:g}, "
                   f"hold {r.min_hold_s:g} s; pinned flow demands {shown} Mbit/s{depth}")
    if cfg.fast_failover:
        n = sum(1 for sp in intended_plan(state).switches.values()
                for s in sp.next_hop_sets() if s.kind == "failover")
        bounce = sum(1 for sp in intended_plan(state).switches.values()
                     for s in sp.next_hop_sets() if s.bounce)
        others = sorted(set(state.southbound) - cfg.failover_switches)
        out.append(f"fast failover: {n} failover next-hop set(s) protect pinned entries"
                   + (f" ({bounce} of them send back to the hop before when their only "
                      "port is dead)" if bounce else "")
                   + (f"; {', '.join(others)} re-pin only (their southbound has no "
                      "fast-failover groups)" if others else ""))
    return out


def _print_problems(problems: Iterable[object], err: TextIO) -> None:
    for p in problems:
        print(str(p), file=err)


def load_southbound(fabric: Fabric, targets_file: str | None) -> tuple[
        dict[str, SouthboundKind], dict[str, str]]:
    """(switch → southbound kind, P4 switch → address) as the topology declares them
    (:class:`~controller.model.topology.Switch`), then the deprecated ``--p4-targets`` file
    (``p4runtime.targets_file``; :func:`controller.config.sources.resolve` warns): every switch
    it names speaks P4Runtime at its address. Raises ConfigError (the file, located)."""
    kinds: dict[str, SouthboundKind] = {
        s.name: "p4runtime" if s.southbound == "p4runtime" else "openflow"
        for s in fabric.switches}
    addresses = {s.name: s.address for s in fabric.switches
                 if s.southbound == "p4runtime" and s.address is not None}
    if targets_file is None:
        return kinds, addresses
    from controller.runtime.targets import load_targets

    targets = load_targets(targets_file, fabric)
    for name in targets:
        kinds[name] = "p4runtime"
    return kinds, {**addresses, **targets}


def declared_p4_target(fabric: Fabric, opts: ControllerOptions) -> ControllerOptions:
    """``opts`` with the P4 target the topology's P4Runtime switches declare (their ``target``
    wins over ``p4runtime.target``; the topology refuses two different ones)."""
    from dataclasses import replace

    declared = {s.target for s in fabric.switches
                if s.southbound == "p4runtime" and s.target is not None}
    return replace(opts, p4_target=declared.pop()) if declared else opts


def policy_targets(southbound: Mapping[str, SouthboundKind], opts: ControllerOptions
                   ) -> frozenset[str]:
    """The render targets whose checks a policy must pass here: the P4 target (``bmv2`` or
    ``tofino``) when a switch speaks P4Runtime (its QoS entries are programmed), ``openflow``
    with ``--apply-qos`` (the Open vSwitch queues are programmed)."""
    from controller.qos.targets import TARGETS

    out = set()
    if "p4runtime" in southbound.values() and opts.p4_target in TARGETS:
        out.add(opts.p4_target)  # an unknown target is refused with its reason later
    if opts.apply_qos:
        out.add("openflow")
    return frozenset(out)


def run_controller(config: ServiceConfig, *, stop_event: threading.Event | None = None) -> int:
    """Run the controller until SIGTERM/SIGINT (or ``stop_event``) and return an exit code.

    ``config`` is the validated service configuration (``topology`` and ``policy`` set);
    :func:`controller.runtime.options.controller_options` derives the runtime's
    :class:`ControllerOptions` from it.

    Returns
    -------
    int
        0 after a clean stop; 2 for invalid input (each problem printed to stderr as
        ``FILE:LINE:COL: field: message``, or an invalid plan) before anything listens;
        1 if a listening socket (OpenFlow, metrics, gRPC) could not be opened or a driver
        failed to start.
    """
    from controller.runtime.options import OptionsError, controller_options

    try:
        opts = controller_options(config)
    except OptionsError as exc:
        print(f"controller refused to start: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if config.topology is None or config.policy is None:
        print("controller refused to start: no topology or policy (--topology/--policy, or "
              "topology:/policy: in --config)", file=sys.stderr)
        return EXIT_INVALID
    topology_path, policy_path = config.topology, config.policy
    from controller.model.topology import load_topology
    # Signals count from the first moment (the OpenFlow socket listens before the runtime is
    # ready): a SIGTERM while starting stops cleanly, a SIGHUP is applied once ready.
    early = _EarlySignals(stop_event)
    from controller.qos.validate import check_policy_for_targets
    from controller.yamlsrc import load_document

    try:
        fabric = load_topology(topology_path)
        doc = load_document(policy_path)
        southbound, p4_addresses = load_southbound(fabric, opts.p4_targets)
        opts = declared_p4_target(fabric, opts)
        policy = check_policy_for_targets(doc, fabric, policy_targets(southbound, opts)).policy
        document = Path(policy_path).read_text(encoding="utf-8")
    except ConfigError as exc:
        _print_problems(exc.problems, sys.stderr)
        return EXIT_INVALID
    if opts.rebalance is not None and not opts.stats_interval_s:
        print("re-balancing needs a statistics interval (--stats-interval > 0)", file=sys.stderr)
        return EXIT_INVALID
    from controller.runtime.logjson import configure_logging

    configure_logging(opts.log_level, opts.log_format, fabric)
    from controller.runtime.collector import configure_collector

    configure_collector()
    try:
        channels = _channels(opts, southbound, p4_addresses)
    except _Invalid as exc:
        print(f"controller refused to start: {exc}", file=sys.stderr)
        return EXIT_INVALID
    from controller.drivers.openflow.listener import bind_listener

    sock = None
    if any(k == "openflow" for k in southbound.values()):
        try:
            sock = bind_listener(opts.listen_host, opts.listen_port)
        except OSError as exc:
            print(f"controller failed: cannot listen for OpenFlow on {opts.listen_host}:"
                  f"{opts.listen_port}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        LOG.info("[controller] OpenFlow socket bound on %s:%d %.2f s after the process started",
                 opts.listen_host, sock.getsockname()[1], _since_process_start())
    switch_interval_s = sys.getswitchinterval()
    sys.setswitchinterval(STARTING_SWITCH_INTERVAL_S)
    try:
        return asyncio.run(_main(fabric, policy, document, str(policy_path), southbound,
                                 p4_addresses, opts, sock, early, channels))
    except _Invalid as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_INVALID
    except _Failed as exc:
        print(f"controller failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        sys.setswitchinterval(switch_interval_s)
        early.restore()
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass


def _channels(opts: ControllerOptions, southbound: Mapping[str, SouthboundKind],
              p4_addresses: Mapping[str, str]) -> Channels:
    """Every channel secured or refused (:func:`controller.runtime.channels.secure_channels`);
    raises _Invalid with the reason."""
    from controller.runtime.channels import SecurityOptions, check_files, secure_channels
    from controller.security.tokens import TokenFileError
    from controller.security.transport import InsecureChannelRefused

    sec = opts.security or SecurityOptions()
    unreadable = check_files(sec)
    if unreadable:
        raise _Invalid("; ".join(unreadable))
    try:
        return secure_channels(
            sec, openflow=any(k == "openflow" for k in southbound.values()),
            northbound=opts.grpc_listen is not None, p4=bool(p4_addresses),
            cluster=opts.cluster is not None,
            metrics_host=opts.metrics_listen[0] if opts.metrics_listen else None,
            view=opts.view_listen is not None)
    except (InsecureChannelRefused, TokenFileError, ValueError, OSError) as exc:
        raise _Invalid(str(exc)) from None


#: The interpreter's thread switch interval while the controller starts (s): the main thread
#: builds the plan (3 s at k = 16) while the accept stage's thread does the switches' TLS
#: handshakes and HELLOs (:mod:`controller.drivers.openflow.listener`), each of its calls
#: waiting for the GIL up to the interval; at the default 5 ms, ~8 waits per connection kept
#: 131 of 320 restarted switches past Open vSwitch's 1 s backoff. Back to the default once
#: the runtime runs.
STARTING_SWITCH_INTERVAL_S = 0.0005
_DEFAULT_SWITCH_INTERVAL_S = sys.getswitchinterval()


def _since_process_start() -> float:
    """Seconds since this process started (Linux /proc; 0 elsewhere)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


class _EarlySignals:
    """SIGTERM/SIGINT/SIGHUP recorded from process start until the event loop takes them over
    (main thread only); ``stop`` also follows an embedding caller's ``stop_event``."""

    def __init__(self, stop_event: threading.Event | None) -> None:
        self.stop = stop_event or threading.Event()
        self.hup = threading.Event()
        self._old: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._old[sig] = signal.signal(sig, lambda *_: self.stop.set())
            self._old[signal.SIGHUP] = signal.signal(signal.SIGHUP, lambda *_: self.hup.set())

    def restore(self) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old.clear()


class _Invalid(Exception):
    pass


class _Failed(Exception):
    pass


def build_state(fabric: Fabric, policy: Policy, document: str, source: str,
                southbound: Mapping[str, SouthboundKind], opts: ControllerOptions,
                failover_capable: frozenset[str],
                probe_capable: frozenset[str] = frozenset()) -> RuntimeState:
    """The initial state (initial placement computed). Raises _Invalid on a bad plan."""
    from controller.runtime.collector import freeze_heap
    from controller.runtime.intent import intended_plan
    from controller.runtime.placement import initial_placement
    from controller.runtime.state import (
        PolicyInForce,
        RuntimeSettings,
        digest_of,
        initial_state,
    )

    telemetry = (opts.metrics_listen is not None or opts.grpc_listen is not None
                 or opts.view_listen is not None)
    stats = opts.stats_interval_s or (1.0 if telemetry else None)
    settings = RuntimeSettings(
        fast_failover=opts.fast_failover,
        failover_switches=frozenset(n for n, k in southbound.items() if k in failover_capable),
        probed_switches=frozenset(n for n, k in southbound.items() if k in probe_capable),
        rebalance=opts.rebalance, lldp_interval_s=opts.lldp_interval_s,
        lldp_grace_s=3 * opts.lldp_interval_s, stats_interval_s=stats, telemetry=telemetry,
        confirm_timeout_s=opts.confirm_timeout_s,
        liveness_interval_s=(opts.p4_liveness_interval_s or None)
        if "p4runtime" in southbound.values() else None,
        liveness_misses=opts.p4_liveness_misses, liveness_hold_s=opts.p4_liveness_hold_s,
        liveness_dataplane_misses=opts.p4_dataplane_misses,
        standing_depth=opts.standing_depth, queued_fraction=opts.queued_fraction)
    pif = PolicyInForce(policy, document, source, 1, digest_of(document), time.time())
    try:
        placement = initial_placement(fabric, policy)
        state = initial_state(fabric, pif, settings, southbound, placement)
        intended_plan(state)
        freeze_heap()  # the start-up placement and its plan (controller.runtime.collector)
    except (PlanInvariantError, ValueError) as exc:
        raise _Invalid(f"{source}: the plan for {fabric.name} breaks an invariant: "
                       f"{exc}") from None
    return state


@dataclass
class _Running:
    """What :func:`_main` starts once the state is built, stopped by :meth:`stop` in reverse."""

    ctl: Controller
    service: FabricService
    edges: _Edges
    cluster: ClusterRuntime | None = None
    since: IntentSnapshot | None = None
    ina: InaManager | None = None
    qos: OvsQosApplier | None = None
    qos_stop: threading.Event = field(default_factory=threading.Event)

    async def stop(self) -> None:
        await self.service.trail.stop()
        if self.cluster is not None:
            await self.cluster.stop()
        await self.edges.stop()
        self.service.close()
        if self.ina is not None:
            await self.ina.close()
        await self.ctl.stop()
        self.qos_stop.set()
        if self.qos is not None:
            self.qos.join(2.0)


async def _main(fabric: Fabric, policy: Policy, document: str, source: str,
                southbound: Mapping[str, SouthboundKind], p4_addresses: Mapping[str, str],
                opts: ControllerOptions, sock: socket.socket | None, early: _EarlySignals,
                channels: Channels) -> int:
    """Start in order — the OpenFlow listener, the P4Runtime driver, the state, the runtime and
    its edges (:func:`_start`) — then serve until stopped (:func:`_serve`). A start-up failure
    after the listener started stops it (the switches it took go) and raises on."""
    from controller.runtime.notify import Notifier

    loop = asyncio.get_running_loop()
    drivers: dict[str, SouthboundDriver] = {}
    ready = threading.Event()
    of_handle = None
    if sock is not None:
        drivers["openflow"], of_handle = _listen_openflow(fabric, southbound, opts, sock,
                                                          channels, ready, loop)
    try:
        if p4_addresses:
            drivers["p4runtime"] = _p4_driver(fabric, p4_addresses, opts, channels)
        if early.stop.is_set():  # SIGTERM while the heavy imports ran: stop before the rest
            return _stopped_while_starting(of_handle)
        capable = frozenset(k for k, d in drivers.items() if "failover" in d.capabilities)
        probing = frozenset(k for k, d in drivers.items() if "liveness-failover" in d.capabilities)
        state = build_state(fabric, policy, document, source, southbound, opts, capable, probing)
        if early.stop.is_set():
            return _stopped_while_starting(of_handle)
        run = await _start(fabric, policy, source, southbound, opts, channels, state, drivers)
    except (_Invalid, _Failed):
        if of_handle is not None:   # the listener took switches: let them go
            of_handle.stop()
        raise
    return await _serve(run, Notifier.from_env(), source, opts, early, ready, of_handle,
                        channels)


def _listen_openflow(fabric: Fabric, southbound: Mapping[str, SouthboundKind],
                     opts: ControllerOptions, sock: socket.socket, channels: Channels,
                     ready: threading.Event, loop: asyncio.AbstractEventLoop
                     ) -> tuple[SouthboundDriver, Any]:
    """The OpenFlow driver and its listener on ``sock``, taking connections at once (module
    docstring); raises _Failed."""
    from controller.drivers.openflow.app import start_openflow
    from controller.drivers.openflow.driver import OpenFlowDriver
    from controller.drivers.openflow.listener import ListenerLimits

    of_names = {s.dpid: s.name for s in fabric.switches if southbound[s.name] == "openflow"}
    drv = OpenFlowDriver(of_names)
    drv.bind_loop(loop)
    # connections are handed over at once (ready already set): Open vSwitch drops a connection
    # that sends no HELLO within its backoff (1 s at first) and backs off
    ready.set()
    try:
        return drv, start_openflow(drv, sock, ready, loop, ListenerLimits(
            opts.hello_timeout_s, opts.handshake_timeout_s,
            admission_limit(opts.max_unfinished, len(of_names))), tls=channels.openflow)
    except RuntimeError as exc:
        raise _Failed(str(exc)) from None


def _p4_driver(fabric: Fabric, p4_addresses: Mapping[str, str], opts: ControllerOptions,
               channels: Channels) -> SouthboundDriver:
    """The P4Runtime driver of the switches at ``p4_addresses``; raises _Invalid."""
    from controller.runtime.targets import p4_driver

    try:
        return p4_driver(fabric, p4_addresses, opts, channels.p4runtime)
    except (ConfigError, ValueError, OSError) as exc:
        problems = getattr(exc, "problems", None)
        raise _Invalid("\n".join(map(str, problems)) if problems else str(exc)) from None


async def _start(fabric: Fabric, policy: Policy, source: str,
                 southbound: Mapping[str, SouthboundKind], opts: ControllerOptions,
                 channels: Channels, state: RuntimeState,
                 drivers: dict[str, SouthboundDriver]) -> _Running:
    """The runtime over ``state`` (joined to its cluster), the northbound service, INA, the
    audit trail, QoS and the edges, not yet running; what it starts printed. Raises _Invalid,
    _Failed."""
    from controller.runtime.auditlog import open_audit_log
    from controller.runtime.controller import Controller, StaticMastership
    from controller.runtime.service import FabricService

    telemetry = events = None
    if state.settings.telemetry:
        from controller.telemetry import AlertRules, EventBus, Telemetry
        from controller.telemetry.derive import DEFAULT_MICROBURST_THRESHOLD

        telemetry = Telemetry(fabric, opts.alert_rules or AlertRules(),
                              opts.microburst_threshold or DEFAULT_MICROBURST_THRESHOLD)
        events = EventBus()
    mastership: Mastership | None = None
    if opts.generation_id is not None and opts.openflow_role in ("master", "backup"):
        mastership = StaticMastership(opts.openflow_role, opts.generation_id)  # type: ignore[arg-type]
    cluster = since = None
    if opts.cluster is not None:
        cluster, since, state = await _join_cluster(fabric, southbound, opts, channels, state)
        mastership = cluster.mastership
    # the core's timers fire on ticks: the liveness rounds need one at least every interval
    tick_s = min(0.1, state.settings.liveness_interval_s or 0.1)
    compute = ThreadPoolExecutor(2, thread_name_prefix="aifabric-compute")
    ctl = Controller(state, drivers, telemetry=telemetry, events=events, mastership=mastership,
                     executor=compute, tick_s=tick_s)
    if cluster is not None:
        cluster.attach(ctl)
    ina: InaManager | None = None
    if opts.ina is not None:
        from controller.runtime.ina import InaManager

        try:
            ina = InaManager(fabric, opts.ina)
        except ValueError as exc:
            raise _Invalid(str(exc)) from None
    try:
        audit = open_audit_log(opts.audit_file, opts.audit_retention, compute, cluster)
    except OSError as exc:
        raise _Failed(f"audit.file {opts.audit_file}: {exc.strerror or exc}") from None
    service = FabricService(ctl, sample_interval_s=state.settings.stats_interval_s or 0.0,
                            policy_targets=policy_targets(southbound, opts), cluster=cluster,
                            audit=audit, ina=ina)
    service.checker.warm()   # the fork server starts now, not at the first ApplyPolicy
    qos = None
    if opts.apply_qos:
        from controller.drivers.ovs.qos import OvsQosApplier
        from controller.render import render_policy

        try:
            rendering = render_policy(policy, fabric, "openflow", source, require_classes=True)
        except ConfigError as exc:
            raise _Invalid("\n".join(map(str, exc.problems))) from None
        qos = OvsQosApplier(rendering, opts.ovsdb)
    lines = [*summary_lines(state), *adaptive_lines(state, opts)]
    if ina is not None:
        lines.append(f"in-network aggregation: switch {ina.name} at {ina.options.address} "
                     f"(device id {ina.options.device_id}, port {ina.options.port}), service "
                     f"address {ina.service_ipv4}; jobs through the northbound (CreateInaJob)")
    if qos is not None:
        lines.append(qos.summary())
    lines += channels.lines()
    lines.append(f"audit trail: {audit.where}, the newest {audit.retention} records kept"
                 + (" (audit.file is not used in a cluster)" if cluster is not None
                    and opts.audit_file else ""))
    for line in lines:
        print(line, flush=True)
    edges = _Edges()
    try:
        await edges.start(ctl, service, opts, state.settings.stats_interval_s or 1.0, channels)
    except (OSError, RuntimeError) as exc:
        raise _Failed(str(exc)) from None
    for line in edges.lines:
        print(line, flush=True)
    return _Running(ctl, service, edges, cluster, since, ina, qos)


async def _serve(run: _Running, notifier: Notifier, source: str, opts: ControllerOptions,
                 early: _EarlySignals, ready: threading.Event, of_handle: Any,
                 channels: Channels) -> int:
    """Run the runtime until SIGTERM/SIGINT or ``early.stop``, SIGHUP reloading ``source``;
    then stop everything. Returns EXIT_OK."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    if run.qos is not None:
        run.qos.start(run.qos_stop)

    def on_hup() -> None:
        asyncio.ensure_future(_reload_notified(run.service, source, notifier))

    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGHUP, on_hup)
    await run.ctl.start()
    await run.service.trail.start()
    # Everything loaded so far (modules, os-ken, the fabric, the first plan) lives as long as
    # the process: out of the garbage collector's reach, a full collection (which stops every
    # thread, the loop's too) scans only what came later. Measured with a 3,000-collective
    # policy's preview in the executor: 1.04 s -> 0.24 s, the loop's worst stall 246 -> 13 ms
    # (issue 23; Python docs, gc.freeze).
    gc.freeze()
    sys.setswitchinterval(_DEFAULT_SWITCH_INTERVAL_S)
    ready.set()
    edge_tasks = _notify_tasks(notifier, run.ctl, run.cluster is not None, opts.ready_timeout_s)
    if of_handle is not None:
        LOG.info("[controller] listening for OpenFlow 1.3/1.5 switches on %s:%d%s",
                 opts.listen_host, of_handle.port,
                 " over TLS" if channels.openflow is not None else " (plain TCP, --insecure)")
    joining = None
    if run.cluster is not None:
        assert run.since is not None
        joining = asyncio.create_task(run.cluster.start(run.since), name="cluster-join")
        joining.add_done_callback(_join_failed)
    if early.hup.is_set():
        on_hup()
    # a stop asked before the loop took the signals, or by an embedding caller's stop_event (a
    # thread): one executor thread waits on it and wakes the loop
    outside = loop.run_in_executor(None, early.stop.wait)
    inside = asyncio.ensure_future(stop.wait())
    either: set[asyncio.Future[Any]] = {inside, outside}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        inside.cancel()
        early.stop.set()  # releases the waiting thread
        notifier.stopping()
        for task in edge_tasks:
            task.cancel()
        if in_main:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
        if joining is not None:
            joining.cancel()
        await run.stop()
    LOG.info("[controller] stopped cleanly")
    return EXIT_OK


async def _join_cluster(fabric: Fabric, southbound: Mapping[str, SouthboundKind],
                        opts: ControllerOptions, channels: Channels, state: RuntimeState
                        ) -> tuple[ClusterRuntime, IntentSnapshot, RuntimeState]:
    """Connect to etcd, read (or seed) the intent and adopt it, load the mastership view.
    Returns (ClusterRuntime, the snapshot read, the state holding it); raises _Failed."""
    from dataclasses import replace

    from controller.cluster.store import StoreUnavailable
    from controller.qos.validate import check_policy_for_targets
    from controller.runtime import core
    from controller.runtime.cluster import ClusterRuntime
    from controller.runtime.clustercodec import IntentDecodeError
    from controller.yamlsrc import parse_document

    assert opts.cluster is not None
    copts = replace(opts.cluster, etcd_tls=channels.etcd)
    targets = policy_targets(southbound, opts)

    def resolve_policy(document: str, source: str) -> Policy:
        return check_policy_for_targets(parse_document(document, source), fabric,
                                        targets).policy

    cluster = ClusterRuntime(copts, fabric, southbound, resolve_policy)
    try:
        since = await asyncio.wait_for(cluster.read_or_seed(state), copts.start_timeout_s)
        ev = cluster.resolve(since, state)
        await cluster.observe()
    except (StoreUnavailable, TimeoutError, IntentDecodeError, OSError) as exc:
        await cluster.stop()
        raise _Failed(f"cluster {copts.url}: {exc or type(exc).__name__}") from None
    if ev.policy.digest != state.policy.digest:
        LOG.warning("[cluster] the cluster's policy is in force: generation %d from %s (sha256 "
                    "%s); --policy %s (sha256 %s) differs and is not applied (SIGHUP or aifabric "
                    "policy apply applies it to the whole cluster)", ev.policy.generation,
                    ev.policy.source, ev.policy.digest[:12], state.policy.source,
                    state.policy.digest[:12])
    state = core.step(state, ev, time.monotonic()).state
    print(f"cluster: replica {copts.replica} of {copts.url}: intent generation "
          f"{since.generation}, {len(ev.registered)} registered collective(s); "
          f"live replicas: {', '.join(cluster.service.replicas()) or 'none yet'}", flush=True)
    return cluster, since, state


def _join_failed(task: asyncio.Task[None]) -> None:
    if task.cancelled():
        return
    failed = task.exception()
    if failed is not None:
        # a TimeoutError's text is empty: name the error (its first round of claims did not
        # complete in --start-timeout; the service keeps trying)
        LOG.error("[cluster] joining the cluster failed: %s: %s", type(failed).__name__, failed)


def _stopped_while_starting(of_handle: Any) -> int:
    if of_handle is not None:
        of_handle.stop()
    LOG.info("[controller] stopped while starting (signal received before the runtime was ready)")
    return EXIT_OK


def _notify_tasks(notifier: Notifier, ctl: Controller, in_cluster: bool, ready_timeout_s: float
                  ) -> list[asyncio.Task[Any]]:
    """systemd's READY (every switch this process writes reconciled, or the deadline) and the
    watchdog (:mod:`controller.runtime.notify`)."""
    from controller.runtime.notify import missing_switches, wait_ready

    names = [s.name for s in ctl.state.fabric.switches]
    changed = asyncio.Event()
    ctl.after_write.append(lambda _: changed.set())

    def missing() -> list[str]:
        # the switches that held their plan at least once (the runtime state's record)
        return missing_switches(names, ctl.state.programmed,
                                ctl.writable() if in_cluster else None)

    return [asyncio.create_task(wait_ready(notifier, missing, ready_timeout_s, changed),
                                name="ready"),
            asyncio.create_task(notifier.watchdog(), name="watchdog")]


async def _reload_notified(service: FabricService, path: str, notifier: Notifier) -> None:
    """SIGHUP under systemd: RELOADING=1, the reload, READY=1 (whatever its outcome: a bad
    policy leaves the running one in force)."""
    notifier.reloading(f"reloading the policy {path}")
    try:
        await reload_policy(service, path)
    finally:
        notifier.ready("running; policy reloaded" if notifier.enabled else "")


async def reload_policy(service: FabricService, path: str) -> None:
    """SIGHUP: read ``path`` and apply it live, under the same limits as ApplyPolicy
    (:class:`~controller.runtime.policycheck.DocumentLimits`: a file larger than ``max_bytes``
    is not even read; parsing runs in the checker's child process). Problems are logged as
    FILE:LINE:COL, a limit by its name; the running policy stays in force."""
    from controller.northbound.model import Busy, Caller, FieldError, Unavailable
    from controller.runtime.policycheck import too_large

    LOG.info("[controller] SIGHUP: re-reading the policy %s", path)
    max_bytes = service.checker.limits.max_bytes
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            raw = f.read(max_bytes + 1) if size <= max_bytes else b""
        if size > max_bytes or len(raw) > max_bytes:
            exc: Exception = too_large(path, max(size, len(raw)), max_bytes)
            LOG.error("%s", exc)
            service.controller.publish("apply-failed", f"policy {path} refused (limit "
                                       f"max_bytes); the running policy stays in force")
            return
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        prob = ConfigProblem(path, 1, 1, "", f"cannot read file: {exc}")
        LOG.error("%s", prob)
        service.controller.publish("apply-failed", f"policy {path} not read: {exc}")
        return
    try:
        res = await service.apply_policy(text, path, False, Caller("signal", peer="SIGHUP"))
    except (FieldError, Busy, Unavailable) as exc:
        LOG.error("[controller] policy %s not applied: %s", path, exc)
        return
    if not res.ok and not res.problems:
        LOG.error("[controller] policy %s not applied: %s", path, res.error)


class _Edges:
    """The metrics endpoint (a thread), the gRPC northbound and the live view (on the loop)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.metrics: MetricsServer | None = None
        self.render: ThreadPoolExecutor | None = None
        self.grpc: NorthboundServer | None = None
        self.view: ViewServer | None = None

    async def start(self, ctl: Controller, service: FabricService, opts: ControllerOptions,
                    interval_s: float, channels: Channels) -> None:
        if ctl.telemetry is not None:
            self.lines.append(f"telemetry: port, queue and flow counters every {interval_s:g} "
                              "s; alerts on link state, loss and utilisation")
        if opts.metrics_listen is not None:
            from controller.runtime.metrics import start_metrics_server

            h, p = opts.metrics_listen
            sec = opts.security
            # the exposition text is rendered off the loop, by threads the edge owns
            self.render = ThreadPoolExecutor(2, thread_name_prefix="metrics-render")
            self.metrics = await start_metrics_server(
                ctl, interval_s, h, p, render=self.render, tls=channels.metrics_tls,
                basic_auth=channels.metrics_auth, insecure=channels.insecure,
                certificates=sec.certificate_files() if sec else None)
            auth = " (basic auth)" if channels.metrics_auth is not None else ""
            self.lines.append(f"metrics: {self.metrics.url}{auth}")
        if opts.grpc_listen is not None:
            from controller.northbound.server import start_northbound

            h, p = opts.grpc_listen
            try:
                self.grpc = await start_northbound(
                    service, h, p, credentials=channels.northbound,
                    interceptors=channels.northbound_interceptors)
            except RuntimeError:
                await self.stop()
                raise
            how = "TLS" if channels.northbound is not None else "PLAIN TEXT"
            self.lines.append(f"northbound: gRPC aifabric.v1.Northbound on {h}:{self.grpc.port}"
                              f" ({how})")
        if opts.view_listen is not None:
            await self._start_view(ctl, service, opts, interval_s, channels)

    async def _start_view(self, ctl: Controller, service: FabricService,
                          opts: ControllerOptions,
                          interval_s: float, channels: Channels) -> None:
        from controller import __version__
        from controller.view.limits import ViewLimits
        from controller.view.server import ViewServer

        assert opts.view_listen is not None
        h, p = opts.view_listen
        bus = ctl.events
        self.view = ViewServer(service, ctl.state.fabric, tokens=channels.view_tokens,
                               ssl_context=channels.view_tls,
                               limits=opts.view_limits or ViewLimits(),
                               push_interval_s=interval_s,
                               recent=(lambda: tuple(bus.recent)) if bus is not None else tuple,
                               version=__version__)
        try:
            await self.view.start(h, p)
        except OSError as exc:
            self.view = None
            await self.stop()
            raise OSError(f"live view on {h}:{p}: {exc}") from None
        how = "TLS" if channels.view_tls is not None else "PLAIN TEXT"
        self.lines.append(f"live view: {self.view.url} ({how})")

    async def stop(self) -> None:
        if self.view is not None:
            await self.view.close()
            self.view = None
        if self.grpc is not None:
            await self.grpc.stop(1.0)
            self.grpc = None
        if self.metrics is not None:
            await self.metrics.aclose()
            self.metrics = None
        if self.render is not None:
            self.render.shutdown(wait=False, cancel_futures=True)
            self.render = None
