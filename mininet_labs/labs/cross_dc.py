"""``kind: cross-dc``: one all-reduce across two data centres joined by a delayed, narrow DCI
link — flat ring vs hierarchical, alone and next to a bulk transfer over the same DCI, without
and with the gradient-priority policy.

Example (``mininet_labs/experiments/cross_dc.yaml``)::

    kind: cross-dc
    name: cross-dc
    topology: ../topologies/two_dc.yaml          # kind: multi-site, with wan_links
    policy: ../policies/cross_dc.yaml         # collectives, traffic_classes, wan
    collective: grads                            # ranks site by site, same count per site
    bulk: {src: h4, dst: h8, dscp: 8, connections: 4}
    workload: {kind: ring-allreduce, bytes: 1500KB}
    relay_queue: 64KB                            # delay line queue per direction (no netem)

The DCI link runs through a :mod:`mininet_labs.lab.delay` line (netem where the kernel has it,
else the userspace relay) that delays by the link's ``delay`` one way, serialises at its
``rate`` and counts every frame that crosses, per direction and DSCP.

Variants, each on a freshly started controller: ``fifo`` — the policy without its QoS sections
and ``wan.links``/``wan.classes`` (the DCI port keeps the lab's HTB shaper and one FIFO); first
the round trip across the DCI (ping, next to 2 × the one-way delay), then flat and hierarchical
with the DCI otherwise idle, then both next to the bulk transfer. ``priority`` — the policy as
given with ``--apply-qos`` (the ``wan`` shaper and per-class queues on the DCI ports): flat and
hierarchical next to the bulk transfer. Per run: CCT and busbw (nccl-tests definitions; factor
2(n−1)/n for both algorithms), correctness (every rank checks its sum within Higham's bound), the
collective's bytes across the DCI (the delay line's frame counters) and its ranks' payload
across, the DCI share next to bulk. Expectations and verdicts:
:mod:`mininet_labs.analysis.cross_dc`.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from controller.errors import ConfigError
from controller.model.topology import Fabric
from controller.policy import Collective
from controller.policy.model import TrafficClass
from controller.te.collectives import hierarchical_groups
from controller.yamlsrc import Document
from mininet_labs.analysis import cross_dc as analysis
from mininet_labs.analysis.qos import class_of
from mininet_labs.analysis.verdict import Verdict
from mininet_labs.lab import delay as dly
from mininet_labs.lab import net as labnet
from mininet_labs.lab.bulk import Bulk, BulkSpec
from mininet_labs.lab.collectives import rank_command
from mininet_labs.lab.interface import ControllerConfig, Lab, RunContext, Variant
from mininet_labs.lab.policies import QOS_SECTIONS, policy_variant
from mininet_labs.lab.schema import (
    Experiment,
    FabricExperimentSpec,
    RingWorkloadSpec,
    Seed,
    _size_bytes,
)
from mininet_labs.workloads.ring_allreduce import busbw_factor, source_port, summarize

RING_PORT = 29500
HIER_PORT = 29600
STATS_FLUSH_S = 1.5  # the delay lines write their counters every second


class Spec(FabricExperimentSpec):
    kind: Literal["cross-dc"]
    collective: str | None = None
    bulk: BulkSpec
    workload: RingWorkloadSpec
    seed: Seed = 1
    bulk_lead_s: Annotated[float, Field(ge=0.5, le=30)] = 2.0
    tolerance: Annotated[float, Field(gt=0, lt=1)] = 0.10
    relay_queue_bytes: int = Field(default=64_000, alias="relay_queue")

    @field_validator("relay_queue_bytes", mode="before")
    @classmethod
    def _queue(cls, v: Any) -> int:
        n = _size_bytes(v)
        if not 9000 <= n <= 16 * 2**20:
            raise ValueError("relay_queue must be between 9000B and 16MiB")
        return n


@dataclass(frozen=True, kw_only=True)
class CrossDcExperiment(Experiment):
    collective: Collective
    site_rings: tuple[tuple[str, ...], ...]
    shard_rings: tuple[tuple[str, ...], ...]
    collective_class: TrafficClass
    bulk_class: TrafficClass
    configured_share: float


def splice_delay_lines(exp: CrossDcExperiment, out: Path, netem: bool
                       ) -> list[dly.DelayLine]:
    """Replace the veth of every WAN link by a delay line (see :mod:`mininet_labs.lab.delay`):
    the two switch ports are removed from their bridges, re-created as veths into the line's
    namespace, shaped again like every lab link (HTB at the link rate, pfifo of
    ``lab.queue_packets``) and re-added with the same OpenFlow port numbers."""
    lines = []
    mtu = exp.spec.lab.mtu_bytes
    for i, ln in enumerate(exp.fabric.wan_links):
        ia, ib = f"{ln.a}-eth{ln.a_port}", f"{ln.b}-eth{ln.b_port}"
        labnet._sh(["ovs-vsctl", "--", "del-port", ln.a, ia, "--", "del-port", ln.b, ib],
                   check=True)
        labnet._sh(["ip", "link", "del", ia], check=True)
        spec = dly.DelaySpec(ln.latency_us, ln.capacity_bps, exp.spec.relay_queue_bytes,
                             ln.loss_percent, exp.spec.seed)
        line = dly.start_delay_line(i, ia, ib, spec, mtu, out / "delay", netem)
        lines.append(line)
        for iface in (ia, ib):
            for cmd in (["tc", "qdisc", "add", "dev", iface, "root", "handle", "5:", "htb",
                         "default", "1"],
                        ["tc", "class", "add", "dev", iface, "parent", "5:", "classid", "5:1",
                         "htb", "rate", f"{ln.capacity_bps}bit", "burst", "15k", "quantum",
                         "9100"],
                        ["tc", "qdisc", "add", "dev", iface, "parent", "5:1", "handle", "10:",
                         "pfifo", "limit", str(exp.spec.lab.queue_packets)]):
                labnet._sh(cmd, check=True)
        with labnet.socket_rx_buffer_default(labnet.OVS_RX_BUFFER_BYTES):
            for sw, iface, port in ((ln.a, ia, ln.a_port), (ln.b, ib, ln.b_port)):
                labnet._sh(["ovs-vsctl", "add-port", sw, iface, "--", "set", "Interface", iface,
                            f"ofport_request={port}", f"mtu_request={mtu}"], check=True)
            labnet._sh(["ovs-vsctl", "--timeout=10", "wait-until", "Interface", ia,
                        f"ofport={ln.a_port}"], check=True)
            labnet._sh(["ovs-vsctl", "--timeout=10", "wait-until", "Interface", ib,
                        f"ofport={ln.b_port}"], check=True)
    return lines


def measure_dci_rtt(exp: CrossDcExperiment, mininet: Any, count: int = 20) -> dict[str, Any]:
    """Ping from the collective's first rank to the first rank of the next site (``count``
    pings, 0.1 s apart, 100-byte payloads); returns the median and range (ms) next to the
    configured RTT: 2 × the DCI's one-way delay plus nothing else (in-site links add µs)."""
    import re
    import statistics

    src, dst = exp.site_rings[0][0], exp.site_rings[1][0]
    host = mininet.get(src)
    text = host.cmd(f"ping -c {count} -i 0.1 -W 2 {exp.fabric.host_by_name[dst].ipv4}")
    rtts = [float(x) for x in re.findall(r"time=([\d.]+) ms", text)]
    one_way_us = sum(ln.latency_us for ln in exp.fabric.wan_links[:1])
    return {"src": src, "dst": dst, "pings": len(rtts),
            "median_ms": round(statistics.median(rtts), 3) if rtts else None,
            "min_ms": min(rtts, default=None), "max_ms": max(rtts, default=None),
            "configured_ms": round(2 * one_way_us / 1e3, 3)}


def _commands(exp: CrossDcExperiment, algorithm: str, rdir: Path
              ) -> list[tuple[str, list[str], Path]]:
    """(host, command, report path) of every rank."""
    coll, w, seed = exp.collective, exp.spec.workload, exp.spec.seed
    ip = {h.name: h.ipv4 for h in exp.fabric.hosts}
    out = []
    if algorithm == "flat":
        peers = [ip[h] for h in coll.ranks]
        for r, h in enumerate(coll.ranks):
            rep = rdir / f"rank{r}.json"
            out.append((h, rank_command(r, peers, w.bytes, seed, 0, source_port(seed, coll.name, r),
                                        RING_PORT, w.chunk_bytes, rep, coll.dscp), rep))
        return out
    k = len(exp.site_rings[0])
    for s, ring in enumerate(exp.site_rings):
        for j, h in enumerate(ring):
            rep = rdir / f"rank{s * k + j}.json"
            cmd = [sys.executable, "-m", "mininet_labs.workloads.hierarchical_allreduce",
                   "--site", str(s), "--index", str(j), "--site-peers",
                   ",".join(ip[x] for x in ring), "--shard-peers",
                   ",".join(ip[x] for x in exp.shard_rings[j]), "--bytes", str(w.bytes),
                   "--seed", str(seed), "--port", str(HIER_PORT), "--src-port",
                   str(source_port(seed, coll.name, s * k + j) // 2 * 2),
                   "--chunk-bytes", str(w.chunk_bytes), "--dscp", str(coll.dscp),
                   "--out", str(rep)]
            out.append((h, cmd, rep))
    return out


def _direction(line: dly.DelayLine, fabric: Fabric, src_site: str | None) -> str:
    """The delay line direction (``a->b``/``b->a``) that leaves ``src_site``."""
    a_switch = line.end_a.rsplit("-eth", 1)[0]
    return "a->b" if fabric.site_of(a_switch) == src_site else "b->a"


class CrossDc(Lab):
    kind = "cross-dc"
    spec_model = Spec
    plot_names = ("cross_dc.png",)

    def check_fabric(self, doc: Document, fabric: Any) -> None:
        if not fabric.wan_links:
            raise ConfigError([doc.problem(("topology",), f"{fabric.name} has no wan_links (use "
                                                          "kind: multi-site)")])
        too_long = [f"{s.name}-eth{p}" for s in fabric.switches
                    for p in [max((ln.port_of(s.name) for ln in fabric.links
                                   if s.name in (ln.a, ln.b)), default=0)]
                    if len(f"{s.name}-eth{p}") > 15]
        if too_long:
            raise ConfigError([doc.problem(("topology",), f"interface names longer than 15 "
                                                          f"characters: {', '.join(too_long)}; "
                                                          "use shorter site names")])

    def prepare(self, doc: Document, exp: Experiment) -> CrossDcExperiment:
        spec, fabric, policy = exp.spec, exp.fabric, exp.policy
        assert policy is not None
        names = [c.name for c in policy.collectives]
        cname = spec.collective or (names[0] if len(names) == 1 else None)
        coll = next((c for c in policy.collectives if c.name == cname), None)
        if coll is None:
            raise ConfigError([doc.problem(("collective",) if spec.collective else ("policy",),
                                           f"name one of the policy's collectives "
                                           f"({', '.join(names)})" if names
                                           else f"{exp.policy_path} declares no collectives")])
        try:
            site_rings, shard_rings = hierarchical_groups(coll.ranks, fabric.site_of)
        except ValueError as exc:
            raise ConfigError([doc.problem(("collective",), str(exc))]) from None
        if len(site_rings) < 2 or tuple(r for g in site_rings for r in g) != coll.ranks:
            raise ConfigError([doc.problem(("collective",), f"{coll.name}'s ranks must span "
                                                            "sites and be listed site by site")])
        problems = []
        for key in ("src", "dst"):
            h = getattr(spec.bulk, key)
            if h not in fabric.host_by_name:
                problems.append(doc.problem(("bulk", key), f"no host {h!r} in {fabric.name}"))
            elif h in coll.ranks:
                problems.append(doc.problem(("bulk", key), f"{h} is a rank of {coll.name}"))
        if problems:
            raise ConfigError(problems)
        if fabric.site_of(spec.bulk.src) == fabric.site_of(spec.bulk.dst):
            raise ConfigError([doc.problem(("bulk",), "the bulk transfer must cross the DCI "
                                                      "(src and dst in different sites)")])
        if coll.dscp is None:
            raise ConfigError([doc.problem(("policy",), f"collective {coll.name} has no dscp")])
        cclass, bclass = class_of(policy, coll.dscp), class_of(policy, spec.bulk.dscp)
        if cclass is None or bclass is None or cclass.name == bclass.name:
            raise ConfigError([doc.problem(("bulk", "dscp"), f"DSCP {spec.bulk.dscp} must fall in "
                                                             "a different traffic class from the "
                                                             f"collective's DSCP {coll.dscp}")])
        shares = {wc.class_name: wc.share_percent
                  for wc in (policy.wan.classes if policy.wan else ())}
        if cclass.name not in shares or bclass.name not in shares:
            raise ConfigError([doc.problem(("policy",), f"the policy's wan.classes must give "
                                                        f"shares to {cclass.name} and "
                                                        f"{bclass.name}")])
        configured = shares[cclass.name] / (shares[cclass.name] + shares[bclass.name])
        return CrossDcExperiment(**vars(exp), collective=coll, site_rings=site_rings,
                                 shard_rings=shard_rings, collective_class=cclass,
                                 bulk_class=bclass, configured_share=configured)

    def describe(self, exp: Any) -> str:
        w = exp.fabric.wan_links[0]
        return (f"{exp.fabric.name}: {len(exp.site_rings)} sites x {len(exp.site_rings[0])} "
                f"ranks of {exp.collective.name}; DCI {w.a}-{w.b} {w.capacity_bps / 1e6:g} "
                f"Mbit/s, {w.latency_us / 1e3:g} ms one way; configured share "
                f"{exp.configured_share:.2f}")

    def setup(self, ctx: RunContext) -> None:
        from mininet_labs.lab.environment import probe_kernel_features

        netem = bool(probe_kernel_features().get("sch_netem"))
        lines = splice_delay_lines(ctx.exp, ctx.out, netem)
        ctx.state["lines"] = lines
        why = "sch_netem" if netem else "no sch_netem on this kernel: the userspace relay"
        ctx.console.print(f"DCI delay: {lines[0].mode} ({why})", markup=False)
        ctx.state["results"] = {"delay_element": {"used": lines[0].mode, "netem_available": netem}}

    def teardown(self, ctx: RunContext) -> None:
        info = []
        for line in ctx.state.get("lines", []):
            line.stop()
            try:
                st = line.stats()
                info.append({k: st.get(k) for k in (
                    "mode", "a", "b", "spec", "delay_us", "rate_bps", "queue_bytes",
                    "loss_percent", "received", "dropped_queue", "dropped_loss")}
                    | {"name": line.name, "ends": [line.end_a, line.end_b]})
            except (OSError, ValueError):
                info.append({"name": line.name, "mode": line.mode})
        ctx.state.setdefault("results", {}).setdefault("delay_element", {})["lines"] = info

    def cleanup(self) -> list[str]:
        return dly.cleanup_leftovers()

    def variants(self, exp: Any) -> list[Variant]:
        fifo = policy_variant(exp.policy_text, drop_keys=QOS_SECTIONS, drop_wan=("links", "classes"),
                              source=str(exp.policy_path))
        ends = sorted({sw for ln in exp.fabric.wan_links for sw in (ln.a, ln.b)})
        return [Variant("fifo", ControllerConfig(fifo), runs=(
                    "dci-rtt", ("flat", False), ("hierarchical", False), ("flat", True),
                    ("hierarchical", True))),
                Variant("priority", ControllerConfig(exp.policy_text, ("--apply-qos",),
                                                     wait_log=tuple(f"[{sw}] QoS applied"
                                                                    for sw in ends)),
                        runs=(("flat", True), ("hierarchical", True)))]

    def run(self, ctx: RunContext, key: Any) -> dict[str, Any]:
        exp = ctx.exp
        if key == "dci-rtt":
            return {"dci_rtt": measure_dci_rtt(exp, ctx.net)}
        algorithm, with_bulk = key
        lines: list[dly.DelayLine] = ctx.state["lines"]
        rdir = ctx.out / f"{algorithm}-{'bulk' if with_bulk else 'quiet'}"
        rdir.mkdir(parents=True, exist_ok=True)
        b, w = exp.spec.bulk, exp.spec.workload
        drops_before = [line.stats()["dropped_queue"] for line in lines]
        bulk = Bulk(ctx, b, rdir) if with_bulk else None
        jobs = []
        bulk_report = None
        try:
            if bulk is not None:
                bulk.start()
                time.sleep(exp.spec.bulk_lead_s)  # the bulk transfer alone first
            for i, (h, cmd, rep) in enumerate(_commands(exp, algorithm, rdir)):
                jobs.append(ctx.procs.start(ctx.host(h), cmd, rep.with_suffix(".log"), rep,
                                            label=f"rank {i} on {h}"))
            errors = ctx.procs.wait_all(jobs, w.timeout_s)
        finally:
            ctx.procs.stop(*jobs)
            if bulk is not None:
                bulk_report = bulk.stop()
        time.sleep(STATS_FLUSH_S)
        reports, errs = ctx.procs.reports(jobs)
        errors += errs
        rec: dict[str, Any] = {
            "algorithm": algorithm, "bulk": with_bulk, "errors": errors,
            # frames the delay line itself dropped (its queue was full)
            "delay_line_drops": [
                {d: st["dropped_queue"][d] - before[d] for d in dly.DIRECTIONS}
                for st, before in zip((x.stats() for x in lines), drops_before, strict=True)]}
        if errors or len(reports) != len(exp.collective.ranks):
            rec["correct"] = False
            return rec
        res = summarize(reports)
        stats = [line.stats() for line in lines]
        dscp = {int(exp.collective.dscp or 0)}
        whole, _ = analysis.windows(algorithm, reports)
        start = min(float(d["start"]) for d in reports)
        end = max(float(d["end"]) for d in reports)
        coll_wan = sum(dly.bytes_in_window(st, d, start - 1.0, end + 1.0, dscp)
                       for st in stats for d in dly.DIRECTIONS)
        ranks = exp.collective.ranks
        site = exp.fabric.site_of
        if algorithm == "flat":
            payload = sum(int(d["bytes_sent"]) for d in reports
                          if site(ranks[d["rank"]]) != site(ranks[(d["rank"] + 1) % len(ranks)]))
            connections = sum(1 for i, r in enumerate(ranks)
                              if site(r) != site(ranks[(i + 1) % len(ranks)]))
        else:
            payload = sum(int(d["wan_bytes_sent"]) for d in reports)
            connections = len(reports) if len(exp.site_rings) > 1 else 0
        rec.update({
            "correct": res.correct, "digests_equal": res.digests_equal,
            "max_abs_err": res.max_abs_err, "bytes": res.bytes, "ranks": res.ranks,
            "cct_s": round(res.cct_s, 3), "algbw_bps": round(res.algbw_bps),
            "busbw_bps": round(res.busbw_bps), "busbw_factor": busbw_factor(res.ranks),
            "start": start, "end": end, "wan_frame_bytes": round(coll_wan),
            "wan_payload_bytes": payload, "wan_connections": connections,
            "wan_window": [round(whole[0], 3), round(whole[1], 3)]})
        if with_bulk:
            src_site = site(b.src)

            def bytes_in(win: tuple[float, float]) -> tuple[float, float]:
                c = bk = 0.0
                for line, st in zip(lines, stats, strict=True):
                    d = _direction(line, exp.fabric, src_site)
                    c += dly.bytes_in_window(st, d, *win, dscp)
                    bk += dly.bytes_in_window(st, d, *win, {b.dscp})
                return c, bk

            rec.update(analysis.share_record(algorithm, reports, bytes_in))
            if bulk_report is not None:
                from mininet_labs.analysis.qos import rate_in_window_bps

                rec["bulk_receiver_bps"] = round(rate_in_window_bps(bulk_report,
                                                                    *rec["share_window"]))
        return rec

    def run_report(self, exp: Any, r: dict[str, Any]) -> list[Any]:
        if "dci_rtt" in r:
            x = r["dci_rtt"]
            return [f"DCI RTT (ping, median of {x['pings']}): {x['median_ms']} ms, configured "
                    f"{x['configured_ms']} ms"]
        label = f"[{r['variant']}] {r['algorithm']} {'with bulk' if r['bulk'] else 'quiet'}"
        if "cct_s" not in r:
            return [f"{label} FAILED: {'; '.join(r['errors'])}"]
        return [f"{label}: CCT {r['cct_s']:.2f} s, WAN {r['wan_frame_bytes'] / 1e6:.3f} MB"
                + (f", DCI share {r['wan_share']}" if r["bulk"] else "")
                + ("" if r["correct"] else " WRONG RESULT")]

    def summarize(self, exp: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
        s = analysis.summary(records, exp.spec.workload.bytes, len(exp.site_rings),
                             len(exp.site_rings[0]), len(exp.collective.ranks),
                             exp.configured_share, exp.spec.tolerance)
        s["dci_rtt"] = next((r["dci_rtt"] for r in records if "dci_rtt" in r), None)
        s["wan_links"] = [{"a": ln.a, "b": ln.b, "rate_bps": ln.capacity_bps,
                           "one_way_delay_us": ln.latency_us, "loss_percent": ln.loss_percent}
                          for ln in exp.fabric.wan_links]
        return s

    def verdicts(self, exp: Any, records: list[dict[str, Any]],
                 summary: dict[str, Any]) -> list[Verdict]:
        return analysis.verdicts(summary, exp.spec.workload.bytes)

    def report(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any]
               ) -> list[Any]:
        return [analysis.table(records, summary, exp.configured_share,
                               f"{exp.spec.name}: {exp.collective.name} "
                               f"({len(exp.collective.ranks)} ranks, {summary['sites']} sites x "
                               f"{summary['ranks_per_site']}), "
                               f"{exp.spec.workload.bytes / 1e6:g} MB per rank")]

    def plots(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any],
              out: Path) -> list[Path]:
        path = out / "cross_dc.png"
        analysis.plot(records, path)
        return [path]


LAB = CrossDc()
