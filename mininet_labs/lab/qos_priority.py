"""The ``qos-priority`` experiment: a collective and a bulk transfer share a bottleneck, run once
with plain FIFO queues and once with the policy's traffic classes applied by the controller.

Example (``mininet_labs/experiments/qos_priority.yaml``)::

    kind: qos-priority
    name: qos-priority
    topology: ../topologies/leafspine_1x2x2.yaml
    policy: ../../policies/qos_lab_priority.yaml   # collectives + traffic_classes (+ buffers)
    collective: grads                              # default: the policy's only collective
    bulk: {src: h2, dst: h4, dscp: 8, connections: 4}
    workload: {kind: ring-allreduce, bytes: 6MB}
    repeats: 2
    tolerance: 0.10                                # |share - configured| <= 10 % of configured

Each repeat of each variant: the bulk transfer starts (``connections`` TCP connections marked
``dscp``), runs ``bulk_lead_s`` alone, then the collective runs once (its data marked with the
collective's DSCP) and the bulk transfer stops. Measured over the collective's run, from the
endpoints' own wall-clock timestamps:

* the collective's rate across the bottleneck = (ring flows crossing it) × 2(n−1)/n × bytes × 8 /
  CCT (each ring flow carries 2(n−1)/n of the buffer; nccl-tests PERFORMANCE.md);
* the bulk rate = bytes the bulk receiver got inside the same window;
* the collective's share = collective / (collective + bulk).

And at the switches, from port counters sampled every 0.2 s and interpolated to the same window:
the bytes delivered to the collective's destinations and to the bulk destination on their
access ports, whose ratio is the collective's share of what crossed the bottleneck (the verdict
uses it), and the bottleneck port's transmitted rate. Ingress counters would count packets the
bottleneck later drops, and OpenFlow flow counters are folded in by the userspace datapath only
every few hundred ms, so neither is used.

Variants: ``fifo`` runs the policy without its QoS sections (``aifabric controller`` without
``--apply-qos``; the port keeps the lab's HTB shaper and one FIFO); ``qos`` runs the policy as
given with ``--apply-qos`` (OVSDB linux-htb queues and tc u32 DSCP filters). The configured
share of the collective is its class's DWRR weight / (its weight + the bulk class's weight), or
1.0 when the collective's class is strict priority. With ``qos`` the HTB class byte counters of
the bottleneck port are recorded too, as an independent check of the endpoint numbers.

ECN marking is not exercised here: Open vSwitch's linux-htb queues do not mark, and the results
record which kernel features (sch_red, DCTCP) this machine lacks.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import networkx as nx
from pydantic import Field
from rich.console import Console
from rich.table import Table

from controller.errors import ConfigError
from controller.model.topology import Fabric, load_topology
from controller.policy import Collective, Policy
from controller.policy.model import TrafficClass
from controller.qos.validate import load_valid_policy as load_policy
from controller.yamlsrc import Document, load_document, validate
from mininet_labs.lab import net as labnet
from mininet_labs.lab.environment import probe_kernel_features, versions
from mininet_labs.lab.experiment import (
    MAX_LAB_HOSTS,
    MAX_LAB_SWITCHES,
    ExperimentName,
    LabSpec,
    StrictModel,
    WorkloadSpec,
    resolve_file,
)
from mininet_labs.lab.processes import (
    ControllerProcess,
    free_port,
    rank_command,
    start_controller,
    start_in_host,
    stop_process,
)
from mininet_labs.lab.results import parse_dump_ports
from mininet_labs.lab.runner import LabAborted, Results, requirements_missing, sigterm_raises
from mininet_labs.workloads.bulk import rate_in_window_bps
from mininet_labs.workloads.ring_allreduce import busbw_factor, source_port, summarize

__all__ = ["LabAborted", "describe", "load_experiment", "run_experiment"]

QOS_SECTIONS = ("traffic_classes", "pfc", "ecn", "buffers", "shaping")
VARIANTS = ("fifo", "qos")
RING_DST_PORT = 29500


class BulkSpec(StrictModel):
    """The competing transfer: ``src`` → ``dst`` host, DSCP, parallel TCP connections."""

    src: str
    dst: str
    dscp: Annotated[int, Field(ge=0, le=63, strict=True)] = 8
    connections: Annotated[int, Field(ge=1, le=16, strict=True)] = 4
    port: Annotated[int, Field(ge=1024, le=65535, strict=True)] = 5201


class QosExperimentSpec(StrictModel):
    kind: Literal["qos-priority"]
    name: ExperimentName
    description: str = ""
    topology: Annotated[str, Field(min_length=1)]
    policy: Annotated[str, Field(min_length=1)]
    collective: str | None = None
    bulk: BulkSpec
    workload: WorkloadSpec
    repeats: Annotated[int, Field(ge=1, le=10, strict=True)] = 2
    bulk_lead_s: Annotated[float, Field(ge=0.5, le=30)] = 2.0
    tolerance: Annotated[float, Field(gt=0, lt=1)] = 0.10
    lab: LabSpec = LabSpec()


@dataclass(frozen=True)
class QosExperiment:
    """A validated qos-priority experiment with everything it refers to loaded and checked."""

    spec: QosExperimentSpec
    path: Path
    topology_path: Path
    policy_path: Path
    fabric: Fabric
    policy: Policy
    collective: Collective
    collective_class: TrafficClass
    bulk_class: TrafficClass
    bottleneck: tuple[str, str]
    flows_on_bottleneck: int
    bottleneck_pairs: frozenset[tuple[str, str]]
    configured_share: float
    extra: dict[str, Any] = field(default_factory=dict)



def class_of(policy: Policy, dscp: int) -> TrafficClass | None:
    """The traffic class DSCP ``dscp`` falls in: the class listing it, else the queue-0 class
    (where Open vSwitch puts unlisted values), else None."""
    for tc in policy.traffic_classes:
        if dscp in tc.dscp:
            return tc
    return next((tc for tc in policy.traffic_classes if tc.queue == 0), None)


def configured_share(coll: TrafficClass, bulk: TrafficClass) -> float:
    """The collective's configured share of a port both classes keep busy: 1.0 for a strict
    collective class, else its DWRR weight over the sum of both weights."""
    if coll.scheduling == "strict":
        return 1.0
    if bulk.scheduling == "strict":
        return 0.0
    return (coll.weight or 0) / ((coll.weight or 0) + (bulk.weight or 0))


def _directed_links(path: list[str]) -> set[tuple[str, str]]:
    return set(zip(path, path[1:], strict=False))


def experiment_from_document(doc: Document) -> QosExperiment:
    """Validate and cross-check (raises ConfigError, every problem located)."""
    from controller.plan.build import build_plan

    spec = validate(QosExperimentSpec, doc)
    base = Path(doc.file).resolve().parent
    topo_path = resolve_file(doc, base, "topology", spec.topology)
    pol_path = resolve_file(doc, base, "policy", spec.policy)
    fabric = load_topology(topo_path)
    if len(fabric.switches) > MAX_LAB_SWITCHES or len(fabric.hosts) > MAX_LAB_HOSTS:
        raise ConfigError([doc.problem(("topology",), f"{fabric.name} is too large for a lab "
                                                      f"({MAX_LAB_SWITCHES} switches, "
                                                      f"{MAX_LAB_HOSTS} hosts at most)")])
    policy = load_policy(pol_path, fabric)
    problems = []
    if not policy.traffic_classes:
        problems.append(doc.problem(("policy",), f"{pol_path} has no traffic_classes to apply"))
    names = [c.name for c in policy.collectives]
    cname = spec.collective or (names[0] if len(names) == 1 else None)
    coll = next((c for c in policy.collectives if c.name == cname), None)
    if coll is None:
        problems.append(doc.problem(("collective",) if spec.collective else ("policy",),
                                    f"name one of the policy's collectives ({', '.join(names)})"
                                    if names else f"{pol_path} declares no collectives"))
    for key in ("src", "dst"):
        h = getattr(spec.bulk, key)
        if h not in fabric.host_by_name:
            problems.append(doc.problem(("bulk", key), f"no host {h!r} in {fabric.name}"))
    if problems:
        raise ConfigError(problems)
    assert coll is not None
    if spec.bulk.src in coll.ranks or spec.bulk.dst in coll.ranks:
        raise ConfigError([doc.problem(("bulk",), "the bulk hosts must not be ranks of "
                                                  f"{coll.name} (one workload per host)")])
    if coll.dscp is None:
        raise ConfigError([doc.problem(("policy",), f"collective {coll.name} has no dscp; the "
                                                    "lab marks its data with it")])
    cclass = class_of(policy, coll.dscp)
    bclass = class_of(policy, spec.bulk.dscp)
    if cclass is None or bclass is None or cclass.name == bclass.name:
        raise ConfigError([doc.problem(("bulk", "dscp"), (
            f"DSCP {spec.bulk.dscp} must fall in a different traffic class from the "
            f"collective's DSCP {coll.dscp} ({cclass.name if cclass else 'no class'})"))])
    result = build_plan(fabric, policy)
    if result.pinning is None:
        raise ConfigError([doc.problem(("policy",), "routing.mode must be pinned: the lab "
                                                    "needs to know the collective's paths")])
    coll_links: dict[tuple[str, str], int] = {}
    pairs_on: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for demand, path in result.pinning.paths.items():
        if demand.collective == coll.name:
            for ln in _directed_links(list(path)):
                coll_links[ln] = coll_links.get(ln, 0) + 1
                pairs_on.setdefault(ln, set()).add((demand.src, demand.dst))
    g = fabric.graph()
    bulk_paths = [_directed_links(p) for p in nx.all_shortest_paths(g, spec.bulk.src,
                                                                    spec.bulk.dst)]
    shared = set.intersection(*bulk_paths) & set(coll_links)
    shared = {ln for ln in shared if not (fabric.is_host(ln[0]) or fabric.is_host(ln[1]))}
    if not shared:
        raise ConfigError([doc.problem(("bulk",), (
            f"{spec.bulk.src} -> {spec.bulk.dst} does not cross a fabric link that "
            f"{coll.name}'s pinned flows use on every path; there is no shared bottleneck"))])
    bottleneck = min(shared)
    return QosExperiment(spec, Path(doc.file), topo_path, pol_path, fabric, policy, coll,
                         cclass, bclass, bottleneck, coll_links[bottleneck],
                         frozenset(pairs_on[bottleneck]), configured_share(cclass, bclass))


def load_experiment(path: str | Path) -> QosExperiment:
    """Read and validate a qos-priority experiment file (raises ConfigError)."""
    return experiment_from_document(load_document(path))


def describe(exp: QosExperiment) -> str:
    """One line for ``aifabric lab check``."""
    u, v = exp.bottleneck
    return (f"ok ({exp.fabric.name}; {exp.collective.name} (class {exp.collective_class.name}) "
            f"and bulk {exp.spec.bulk.src}->{exp.spec.bulk.dst} (class {exp.bulk_class.name}) "
            f"share {u}->{v}; configured share {exp.configured_share:.2f})")


def fifo_policy(exp: QosExperiment, out: Path) -> Path:
    """The experiment's policy without its QoS sections, written to ``out``."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    data = yaml.load(exp.policy_path.read_text())
    for key in QOS_SECTIONS:
        data.pop(key, None)
    path = out / "policy-fifo.yaml"
    with path.open("w") as f:
        f.write(f"# {exp.policy_path} without {', '.join(QOS_SECTIONS)} (written by the lab)\n")
        yaml.dump(data, f)
    load_document(path)
    return path


_CLASS = re.compile(r"class htb (\S+) .*?\n\s*Sent (\d+) bytes", re.S)


def htb_class_bytes(iface: str) -> dict[str, int]:
    """``tc -s class show dev IFACE`` → {class id: bytes sent} (HTB classes only)."""
    r = subprocess.run(["tc", "-s", "class", "show", "dev", iface], capture_output=True,
                       text=True, timeout=10)
    return {m.group(1): int(m.group(2)) for m in _CLASS.finditer(r.stdout)}


_PORT_RX = re.compile(r"port\s+(\d+):\s+rx pkts=\d+, bytes=(\d+)")


def parse_rx_bytes(text: str) -> dict[int, int]:
    """``ovs-ofctl dump-ports`` output → {port number: received bytes} (LOCAL skipped)."""
    return {int(m.group(1)): int(m.group(2)) for m in map(_PORT_RX.search, text.splitlines()) if m}


class BottleneckSampler:
    """Samples port counters (``ovs-ofctl dump-ports``: the kernel's veth counters, read when
    asked) every ``period_s`` with ``time.time()`` stamps, so they can be read at the
    collective's start and end. Counters: the bottleneck port's transmitted bytes; the bytes
    transmitted to the collective's destinations and to the bulk destination on their access
    ports (downstream of the bottleneck, so packets the bottleneck dropped are not counted; each
    of those hosts receives nothing else there but ACKs).

    ``counters`` are ``(switch, port)`` pairs for: the bottleneck, then the collective's
    destination ports (summed), then the bulk destination port, as
    ``(bottleneck, [collective...], bulk)``.
    """

    def __init__(self, bottleneck: tuple[str, int], collective: list[tuple[str, int]],
                 bulk: tuple[str, int], period_s: float = 0.2) -> None:
        self.bottleneck, self.collective, self.bulk = bottleneck, collective, bulk
        self.switches = sorted({bottleneck[0], bulk[0], *(sw for sw, _ in collective)})
        self.period_s = period_s
        # (time, bottleneck tx bytes, collective destinations' tx bytes, bulk destination's)
        self.samples: list[tuple[float, int, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        t = time.time()
        tx: dict[tuple[str, int], int] = {}
        for sw in self.switches:
            r = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-ports", sw],
                               capture_output=True, text=True, timeout=5)
            tx.update({(sw, p): b for p, b in parse_dump_ports(r.stdout).items()})
        t = (t + time.time()) / 2
        if all(k in tx for k in (self.bottleneck, self.bulk, *self.collective)):
            self.samples.append((t, tx[self.bottleneck], sum(tx[k] for k in self.collective),
                                 tx[self.bulk]))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period_s)

    def __enter__(self) -> BottleneckSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sample()  # one after everything finished, so the window's end is covered

    def at(self, t: float) -> tuple[float, ...]:
        """The counters at time ``t``, linearly interpolated."""
        return interpolate(self.samples, t)


def interpolate(samples: list[tuple[float, ...]], t: float) -> tuple[float, ...]:
    """Counters at time ``t`` from ``[(time, c1, c2, ...), ...]`` sorted by time (linear between
    the two samples around ``t``). Raises ValueError if ``t`` is outside the sampled span."""
    if not samples or not samples[0][0] <= t <= samples[-1][0]:
        raise ValueError(f"time {t:.3f} outside the sampled span")
    for s0, s1 in zip(samples, samples[1:], strict=False):
        if s0[0] <= t <= s1[0]:
            f = (t - s0[0]) / (s1[0] - s0[0]) if s1[0] > s0[0] else 0.0
            return tuple(a + f * (b - a) for a, b in zip(s0[1:], s1[1:], strict=True))
    return tuple(float(x) for x in samples[-1][1:])



def run_once(exp: QosExperiment, mininet: Any, variant: str, repeat: int,
             out: Path) -> dict[str, Any]:
    """One repeat of one variant; returns its record (see the module docstring)."""
    hosts = {h.name: h for h in mininet.hosts}
    rdir = out / variant / f"repeat{repeat}"
    rdir.mkdir(parents=True, exist_ok=True)
    b = exp.spec.bulk
    w = exp.spec.workload
    iface = f"{exp.bottleneck[0]}-eth{exp.fabric.port_towards(*exp.bottleneck)}"
    classes_before = htb_class_bytes(iface)
    recv_out = rdir / "bulk-recv.json"
    recv_out.unlink(missing_ok=True)
    py = [sys.executable, "-m", "mininet_labs.workloads.bulk"]
    recv = start_in_host(hosts[b.dst], [*py, "recv", "--port", str(b.port), "--connections",
                                        str(b.connections), "--out", str(recv_out)],
                         rdir / "bulk-recv.log")
    send = start_in_host(hosts[b.src], [*py, "send", "--dst", exp.fabric.host_by_name[b.dst].ipv4,
                                        "--port", str(b.port), "--connections",
                                        str(b.connections), "--dscp", str(b.dscp)],
                         rdir / "bulk-send.log")
    procs = []
    errors: list[str] = []
    def access(host: str) -> tuple[str, int]:
        leaf = exp.fabric.host_by_name[host].leaf
        return leaf, exp.fabric.port_towards(leaf, host)

    sampler = BottleneckSampler(
        (exp.bottleneck[0], exp.fabric.port_towards(*exp.bottleneck)),
        sorted({access(d) for _, d in exp.bottleneck_pairs}), access(b.dst))
    try:
        sampler.__enter__()
        time.sleep(exp.spec.bulk_lead_s)
        coll = exp.collective
        peers = [exp.fabric.host_by_name[h].ipv4 for h in coll.ranks]
        for r, hname in enumerate(coll.ranks):
            rep = rdir / f"rank{r}.json"
            rep.unlink(missing_ok=True)
            cmd = rank_command(r, peers, w.bytes, repeat, 0, source_port(repeat, coll.name, r),
                               RING_DST_PORT, w.chunk_bytes, rep, coll.dscp)
            procs.append((r, start_in_host(hosts[hname], cmd, rdir / f"rank{r}.log"), rep))
        deadline = time.monotonic() + w.timeout_s
        for r, p, _ in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                errors.append(f"rank {r} timed out after {w.timeout_s:.0f}s")
            labnet.forget_pids("workload_pids", [p.pid])
    finally:
        sampler.__exit__()
        for _, p, _ in procs:
            if p.poll() is None:
                stop_process(p)
        stop_process(send)
        stop_process(recv)
    classes_after = htb_class_bytes(iface)
    reports = []
    for r, p, rep in procs:
        try:
            d = json.loads(rep.read_text())
        except (OSError, ValueError):
            errors.append(f"rank {r}: no report (exit {p.returncode}, see {rep.with_suffix('.log')})")
            continue
        if "error" in d:
            errors.append(f"rank {r}: {d['error']}")
            continue
        reports.append(d)
    rec: dict[str, Any] = {"variant": variant, "repeat": repeat, "errors": errors,
                           "bottleneck_interface": iface}
    try:
        bulk = json.loads(recv_out.read_text())
    except (OSError, ValueError):
        errors.append(f"bulk receiver wrote no report (see {rdir / 'bulk-recv.log'})")
        bulk = None
    if errors or len(reports) != len(exp.collective.ranks) or bulk is None:
        rec["correct"] = False
        return rec
    res = summarize(reports)
    start = min(float(d["start"]) for d in reports)
    end = max(float(d["end"]) for d in reports)
    per_flow_bytes = busbw_factor(res.ranks) * res.bytes
    coll_bps = exp.flows_on_bottleneck * per_flow_bytes * 8 / res.cct_s
    bulk_bps = rate_in_window_bps(bulk, start, end)
    link_bps = exp.fabric.graph().edges[exp.bottleneck]["capacity_bps"]
    try:
        (tx0, c0, b0), (tx1, c1, b1) = sampler.at(start), sampler.at(end)
        switch_side = {"collective_share": round((c1 - c0) / (c1 - c0 + b1 - b0), 4),
                       "collective_bps": round((c1 - c0) * 8 / (end - start)),
                       "bulk_bps": round((b1 - b0) * 8 / (end - start)),
                       "port_tx_bps": round((tx1 - tx0) * 8 / (end - start)),
                       "samples": len(sampler.samples)}
    except (ValueError, ZeroDivisionError) as exc:
        switch_side = {"error": str(exc), "samples": len(sampler.samples)}
    rec.update({
        "switch_side": switch_side,
        "correct": res.correct, "cct_s": round(res.cct_s, 3), "busbw_bps": round(res.busbw_bps),
        "collective_bottleneck_bps": round(coll_bps), "bulk_bps": round(bulk_bps),
        "collective_share": round(coll_bps / (coll_bps + bulk_bps), 4),
        "bottleneck_utilisation": round((coll_bps + bulk_bps) / link_bps, 4),
        "bulk_connections": bulk["connections"],
        "htb_class_bytes": {k: classes_after[k] - classes_before.get(k, 0)
                            for k in classes_after if k in classes_before or variant == "qos"},
    })
    return rec


def summary(exp: QosExperiment, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per variant: mean collective share, busbw, CCT, bulk rate; and the verdict."""
    out: dict[str, Any] = {"configured_share": exp.configured_share,
                           "tolerance": exp.spec.tolerance, "variants": {}}
    for v in VARIANTS:
        ok = [r for r in runs if r["variant"] == v and r.get("correct")]
        if not ok:
            out["variants"][v] = None
            continue

        def mean(key: str, rows: list[dict[str, Any]] = ok) -> float:
            return sum(r[key] for r in rows) / len(rows)

        sw = [r["switch_side"]["collective_share"] for r in ok
              if "collective_share" in r.get("switch_side", {})]
        out["variants"][v] = {
            "runs": len(ok),
            "port_share": round(sum(sw) / len(sw), 4) if sw else None,
            "port_share_min": min(sw) if sw else None,
            "port_share_max": max(sw) if sw else None,
            "collective_share": round(mean("collective_share"), 4),
            "share_min": min(r["collective_share"] for r in ok),
            "share_max": max(r["collective_share"] for r in ok),
            "busbw_bps": round(mean("busbw_bps")), "cct_s": round(mean("cct_s"), 3),
            "bulk_bps": round(mean("bulk_bps")),
            "bottleneck_utilisation": round(mean("bottleneck_utilisation"), 4),
            "port_tx_bps": round(sum(r["switch_side"]["port_tx_bps"] for r in ok
                                     if "port_tx_bps" in r.get("switch_side", {}))
                                 / max(1, sum(1 for r in ok
                                              if "port_tx_bps" in r.get("switch_side", {})))),
        }
    q = out["variants"].get("qos")
    target = exp.configured_share
    # The verdict uses the share of the bottleneck port's transmitted bytes (the switch's own
    # counters); the endpoint estimate is kept next to it.
    share = None if q is None else (q["port_share"] if q["port_share"] is not None
                                    else q["collective_share"])
    out["qos_share"] = share
    out["qos_share_within_tolerance"] = bool(
        share is not None and abs(share - target) <= exp.spec.tolerance * target)
    f = out["variants"].get("fifo")
    if q is not None and f is not None and f["cct_s"] > 0:
        out["cct_speedup"] = round(f["cct_s"] / q["cct_s"], 3)
    return out


def table(exp: QosExperiment, s: dict[str, Any]) -> Table:
    u, v = exp.bottleneck
    link_bps = exp.fabric.graph().edges[exp.bottleneck]["capacity_bps"]
    t = Table("variant", "share of port bytes", "share (endpoints)", "configured",
              f"{exp.collective.name} busbw",
              "CCT", "bulk", f"{u}->{v} sent",
              title=f"{exp.spec.name}: {exp.collective.name} vs {exp.spec.bulk.connections}-"
                    f"connection bulk on {u}->{v}")
    for name in VARIANTS:
        r = s["variants"].get(name)
        if r is None:
            t.add_row(name, "failed", "", "", "", "", "", "")
            continue
        port = ("n/a" if r["port_share"] is None else
                f"{r['port_share']:.3f} ({r['port_share_min']:.3f}-{r['port_share_max']:.3f})")
        t.add_row(name, port,
                  f"{r['collective_share']:.3f} ({r['share_min']:.3f}-{r['share_max']:.3f})",
                  f"{s['configured_share']:.3f}" if name == "qos" else "none (FIFO)",
                  f"{r['busbw_bps'] / 1e6:.2f} Mbit/s", f"{r['cct_s']:.2f} s",
                  f"{r['bulk_bps'] / 1e6:.2f} Mbit/s", f"{r['port_tx_bps'] / link_bps:.0%}")
    return t


def plot(exp: QosExperiment, runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, v in enumerate(VARIANTS):
        shares = [r["switch_side"].get("collective_share", r["collective_share"])
                  for r in runs if r["variant"] == v and r.get("correct")]
        ax.scatter([i] * len(shares), shares, label=f"{v} ({len(shares)} runs)")
    ax.axhline(exp.configured_share, ls="--", color="k", label="configured share")
    ax.axhspan(exp.configured_share * (1 - exp.spec.tolerance),
               exp.configured_share * (1 + exp.spec.tolerance), color="0.9")
    ax.set_xticks(range(len(VARIANTS)), VARIANTS)
    ax.set_ylim(0, 1)
    ax.set_ylabel(f"{exp.collective.name}'s share of {exp.bottleneck[0]}->{exp.bottleneck[1]}")
    ax.set_title(f"{exp.spec.name}: collective vs bulk ({exp.fabric.name})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)




def run_experiment(experiment_path: str | Path, out_dir: str | Path,
                   console: Console | None = None) -> Results:
    """Run a qos-priority experiment; writes ``OUT/results.json`` and ``OUT/shares.png``.

    ``ok`` is true when every collective was correct and the ``qos`` share is within the
    tolerance of the configured share. Raises ConfigError (nothing started), RuntimeError (the
    lab cannot run or a component failed; the network is torn down first) or LabAborted.
    """
    console = console or Console()
    t_start = time.monotonic()
    exp = load_experiment(experiment_path)
    missing = requirements_missing()
    if missing:
        raise RuntimeError("cannot run a Mininet lab here: " + "; ".join(missing))
    out = Path(out_dir).resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RuntimeError(f"cannot write results to {out}: {exc.strerror or exc}") from None
    with labnet.lab_lock():
        return _run_locked(exp, out, console, t_start)


def _run_locked(exp: QosExperiment, out: Path, console: Console, t_start: float) -> Results:
    from mininet.log import setLogLevel

    setLogLevel("error")
    names = [s.name for s in exp.fabric.switches]
    features = probe_kernel_features()
    runs: list[dict[str, Any]] = []
    timings: dict[str, Any] = {}
    mininet = None
    ctl: ControllerProcess | None = None
    with sigterm_raises():
        try:
            removed = labnet.cleanup_leftovers(names)
            if removed:
                console.print(f"removed leftovers of an earlier run: {', '.join(removed)}")
            t = time.monotonic()
            mininet = labnet.build_network(exp.fabric, free_port(), exp.spec.lab.mtu_bytes,
                                           exp.spec.lab.queue_packets, exp.spec.lab.htb_burst_bytes)
            timings["mininet_start_s"] = round(time.monotonic() - t, 2)
            for variant in VARIANTS:
                policy = fifo_policy(exp, out) if variant == "fifo" else exp.policy_path
                extra = ["--apply-qos"] if variant == "qos" else []
                labnet.clear_switch_state(mininet)
                labnet.flush_arp(mininet)
                port = free_port()
                console.print(f"[{variant}] starting the controller "
                              f"{'with --apply-qos' if extra else '(no QoS)'}")
                ctl = start_controller(exp.topology_path, policy, port,
                                       out / f"controller-{variant}.log",
                                       exp.spec.lab.controller_start_timeout_s, extra)
                labnet.set_controller(mininet, port)
                try:
                    labnet.ping_all(mininet, exp.fabric, exp.spec.lab.reachability_timeout_s)
                    if variant == "qos":
                        _wait_qos_applied(ctl, exp, 30.0)
                except TimeoutError as exc:
                    raise RuntimeError(f"[{variant}] {exc} ({ctl.log_path})") from None
                for repeat in range(1, exp.spec.repeats + 1):
                    t = time.monotonic()
                    rec = run_once(exp, mininet, variant, repeat, out)
                    rec["wall_s"] = round(time.monotonic() - t, 2)
                    if ctl.popen.poll() is not None:
                        raise RuntimeError(f"[{variant}] the controller exited (code "
                                           f"{ctl.popen.returncode}); log {ctl.log_path}")
                    runs.append(rec)
                    if rec.get("correct"):
                        port = rec["switch_side"].get("collective_share")
                        console.print(
                            f"[{variant}] repeat {repeat}: {exp.collective.name} share of the "
                            f"port's bytes {'n/a' if port is None else f'{port:.3f}'} "
                            f"(endpoints {rec['collective_share']:.3f}), "
                            f"busbw {rec['busbw_bps'] / 1e6:.2f} "
                            f"Mbit/s, CCT {rec['cct_s']:.2f} s; bulk {rec['bulk_bps'] / 1e6:.2f} "
                            f"Mbit/s", markup=False)
                    else:
                        console.print(f"[{variant}] repeat {repeat} FAILED: "
                                      f"{'; '.join(rec['errors'])}", markup=False)
                timings[f"{variant}_controller_exit"] = ctl.stop()
                ctl = None
        finally:
            if ctl is not None:
                ctl.stop()
            leftovers = labnet.teardown(mininet, names)
    s = summary(exp, runs)
    data = {
        "experiment": {"kind": "qos-priority", "name": exp.spec.name, "file": str(exp.path),
                       "topology": str(exp.topology_path), "policy": str(exp.policy_path),
                       "collective": exp.collective.name,
                       "collective_class": exp.collective_class.name,
                       "bulk": exp.spec.bulk.model_dump(), "bulk_class": exp.bulk_class.name,
                       "bytes": exp.spec.workload.bytes, "repeats": exp.spec.repeats,
                       "lab": exp.spec.lab.model_dump()},
        "bottleneck": list(exp.bottleneck),
        "ring_flows_on_bottleneck": exp.flows_on_bottleneck,
        "runs": runs,
        "summary": s,
        "not_exercised": {
            "ecn_marking": "Open vSwitch linux-htb queues do not mark ECN"
                           + ("" if features.get("sch_red") else "; this kernel also lacks "
                              "sch_red") + ("" if features.get("tcp_dctcp") else " and DCTCP"),
            "pfc": "Open vSwitch has no IEEE 802.1Qbb PFC",
        },
        "environment": {"kernel_features": features, "versions": versions(),
                        "kernel_features_missing": sorted(k for k, v in features.items() if not v)},
        "timings": {**timings, "total_s": round(time.monotonic() - t_start, 2)},
        "teardown_removed": leftovers,
    }
    results_path = out / "results.json"
    plot_path = out / "shares.png"
    results_path.write_text(json.dumps(data, indent=1))
    plot(exp, runs, plot_path)
    console.print(table(exp, s))
    q = s["variants"].get("qos")
    if q is not None:
        lo, hi = exp.configured_share * (1 - exp.spec.tolerance), \
            exp.configured_share * (1 + exp.spec.tolerance)
        word = "within" if s["qos_share_within_tolerance"] else "OUTSIDE"
        console.print(f"with the policy, {exp.collective.name} got {s['qos_share']:.3f} of "
                      f"the bottleneck's bytes: {word} {lo:.3f}-{hi:.3f} (configured "
                      f"{exp.configured_share:.3f} ± {exp.spec.tolerance:.0%})", markup=False)
    if "cct_speedup" in s:
        console.print(f"CCT with the policy is {s['cct_speedup']:.2f}x faster than with FIFO "
                      "while the bulk transfer runs", markup=False)
    console.print("not exercised here: " + "; ".join(data["not_exercised"].values()),
                  markup=False)
    all_correct = bool(runs) and all(r.get("correct") for r in runs)
    return Results(data, out, results_path, plot_path,
                   ok=all_correct and s["qos_share_within_tolerance"])


def _wait_qos_applied(ctl: ControllerProcess, exp: QosExperiment, timeout_s: float) -> None:
    """Wait until the controller logs that QoS is applied on the bottleneck switch."""
    sw = exp.bottleneck[0]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = ctl.log_path.read_text(errors="replace")
        if f"[{sw}] QoS applied" in text:
            return
        if ctl.popen.poll() is not None:
            break
        time.sleep(0.2)
    raise TimeoutError(f"the controller did not apply QoS on {sw} within {timeout_s:.0f}s")
