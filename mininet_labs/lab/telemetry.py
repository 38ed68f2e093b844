"""Lab ``kind: telemetry``: a collective registered through the northbound gRPC API is pinned;
the per-link byte counters match its pinned paths; the Prometheus endpoint serves the metrics;
a link failure shows in ``WatchEvents`` and in the alert metric; heatmaps are drawn.

Example (``mininet_labs/experiments/telemetry.yaml``)::

    kind: telemetry
    name: telemetry
    topology: ../topologies/leafspine_2x4x2.yaml
    policy: ../../policies/pinned_two_rings.yaml
    registered: ring-b            # taken out of the policy file, registered through gRPC instead
    job: lab
    workload: {kind: ring-allreduce, bytes: 6MB}
    stats_interval: 0.5s
    expect: {max_counter_error: 0.05, max_alert_intervals: 2}

Steps: the controller starts with the policy minus ``registered`` (``--stats-interval``,
``--metrics-listen``, ``--grpc-listen``); all pairs ping; a ``WatchEvents`` stream is opened;
the collective is registered (``RegisterCollective`` with the hosts' IPv4 addresses in rank
order) and its reply must say *in force*; every hop of every flow from ``GetPaths`` must match
the pinned entry Open vSwitch holds (``ovs-ofctl dump-flows``). Then the collective runs alone
(every rank verifies its sum) while the lab samples ``GetStatus`` every ``stats_interval``.

**Counter check**: for each directed switch–switch link, the bytes it carried during the run
(OVS port counters, ``ovs-ofctl dump-ports``; and the controller's own
``aifabric_link_bytes_total``) against the bytes predicted from ``GetPaths``: the sum, over the
registered flows whose path uses the link, of the bytes the flow's source host sent (rx counter
of its leaf port). Error = |measured − predicted| / one flow's bytes; it must be below
``max_counter_error`` on every link (links with no flow must carry less than that fraction of a
flow). The source host also sends the TCP ACKs of the connection it receives on (not pinned,
~0.5 % of the data at MTU 9000), so the error is never exactly zero.

**Failure**: one fabric link of the first registered flow goes down (``ip link set down`` on
both ends); the lab notes when the ``link-down`` event arrives on the stream and when a scrape
first shows ``aifabric_alert_active{alert="link_down"}`` (scraped every 20 ms); both must come
within ``max_alert_intervals`` × ``stats_interval``. ``GetPaths`` must then avoid the link.

**The controller dies mid-run** (e.g. SIGKILL): the gRPC call or the ``WatchEvents`` stream
that notices it fails; the lab tears the network down as after any failure, writes
``results.json`` with a one-line ``error`` (``controller exited (code -9) while watching
events``) and raises RuntimeError with that line, so the command prints it without a traceback.

Written to ``OUT``: ``results.json``, ``link_utilisation.png`` (directed fabric links × time),
``traffic_matrix.png`` (host pairs, MB), ``busbw_time.png`` (per-collective bus bandwidth from
its entry counters), ``metrics_sample.txt`` (one scrape mid-run), ``controller.log``, the ranks'
files.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field
from rich.console import Console

from controller.errors import ConfigError
from controller.model.topology import Fabric, load_topology
from controller.policy import Policy
from controller.policy.model import Collective
from controller.qos.validate import load_valid_policy as load_policy
from controller.telemetry.plots import busbw_plot, link_heatmap, traffic_heatmap
from controller.yamlsrc import load_document, validate
from mininet_labs.lab.adaptive_reroute import (
    Seconds,
    Strict,
    environment,
    pinned_output,
    policy_text,
    resolve_file,
    ring_result,
    start_mode_controller,
    start_ring,
    wait_ranks,
)
from mininet_labs.lab.experiment import LabSpec, WorkloadSpec
from mininet_labs.lab.processes import free_port
from mininet_labs.lab.results import ring_bound_bps
from mininet_labs.lab.runner import LabAborted, Results, lab_network, requirements_missing

__all__ = ["LabAborted", "describe", "load_experiment", "run_experiment"]


class ExpectSpec(Strict):
    max_counter_error: Annotated[float, Field(gt=0, le=1)] = 0.05
    max_alert_intervals: Annotated[float, Field(gt=0)] = 2.0


class TelemetrySpec(Strict):
    kind: Literal["telemetry"]
    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    description: str = ""
    topology: Annotated[str, Field(min_length=1)]
    policy: Annotated[str, Field(min_length=1)]
    registered: Annotated[str, Field(min_length=1)]
    job: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")] = "lab"
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 1
    workload: WorkloadSpec
    stats_interval: Annotated[Seconds, Field(ge=0.05, le=10)] = 0.5
    expect: ExpectSpec = ExpectSpec()
    lab: LabSpec = LabSpec()


@dataclass(frozen=True)
class Experiment:
    spec: TelemetrySpec
    path: Path
    topology_path: Path
    policy_path: Path
    fabric: Fabric
    policy: Policy
    registered: Collective


def load_experiment(path: str | Path) -> Experiment:
    """Validate the file, its topology and policy, and that ``registered`` names a collective of
    the policy. Raises ConfigError (``FILE:LINE:COL: field: message``)."""
    doc = load_document(path)
    spec = validate(TelemetrySpec, doc)
    topo = resolve_file(doc, "topology", spec.topology)
    pol = resolve_file(doc, "policy", spec.policy)
    fabric = load_topology(topo)
    policy = load_policy(pol, fabric)
    hit = [c for c in policy.collectives if c.name == spec.registered]
    if not hit:
        names = ", ".join(c.name for c in policy.collectives) or "none"
        raise ConfigError([doc.problem(("registered",), f"no collective {spec.registered!r} in "
                                                      f"{pol} (its collectives: {names})")])
    return Experiment(spec, Path(doc.file), topo, pol, fabric, policy, hit[0])


def describe(exp: Experiment) -> str:
    return (f"ok ({exp.fabric.name}; {exp.registered.name} ({' '.join(exp.registered.ranks)}) "
            f"registered through gRPC as {exp.spec.job}.{exp.registered.name}; statistics every "
            f"{exp.spec.stats_interval:g} s)")


_PORT = re.compile(r"port\s+(\w+):\s+rx pkts=\d+, bytes=(\d+).*?\n\s+tx pkts=\d+, bytes=(\d+)",
                   re.S)


def dump_ports(switch: str) -> dict[int, tuple[int, int]]:
    """``ovs-ofctl dump-ports`` → {port: (rx bytes, tx bytes)} (LOCAL skipped)."""
    r = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-ports", switch],
                       capture_output=True, text=True, timeout=10)
    return {int(m.group(1)): (int(m.group(2)), int(m.group(3)))
            for m in _PORT.finditer(r.stdout) if m.group(1).isdigit()}


def scrape(url: str) -> str:
    return urllib.request.urlopen(url, timeout=5).read().decode()


def scraped(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Samples of metric ``name`` from a scrape: labels (sorted pairs) → value."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def counter_check(fabric: Fabric, paths: dict[tuple[str, str], list[str]],
                  sent: dict[tuple[str, str], int], measured: dict[str, int]) -> dict[str, Any]:
    """Predicted vs measured bytes per directed switch–switch link (see module docstring).

    ``paths``: (src, dst) → hops; ``sent``: (src, dst) → bytes the source host sent;
    ``measured``: ``"u->v"`` → bytes. Returns rows and the worst error (fraction of a flow)."""
    predicted: dict[str, int] = {}
    for key, hops in paths.items():
        for u, v in zip(hops[1:-2], hops[2:-1], strict=True):
            predicted[f"{u}->{v}"] = predicted.get(f"{u}->{v}", 0) + sent[key]
    flow = max(sent.values())
    rows = []
    for ln in fabric.links:
        if fabric.is_host(ln.a) or fabric.is_host(ln.b):
            continue
        for u, v in ((ln.a, ln.b), (ln.b, ln.a)):
            k = f"{u}->{v}"
            p, m = predicted.get(k, 0), measured.get(k, 0)
            rows.append({"link": k, "predicted_bytes": p, "measured_bytes": m,
                         "error_of_flow": round(abs(m - p) / flow, 4)})
    return {"rows": sorted(rows, key=lambda r: r["link"]),
            "max_error_of_flow": max(r["error_of_flow"] for r in rows)}


def exit_code(ctl: Any, wait_s: float = 1.0) -> int | None:
    """The controller's exit code, or None while it runs. A failed gRPC call can arrive a moment
    before the dead process can be reaped, hence the short wait."""
    if ctl is None:
        return None
    try:
        return int(ctl.popen.wait(timeout=wait_s))
    except subprocess.TimeoutExpired:
        return None


def rpc_failure(step: str, exc: BaseException, returncode: int | None) -> str:
    """One line for a gRPC error (or an unreachable metrics endpoint) met while ``step``:
    ``controller exited (code -9) while watching events`` when the controller is gone, else
    the call's status code and details."""
    if returncode is not None:
        return f"controller exited (code {returncode}) while {step}"
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
    name = getattr(code, "name", type(exc).__name__)
    return f"gRPC error while {step}: {name}: {details}"


class EventLog:
    """Reads a WatchEvents stream on a thread; every event with its arrival time (s, epoch).

    The stream ending with an error (other than our own cancel) is kept in ``error``;
    :meth:`raise_if_failed` re-raises it in the caller's thread."""

    def __init__(self, client: Any) -> None:
        self.call = client.watch()
        self.events: list[tuple[float, Any]] = []
        self.error: BaseException | None = None
        self._closing = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import grpc

        try:
            for ev in self.call:
                self.events.append((time.time(), ev))
        except grpc.RpcError as exc:
            if not self._closing and exc.code() != grpc.StatusCode.CANCELLED:
                self.error = exc

    def raise_if_failed(self) -> None:
        """Raise the stream's gRPC error, if it ended with one."""
        if self.error is not None:
            raise self.error

    def first(self, kind: str, since: float, **match: str) -> tuple[float, Any] | None:
        for t, ev in list(self.events):
            if t >= since and ev.kind == kind and all(getattr(ev, k) == v for k, v in match.items()):
                return t, ev
        return None

    def close(self) -> None:
        self._closing = True
        self.call.cancel()
        self.thread.join(2)


def _status_row(st: Any, t0: float) -> dict[str, Any]:
    return {"t_s": round(time.time() - t0, 3),
            "links": {f"{ln.src}->{ln.dst}": ln.utilisation for ln in st.links if ln.fabric_link},
            "collectives": {c.name: (c.bytes_total, c.flows) for c in st.collectives},
            "traffic": {f"{x.src}>{x.dst}": x.bytes for x in st.traffic}}


def run_experiment(path: str | Path, out_dir: str | Path, console: Console | None = None
                   ) -> Results:
    """Run the telemetry lab; write ``OUT/results.json`` and the PNGs. ``ok`` when the ring was
    correct, the registration in force and matching the switches, the counters within bound,
    the metrics documented present, and the failure seen in time.

    Raises
    ------
    ConfigError
        Invalid experiment; nothing was started.
    RuntimeError
        The lab cannot run here or a step failed; the network is torn down first. When the
        controller died (a gRPC call or the event stream failed), ``results.json`` is written
        with the one-line ``error`` the exception carries.
    """
    import grpc

    from controller.northbound.client import FabricClient
    from controller.runtime.metrics import metric_names

    console = console or Console()
    t_start = time.monotonic()
    exp = load_experiment(path)
    missing = requirements_missing()
    if missing:
        raise RuntimeError("cannot run a Mininet lab here: " + "; ".join(missing))
    s, fab, coll = exp.spec, exp.fabric, exp.registered
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    keep = {c.name for c in exp.policy.collectives} - {coll.name}
    policy_file = out / "policy.yaml"
    policy_file.write_text(policy_text(exp.policy_path, keep))
    load_policy(policy_file, fab)
    names = [sw.name for sw in fab.switches]
    mport, gport = free_port(), free_port()
    murl = f"http://127.0.0.1:{mport}/metrics"
    extra = ["--stats-interval", f"{s.stats_interval:g}", "--metrics-listen",
             f"127.0.0.1:{mport}", "--grpc-listen", f"127.0.0.1:{gport}"]
    data: dict[str, Any] = {"experiment": {"kind": s.kind, "name": s.name, "file": str(exp.path),
                                           "registered": coll.name, "job": s.job,
                                           "stats_interval_s": s.stats_interval,
                                           "workload": s.workload.model_dump(),
                                           "expect": s.expect.model_dump()}}
    timings: dict[str, float] = {}
    env = environment()
    with lab_network(fab, s.lab, console, timings) as net:
        mininet = net.mininet
        ctl = events = None
        link_down: tuple[str, str] | None = None
        failure: str | None = None
        step = "starting"
        client = FabricClient(f"127.0.0.1:{gport}")
        try:
            t = time.monotonic()
            ctl = start_mode_controller(exp.topology_path, policy_file, mininet, fab,
                                        out / "controller.log", s.lab, extra)
            timings["controller_ready_s"] = round(time.monotonic() - t, 2)
            events = EventLog(client)
            time.sleep(0.3)
            # -- register through gRPC and check the switches hold what GetPaths says ----------
            t_reg = time.time()
            ips = [fab.host_by_name[h].ipv4 for h in coll.ranks]
            step = f"registering {coll.name}"
            reply = client.register(s.job, coll.name, ips, bidirectional=coll.bidirectional,
                                    expected_bytes=s.workload.bytes)
            full = reply.collective
            step = f"reading the paths of {full}"
            got = client.paths(full)
            paths = {(f.src, f.dst): list(f.hops) for f in got.flows}
            mismatches = []
            for (src, dst), hops in paths.items():
                for u, v in zip(hops[1:-1], hops[2:], strict=True):
                    port = pinned_output(u, fab.host_by_name[src].ipv4, fab.host_by_name[dst].ipv4)
                    if port != fab.port_towards(u, v):
                        mismatches.append(f"{u}: {src}->{dst} leaves by {port}, GetPaths says "
                                          f"{v} (port {fab.port_towards(u, v)})")
            step = "watching events"
            events.raise_if_failed()
            ev_reg = events.first("registered", t_reg - 1, collective=full)
            data["registration"] = {
                "collective": full, "in_force": reply.confirmation.in_force,
                "apply_ms": round(reply.confirmation.apply_ms, 1),
                "switches_updated": list(reply.confirmation.switches_updated),
                "switches_pending": list(reply.confirmation.switches_pending),
                "paths": {f"{a}->{b}": h for (a, b), h in paths.items()},
                "ovs_matches_getpaths": not mismatches, "mismatches": mismatches,
                "event_seen": ev_reg is not None}
            # -- run the collective alone, sampling GetStatus ----------------------------------
            hosts = {h.name: h for h in mininet.hosts}
            ports0 = {sw: dump_ports(sw) for sw in names}
            scrape0 = scrape(murl)
            samples: list[dict[str, Any]] = []
            t0 = time.time()
            procs, sports, dport = start_ring(coll, 0, fab, hosts, s.workload.bytes,
                                              s.workload.chunk_bytes, s.seed, out / coll.name)
            mid = None
            step = "sampling GetStatus during the run"
            while any(p.poll() is None for _, p, _ in procs) and time.time() - t0 < \
                    s.workload.timeout_s:
                samples.append(_status_row(client.status(), t0))
                if mid is None and time.time() - t0 > 2.0:
                    mid = scrape(murl)
                    (out / "metrics_sample.txt").write_text(mid)
                time.sleep(s.stats_interval)
            errs = wait_ranks(procs, s.workload.timeout_s)
            ring = ring_result(coll, fab, procs, s.workload.bytes, sports, dport, errs)
            time.sleep(2.5 * s.stats_interval)  # the controller's last samples
            samples.append(_status_row(client.status(), t0))
            ports1 = {sw: dump_ports(sw) for sw in names}
            scrape1 = scrape(murl)
            data["ring"] = ring
            # -- counters against the pinned paths ---------------------------------------------
            sent = {}
            for key in paths:
                h = fab.host_by_name[key[0]]
                sent[key] = ports1[h.leaf][h.port][0] - ports0[h.leaf][h.port][0]
            ovs = {}
            for sw in names:
                for port, (_, tx) in ports1[sw].items():
                    peer = fab.port_map.get((sw, port))
                    if peer is not None:
                        ovs[f"{sw}->{peer[0]}"] = tx - ports0[sw].get(port, (0, 0))[1]
            b0 = scraped(scrape0, "aifabric_link_bytes_total")
            b1 = scraped(scrape1, "aifabric_link_bytes_total")
            prom = {dict(k)["link"]: int(v - b0.get(k, 0.0)) for k, v in b1.items()}
            data["counters"] = {"flow_bytes_sent": {f"{a}->{b}": n for (a, b), n in sent.items()},
                                "ovs": counter_check(fab, paths, sent, ovs),
                                "controller": counter_check(fab, paths, sent, prom)}
            # -- a link of the registered collective fails ----------------------------------------
            first = sorted(paths)[0]
            a, b = paths[first][1], paths[first][2]
            subject = "-".join(sorted((a, b)))
            t_fail = time.time()
            step = f"waiting for the link {subject} down alert"
            mininet.configLinkStatus(a, b, "down")
            link_down = (a, b)
            t_metric = None
            down_text = ""
            while time.time() - t_fail < 10 * s.stats_interval + 5:
                down_text = scrape(murl)
                v = scraped(down_text, "aifabric_alert_active")
                if v.get((("alert", "link_down"), ("subject", subject))) == 1.0:
                    t_metric = time.time()
                    break
                time.sleep(0.02)
            # every documented metric, from the mid-run scrape and the one with the link down
            # (aifabric_alert_active has samples only while an alert is active; the queue
            # metrics need queues, --apply-qos, and this lab runs plain FIFO ports)
            from prometheus_client.parser import text_string_to_metric_families

            present = set()
            for text in (mid or scrape1, down_text):
                for fam in text_string_to_metric_families(text):
                    present |= {x.name for x in fam.samples}
            data["metrics"] = {"documented": metric_names(),
                               "missing_mid_run": sorted(set(metric_names(False)) - present)}
            time.sleep(2 * s.stats_interval)
            step = "watching events"
            events.raise_if_failed()
            ev = events.first("link-down", t_fail, link=subject)
            repin = events.first("repin", t_fail, collective=full)
            step = f"reading the paths of {full} after the failure"
            after = {(f.src, f.dst): list(f.hops) for f in client.paths(full).flows}
            avoid = all(frozenset((u, v)) != frozenset((a, b))
                        for h in after.values() for u, v in zip(h, h[1:], strict=False))
            bound_s = s.expect.max_alert_intervals * s.stats_interval
            data["failure"] = {
                "link": subject, "bound_s": bound_s,
                "event_after_s": None if ev is None else round(ev[0] - t_fail, 3),
                "alert_metric_after_s": None if t_metric is None else round(t_metric - t_fail, 3),
                "repin_event_after_s": None if repin is None else round(repin[0] - t_fail, 3),
                "paths_after": {f"{x}->{y}": h for (x, y), h in after.items()},
                "paths_avoid_failed_link": avoid}
            mininet.configLinkStatus(a, b, "up")
            link_down = None
            time.sleep(2 * s.stats_interval)
            step = "watching events"
            events.raise_if_failed()
            data["events"] = [{"t_s": round(t - t_reg, 3), "kind": e.kind, "message": e.message}
                              for t, e in events.events]
        except grpc.RpcError as exc:
            failure = rpc_failure(step, exc, exit_code(ctl))
        except OSError as exc:  # the metrics endpoint (urllib) of a controller that is gone
            code = exit_code(ctl, 0.2)
            if code is None:
                raise
            failure = rpc_failure(step, exc, code)
        finally:
            if events is not None:
                events.close()
            client.close()
            if link_down is not None and mininet is not None:
                mininet.configLinkStatus(*link_down, "up")
            rc = ctl.stop() if ctl is not None else None
    data["controller_exit"] = rc
    data["teardown_removed"] = net.removed
    data["environment"] = env
    timings["total_s"] = round(time.monotonic() - t_start, 2)
    data["timings"] = timings
    if failure is not None:
        data["error"] = failure
        data["verdicts"] = {}
        (out / "results.json").write_text(json.dumps(data, indent=1))
        raise RuntimeError(f"{failure}; the network was torn down (log {out / 'controller.log'}, "
                           f"{out / 'results.json'})")
    # -- plots -------------------------------------------------------------------------------------
    links = sorted(samples[-1]["links"])
    times = [r["t_s"] for r in samples]
    link_heatmap(times, links, [[r["links"].get(k, 0.0) for r in samples] for k in links],
                 out / "link_utilisation.png",
                 f"{s.name}: utilisation of each directed fabric link ({full} running, "
                 f"{s.stats_interval:g} s samples)")
    tm = {tuple(k.split(">")): v for k, v in samples[-1]["traffic"].items()}
    traffic_heatmap(tm, [h.name for h in fab.hosts], out / "traffic_matrix.png",
                    f"{s.name}: bytes per host pair during the run (entry counters)")
    # Open vSwitch refreshes entry counters only every revalidation (up to ~0.5 s), so rates
    # from entry bytes are taken over windows of >= 1 s (else they swing above the link rate)
    series: dict[str, tuple[list[float], list[float]]] = {}
    pairs = []
    for i, cur in enumerate(samples):
        j = max((k for k in range(i) if cur["t_s"] - samples[k]["t_s"] >= 1.0), default=None)
        if j is not None:
            pairs.append((samples[j], cur))
    for prev, cur in pairs:
        dt = cur["t_s"] - prev["t_s"]
        for name, (nbytes, nflows) in cur["collectives"].items():
            before = prev["collectives"].get(name, (0, nflows))[0]
            ts, bw = series.setdefault(name, ([], []))
            ts.append(cur["t_s"])
            bw.append(8 * (nbytes - before) / dt / max(nflows, 1))
    busbw_plot({k: v for k, v in series.items() if any(v[1])}, ring_bound_bps(fab, coll),
               out / "busbw_time.png", f"{s.name}: bus bandwidth per collective "
                                       "(entry bytes per flow over >= 1 s windows)")
    data["samples"] = samples
    c, f = data["counters"], data["failure"]
    v = {
        "ring_correct": bool(data["ring"]["correct"]),
        "registered_in_force": bool(data["registration"]["in_force"]),
        "ovs_matches_getpaths": data["registration"]["ovs_matches_getpaths"],
        "ovs_counters_within_bound": c["ovs"]["max_error_of_flow"] <= s.expect.max_counter_error,
        "controller_counters_within_bound":
            c["controller"]["max_error_of_flow"] <= s.expect.max_counter_error,
        "metrics_present": not data["metrics"]["missing_mid_run"],
        "failure_event_in_time": f["event_after_s"] is not None and f["event_after_s"] <= f["bound_s"],
        "failure_alert_metric_in_time": f["alert_metric_after_s"] is not None
        and f["alert_metric_after_s"] <= f["bound_s"],
        "repinned_off_failed_link": f["paths_avoid_failed_link"],
    }
    data["verdicts"] = v
    results_path = out / "results.json"
    results_path.write_text(json.dumps(data, indent=1))
    console.print(f"registered {full}: in force {data['registration']['in_force']} "
                  f"({data['registration']['apply_ms']} ms); ring CCT "
                  f"{data['ring'].get('cct_s')} s, correct {data['ring']['correct']}",
                  markup=False)
    console.print(f"counter error (fraction of one flow), worst link: OVS "
                  f"{c['ovs']['max_error_of_flow']:.4f}, controller "
                  f"{c['controller']['max_error_of_flow']:.4f}", markup=False)
    console.print(f"link {f['link']} down: event after {f['event_after_s']} s, alert metric "
                  f"after {f['alert_metric_after_s']} s (bound {f['bound_s']:g} s)", markup=False)
    for k, val in v.items():
        console.print(f"{k}: {'yes' if val else 'NO'}", markup=False)
    res = Results(data, out, results_path, out / "link_utilisation.png")
    res.ok = all(v.values())
    return res
