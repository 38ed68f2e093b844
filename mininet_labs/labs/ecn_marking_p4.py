"""``kind: ecn-marking-p4``: ECN-capable TCP through a congested BMv2 port, with and without
fabric.p4's ECN threshold (``ecn_threshold`` table → CE on ECT packets when the queue depth a
packet sees is at least the threshold).

Example (``mininet_labs/experiments/ecn_marking_p4.yaml``)::

    kind: ecn-marking-p4
    name: ecn-marking-p4
    switch: bmv2
    topology: ../topologies/leafspine_1x2x2.yaml
    policy: ../policies/qos_lab_priority.yaml      # routing only (ECMP entries)
    senders: [h1, h2]
    receiver: h3
    congested: {switch: leaf1, port: 3, queue_rate_pps: 400}
    threshold_pkts: 5
    seconds: 8
    congestion_control: cubic
    repeats: 1
    lab: {mtu_bytes: 1500, queue_packets: 50}

Every sender runs ``iperf3 -c receiver -C congestion_control`` (TCP, ``net.ipv4.tcp_ecn=1`` on
every host, so its packets are ECT(0); ``cubic`` by default: a loss-based algorithm that halves
its window on ECN-Echo, RFC 3168 §6.1.2 — BBR ignores CE) through ``congested``: the BMv2 egress
queue of that port drains at ``queue_rate_pps`` packets/s (``simple_switch_CLI set_queue_rate``:
BMv2 counts packets, not bytes) below the tc rate of the link behind it, so BMv2's queue, not
tc's, is where packets wait. Variants: ``off`` (no ``ecn_threshold`` entry) and ``on``
(``threshold_pkts`` on the congested port, priority 0), ``repeats`` runs each. Per run, from the
switch over P4Runtime: CE marks (``ecn_marked``) and the queue-depth histogram of that queue;
from iperf3: throughput and retransmissions.

The lab programs the switches itself (it is the P4Runtime primary: it writes the threshold
between runs), with the encoder ``aifabric p4 controller`` uses; hosts use static ARP. Verdicts:
marks only with the threshold; the threshold lowers the mean queue depth.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from controller.errors import ConfigError
from controller.testing.p4sync import sync
from controller.yamlsrc import Document
from mininet_labs.analysis.verdict import Verdict
from mininet_labs.lab.interface import Lab, RunContext, Variant
from mininet_labs.lab.p4net import grpc_targets
from mininet_labs.lab.requirements import Requirement, tool
from mininet_labs.lab.schema import Bmv2LabSpec, Experiment, FabricExperimentSpec, StrictModel
from mininet_labs.lab.wait import wait_until

IPERF_PORT = 5201


class CongestedPort(StrictModel):
    switch: str
    port: Annotated[int, Field(ge=1, le=510)]
    queue_rate_pps: Annotated[int, Field(ge=10, le=100_000)]


class EcnLabSpec(Bmv2LabSpec):
    mtu_bytes: Annotated[int, Field(ge=1280, le=9000)] = 1500


class Spec(FabricExperimentSpec):
    kind: Literal["ecn-marking-p4"]
    switch: Literal["bmv2"] = "bmv2"
    senders: Annotated[tuple[str, ...], Field(min_length=1)]
    receiver: str
    congested: CongestedPort
    threshold_pkts: Annotated[int, Field(ge=0, le=2**19 - 1)]
    seconds: Annotated[float, Field(gt=0, le=120)] = 8.0
    congestion_control: Literal["cubic", "reno", "dctcp"] = "cubic"
    repeats: Annotated[int, Field(ge=1, le=10)] = 1
    lab: EcnLabSpec = EcnLabSpec()


async def _program(exp: Experiment, targets: dict[str, str], threshold: int | None) -> None:
    from controller.drivers.p4runtime.client import P4Switch
    from controller.drivers.p4runtime.encode import qos_entries
    from controller.runtime.p4process import intended_state

    states = intended_state(exp.fabric, exp.policy)
    c = exp.spec.congested
    for name, addr in sorted(targets.items()):
        state = states[name]
        if threshold is not None and name == c.switch:
            doc = {"tables": [{"table": "ecn_threshold",
                               "match": {"egress_port": c.port, "priority": 0},
                               "action": "mark_ecn", "params": {"threshold_pkts": threshold}}]}
            state = type(state)(state.switch, state.device_id,
                                state.entries | frozenset(qos_entries(name, doc)),
                                state.members, state.groups, state.multicast)
        dpid = exp.fabric.switch_by_name[name].dpid
        async with P4Switch(name, addr, dpid, election_id=10) as sw:
            await sync(sw, state)


async def _queue_stats(exp: Experiment, address: str) -> dict[str, Any]:
    from controller.drivers.p4runtime.client import P4Switch
    from controller.drivers.p4runtime.pipeline import queue_index

    c = exp.spec.congested
    async with P4Switch(c.switch, address, exp.fabric.switch_by_name[c.switch].dpid,
                        election_id=10) as sw:
        marked = await sw.read_counter("ecn_marked", queue_index(c.port, 0))
        sent = await sw.read_counter("queue_tx", queue_index(c.port, 0))
        hist = await sw.read_queue_depth_histogram(c.port, 0)
    return {"ce_marked": marked[0], "sent": sent[0], "depth_hist": hist}


def _delta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    hist = {k: b["depth_hist"][k] - a["depth_hist"][k] for k in b["depth_hist"]}
    n = sum(hist.values())
    # mean over buckets by their lower bound: a lower estimate of the mean depth
    mean_lo = sum(k * v for k, v in hist.items()) / n if n else 0.0
    return {"ce_marked": b["ce_marked"] - a["ce_marked"], "sent": b["sent"] - a["sent"],
            "depth_hist": {str(k): v for k, v in hist.items()},
            "mean_depth_lower_bound_pkts": round(mean_lo, 2)}


def _thrift_cli() -> str | None:
    from mininet_labs.lab.bmv2 import thrift_cli_command

    return None if thrift_cli_command() else (
        "simple_switch_CLI with a Python that has the thrift module not found (Debian "
        "python3-thrift); the lab needs it for set_queue_rate")


def _thrift(net: Any, switch: str, commands: str) -> str:
    from mininet_labs.lab.bmv2 import thrift_cli_command

    found = thrift_cli_command()
    if found is None:
        raise RuntimeError(_thrift_cli() or "no simple_switch_CLI")
    argv, env = found
    p = net.get(switch).popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env={**os.environ, **env})
    out, _ = p.communicate(commands, timeout=30)
    if p.returncode != 0:
        raise RuntimeError(f"{switch}: simple_switch_CLI failed: {out[-800:]}")
    return str(out)


def plot_depths(runs: list[dict[str, Any]], path: Path, title: str) -> None:
    """Queue-depth histogram of the congested queue per run (share of packets per bucket)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(1, len(runs))
    for i, r in enumerate(runs):
        hist = r["depth_hist"]
        n = max(1, sum(hist.values()))
        xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(hist))]
        ax.bar(xs, [v / n for v in hist.values()], width,
               label=f"threshold {r['threshold']} #{r['repeat']}: {r['ce_marked']} CE")
    ax.set_xticks(range(len(runs[0]["depth_hist"])) if runs else [],
                  [f">={k}" for k in (runs[0]["depth_hist"] if runs else [])])
    ax.set_xlabel("queue depth seen at enqueue (packets)")
    ax.set_ylabel("share of packets")
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


class EcnMarkingP4(Lab):
    kind = "ecn-marking-p4"
    spec_model = Spec
    network = "bmv2"
    plot_names = ("queue_depth.png",)

    def prepare(self, doc: Document, exp: Experiment) -> Experiment:
        spec, fabric = exp.spec, exp.fabric
        for i, h in enumerate((*spec.senders, spec.receiver)):
            if h not in fabric.host_by_name:
                where = ("receiver",) if i == len(spec.senders) else ("senders", i)
                raise ConfigError([doc.problem(where, f"{h} is not a host of {fabric.name}")])
        if (spec.congested.switch, spec.congested.port) not in fabric.port_map:
            raise ConfigError([doc.problem(("congested",), f"{spec.congested.switch} has no port "
                                                           f"{spec.congested.port}")])
        return exp

    def describe(self, exp: Any) -> str:
        s = exp.spec
        return (f"{exp.fabric.name} on BMv2; {', '.join(s.senders)} -> {s.receiver} through "
                f"{s.congested.switch} port {s.congested.port} at {s.congested.queue_rate_pps} "
                f"packets/s; threshold {s.threshold_pkts} packets vs none")

    def requirements(self, exp: Any) -> list[Requirement]:
        return [tool("iperf3", "iperf3"), Requirement("simple_switch_CLI (thrift)", _thrift_cli)]

    def setup(self, ctx: RunContext) -> None:
        s = ctx.exp.spec
        for h in ctx.net.hosts:
            h.cmd("sysctl -qw net.ipv4.tcp_ecn=1")
        _thrift(ctx.net, s.congested.switch,
                f"set_queue_rate {s.congested.queue_rate_pps} {s.congested.port}\n")

    def variants(self, exp: Any) -> list[Variant]:
        runs = tuple(range(exp.spec.repeats))
        return [Variant("off", None, runs), Variant("on", None, runs)]

    def run(self, ctx: RunContext, repeat: Any) -> dict[str, Any]:
        exp, s = ctx.exp, ctx.exp.spec
        mode = ctx.variant.name
        targets = grpc_targets(ctx.net)
        asyncio.run(_program(exp, targets, s.threshold_pkts if mode == "on" else None))
        address = targets[s.congested.switch]
        before = asyncio.run(_queue_stats(exp, address))
        flows = self._iperf(ctx, ctx.out / f"repeat{repeat}")
        after = asyncio.run(_queue_stats(exp, address))
        return {"threshold": mode, "repeat": repeat, "flows": flows,
                "threshold_pkts": s.threshold_pkts if mode == "on" else None,
                **_delta(before, after)}

    def _iperf(self, ctx: RunContext, rdir: Path) -> list[dict[str, Any]]:
        s = ctx.exp.spec
        rdir.mkdir(parents=True, exist_ok=True)
        recv = ctx.host(s.receiver)
        servers = [ctx.procs.start(recv, ["iperf3", "-s", "-1", "-p", str(IPERF_PORT + i)],
                                   rdir / f"iperf-server-{i}.log", label=f"iperf3 server {i}")
                   for i in range(len(s.senders))]
        wait_until(lambda: all(f":{IPERF_PORT + i} " in recv.cmd("ss -ltnH")
                               for i in range(len(s.senders))), 10.0, "iperf3 servers to listen")
        dst = ctx.exp.fabric.host_by_name[s.receiver].ipv4
        clients = [ctx.procs.start(ctx.host(h), ["iperf3", "-c", dst, "-p", str(IPERF_PORT + i),
                                                 "-t", f"{s.seconds:g}", "-J", "-C",
                                                 s.congestion_control],
                                   rdir / f"iperf-{h}.json", label=f"iperf3 client {h}")
                   for i, h in enumerate(s.senders)]
        time.sleep(min(3.0, s.seconds / 2))  # mid-run: the senders' TCP state
        ss = {h: ctx.host(h).cmd(f"ss -tinH dst {dst}").strip() for h in s.senders}
        (rdir / "ss.txt").write_text("\n".join(f"{h}: {v}" for h, v in ss.items()) + "\n")
        ctx.procs.wait_all(clients, s.seconds + 30)
        ctx.procs.stop(*servers, grace_s=1.0)
        res = []
        for h, job in zip(s.senders, clients, strict=True):
            try:
                sent = json.loads(job.log.read_text())["end"]["sum_sent"]
                res.append({"sender": h, "bps": round(sent["bits_per_second"]),
                            "retransmits": sent.get("retransmits")})
            except (OSError, ValueError, KeyError) as e:
                res.append({"sender": h, "error": f"no iperf3 report ({e}); see {job.log}"})
        return res

    def run_report(self, exp: Any, r: dict[str, Any]) -> list[Any]:
        return [f"[{r['threshold']}] CE marks {r['ce_marked']} of {r['sent']} packets; queue "
                f"depth >= {r['mean_depth_lower_bound_pkts']} pkts on average; flows {r['flows']}"]

    def verdicts(self, exp: Any, records: list[dict[str, Any]],
                 summary: dict[str, Any]) -> list[Verdict]:
        off = [r for r in records if r["threshold"] == "off"]
        on = [r for r in records if r["threshold"] == "on"]
        return [
            Verdict("no_marks_without_threshold", all(r["ce_marked"] == 0 for r in off),
                    f"CE marks without a threshold: {[r['ce_marked'] for r in off]}"),
            Verdict("marks_with_threshold", bool(on) and all(r["ce_marked"] > 0 for r in on),
                    f"CE marks with {exp.spec.threshold_pkts} packets: "
                    f"{[r['ce_marked'] for r in on]}"),
            Verdict("threshold_lowers_queue", len(off) == len(on) and all(
                a["mean_depth_lower_bound_pkts"] > b["mean_depth_lower_bound_pkts"]
                for a, b in zip(off, on, strict=True)),
                    f"mean depth off {[r['mean_depth_lower_bound_pkts'] for r in off]}, on "
                    f"{[r['mean_depth_lower_bound_pkts'] for r in on]} packets")]

    def plots(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any],
              out: Path) -> list[Path]:
        s = exp.spec
        path = out / "queue_depth.png"
        plot_depths(records, path, f"{s.name}: {s.congested.switch} port {s.congested.port} at "
                                   f"{s.congested.queue_rate_pps} packets/s")
        return [path]


LAB = EcnMarkingP4()
