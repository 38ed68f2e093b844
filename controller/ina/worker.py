"""``allreduce(array)`` through an aggregation switch over UDP: the worker library's I/O edge.

Usage from training code (one communicator per worker and job, reused across steps)::

    comm = InaCommunicator(JobParams(job_id=1, worker_id=rank, n_workers=4, pool_size=32),
                           switch=("10.0.0.254", 48864), bind=("10.0.0.1", 40000))
    grads_sum = comm.allreduce(grads)        # float32, same shape; every worker gets the same

Loss injection for experiments (``loss_tx``/``loss_rx``): a packet is dropped in this library,
after it was built and before it reaches the socket (send) or the protocol (receive), with the
given probability from a seeded generator. This kernel has no netem; dropping here exercises
the same recovery as a lossy link (the switch sees fewer copies, the worker sees fewer results),
and the counters say how many were dropped.
"""

from __future__ import annotations

import select
import socket
import time
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from controller.ina.program import INA_UDP_PORT
from controller.ina.protocol import AllreduceProtocol, JobParams, Stats
from controller.ina.wire import InaPacket, decode, frame_bytes


@dataclass
class WireStats(Stats):
    """:class:`Stats` plus what the transport did: frames and bytes sent and received (Ethernet
    frame bytes without FCS), packets dropped by loss injection, and wall time per call."""

    frames_tx: int = 0
    frames_rx: int = 0
    bytes_tx: int = 0
    bytes_rx: int = 0
    injected_drops_tx: int = 0
    injected_drops_rx: int = 0
    malformed: int = 0
    calls: int = 0
    seconds: list[float] = field(default_factory=list)


class InaCommunicator:
    """One worker's endpoint of an aggregation job (see the module docstring).

    Parameters
    ----------
    params : JobParams
        Must match the job on the switch (pool size, number of workers, this worker's id);
        :meth:`JobParams.from_job` builds it from the job file. A worker count that differs
        from the switch's or another worker's is refused before any data is sent.
    switch : (str, int)
        Where aggregation packets go (any address routed to the switch; port 48864).
    bind : (str, int)
        Local address and UDP port results come back to (the job's ``udp_port``).
    timeout_s : float
        Retransmission timeout, seconds.
    loss_tx, loss_rx : float
        Probability of dropping a packet in the send / receive path (loss injection).
    seed : int
        Seed of the loss generator.
    """

    def __init__(self, params: JobParams, switch: tuple[str, int], bind: tuple[str, int], *,
                 timeout_s: float = 0.05, loss_tx: float = 0.0, loss_rx: float = 0.0,
                 seed: int = 0, max_retries: int = 200) -> None:
        self.params = params
        self.switch = (switch[0], switch[1] or INA_UDP_PORT)
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.loss_tx, self.loss_rx = loss_tx, loss_rx
        self._rng = np.random.default_rng(seed)
        self.next_ver = [0] * params.pool_size
        self.stats = WireStats()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind(bind)
        self.sock.setblocking(False)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> InaCommunicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, pkts: list[InaPacket]) -> None:
        for p in pkts:
            if self.loss_tx and self._rng.random() < self.loss_tx:
                self.stats.injected_drops_tx += 1
                continue
            raw = p.encode()
            self.sock.sendto(raw, self.switch)
            self.stats.frames_tx += 1
            self.stats.bytes_tx += frame_bytes(self.params.elems)

    def allreduce(self, x: NDArray[np.float32]) -> NDArray[np.float32]:
        """The element-wise sum of ``x`` over the job's workers (float32, shape of ``x``).

        Raises
        ------
        controller.ina.protocol.RetriesExhausted
            A slot got no answer after ``max_retries`` retransmissions.
        controller.ina.protocol.WorkerCountMismatch
            The job's workers or the switch use another worker count (found in the bootstrap
            round's census, before any data is sent).
        ValueError
            ``x`` holds NaN or inf.
        """
        t0 = time.monotonic()
        proto = AllreduceProtocol(self.params, np.asarray(x, dtype=np.float32), self.next_ver,
                                  timeout_s=self.timeout_s, max_retries=self.max_retries)
        self._send(proto.start(time.monotonic()))
        while not proto.done:
            wait = max(0.0, proto.next_deadline() - time.monotonic())
            ready, _, _ = select.select([self.sock], [], [], min(wait, 1.0))
            if ready:
                for _ in range(256):
                    try:
                        raw, addr = self.sock.recvfrom(65535)
                    except BlockingIOError:
                        break
                    if addr[1] != self.switch[1]:  # results come from the switch's port
                        continue
                    self.stats.frames_rx += 1
                    self.stats.bytes_rx += frame_bytes(self.params.elems)
                    if self.loss_rx and self._rng.random() < self.loss_rx:
                        self.stats.injected_drops_rx += 1
                        continue
                    try:
                        pkt = decode(raw, self.params.elems)
                    except ValueError:
                        self.stats.malformed += 1
                        continue
                    self._send(proto.receive(pkt, time.monotonic()))
            self._send(proto.poll(time.monotonic()))
        self.stats.add(proto.stats)
        self.stats.calls += 1
        self.stats.seconds.append(time.monotonic() - t0)
        self.last_exponents = proto.block_exponents()
        return proto.result()


def allreduce(x: NDArray[np.float32], comm: InaCommunicator) -> NDArray[np.float32]:
    """``comm.allreduce(x)``: the function form for training loops."""
    return comm.allreduce(x)
