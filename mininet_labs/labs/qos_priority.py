"""``kind: qos-priority``: a collective and a bulk transfer share a bottleneck, once with plain
FIFO queues and once with the policy's traffic classes applied by the controller.

Example (``mininet_labs/experiments/qos_priority.yaml``)::

    kind: qos-priority
    name: qos-priority
    topology: ../topologies/leafspine_1x2x2.yaml
    policy: ../policies/qos_lab_priority.yaml   # collectives + traffic_classes (+ buffers)
    collective: grads                              # default: the policy's only collective
    bulk: {src: h2, dst: h4, dscp: 8, connections: 4}
    workload: {kind: ring-allreduce, bytes: 6MB}
    repeats: 2
    tolerance: 0.10                                # |share - configured| <= 10 % of configured

Each repeat: the bulk transfer starts (``connections`` TCP connections marked ``dscp``), runs
``bulk_lead_s`` alone, then the collective runs once (its data marked with its DSCP) and the
bulk transfer stops. Variants: ``fifo`` runs the policy without its QoS sections (no
``--apply-qos``: the port keeps the lab's HTB shaper and one FIFO); ``qos`` runs it as given with
``--apply-qos`` (OVSDB linux-htb queues, tc u32 DSCP filters). The configured share is the
collective class's DWRR weight / (its weight + the bulk class's), 1.0 for a strict class. What is
measured and how: :mod:`mininet_labs.analysis.qos`. With ``qos`` the HTB class byte counters of
the bottleneck port are recorded too, as an independent check.

ECN marking is not exercised: Open vSwitch's linux-htb queues do not mark, and the results
record which kernel features (sch_red, DCTCP) this machine lacks.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import networkx as nx
from pydantic import Field

from controller.errors import ConfigError
from controller.policy import Collective
from controller.policy.model import TrafficClass
from controller.yamlsrc import Document
from mininet_labs.analysis import qos
from mininet_labs.analysis.verdict import Verdict
from mininet_labs.lab.bulk import Bulk, BulkSpec
from mininet_labs.lab.collectives import finish_ring, start_ring
from mininet_labs.lab.counters import Periodic, PortCounters, port_dev
from mininet_labs.lab.interface import ControllerConfig, Lab, RunContext, Variant
from mininet_labs.lab.policies import QOS_SECTIONS, policy_variant
from mininet_labs.lab.schema import Experiment, FabricExperimentSpec, RingWorkloadSpec

RING_DST_PORT = 29500
SAMPLE_S = 0.2


class Spec(FabricExperimentSpec):
    kind: Literal["qos-priority"]
    collective: str | None = None
    bulk: BulkSpec
    workload: RingWorkloadSpec
    repeats: Annotated[int, Field(ge=1, le=10, strict=True)] = 2
    bulk_lead_s: Annotated[float, Field(ge=0.5, le=30)] = 2.0
    tolerance: Annotated[float, Field(gt=0, lt=1)] = 0.10


@dataclass(frozen=True, kw_only=True)
class QosExperiment(Experiment):
    collective: Collective
    collective_class: TrafficClass
    bulk_class: TrafficClass
    bottleneck: tuple[str, str]
    flows_on_bottleneck: int
    bottleneck_pairs: frozenset[tuple[str, str]]
    configured_share: float


def _links(path: tuple[str, ...] | list[str]) -> set[tuple[str, str]]:
    return set(zip(path, path[1:], strict=False))


_CLASS = re.compile(r"class htb (\S+) .*?\n\s*Sent (\d+) bytes", re.S)


def htb_class_bytes(iface: str) -> dict[str, int]:
    """``tc -s class show dev IFACE`` → {class id: bytes sent} (HTB classes only)."""
    r = subprocess.run(["tc", "-s", "class", "show", "dev", iface], capture_output=True,
                       text=True, timeout=10, check=False)
    return {m.group(1): int(m.group(2)) for m in _CLASS.finditer(r.stdout)}


class QosPriority(Lab):
    kind = "qos-priority"
    spec_model = Spec
    plot_names = ("shares.png",)

    def prepare(self, doc: Document, exp: Experiment) -> QosExperiment:
        from controller.plan.build import build_plan

        spec, fabric, policy = exp.spec, exp.fabric, exp.policy
        assert policy is not None
        problems = []
        if not policy.traffic_classes:
            problems.append(doc.problem(("policy",), f"{exp.policy_path} has no traffic_classes"
                                                     " to apply"))
        names = [c.name for c in policy.collectives]
        cname = spec.collective or (names[0] if len(names) == 1 else None)
        coll = next((c for c in policy.collectives if c.name == cname), None)
        if coll is None:
            problems.append(doc.problem(("collective",) if spec.collective else ("policy",),
                                        f"name one of the policy's collectives ({', '.join(names)})"
                                        if names else f"{exp.policy_path} declares no collectives"))
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
            raise ConfigError([doc.problem(("policy",), f"collective {coll.name} has no dscp; "
                                                        "the lab marks its data with it")])
        cclass, bclass = qos.class_of(policy, coll.dscp), qos.class_of(policy, spec.bulk.dscp)
        if cclass is None or bclass is None or cclass.name == bclass.name:
            raise ConfigError([doc.problem(("bulk", "dscp"), (
                f"DSCP {spec.bulk.dscp} must fall in a different traffic class from the "
                f"collective's DSCP {coll.dscp} ({cclass.name if cclass else 'no class'})"))])
        result = build_plan(fabric, policy)
        if result.pinning is None:
            raise ConfigError([doc.problem(("policy",), "routing.mode must be pinned: the lab "
                                                        "needs to know the collective's paths")])
        on: dict[tuple[str, str], int] = {}
        pairs_on: dict[tuple[str, str], set[tuple[str, str]]] = {}
        for demand, path in result.pinning.paths.items():
            if demand.collective == coll.name:
                for ln in _links(path):
                    on[ln] = on.get(ln, 0) + 1
                    pairs_on.setdefault(ln, set()).add((demand.src, demand.dst))
        g = fabric.graph()
        bulk_paths = [_links(p) for p in nx.all_shortest_paths(g, spec.bulk.src, spec.bulk.dst)]
        shared = {ln for ln in set.intersection(*bulk_paths) & set(on)
                  if not (fabric.is_host(ln[0]) or fabric.is_host(ln[1]))}
        if not shared:
            raise ConfigError([doc.problem(("bulk",), (
                f"{spec.bulk.src} -> {spec.bulk.dst} does not cross a fabric link that "
                f"{coll.name}'s pinned flows use on every path; there is no shared bottleneck"))])
        bn = min(shared)
        return QosExperiment(**vars(exp), collective=coll, collective_class=cclass,
                             bulk_class=bclass, bottleneck=bn, flows_on_bottleneck=on[bn],
                             bottleneck_pairs=frozenset(pairs_on[bn]),
                             configured_share=qos.configured_share(cclass, bclass))

    def describe(self, exp: Any) -> str:
        u, v = exp.bottleneck
        return (f"{exp.fabric.name}; {exp.collective.name} (class {exp.collective_class.name}) "
                f"and bulk {exp.spec.bulk.src}->{exp.spec.bulk.dst} (class {exp.bulk_class.name})"
                f" share {u}->{v}; configured share {exp.configured_share:.2f}")

    def variants(self, exp: Any) -> list[Variant]:
        runs = tuple(range(1, exp.spec.repeats + 1))
        src = str(exp.policy_path)
        return [Variant("fifo", ControllerConfig(policy_variant(exp.policy_text,
                                                                drop_keys=QOS_SECTIONS,
                                                                source=src)), runs),
                Variant("qos", ControllerConfig(exp.policy_text, ("--apply-qos",), wait_log=(
                    f"[{exp.bottleneck[0]}] QoS applied",)), runs)]

    def run(self, ctx: RunContext, repeat: Any) -> dict[str, Any]:
        exp, w = ctx.exp, ctx.exp.spec.workload
        rdir = ctx.out / f"repeat{repeat}"
        rdir.mkdir(parents=True, exist_ok=True)
        fab = exp.fabric
        bport = (exp.bottleneck[0], fab.port_towards(*exp.bottleneck))
        iface = port_dev(*bport)
        counters = PortCounters(ctx.net, fab)
        dests = sorted({counters.access_port(d) for _, d in exp.bottleneck_pairs})
        bulk_dst = counters.access_port(exp.spec.bulk.dst)

        def read() -> tuple[int, int, int]:
            c = counters.read([bport, bulk_dst, *dests])
            return c[bport][1], sum(c[k][1] for k in dests), c[bulk_dst][1]

        classes_before = htb_class_bytes(iface)
        bulk = Bulk(ctx, exp.spec.bulk, rdir).start()
        sampler: Periodic[tuple[int, int, int]] = Periodic(read, SAMPLE_S).start()
        try:
            time.sleep(exp.spec.bulk_lead_s)  # the bulk transfer alone first
            ring = start_ring(ctx, exp.collective, seed=repeat, nbytes=w.bytes, out_dir=rdir,
                              dst_port=RING_DST_PORT, chunk_bytes=w.chunk_bytes,
                              dscp=exp.collective.dscp)
            entry = finish_ring(ctx, ring, w.timeout_s)
        finally:
            sampler.stop()
            report = bulk.stop()
        classes_after = htb_class_bytes(iface)
        rec: dict[str, Any] = {"repeat": repeat, "bottleneck_interface": iface,
                               "collective": entry, "correct": bool(entry["correct"]),
                               "errors": list(entry["errors"])}
        if report is None:
            rec["errors"].append(f"bulk receiver wrote no report (see {rdir / 'bulk-recv.log'})")
            rec["correct"] = False
        if not rec["correct"]:
            return rec
        assert report is not None
        link_bps = fab.graph().edges[exp.bottleneck]["capacity_bps"]
        rec.update(qos.run_record(entry, ring.reports, report, sampler.samples,
                                  exp.flows_on_bottleneck, link_bps))
        rec["htb_class_bytes"] = {k: classes_after[k] - classes_before.get(k, 0)
                                  for k in classes_after
                                  if k in classes_before or ctx.variant.name == "qos"}
        return rec

    def run_report(self, exp: Any, r: dict[str, Any]) -> list[Any]:
        if not r.get("correct"):
            return [f"[{r['variant']}] repeat {r['repeat']} FAILED: {'; '.join(r['errors'])}"]
        port = r["switch_side"].get("collective_share")
        return [f"[{r['variant']}] repeat {r['repeat']}: {exp.collective.name} share of the "
                f"port's bytes {'n/a' if port is None else f'{port:.3f}'} (endpoints "
                f"{r['collective_share']:.3f}), busbw {r['busbw_bps'] / 1e6:.2f} Mbit/s, CCT "
                f"{r['cct_s']:.2f} s; bulk {r['bulk_bps'] / 1e6:.2f} Mbit/s"]

    def summarize(self, exp: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
        s = qos.summary(records, exp.configured_share, exp.spec.tolerance)
        s["not_exercised"] = {
            "ecn_marking": "Open vSwitch linux-htb queues do not mark ECN",
            "pfc": "Open vSwitch has no IEEE 802.1Qbb PFC"}
        s["bottleneck"] = list(exp.bottleneck)
        s["ring_flows_on_bottleneck"] = exp.flows_on_bottleneck
        return s

    def verdicts(self, exp: Any, records: list[dict[str, Any]],
                 summary: dict[str, Any]) -> list[Verdict]:
        t, tol = exp.configured_share, exp.spec.tolerance
        share = summary["qos_share"]
        out = [Verdict("all_correct", bool(records) and all(r.get("correct") for r in records),
                       f"{sum(bool(r.get('correct')) for r in records)} of {len(records)} "
                       "collectives correct"),
               Verdict("qos_share_within_tolerance", summary["qos_share_within_tolerance"],
                       f"with the policy {exp.collective.name} got "
                       f"{'n/a' if share is None else f'{share:.3f}'} of the bottleneck's bytes;"
                       f" configured {t:.3f} ± {tol:.0%} ({t * (1 - tol):.3f}-{t * (1 + tol):.3f})",
                       timing_sensitive=True)]
        if "cct_speedup" in summary:
            out.append(Verdict("qos_faster_than_fifo", summary["cct_speedup"] > 1.0,
                               f"CCT with the policy {summary['cct_speedup']:.2f}x faster than "
                               "with FIFO while the bulk transfer runs"))
        return out

    def report(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any]
               ) -> list[Any]:
        u, v = exp.bottleneck
        link_bps = exp.fabric.graph().edges[exp.bottleneck]["capacity_bps"]
        return [qos.table(summary, exp.collective.name, exp.bottleneck, link_bps,
                          f"{exp.spec.name}: {exp.collective.name} vs "
                          f"{exp.spec.bulk.connections}-connection bulk on {u}->{v}"),
                "not exercised here: " + "; ".join(summary["not_exercised"].values())]

    def plots(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any],
              out: Path) -> list[Path]:
        path = out / "shares.png"
        u, v = exp.bottleneck
        qos.plot(records, exp.configured_share, exp.spec.tolerance,
                 f"{exp.collective.name}'s share of {u}->{v}",
                 f"{exp.spec.name}: collective vs bulk ({exp.fabric.name})", path)
        return [path]


LAB = QosPriority()
