"""Lab ``kind: link-failure``: a fabric link on a pinned path goes down mid-collective; how long
is traffic lost, and is every result still correct?

Example (``mininet_labs/experiments/link_failure.yaml``)::

    kind: link-failure
    name: link-failure
    topology: ../topologies/leafspine_2x4x2.yaml
    policy: ../../policies/pinned_two_rings.yaml
    workload: {kind: ring-allreduce, bytes: 12MB}   # every collective of the policy runs
    probe: {src: h1, dst: h3, interval: 1ms, payload: 64B}
    fail_after: 3s                                  # after the collectives' data started
    cases:
      - {name: uplink-fast-failover, link: source-uplink, fast_failover: true}
      - {name: uplink-repin, link: source-uplink, fast_failover: false}
      - {name: downlink-repin, link: destination-downlink, fast_failover: true}
    expect: {max_gap: 1s}

Per case: a fresh controller (``--fast-failover`` when the case asks), all pairs reachable; every
collective starts; a UDP **probe** (:mod:`mininet_labs.workloads.udp_probe`: sequence number and
send timestamp in every packet) runs from ``probe.src`` to ``probe.dst``, hosts of a pinned flow,
so it matches that flow's pinned entries and follows its path. ``fail_after`` after the data
starts, one link of that path goes down (both ends, ``ip link set down``, which Open vSwitch sees
as carrier loss; this kernel has no ``sch_netem``, so no delay is emulated and failures are
link-down events): ``source-uplink`` is the first fabric hop (source leaf → spine), where a
fast-failover group has a backup uplink; ``destination-downlink`` is the last (spine →
destination leaf), where a spine has no other way down and only the controller's re-pin on
port-status helps. The link comes back up after the collectives end.

Measured: the probe's **gap** — for the run of lost sequence numbers whose send times span the
link-down command, the send time of the first packet delivered after it minus that of the last
delivered before it, minus one interval (ms; resolution one probe interval); for reference the
longest other outage (``max_congestion_gap_ms``: the probe shares its path with a ring flow
that fills the link and its queue, so it also loses packets to congestion); when traffic resumed
after the failure command; the pinned output on the source leaf after the failure; and the
collectives' CCT and correctness (every rank verifies its sum; all must be correct).
Written to ``OUT``: ``results.json``, ``gap.png``, ``controller-<case>.log``, ``policy.yaml`` and
per case the rank and probe files.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from rich.console import Console

from controller.errors import ConfigError
from controller.model.topology import Fabric, load_topology
from controller.policy import Policy
from controller.qos.validate import load_valid_policy as load_policy
from controller.te.collectives import FlowDemand
from controller.yamlsrc import load_document, validate
from mininet_labs.lab.adaptive_reroute import (
    Seconds,
    Strict,
    controller_args,
    environment,
    host_problem,
    pinned_output,
    pinned_paths,
    policy_text,
    port_dev,
    resolve_file,
    ring_result,
    size_bytes,
    start_mode_controller,
    start_ring,
    stop_process,
    udp_command,
    wait_for_data,
    wait_ranks,
)
from mininet_labs.lab.experiment import LabSpec, WorkloadSpec
from mininet_labs.lab.processes import start_in_host
from mininet_labs.lab.runner import LabAborted, Results, lab_network, requirements_missing
from mininet_labs.workloads.udp_probe import analyse

PROBE_PORT = 9200
DATA_STARTED_BYTES = 256 * 1024

__all__ = ["LabAborted", "describe", "load_experiment", "run_experiment"]


class ProbeSpec(Strict):
    """The probe: ``src`` → ``dst`` (the hosts of a pinned flow), one packet every
    ``interval`` (≥ 200 µs) with ``payload`` bytes."""

    src: str
    dst: str
    interval: Annotated[Seconds, Field(ge=200e-6, le=1.0)] = 1e-3
    payload: Annotated[int, Field(ge=0, le=1400)] = 64

    @field_validator("payload", mode="before")
    @classmethod
    def _size(cls, v: Any) -> int:
        return size_bytes(v)


class CaseSpec(Strict):
    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    link: Literal["source-uplink", "destination-downlink"]
    fast_failover: bool = False
    max_gap: Annotated[Seconds | None, Field(gt=0)] = None


class ExpectSpec(Strict):
    """``max_gap``: a case passes when its probe gap is below this (a case may override it)."""

    max_gap: Annotated[Seconds, Field(gt=0)] = 1.0


class FailureSpec(Strict):
    kind: Literal["link-failure"]
    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    description: str = ""
    topology: Annotated[str, Field(min_length=1)]
    policy: Annotated[str, Field(min_length=1)]
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 1
    workload: WorkloadSpec
    probe: ProbeSpec
    fail_after: Annotated[Seconds, Field(ge=0, le=600)] = 3.0
    cases: Annotated[tuple[CaseSpec, ...], Field(min_length=1)]
    expect: ExpectSpec = ExpectSpec()
    lab: LabSpec = LabSpec()

    @field_validator("cases")
    @classmethod
    def _unique(cls, v: tuple[CaseSpec, ...]) -> tuple[CaseSpec, ...]:
        names = [c.name for c in v]
        if len(set(names)) != len(names):
            raise ValueError("a case name is used twice")
        return v


@dataclass(frozen=True)
class Experiment:
    """A validated link-failure experiment; ``probe_flow``/``probe_path``: the pinned flow the
    probe follows and its path in the controller's initial plan."""

    spec: FailureSpec
    path: Path
    topology_path: Path
    policy_path: Path
    fabric: Fabric
    policy: Policy
    probe_flow: FlowDemand
    probe_path: tuple[str, ...]

    def failed_link(self, which: str) -> tuple[str, str]:
        """The link a case takes down: the probe path's first or last fabric hop."""
        p = self.probe_path
        return (p[1], p[2]) if which == "source-uplink" else (p[-3], p[-2])


def load_experiment(path: str | Path) -> Experiment:
    """Validate the file, its topology and policy, and that the probe follows a pinned flow that
    crosses the spine layer. Raises ConfigError (``FILE:LINE:COL: field: message``)."""
    doc = load_document(path)
    spec = validate(FailureSpec, doc)
    topo = resolve_file(doc, "topology", spec.topology)
    pol = resolve_file(doc, "policy", spec.policy)
    fabric = load_topology(topo)
    policy = load_policy(pol, fabric)
    pinned = policy.model_copy(update={"routing": policy.routing.model_copy(
        update={"mode": "pinned"})})
    for key in ("src", "dst"):
        host_problem(doc, fabric, ("probe", key), getattr(spec.probe, key))
    paths = pinned_paths(fabric, pinned)
    hit = [(d, p) for d, p in paths.items()
           if d.src == spec.probe.src and d.dst == spec.probe.dst and d.ip_proto is None
           and d.dscp is None]
    if not hit:
        raise ConfigError([doc.problem(("probe",), f"no pinned flow {spec.probe.src}->"
                                       f"{spec.probe.dst} without DSCP/L4 match in {pol}: the "
                                       "probe would not follow a pinned path")])
    d, p = hit[0]
    if len(p) < 5:
        raise ConfigError([doc.problem(("probe",), f"{d.label} stays on one leaf "
                                       f"({' '.join(p)}): no fabric link to fail")])
    return Experiment(spec, Path(doc.file), topo, pol, fabric, pinned, d, p)


def describe(exp: Experiment) -> str:
    cases = ", ".join(f"{c.name} ({'-'.join(exp.failed_link(c.link))}"
                      f"{', fast failover' if c.fast_failover else ''})" for c in exp.spec.cases)
    return (f"ok ({exp.fabric.name}; probe {exp.probe_flow.label} on "
            f"{' '.join(exp.probe_path)}; cases: {cases})")


def failure_outage(report: dict[str, Any], t_fail: float, t_done: float
                   ) -> dict[str, Any] | None:
    """The probe outage the failure caused: the run of lost packets whose send-time interval
    (last delivered before, first delivered after) overlaps the link-down command
    [``t_fail``, ``t_done``] (s since the epoch); None when no packet sent then was lost. Other
    outages are ordinary congestion drops (the probe shares its path with a ring flow that
    fills the link and its 20-packet queue)."""
    hit = [o for o in report["outages"]
           if o["start_send_s"] <= t_done and o["end_send_s"] >= t_fail]
    return max(hit, key=lambda o: o["gap_ms"], default=None)


def run_case(exp: Experiment, mininet: Any, case: Any, policy_file: Path, out: Path
             ) -> dict[str, Any]:
    s, fab = exp.spec, exp.fabric
    a, b = exp.failed_link(case.link)
    extra = controller_args(None, None, fast_failover=case.fast_failover)
    log = out / f"controller-{case.name}.log"
    ctl = start_mode_controller(exp.topology_path, policy_file, mininet, fab, log, s.lab, extra)
    hosts = {h.name: h for h in mininet.hosts}
    cdir = out / case.name
    cdir.mkdir(parents=True, exist_ok=True)
    src, dst = fab.host_by_name[s.probe.src], fab.host_by_name[s.probe.dst]
    sender = receiver = None
    link_down = False
    rings: list[tuple[Any, list[Any], list[int], int]] = []
    try:
        receiver = start_in_host(hosts[dst.name], udp_command(
            "recv", "--port", str(PROBE_PORT), "--out", str(cdir / "probe_recv.json")),
            cdir / "probe_recv.log")
        for ci, coll in enumerate(exp.policy.collectives):
            procs, sports, dport = start_ring(coll, ci, fab, hosts, s.workload.bytes,
                                              s.workload.chunk_bytes, s.seed, cdir / coll.name)
            rings.append((coll, procs, sports, dport))
        devs = [port_dev(h.leaf, fab.port_towards(h.leaf, h.name)) for h in fab.hosts
                if any(h.name in c.ranks for c in exp.policy.collectives)]
        t_data = wait_for_data(devs, DATA_STARTED_BYTES, s.workload.timeout_s)
        sender = start_in_host(hosts[src.name], udp_command(
            "send", "--dst", dst.ipv4, "--port", str(PROBE_PORT), "--interval-us",
            f"{s.probe.interval * 1e6:.1f}", "--payload-bytes", str(s.probe.payload),
            "--duration-s", f"{s.workload.timeout_s:g}", "--out", str(cdir / "probe_send.json")),
            cdir / "probe_send.log")
        before = pinned_output(exp.probe_path[1], src.ipv4, dst.ipv4)
        time.sleep(max(0.0, t_data + s.fail_after - time.time()))
        t_fail = time.time()
        mininet.configLinkStatus(a, b, "down")
        link_down = True
        t_fail_done = time.time()
        results = []
        for coll, procs, sports, dport in rings:
            errs = wait_ranks(procs, s.workload.timeout_s)
            results.append(ring_result(coll, fab, procs, s.workload.bytes, sports, dport, errs))
        after = pinned_output(exp.probe_path[1], src.ipv4, dst.ipv4)
        stop_process(sender)
        sender = None
        time.sleep(0.3)  # packets in flight
        stop_process(receiver)
        receiver = None
    finally:
        for p in (sender, receiver):
            if p is not None:
                stop_process(p)
        if link_down:
            mininet.configLinkStatus(a, b, "up")
        rc = ctl.stop()
    sent = json.loads((cdir / "probe_send.json").read_text())
    recv = json.loads((cdir / "probe_recv.json").read_text())
    rep = analyse(recv["records"], sent["sent"], sent["interval_us"])
    outage = failure_outage(rep, t_fail, t_fail_done)
    seqs = [r[1] / 1e9 for r in recv["records"]]
    resumed = min((t for t in seqs if t > t_fail + (outage["gap_ms"] / 1e3 if outage else 0)),
                  default=None)
    text = log.read_text(errors="replace")
    limit = case.max_gap if case.max_gap is not None else s.expect.max_gap
    gap_ms = outage["gap_ms"] if outage else 0.0
    return {
        "case": case.name, "link": [a, b], "link_role": case.link,
        "fast_failover": case.fast_failover, "controller_args": extra, "controller_exit": rc,
        "probe": {"flow": exp.probe_flow.label, "path": list(exp.probe_path),
                  "interval_us": sent["interval_us"], "payload_bytes": sent["payload_bytes"],
                  "sent": rep["sent"], "received": rep["received"], "lost": rep["lost"],
                  "lost_to_congestion": rep["lost"] - rep["tail_lost"]
                  - (outage["lost"] if outage else 0),
                  "tail_lost": rep["tail_lost"], "duplicates": rep["duplicates"],
                  "reordered": rep["reordered"], "corrupt": recv["corrupt"],
                  "send_errors": sent["send_errors"], "outages": rep["outages"][:20],
                  "one_way_delay_ms": rep["one_way_delay_ms"]},
        "failure_at_s": round(t_fail - t_data, 3),
        "failure_command_ms": round((t_fail_done - t_fail) * 1e3, 1),
        "gap_ms": gap_ms,
        "gap_lost_packets": outage["lost"] if outage else 0,
        "max_congestion_gap_ms": max((o["gap_ms"] for o in rep["outages"] if o is not outage),
                                     default=0.0),
        "resumed_after_failure_ms": None if resumed is None else round((resumed - t_fail) * 1e3, 1),
        "max_gap_ms_allowed": limit * 1e3,
        "gap_within_bound": gap_ms < limit * 1e3 and resumed is not None,
        "probe_output_before": before, "probe_output_after": after,
        "controller_port_events": [ln for ln in text.splitlines() if " down: " in ln],
        "controller_updates": [ln for ln in text.splitlines() if "] sent " in ln],
        "collectives": results,
    }


def table(cases: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    t = Table(title="link failure mid-collective: probe gap and collective results")
    for col in ("case", "link down", "fast failover", "gap ms", "lost", "resumed ms",
                "bound ms", "congestion gap ms", "CCT s (per collective)", "correct"):
        t.add_column(col, justify="left" if col in ("case", "link down") else "right")
    for c in cases:
        ok = all(x["correct"] for x in c["collectives"])
        t.add_row(c["case"], "-".join(c["link"]), "yes" if c["fast_failover"] else "no",
                  f"{c['gap_ms']:.1f}", str(c["gap_lost_packets"]),
                  "-" if c["resumed_after_failure_ms"] is None
                  else f"{c['resumed_after_failure_ms']:.1f}",
                  f"{c['max_gap_ms_allowed']:.0f}", f"{c['max_congestion_gap_ms']:.1f}",
                  " ".join("-" if x["cct_s"] is None else f"{x['cct_s']:.2f}"
                           for x in c["collectives"]),
                  "yes" if ok else "[red]NO[/]")
    return t


def plot(cases: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = [c["case"] for c in cases]
    ax.bar(names, [c["gap_ms"] for c in cases],
           color=["tab:green" if c["fast_failover"] and c["link_role"] == "source-uplink"
                  else "tab:orange" for c in cases])
    for i, c in enumerate(cases):
        ax.text(i, c["gap_ms"], f"{c['gap_ms']:.1f} ms\n({c['gap_lost_packets']} lost)",
                ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("probe gap at the failure, ms")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_experiment(path: str | Path, out_dir: str | Path,
                   console: Console | None = None) -> Results:
    """Run every case; write ``OUT/results.json`` and ``OUT/gap.png``. ``ok`` when every
    collective was correct, the probe saw no corrupt or duplicated packet, and every gap was
    within its bound.

    Raises
    ------
    ConfigError
        Invalid experiment; nothing was started.
    RuntimeError
        The lab cannot run here or a step failed; the network is torn down first.
    """
    console = console or Console()
    t_start = time.monotonic()
    exp = load_experiment(path)
    missing = requirements_missing()
    if missing:
        raise RuntimeError("cannot run a Mininet lab here: " + "; ".join(missing))
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    policy_file = out / "policy.yaml"
    policy_file.write_text(policy_text(exp.policy_path, None))
    load_policy(policy_file, exp.fabric)
    cases: list[dict[str, Any]] = []
    timings: dict[str, Any] = {}
    env = environment()
    with lab_network(exp.fabric, exp.spec.lab, console, timings) as net:
        for case in exp.spec.cases:
            with console.status(f"[{case.name}] {'-'.join(exp.failed_link(case.link))} "
                                "goes down mid-collective"):
                t = time.monotonic()
                cases.append(run_case(exp, net.mininet, case, policy_file, out))
                timings[f"{case.name}_s"] = round(time.monotonic() - t, 2)
    removed = net.removed
    timings["total_s"] = round(time.monotonic() - t_start, 2)
    v = {
        "all_correct": all(x["correct"] for c in cases for x in c["collectives"]),
        "probe_intact": all(c["probe"]["corrupt"] == 0 and c["probe"]["duplicates"] == 0
                            for c in cases),
        "gaps_within_bound": all(c["gap_within_bound"] for c in cases),
        "gaps_ms": {c["case"]: c["gap_ms"] for c in cases},
    }
    s = exp.spec
    data = {
        "experiment": {"kind": s.kind, "name": s.name, "file": str(exp.path),
                       "topology": str(exp.topology_path), "policy": str(exp.policy_path),
                       "seed": s.seed, "workload": s.workload.model_dump(),
                       "probe": s.probe.model_dump(), "fail_after_s": s.fail_after,
                       "cases": [c.model_dump() for c in s.cases],
                       "expect": s.expect.model_dump(), "lab": s.lab.model_dump()},
        "topology": {"name": exp.fabric.name, "kind": exp.fabric.kind,
                     "switches": len(exp.fabric.switches), "hosts": len(exp.fabric.hosts)},
        "units": {"gap_ms": "ms, from the probe's send timestamps (resolution: one interval)",
                  "failure_at_s": "s after the collectives' data started",
                  "resumed_after_failure_ms": "ms from the link-down command to the send time "
                                              "of the first probe packet delivered after it"},
        "failure_emulation": "ip link set down on both ends of the link (carrier loss seen by "
                             "Open vSwitch); no sch_netem on this kernel, so no delay or loss "
                             "model",
        "cases": cases, "verdicts": v, "environment": env, "timings": timings,
        "teardown_removed": removed,
    }
    results_path, plot_path = out / "results.json", out / "gap.png"
    results_path.write_text(json.dumps(data, indent=1))
    plot(cases, plot_path, f"{s.name}: probe {exp.probe_flow.label}, "
                           f"{s.probe.interval * 1e3:g} ms interval")
    console.print(table(cases))
    for k, val in v.items():
        console.print(f"{k}: {val}", markup=False)
    res = Results(data, out, results_path, plot_path)
    res.ok = bool(v["all_correct"] and v["probe_intact"] and v["gaps_within_bound"])
    return res
