"""The lab's worker process (MLP gradients, all-reduce, verification) against the reference
switch over loopback UDP, with loss injected: every step exact within the bound, training in
step on every worker; and the MLP's gradient matches finite differences."""

from __future__ import annotations

import json
import threading

import numpy as np

from mininet_labs.workloads import ina_worker
from mininet_labs.workloads.ina_mlp import MlpSpec, gradient, init_params
from tests.test_ina_worker_udp import UdpRefSwitch


def test_mlp_gradient_matches_finite_differences():
    spec = MlpSpec(layers=(8, 16, 4), batch=16)
    p = init_params(spec).astype(np.float64)
    g, _ = gradient(spec, p.astype(np.float32), 0, 0)
    for i in (0, 37, spec.n_params - 1, spec.n_params - 5):
        e = np.zeros_like(p)
        e[i] = 1e-3
        fd = (gradient(spec, (p + e).astype(np.float32), 0, 0)[1]
              - gradient(spec, (p - e).astype(np.float32), 0, 0)[1]) / 2e-3
        assert abs(fd - g[i]) <= 2e-3 + 0.05 * abs(g[i]), (i, fd, g[i])


def test_workers_train_in_step_through_the_reference_switch(tmp_path):
    n, pool = 3, 8
    srv = UdpRefSwitch(n, pool)
    srv.start()
    rcs: list = [None] * n

    def run(w: int) -> None:
        rcs[w] = ina_worker.main([
            "--worker-id", str(w), "--workers", str(n), "--job-id", "2", "--pool", str(pool),
            "--switch-ip", srv.addr[0], "--switch-port", str(srv.addr[1]), "--bind-ip", "127.0.0.1",
            "--udp-port", "0", "--steps", "3", "--layers", "16,32,4", "--loss", "0.05",
            "--timeout-ms", "20", "--out", str(tmp_path / f"w{w}.json")])

    try:
        ts = [threading.Thread(target=run, args=(w,)) for w in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
    finally:
        srv.stop.set()
    docs = [json.loads((tmp_path / f"w{w}.json").read_text()) for w in range(n)]
    assert rcs == [0] * n, [d["steps"][-1] for d in docs]
    assert all(s["within_bound"] == 1.0 and s["exact"] == 1.0 for d in docs for s in d["steps"])
    assert len({d["param_digest"] for d in docs}) == 1
    assert sum(d["stats"]["retransmitted"] for d in docs) > 0
    assert docs[0]["steps"][-1]["loss"] < docs[0]["steps"][0]["loss"] * 1.5
