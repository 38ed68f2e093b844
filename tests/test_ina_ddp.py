"""The DDP communication hook (controller/ina/ddp.py) on loopback, without BMv2: three ranks of
DDP whose buckets the reference switch sums over UDP; the switch stops answering mid-run and
training goes on over gloo, every rank alike; a refused job means gloo from the start. The INA
run's weights equal gloo's within the quantiser's bound until the switch goes."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from mininet_labs.analysis.ddp_ina import fallback_steps, ranks_agree, weight_bounds, weight_gaps
from tests.test_ina_worker_udp import UdpRefSwitch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="torch is not installed (make setup installs it)")

N, POOL, HIDDEN, STEPS, LR = 3, 16, 16, 4, 0.05


class DyingRefSwitch(UdpRefSwitch):
    """The reference switch that goes silent after ``limit`` packets (a switch lost mid-run)."""

    def __init__(self, n: int, pool: int, limit: int) -> None:
        super().__init__(n, pool)
        self.limit, self.seen = limit, 0

    def run(self) -> None:
        from controller.ina.wire import decode

        while not self.stop.is_set():
            try:
                raw, addr = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            self.seen += 1
            if self.seen > self.limit:
                continue
            pkt = decode(raw)
            self.workers[pkt.worker_id] = addr
            for _port, w, res in self.sw.process(pkt, pkt.worker_id + 1):
                self.sock.sendto(res.encode(), self.workers[w])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp, name, backend, extra=()):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               GLOO_SOCKET_IFNAME="lo")
    procs = []
    for r in range(N):
        cmd = [sys.executable, "-m", "mininet_labs.workloads.ddp_ina", "--rank", str(r),
               "--world", str(N), "--backend", backend, "--steps", str(STEPS), "--hidden",
               str(HIDDEN), "--lr", str(LR), "--bind-ip", "127.0.0.1", "--udp-port", "0",
               "--retx-timeout-ms", "100", "--max-retries", "10", "--timeout-s", "120",
               "--params-out", str(tmp / f"{name}.npy"), "--out", str(tmp / f"{name}{r}.json"),
               *extra]
        procs.append(subprocess.Popen(cmd, env=env, stderr=open(tmp / f"{name}{r}.err", "w")))
    for p in procs:
        p.wait(300)
    reps = [json.loads((tmp / f"{name}{r}.json").read_text()) for r in range(N)]
    assert all(r["ok"] for r in reps), [(r, (tmp / f"{name}{i}.err").read_text()[-2000:])
                                         for i, r in enumerate(reps)]
    return reps, np.load(tmp / f"{name}.npy")


def test_hook_sums_in_the_switch_falls_back_together_and_refusal_is_gloo(tmp_path):
    gloo, w_gloo = _run(tmp_path, "gloo", "gloo")
    assert all(ranks_agree(gloo))
    # per step and worker: one packet per 64 parameters plus one bootstrap round of the pool
    per_step = N * (-(-85114 // 64) + POOL)
    srv = DyingRefSwitch(N, POOL, limit=2 * per_step + per_step // 2)
    srv.start()
    grant = {"job_id": 2, "pool_size": POOL, "elements_per_packet": 64,
             "service_ipv4": "127.0.0.1", "service_port": srv.addr[1]}
    try:
        ina, w_ina = _run(tmp_path, "ina", "ina", ["--grant-json", json.dumps(grant)])
    finally:
        srv.stop.set()
    # every rank's weights equal after every step, also across the fallback
    assert all(ranks_agree(ina))
    # the switch summed steps 0 and 1; during step 2 it went silent: every rank fell back there
    assert fallback_steps(ina) == [2, 3]
    for r in ina:
        assert r["hook"]["fallback_events"] == 1 and r["hook"]["ina_buckets"] >= 2
        assert r["hook"]["fallback_buckets"] >= 2
        assert r["steps"][1]["fallback_events"] == 0 and r["steps"][2]["fallback_events"] == 1
    assert any("RetriesExhausted" in (r["hook"]["reason"] or "") for r in ina)
    # until the switch went, INA's weights are gloo's within the quantiser's bound
    gaps = weight_gaps(w_ina, w_gloo)[:2]
    bounds = weight_bounds(ina, w_ina, LR, N, upto=2)
    assert all(0 < b for b in bounds)
    assert all(g <= b for g, b in zip(gaps, bounds, strict=True)), (gaps, bounds)
    assert all(np.isfinite(w_ina[-1]))
    # a refused job: gloo from the start, the gloo run's weights (DDP's built-in all-reduce and
    # the hook's gloo call round a few elements apart: within a float32 rounding per step)
    refused, w_ref = _run(tmp_path, "ref", "ina", ["--refuse"])
    assert all(ranks_agree(refused))
    assert all(r["hook"]["fallback_events"] == 1 and r["hook"]["ina_buckets"] == 0
               for r in refused)
    assert "refused" in refused[0]["hook"]["reason"]
    for k, gap in enumerate(weight_gaps(w_ref, w_gloo)):
        assert gap <= (k + 1) * 4 * 2.0**-24 * float(np.max(np.abs(w_gloo[k]))), (k, gap)
