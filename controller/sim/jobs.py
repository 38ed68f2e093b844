"""Many jobs at once: a fragmented job mix, per-job slowdown and fairness, job-aware priorities.

* :func:`job_mix` places data-parallel ring jobs, an expert-parallel (MoE) all-to-all job and
  pipeline-parallel jobs on one fabric, each on hosts drawn at random from those left
  (fragmented placement: partial racks, as a busy cluster's scheduler leaves them).
* :func:`jain_index` — fairness between jobs, Jain, Chiu & Hawe, "A quantitative measure of
  fairness and discrimination for resource allocation in shared computer systems",
  DEC-TR-301, 1984, eq. (1): J = (Σ x_j)² / (n Σ x_j²), 1 when all x_j are equal, 1/n at worst;
  x_j = ideal_j / CCT_j (the share of its own link-rate ideal job j gets).
* :func:`intensity_priorities` — job-aware priorities onto at most ``queues`` strict-priority
  queues, after Crux (Cao et al., "Crux: GPU-efficient communication scheduling for deep
  learning training", SIGCOMM 2024, §3.1 Def. 2 and §4.2–4.3): a job's GPU intensity is
  I_j = W_j / t_j, its computation per iteration (GPU-seconds) over the time its traffic needs
  on its most loaded link, t_j = max_e M_{j,e} / B_e; more intense jobs get higher priority, and
  priorities are compressed onto the available queues. The compression here is by rank: jobs
  sorted by I_j are cut into ``queues`` groups of equal size (Crux compresses on the
  contention DAG, §4.3; both keep the order). CASSINI (Rajasekaran et al., NSDI 2024) instead
  time-shifts jobs' communication phases; not modelled here.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from controller.model.topology import Fabric
from controller.sim.fluid import PathIds
from controller.te.collectives import FlowDemand
from controller.te.pathindex import PathIndex
from controller.te.patterns import Traffic, all_to_all, pipeline, ring_allreduce


@dataclass(frozen=True)
class JobMix:
    """What :func:`job_mix` places: ``dp_jobs`` ring all-reduce jobs of ``dp_ranks`` ranks
    (``dp_bytes`` per rank), one ``moe_ranks``-rank all-to-all (``moe_bytes`` per rank, one
    coflow), and ``pp_jobs`` pipelines of ``pp_stages`` stages × ``pp_width`` ranks sending
    ``pp_bytes`` per boundary flow."""

    dp_jobs: int
    dp_ranks: int
    dp_bytes: float
    moe_ranks: int
    moe_bytes: float
    pp_jobs: int
    pp_stages: int
    pp_width: int
    pp_bytes: float

    @property
    def hosts_needed(self) -> int:
        return (self.dp_jobs * self.dp_ranks + self.moe_ranks
                + self.pp_jobs * self.pp_stages * self.pp_width)


def job_mix(fabric: Fabric, mix: JobMix, seed: int = 0) -> list[Traffic]:
    """The traffics of ``mix`` on ``fabric``, every job on hosts drawn at random (``random.
    Random(seed)``) from those not yet taken. Names: ``dp0``…, ``moe``, ``pp0``….

    Raises
    ------
    ValueError
        The fabric has fewer hosts than the mix needs.
    """
    hosts = [h.name for h in fabric.hosts]
    if mix.hosts_needed > len(hosts):
        raise ValueError(f"the job mix needs {mix.hosts_needed} hosts, {fabric.name!r} has "
                         f"{len(hosts)}")
    random.Random(seed).shuffle(hosts)
    at = 0

    def take(n: int) -> list[str]:
        nonlocal at
        got = hosts[at:at + n]
        at += n
        return got

    out = [ring_allreduce(f"dp{j}", take(mix.dp_ranks), mix.dp_bytes) for j in range(mix.dp_jobs)]
    if mix.moe_ranks:
        out.append(all_to_all("moe", take(mix.moe_ranks), mix.moe_bytes, coflow=True))
    for j in range(mix.pp_jobs):
        stages = [take(mix.pp_width) for _ in range(mix.pp_stages)]
        out.append(pipeline(f"pp{j}", stages, mix.pp_bytes))
    return out


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index of positive ``values`` (module docstring); 1.0 for one value.
    Raises ValueError for no values or a non-positive one."""
    x = np.asarray(values, dtype=np.float64)
    if not len(x) or (x <= 0).any():
        raise ValueError("Jain's index needs positive values")
    return float(x.sum() ** 2 / (len(x) * (x ** 2).sum()))


def link_time_s(index: PathIndex, traffic: Traffic,
                paths: Mapping[FlowDemand, PathIds]) -> float:
    """t_j of Crux: the time ``traffic``'s bytes need on its most loaded link (all phases),
    M_{j,e} / B_e maximised over directed links, seconds."""
    load = np.zeros(len(index.links))
    for ph in traffic.phases:
        for g in ph:
            for f in g.flows:
                np.add.at(load, np.asarray(paths[f], dtype=np.int64), 8.0 * g.bytes_per_flow)
    return float((load / index.capacity_bps).max(initial=0.0))


def intensity_priorities(index: PathIndex, traffics: Sequence[Traffic],
                         paths: Mapping[FlowDemand, PathIds],
                         compute_gpu_s: Mapping[str, float], queues: int = 8) -> dict[str, int]:
    """Traffic name → strict-priority queue (0..queues-1, higher served first) by GPU intensity
    (module docstring).

    Parameters
    ----------
    compute_gpu_s : mapping of str to float
        W_j: computation per iteration of each job, GPU-seconds (ranks × compute time); a job
        left out counts as 0 (lowest intensity).
    queues : int
        Queues available (1–8; 802.1p has 8 priorities).

    Raises
    ------
    ValueError
        ``queues`` outside 1..8.
    """
    if not 1 <= queues <= 8:
        raise ValueError(f"queues must be 1..8, got {queues}")
    score = []
    for t in traffics:
        tj = link_time_s(index, t, paths)
        score.append((compute_gpu_s.get(t.name, 0.0) / tj if tj > 0 else 0.0, t.name))
    order = sorted(score)  # least intense first
    n = len(order)
    return {name: min(queues - 1, (k * queues) // max(n, 1)) for k, (_, name) in enumerate(order)}
