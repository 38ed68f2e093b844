"""Collectives of a lab run as a workload: the ring all-reduce, or real ``torch.distributed``
jobs (backend gloo over TCP) — one job per collective of the policy, one rank per host.

* ``torch-allreduce``: an nccl-tests-style sweep (all_reduce, all_gather, reduce_scatter over
  sizes), timed by torch itself (:mod:`mininet_labs.workloads.torch_dist`), algbw/busbw as
  nccl-tests PERFORMANCE.md defines them (:mod:`mininet_labs.analysis.nccl`).
* ``torch-ddp``: a small ``torch.nn`` model trained with DistributedDataParallel for a few steps on
  synthetic data with fixed seeds; step time and gradient all-reduce time per step.

Every rank runs in its Mininet host with ``MASTER_ADDR`` (the host of rank 0) and
``MASTER_PORT``, and ``GLOO_SOCKET_IFNAME=<host>-eth0`` (gloo binds to that interface). With
``register: true`` (and a controller serving its API) every rank first registers its process
group with the controller through the northbound client
(:func:`controller.northbound.client.register_process_group`) and trains only once the pinned
entries are in force. The hosts reach the controller's gRPC port, which listens on 127.0.0.1 of
the root namespace, through a Unix socket (:mod:`mininet_labs.lab.grpc_bridge`: namespaces share
the file system). gloo's ring all-reduce sends rank i → rank i − 1, so that is the ring the
ranks register (:func:`mininet_labs.workloads.torch_dist.gloo_ring_order`). gloo listens on
ephemeral ports, so pinned entries match host pairs (IPv4 source and destination), not ports;
and under ECMP each run hashes differently, whatever the seed.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from controller.policy import Collective
from mininet_labs.analysis.collectives import ring_bound_bps
from mininet_labs.analysis.nccl import sweep_entry
from mininet_labs.lab.collectives import RingRun, finish_ring, start_ring
from mininet_labs.lab.interface import RunContext
from mininet_labs.lab.processes import Job
from mininet_labs.lab.requirements import Requirement, torch_installed
from mininet_labs.lab.schema import RingWorkloadSpec, StrictModel, _size_bytes

MASTER_PORT_BASE = 29400


class TorchAllreduceSpec(StrictModel):
    """``kind: torch-allreduce``: ``collectives`` (of all_reduce, all_gather, reduce_scatter) at
    every size of ``sizes`` (bytes per rank, with a unit), ``iters`` timed iterations after
    ``warmup`` untimed ones; ``register`` the process group with the controller first."""

    kind: Literal["torch-allreduce"]
    sizes: Annotated[tuple[int, ...], Field(min_length=1)]
    collectives: Annotated[tuple[Literal["all_reduce", "all_gather", "reduce_scatter"], ...],
                           Field(min_length=1)] = ("all_reduce", "all_gather", "reduce_scatter")
    iters: Annotated[int, Field(ge=1, le=1000)] = 5
    warmup: Annotated[int, Field(ge=0, le=100)] = 1
    register_group: bool = Field(default=True, alias="register")
    timeout_s: Annotated[float, Field(gt=0, le=3600)] = 600.0

    @field_validator("sizes", mode="before")
    @classmethod
    def _sizes(cls, v: Any) -> Any:
        if not isinstance(v, list | tuple):
            return v
        out = []
        for x in v:
            n = _size_bytes(x)
            if not 4 <= n <= 2 * 10**9:
                raise ValueError(f"{x}: sizes must be 4B to 2GB")
            out.append(n)
        return tuple(out)


class TorchDdpSpec(StrictModel):
    """``kind: torch-ddp``: an MLP of ``layers`` widths (``torch.nn.Linear`` + ReLU) trained with
    DistributedDataParallel for ``steps`` steps of ``batch`` synthetic samples per rank (seeded
    by the run's seed); ``bucket_cap_mb``: DDP's gradient bucket size; ``register`` as above."""

    kind: Literal["torch-ddp"]
    layers: Annotated[tuple[Annotated[int, Field(ge=1, le=8192)], ...], Field(min_length=2)] = \
        (512, 1024, 1024, 512, 10)
    steps: Annotated[int, Field(ge=1, le=1000)] = 3
    batch: Annotated[int, Field(ge=1, le=4096)] = 32
    bucket_cap_mb: Annotated[float, Field(gt=0, le=1024)] = 25.0
    lr: Annotated[float, Field(gt=0, le=10)] = 0.01
    register_group: bool = Field(default=True, alias="register")
    timeout_s: Annotated[float, Field(gt=0, le=3600)] = 600.0

    @property
    def n_params(self) -> int:
        """Parameters of the MLP: Σ (in·out + out) over its layers."""
        return sum(a * b + b for a, b in zip(self.layers, self.layers[1:], strict=False))


def registers(workload: Any) -> bool:
    """Whether the workload's ranks register their process group with the controller."""
    return bool(getattr(workload, "register_group", False))


def torch_requirements(workload: Any) -> list[Requirement]:
    """What a workload adds to a lab's requirements (torch for the torch workloads)."""
    return [torch_installed()] if workload.kind.startswith("torch-") else []


def torch_command(ctx: RunContext, coll: Collective, rank: int, w: Any, seed: int, port: int,
                  report: Path, register_target: str | None) -> tuple[list[str], dict[str, str]]:
    """Command line and environment of one torch rank on host ``coll.ranks[rank]``."""
    fabric = ctx.exp.fabric
    host = coll.ranks[rank]
    env = {"MASTER_ADDR": fabric.host_by_name[coll.ranks[0]].ipv4, "MASTER_PORT": str(port),
           "GLOO_SOCKET_IFNAME": f"{host}-eth0", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "mininet_labs.workloads.torch_dist", w.kind.removeprefix("torch-"),
           "--rank", str(rank), "--world", str(len(coll.ranks)), "--seed", str(seed),
           "--address", fabric.host_by_name[host].ipv4, "--timeout-s", f"{w.timeout_s:g}",
           "--out", str(report)]
    if w.kind == "torch-allreduce":
        cmd += ["--sizes", ",".join(map(str, w.sizes)), "--collectives", ",".join(w.collectives),
                "--iters", str(w.iters), "--warmup", str(w.warmup)]
    else:
        cmd += ["--layers", ",".join(map(str, w.layers)), "--steps", str(w.steps), "--batch",
                str(w.batch), "--bucket-cap-mb", f"{w.bucket_cap_mb:g}", "--lr", f"{w.lr:g}"]
    if register_target is not None:
        cmd += ["--register", register_target, "--job", ctx.exp.spec.name, "--name", coll.name]
        ctl = ctx.controller
        if ctl is None or "--insecure" in ctl.security.args:
            cmd.append("--insecure")  # the lab's controller is plain text (TLS: no client certs)
    return cmd, env


def start_collectives(ctx: RunContext, colls: Sequence[Collective], w: Any, seed: int,
                      out: Path) -> list[Any]:
    """Start every collective of ``colls`` at once (one rank per host); returns what
    :func:`finish_collectives` needs."""
    if isinstance(w, RingWorkloadSpec):
        return [start_ring(ctx, c, seed=seed, nbytes=w.bytes, out_dir=out / c.name, stream=i,
                           chunk_bytes=w.chunk_bytes, dscp=c.dscp) for i, c in enumerate(colls)]
    target = None
    if registers(w) and ctx.controller is not None and ctx.variant.name == "pinned":
        target = ctx.state["grpc_bridge"].target
    started = []
    for i, c in enumerate(colls):
        jobs = []
        for r, h in enumerate(c.ranks):
            rep = out / c.name / f"rank{r}.json"
            cmd, env = torch_command(ctx, c, r, w, seed, MASTER_PORT_BASE + i, rep, target)
            jobs.append(ctx.procs.start(ctx.host(h), cmd, out / c.name / f"rank{r}.log", rep,
                                        label=f"{c.name} rank {r}", env=env))
        started.append((c, jobs, target is not None))
    return started


def unregister(ctx: RunContext, collective: str) -> None:
    """Take a run's registration back (the next run registers the same host pairs again); a
    registration that never happened (the run failed first) is no error."""
    import grpc

    assert ctx.controller is not None
    try:
        ctx.controller.client.unregister(collective)
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.NOT_FOUND:
            raise RuntimeError(ctx.controller.failure(f"unregistering {collective}", exc)) from None


def finish_collectives(ctx: RunContext, started: list[Any], w: Any) -> list[dict[str, Any]]:
    """Wait for every collective started by :func:`start_collectives`; their results entries."""
    if isinstance(w, RingWorkloadSpec):
        out = []
        for run in started:
            assert isinstance(run, RingRun)
            out.append(finish_ring(ctx, run, w.timeout_s))
        return out
    entries = []
    all_jobs: list[Job] = [j for _, jobs, _ in started for j in jobs]
    late = ctx.procs.wait_all(all_jobs, w.timeout_s)
    for c, jobs, registered in started:
        if registered and ctx.controller is not None:
            unregister(ctx, f"{ctx.exp.spec.name}.{c.name}")
        docs, errs = ctx.procs.reports(jobs)
        errs = [e for e in late if e.startswith(f"{c.name} ")] + errs
        errs += [f"{j.label} exited with code {j.popen.returncode}" for j in jobs
                 if j.popen.returncode not in (0, 1)]  # 1: the report says why
        entries.append(sweep_entry(c.name, list(c.ranks), docs, errs,
                                   ring_bound_bps(ctx.exp.fabric, c), w.kind, registered))
    return entries
