"""``kind: controller-restart``: the controller dies (``kill -9``) and comes back, then stops
cleanly (SIGTERM) and comes back, while both rings run; does forwarding notice, and does the
new controller send anything to switches that already hold what it intends?

Example (``mininet_labs/experiments/controller_restart.yaml``)::

    kind: controller-restart
    name: controller-restart
    topology: ../topologies/leafspine_2x4x2.yaml
    policy: ../policies/two_rings_probe_priority.yaml
    workload: {kind: ring-allreduce, bytes: 48MB}    # every collective of the policy runs
    probes:                                          # one per ring, on a pinned flow of it
      - {src: h1, dst: h3}
      - {src: h2, dst: h4}
    probe: {interval: 1ms, payload: 64B, dscp: 46}
    restart_after: 3s          # kill -9, then start the same command this long after
    expect: {max_gap: 5ms, max_lost: 0}

One variant: the controller with ``--apply-qos`` and telemetry (its Prometheus metrics and gRPC
API). Every collective starts; once their data flows, each probe (one packet per ``interval``,
DSCP ``dscp``: the policy's priority class, so the ring flow it rides with cannot crowd it out)
runs. 1 s later: ``kill -9`` of the controller's process group, ``restart_after`` later the same
command again (same ports; the bridges run ``fail_mode=secure`` and keep forwarding meanwhile);
once it has reconciled every switch, SIGTERM and an immediate restart. After each restart the lab
waits until the new process has reconciled every switch (``aifabric_reconciles`` = number of
switches), then reads its own counters: ``aifabric_southbound_messages`` of kind ``flow-mod`` and
``group-mod`` (what it sent since it started: the target is 0, the switches already hold the
intended state) and ``aifabric_reconcile_entries_sent``. ``reconnect_s``: from the restarted
process listening (OpenFlow and gRPC) to the last switch reconciled (polled every 50 ms);
``reconciled_after_start_s``: from starting the process; ``reconciled_after_ready_s``: from its
log line "listening for OpenFlow" (the runtime ready: switches that connected to the socket
bound earlier are served from then on) to "all N switches programmed".

Verdicts (from the measurements): every collective correct; every probe lost at most
``max_lost`` packets and its longest gap (lost packets, from their send timestamps, resolution
one interval) is at most ``max_gap``; no flow-mod or group-mod at either reconnect; every
restart happened while the collectives were still running.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from controller.te.collectives import FlowDemand
from controller.yamlsrc import Document
from mininet_labs.analysis.verdict import Verdict
from mininet_labs.lab.collectives import finish_ring, start_rings
from mininet_labs.lab.interface import ControllerConfig, Lab, RunContext, Variant
from mininet_labs.lab.net import host_priority_class
from mininet_labs.lab.probes import UdpStream
from mininet_labs.lab.schema import (
    Experiment,
    FabricExperimentSpec,
    RingWorkloadSpec,
    Seconds,
    Seed,
    SizeBytes,
    StrictModel,
    check_host,
)
from mininet_labs.lab.switchstate import pinned_flow, southbound_counts
from mininet_labs.lab.wait import wait_until
from mininet_labs.workloads.udp_probe import analyse, loss_in_windows

PROBE_PORT = 9300
#: The probe's class on its source host's NIC (:func:`host_priority_class`): 1 packet/ms of
#: 64-byte payload is ~0.9 Mbit/s with headers.
HOST_PROBE_CLASS_BPS = 1.5e6
RECONCILED = "aifabric_reconciles_total"


class HostPair(StrictModel):
    src: str
    dst: str


class ProbeSettings(StrictModel):
    """Every probe: one packet per ``interval`` with ``payload`` bytes, marked ``dscp``."""

    interval: Annotated[Seconds, Field(ge=200e-6, le=1.0)] = 1e-3
    payload: Annotated[SizeBytes, Field(ge=0, le=1400)] = 64
    dscp: Annotated[int, Field(ge=0, le=63, strict=True)] = 46


class ExpectSpec(StrictModel):
    max_gap: Annotated[Seconds, Field(ge=0)] = 5e-3
    max_lost: Annotated[int, Field(ge=0, strict=True)] = 0
    # issue 12: every switch reconciled within this long of the restarted runtime being ready
    max_reconnect: Annotated[Seconds, Field(gt=0)] = 1.0


class Spec(FabricExperimentSpec):
    kind: Literal["controller-restart"]
    seed: Seed = 1
    workload: RingWorkloadSpec
    probes: Annotated[tuple[HostPair, ...], Field(min_length=1, max_length=8)]
    probe: ProbeSettings = ProbeSettings()
    restart_after: Annotated[Seconds, Field(ge=0, le=60)] = 3.0
    #: OpenFlow (``ssl:``) and the northbound over TLS with tokens (``aifabric certs init``)
    tls: bool = False
    expect: ExpectSpec = ExpectSpec()


@dataclass(frozen=True, kw_only=True)
class RestartExperiment(Experiment):
    """``probe_flows``: the pinned flow each probe follows, with its planned path."""

    probe_flows: tuple[tuple[FlowDemand, tuple[str, ...]], ...]


def _kill_group(ctx: RunContext, sig: int) -> tuple[float, int | None]:
    """Send ``sig`` to the controller's process group; wait for it to exit. Returns the time
    the signal was sent and the exit code."""
    assert ctx.controller is not None
    p = ctx.controller.popen
    t = time.time()
    os.killpg(p.pid, sig)
    return t, p.wait(timeout=30)


def _log_time(log: str, text: str) -> float | None:
    """The timestamp (s since the epoch, local time as the controller logs it) of the first log
    line containing ``text``, or None."""
    import datetime as dt

    for line in log.splitlines():
        if text in line:
            try:
                return dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            except ValueError:
                return None
    return None


class ControllerRestart(Lab):
    kind = "controller-restart"
    spec_model = Spec
    plot_names = ()

    def prepare(self, doc: Document, exp: Experiment) -> RestartExperiment:
        spec = exp.spec
        assert exp.policy is not None
        flows = []
        for i, pr in enumerate(spec.probes):
            for key in ("src", "dst"):
                check_host(doc, exp.fabric, ("probes", i, key), getattr(pr, key))
            flows.append(pinned_flow(doc, exp.fabric, exp.policy, pr.src, pr.dst, ("probes", i),
                                     str(exp.policy_path)))
        return RestartExperiment(**vars(exp), probe_flows=tuple(flows))

    def describe(self, exp: Any) -> str:
        return (f"{exp.fabric.name}; probes on " + ", ".join(
            f"{d.label} ({' '.join(p)})" for d, p in exp.probe_flows)
            + f"; kill -9 + restart after {exp.spec.restart_after:g} s, then SIGTERM + restart"
            + ("; OpenFlow and the northbound over TLS" if exp.spec.tls else ""))

    def variants(self, exp: Any) -> list[Variant]:
        return [Variant("restart", ControllerConfig(
            exp.policy_text, ("--apply-qos",), telemetry=True,
            wait_log=tuple(f"[{s.name}] QoS applied" for s in exp.fabric.switches),
            tls=exp.spec.tls))]

    def _restart(self, ctx: RunContext, sig: int, delay_s: float, n: int, name: str
                 ) -> dict[str, Any]:
        ctl = ctx.controller
        assert ctl is not None
        t_sig, rc = _kill_group(ctx, sig)
        time.sleep(max(0.0, t_sig + delay_s - time.time()))
        t_start = time.time()
        ctl.relaunch(ctx.out / f"controller-{name}.log", 60.0)
        t_listen = time.time()

        def reconciled() -> dict[str, float] | None:
            try:
                c = southbound_counts(ctl.scrape())
            except OSError:
                return None  # its metrics endpoint not up yet
            return c if c.get(RECONCILED, 0) >= n else None

        counts = wait_until(reconciled, 60.0, f"{n} switches reconciled by the restarted "
                            "controller", every_s=0.05, abort=ctl.why_dead)
        t_done = time.time()
        time.sleep(1.0)  # anything it sends once reconciled (re-optimisation, retries) counts
        after = southbound_counts(ctl.scrape())
        log = ctl.log_path.read_text(errors="replace")
        ready, done = (_log_time(log, "listening for OpenFlow"),
                       _log_time(log, f"all {n} switches programmed"))
        return {"step": name, "signal": signal.Signals(sig).name, "exit_code": rc,
                "signal_at": t_sig, "listening_at": t_listen,
                "down_s": round(t_listen - t_sig, 3),
                "reconciled_after_start_s": round(t_done - t_start, 3),
                "reconciled_after_ready_s": None if ready is None or done is None
                else round(done - ready, 3),
                "reconnect_s": round(t_done - t_listen, 3),
                "reconciles": int(counts.get(RECONCILED, 0)),
                "flow_mods": int(after.get("flow-mod", 0)),
                "group_mods": int(after.get("group-mod", 0)),
                "bundles": int(after.get("bundle", 0)),
                "reconcile_entries_sent": int(after.get(
                    "aifabric_reconcile_entries_sent_total", 0)),
                "reconciled_at": t_done}

    def setup(self, ctx: RunContext) -> None:
        fab, dscp = ctx.exp.fabric, ctx.exp.spec.probe.dscp
        for h in sorted(set([d.src for d, _ in ctx.exp.probe_flows])):
            link = next(ln for ln in fab.links if h in (ln.a, ln.b))
            host_priority_class(ctx.host(h), dscp, HOST_PROBE_CLASS_BPS, link.capacity_bps)

    def run(self, ctx: RunContext, key: Any) -> dict[str, Any]:
        exp, s, fab = ctx.exp, ctx.exp.spec, ctx.exp.fabric
        probes = [UdpStream(ctx, d.src, d.dst, PROBE_PORT + i, ctx.out, f"probe{i}")
                  for i, (d, _) in enumerate(exp.probe_flows)]
        n = len(fab.switches)
        steps: list[dict[str, Any]] = []
        try:
            for p in probes:
                p.start_receiver()
            rings, _ = start_rings(ctx, exp.policy.collectives, seed=s.seed,
                                   nbytes=s.workload.bytes, chunk_bytes=s.workload.chunk_bytes,
                                   timeout_s=s.workload.timeout_s)
            for p in probes:
                p.start_sender(s.probe.interval * 1e6, s.probe.payload, s.workload.timeout_s,
                               dscp=s.probe.dscp)
            time.sleep(1.0)
            steps.append(self._restart(ctx, signal.SIGKILL, s.restart_after, n, "after-kill"))
            steps.append(self._restart(ctx, signal.SIGTERM, 0.0, n, "after-term"))
            t_last = time.time()
            time.sleep(1.0)
            running = [all(j.popen.poll() is None for j in r.jobs) for r in rings]
            results = [finish_ring(ctx, r, s.workload.timeout_s) for r in rings]
            got = [p.finish() for p in probes]
        finally:
            for p in probes:
                p.stop()
        return {"steps": steps, "collectives": results,
                "collectives_running_after_restarts": running,
                "last_restart_done_at": t_last,
                "probes": [self._probe_record(d, path, g, [
                    (st["signal_at"], st["reconciled_at"]) for st in steps])
                           for (d, path), g in zip(exp.probe_flows, got, strict=True)]}

    @staticmethod
    def _probe_record(d: FlowDemand, path: tuple[str, ...], got: dict[str, Any],
                      windows: list[tuple[float, float]]) -> dict[str, Any]:
        rep = analyse(got["recv"]["records"], got["sent"]["sent"], got["sent"]["interval_us"])
        split = loss_in_windows(got["recv"]["records"], rep["sent"], windows)
        arrivals = sorted(r[2] for r in got["recv"]["records"])
        return {"flow": d.label, "path": list(path), "sent": rep["sent"],
                "received": rep["received"], "lost": rep["lost"], "tail_lost": rep["tail_lost"],
                "max_gap_ms": rep["max_gap_ms"], "outages": rep["outages"][:20],
                "duplicates": rep["duplicates"], "corrupt": got["recv"]["corrupt"],
                "send_errors": got["sent"]["send_errors"],
                "max_arrival_spacing_ms": round(max(
                    (b - a for a, b in zip(arrivals, arrivals[1:], strict=False)),
                    default=0) / 1e6, 3),
                "one_way_delay_ms": rep["one_way_delay_ms"], **split}

    def summarize(self, exp: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
        r = records[0]
        return {"steps": {st["step"]: {k: st[k] for k in (
                    "reconnect_s", "reconciled_after_ready_s", "flow_mods", "group_mods",
                    "reconcile_entries_sent")}
                          for st in r["steps"]},
                "probes": {p["flow"]: {"lost": p["lost"], "max_gap_ms": p["max_gap_ms"]}
                           for p in r["probes"]},
                "units": {"max_gap_ms": "ms of lost packets, from their send timestamps "
                                        "(resolution: one probe interval)",
                          "max_arrival_spacing_ms": "ms between consecutive arrivals at the "
                                                    "receiver (includes the sender's and "
                                                    "receiver's scheduling delays on a busy "
                                                    "machine; not a verdict)",
                          "reconnect_s": "s from the restarted process listening to every "
                                         "switch reconciled (polled every 50 ms)"}}

    def verdicts(self, exp: Any, records: list[dict[str, Any]],
                 summary: dict[str, Any]) -> list[Verdict]:
        e = exp.spec.expect
        r = records[0]
        correct = [x["correct"] for x in r["collectives"]]
        pr = r["probes"]
        steps = r["steps"]
        return [
            Verdict("all_correct", bool(correct) and all(correct),
                    f"{sum(correct)} of {len(correct)} collectives correct"),
            Verdict("restarted_under_traffic",
                    len(steps) == 2 and all(r["collectives_running_after_restarts"]),
                    "every collective still running when the last restart was done"),
            Verdict("probe_loss", all(p["lost"] <= e.max_lost and p["sent"] > 0 for p in pr),
                    ", ".join(f"{p['flow']}: {p['lost']} of {p['sent']} lost "
                              f"({p['lost_in_windows']} of {p['sent_in_windows']} while the "
                              f"controller restarted, {p['lost_elsewhere']} of "
                              f"{p['sent_elsewhere']} otherwise)" for p in pr)
                    + f" (bound {e.max_lost})"),
            Verdict("probe_gap", all(p["max_gap_ms"] <= e.max_gap * 1e3 for p in pr),
                    ", ".join(f"{p['flow']} {p['max_gap_ms']:.1f} ms" for p in pr)
                    + f" (bound {e.max_gap * 1e3:g} ms)", timing_sensitive=True),
            Verdict("nothing_sent_at_reconnect",
                    all(st["reconciles"] >= len(exp.fabric.switches) and st["flow_mods"] == 0
                        and st["group_mods"] == 0 for st in steps),
                    "; ".join(f"{st['step']}: {st['reconciles']} switches reconciled, "
                              f"{st['flow_mods']} flow-mods, {st['group_mods']} group-mods "
                              f"(controller metrics), all reconciled {st['reconciled_after_ready_s']} s "
                              "after the runtime was ready"
                              for st in steps)),
            Verdict("reconnected_within",
                    bool(steps) and all(st["reconciled_after_ready_s"] is not None
                                        and st["reconciled_after_ready_s"] <= e.max_reconnect
                                        for st in steps),
                    "; ".join(f"{st['step']}: every switch reconciled "
                              f"{st['reconciled_after_ready_s']} s after the runtime was ready"
                              for st in steps) + f" (bound {e.max_reconnect:g} s)",
                    timing_sensitive=True)]

    def report(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any]
               ) -> list[Any]:
        r = records[0]
        lines = [f"{st['step']} ({st['signal']}, down {st['down_s']:.2f} s): reconciled "
                 f"{st['reconciles']} switches {st['reconciled_after_start_s']:.2f} s after the "
                 f"start, {st['reconciled_after_ready_s']} s after the runtime was ready; sent "
                 f"{st['flow_mods']} flow-mods, {st['group_mods']} group-mods"
                 for st in r["steps"]]
        lines += [f"probe {p['flow']}: {p['lost']} of {p['sent']} lost ("
                  f"{p['lost_in_windows']} of {p['sent_in_windows']} during the restarts), "
                  "longest gap "
                  f"{p['max_gap_ms']:.1f} ms (largest arrival spacing "
                  f"{p['max_arrival_spacing_ms']:.1f} ms)" for p in r["probes"]]
        return lines


LAB = ControllerRestart()
