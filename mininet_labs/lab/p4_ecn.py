"""Experiment kind ``ecn-marking-p4``: ECN-capable TCP through a congested BMv2 port, with and
without fabric.p4's ECN threshold (``ecn_threshold`` table → CE on ECT packets when the queue
depth a packet sees is at least the threshold).

Example (``mininet_labs/experiments/ecn_marking_p4.yaml``)::

    kind: ecn-marking-p4
    name: ecn-marking-p4
    switch: bmv2
    topology: ../topologies/leafspine_1x2x2.yaml
    policy: ../../policies/qos_lab_priority.yaml      # routing only (ECMP entries)
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
its window on ECN-Echo, RFC 3168 §6.1.2 — BBR, this machine's default, ignores CE) through
``congested``: the BMv2 egress queue of that port is limited to
``queue_rate_pps`` packets/s (``simple_switch_CLI set_queue_rate``: BMv2 counts packets, not
bytes) below the tc rate of the link behind it, so BMv2's queue, not tc's, is where packets wait
— the two queues stack, and only the first full one matters. Each repeat runs twice: ``off``
(no ``ecn_threshold`` entry) and ``on`` (``threshold_pkts`` on the congested port, priority 0).
Recorded per run, from the switch over P4Runtime: CE marks (``ecn_marked``) and the queue depth
histogram (``queue_depth_hist``) of that queue; from iperf3: throughput and retransmissions.

The lab programs the switches itself (it is the P4Runtime primary: it writes the threshold
between runs), from the same encoder ``aifabric p4 controller`` uses; hosts use static ARP.
``ok``: marks only with the threshold, and the threshold lowers the mean queue depth.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field
from rich.console import Console

from controller.errors import ConfigError
from controller.model.topology import Fabric, load_topology
from controller.policy import Policy
from controller.qos.validate import load_valid_policy as load_policy
from controller.yamlsrc import load_document, validate
from mininet_labs.lab import net as labnet
from mininet_labs.lab.bmv2 import thrift_cli_command
from mininet_labs.lab.experiment import StrictModel, resolve_file
from mininet_labs.lab.p4_runner import P4LabSpec, build_network, requirements_missing
from mininet_labs.lab.runner import Results, sigterm_raises

KIND = "ecn-marking-p4"
IPERF_PORT = 5201


class CongestedPort(StrictModel):
    switch: str
    port: Annotated[int, Field(ge=1, le=510)]
    queue_rate_pps: Annotated[int, Field(ge=10, le=100_000)]


class EcnLabSpec(P4LabSpec):
    mtu_bytes: Annotated[int, Field(ge=1280, le=9000)] = 1500


class EcnExperimentSpec(StrictModel):
    kind: Literal["ecn-marking-p4"]
    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    description: str = ""
    switch: Literal["bmv2"] = "bmv2"
    topology: Annotated[str, Field(min_length=1)]
    policy: Annotated[str, Field(min_length=1)]
    senders: Annotated[tuple[str, ...], Field(min_length=1)]
    receiver: str
    congested: CongestedPort
    threshold_pkts: Annotated[int, Field(ge=0, le=2**19 - 1)]
    seconds: Annotated[float, Field(gt=0, le=120)] = 8.0
    congestion_control: Literal["cubic", "reno", "dctcp"] = "cubic"
    repeats: Annotated[int, Field(ge=1, le=10)] = 1
    lab: EcnLabSpec = EcnLabSpec()


@dataclass(frozen=True)
class EcnExperiment:
    spec: EcnExperimentSpec
    path: Path
    topology_path: Path
    policy_path: Path
    fabric: Fabric
    policy: Policy


def load_experiment(path: str | Path) -> EcnExperiment:
    """Read and validate an ``ecn-marking-p4`` file. Raises ConfigError (located)."""
    doc = load_document(path)
    spec = validate(EcnExperimentSpec, doc)
    base = Path(doc.file).resolve().parent
    topo = resolve_file(doc, base, "topology", spec.topology)
    pol = resolve_file(doc, base, "policy", spec.policy)
    fabric = load_topology(topo)
    for i, h in enumerate((*spec.senders, spec.receiver)):
        if h not in fabric.host_by_name:
            where = ("receiver",) if i == len(spec.senders) else ("senders", i)
            raise ConfigError([doc.problem(where, f"{h} is not a host of {fabric.name}")])
    if (spec.congested.switch, spec.congested.port) not in fabric.port_map:
        raise ConfigError([doc.problem(("congested",), f"{spec.congested.switch} has no port "
                                                       f"{spec.congested.port}")])
    return EcnExperiment(spec, Path(doc.file), topo, pol, fabric, load_policy(pol, fabric))


def describe(exp: EcnExperiment) -> str:
    s = exp.spec
    return (f"ok ({exp.fabric.name} on BMv2; {', '.join(s.senders)} -> {s.receiver} through "
            f"{s.congested.switch} port {s.congested.port} at {s.congested.queue_rate_pps} "
            f"packets/s; threshold {s.threshold_pkts} packets vs none)")


# -- P4Runtime (the lab is the primary client) -------------------------------------------------
async def _program(exp: EcnExperiment, targets: dict[str, str], threshold: int | None) -> None:
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
            await sw.reconcile(state)


async def _queue_stats(exp: EcnExperiment, address: str) -> dict[str, Any]:
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


def _thrift(mininet: Any, switch: str, commands: str) -> str:
    found = thrift_cli_command()
    if found is None:
        raise RuntimeError("simple_switch_CLI with a Python that has the thrift module not found "
                           "(Debian python3-thrift); the lab needs it for set_queue_rate")
    argv, env = found
    import os

    node = mininet.get(switch)
    p = node.popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                   stderr=subprocess.STDOUT, text=True, env={**os.environ, **env})
    out, _ = p.communicate(commands, timeout=30)
    if p.returncode != 0:
        raise RuntimeError(f"{switch}: simple_switch_CLI failed: {out[-800:]}")
    return str(out)


def _iperf_runs(exp: EcnExperiment, mininet: Any, run_dir: Path) -> list[dict[str, Any]]:
    s = exp.spec
    recv = mininet.get(s.receiver)
    servers = []
    for i, _ in enumerate(s.senders):
        servers.append(recv.popen(["iperf3", "-s", "-1", "-p", str(IPERF_PORT + i)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    labnet.record_pids("workload_pids", [p.pid for p in servers])
    time.sleep(0.5)
    clients = []
    dst = exp.fabric.host_by_name[s.receiver].ipv4
    for i, h in enumerate(s.senders):
        out = run_dir / f"iperf-{h}.json"
        with open(out, "w") as f:
            clients.append((h, out, mininet.get(h).popen(
                ["iperf3", "-c", dst, "-p", str(IPERF_PORT + i), "-t", str(s.seconds), "-J",
                 "-C", s.congestion_control],
                stdout=f, stderr=subprocess.STDOUT)))
    labnet.record_pids("workload_pids", [p.pid for _, _, p in clients])
    time.sleep(min(3.0, s.seconds / 2))
    # the senders' TCP state mid-run: "ecn" (negotiated), "ecnseen" (CE seen), cwnd, rtt
    ss = {h: mininet.get(h).cmd(f"ss -tinH dst {dst}").strip() for h in s.senders}
    (run_dir / "ss.txt").write_text("\n".join(f"{h}: {v}" for h, v in ss.items()) + "\n")
    res = []
    for h, out, p in clients:
        try:
            p.wait(timeout=s.seconds + 30)
        except subprocess.TimeoutExpired:
            labnet.kill_pid(p.pid, grace_s=1.0)
        try:
            doc = json.loads(out.read_text())
            sent = doc["end"]["sum_sent"]
            res.append({"sender": h, "bps": round(sent["bits_per_second"]),
                        "retransmits": sent.get("retransmits")})
        except (OSError, ValueError, KeyError) as e:
            res.append({"sender": h, "error": f"no iperf3 report ({e}); see {out}"})
    for p in servers:
        if p.poll() is None:
            labnet.kill_pid(p.pid, grace_s=1.0)
    labnet.forget_pids("workload_pids", [p.pid for p in servers] + [p.pid for _, _, p in clients])
    return res


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


def run_experiment(experiment_path: str | Path, out_dir: str | Path,
                   console: Console | None = None) -> Results:
    """Run an ``ecn-marking-p4`` file (OUT/results.json, OUT/queue_depth.png).

    Raises ConfigError (invalid file) or RuntimeError (cannot run here, or the lab failed)."""
    console = console or Console()
    t0 = time.monotonic()
    exp = load_experiment(experiment_path)
    missing = requirements_missing() + ([] if shutil.which("iperf3") else ["iperf3 not found"])
    if missing:
        raise RuntimeError("cannot run the BMv2 ECN lab here: " + "; ".join(missing))
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with labnet.lab_lock():
        return _run_locked(exp, out, console, t0)


def _run_locked(exp: EcnExperiment, out: Path, console: Console, t0: float) -> Results:
    from mininet.log import setLogLevel

    setLogLevel("error")
    s = exp.spec
    names = [sw.name for sw in exp.fabric.switches]
    sock_dir = Path(tempfile.mkdtemp(prefix="aifp4-"))
    runs: list[dict[str, Any]] = []
    mininet = None
    leftovers: list[str] = []
    with sigterm_raises():
        try:
            labnet.cleanup_leftovers(names)
            mininet = build_network(exp.fabric, sock_dir, out / "bmv2", s.lab)
            targets = {sw.name: sw.grpc_address for sw in mininet.switches}
            for h in mininet.hosts:
                h.cmd("sysctl -qw net.ipv4.tcp_ecn=1")
            _thrift(mininet, s.congested.switch,
                    f"set_queue_rate {s.congested.queue_rate_pps} {s.congested.port}\n")
            c_addr = targets[s.congested.switch]
            for rep in range(s.repeats):
                for mode in ("off", "on"):
                    asyncio.run(_program(exp, targets, s.threshold_pkts if mode == "on" else None))
                    run_dir = out / f"{mode}-{rep}"
                    run_dir.mkdir(parents=True, exist_ok=True)
                    before = asyncio.run(_queue_stats(exp, c_addr))
                    flows = _iperf_runs(exp, mininet, run_dir)
                    after = asyncio.run(_queue_stats(exp, c_addr))
                    rec = {"threshold": mode, "repeat": rep, "flows": flows,
                           "threshold_pkts": s.threshold_pkts if mode == "on" else None,
                           **_delta(before, after)}
                    runs.append(rec)
                    console.print(f"[{mode}] CE marks {rec['ce_marked']} of {rec['sent']} "
                                  f"packets; queue depth >= {rec['mean_depth_lower_bound_pkts']} "
                                  f"pkts on average; flows {flows}", markup=False)
        finally:
            leftovers = labnet.teardown(mininet, names)
            shutil.rmtree(sock_dir, ignore_errors=True)
    off = [r for r in runs if r["threshold"] == "off"]
    on = [r for r in runs if r["threshold"] == "on"]
    ok = (all(r["ce_marked"] == 0 for r in off) and all(r["ce_marked"] > 0 for r in on)
          and all(a["mean_depth_lower_bound_pkts"] > b["mean_depth_lower_bound_pkts"]
                  for a, b in zip(off, on, strict=True)))
    data = {"experiment": {"kind": KIND, "switch": "bmv2", "name": s.name, "file": str(exp.path),
                           **s.model_dump(exclude={"kind", "name", "switch"})},
            "runs": runs, "ok": ok, "teardown_removed": leftovers,
            "timings": {"total_s": round(time.monotonic() - t0, 2)}}
    results_path = out / "results.json"
    results_path.write_text(json.dumps(data, indent=1))
    plot_path = out / "queue_depth.png"
    plot_depths(runs, plot_path, f"{s.name}: {s.congested.switch} port {s.congested.port} at "
                                 f"{s.congested.queue_rate_pps} packets/s")
    res = Results(data, out, results_path, plot_path)
    res.ok = ok
    return res
