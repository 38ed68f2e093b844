"""Collective traffic patterns with sizes, and job placement (pure; seeded randomness only).

A :class:`Traffic` is a collective as the fabric sees it: phases run one after the other; a
phase is a set of :class:`Group` s running at once; the flows of a group advance in lock-step
(a ring: every step waits for the slowest neighbour flow), each sending ``bytes_per_flow``.
Byte counts follow nccl-tests (PERFORMANCE.md): ring all-reduce sends 2(n−1)/n × S per rank,
reduce-scatter and all-gather (n−1)/n × S; all-to-all sends S/n to each peer.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from controller.model.topology import Fabric
from controller.te.collectives import FlowDemand, split


@dataclass(frozen=True)
class Group:
    """Flows that progress together, each carrying ``bytes_per_flow`` bytes."""

    flows: tuple[FlowDemand, ...]
    bytes_per_flow: float


@dataclass(frozen=True)
class Traffic:
    """One collective: ``name``, ``size_bytes`` (S, per rank), sequential ``phases``."""

    name: str
    size_bytes: float
    phases: tuple[tuple[Group, ...], ...]

    @property
    def flows(self) -> tuple[FlowDemand, ...]:
        """Distinct flows over all phases, first appearance order."""
        return tuple(dict.fromkeys(f for ph in self.phases for g in ph for f in g.flows))


def _ring(name: str, ranks: Sequence[str], start: int) -> tuple[FlowDemand, ...]:
    n = len(ranks)
    return tuple(FlowDemand(name, start + i, ranks[i], ranks[(i + 1) % n]) for i in range(n))


def ring_allreduce(name: str, ranks: Sequence[str], size_bytes: float) -> Traffic:
    """Unidirectional ring all-reduce over ``ranks`` (≥ 2 distinct hosts): one group of n flows
    rank i → rank i+1, each 2(n−1)/n × S bytes. Raises ValueError."""
    _check(name, ranks)
    n = len(ranks)
    return Traffic(name, size_bytes, ((Group(_ring(name, ranks, 0), 2 * (n - 1) / n * size_bytes),),))


def rail_rings(name: str, servers: Sequence[Sequence[str]], size_bytes: float) -> Traffic:
    """All-reduce as one ring per rail (NCCL on rail-optimised fabrics): ring r runs over GPU r
    of every server, reducing S / rails each. ``servers``: per server its GPUs in rail order
    (equal counts, ≥ 2 servers). Raises ValueError."""
    if len(servers) < 2 or len({len(s) for s in servers}) != 1:
        raise ValueError(f"{name}: rail rings need ≥ 2 servers with equal GPU counts")
    rails = len(servers[0])
    n = len(servers)
    groups = tuple(
        Group(_ring(name, [s[r] for s in servers], r * n), 2 * (n - 1) / n * size_bytes / rails)
        for r in range(rails)
    )
    return Traffic(name, size_bytes, (groups,))


def hierarchical(name: str, groups: Sequence[Sequence[str]], size_bytes: float) -> Traffic:
    """Hierarchical all-reduce: reduce-scatter inside each group (ring, (g−1)/g × S per rank),
    all-reduce across groups of each shard (ring over member j of every group, 2(m−1)/m × S/g),
    all-gather inside each group ((g−1)/g × S). Groups are e.g. the hosts of one leaf; equal
    sizes g, m ≥ 1 groups. Raises ValueError."""
    if not groups or len({len(g) for g in groups}) != 1:
        raise ValueError(f"{name}: hierarchical needs groups of equal size")
    g, m = len(groups[0]), len(groups)
    _check(name, [h for grp in groups for h in grp], minimum=2)
    intra = tuple(Group(_ring(name, grp, k * g), (g - 1) / g * size_bytes)
                  for k, grp in enumerate(groups) if g > 1)
    base = m * g
    cross = tuple(Group(_ring(name, [grp[j] for grp in groups], base + j * m),
                        2 * (m - 1) / m * size_bytes / g) for j in range(g) if m > 1)
    phases = tuple(ph for ph in (intra, cross, intra) if ph)
    return Traffic(name, size_bytes, phases)


def all_to_all(name: str, ranks: Sequence[str], size_bytes: float,
               coflow: bool = False) -> Traffic:
    """All-to-all: every rank sends S/n to every other rank, n(n−1) flows. Each flow is
    independent (its own group), or with ``coflow`` all advance together as one group (the
    collective ends with its slowest flow, and a 256-rank job is one session of the fluid model
    instead of 65,280; the coflow abstraction of Chowdhury et al., "Efficient coflow scheduling
    with Varys", SIGCOMM 2014, §2). Raises ValueError."""
    _check(name, ranks)
    n = len(ranks)
    flows = [FlowDemand(name, i, a, b)
             for i, (a, b) in enumerate((a, b) for a in ranks for b in ranks if a != b)]
    if coflow:
        return Traffic(name, size_bytes, ((Group(tuple(flows), size_bytes / n),),))
    return Traffic(name, size_bytes, (tuple(Group((f,), size_bytes / n) for f in flows),))


def pipeline(name: str, stages: Sequence[Sequence[str]], size_bytes: float) -> Traffic:
    """Pipeline-parallel point-to-point transfers: member i of stage s sends ``size_bytes``
    (activations of one micro-batch) to member i of stage s+1, every boundary at once, as one
    coflow (the job's step waits for its slowest transfer; one session of the fluid model per
    job). ``stages``: ≥ 2 stages of equal size. Raises ValueError."""
    if len(stages) < 2 or len({len(st) for st in stages}) != 1:
        raise ValueError(f"{name}: a pipeline needs ≥ 2 stages of equal size")
    _check(name, [h for st in stages for h in st])
    flows = [FlowDemand(name, s * len(stages[0]) + i, a, b)
             for s in range(len(stages) - 1)
             for i, (a, b) in enumerate(zip(stages[s], stages[s + 1], strict=True))]
    return Traffic(name, size_bytes, ((Group(tuple(flows), size_bytes),),))


def point_to_point(name: str, pairs: Sequence[tuple[str, str, float]]) -> Traffic:
    """Explicit flows (src, dst, bytes), each independent (a scenario's ``flows:``). Raises
    ValueError for a flow from a host to itself or no flows."""
    if not pairs:
        raise ValueError(f"{name}: no flows")
    groups = []
    for i, (a, b, size) in enumerate(pairs):
        if a == b:
            raise ValueError(f"{name}: flow {i} goes from {a} to itself")
        groups.append(Group((FlowDemand(name, i, a, b),), float(size)))
    return Traffic(name, float(sum(p[2] for p in pairs)), (tuple(groups),))


def with_subflows(traffic: Traffic, n: int) -> Traffic:
    """``traffic`` with every flow split into ``n`` sub-flows (connections per peer): group g
    becomes n groups, channel j holding sub-flow j of each of g's flows with 1/n of the bytes
    (NCCL runs its channels independently, each over its own connection).
    :func:`controller.te.collectives.split` names the sub-flows."""
    if n == 1:
        return traffic
    phases = tuple(
        tuple(Group(tuple(split(f, n)[j] for f in g.flows), g.bytes_per_flow / n)
              for g in ph for j in range(n))
        for ph in traffic.phases)
    return Traffic(traffic.name, traffic.size_bytes, phases)


def _check(name: str, ranks: Sequence[str], minimum: int = 2) -> None:
    if len(ranks) < minimum or len(set(ranks)) != len(ranks):
        raise ValueError(f"{name}: need ≥ {minimum} distinct ranks, got {list(ranks)!r}")


def place_jobs(
    n_servers: int, job_servers: Sequence[int], mode: str, seed: int = 0
) -> list[list[int]]:
    """Server indices of each job.

    ``contiguous``: jobs take consecutive servers in index order (same leaf / pod first);
    ``fragmented``: each job takes servers drawn uniformly at random from the free ones
    (``random.Random(seed)``), in drawn order. Raises ValueError if the jobs do not fit or the
    mode is unknown.
    """
    if sum(job_servers) > n_servers:
        raise ValueError(f"jobs need {sum(job_servers)} servers, the fabric has {n_servers}")
    if mode == "contiguous":
        out, at = [], 0
        for k in job_servers:
            out.append(list(range(at, at + k)))
            at += k
        return out
    if mode == "fragmented":
        rng = random.Random(seed)
        free = list(range(n_servers))
        rng.shuffle(free)
        out, at = [], 0
        for k in job_servers:
            out.append(free[at:at + k])
            at += k
        return out
    raise ValueError(f"unknown placement {mode!r}; use 'contiguous' or 'fragmented'")


def leaf_groups(fabric: Fabric, hosts: Sequence[str]) -> list[list[str]]:
    """``hosts`` grouped by leaf (leaves in first-appearance order, hosts in given order)."""
    by: dict[str, list[str]] = {}
    for h in hosts:
        by.setdefault(fabric.host_by_name[h].leaf, []).append(h)
    return list(by.values())


def demand_rates_bps(fabric: Fabric, traffics: Sequence[Traffic]) -> dict[FlowDemand, float]:
    """Each flow's rate in the link-rate-bound schedule, used as its pinning demand, bits/s:
    min(source and destination access capacity) / the most flows of its phase sharing either
    access link; max over the phases it appears in."""
    out: dict[FlowDemand, float] = {}
    hosts = fabric.host_by_name
    access = {(ln.a if ln.a in hosts else ln.b): float(ln.capacity_bps) for ln in fabric.links
              if (ln.a in hosts) != (ln.b in hosts)}
    for t in traffics:
        for ph in t.phases:
            n_out: dict[str, int] = {}
            n_in: dict[str, int] = {}
            for g in ph:
                for f in g.flows:
                    n_out[f.src] = n_out.get(f.src, 0) + 1
                    n_in[f.dst] = n_in.get(f.dst, 0) + 1
            for g in ph:
                for f in g.flows:
                    cap = min(access[f.src], access[f.dst])
                    r = cap / max(n_out[f.src], n_in[f.dst])
                    out[f] = max(out.get(f, 0.0), r)
    return out
