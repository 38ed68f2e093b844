"""The worker side of one all-reduce, as a sans-I/O state machine (clock injected).

It turns a float32 array into aggregation packets (:mod:`.chunks` schedule, :mod:`.quant`
exponents and fixed point), keeps one packet outstanding per pool slot (the window: SwitchML
Algorithm 1), retransmits a slot's packet when no result came back within ``timeout_s``
(SwitchML Algorithm 2: the switch either counts it — the first copy was lost — or, when its bit
is already in the slot's bitmap, answers with the kept result of a finished slot, the shadow
copy), and reassembles the results. Results that do not belong to the slot's current round
(wrong copy bit, offset, job, or a duplicate already consumed) are counted and ignored, so the
call is idempotent with respect to duplicated and late packets.

Worker count (the census). Every worker scales its fixed-point values by the job's worker count
(:func:`controller.ina.quant.headroom_bits`), and the switch sums until it has the job's count of
contributions; a worker told another count would get a wrong sum (n = 4 and n = 8 in one job sum
to 4.5 or 9.0 instead of 6.0) and could wrap int32. So the job set-up carries the count: the
bootstrap round of every slot, which every worker sends before any data, carries in its first
three lanes 1, n and n² (n: this worker's count); the switch sums them as it sums data. The
result holds the number of contributions the switch waited for (its ``n_workers``), Σn and Σn².
Each worker checks, before it sends a single data packet, that the switch counted n
contributions and that Σn = n·n and Σn² = n·n² (equality in Cauchy-Schwarz: every count equal to
n), and raises :class:`WorkerCountMismatch` otherwise: every worker of the job refuses, and no
gradient is summed. The P4 program needs no change (it sums every lane of every packet).

Usage (the transport is the caller's)::

    p = AllreduceProtocol(params, x, next_ver, timeout_s=0.02)
    send(p.start(now))
    while not p.done:
        for pkt in receive_until(p.next_deadline()):
            send(p.receive(pkt, now))
        send(p.poll(now))
    y = p.result()
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from controller.ina import chunks, quant
from controller.ina.job import JobSpec
from controller.ina.program import ELEMS, FLAG_BOOT, FLAG_RESULT, FLAG_RETX, MAX_WORKERS
from controller.ina.wire import InaPacket


@dataclass(frozen=True)
class JobParams:
    """What a worker must know of its job: ids, the number of workers, the job's slot pool size
    (= the window of outstanding packets) and elements per packet."""

    job_id: int
    worker_id: int
    n_workers: int
    pool_size: int
    elems: int = ELEMS

    @classmethod
    def from_job(cls, spec: JobSpec, worker_id: int) -> JobParams:
        """The parameters of worker ``worker_id`` of the job ``spec`` (the job file the
        controller set the switch up from): the count is the job's, not the worker's own."""
        return cls(spec.job_id, worker_id, len(spec.workers), spec.pool_size, spec.elems)

    def __post_init__(self) -> None:
        if not 1 <= self.n_workers <= MAX_WORKERS:
            raise ValueError(f"n_workers {self.n_workers} not in 1..{MAX_WORKERS}")
        if not 0 <= self.worker_id < self.n_workers:
            raise ValueError(f"worker_id {self.worker_id} not in 0..{self.n_workers - 1}")
        if not 1 <= self.pool_size < 2**15:
            raise ValueError(f"pool_size {self.pool_size} not in 1..32767")


@dataclass
class Stats:
    """Counts of one or more calls (packets are aggregation packets)."""

    sent: int = 0
    retransmitted: int = 0
    received: int = 0
    ignored: int = 0
    rounds: int = 0

    def add(self, other: Stats) -> None:
        for k in ("sent", "retransmitted", "received", "ignored", "rounds"):
            setattr(self, k, getattr(self, k) + getattr(other, k))


class RetriesExhausted(RuntimeError):
    """A slot's packet was retransmitted ``max_retries`` times without a result."""


class WorkerCountMismatch(ValueError):
    """The workers of a job, or a worker and the switch, disagree on the job's worker count
    (found by the census of the bootstrap round, before any data was sent)."""


#: Lanes of a bootstrap packet that carry the census: 1, n, n² (see the module docstring).
CENSUS_LANES = 3


def census(n_workers: int, elems: int) -> NDArray[np.int32]:
    """The data of a bootstrap packet of a worker told ``n_workers``: 1, n, n², then zeros."""
    data = np.zeros(elems, dtype=np.int32)
    data[:CENSUS_LANES] = (1, n_workers, n_workers * n_workers)
    return data


def census_problem(params: JobParams, data: NDArray[np.int32]) -> str | None:
    """Why the summed census ``data`` of a bootstrap result shows a count mismatch, or None."""
    n = params.n_workers
    k, sum_n, sum_n2 = (int(v) for v in data[:CENSUS_LANES])
    if k == n and sum_n == n * n and sum_n2 == n * n * n:
        return None
    mean = f"{sum_n / k:.3g}" if k else "-"
    return (f"job {params.job_id} worker {params.worker_id}: worker count mismatch: this worker "
            f"was told {n} workers, but the switch completed the job's set-up round with {k} "
            f"contributions whose counts sum to {sum_n} (mean {mean}; all equal to {n} would sum "
            f"to {k * n}). Every worker and the switch's job must use the same count: build "
            "JobParams from the job file (JobParams.from_job). Nothing was summed: no data "
            "packet was sent")


@dataclass
class _Slot:
    round: int = 0
    rounds: int = 0
    ver: int = 0
    packet: InaPacket | None = None
    deadline: float = float("inf")
    tries: int = 0
    done: bool = False
    expect_offset: int = 0


@dataclass
class AllreduceProtocol:
    """One all-reduce of ``x`` (any shape, float32) by this worker (see the module docstring).

    Parameters
    ----------
    params : JobParams
    x : ndarray
        This worker's values; every worker of the job must pass the same length.
    next_ver : list of int
        Per slot, the copy bit its next use must carry (``pool_size`` entries, all 0 after job
        set-up); updated in place as rounds complete, so consecutive calls stay in step with the
        switch's shadow copies.
    timeout_s : float
        Retransmission timeout, seconds.
    max_retries : int
        Retransmissions of one packet before :class:`RetriesExhausted`.
    """

    params: JobParams
    x: NDArray[np.float32]
    next_ver: list[int]
    timeout_s: float = 0.02
    max_retries: int = 200
    stats: Stats = field(default_factory=Stats)

    def __post_init__(self) -> None:
        p = self.params
        if len(self.next_ver) != p.pool_size:
            raise ValueError(f"next_ver has {len(self.next_ver)} entries, pool_size is {p.pool_size}")
        self.shape = np.shape(self.x)
        self.padded = chunks.pad(self.x, p.elems)
        self.blocks = self.padded.size // p.elems
        self.local_exp = quant.block_exponents(self.padded, p.elems) if self.blocks else \
            np.zeros(0, np.int16)
        self.global_exp = np.full(self.blocks, quant.EXP_MIN - 1, dtype=np.int16)
        self.out = np.zeros_like(self.padded)
        self.slots = [_Slot(rounds=chunks.rounds_of_slot(j, self.blocks, p.pool_size),
                            ver=self.next_ver[j]) for j in range(p.pool_size)]
        for s in self.slots:
            s.done = s.rounds == 0

    # -- building packets --------------------------------------------------------------------
    def _packet(self, j: int, now: float) -> InaPacket:
        p, s = self.params, self.slots[j]
        rd = chunks.round_of(j, s.round, self.blocks, p.pool_size)
        if rd.data_block is None:
            data = census(p.n_workers, p.elems)
            flags, offset = FLAG_BOOT, (rd.exp_block or 0) * p.elems
        else:
            b = rd.data_block
            block = self.padded[b * p.elems:(b + 1) * p.elems]
            data = quant.quantise(block, int(self.global_exp[b]), p.n_workers)
            flags, offset = 0, b * p.elems
        exp = quant.EXP_NONE if rd.exp_block is None else quant.encode_exp(
            int(self.local_exp[rd.exp_block]))
        s.expect_offset = offset
        s.tries = 0
        s.deadline = now + self.timeout_s
        s.packet = InaPacket(p.job_id, j, s.ver, p.worker_id, flags, offset, exp, data)
        return s.packet

    # -- events ------------------------------------------------------------------------------
    def start(self, now: float) -> list[InaPacket]:
        """The first packet of every used slot (nothing for an empty array)."""
        out = [self._packet(j, now) for j, s in enumerate(self.slots) if not s.done]
        self.stats.sent += len(out)
        return out

    def receive(self, pkt: InaPacket, now: float) -> list[InaPacket]:
        """Consume a packet from the switch; returns the packets to send next (0 or 1).

        Raises
        ------
        WorkerCountMismatch
            A bootstrap result's census shows that the job's workers or the switch use another
            worker count (module docstring); raised before this worker sends any data.
        """
        p = self.params
        self.stats.received += 1
        j = pkt.slot
        if (pkt.job_id != p.job_id or not pkt.flags & FLAG_RESULT or j >= p.pool_size
                or self.slots[j].done or pkt.ver != self.slots[j].ver
                or pkt.offset != self.slots[j].expect_offset or pkt.data.size != p.elems):
            self.stats.ignored += 1
            return []
        s = self.slots[j]
        rd = chunks.round_of(j, s.round, self.blocks, p.pool_size)
        if rd.data_block is None:  # the bootstrap round's result: the census, before any data
            problem = census_problem(p, pkt.data)
            if problem is not None:
                raise WorkerCountMismatch(problem)
        if rd.exp_block is not None:
            if pkt.exp == quant.EXP_NONE:
                self.stats.ignored += 1
                return []
            self.global_exp[rd.exp_block] = quant.decode_exp(pkt.exp)
        if rd.data_block is not None:
            b = rd.data_block
            self.out[b * p.elems:(b + 1) * p.elems] = quant.dequantise(
                pkt.data, int(self.global_exp[b]), p.n_workers)
        self.stats.rounds += 1
        s.round += 1
        s.ver ^= 1
        self.next_ver[j] = s.ver
        if s.round >= s.rounds:
            s.done, s.packet, s.deadline = True, None, float("inf")
            return []
        self.stats.sent += 1
        return [self._packet(j, now)]

    def poll(self, now: float) -> list[InaPacket]:
        """Retransmissions due at ``now`` (flag RETX set; same slot, copy and contents).

        Raises
        ------
        RetriesExhausted
            A packet went unanswered ``max_retries`` times (names job, worker, slot and copy).
        """
        out = []
        for j, s in enumerate(self.slots):
            if s.done or s.packet is None or s.deadline > now:
                continue
            if s.tries >= self.max_retries:
                raise RetriesExhausted(
                    f"job {self.params.job_id} worker {self.params.worker_id}: slot {j} copy "
                    f"{s.ver} unanswered after {s.tries} retransmissions of {self.timeout_s} s "
                    "(is the job set up on the switch, and are as many workers running as its worker "
                    "count?)")
            s.tries += 1
            s.deadline = now + self.timeout_s
            out.append(s.packet.with_(flags=s.packet.flags | FLAG_RETX))
        self.stats.sent += len(out)
        self.stats.retransmitted += len(out)
        return out

    # -- state -------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return all(s.done for s in self.slots)

    def next_deadline(self) -> float:
        """Earliest retransmission time (inf when nothing is outstanding)."""
        return min((s.deadline for s in self.slots if not s.done), default=float("inf"))

    def result(self) -> NDArray[np.float32]:
        """The summed array, shape and length of ``x`` (raises RuntimeError before done)."""
        if not self.done:
            raise RuntimeError("all-reduce not finished")
        return chunks.unpad(self.out, int(np.prod(self.shape, dtype=np.int64))).reshape(self.shape)

    def block_exponents(self) -> NDArray[np.int16]:
        """The shared exponent of every block (valid once done), for error bounds."""
        return self.global_exp.copy()
