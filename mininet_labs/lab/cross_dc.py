"""The ``cross-dc`` experiment: one all-reduce across two data centres joined by a delayed,
narrow DCI link — flat ring vs hierarchical, alone and next to a bulk transfer over the same
DCI, without and with the gradient-priority policy.

Example (``mininet_labs/experiments/cross_dc.yaml``)::

    kind: cross-dc
    name: cross-dc
    topology: ../topologies/two_dc.yaml          # kind: multi-site, with wan_links
    policy: ../../policies/cross_dc.yaml         # collectives, traffic_classes, wan
    collective: grads                            # ranks site by site, same count per site
    bulk: {src: h4, dst: h8, dscp: 8, connections: 4}
    workload: {kind: ring-allreduce, bytes: 1500KB}
    relay_queue: 64KB                            # delay line queue per direction (no netem)

The DCI link of the topology runs through a :mod:`mininet_labs.lab.delay` line (netem where the
kernel has it, else the userspace relay) that delays by the link's ``delay`` one way, serialises
at its ``rate`` and counts every frame that crosses, per direction and DSCP.

Variants, each on a freshly started controller:

* ``fifo`` — the policy without ``traffic_classes``/``buffers``/``wan.links``/``wan.classes``
  (no ``--apply-qos``): the DCI port keeps the lab's HTB shaper at the link rate and one FIFO.
  Runs: flat and hierarchical with the DCI otherwise idle ("quiet"), then both again while the
  bulk transfer runs.
* ``priority`` — the policy as given with ``--apply-qos``: the DCI ports get the ``wan`` shaper
  and per-class queues with the ``wan.classes`` shares. Runs: flat and hierarchical with bulk.

Measured per run: CCT and busbw (nccl-tests definitions; busbw factor 2(n−1)/n for both
algorithms, so they compare on the same scale), correctness (every rank checks the float32 sum
against the float64 reference within Higham's bound; all digests equal), the collective's bytes
across the DCI (frames with its DSCP, both directions, from the delay line's counters: headers and
ACKs included) and the payload bytes its ranks sent across (from their reports), next to the
exact payload expectation of
:func:`mininet_labs.workloads.hierarchical_allreduce.wan_bytes_expected`. With bulk: the
collective's share of what crossed the DCI in the bulk's direction while the collective used
it, i.e. collective bytes / (collective + bulk bytes), against the configured share = its
``wan.classes`` share / (its share + the bulk class's share). The window: flat, the whole CCT
(the ring's DCI flow is its bottleneck throughout); hierarchical, the time every shard exchange
was in flight (after the last rank started it, before the first finished; the shards start and
end at different times, and outside that window the collective has less to send than its share
— the share over the whole exchange phase is recorded as ``wan_share_whole_exchange``). The
round-trip time across the DCI is measured with ping once the controller has programmed the
fabric (``dci_rtt``), next to 2 × the link's one-way delay.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from rich.console import Console
from rich.table import Table

from controller.errors import ConfigError
from controller.model.topology import Fabric, load_topology
from controller.policy import Collective, Policy
from controller.policy.model import TrafficClass
from controller.qos.validate import load_valid_policy as load_policy
from controller.te.collectives import hierarchical_groups
from controller.units import UnitError, parse_size_bytes
from controller.yamlsrc import Document, load_document, validate
from mininet_labs.lab import delay as dly
from mininet_labs.lab import net as labnet
from mininet_labs.lab.environment import probe_kernel_features, versions
from mininet_labs.lab.experiment import ExperimentName, LabSpec, StrictModel, WorkloadSpec, resolve_file
from mininet_labs.lab.processes import (
    ControllerProcess,
    free_port,
    rank_command,
    start_controller,
    start_in_host,
    stop_process,
)
from mininet_labs.lab.qos_priority import BulkSpec, class_of
from mininet_labs.lab.runner import LabAborted, Results, requirements_missing, sigterm_raises
from mininet_labs.workloads.bulk import rate_in_window_bps
from mininet_labs.workloads.hierarchical_allreduce import wan_bytes_expected
from mininet_labs.workloads.ring_allreduce import busbw_factor, source_port, summarize

__all__ = ["LabAborted", "describe", "load_experiment", "run_experiment"]

ALGORITHMS = ("flat", "hierarchical")
RUNS = (("fifo", "flat", False), ("fifo", "hierarchical", False), ("fifo", "flat", True),
        ("fifo", "hierarchical", True), ("priority", "flat", True),
        ("priority", "hierarchical", True))
RING_PORT = 29500
HIER_PORT = 29600
HEADER_ALLOWANCE = 0.05  # Ethernet/IP/TCP headers (~0.7 % at MTU 9000) and ACKs on the WAN
MIN_SHARE_WINDOW_S = 1.0  # shortest all-shards-busy window the hierarchical share is taken over


class CrossDcSpec(StrictModel):
    kind: Literal["cross-dc"]
    name: ExperimentName
    description: str = ""
    topology: Annotated[str, Field(min_length=1)]
    policy: Annotated[str, Field(min_length=1)]
    collective: str | None = None
    bulk: BulkSpec
    workload: WorkloadSpec
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 1
    bulk_lead_s: Annotated[float, Field(ge=0.5, le=30)] = 2.0
    tolerance: Annotated[float, Field(gt=0, lt=1)] = 0.10
    relay_queue_bytes: int = Field(default=64_000, alias="relay_queue")
    lab: LabSpec = LabSpec()

    @field_validator("relay_queue_bytes", mode="before")
    @classmethod
    def _queue(cls, v: Any) -> int:
        try:
            n = parse_size_bytes(v)
        except UnitError as exc:
            raise ValueError(str(exc)) from None
        if not 9000 <= n <= 16 * 2**20:
            raise ValueError("relay_queue must be between 9000B and 16MiB")
        return n


@dataclass(frozen=True)
class CrossDcExperiment:
    """A validated cross-dc experiment with its fabric, policy and derived numbers."""

    spec: CrossDcSpec
    path: Path
    topology_path: Path
    policy_path: Path
    fabric: Fabric
    policy: Policy
    collective: Collective
    site_rings: tuple[tuple[str, ...], ...]
    shard_rings: tuple[tuple[str, ...], ...]
    collective_class: TrafficClass
    bulk_class: TrafficClass
    configured_share: float




def experiment_from_document(doc: Document) -> CrossDcExperiment:
    """Validate and cross-check (raises ConfigError, every problem located)."""
    spec = validate(CrossDcSpec, doc)
    base = Path(doc.file).resolve().parent
    topo_path = resolve_file(doc, base, "topology", spec.topology)
    pol_path = resolve_file(doc, base, "policy", spec.policy)
    fabric = load_topology(topo_path)
    if not fabric.wan_links:
        raise ConfigError([doc.problem(("topology",), f"{fabric.name} has no wan_links (use "
                                                      "kind: multi-site)")])
    too_long = [f"{s.name}-eth{p}" for s in fabric.switches
                for p in [max((ln.port_of(s.name) for ln in fabric.links
                               if s.name in (ln.a, ln.b)), default=0)]
                if len(f"{s.name}-eth{p}") > 15]
    if too_long:
        raise ConfigError([doc.problem(("topology",), f"interface names longer than 15 "
                                                      f"characters: {', '.join(too_long)}; use "
                                                      "shorter site names")])
    policy = load_policy(pol_path, fabric)
    names = [c.name for c in policy.collectives]
    cname = spec.collective or (names[0] if len(names) == 1 else None)
    coll = next((c for c in policy.collectives if c.name == cname), None)
    if coll is None:
        raise ConfigError([doc.problem(("collective",) if spec.collective else ("policy",),
                                       f"name one of the policy's collectives ({', '.join(names)})"
                                       if names else f"{pol_path} declares no collectives")])
    try:
        site_rings, shard_rings = hierarchical_groups(coll.ranks, fabric.site_of)
    except ValueError as exc:
        raise ConfigError([doc.problem(("collective",), str(exc))]) from None
    if len(site_rings) < 2 or tuple(r for g in site_rings for r in g) != coll.ranks:
        raise ConfigError([doc.problem(("collective",), f"{coll.name}'s ranks must span sites "
                                                        "and be listed site by site")])
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
        raise ConfigError([doc.problem(("bulk", "dscp"), f"DSCP {spec.bulk.dscp} must fall in a "
                                                         "different traffic class from the "
                                                         f"collective's DSCP {coll.dscp}")])
    shares = {wc.class_name: wc.share_percent for wc in (policy.wan.classes if policy.wan else ())}
    if cclass.name not in shares or bclass.name not in shares:
        raise ConfigError([doc.problem(("policy",), f"the policy's wan.classes must give shares "
                                                    f"to {cclass.name} and {bclass.name}")])
    configured = shares[cclass.name] / (shares[cclass.name] + shares[bclass.name])
    return CrossDcExperiment(spec, Path(doc.file), topo_path, pol_path, fabric, policy, coll,
                             site_rings, shard_rings, cclass, bclass, configured)


def load_experiment(path: str | Path) -> CrossDcExperiment:
    """Read and validate a cross-dc experiment file (raises ConfigError)."""
    return experiment_from_document(load_document(path))


def describe(exp: CrossDcExperiment) -> str:
    """One line for ``aifabric lab check``."""
    w = exp.fabric.wan_links[0]
    return (f"ok ({exp.fabric.name}: {len(exp.site_rings)} sites x {len(exp.site_rings[0])} "
            f"ranks of {exp.collective.name}; DCI {w.a}-{w.b} {w.capacity_bps / 1e6:g} Mbit/s, "
            f"{w.latency_us / 1e3:g} ms one way; configured share {exp.configured_share:.2f})")


def fifo_policy(exp: CrossDcExperiment, out: Path) -> Path:
    """The policy without its QoS (``traffic_classes``, ``pfc``, ``ecn``, ``buffers``,
    ``shaping``, ``wan.links``, ``wan.classes``), written to ``out/policy-fifo.yaml``."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    data = yaml.load(exp.policy_path.read_text())
    for key in ("traffic_classes", "pfc", "ecn", "buffers", "shaping"):
        data.pop(key, None)
    if "wan" in data:
        for key in ("links", "classes"):
            data["wan"].pop(key, None)
    path = out / "policy-fifo.yaml"
    with path.open("w") as f:
        f.write(f"# {exp.policy_path} without its QoS sections (written by the lab)\n")
        yaml.dump(data, f)
    load_policy(path, exp.fabric)
    return path


# -- the network ------------------------------------------------------------------------------
def splice_delay_lines(exp: CrossDcExperiment, mininet: Any, out: Path, netem: bool
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
    host = next(h for h in mininet.hosts if h.name == src)
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


def run_once(exp: CrossDcExperiment, mininet: Any, lines: list[dly.DelayLine], variant: str,
             algorithm: str, with_bulk: bool, out: Path) -> dict[str, Any]:
    """One collective (with or without the bulk transfer); returns its record."""
    hosts = {h.name: h for h in mininet.hosts}
    rdir = out / variant / f"{algorithm}-{'bulk' if with_bulk else 'quiet'}"
    rdir.mkdir(parents=True, exist_ok=True)
    b, w = exp.spec.bulk, exp.spec.workload
    py = [sys.executable, "-m", "mininet_labs.workloads.bulk"]
    recv_out = rdir / "bulk-recv.json"
    recv_out.unlink(missing_ok=True)
    bulk_procs = []
    errors: list[str] = []
    procs = []
    drops_before = [line.stats()["dropped_queue"] for line in lines]
    try:
        if with_bulk:
            bulk_procs.append(start_in_host(hosts[b.dst], [*py, "recv", "--port", str(b.port),
                                                           "--connections", str(b.connections),
                                                           "--out", str(recv_out)],
                                            rdir / "bulk-recv.log"))
            bulk_procs.insert(0, start_in_host(
                hosts[b.src], [*py, "send", "--dst", exp.fabric.host_by_name[b.dst].ipv4,
                               "--port", str(b.port), "--connections", str(b.connections),
                               "--dscp", str(b.dscp)], rdir / "bulk-send.log"))
            time.sleep(exp.spec.bulk_lead_s)
        for h, cmd, rep in _commands(exp, algorithm, rdir):
            rep.unlink(missing_ok=True)
            procs.append((h, start_in_host(hosts[h], cmd, rep.with_suffix(".log")), rep))
        deadline = time.monotonic() + w.timeout_s
        for h, p, _ in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                errors.append(f"rank on {h} timed out after {w.timeout_s:.0f}s")
            labnet.forget_pids("workload_pids", [p.pid])
    finally:
        for _, p, _ in procs:
            if p.poll() is None:
                stop_process(p)
        for p in bulk_procs:
            stop_process(p)
    time.sleep(1.5)  # the delay lines write their counters every second
    reports = []
    for h, p, rep in procs:
        try:
            d = json.loads(rep.read_text())
        except (OSError, ValueError):
            errors.append(f"rank on {h}: no report (exit {p.returncode}, {rep.with_suffix('.log')})")
            continue
        if "error" in d:
            errors.append(f"rank on {h}: {d['error']}")
            continue
        reports.append(d)
    rec: dict[str, Any] = {"variant": variant, "algorithm": algorithm, "bulk": with_bulk,
                           "errors": errors,
                           # frames the delay line itself dropped (its queue was full): the
                           # switch port sent faster than the line's rate for a while
                           "delay_line_drops": [
                               {d: st["dropped_queue"][d] - before[d] for d in dly.DIRECTIONS}
                               for st, before in zip((x.stats() for x in lines), drops_before,
                                                     strict=True)]}
    if errors or len(reports) != len(exp.collective.ranks):
        rec["correct"] = False
        return rec
    res = summarize(reports)
    start = min(float(d["start"]) for d in reports)
    end = max(float(d["end"]) for d in reports)
    stats = [line.stats() for line in lines]
    dscp = {int(exp.collective.dscp or 0)}
    coll_wan = sum(dly.bytes_in_window(st, d, start - 1.0, end + 1.0, dscp)
                   for st in stats for d in dly.DIRECTIONS)
    if algorithm == "flat":
        site = exp.fabric.site_of
        ranks = exp.collective.ranks
        payload = sum(int(d["bytes_sent"]) for d in reports
                      if site(ranks[d["rank"]]) != site(ranks[(d["rank"] + 1) % len(ranks)]))
        connections = sum(1 for i, r in enumerate(ranks) if site(r) != site(ranks[(i + 1) % len(ranks)]))
        win = (start, end)
    else:
        payload = sum(int(d["wan_bytes_sent"]) for d in reports)
        connections = len(reports) if len(exp.site_rings) > 1 else 0
        win = (min(float(d["exchange_start"]) for d in reports),
               max(float(d["exchange_end"]) for d in reports))
    rec.update({
        "correct": res.correct, "digests_equal": res.digests_equal,
        "max_abs_err": res.max_abs_err, "bytes": res.bytes, "ranks": res.ranks,
        "cct_s": round(res.cct_s, 3), "algbw_bps": round(res.algbw_bps),
        "busbw_bps": round(res.busbw_bps), "busbw_factor": busbw_factor(res.ranks),
        "start": start, "end": end,
        "wan_frame_bytes": round(coll_wan), "wan_payload_bytes": payload,
        "wan_connections": connections, "wan_window": [round(win[0], 3), round(win[1], 3)],
    })
    if with_bulk:
        src_site = exp.fabric.site_of(b.src)

        def share(w: tuple[float, float]) -> tuple[float, float]:
            c = bulk = 0.0
            for line, st in zip(lines, stats, strict=True):
                d = _direction(line, exp.fabric, src_site)
                c += dly.bytes_in_window(st, d, *w, dscp)
                bulk += dly.bytes_in_window(st, d, *w, {b.dscp})
            return c, bulk

        if algorithm == "hierarchical":
            # while every shard exchange is in flight (all ranks started it, none finished)
            busy = (max(float(d["exchange_start"]) for d in reports),
                    min(float(d["exchange_end"]) for d in reports))
            c, bulk = share(win)
            rec["wan_share_whole_exchange"] = round(c / (c + bulk), 4) if c + bulk else None
            if busy[1] - busy[0] >= MIN_SHARE_WINDOW_S:
                win = busy
        c, bulk = share(win)
        rec["share_window"] = [round(win[0], 3), round(win[1], 3)]
        rec["wan_share"] = round(c / (c + bulk), 4) if c + bulk > 0 else None
        rec["wan_collective_bps"] = round(c * 8 / (win[1] - win[0]))
        rec["wan_bulk_bps"] = round(bulk * 8 / (win[1] - win[0]))
        try:
            rep_b = json.loads(recv_out.read_text())
            rec["bulk_receiver_bps"] = round(rate_in_window_bps(rep_b, *win))
        except (OSError, ValueError) as exc:
            rec["bulk_receiver_bps"] = None
            rec["errors"].append(f"bulk receiver: {exc}")
    return rec


# -- summary ----------------------------------------------------------------------------------
def summary(exp: CrossDcExperiment, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Expectations next to measurements, and the verdicts."""
    k, s_n = len(exp.site_rings[0]), len(exp.site_rings)
    expect = wan_bytes_expected(exp.spec.workload.bytes, s_n, k)
    get = {(r["variant"], r["algorithm"], r["bulk"]): r for r in runs if r.get("correct")}
    quiet = {a: get.get(("fifo", a, False)) for a in ALGORITHMS}
    out: dict[str, Any] = {"expected_wan_payload_bytes": expect, "ranks_per_site": k,
                           "sites": s_n, "configured_share": exp.configured_share,
                           "tolerance": exp.spec.tolerance}
    v: dict[str, Any] = {"all_correct": len(get) == len(RUNS)}
    qf, qh = quiet["flat"], quiet["hierarchical"]
    if qf and qh:
        v["payload_matches_expectation"] = all(
            abs(q["wan_payload_bytes"] - expect[a]) <= 4 * len(exp.collective.ranks) * 2
            for a, q in (("flat", qf), ("hierarchical", qh)))
        v["hierarchical_wan_bytes_within_expectation"] = (
            qh["wan_frame_bytes"] <= expect["hierarchical"] * (1 + HEADER_ALLOWANCE))
        v["flat_wan_bytes_within_expectation"] = (
            qf["wan_frame_bytes"] <= expect["flat"] * (1 + HEADER_ALLOWANCE))
        per_f = qf["wan_frame_bytes"] / max(1, qf["wan_connections"])
        per_h = qh["wan_frame_bytes"] / max(1, qh["wan_connections"])
        out["measured_per_connection_bytes"] = {"flat": round(per_f), "hierarchical": round(per_h)}
        out["measured_ratio_hierarchical_over_flat"] = round(
            qh["wan_frame_bytes"] / qf["wan_frame_bytes"], 4)
        out["expected_ratio_hierarchical_over_flat"] = round(
            expect["hierarchical"] / expect["flat"], 4)
        v["hierarchical_per_connection_le_flat_over_k"] = per_h <= per_f / k
    shares = {a: get.get(("priority", a, True), {}).get("wan_share") for a in ALGORITHMS}
    out["priority_shares"] = shares
    floor = exp.configured_share * (1 - exp.spec.tolerance)
    v["priority_keeps_configured_share"] = all(x is not None and x >= floor
                                               for x in shares.values())
    out["share_floor"] = round(floor, 4)
    out["verdicts"] = v
    return out


def table(exp: CrossDcExperiment, runs: list[dict[str, Any]], s: dict[str, Any]) -> Table:
    e = s["expected_wan_payload_bytes"]
    t = Table("variant", "algorithm", "bulk", "WAN bytes (frames)", "WAN payload",
              "expected payload", "CCT", "busbw", "DCI share", "configured", "correct",
              title=f"{exp.spec.name}: {exp.collective.name} ({len(exp.collective.ranks)} ranks, "
                    f"{s['sites']} sites x {s['ranks_per_site']}), "
                    f"{exp.spec.workload.bytes / 1e6:g} MB per rank")
    for r in runs:
        if not r.get("correct") and "cct_s" not in r:
            t.add_row(r["variant"], r["algorithm"], "yes" if r["bulk"] else "no", "failed",
                      "", "", "", "", "", "", "no")
            continue
        share = r.get("wan_share")
        t.add_row(r["variant"], r["algorithm"], "yes" if r["bulk"] else "no",
                  f"{r['wan_frame_bytes'] / 1e6:.3f} MB", f"{r['wan_payload_bytes'] / 1e6:.3f} MB",
                  f"{e[r['algorithm']] / 1e6:.3f} MB", f"{r['cct_s']:.2f} s",
                  f"{r['busbw_bps'] / 1e6:.2f} Mbit/s",
                  "" if share is None else f"{share:.3f}",
                  f"{exp.configured_share:.3f}" if r["variant"] == "priority" and r["bulk"]
                  else ("none (FIFO)" if r["bulk"] else ""),
                  "yes" if r["correct"] else "NO")
    return t




def plot(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in runs if "cct_s" in r]
    labels = [f"{r['variant']}\n{r['algorithm'][:4]}\n{'bulk' if r['bulk'] else 'quiet'}"
              for r in ok]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    a1.bar(range(len(ok)), [r["wan_frame_bytes"] / 1e6 for r in ok])
    a1.set_xticks(range(len(ok)), labels, fontsize=7)
    a1.set_ylabel("collective bytes across the DCI (MB)")
    a2.bar(range(len(ok)), [r["cct_s"] for r in ok])
    a2.set_xticks(range(len(ok)), labels, fontsize=7)
    a2.set_ylabel("CCT (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run_experiment(experiment_path: str | Path, out_dir: str | Path,
                   console: Console | None = None) -> Results:
    """Run a cross-dc experiment; writes ``OUT/results.json`` and ``OUT/cross_dc.png``.

    ``ok`` when every run was correct and every verdict holds. Raises ConfigError (nothing
    started), RuntimeError (the lab cannot run or a component failed; torn down first) or
    LabAborted.
    """
    console = console or Console()
    t_start = time.monotonic()
    exp = load_experiment(experiment_path)
    missing = requirements_missing()
    if missing:
        raise RuntimeError("cannot run a Mininet lab here: " + "; ".join(missing))
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with labnet.lab_lock():
        return _run_locked(exp, out, console, t_start)


def _wait_qos_applied(ctl: ControllerProcess, switches: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = ctl.log_path.read_text(errors="replace")
        if all(f"[{sw}] QoS applied" in text for sw in switches):
            return
        if ctl.popen.poll() is not None:
            break
        time.sleep(0.2)
    raise TimeoutError(f"the controller did not apply QoS on {', '.join(switches)} within "
                       f"{timeout_s:.0f}s")


def _run_locked(exp: CrossDcExperiment, out: Path, console: Console, t_start: float) -> Results:
    from mininet.log import setLogLevel

    setLogLevel("error")
    names = [s.name for s in exp.fabric.switches]
    features = probe_kernel_features()
    netem = bool(features.get("sch_netem"))
    runs: list[dict[str, Any]] = []
    timings: dict[str, Any] = {}
    mininet = None
    ctl: ControllerProcess | None = None
    lines: list[dly.DelayLine] = []
    line_info: list[dict[str, Any]] = []
    dci_rtt: dict[str, Any] = {}
    with sigterm_raises():
        try:
            removed = labnet.cleanup_leftovers(names) + dly.cleanup_leftovers()
            if removed:
                console.print(f"removed leftovers of an earlier run: {', '.join(removed)}")
            t = time.monotonic()
            mininet = labnet.build_network(exp.fabric, free_port(), exp.spec.lab.mtu_bytes,
                                           exp.spec.lab.queue_packets, exp.spec.lab.htb_burst_bytes)
            lines = splice_delay_lines(exp, mininet, out, netem)
            timings["mininet_start_s"] = round(time.monotonic() - t, 2)
            why = "sch_netem" if netem else "no sch_netem on this kernel: the userspace relay"
            console.print(f"DCI delay: {lines[0].mode} ({why})", markup=False)
            dci_ends = sorted({sw for ln in exp.fabric.wan_links for sw in (ln.a, ln.b)})
            for variant in ("fifo", "priority"):
                policy = fifo_policy(exp, out) if variant == "fifo" else exp.policy_path
                extra = ["--apply-qos"] if variant == "priority" else []
                labnet.clear_switch_state(mininet)
                labnet.flush_arp(mininet)
                port = free_port()
                console.print(f"[{variant}] starting the controller"
                              f"{' with --apply-qos' if extra else ' (no QoS)'}")
                ctl = start_controller(exp.topology_path, policy, port,
                                       out / f"controller-{variant}.log",
                                       exp.spec.lab.controller_start_timeout_s, extra)
                labnet.set_controller(mininet, port)
                try:
                    t = time.monotonic()
                    labnet.ping_all(mininet, exp.fabric, exp.spec.lab.reachability_timeout_s)
                    timings[f"{variant}_reachability_s"] = round(time.monotonic() - t, 2)
                    if extra:
                        _wait_qos_applied(ctl, dci_ends, 30.0)
                    else:
                        dci_rtt = measure_dci_rtt(exp, mininet)
                        console.print(f"DCI RTT (ping, median of {dci_rtt['pings']}): "
                                      f"{dci_rtt['median_ms']} ms, configured "
                                      f"{dci_rtt['configured_ms']} ms", markup=False)
                except TimeoutError as exc:
                    raise RuntimeError(f"[{variant}] {exc} ({ctl.log_path})") from None
                for v, algorithm, bulk in RUNS:
                    if v != variant:
                        continue
                    t = time.monotonic()
                    rec = run_once(exp, mininet, lines, variant, algorithm, bulk, out)
                    rec["wall_s"] = round(time.monotonic() - t, 2)
                    runs.append(rec)
                    if ctl.popen.poll() is not None:
                        raise RuntimeError(f"[{variant}] the controller exited; {ctl.log_path}")
                    label = f"[{variant}] {algorithm} {'with bulk' if bulk else 'quiet'}"
                    if "cct_s" in rec:
                        console.print(f"{label}: CCT {rec['cct_s']:.2f} s, WAN "
                                      f"{rec['wan_frame_bytes'] / 1e6:.3f} MB"
                                      + (f", DCI share {rec['wan_share']}" if bulk else "")
                                      + ("" if rec["correct"] else " WRONG RESULT"), markup=False)
                    else:
                        console.print(f"{label} FAILED: {'; '.join(rec['errors'])}", markup=False)
                timings[f"{variant}_controller_exit"] = ctl.stop()
                ctl = None
        finally:
            if ctl is not None:
                ctl.stop()
            for line in lines:
                line.stop()
                try:
                    st = line.stats()
                    line_info.append({k: st.get(k) for k in (
                        "mode", "a", "b", "spec", "delay_us", "rate_bps", "queue_bytes",
                        "loss_percent", "received", "dropped_queue", "dropped_loss")}
                        | {"name": line.name, "ends": [line.end_a, line.end_b]})
                except (OSError, ValueError):
                    line_info.append({"name": line.name, "mode": line.mode})
            leftovers = labnet.teardown(mininet, names) + dly.cleanup_leftovers()
    s = summary(exp, runs)
    data = {
        "experiment": {"kind": "cross-dc", "name": exp.spec.name, "file": str(exp.path),
                       "topology": str(exp.topology_path), "policy": str(exp.policy_path),
                       "collective": exp.collective.name, "ranks": list(exp.collective.ranks),
                       "site_rings": [list(x) for x in exp.site_rings],
                       "shard_rings": [list(x) for x in exp.shard_rings],
                       "bulk": exp.spec.bulk.model_dump(), "bytes": exp.spec.workload.bytes,
                       "seed": exp.spec.seed, "lab": exp.spec.lab.model_dump()},
        "wan_links": [{"a": ln.a, "b": ln.b, "rate_bps": ln.capacity_bps,
                       "one_way_delay_us": ln.latency_us, "loss_percent": ln.loss_percent}
                      for ln in exp.fabric.wan_links],
        "delay_element": {"used": lines[0].mode if lines else None,
                          "netem_available": netem, "lines": line_info, "dci_rtt": dci_rtt},
        "runs": runs,
        "summary": s,
        "environment": {"kernel_features": features, "versions": versions(),
                        "kernel_features_missing": sorted(k for k, v in features.items() if not v)},
        "timings": {**timings, "total_s": round(time.monotonic() - t_start, 2)},
        "teardown_removed": leftovers,
    }
    results_path, plot_path = out / "results.json", out / "cross_dc.png"
    results_path.write_text(json.dumps(data, indent=1))
    plot(runs, plot_path)
    console.print(table(exp, runs, s))
    _print_verdicts(exp, s, console)
    ok = bool(runs) and all(bool(x) for x in s["verdicts"].values())
    return Results(data, out, results_path, plot_path, ok=ok)


def _print_verdicts(exp: CrossDcExperiment, s: dict[str, Any], console: Console) -> None:
    e, k = s["expected_wan_payload_bytes"], s["ranks_per_site"]
    v = s["verdicts"]
    yes = lambda b: "yes" if b else "NO"  # noqa: E731
    console.print(f"expected WAN payload per all-reduce of B = {exp.spec.workload.bytes} B: flat "
                  f"2*2(n-1)/n*B = {e['flat']:.0f} B, hierarchical 2(S-1)*B = "
                  f"{e['hierarchical']:.0f} B (ratio {s.get('expected_ratio_hierarchical_over_flat')}, "
                  f"measured {s.get('measured_ratio_hierarchical_over_flat')})", markup=False)
    if "measured_per_connection_bytes" in s:
        m = s["measured_per_connection_bytes"]
        console.print(f"per WAN connection: hierarchical {m['hierarchical']} B <= flat "
                      f"{m['flat']} B / k={k} = {m['flat'] / k:.0f} B: "
                      f"{yes(v['hierarchical_per_connection_le_flat_over_k'])}", markup=False)
        console.print(f"WAN bytes within expected payload + {HEADER_ALLOWANCE:.0%} headers/ACKs: "
                      f"flat {yes(v['flat_wan_bytes_within_expectation'])}, hierarchical "
                      f"{yes(v['hierarchical_wan_bytes_within_expectation'])}; payload exact: "
                      f"{yes(v['payload_matches_expectation'])}", markup=False)
    sh = s["priority_shares"]
    console.print(f"with the priority policy the collective's DCI share (configured "
                  f"{exp.configured_share:.3f}, floor {s['share_floor']:.3f}): flat {sh['flat']}, "
                  f"hierarchical {sh['hierarchical']}: "
                  f"{yes(v['priority_keeps_configured_share'])}", markup=False)
    console.print(f"all results correct sums: {yes(v['all_correct'])}", markup=False)
