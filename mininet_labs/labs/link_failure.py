"""``kind: link-failure``: a fabric link on a pinned path goes down mid-collective; how long is
traffic lost, and is every result still correct? ``kind: link-failure-p4``: the same on six BMv2
switches running fabric.p4, driven by the one runtime (``aifabric controller --p4-targets``).

Example (``mininet_labs/experiments/link_failure.yaml``)::

    kind: link-failure
    name: link-failure
    topology: ../topologies/leafspine_2x4x2.yaml
    policy: ../policies/pinned_two_rings.yaml
    workload: {kind: ring-allreduce, bytes: 12MB}   # every collective of the policy runs
    probe: {src: h1, dst: h3, interval: 1ms, payload: 64B}
    fail_after: 3s                                  # after the collectives' data started
    cases:
      - {name: uplink-fast-failover, link: source-uplink, fast_failover: true}
      - {name: uplink-repin, link: source-uplink, fast_failover: false}
      - {name: downlink-repin, link: destination-downlink, fast_failover: true}
    expect: {max_gap: 1s}

Per case: a fresh controller (``--fast-failover`` when the case asks), all pairs reachable;
every collective starts; the lab's UDP probe runs from ``probe.src`` to ``probe.dst``, hosts of a
pinned flow, so it matches that flow's pinned entries and follows its path. ``fail_after`` after
the data starts, one link of that path goes down (both ends, ``ip link set down``: carrier loss
for Open vSwitch; no ``sch_netem`` here, so failures are link-down events): ``source-uplink`` is
the first fabric hop (source leaf → spine), where a fast-failover group has a backup uplink;
``destination-downlink`` the last (spine → destination leaf), where only the controller's re-pin
helps. The link comes back up after the collectives end. The probe flow's path before and after
comes from the controller (GetPaths). The gap and the verdicts:
:mod:`mininet_labs.analysis.failure`.

On BMv2 (``link-failure-p4``, ``mininet_labs/experiments/link_failure_p4.yaml``) P4Runtime has
no port status: the controller learns of the failure from its LLDP liveness probes
(:mod:`controller.runtime.liveness`; ``liveness: {interval, misses}`` become
``--p4-liveness-interval``/``--p4-liveness-misses``: a port is down after ``misses`` silent
intervals), and ``fast_failover: true`` plans fabric.p4's protected pinned hops
(``pin_egress_protected``): the switch itself moves to the backup port once the planned one has
heard no probe for ``misses × interval``. The link is cut by dropping every frame either end
sends (:func:`mininet_labs.lab.p4net.set_link_cut`), not by ``ip link set down``, which stops
BMv2's receive path on every port of the switch; the verdicts are the Open vSwitch lab's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from controller.te.collectives import FlowDemand
from controller.yamlsrc import Document
from mininet_labs.analysis import failure
from mininet_labs.analysis.verdict import Verdict
from mininet_labs.lab.collectives import finish_ring, start_rings
from mininet_labs.lab.interface import ControllerConfig, Lab, RunContext, Variant
from mininet_labs.lab.policies import policy_variant
from mininet_labs.lab.probes import UdpStream
from mininet_labs.lab.processes import process_cpu_s
from mininet_labs.lab.schema import (
    Bmv2LabSpec,
    Experiment,
    FabricExperimentSpec,
    LivenessSpec,
    RingWorkloadSpec,
    Seconds,
    Seed,
    SizeBytes,
    StrictModel,
    check_host,
)
from mininet_labs.lab.switchstate import PathWatch, pinned_flow
from mininet_labs.lab.wait import sleep_until

PROBE_PORT = 9200


class ProbeSpec(StrictModel):
    """The probe: ``src`` → ``dst`` (the hosts of a pinned flow), one packet every
    ``interval`` (≥ 200 µs) with ``payload`` bytes."""

    src: str
    dst: str
    interval: Annotated[Seconds, Field(ge=200e-6, le=1.0)] = 1e-3
    payload: Annotated[SizeBytes, Field(ge=0, le=1400)] = 64


class FlapSpec(StrictModel):
    """The link flaps before it fails: ``times`` × (down ``down``, up ``up``), then down."""

    down: Annotated[Seconds, Field(gt=0, le=60)]
    up: Annotated[Seconds, Field(gt=0, le=60)]
    times: Annotated[int, Field(ge=1, le=100)] = 5


class CaseSpec(StrictModel):
    """One failure: which ``link`` of the probe's path, with ``fast_failover`` or not, its own
    ``max_gap`` (None: the experiment's), and ``flap`` (the link flaps first)."""

    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    link: Literal["source-uplink", "destination-downlink"]
    fast_failover: bool = False
    max_gap: Annotated[Seconds | None, Field(gt=0)] = None
    flap: FlapSpec | None = None


class ExpectSpec(StrictModel):
    """``max_gap``: a case passes when its probe gap is below this (a case may override it)."""

    max_gap: Annotated[Seconds, Field(gt=0)] = 1.0


class Spec(FabricExperimentSpec):
    kind: Literal["link-failure"]
    seed: Seed = 1
    workload: RingWorkloadSpec
    probe: ProbeSpec
    fail_after: Annotated[Seconds, Field(ge=0, le=600)] = 3.0
    cases: Annotated[tuple[CaseSpec, ...], Field(min_length=1)]
    expect: ExpectSpec = ExpectSpec()

    @field_validator("cases")
    @classmethod
    def _unique(cls, v: tuple[CaseSpec, ...]) -> tuple[CaseSpec, ...]:
        names = [c.name for c in v]
        if len(set(names)) != len(names):
            raise ValueError("a case name is used twice")
        return v


class P4Spec(Spec):
    """``openflow_results``: the ``results.json`` of a run of the Open vSwitch lab
    (``link_failure.yaml``), relative to the experiment file: its gaps are printed beside the
    BMv2 ones, case by case (same case names)."""

    kind: Literal["link-failure-p4"] = "link-failure-p4"  # type: ignore[assignment]
    switch: Literal["bmv2"] = "bmv2"
    liveness: LivenessSpec = LivenessSpec()
    openflow_results: str | None = None
    lab: Bmv2LabSpec = Bmv2LabSpec()


@dataclass(frozen=True, kw_only=True)
class FailureExperiment(Experiment):
    """``probe_flow``/``probe_path``: the pinned flow the probe follows and its planned path."""

    probe_flow: FlowDemand
    probe_path: tuple[str, ...]

    def failed_link(self, which: str) -> tuple[str, str]:
        """The link a case takes down: the probe path's first or last fabric hop."""
        p = self.probe_path
        return (p[1], p[2]) if which == "source-uplink" else (p[-3], p[-2])


class LinkFailure(Lab):
    kind = "link-failure"
    spec_model: ClassVar[type[Any]] = Spec
    plot_names = ("gap.png",)

    def prepare(self, doc: Document, exp: Experiment) -> FailureExperiment:
        spec, fabric, policy = exp.spec, exp.fabric, exp.policy
        assert policy is not None
        pinned = policy.model_copy(update={"routing": policy.routing.model_copy(
            update={"mode": "pinned"})})
        for key in ("src", "dst"):
            check_host(doc, fabric, ("probe", key), getattr(spec.probe, key))
        d, p = pinned_flow(doc, fabric, policy, spec.probe.src, spec.probe.dst, ("probe",),
                           str(exp.policy_path))
        return FailureExperiment(**{**vars(exp), "policy": pinned}, probe_flow=d,
                                 probe_path=tuple(p))

    def describe(self, exp: Any) -> str:
        cases = ", ".join(f"{c.name} ({'-'.join(exp.failed_link(c.link))}"
                          f"{', fast failover' if c.fast_failover else ''}"
                          f"{f', {c.flap.times} flaps' if c.flap else ''})"
                          for c in exp.spec.cases)
        on = ""
        if self.network == "bmv2":
            lv = exp.spec.liveness
            dp = lv.dataplane_misses or lv.misses
            on = (f" on BMv2 ({len(exp.fabric.switches)} simple_switch_grpc, LLDP liveness "
                  f"{lv.misses} x {lv.interval * 1e3:g} ms, data plane {dp} x "
                  f"{lv.interval * 1e3:g} ms)")
        return (f"{exp.fabric.name}{on}; probe {exp.probe_flow.label} on "
                f"{' '.join(exp.probe_path)}; cases: {cases}")

    def set_link(self, ctx: RunContext, a: str, b: str, up: bool) -> None:
        """Take the link ``a``–``b`` down (both ends, ``ip link set``) or up again."""
        ctx.net.configLinkStatus(a, b, "up" if up else "down")

    def dataplane_moves(self, ctx: RunContext) -> dict[str, int] | None:
        """Packets the switches on the probe's path moved by themselves so far (None: the
        switches keep no such counters, Open vSwitch)."""
        return None

    @staticmethod
    def dataplane_record(start: dict[str, int] | None, before: dict[str, int] | None,
                         after: dict[str, int] | None) -> dict[str, Any]:
        """What the data plane moved before the failure (a move then was not caused by it: the
        case's gap would not measure the failover) and over the whole case."""
        if start is None or before is None or after is None:
            return {}
        return {"dataplane_moved_before_failure": {k: before[k] - start[k] for k in start
                                                   if before[k] != start[k]},
                "dataplane_moved": {k: after[k] - start[k] for k in start
                                    if after[k] != start[k]}}

    def controller_args(self, exp: Any, case: Any) -> tuple[str, ...]:
        """The controller flags of ``case``."""
        return ("--fast-failover",) if case.fast_failover else ()

    def settle_s(self, exp: Any) -> float:
        """How long after a case restored its link the next case may start (s): 0, an Open
        vSwitch port that comes back is used at once."""
        return 0.0

    #: ``time.time()`` when the last case restored its link (a later case waits :meth:`settle_s`)
    _restored_at: float = 0.0

    def variants(self, exp: Any) -> list[Variant]:
        text = policy_variant(exp.policy_text, mode="pinned", source=str(exp.policy_path))
        south = "p4runtime" if self.network == "bmv2" else "openflow"
        return [Variant(c.name, ControllerConfig(text, self.controller_args(exp, c),
                                                 southbound=south, telemetry=True), runs=(c,))
                for c in exp.spec.cases]

    def run(self, ctx: RunContext, case: Any) -> dict[str, Any]:
        exp, s, fab = ctx.exp, ctx.exp.spec, ctx.exp.fabric
        assert ctx.controller is not None
        ctl = ctx.controller
        a, b = exp.failed_link(case.link)
        flow = (exp.probe_flow.src, exp.probe_flow.dst)
        probe = UdpStream(ctx, s.probe.src, s.probe.dst, PROBE_PORT, ctx.out, "probe")
        link_down = False
        watcher = PathWatch(ctl, flow)
        settled_ms = max(0.0, self._restored_at + self.settle_s(exp) - time.time()) * 1e3
        time.sleep(settled_ms / 1e3)
        cpu0 = process_cpu_s(ctl.popen.pid)
        dp_start = self.dataplane_moves(ctx)
        flaps: list[tuple[float, bool]] = []
        try:
            probe.start_receiver()
            rings, t_data = start_rings(ctx, exp.policy.collectives, seed=s.seed,
                                        nbytes=s.workload.bytes,
                                        chunk_bytes=s.workload.chunk_bytes,
                                        timeout_s=s.workload.timeout_s)
            t_cpu = time.time()
            probe.start_sender(s.probe.interval * 1e6, s.probe.payload, s.workload.timeout_s)
            before = ctl.paths().get(flow)
            sleep_until(t_data + s.fail_after - 0.5)
            dp_before = self.dataplane_moves(ctx)
            sleep_until(t_data + s.fail_after)
            watcher.start()
            t_fail = time.time()
            self.set_link(ctx, a, b, False)
            link_down = True
            t_fail_done = time.time()
            if case.flap is not None:  # up and down again, `times` times, then down for good
                flaps.append((t_fail, False))
                for _ in range(case.flap.times):
                    time.sleep(case.flap.down)
                    self.set_link(ctx, a, b, True)
                    flaps.append((time.time(), True))
                    time.sleep(case.flap.up)
                    self.set_link(ctx, a, b, False)
                    flaps.append((time.time(), False))
            results = [finish_ring(ctx, ring, s.workload.timeout_s) for ring in rings]
            t_end = time.time()
            cpu1 = process_cpu_s(ctl.popen.pid)
            dp_after = self.dataplane_moves(ctx)
            watcher.stop()
            after = ctl.paths().get(flow)
            got = probe.finish()
        finally:
            watcher.stop()
            probe.stop()
            if link_down:
                self.set_link(ctx, a, b, True)
                self._restored_at = time.time()
        text = ctl.log_path.read_text(errors="replace")
        limit = case.max_gap if case.max_gap is not None else s.expect.max_gap
        rec = failure.failure_record(got["sent"], got["recv"], t_fail, t_fail_done, limit)
        rec["probe"].update({"flow": exp.probe_flow.label, "path": list(exp.probe_path)})

        def out_port(hops: tuple[str, ...] | None) -> int | None:
            return fab.port_towards(hops[1], hops[2]) if hops else None

        liveness_lines = [ln for ln in text.splitlines() if "by LLDP liveness" in ln]
        fabric_links = sum(1 for ln in fab.links
                           if ln.a in fab.switch_by_name and ln.b in fab.switch_by_name)
        cpu = (None if cpu0 is None or cpu1 is None or t_end <= t_cpu
               else failure.controller_cpu(cpu1 - cpu0, t_end - t_cpu, fabric_links))
        return {"case": case.name, "link": [a, b], "link_role": case.link,
                "fast_failover": case.fast_failover, **rec,
                "failure_at_s": round(t_fail - t_data, 3),
                "failure_command_ms": round((t_fail_done - t_fail) * 1e3, 1),
                "waited_for_hold_down_ms": round(settled_ms, 1),
                "probe_path_before": list(before or ()), "probe_path_after": list(after or ()),
                "probe_output_before": out_port(before), "probe_output_after": out_port(after),
                "probe_paths_seen": [list(p) for p in watcher.changes()],
                "flaps": [[round(t - t_fail, 3), up] for t, up in flaps],
                "controller_cpu": cpu,
                **self.dataplane_record(dp_start, dp_before, dp_after),
                "controller_port_events": [ln for ln in text.splitlines() if " down: " in ln],
                "controller_liveness_events": liveness_lines,
                "controller_ups": sum(1 for ln in liveness_lines if " up by LLDP" in ln),
                "controller_updates": [ln for ln in text.splitlines() if "] sent " in ln],
                "collectives": results}

    def verdicts(self, exp: Any, records: list[dict[str, Any]],
                 summary: dict[str, Any]) -> list[Verdict]:
        correct = [x["correct"] for c in records for x in c["collectives"]]
        flapped = [c for c in records if c.get("flaps")]
        extra = [Verdict(
            "paths_do_not_flap",
            all(len(c["probe_paths_seen"]) <= 2 and c["controller_ups"] == 0 for c in flapped),
            "; ".join(f"{c['case']}: {len(c['flaps']) // 2} flaps, the controller's path of the "
                      f"probe flow changed {max(0, len(c['probe_paths_seen']) - 1)} time(s), "
                      f"{c['controller_ups']} port(s) back up" for c in flapped),
            timing_sensitive=True)] if flapped else []
        dp = [c for c in records if "dataplane_moved_before_failure" in c]
        if dp:
            extra.append(Verdict(
                "dataplane_quiet_before_failure",
                all(not c["dataplane_moved_before_failure"] for c in dp),
                "; ".join(f"{c['case']}: " + (", ".join(
                    f"{k} +{v}" for k, v in c["dataplane_moved_before_failure"].items())
                    or "nothing moved") for c in dp) + " (from the case's start to 0.5 s before "
                "the failure: a move then is a false failover, and the gap would not measure "
                "one)",
                timing_sensitive=True))
        return [*extra,
            Verdict("all_correct", bool(correct) and all(correct),
                    f"{sum(correct)} of {len(correct)} collectives correct"),
            Verdict("probe_intact", all(c["probe"]["corrupt"] == 0 and c["probe"]["duplicates"] == 0
                                        for c in records),
                    "no corrupt or duplicated probe packet"),
            Verdict("gaps_within_bound", all(c["gap_within_bound"] for c in records),
                    ", ".join(f"{c['case']} {c['gap_ms']:.1f} ms (bound "
                              f"{c['max_gap_ms_allowed']:.0f} ms)" for c in records),
                    timing_sensitive=True),
            Verdict("repinned_off_failed_link",
                    all(c["probe_path_after"] and not any(
                        {u, v} == set(c["link"]) for u, v in zip(
                            c["probe_path_after"], c["probe_path_after"][1:], strict=False))
                        for c in records),
                    "the controller's path of the probe flow avoids the failed link after it")]

    def summarize(self, exp: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
        compare = None
        ref = getattr(exp.spec, "openflow_results", None)
        if ref:
            compare = failure.openflow_reference(Path(exp.path).parent / ref)
        return {"gaps_ms": {c["case"]: c["gap_ms"] for c in records},
                **({"openflow": compare} if compare is not None else {}),
                "controller_cpu": {c["case"]: c.get("controller_cpu") for c in records},
                "units": {"gap_ms": "ms, from the probe's send timestamps (resolution: one "
                                    "interval)",
                          "failure_at_s": "s after the collectives' data started",
                          "resumed_after_failure_ms": "ms from the link-down command to the send "
                                                      "time of the first probe packet delivered "
                                                      "after it"},
                "failure_emulation": self.failure_emulation}

    def report(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any]
               ) -> list[Any]:
        out: list[Any] = [failure.table(records, summary.get("openflow"))]
        out += [failure.cpu_line(c["case"], c["controller_cpu"]) for c in records
                if c.get("controller_cpu")]
        return out

    def plots(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any],
              out: Path) -> list[Path]:
        path = out / "gap.png"
        failure.plot(records, path, f"{exp.spec.name}: probe {exp.probe_flow.label}, "
                                    f"{exp.spec.probe.interval * 1e3:g} ms interval")
        return [path]


    failure_emulation = ("ip link set down on both ends of the link (carrier loss seen by Open "
                         "vSwitch); no sch_netem on this kernel, so no delay or loss model")


class LinkFailureP4(LinkFailure):
    """The BMv2 twin (module docstring)."""

    kind = "link-failure-p4"
    spec_model = P4Spec
    network = "bmv2"
    failure_emulation = ("every frame either end sends is dropped (both pfifos of the link's tc "
                         "classes at limit 0; the interfaces stay up: an interface set down stops "
                         "BMv2's receive path on all its ports); LLDP probes stop both ways and "
                         "P4Runtime has no port status; no sch_netem on this kernel")

    def controller_args(self, exp: Any, case: Any) -> tuple[str, ...]:
        return (*super().controller_args(exp, case), *exp.spec.liveness.args())

    def settle_s(self, exp: Any) -> float:
        """The liveness hold-down and one data-plane window: the switches keep their registers
        from case to case (each case's controller reconciles entries, the pipeline and its
        state stay), and a protected hop whose port came back less than ``hold`` ago still
        takes its backup. Without this wait the uplink-flap case, started 8 s after
        uplink-repin restored the same link, sent 2,617 packets over the backup before its
        failure and measured a gap of 0 ms (load 1.7-3.3)."""
        lv = exp.spec.liveness
        hold = lv.hold if lv.hold is not None else 10.0  # the controller's default hold_s
        return hold + (lv.dataplane_misses or lv.misses) * lv.interval

    def set_link(self, ctx: RunContext, a: str, b: str, up: bool) -> None:
        from mininet_labs.lab.p4net import set_link_cut

        set_link_cut(ctx.net, a, b, not up, ctx.exp.spec.lab.queue_packets)

    def dataplane_moves(self, ctx: RunContext) -> dict[str, int] | None:
        """fabric.p4's ``failover_used`` and ``bounced`` at each hop of the probe's planned
        path, for its planned port (Thrift: the controller does not read them), as
        ``{"<switch> failover_used[<port>]": packets, ...}``."""
        from mininet_labs.lab.p4net import counter_reads

        fab, path = ctx.exp.fabric, ctx.exp.probe_path
        out: dict[str, int] = {}
        for here, nxt in zip(path[1:-2], path[2:-1], strict=True):
            port = fab.port_towards(here, nxt)
            cells = [(f"FabricIngress.{c}", port) for c in ("failover_used", "bounced")]
            for (name, i), v in counter_reads(ctx.net.get(here), cells).items():
                out[f"{here} {name.rsplit('.', 1)[1]}[{i}]"] = v
        return out


LAB = LinkFailure()
BMV2 = LinkFailureP4()
