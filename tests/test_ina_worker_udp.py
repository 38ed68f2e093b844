"""The socket worker library against the reference switch served over loopback UDP: the
library's I/O loop, loss injection on both paths, and several calls on one job."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from controller.ina.protocol import JobParams
from controller.ina.refswitch import ReferenceSwitch, SwitchJob
from controller.ina.wire import decode
from controller.ina.worker import InaCommunicator
from tests.test_ina_protocol import check, grads


class UdpRefSwitch(threading.Thread):
    """ReferenceSwitch on a loopback UDP socket; worker w's port number is w + 1."""

    def __init__(self, n: int, pool: int) -> None:
        super().__init__(daemon=True)
        self.sw = ReferenceSwitch(max_slots=64)
        self.sw.add_job(2, SwitchJob(0, pool, n, 3), {w: w + 1 for w in range(n)})
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.addr = self.sock.getsockname()
        self.workers: dict[int, tuple[str, int]] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                raw, addr = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            pkt = decode(raw)
            self.workers[pkt.worker_id] = addr
            for _port, w, res in self.sw.process(pkt, pkt.worker_id + 1):
                self.sock.sendto(res.encode(), self.workers[w])


@pytest.mark.parametrize("loss", [0.0, 0.1])
def test_allreduce_over_udp(loss):
    n, pool = 3, 8
    srv = UdpRefSwitch(n, pool)
    srv.start()
    comms = [InaCommunicator(JobParams(2, w, n, pool), srv.addr, ("127.0.0.1", 0), timeout_s=0.02,
                             loss_tx=loss, loss_rx=loss, seed=w) for w in range(n)]
    try:
        for step in range(2):
            xs = grads(n, 2500 + step * 7, seed=step)
            out: list = [None] * n
            ts = [threading.Thread(target=lambda w=w, out=out, xs=xs: out.__setitem__(
                w, comms[w].allreduce(xs[w]))) for w in range(n)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(60)
            assert all(o is not None for o in out)
            for o in out:
                assert np.array_equal(o, out[0])
            check(xs, out[0], comms[0].last_exponents)
        st = comms[0].stats
        assert st.calls == 2 and st.frames_tx >= st.sent - st.injected_drops_tx
        if loss:
            assert sum(c.stats.injected_drops_tx + c.stats.injected_drops_rx for c in comms) > 0
            assert sum(c.stats.retransmitted for c in comms) > 0
        else:
            assert st.injected_drops_tx == 0 and st.injected_drops_rx == 0
    finally:
        srv.stop.set()
        for c in comms:
            c.close()
