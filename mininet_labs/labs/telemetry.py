"""``kind: telemetry``: a collective registered through the northbound gRPC API is pinned; the
per-link byte counters match its pinned paths; the Prometheus endpoint serves the metrics; a
link failure shows in ``WatchEvents`` and in the alert metric; heatmaps are drawn.

Example (``mininet_labs/experiments/telemetry.yaml``)::

    kind: telemetry
    name: telemetry
    topology: ../topologies/leafspine_2x4x2.yaml
    policy: ../policies/pinned_two_rings.yaml
    registered: ring-b            # taken out of the policy file, registered through gRPC instead
    job: lab
    workload: {kind: ring-allreduce, bytes: 6MB}
    stats_interval: 0.5s
    expect: {max_counter_error: 0.05, max_alert_intervals: 2}

Steps: the controller starts with the policy minus ``registered`` (telemetry every
``stats_interval``); all pairs ping; a ``WatchEvents`` stream is opened; the collective is
registered (``RegisterCollective`` with the hosts' IPv4 addresses in rank order) and its reply
must say *in force*; every hop of every flow from ``GetPaths`` must match the pinned entry Open
vSwitch holds (:mod:`mininet_labs.lab.ofctl`: the one thing only the switch can tell). Then the
collective runs alone while the lab samples ``GetStatus``. Counter check
(:mod:`mininet_labs.analysis.telemetry`): the switches' port counters and the controller's own
``aifabric_link_bytes_total`` against the bytes ``GetPaths`` predicts. Failure: one fabric link
of the first registered flow goes down; the lab notes when the ``link-down`` event arrives and
when a scrape (every 20 ms) first shows ``aifabric_alert_active{alert="link_down"}``; both must
come within ``max_alert_intervals`` × ``stats_interval``; ``GetPaths`` must then avoid the link.

If the controller dies mid-run (e.g. SIGKILL), the call or stream that notices it fails and the
run stops with one line (``controller exited (code -9) while watching events``).

``kind: telemetry-p4`` (``mininet_labs/experiments/telemetry_p4.yaml``) is the same on six
BMv2 switches running fabric.p4 under the one runtime (``aifabric controller --p4-targets``):
what a switch holds is read from it over P4Runtime by a second client with a lower election id
(a backup: it reads, never writes; P4Runtime §5) and each hop's output port is what fabric.p4's
forwarding (:mod:`controller.testing.p4model`) gives for the flow's packet over the
entries read; the link failure is seen by LLDP liveness (``liveness``); and the record carries
what only P4 gives, per port and queue from the metrics: the queue-depth histogram
(``aifabric_queue_depth_packets``) and the CE marks (``aifabric_queue_ce_packets_total``,
``aifabric_queue_ecn_marked_packets_total``) during the run.

Plots: ``link_utilisation.png`` (directed fabric links × time), ``traffic_matrix.png`` (host
pairs, MB), ``busbw_time.png`` (per-collective bus bandwidth from its entry counters).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from controller.errors import ConfigError
from controller.policy.model import Collective
from controller.telemetry.plots import busbw_plot, link_heatmap, traffic_heatmap
from controller.yamlsrc import Document
from mininet_labs.analysis import telemetry as analysis
from mininet_labs.analysis.collectives import ring_bound_bps
from mininet_labs.analysis.verdict import Verdict
from mininet_labs.lab import ofctl
from mininet_labs.lab.collectives import finish_ring, start_ring
from mininet_labs.lab.counters import Periodic, PortCounters
from mininet_labs.lab.interface import ControllerConfig, Lab, RunContext, Variant
from mininet_labs.lab.policies import policy_variant
from mininet_labs.lab.schema import (
    Bmv2LabSpec,
    Experiment,
    FabricExperimentSpec,
    LivenessSpec,
    RingWorkloadSpec,
    Seconds,
    Seed,
    StrictModel,
)
from mininet_labs.lab.wait import WaitTimeout, wait_until

MID_RUN_SCRAPE_S = 2.0


class ExpectSpec(StrictModel):
    max_counter_error: Annotated[float, Field(gt=0, le=1)] = 0.05
    max_alert_intervals: Annotated[float, Field(gt=0)] = 2.0


class Spec(FabricExperimentSpec):
    kind: Literal["telemetry"]
    registered: Annotated[str, Field(min_length=1)]
    job: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")] = "lab"
    seed: Seed = 1
    workload: RingWorkloadSpec
    stats_interval: Annotated[Seconds, Field(ge=0.05, le=10)] = 0.5
    expect: ExpectSpec = ExpectSpec()


class P4Spec(Spec):
    kind: Literal["telemetry-p4"] = "telemetry-p4"  # type: ignore[assignment]
    switch: Literal["bmv2"] = "bmv2"
    liveness: LivenessSpec = LivenessSpec()
    lab: Bmv2LabSpec = Bmv2LabSpec()


@dataclass(frozen=True, kw_only=True)
class TelemetryExperiment(Experiment):
    registered: Collective


class Telemetry(Lab):
    kind = "telemetry"
    spec_model: ClassVar[type[Any]] = Spec
    switch_label: ClassVar[str] = "ovs"
    plot_names = ("link_utilisation.png", "traffic_matrix.png", "busbw_time.png")

    def prepare(self, doc: Document, exp: Experiment) -> TelemetryExperiment:
        assert exp.policy is not None
        hit = [c for c in exp.policy.collectives if c.name == exp.spec.registered]
        if not hit:
            names = ", ".join(c.name for c in exp.policy.collectives) or "none"
            raise ConfigError([doc.problem(("registered",), f"no collective "
                                           f"{exp.spec.registered!r} in {exp.policy_path} (its "
                                           f"collectives: {names})")])
        return TelemetryExperiment(**vars(exp), registered=hit[0])

    def describe(self, exp: Any) -> str:
        r = exp.registered
        return (f"{exp.fabric.name}; {r.name} ({' '.join(r.ranks)}) registered through gRPC as "
                f"{exp.spec.job}.{r.name}; statistics every {exp.spec.stats_interval:g} s")

    def variants(self, exp: Any) -> list[Variant]:
        keep = {c.name for c in exp.policy.collectives} - {exp.registered.name}
        text = policy_variant(exp.policy_text, keep=keep, source=str(exp.policy_path))
        return [Variant("telemetry", ControllerConfig(
            text, self.controller_args(exp), southbound=self.southbound, telemetry=True,
            stats_interval_s=exp.spec.stats_interval))]

    southbound: ClassVar[str] = "openflow"

    def controller_args(self, exp: Any) -> tuple[str, ...]:
        return ()

    def output_ports(self, ctx: RunContext, paths: dict[tuple[str, str], list[str]]
                     ) -> dict[tuple[str, str, str], int | None]:
        """``(switch, src host, dst host)`` → the port the switch sends that flow out of, as the
        switch itself says (Open vSwitch: its flow table, :mod:`mininet_labs.lab.ofctl`)."""
        fab = ctx.exp.fabric
        return {(u, src, dst): ofctl.output_port(u, fab.host_by_name[src].ipv4,
                                                 fab.host_by_name[dst].ipv4)
                for (src, dst), hops in paths.items() for u in hops[1:-1]}

    def set_link(self, ctx: RunContext, a: str, b: str, up: bool) -> None:
        """Take the link ``a``–``b`` down (both ends, ``ip link set``) or up again."""
        ctx.net.configLinkStatus(a, b, "up" if up else "down")

    def queue_report(self, scrape: str, scrape0: str) -> dict[str, Any]:
        """What the switches' queues showed during the run (none on Open vSwitch without
        ``--apply-qos``)."""
        return {}

    def run(self, ctx: RunContext, key: Any) -> dict[str, Any]:
        import grpc

        ctl = ctx.controller
        assert ctl is not None
        step = ["watching events"]  # what the run is doing, for a one-line error
        events = None
        try:
            events = ctl.watch()
            return self._steps(ctx, events, step)
        except grpc.RpcError as exc:
            raise RuntimeError(ctl.failure(step[0], exc)) from None
        except OSError as exc:  # the metrics endpoint (urllib) of a controller that is gone
            msg = ctl.failure(step[0], exc)
            if not msg.startswith("controller exited"):
                raise
            raise RuntimeError(msg) from None
        finally:
            if events is not None:
                events.close()
            down = ctx.state.pop("link_down", None)
            if down is not None:
                self.set_link(ctx, down[0], down[1], True)

    def _steps(self, ctx: RunContext, events: Any, step: list[str]) -> dict[str, Any]:
        from controller.runtime.metrics import metric_names

        s, fab, coll = ctx.exp.spec, ctx.exp.fabric, ctx.exp.registered
        ctl = ctx.controller
        assert ctl is not None
        client = ctl.client
        rec: dict[str, Any] = {}
        # -- register through gRPC; the switches must hold what GetPaths says -----------------
        step[0] = f"registering {coll.name}"
        t_reg = time.time()
        reply = client.register(s.job, coll.name, [fab.host_by_name[h].ipv4 for h in coll.ranks],
                                bidirectional=coll.bidirectional, expected_bytes=s.workload.bytes)
        full = reply.collective
        step[0] = f"reading the paths of {full}"
        paths = {k: list(v) for k, v in ctl.paths(full).items()}
        mismatches = []
        outs = self.output_ports(ctx, paths)
        sw = self.switch_label
        for (src, dst), hops in paths.items():
            for u, v in zip(hops[1:-1], hops[2:], strict=True):
                port = outs[(u, src, dst)]
                if port != fab.port_towards(u, v):
                    mismatches.append(f"{u}: {src}->{dst} leaves by {port}, GetPaths says {v} "
                                      f"(port {fab.port_towards(u, v)})")
        step[0] = "watching events"
        events.raise_if_failed()
        rec["registration"] = {
            "collective": full, "in_force": reply.confirmation.in_force,
            "apply_ms": round(reply.confirmation.apply_ms, 1),
            "switches_updated": list(reply.confirmation.switches_updated),
            "switches_pending": list(reply.confirmation.switches_pending),
            "paths": {f"{a}->{b}": h for (a, b), h in paths.items()},
            f"{sw}_matches_getpaths": not mismatches, "mismatches": mismatches,
            "event_seen": events.first("registered", t_reg - 1, collective=full) is not None}
        # -- the collective alone, GetStatus sampled ----------------------------------------------
        counters = PortCounters(ctx.net, fab)
        keys = counters.switch_ports()
        ports0 = counters.read(keys)
        scrape0 = ctl.scrape()
        t0 = time.time()
        mid: list[str] = []

        def sample() -> dict[str, Any]:
            if not mid and time.time() - t0 > MID_RUN_SCRAPE_S:
                mid.append(ctl.scrape())
            return analysis.status_row(client.status(), t0, time.time())

        step[0] = "sampling GetStatus during the run"
        ring = start_ring(ctx, coll, seed=s.seed, nbytes=s.workload.bytes, out_dir=ctx.out /
                          coll.name, chunk_bytes=s.workload.chunk_bytes)
        with Periodic(sample, s.stats_interval) as sampler:
            rec["ring"] = finish_ring(ctx, ring, s.workload.timeout_s)
            ctl.link_bytes(after_wall_s=time.time())  # the controller's last samples are in
        samples = [v for _, v in sampler.samples]
        if mid:
            (ctx.out / "metrics_sample.txt").write_text(mid[0])
        ports1 = counters.read(keys)
        scrape1 = ctl.scrape()
        sent = {}
        for key in paths:
            h = fab.host_by_name[key[0]]
            sent[key] = ports1[(h.leaf, h.port)][0] - ports0[(h.leaf, h.port)][0]
        b0 = analysis.scraped(scrape0, "aifabric_link_bytes_total")
        b1 = analysis.scraped(scrape1, "aifabric_link_bytes_total")
        prom = {dict(k)["link"]: int(v - b0.get(k, 0.0)) for k, v in b1.items()}
        rec["counters"] = {"flow_bytes_sent": {f"{a}->{b}": n for (a, b), n in sent.items()},
                           sw: analysis.counter_check(fab, paths, sent,
                                                      counters.tx_by_link(ports0, ports1)),
                           "controller": analysis.counter_check(fab, paths, sent, prom)}
        rec["queues"] = self.queue_report(scrape1, scrape0)
        # -- a link of the registered collective fails ----------------------------------------
        first = sorted(paths)[0]
        a, b = paths[first][1], paths[first][2]
        subject = "-".join(sorted((a, b)))
        step[0] = f"waiting for the link {subject} down alert"
        t_fail = time.time()
        self.set_link(ctx, a, b, False)
        ctx.state["link_down"] = (a, b)
        seen: list[str] = []

        def alert_active() -> float | None:
            seen[:] = [ctl.scrape()]
            v = analysis.scraped(seen[0], "aifabric_alert_active")
            return time.time() if v.get((("alert", "link_down"), ("subject", subject))) == 1.0 \
                else None

        try:
            t_metric: float | None = wait_until(alert_active, 10 * s.stats_interval + 5,
                                                "the link_down alert metric", every_s=0.02)
        except WaitTimeout:
            t_metric = None
        # every documented metric, from the mid-run scrape and the one with the link down
        # (aifabric_alert_active has samples only while an alert is active; queue metrics need
        # --apply-qos, and this lab runs plain FIFO ports)
        present = analysis.sample_names(mid[0] if mid else scrape1, *seen)
        rec["metrics"] = {"documented": metric_names(),
                          "missing_mid_run": sorted(set(metric_names(False)) - present)}
        step[0] = "watching events"
        bound_s = s.expect.max_alert_intervals * s.stats_interval
        try:
            wait_until(lambda: events.first("repin", t_fail, collective=full) or
                       events.error, 2 * s.stats_interval + 2, "the repin event", every_s=0.05)
        except WaitTimeout:
            pass
        events.raise_if_failed()
        ev = events.first("link-down", t_fail, link=subject)
        repin = events.first("repin", t_fail, collective=full)
        step[0] = f"reading the paths of {full} after the failure"
        after = ctl.paths(full)
        avoid = all(frozenset((u, v)) != frozenset((a, b))
                    for h in after.values() for u, v in zip(h, h[1:], strict=False))
        rec["failure"] = {
            "link": subject, "bound_s": bound_s,
            "event_after_s": None if ev is None else round(ev[0] - t_fail, 3),
            "alert_metric_after_s": None if t_metric is None else round(t_metric - t_fail, 3),
            "repin_event_after_s": None if repin is None else round(repin[0] - t_fail, 3),
            "paths_after": {f"{x}->{y}": list(h) for (x, y), h in after.items()},
            "paths_avoid_failed_link": avoid}
        self.set_link(ctx, a, b, True)
        ctx.state.pop("link_down", None)
        step[0] = "watching events"
        try:
            wait_until(lambda: events.first("link-up", t_fail, link=subject) or events.error,
                       2 * s.stats_interval + 2, "the link-up event", every_s=0.05)
        except WaitTimeout:
            pass
        events.raise_if_failed()
        rec["events"] = [{"t_s": round(t - t_reg, 3), "kind": e.kind, "message": e.message}
                         for t, e in events.events]
        rec["samples"] = samples
        return rec

    def verdicts(self, exp: Any, records: list[dict[str, Any]],
                 summary: dict[str, Any]) -> list[Verdict]:
        return analysis.verdicts(records[0], exp.spec.expect.max_counter_error,
                                 self.switch_label)

    def report(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any]
               ) -> list[Any]:
        r = records[0]
        reg, c, f = r["registration"], r["counters"], r["failure"]
        return [f"registered {reg['collective']}: in force {reg['in_force']} ({reg['apply_ms']} "
                f"ms); ring CCT {r['ring'].get('cct_s')} s, correct {r['ring']['correct']}",
                f"counter error (fraction of one flow), worst link: {self.switch_label} "
                f"{c[self.switch_label]['max_error_of_flow']:.4f}, controller "
                f"{c['controller']['max_error_of_flow']:.4f}",
                f"link {f['link']} down: event after {f['event_after_s']} s, alert metric after "
                f"{f['alert_metric_after_s']} s (bound {f['bound_s']:g} s)"]

    def plots(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any],
              out: Path) -> list[Path]:
        s, fab, samples = exp.spec, exp.fabric, records[0]["samples"]
        full = records[0]["registration"]["collective"]
        links = sorted(samples[-1]["links"])
        link_heatmap([r["t_s"] for r in samples], links,
                     [[r["links"].get(k, 0.0) for r in samples] for k in links],
                     out / "link_utilisation.png",
                     f"{s.name}: utilisation of each directed fabric link ({full} running, "
                     f"{s.stats_interval:g} s samples)")
        tm = {tuple(k.split(">")): v for k, v in samples[-1]["traffic"].items()}
        traffic_heatmap(tm, [h.name for h in fab.hosts], out / "traffic_matrix.png",
                        f"{s.name}: bytes per host pair during the run (entry counters)")
        busbw_plot(analysis.busbw_series(samples), ring_bound_bps(fab, exp.registered),
                   out / "busbw_time.png", f"{s.name}: bus bandwidth per collective (entry "
                                           "bytes per flow over >= 1 s windows)")
        return [out / n for n in self.plot_names]


class TelemetryP4(Telemetry):
    """The BMv2 twin (module docstring)."""

    kind = "telemetry-p4"
    spec_model = P4Spec
    network = "bmv2"
    southbound = "p4runtime"
    switch_label = "bmv2"

    def controller_args(self, exp: Any) -> tuple[str, ...]:
        return tuple(exp.spec.liveness.args())

    def output_ports(self, ctx: RunContext, paths: dict[tuple[str, str], list[str]]
                     ) -> dict[tuple[str, str, str], int | None]:
        import asyncio
        import ipaddress
        import json

        from controller.drivers.p4runtime.client import P4Switch
        from controller.testing.p4model import Packet, forward

        fab = ctx.exp.fabric
        targets = json.loads((ctx.out.parent / "targets.json").read_text())
        names = sorted({u for hops in paths.values() for u in hops[1:-1]})

        async def read_all() -> dict[str, Any]:
            out = {}
            for n in names:
                # a backup (election id 1 < the controller's): it reads, it never writes
                async with P4Switch(n, targets[n], fab.switch_by_name[n].dpid, election_id=1,
                                    backup_ok=True) as sw:
                    out[n] = await sw.read_state()
            return out

        held = asyncio.run(read_all())
        res: dict[tuple[str, str, str], int | None] = {}
        for (src, dst), hops in paths.items():
            s, d = fab.host_by_name[src], fab.host_by_name[dst]
            pkt = Packet(0x0800, int(ipaddress.IPv4Address(s.ipv4)),
                         int(ipaddress.IPv4Address(d.ipv4)), 6)
            for u in hops[1:-1]:
                got = forward(held[u], pkt)
                res[(u, src, dst)] = next(iter(got)) if isinstance(got, frozenset) \
                    and len(got) == 1 else None
        return res

    def set_link(self, ctx: RunContext, a: str, b: str, up: bool) -> None:
        from mininet_labs.lab.p4net import set_link_cut

        set_link_cut(ctx.net, a, b, not up, ctx.exp.spec.lab.queue_packets)

    def queue_report(self, scrape: str, scrape0: str) -> dict[str, Any]:
        def delta(name: str) -> dict[str, float]:
            b0, b1 = analysis.scraped(scrape0, name), analysis.scraped(scrape, name)
            return {",".join(f"{k}={v}" for k, v in key): round(val - b0.get(key, 0.0), 1)
                    for key, val in b1.items() if val - b0.get(key, 0.0)}

        return {"depth_packets_bucket": delta("aifabric_queue_depth_packets_bucket"),
                "ce_packets": delta("aifabric_queue_ce_packets_total"),
                "ecn_marked_packets": delta("aifabric_queue_ecn_marked_packets_total")}


LAB = Telemetry()
BMV2 = TelemetryP4()
