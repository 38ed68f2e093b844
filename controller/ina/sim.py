"""Workers and the reference switch on a virtual clock: loss, duplication and latency, no I/O.

The scripted peer of the protocol tests and a quick way to see how many retransmissions a loss
rate costs. Every packet goes through its encoded bytes (``encode``/``decode``), so the wire
format is exercised too. Deterministic for a given ``seed``.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from controller.ina.protocol import AllreduceProtocol, JobParams, Stats
from controller.ina.refswitch import ReferenceSwitch, SwitchJob
from controller.ina.wire import InaPacket, decode


@dataclass
class SimLinks:
    """Per-direction behaviour: probability a packet is lost / delivered twice; one-way delay."""

    loss_up: float = 0.0
    loss_down: float = 0.0
    dup_up: float = 0.0
    dup_down: float = 0.0
    delay_s: float = 0.001


@dataclass
class SimResult:
    results: list[NDArray[np.float32]]
    exponents: list[NDArray[np.int16]]
    stats: list[Stats]
    time_s: float
    lost: int
    switch: ReferenceSwitch
    next_ver: list[list[int]] = field(default_factory=list)


def simulate(arrays: list[NDArray[np.float32]], pool_size: int = 8, *, job_id: int = 1,
             links: SimLinks | None = None, timeout_s: float = 0.01, seed: int = 0,
             switch: ReferenceSwitch | None = None, next_ver: list[list[int]] | None = None,
             max_events: int = 10_000_000, worker_counts: list[int] | None = None) -> SimResult:
    """All-reduce ``arrays`` (one per worker) through a :class:`ReferenceSwitch`.

    Worker ``w`` sits on switch port ``w + 1``. Pass ``switch`` and ``next_ver`` from a previous
    result to run consecutive calls on the same job. ``worker_counts``: the worker count each
    worker is told (default: the number of arrays, which is also the switch job's count).

    Raises
    ------
    RuntimeError
        The event budget ran out (a livelock would otherwise hang the test).
    controller.ina.protocol.WorkerCountMismatch
        A worker's count differs from the others' or the switch's (found before any data).
    """
    links = links or SimLinks()
    n = len(arrays)
    rng = np.random.default_rng(seed)
    if switch is None:
        switch = ReferenceSwitch(max_slots=max(64, pool_size))
        switch.add_job(job_id, SwitchJob(base=0, pool_size=pool_size, n_workers=n,
                                         mcast_grp=job_id + 1), {w: w + 1 for w in range(n)})
    next_ver = next_ver or [[0] * pool_size for _ in range(n)]
    counts = worker_counts or [n] * n
    protos = [AllreduceProtocol(JobParams(job_id, w, counts[w], pool_size), arrays[w],
                                next_ver[w], timeout_s=timeout_s) for w in range(n)]
    seq = itertools.count()
    events: list[tuple[float, int, str, int, bytes]] = []  # (time, seq, kind, worker, payload)
    lost = 0

    def up(now: float, w: int, pkts: list[InaPacket]) -> None:
        nonlocal lost
        for p in pkts:
            copies = 2 if rng.random() < links.dup_up else 1
            for _ in range(copies):
                if rng.random() < links.loss_up:
                    lost += 1
                    continue
                heapq.heappush(events, (now + links.delay_s, next(seq), "sw", w, p.encode()))

    now = 0.0
    for w, p in enumerate(protos):
        up(now, w, p.start(now))
    for _ in range(max_events):
        if all(p.done for p in protos):
            break
        t_timer = min(p.next_deadline() for p in protos)
        if events and events[0][0] <= t_timer:
            now, _, kind, w, payload = heapq.heappop(events)
            pkt = decode(payload)
            if kind == "sw":
                for _port, dst, res in switch.process(pkt, w + 1):
                    copies = 2 if rng.random() < links.dup_down else 1
                    for _c in range(copies):
                        if rng.random() < links.loss_down:
                            lost += 1
                            continue
                        heapq.heappush(events, (now + links.delay_s, next(seq), "wk", dst,
                                                res.encode()))
            else:
                up(now, w, protos[w].receive(pkt, now))
        else:
            now = t_timer
            for w, p in enumerate(protos):
                up(now, w, p.poll(now))
    else:
        raise RuntimeError(f"simulation did not finish in {max_events} events")
    return SimResult([p.result() for p in protos], [p.block_exponents() for p in protos],
                     [p.stats for p in protos], now, lost, switch, next_ver)
