"""A pure-Python model of ``p4/aggregation/aggregation.p4``'s aggregation path: the oracle of
the BMv2 tests and the peer of the protocol tests.

It holds the same tables (jobs, workers, destinations, multicast groups), the same register
arrays (bitmap, count, exponent max, one int32 lane per element; cell
``(base + slot) * 2 + ver``) and the same counters, and processes one packet the way the P4
ingress does (SwitchML Algorithm 2, packet loss recovery with shadow copies):

* unknown job → dropped, ``ina_dropped[unknown_job]``; ``slot >= pool_size`` → dropped,
  ``[slot_out_of_range]``; ``(job, worker, ingress port)`` not a worker → ``[unknown_worker]``;
* worker's bit not in the copy's bitmap → set it, clear it in the other copy, count
  ``(count + 1) mod n``; the first contributor overwrites the lanes and the exponent, later ones
  add (int32 wrap-around, as ``bit<32>``) and take the max; when the count wraps to 0 the packet
  becomes the result (flag RESULT, exponent = max) and is multicast; otherwise it is dropped;
* bit already set (a retransmission) → ``ina_duplicates``; if the copy is complete (count 0) the
  kept result is sent back to that worker only (``ina_shadow_served``); otherwise dropped.

Egress is modelled as delivery to the destination worker id (``ina_dst`` rewrites addresses;
a replica without an ``ina_dst`` entry is dropped).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controller.ina.program import (
    DROP_SLOT_RANGE,
    DROP_UNKNOWN_JOB,
    DROP_UNKNOWN_WORKER,
    ELEMS,
    FLAG_RESULT,
    JOB_COUNTERS,
    MAX_JOBS,
    MAX_SLOTS,
    cell,
)
from controller.ina.wire import InaPacket


@dataclass(frozen=True)
class SwitchJob:
    """An ``ina_jobs`` entry: the job's register region and multicast group."""

    base: int
    pool_size: int
    n_workers: int
    mcast_grp: int


class ReferenceSwitch:
    """The model (see the module docstring); :meth:`process` returns ``[(port, worker, pkt)]``."""

    def __init__(self, max_slots: int = MAX_SLOTS, elems: int = ELEMS) -> None:
        self.elems = elems
        cells = 2 * max_slots
        self.max_slots = max_slots
        self.jobs: dict[int, SwitchJob] = {}
        self.workers: set[tuple[int, int, int]] = set()  # (job, worker, ingress port)
        self.dst: set[tuple[int, int]] = set()            # (job, worker) with an address
        self.mcast: dict[int, list[tuple[int, int]]] = {}  # group -> [(port, rid=worker)]
        self.bitmap = np.zeros(cells, dtype=np.uint32)
        self.count = np.zeros(cells, dtype=np.uint8)
        self.exp_max = np.zeros(cells, dtype=np.uint8)
        self.sums = np.zeros((cells, elems), dtype=np.int32)
        self.counters = {name: np.zeros(MAX_JOBS, dtype=np.int64) for name in JOB_COUNTERS}
        self.dropped = np.zeros(4, dtype=np.int64)

    # -- control plane -----------------------------------------------------------------------
    def add_job(self, job_id: int, job: SwitchJob, ports: dict[int, int]) -> None:
        """Install a job: ``ports`` maps worker id → switch port (as :mod:`.job` entities do)."""
        self.jobs[job_id] = job
        for w, port in ports.items():
            self.workers.add((job_id, w, port))
            self.dst.add((job_id, w))
        self.mcast[job.mcast_grp] = [(port, w) for w, port in sorted(ports.items())]
        for slot in range(job.pool_size):
            self.reset_slot(job_id, slot)

    def remove_job(self, job_id: int) -> None:
        job = self.jobs.pop(job_id)
        self.workers = {k for k in self.workers if k[0] != job_id}
        self.dst = {k for k in self.dst if k[0] != job_id}
        self.mcast.pop(job.mcast_grp, None)

    def reset_slot(self, job_id: int, slot: int) -> bool:
        """The packet-out RESET path: clear both copies' bitmap and count."""
        job = self.jobs.get(job_id)
        if job is None or slot >= job.pool_size:
            return False
        for ver in (0, 1):
            i = cell(job.base, slot, ver)
            self.bitmap[i] = 0
            self.count[i] = 0
        self.counters["ina_resets"][job_id] += 1
        return True

    # -- data plane --------------------------------------------------------------------------
    def process(self, pkt: InaPacket, ingress_port: int) -> list[tuple[int, int, InaPacket]]:
        job = self.jobs.get(pkt.job_id)
        if job is None:
            self.dropped[DROP_UNKNOWN_JOB] += 1
            return []
        if pkt.slot >= job.pool_size:
            self.dropped[DROP_SLOT_RANGE] += 1
            return []
        if (pkt.job_id, pkt.worker_id, ingress_port) not in self.workers:
            self.dropped[DROP_UNKNOWN_WORKER] += 1
            return []
        c = self.counters
        c["ina_rx"][pkt.job_id] += 1
        i = cell(job.base, pkt.slot, pkt.ver)
        wbit = np.uint32((1 << pkt.worker_id) & 0xFFFFFFFF)
        if not self.bitmap[i] & wbit:
            self.bitmap[i] |= wbit
            self.bitmap[i ^ 1] &= ~wbit
            first = self.count[i] == 0
            n = (int(self.count[i]) + 1) % job.n_workers
            self.count[i] = n
            if first:
                self.sums[i] = pkt.data
                self.exp_max[i] = pkt.exp
            else:
                self.sums[i] = (self.sums[i].astype(np.int64) + pkt.data).astype(np.uint32).view(np.int32)
                self.exp_max[i] = max(int(self.exp_max[i]), pkt.exp)
            if n != 0:
                return []
            c["ina_results"][pkt.job_id] += 1
            res = pkt.with_(flags=pkt.flags | FLAG_RESULT, exp=int(self.exp_max[i]),
                            data=self.sums[i].copy())
            return [(port, w, res.with_(worker_id=w)) for port, w in self.mcast.get(job.mcast_grp, [])
                    if (pkt.job_id, w) in self.dst]
        c["ina_duplicates"][pkt.job_id] += 1
        if self.count[i] != 0:
            return []
        c["ina_shadow_served"][pkt.job_id] += 1
        if (pkt.job_id, pkt.worker_id) not in self.dst:
            return []
        res = pkt.with_(flags=pkt.flags | FLAG_RESULT, exp=int(self.exp_max[i]),
                        data=self.sums[i].copy())
        return [(ingress_port, pkt.worker_id, res)]
