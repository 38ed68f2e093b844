"""One rank of DDP training whose gradients are all-reduced by gloo or by the aggregation switch.

``python -m mininet_labs.workloads.ddp_ina --rank R --world N --backend gloo|ina ...``

The model (:func:`build_model`): a small convolutional net on 3×16×16 inputs — two 3×3
convolutions (32 and 64 channels), a 2×2 max-pool, a ``4096 → hidden`` and a ``hidden → 10``
linear layer; ``hidden`` 256 gives 1,070,794 parameters. Weights from ``torch.manual_seed(seed)``
(the same on every rank and in every run: DDP's initial broadcast is skipped), inputs and labels
from a ``torch.Generator`` seeded by (seed, rank, step): the same data for every backend. SGD
(lr ``--lr``), one thread, deterministic algorithms.

``--backend gloo``: DDP's default all-reduce on gloo. ``--backend ina``: the hook of
:mod:`controller.ina.ddp`; rank 0 asks for the job with ``--northbound TARGET`` (the
controller's ``CreateInaJob``: every rank's (IPv4, MAC, UDP port) in rank order, from
``--workers-json``) or takes ``--grant-json`` as the grant (tests without a controller);
``--refuse``: no job (gloo from the start, the refusal path).

The report (``--out``, JSON): per step the wall and CPU seconds of the step (forward, backward
with the all-reduces, optimiser), the loss, the SHA-256 of all parameters after the step, the
hook's counters (INA/gloo buckets, fallback events, the largest gradient bound of the step);
the bytes this rank's interface sent over the run (``--ifname``: ``/sys/class/net``) and the
worker library's frame bytes. ``--params-out`` (rank 0): every step's parameters as float32
(``.npy``, shape steps × parameters) for the comparison of two runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def build_model(hidden: int) -> Any:
    """The convolutional net of the module docstring (``hidden`` units in the first linear
    layer; 256: 1,070,794 parameters)."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def n_params(hidden: int) -> int:
    """Parameters of :func:`build_model` (``hidden`` = 256: 1,070,794)."""
    conv = (3 * 9 * 32 + 32) + (32 * 9 * 64 + 64)
    return conv + 4096 * hidden + hidden + hidden * 10 + 10


def _tx_bytes(ifname: str | None) -> int | None:
    if not ifname:
        return None
    try:
        return int(Path(f"/sys/class/net/{ifname}/statistics/tx_bytes").read_text())
    except OSError:
        return None


def _create_job(a: argparse.Namespace) -> Any:
    if a.refuse:
        raise RuntimeError("refused by --refuse")
    if a.grant_json:
        return SimpleNamespace(**json.loads(a.grant_json))
    from controller.northbound.client import FabricClient

    workers = [tuple(w) for w in json.loads(a.workers_json)]
    with FabricClient(a.northbound, timeout_s=60.0, insecure=True) as client:
        return client.create_ina_job(a.job_name, workers, pool_size=a.pool_size)


def train(a: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo", rank=a.rank, world_size=a.world,
                            timeout=timedelta(seconds=a.timeout_s))
    torch.manual_seed(a.seed)
    model = build_model(a.hidden)
    ddp = DDP(model, init_sync=False)
    state = None
    if a.backend == "ina":
        from controller.ina.ddp import ina_allreduce_hook, ina_state

        state = ina_state(dist.group.WORLD, lambda: _create_job(a), (a.bind_ip, a.udp_port),
                          timeout_s=a.retx_timeout_ms / 1e3, max_retries=a.max_retries,
                          loss=a.loss, seed=a.seed * 1000 + a.rank)
        ddp.register_comm_hook(state, ina_allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    params = [p for p in model.parameters()]
    snaps = []
    steps = []
    tx0 = _tx_bytes(a.ifname)
    dist.barrier()
    for step in range(a.steps):
        g = torch.Generator().manual_seed(a.seed * 1_000_003 + a.rank * 1009 + step)
        x = torch.randn(a.batch, 3, 16, 16, generator=g)
        y = torch.randint(0, 10, (a.batch,), generator=g)
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        flat = torch.cat([p.detach().reshape(-1) for p in params]).numpy()
        rec: dict[str, Any] = {"step": step, "wall_s": round(wall, 4), "cpu_s": round(cpu, 4),
                               "loss": float(loss.item()),
                               "param_digest": hashlib.sha256(flat.tobytes()).hexdigest()}
        if state is not None:
            bound, exp_max = state.take_bound()
            rec.update({"ina_buckets": state.ina_buckets, "fallback_buckets": state.fallback_buckets,
                        "fallback_events": state.fallback_events, "on_gloo": state.on_gloo,
                        "grad_bound": bound, "exp_max": exp_max})
        steps.append(rec)
        if a.params_out and a.rank == 0:
            snaps.append(flat.copy())
        if a.kill_after_step is not None and step == a.kill_after_step and a.rank == 0:
            Path(a.kill_flag).write_text(str(step))  # the lab kills the switch now
        if a.pause_after_step_s and a.kill_after_step is not None and step == a.kill_after_step:
            time.sleep(a.pause_after_step_s)
    tx1 = _tx_bytes(a.ifname)
    if a.params_out and a.rank == 0:
        np.save(a.params_out, np.stack(snaps))
    out: dict[str, Any] = {
        "rank": a.rank, "world": a.world, "backend": a.backend, "ok": True,
        "parameters": int(sum(p.numel() for p in params)), "steps": steps,
        "tx_bytes": None if tx0 is None or tx1 is None else tx1 - tx0}
    if state is not None:
        st = state.comm.stats if state.comm is not None else None
        out["hook"] = {"reason": state.reason, "fallback_events": state.fallback_events,
                       "ina_buckets": state.ina_buckets, "fallback_buckets": state.fallback_buckets,
                       "ina_frame_bytes_tx": st.bytes_tx if st else 0,
                       "ina_packets_sent": st.sent if st else 0,
                       "retransmitted": st.retransmitted if st else 0,
                       "injected_drops": (st.injected_drops_tx + st.injected_drops_rx) if st else 0}
    dist.barrier()
    return out


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--backend", choices=("gloo", "ina"), required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--timeout-s", type=float, default=600.0, help="gloo's timeout")
    p.add_argument("--northbound", default=None, help="the controller's northbound (host:port "
                   "or unix:PATH); rank 0 asks it for the job")
    p.add_argument("--job-name", default="ddp-ina")
    p.add_argument("--workers-json", default="[]", help="[[ipv4, mac, udp_port], ...] by rank")
    p.add_argument("--grant-json", default=None, help="a grant instead of asking a controller")
    p.add_argument("--refuse", action="store_true", help="no job: gloo from the start")
    p.add_argument("--pool-size", type=int, default=0)
    p.add_argument("--bind-ip", default="0.0.0.0")
    p.add_argument("--udp-port", type=int, default=40000)
    p.add_argument("--retx-timeout-ms", type=float, default=200.0)
    p.add_argument("--max-retries", type=int, default=25)
    p.add_argument("--loss", type=float, default=0.0)
    p.add_argument("--ifname", default=None)
    p.add_argument("--params-out", default=None)
    p.add_argument("--kill-after-step", type=int, default=None)
    p.add_argument("--kill-flag", default="/tmp/ddp-ina-kill")
    p.add_argument("--pause-after-step-s", type=float, default=0.0,
                   help="after --kill-after-step, wait this long (the switch is being killed)")
    p.add_argument("--out", required=True)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    try:
        rep = train(a)
    except Exception as exc:  # noqa: BLE001 - the report says why
        rep = {"rank": a.rank, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
    Path(a.out).write_text(json.dumps(rep))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if rep.get("ok") else 1)  # see torch_dist._leave: no gloo tear-down


if __name__ == "__main__":
    main()
