"""``kind: ina-allreduce``: workers on one BMv2 switch running ``p4/aggregation`` train a
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
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from controller.ina.job import JobSpec, WorkerSpec, route_entry
from controller.ina.program import ELEMS, INA_UDP_PORT
from controller.model.topology import Fabric, Host, Link, Switch
from controller.units import UnitError, parse_rate_bps
from controller.yamlsrc import Document
from mininet_labs.analysis import ina as analysis
from mininet_labs.analysis.verdict import Verdict
from mininet_labs.lab.collectives import finish_ring, start_ring
from mininet_labs.lab.counters import PortCounters
from mininet_labs.lab.interface import Lab, RunContext, Variant
from mininet_labs.lab.p4net import grpc_targets
from mininet_labs.lab.requirements import Requirement, aggregation_p4_built
from mininet_labs.lab.schema import Bmv2LabSpec, Experiment, ExperimentSpec, StrictModel, validate_spec
from mininet_labs.workloads.ina_mlp import MlpSpec

SWITCH = "s1"
DEVICE_ID = 1
SERVICE_IPV4, SERVICE_MAC = "10.0.0.254", "02:00:00:00:00:fe"
WORKER_UDP_BASE = 40000
RING_DST_PORT = 29500
RING_SRC_BASE = 29600
START_DELAY_S = 3.0  # every worker starts its first all-reduce at the same instant, this far ahead


class ModelSpec(StrictModel):
    """The MLP of :mod:`mininet_labs.workloads.ina_mlp`: layer widths, batch, seed."""

    layers: Annotated[tuple[Annotated[int, Field(ge=1, le=4096)], ...], Field(min_length=2)] = \
        (64, 128, 64, 10)
    batch: Annotated[int, Field(ge=1, le=4096)] = 64
    seed: Annotated[int, Field(ge=0)] = 1


class InaLabSpec(Bmv2LabSpec):
    """Emulation settings: host MTU, how long workers may take, whether BMv2 writes its log."""

    mtu_bytes: Annotated[int, Field(ge=1280, le=9000)] = 1500
    run_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 300.0


class Spec(ExperimentSpec):
    kind: Literal["ina-allreduce"]
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


@dataclass(frozen=True, kw_only=True)
class InaExperiment(Experiment):
    """A validated ina-allreduce experiment and the one-switch fabric it runs on."""

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


def job_spec(exp: Any) -> JobSpec:
    return JobSpec(exp.spec.job_id, tuple(
        WorkerSpec(i, h.ipv4, h.mac, WORKER_UDP_BASE + i, h.port)
        for i, h in enumerate(exp.fabric.hosts)), exp.spec.pool_size, SERVICE_IPV4, SERVICE_MAC)


async def _control(address: str, action: str, exp: Any) -> dict[str, Any]:
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


def control(address: str, action: str, exp: Any) -> dict[str, Any]:
    return asyncio.run(_control(address, action, exp))


class InaAllreduce(Lab):
    kind = "ina-allreduce"
    spec_model = Spec
    network = "bmv2-star"
    plot_names = ("ina.png",)

    def load(self, doc: Document) -> InaExperiment:
        spec = validate_spec(Spec, doc)
        fabric = star_fabric(spec.name, spec.workers, parse_rate_bps(spec.link_rate))
        return InaExperiment(spec=spec, path=Path(doc.file), fabric=fabric)

    def describe(self, exp: Any) -> str:
        x = analysis.expected_bytes(exp)
        return (f"{exp.spec.workers} workers on one BMv2 switch; MLP {list(exp.spec.model.layers)}"
                f" = {x['parameters']} parameters, {x['blocks']} packets of {ELEMS}; expected "
                f"bytes per worker vs ring {x['ratio']:.3f} (payload alone "
                f"{x['payload_ratio']:.3f})")

    def requirements(self, exp: Any) -> list[Requirement]:
        return [aggregation_p4_built()]

    def setup(self, ctx: RunContext) -> None:
        for h in ctx.net.hosts:
            h.setARP(SERVICE_IPV4, SERVICE_MAC)
        ctx.state["address"] = grpc_targets(ctx.net)[SWITCH]
        control(ctx.state["address"], "setup", ctx.exp)

    def variants(self, exp: Any) -> list[Variant]:
        return [Variant("ina", None, runs=(*analysis.VARIANTS, "ring"))]

    def run(self, ctx: RunContext, key: Any) -> dict[str, Any]:
        return self._ring(ctx) if key == "ring" else self._ina(ctx, key)

    def _ina(self, ctx: RunContext, variant: str) -> dict[str, Any]:
        """One aggregation run (``clean`` or ``lossy``); returns its record."""
        exp, s = ctx.exp, ctx.exp.spec
        address = ctx.state["address"]
        rdir = ctx.out / variant
        counters = PortCounters(ctx.net, exp.fabric)
        names = [h.name for h in exp.fabric.hosts]
        region = control(address, "create", exp)
        loss = s.loss if variant == "lossy" else 0.0
        before = counters.read(names)
        start_at = time.time() + START_DELAY_S
        jobs = []
        for i, h in enumerate(exp.fabric.hosts):
            rep = rdir / f"worker{i}.json"
            cmd = [sys.executable, "-m", "mininet_labs.workloads.ina_worker", "--worker-id", str(i),
                   "--workers", str(s.workers), "--job-id", str(s.job_id), "--pool",
                   str(s.pool_size), "--switch-ip", SERVICE_IPV4, "--switch-port",
                   str(INA_UDP_PORT), "--bind-ip", h.ipv4, "--udp-port", str(WORKER_UDP_BASE + i),
                   "--steps", str(s.steps), "--layers", ",".join(map(str, s.model.layers)),
                   "--batch", str(s.model.batch), "--seed", str(s.model.seed), "--loss",
                   str(loss), "--timeout-ms", str(s.timeout_ms), "--start-at", f"{start_at:.3f}",
                   "--out", str(rep)]
            jobs.append(ctx.procs.start(ctx.host(h.name), cmd, rdir / f"worker{i}.log", rep,
                                        label=f"worker {i}"))
        errors = ctx.procs.wait_all(jobs, s.lab.run_timeout_s)
        docs, errs = ctx.procs.reports(jobs)
        errors += errs
        after = counters.read(names)
        after_sw = control(address, "finish", exp)
        prev = region.pop("before")
        switch = {k: {c: v - prev[k].get(c, 0) for c, v in after_sw[k].items()} for k in after_sw}
        rec: dict[str, Any] = {"run": variant, "loss_injected": loss, "region": region,
                               "errors": errors, "switch": switch}
        if errors or len(docs) != s.workers:
            rec["correct"] = False
            return rec
        for d in docs:
            errors += [f"worker {d['worker_id']}: {st['error']}" for st in d["steps"]
                       if "error" in st]
        steps = [[st for st in d["steps"] if "error" not in st] for d in docs]
        per_step_s = [max(d[k]["seconds"] for d in steps) for k in range(min(map(len, steps)))]
        tx = [after[n][1] - before[n][1] for n in names]
        rx = [after[n][0] - before[n][0] for n in names]
        elems = [st["elements"] for d in steps for st in d]
        within = sum(st["within_bound"] * st["elements"] for d in steps for st in d) / max(1, sum(elems))
        exact = sum(st["exact"] * st["elements"] for d in steps for st in d) / max(1, sum(elems))
        stats = [d["stats"] for d in docs]
        rec.update({
            "correct": not errors and all(d["ok"] for d in docs)
            and len({d["param_digest"] for d in docs}) == 1,
            "errors": errors, "within_bound_rate": within, "exact_rate": exact,
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
            "frames_tx_per_worker": [x["frames_tx"] for x in stats]})
        return rec

    def _ring(self, ctx: RunContext) -> dict[str, Any]:
        """The ring all-reduce of the same number of float32 values; its bytes and CCT."""
        from controller.policy.model import Collective

        exp, s = ctx.exp, ctx.exp.spec
        counters = PortCounters(ctx.net, exp.fabric)
        names = [h.name for h in exp.fabric.hosts]
        nbytes = 4 * exp.mlp.n_params
        coll = Collective(name="ring", algorithm="ring", ranks=tuple(names))
        before = counters.read(names)
        ring = start_ring(ctx, coll, seed=s.model.seed, nbytes=nbytes, out_dir=ctx.out / "ring",
                          dst_port=RING_DST_PORT,
                          src_ports=[RING_SRC_BASE + r for r in range(len(names))])
        entry = finish_ring(ctx, ring, s.lab.run_timeout_s)
        after = counters.read(names)
        rec: dict[str, Any] = {"run": "ring", "bytes": nbytes, "errors": entry["errors"],
                               "correct": bool(entry["correct"])}
        if not entry["correct"]:
            return rec
        tx = [after[n][1] - before[n][1] for n in names]
        rx = [after[n][0] - before[n][0] for n in names]
        rec.update({"cct_s": round(entry["cct_s"], 4),
                    "payload_bytes_per_worker": [d["bytes_sent"] for d in ring.reports],
                    "tx_bytes_per_worker": tx, "rx_bytes_per_worker": rx,
                    "tx_bytes_per_worker_mean": round(sum(tx) / len(tx), 1)})
        return rec

    def run_report(self, exp: Any, r: dict[str, Any]) -> list[Any]:
        if "within_bound_rate" in r:
            return [f"[{r['run']}] within bound {r['within_bound_rate']:.6f}, bit-exact "
                    f"{r['exact_rate']:.6f}, median step {r['step_s_median'] * 1e3:.0f} ms, "
                    f"{r['retransmitted']} retransmissions, switch {r['switch']['counters']}"]
        if not r.get("correct"):
            return [f"[{r['run']}] FAILED: {'; '.join(r['errors'])}"]
        return []

    def summarize(self, exp: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
        s = analysis.summary(exp, {r["run"]: r for r in records})
        s["loss_injection"] = ("worker library (controller.ina.worker loss_tx/loss_rx): each "
                               "worker drops that fraction of the packets it sends and of the "
                               "results it receives, seeded")
        return s

    def verdicts(self, exp: Any, records: list[dict[str, Any]],
                 summary: dict[str, Any]) -> list[Verdict]:
        runs = {r["run"]: r for r in records}
        out = []
        for v in analysis.VARIANTS:
            r = runs.get(v, {})
            out.append(Verdict(f"{v}_exact", bool(r.get("correct")) and r.get("exact_rate") == 1.0
                               and r.get("within_bound_rate") == 1.0,
                               f"within bound {r.get('within_bound_rate')}, bit-exact "
                               f"{r.get('exact_rate')}, same parameters on every worker "
                               f"{r.get('same_parameters_on_all_workers')}"))
        lossy = runs.get("lossy", {})
        out.append(Verdict("lossy_retransmitted", bool(lossy.get("retransmitted")),
                           f"{lossy.get('retransmitted')} retransmissions after "
                           f"{(lossy.get('injected_drops_tx') or 0) + (lossy.get('injected_drops_rx') or 0)}"
                           " injected drops"))
        out.append(Verdict("ring_correct", bool(runs.get("ring", {}).get("correct")),
                           "the TCP ring's sums verified"))
        return out

    def report(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any]
               ) -> list[Any]:
        return [analysis.table(exp, {r["run"]: r for r in records}, summary)]

    def plots(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any],
              out: Path) -> list[Path]:
        path = out / "ina.png"
        analysis.plot(exp, {r["run"]: r for r in records}, path)
        return [path]


LAB = InaAllreduce()
