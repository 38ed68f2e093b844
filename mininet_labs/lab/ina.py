"""The ``ina-allreduce`` experiment: workers on one BMv2 switch running ``p4/aggregation`` train a
small MLP, their gradients all-reduced in the switch; then the same data size all-reduced by a
TCP ring through the same switch, for the bytes on the wire.

Example (``mininet_labs/experiments/ina_allreduce.yaml``)::

    kind: ina-allreduce
    name: ina-allreduce
    workers: 4                     # hosts h1..hN on switch ports 1..N
    link_rate: 1Gbps               # the model's host-link capacity; veths are not shaped
    model: {layers: [64, 128, 64, 10], batch: 64, seed: 1}   # mininet_labs/workloads/ina_mlp.py
    steps: 5                       # training steps = all-reduces per worker
    pool_size: 16                  # slots per job = packets each worker keeps outstanding
    timeout_ms: 200                # the worker library's retransmission timeout
    loss: 0.02                     # the lossy run's drop probability, per packet and direction
    lab: {mtu_bytes: 1500}

Network: Mininet hosts ``h1..hN`` (``10.0.0.n``, MAC ``02:00:00:00:00:0n``, static ARP, IPv6
off, TX checksum offload off) and one :mod:`BMv2 switch <mininet_labs.lab.ina_switch>` ``s1``
in its own namespace, P4Runtime on a Unix socket. The lab process is the controller: it installs
the program, ``l3_forward`` routes for the hosts (the ring's TCP traffic) and, per run, the
aggregation job through :class:`controller.ina.p4rt.InaSwitch` (deleted after the run, so the
next run starts from reset slots). Hosts reach the aggregation service at ``10.0.0.254``
(static ARP to the service MAC).

Runs, in order:

* ``clean`` and ``lossy``: every worker runs :mod:`mininet_labs.workloads.ina_worker` (all start
  their first all-reduce at the same wall-clock instant). ``lossy`` passes ``--loss``: the worker
  library drops that fraction of the packets it sends and of the results it receives (seeded;
  this kernel has no netem, and a tc filter would drop the same way on one side only). Every
  worker checks every element of every step against the float64 sum within
  :func:`controller.ina.quant.error_bound`, and bit for bit against the fixed-point sum.
* ``ring``: :mod:`mininet_labs.workloads.ring_allreduce` on the same hosts, with a buffer of
  as many float32 values as the MLP has parameters (random values: bytes on the wire depend
  only on the size).

Bytes on the wire per worker are the host interface's ``tx_bytes`` (Ethernet frames without
FCS) over the run. Expected, with ``E`` parameters, ``C = ceil(E / 64)`` blocks and a pool of
``S`` slots, per all-reduce and worker: INA sends ``C + min(S, C)`` packets (one bootstrap round
per used slot carries only exponents, :mod:`controller.ina.chunks`) of ``frame_bytes()`` = 310 B,
plus 310 B per retransmission; the ring sends ``2(N-1)/N · 4E`` payload bytes in TCP segments of
at most MSS = MTU − 52 bytes with 66 bytes of headers each, plus ACKs, the connection handshake
and the ring barrier. So the ratio is ``N / (2(N-1))`` (payload) × ``(310/256) / (1 + 66/MSS)``
(headers) × ``(C + min(S, C)) / C`` (bootstrap rounds), a little lower with the ring's ACKs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from rich.console import Console
from rich.table import Table

from controller.ina.job import JobSpec, WorkerSpec, route_entry
from controller.ina.program import BMV2_JSON, ELEMS, INA_UDP_PORT, P4INFO_TXT
from controller.ina.wire import frame_bytes
from controller.model.topology import Fabric, Host, Link, Switch
from controller.units import UnitError, parse_rate_bps
from controller.yamlsrc import load_document, validate
from mininet_labs.lab import net as labnet
from mininet_labs.lab.bmv2 import bmv2_missing_reason
from mininet_labs.lab.environment import versions
from mininet_labs.lab.experiment import ExperimentName, StrictModel
from mininet_labs.lab.processes import rank_command, start_in_host, stop_process
from mininet_labs.lab.runner import LabAborted, Results, sigterm_raises
from mininet_labs.workloads.ina_mlp import MlpSpec

__all__ = ["LabAborted", "describe", "load_experiment", "run_experiment"]

SWITCH = "s1"
DEVICE_ID = 1
SERVICE_IPV4, SERVICE_MAC = "10.0.0.254", "02:00:00:00:00:fe"
WORKER_UDP_BASE = 40000
RING_DST_PORT = 29500
RING_SRC_BASE = 29600
TCP_HEADERS_BYTES = 14 + 20 + 32  # Ethernet + IPv4 + TCP with timestamps
VARIANTS = ("clean", "lossy")


class ModelSpec(StrictModel):
    """The MLP of :mod:`mininet_labs.workloads.ina_mlp`: layer widths, batch, seed."""

    layers: Annotated[tuple[Annotated[int, Field(ge=1, le=4096)], ...], Field(min_length=2)] = \
        (64, 128, 64, 10)
    batch: Annotated[int, Field(ge=1, le=4096)] = 64
    seed: Annotated[int, Field(ge=0)] = 1


class InaLabSpec(StrictModel):
    """Emulation settings: host MTU, how long workers may take, whether BMv2 writes its log."""

    mtu_bytes: Annotated[int, Field(ge=576, le=9000)] = 1500
    run_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 300.0
    bmv2_log: bool = False


class InaExperimentSpec(StrictModel):
    kind: Literal["ina-allreduce"]
    name: ExperimentName
    description: str = ""
    workers: Annotated[int, Field(ge=2, le=16, strict=True)] = 4
    link_rate: str
    model: ModelSpec = ModelSpec()
    steps: Annotated[int, Field(ge=1, le=100, strict=True)] = 5
    pool_size: Annotated[int, Field(ge=1, le=4096, strict=True)] = 16
    job_id: Annotated[int, Field(ge=0, le=255, strict=True)] = 1
    timeout_ms: Annotated[float, Field(gt=0, le=10_000)] = 200.0
    loss: Annotated[float, Field(gt=0, lt=0.5)] = 0.02
    lab: InaLabSpec = InaLabSpec()

    @field_validator("link_rate")
    @classmethod
    def _rate(cls, v: str) -> str:
        try:
            parse_rate_bps(v)
        except UnitError as exc:
            raise ValueError(str(exc)) from None
        return v


@dataclass(frozen=True)
class InaExperiment:
    """A validated ina-allreduce experiment and the one-switch fabric it runs on."""

    spec: InaExperimentSpec
    path: Path
    fabric: Fabric

    @property
    def mlp(self) -> MlpSpec:
        m = self.spec.model
        return MlpSpec(tuple(m.layers), m.batch, m.seed)


def star_fabric(name: str, n_hosts: int, capacity_bps: int) -> Fabric:
    """``n_hosts`` hosts on one switch ``s1`` (host ``hi`` on port i; addresses as generated
    fabrics number them: ``10.0.0.i``, ``02:00:00:00:00:0i``)."""
    sw = Switch(SWITCH, "leaf", 1, 1)
    hosts = tuple(Host(f"h{i}", i, f"10.0.0.{i}", f"02:00:00:00:00:{i:02x}", SWITCH, i)
                  for i in range(1, n_hosts + 1))
    links = tuple(Link(h.name, 0, SWITCH, h.port, capacity_bps, 1.0) for h in hosts)
    return Fabric(name, "single-switch", (sw,), hosts, links)


def load_experiment(path: str | Path) -> InaExperiment:
    """Read and validate an ina-allreduce experiment (raises ConfigError, located)."""
    doc = load_document(path)
    spec = validate(InaExperimentSpec, doc)
    fabric = star_fabric(spec.name, spec.workers, parse_rate_bps(spec.link_rate))
    return InaExperiment(spec, Path(doc.file), fabric)


def expected_bytes(exp: InaExperiment) -> dict[str, Any]:
    """Bytes on the wire per worker and all-reduce, as the module docstring derives them."""
    s, n = exp.spec, exp.spec.workers
    e = exp.mlp.n_params
    c = math.ceil(e / ELEMS)
    packets = c + min(s.pool_size, c)
    ina = packets * frame_bytes()
    ring_payload = 2 * (n - 1) * 4 * e / n
    mss = s.lab.mtu_bytes - 52
    ring_frames = ring_payload + math.ceil(ring_payload / mss) * TCP_HEADERS_BYTES
    return {"parameters": e, "blocks": c, "ina_packets": packets, "ina_frame_bytes": frame_bytes(),
            "ina_bytes": ina, "ring_payload_bytes": round(ring_payload), "mss_bytes": mss,
            "ring_data_frame_bytes": round(ring_frames),
            "payload_ratio": round(n / (2 * (n - 1)), 4),
            "ratio": round(ina / ring_frames, 4)}


def describe(exp: InaExperiment) -> str:
    """One line for ``aifabric lab check``."""
    x = expected_bytes(exp)
    return (f"ok ({exp.spec.workers} workers on one BMv2 switch; MLP {list(exp.spec.model.layers)}"
            f" = {x['parameters']} parameters, {x['blocks']} packets of {ELEMS}; expected bytes "
            f"per worker vs ring {x['ratio']:.3f} (payload alone {x['payload_ratio']:.3f}))")


def lab_missing() -> list[str]:
    """Why this lab cannot run here (empty when it can)."""
    import importlib.util

    missing = []
    why = bmv2_missing_reason()
    if why:
        missing.append(why)
    for tool in ("mnexec", "ethtool"):
        if shutil.which(tool) is None:
            missing.append(f"{tool} not found")
    if importlib.util.find_spec("mininet") is None:
        missing.append("python cannot import mininet")
    if not (BMV2_JSON.exists() and P4INFO_TXT.exists()):
        missing.append("p4/aggregation/build is not compiled (make -C p4/aggregation; needs p4c)")
    return missing


# -- the network ---------------------------------------------------------------------------------
def build_network(exp: InaExperiment, grpc_socket: Path, log_dir: Path) -> Any:
    """Mininet hosts and the BMv2 switch, started; static ARP. The caller calls teardown."""
    from mininet.link import Link as MnLink
    from mininet.net import Mininet
    from mininet.node import Host as MnHost

    from mininet_labs.lab.ina_switch import bmv2_switch_class

    net = Mininet(host=MnHost, controller=None, link=MnLink, build=False, autoSetMacs=False,
                  autoStaticArp=False, waitConnected=False)
    for h in exp.fabric.hosts:
        net.addHost(h.name, ip=f"{h.ipv4}/8", mac=h.mac)
    net.addSwitch(SWITCH, cls=bmv2_switch_class(), grpc_socket=grpc_socket, device_id=DEVICE_ID,
                  log_dir=log_dir, log_file=exp.spec.lab.bmv2_log)
    for ln in exp.fabric.links:
        net.addLink(ln.a, ln.b, port1=ln.a_port, port2=ln.b_port)
    net.build()
    labnet.record_pids("host_pids", [n.pid for n in (*net.hosts, *net.switches)])
    net.start()
    net.staticArp()
    for h in net.hosts:
        eth = h.defaultIntf().name
        h.cmd(f"ip link set dev {eth} mtu {exp.spec.lab.mtu_bytes}")
        h.cmd(f"ethtool -K {eth} tx off >/dev/null 2>&1")
        h.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
        h.setARP(SERVICE_IPV4, SERVICE_MAC)
    return net


def job_spec(exp: InaExperiment) -> JobSpec:
    return JobSpec(exp.spec.job_id, tuple(
        WorkerSpec(i, h.ipv4, h.mac, WORKER_UDP_BASE + i, h.port)
        for i, h in enumerate(exp.fabric.hosts)), exp.spec.pool_size, SERVICE_IPV4, SERVICE_MAC)


async def _control(address: str, action: str, exp: InaExperiment) -> dict[str, Any]:
    """One controller session: ``setup`` (program + routes), ``create`` (returns the region and
    the counters before), or ``finish`` (read the job's counters and the drops, delete the job)."""
    from controller.ina.p4rt import InaSwitch

    logging.getLogger("finsy").setLevel(logging.ERROR)  # "gNMI is not implemented" on BMv2
    async with InaSwitch(SWITCH, address, DEVICE_ID) as sw:
        if action == "setup":
            await sw.write_entries([route_entry(h.ipv4, h.port, h.mac) for h in exp.fabric.hosts])
            return {}
        if action == "create":  # job counters are per job id and outlive a deleted job
            before = {"counters": await sw.counters(exp.spec.job_id), "drops": await sw.drops()}
            r = await sw.create_job(job_spec(exp))
            return {"base": r.base, "size": r.size, "before": before}
        out = {"counters": await sw.counters(exp.spec.job_id), "drops": await sw.drops()}
        await sw.delete_job(exp.spec.job_id)
        return out


def control(address: str, action: str, exp: InaExperiment) -> dict[str, Any]:
    return asyncio.run(_control(address, action, exp))


def iface_bytes(mininet: Any) -> dict[str, tuple[int, int]]:
    """Per host: (tx_bytes, rx_bytes) of its interface (Ethernet frames without FCS)."""
    out = {}
    for h in mininet.hosts:
        eth = h.defaultIntf().name
        tx = h.cmd(f"cat /sys/class/net/{eth}/statistics/tx_bytes").strip()
        rx = h.cmd(f"cat /sys/class/net/{eth}/statistics/rx_bytes").strip()
        out[h.name] = (int(tx), int(rx))
    return out


def _wait_all(procs: list[tuple[str, subprocess.Popen[Any], Path]], timeout_s: float,
              errors: list[str]) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    for name, p, _ in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            errors.append(f"{name} timed out after {timeout_s:.0f}s")
    docs = []
    for name, p, rep in procs:
        if p.poll() is None:
            stop_process(p)
        else:
            labnet.forget_pids("workload_pids", [p.pid])
        try:
            d = json.loads(rep.read_text())
        except (OSError, ValueError):
            errors.append(f"{name}: no report (exit {p.returncode}, see {rep.with_suffix('.log')})")
            continue
        docs.append(d)
    return docs


def teardown(mininet: Any | None) -> list[str]:
    """Stop the network (hosts, links, BMv2 by its pid) and forget its recorded pids. Touches
    nothing else: this lab creates no Open vSwitch bridge, and its veths live in its nodes'
    namespaces, which go with them. Never raises; returns what could not be stopped."""
    if mininet is None:
        return []
    left = []
    pids = [n.pid for n in (*mininet.hosts, *mininet.switches)]
    try:
        mininet.stop()
    except Exception as exc:  # noqa: BLE001 - teardown must go on
        left.append(f"net.stop() failed: {exc}")
    for sw in mininet.switches:
        proc = getattr(sw, "proc", None)
        if proc is not None and proc.poll() is None:
            left.append(f"simple_switch_grpc pid {proc.pid} still running")
    labnet.forget_pids("host_pids", pids)
    return left


# -- runs ----------------------------------------------------------------------------------------
def run_ina(exp: InaExperiment, mininet: Any, address: str, variant: str, out: Path) -> dict[str, Any]:
    """One aggregation run (``clean`` or ``lossy``); returns its record."""
    s = exp.spec
    rdir = out / variant
    rdir.mkdir(parents=True, exist_ok=True)
    region = control(address, "create", exp)
    hosts = {h.name: h for h in mininet.hosts}
    loss = s.loss if variant == "lossy" else 0.0
    before = iface_bytes(mininet)
    start_at = time.time() + 3.0
    procs = []
    for i, h in enumerate(exp.fabric.hosts):
        rep = rdir / f"worker{i}.json"
        rep.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "mininet_labs.workloads.ina_worker", "--worker-id", str(i),
               "--workers", str(s.workers), "--job-id", str(s.job_id), "--pool", str(s.pool_size),
               "--switch-ip", SERVICE_IPV4, "--switch-port", str(INA_UDP_PORT), "--bind-ip", h.ipv4,
               "--udp-port", str(WORKER_UDP_BASE + i), "--steps", str(s.steps),
               "--layers", ",".join(map(str, s.model.layers)), "--batch", str(s.model.batch),
               "--seed", str(s.model.seed), "--loss", str(loss), "--timeout-ms", str(s.timeout_ms),
               "--start-at", f"{start_at:.3f}", "--out", str(rep)]
        procs.append((f"worker {i}", start_in_host(hosts[h.name], cmd, rdir / f"worker{i}.log"), rep))
    errors: list[str] = []
    docs = _wait_all(procs, s.lab.run_timeout_s, errors)
    after = iface_bytes(mininet)
    after_sw = control(address, "finish", exp)
    prev = region.pop("before")
    switch = {k: {c: v - prev[k].get(c, 0) for c, v in after_sw[k].items()} for k in after_sw}
    rec: dict[str, Any] = {"variant": variant, "loss_injected": loss, "region": region,
                           "errors": errors, "switch": switch}
    if errors or len(docs) != s.workers:
        rec["correct"] = False
        return rec
    for d in docs:
        errors += [f"worker {d['worker_id']}: {st['error']}" for st in d["steps"] if "error" in st]
    steps = [[st for st in d["steps"] if "error" not in st] for d in docs]
    per_step_s = [max(d[k]["seconds"] for d in steps) for k in range(min(map(len, steps)))]
    tx = [after[h.name][0] - before[h.name][0] for h in exp.fabric.hosts]
    rx = [after[h.name][1] - before[h.name][1] for h in exp.fabric.hosts]
    elems = [st["elements"] for d in steps for st in d]
    within = sum(st["within_bound"] * st["elements"] for d in steps for st in d) / max(1, sum(elems))
    exact = sum(st["exact"] * st["elements"] for d in steps for st in d) / max(1, sum(elems))
    stats = [d["stats"] for d in docs]
    rec.update({
        "correct": not errors and all(d["ok"] for d in docs) and
        len({d["param_digest"] for d in docs}) == 1,
        "errors": errors,
        "within_bound_rate": within, "exact_rate": exact,
        "max_err_over_bound": max(st["max_err_over_bound"] for d in steps for st in d),
        "max_rel_err_vs_max": max(st["max_rel_err_vs_max"] for d in steps for st in d),
        "same_parameters_on_all_workers": len({d["param_digest"] for d in docs}) == 1,
        "loss_first_last": [steps[0][0]["loss"], steps[0][-1]["loss"]],
        "step_s": [round(x, 4) for x in per_step_s],
        "step_s_median": round(sorted(per_step_s)[len(per_step_s) // 2], 4),
        "packets_sent": sum(x["sent"] for x in stats),
        "retransmitted": sum(x["retransmitted"] for x in stats),
        "injected_drops_tx": sum(x["injected_drops_tx"] for x in stats),
        "injected_drops_rx": sum(x["injected_drops_rx"] for x in stats),
        "ignored_results": sum(x["ignored"] for x in stats),
        "tx_bytes_per_worker": tx, "rx_bytes_per_worker": rx,
        "tx_bytes_per_worker_per_allreduce": round(sum(tx) / len(tx) / s.steps, 1),
        "frames_tx_per_worker": [x["frames_tx"] for x in stats],
    })
    return rec


def run_ring(exp: InaExperiment, mininet: Any, out: Path) -> dict[str, Any]:
    """The ring all-reduce of the same number of float32 values; its bytes and CCT."""
    from mininet_labs.workloads.ring_allreduce import summarize

    s = exp.spec
    rdir = out / "ring"
    rdir.mkdir(parents=True, exist_ok=True)
    hosts = {h.name: h for h in mininet.hosts}
    peers = [h.ipv4 for h in exp.fabric.hosts]
    nbytes = 4 * exp.mlp.n_params
    before = iface_bytes(mininet)
    procs = []
    for r, h in enumerate(exp.fabric.hosts):
        rep = rdir / f"rank{r}.json"
        rep.unlink(missing_ok=True)
        cmd = rank_command(r, peers, nbytes, s.model.seed, 0, RING_SRC_BASE + r, RING_DST_PORT,
                           256 * 1024, rep)
        procs.append((f"rank {r}", start_in_host(hosts[h.name], cmd, rdir / f"rank{r}.log"), rep))
    errors: list[str] = []
    docs = _wait_all(procs, s.lab.run_timeout_s, errors)
    after = iface_bytes(mininet)
    errors += [f"rank {d['rank']}: {d['error']}" for d in docs if "error" in d]
    rec: dict[str, Any] = {"variant": "ring", "bytes": nbytes, "errors": errors}
    if errors or len(docs) != s.workers:
        rec["correct"] = False
        return rec
    res = summarize(docs)
    tx = [after[h.name][0] - before[h.name][0] for h in exp.fabric.hosts]
    rx = [after[h.name][1] - before[h.name][1] for h in exp.fabric.hosts]
    rec.update({"correct": res.correct, "cct_s": round(res.cct_s, 4),
                "payload_bytes_per_worker": [d["bytes_sent"] for d in docs],
                "tx_bytes_per_worker": tx, "rx_bytes_per_worker": rx,
                "tx_bytes_per_worker_mean": round(sum(tx) / len(tx), 1)})
    return rec


def summary(exp: InaExperiment, runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    x = expected_bytes(exp)
    out: dict[str, Any] = {"expected": x}
    ring = runs.get("ring", {})
    for v in VARIANTS:
        r = runs.get(v, {})
        if not r.get("correct"):
            continue
        # exact: the schedule's packets, plus this run's retransmissions, minus the packets the
        # loss injection dropped before the socket (310 B each), per worker and all-reduce
        extra = r["retransmitted"] - r["injected_drops_tx"]
        expect = x["ina_bytes"] + extra * frame_bytes() / (exp.spec.workers * exp.spec.steps)
        row = {"measured_tx_per_worker_per_allreduce": r["tx_bytes_per_worker_per_allreduce"],
               "expected_tx_per_worker_per_allreduce": round(expect, 1)}
        if ring.get("correct"):
            row["measured_ratio_vs_ring"] = round(
                r["tx_bytes_per_worker_per_allreduce"] / ring["tx_bytes_per_worker_mean"], 4)
        out[v] = row
    if ring.get("correct"):
        out["ring"] = {"measured_tx_per_worker": ring["tx_bytes_per_worker_mean"],
                       "expected_data_frames_per_worker": x["ring_data_frame_bytes"],
                       "extra_measured_bytes": round(ring["tx_bytes_per_worker_mean"]
                                                     - x["ring_data_frame_bytes"], 1)}
    return out


def table(exp: InaExperiment, runs: dict[str, dict[str, Any]], s: dict[str, Any]) -> Table:
    t = Table("run", "correct", "within bound", "bit-exact", "median step", "retx",
              "injected drops", "tx B/worker/all-reduce", "expected", "vs ring",
              title=f"{exp.spec.name}: {exp.spec.workers} workers, {exp.mlp.n_params} "
                    f"parameters, pool {exp.spec.pool_size}")
    for v in VARIANTS:
        r = runs.get(v)
        if r is None or "within_bound_rate" not in r:
            t.add_row(v, "FAILED", *[""] * 8)
            continue
        row = s.get(v, {})
        t.add_row(v, "yes" if r["correct"] else "NO", f"{r['within_bound_rate']:.6f}",
                  f"{r['exact_rate']:.6f}", f"{r['step_s_median'] * 1e3:.0f} ms",
                  str(r["retransmitted"]), str(r["injected_drops_tx"] + r["injected_drops_rx"]),
                  f"{r['tx_bytes_per_worker_per_allreduce']:.0f}",
                  f"{row.get('expected_tx_per_worker_per_allreduce', 0):.0f}",
                  f"{row['measured_ratio_vs_ring']:.3f}" if "measured_ratio_vs_ring" in row else "")
    ring = runs.get("ring")
    if ring is not None and ring.get("correct"):
        t.add_row("ring", "yes", "(own bound)", "", f"{ring['cct_s'] * 1e3:.0f} ms", "", "",
                  f"{ring['tx_bytes_per_worker_mean']:.0f}",
                  f"{s['expected']['ring_data_frame_bytes']} + ACKs", "1")
    elif ring is not None:
        t.add_row("ring", "FAILED", *[""] * 8)
    return t


def plot(exp: InaExperiment, runs: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.6))
    names, vals = [], []
    for v in (*VARIANTS, "ring"):
        r = runs.get(v, {})
        if r.get("correct"):
            names.append(v)
            vals.append(r.get("tx_bytes_per_worker_per_allreduce", r.get("tx_bytes_per_worker_mean", 0)))
    a1.bar(names, [x / 1e3 for x in vals], color=["C0", "C1", "C2"][:len(names)])
    a1.set_ylabel("kB sent per worker per all-reduce")
    a1.set_title("bytes on the wire")
    for v in VARIANTS:
        r = runs.get(v, {})
        if r.get("step_s"):
            a2.plot(range(len(r["step_s"])), [x * 1e3 for x in r["step_s"]], "o-", label=v)
    a2.set_xlabel("training step")
    a2.set_ylabel("all-reduce time, ms (slowest worker)")
    a2.legend()
    fig.suptitle(f"{exp.spec.name}: {exp.spec.workers} workers on BMv2")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run_experiment(experiment_path: str | Path, out_dir: str | Path,
                   console: Console | None = None) -> Results:
    """Run an ina-allreduce experiment; writes ``OUT/results.json`` and ``OUT/ina.png``.

    ``ok`` when both aggregation runs were exact (every element within the bound and bit-exact,
    the same parameters on every worker) and the ring was correct. Raises ConfigError (nothing
    started), RuntimeError (the lab cannot run here, or the switch or controller failed; torn
    down first) or LabAborted.
    """
    console = console or Console()
    t_start = time.monotonic()
    exp = load_experiment(experiment_path)
    missing = lab_missing() + ([] if os.geteuid() == 0 else ["not running as root"])
    if missing:
        raise RuntimeError("cannot run the ina-allreduce lab here: " + "; ".join(missing))
    out = Path(out_dir).resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RuntimeError(f"cannot write results to {out}: {exc.strerror or exc}") from None
    with labnet.lab_lock():
        return _run_locked(exp, out, console, t_start)


def _run_locked(exp: InaExperiment, out: Path, console: Console, t_start: float) -> Results:
    from mininet.log import setLogLevel

    setLogLevel("error")
    runs: dict[str, dict[str, Any]] = {}
    timings: dict[str, Any] = {}
    mininet = None
    sock_dir = Path(tempfile.mkdtemp(prefix="aifina-"))
    address = f"unix:{sock_dir / 'p4rt.sock'}"
    with sigterm_raises():
        try:
            t = time.monotonic()
            mininet = build_network(exp, sock_dir / "p4rt.sock", out)
            control(address, "setup", exp)
            timings["network_and_program_s"] = round(time.monotonic() - t, 2)
            for variant in VARIANTS:
                t = time.monotonic()
                rec = run_ina(exp, mininet, address, variant, out)
                rec["wall_s"] = round(time.monotonic() - t, 2)
                runs[variant] = rec
                if "within_bound_rate" in rec:
                    console.print(
                        f"[{variant}] within bound {rec['within_bound_rate']:.6f}, bit-exact "
                        f"{rec['exact_rate']:.6f}, median step {rec['step_s_median'] * 1e3:.0f} ms,"
                        f" {rec['retransmitted']} retransmissions, switch {rec['switch']['counters']}",
                        markup=False)
                else:
                    console.print(f"[{variant}] FAILED: {'; '.join(rec['errors'])}", markup=False)
            t = time.monotonic()
            runs["ring"] = run_ring(exp, mininet, out)
            runs["ring"]["wall_s"] = round(time.monotonic() - t, 2)
        finally:
            leftovers = teardown(mininet)
            shutil.rmtree(sock_dir, ignore_errors=True)
    s = summary(exp, runs)
    data = {
        "experiment": {"kind": "ina-allreduce", "name": exp.spec.name, "file": str(exp.path),
                       "spec": exp.spec.model_dump(mode="json"),
                       "loss_injection": "worker library (controller.ina.worker loss_tx/loss_rx): "
                                         "each worker drops that fraction of the packets it sends "
                                         "and of the results it receives, seeded"},
        "runs": runs, "summary": s,
        "environment": {"versions": versions()},
        "timings": {**timings, "total_s": round(time.monotonic() - t_start, 2)},
        "teardown_removed": leftovers,
    }
    results_path, plot_path = out / "results.json", out / "ina.png"
    results_path.write_text(json.dumps(data, indent=1))
    plot(exp, runs, plot_path)
    console.print(table(exp, runs, s))
    ok = all(runs.get(v, {}).get("correct") for v in (*VARIANTS, "ring"))
    return Results(data, out, results_path, plot_path, ok=bool(ok))
