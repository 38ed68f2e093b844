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
from controller.te.collectives import FlowDemand


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


def all_to_all(name: str, ranks: Sequence[str], size_bytes: float) -> Traffic:
    """All-to-all: every rank sends S/n to every other rank, each flow independent (its own
    group). n(n−1) flows. Raises ValueError."""
    _check(name, ranks)
    n = len(ranks)
    flows = [(a, b) for a in ranks for b in ranks if a != b]
    return Traffic(name, size_bytes, (tuple(
        Group((FlowDemand(name, i, a, b),), size_bytes / n) for i, (a, b) in enumerate(flows)),))


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
                    cap = min(fabric.link_between(f.src, fabric.host_by_name[f.src].leaf).capacity_bps,
                              fabric.link_between(f.dst, fabric.host_by_name[f.dst].leaf).capacity_bps)
                    r = cap / max(n_out[f.src], n_in[f.dst])
                    out[f] = max(out.get(f, 0.0), r)
    return out
