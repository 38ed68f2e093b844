"""Starting and finishing collectives on a running lab network: the ring all-reduce workload
(:mod:`mininet_labs.workloads.ring_allreduce`, one process per rank) for every lab that runs one.

:func:`start_ring` starts one rank per host of a collective (the seed fixes every ring
connection's TCP source port, hence its ECMP hash, and the buffer values); :func:`finish_ring`
waits for all ranks within one deadline and turns their reports into the collective's results
entry (:func:`mininet_labs.analysis.collectives.collective_entry`: CCT, algbw/busbw,
busbw/bound, correctness).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.policy import Collective
from mininet_labs.analysis.collectives import collective_entry, failed_entry, ring_bound_bps
from mininet_labs.lab.interface import RunContext
from mininet_labs.lab.processes import Job
from mininet_labs.workloads.ring_allreduce import source_port, summarize

DEFAULT_DST_PORT = 5201


def rank_command(rank: int, peers: Sequence[str], nbytes: int, seed: int, stream: int,
                 src_port: int, dst_port: int, chunk_bytes: int, out: Path,
                 dscp: int | None = None, connections_per_peer: int = 1) -> list[str]:
    """The command line of one ring rank (run inside its Mininet host); with
    ``connections_per_peer`` c > 1, c connections from ``src_port`` … ``src_port`` + c − 1."""
    return [sys.executable, "-m", "mininet_labs.workloads.ring_allreduce", "--rank", str(rank),
            "--peers", ",".join(peers), "--bytes", str(nbytes), "--seed", str(seed),
            "--stream", str(stream), "--src-port", str(src_port), "--dst-port", str(dst_port),
            "--chunk-bytes", str(chunk_bytes), "--out", str(out),
            *([] if dscp is None else ["--dscp", str(dscp)]),
            *([] if connections_per_peer == 1
              else ["--connections-per-peer", str(connections_per_peer)])]


@dataclass
class RingRun:
    """A started ring: its collective, rank jobs (in rank order), ports and size."""

    coll: Collective
    jobs: list[Job]
    src_ports: list[int]
    dst_port: int
    nbytes: int
    reports: list[dict[str, Any]] = field(default_factory=list)


def start_ring(ctx: RunContext, coll: Collective, *, seed: int, nbytes: int, out_dir: Path,
               stream: int = 0, chunk_bytes: int = 256 * 1024, dst_port: int | None = None,
               dscp: int | None = None, src_ports: Sequence[int] | None = None,
               connections_per_peer: int = 1) -> RingRun:
    """Start rank i of ``coll`` on host ``coll.ranks[i]`` (reports and logs in ``out_dir``).
    Source ports: ``src_ports`` or :func:`~mininet_labs.workloads.ring_allreduce.source_port` of
    ``(seed, coll.name, i)``; destination port: ``dst_port`` or ``DEFAULT_DST_PORT + stream``;
    ``connections_per_peer``: connections per rank pair (a policy's ``subflows: {by:
    l4_src_range, base_port: P}`` pins connection j from source port P + j)."""
    fabric = ctx.exp.fabric
    peers = [fabric.host_by_name[h].ipv4 for h in coll.ranks]
    src = list(src_ports) if src_ports is not None else [
        source_port(seed, coll.name, r) for r in range(len(coll.ranks))]
    dst = dst_port if dst_port is not None else DEFAULT_DST_PORT + stream
    jobs = []
    for r, h in enumerate(coll.ranks):
        rep = out_dir / f"rank{r}.json"
        cmd = rank_command(r, peers, nbytes, seed, stream, src[r], dst, chunk_bytes, rep, dscp,
                           connections_per_peer)
        jobs.append(ctx.procs.start(ctx.host(h), cmd, out_dir / f"rank{r}.log", rep,
                                    label=f"{coll.name} rank {r}"))
    return RingRun(coll, jobs, src, dst, nbytes)


def finish_ring(ctx: RunContext, run: RingRun, timeout_s: float,
                errors: Sequence[str] = ()) -> dict[str, Any]:
    """Wait for every rank (killing those still running after ``timeout_s``) and return the
    collective's results entry; the rank reports are kept in ``run.reports``."""
    errs = list(errors) + ctx.procs.wait_all(run.jobs, timeout_s)
    return ring_entry(ctx, run, errs)


def ring_entry(ctx: RunContext, run: RingRun, errors: Sequence[str] = ()) -> dict[str, Any]:
    """The results entry of a ring whose ranks have finished."""
    reports, errs = ctx.procs.reports(run.jobs)
    errs = list(errors) + errs
    run.reports = reports
    bound = ring_bound_bps(ctx.exp.fabric, run.coll)
    if len(reports) == len(run.coll.ranks) and not errs:
        return collective_entry(run.coll.name, run.coll.ranks, summarize(reports), bound,
                                run.src_ports, run.dst_port)
    return failed_entry(run.coll.name, run.coll.ranks, run.nbytes, bound, run.src_ports,
                        run.dst_port, errs)


#: Bytes the ranks must have sent before :func:`start_rings` says the data flows.
DATA_STARTED_BYTES = 256 * 1024


def start_rings(ctx: RunContext, collectives: Sequence[Collective], *, seed: int, nbytes: int,
                chunk_bytes: int, timeout_s: float) -> tuple[list[RingRun], float]:
    """Start every collective (stream i for the i-th, results in ``OUT/<name>``) and wait until
    their ranks' access ports sent :data:`DATA_STARTED_BYTES` more than before (connections
    set up, data flowing). Returns the runs and when the data flowed (s since the epoch).
    Raises WaitTimeout after ``timeout_s``."""
    import time

    from mininet_labs.lab.counters import PortCounters
    from mininet_labs.lab.wait import wait_until

    counters = PortCounters(ctx.net, ctx.exp.fabric)
    ports = [counters.access_port(h) for c in collectives for h in c.ranks]
    rings = [start_ring(ctx, c, seed=seed, nbytes=nbytes, stream=i, out_dir=ctx.out / c.name,
                        chunk_bytes=chunk_bytes) for i, c in enumerate(collectives)]
    base = sum(tx for _, tx in counters.read(ports).values())
    t = wait_until(lambda: time.time() if sum(tx for _, tx in counters.read(ports).values())
                   - base >= DATA_STARTED_BYTES else None, timeout_s,
                   "the collectives' data to flow", every_s=0.02)
    return rings, t
