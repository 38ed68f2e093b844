"""One data-parallel training worker whose gradients are summed by the aggregation switch.

Run one process per worker (in its host)::

    python -m mininet_labs.workloads.ina_worker --worker-id 0 --workers 4 --job-id 1 --pool 32 \\
        --switch-ip 10.0.0.254 --bind-ip 10.0.0.1 --udp-port 40001 --steps 5 --out w0.json

Each step: the worker's MLP gradient (:mod:`.ina_mlp`) is all-reduced through the switch
(:class:`controller.ina.worker.InaCommunicator`), and the model takes an SGD step with the mean.
Verification: the worker recomputes every worker's gradient for the step (same parameters,
deterministic batches), sums them in float64, and checks every element of the switch's result
against :func:`controller.ina.quant.error_bound` for its block's shared exponent, and — stronger —
against the fixed-point result itself: every worker's block quantised with the shared exponent,
the int32 lanes summed exactly, dequantised (:mod:`controller.ina.quant` steps 3-4); the switch's
result must equal that bit for bit (``exact``). The JSON output has per-step times, the fraction
of elements within the bound and bit-exact, bytes and packets, retransmissions, and a digest of
the final parameters (equal on every worker when training stayed in step). ``--start-at`` (a
``time.time()`` value) makes every worker begin its first all-reduce at the same moment, so no
worker retransmits while the others are still starting.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from controller.ina import quant
from controller.ina.program import ELEMS, INA_UDP_PORT
from controller.ina.protocol import JobParams
from controller.ina.worker import InaCommunicator
from mininet_labs.workloads.ina_mlp import MlpSpec, gradient, init_params


def check_step(spec: MlpSpec, params: np.ndarray, step: int, n: int, result: np.ndarray,
               exps: np.ndarray) -> dict[str, float]:
    """Fraction of elements within the bound, and the max error / bound, for one step."""
    gs = np.stack([gradient(spec, params, w, step)[0].astype(np.float64) for w in range(n)])
    s, a = gs.sum(axis=0), np.abs(gs).sum(axis=0)
    e = np.repeat(exps.astype(np.int64), ELEMS)[: s.size]
    b = quant.headroom_bits(n)
    nd = n * np.ldexp(1.0, e - b - 1)
    bound = nd + quant.U_FLOAT32 * (a + nd) + (n - 1) * quant.U_FLOAT64 * a  # = error_bound, vectorised
    err = np.abs(result.astype(np.float64) - s)
    fixed = fixed_point_sum(gs.astype(np.float32), exps, n)
    return {"within_bound": float((err <= bound).mean()),
            "exact": float((fixed == result.astype(np.float32)).mean()),
            "max_err_over_bound": float((err / bound).max()), "max_abs_err": float(err.max()),
            "max_rel_err_vs_max": float(err.max() / max(np.abs(s).max(), 1e-30))}


def fixed_point_sum(gs: np.ndarray, exps: np.ndarray, n: int) -> np.ndarray:
    """What the switch must return for float32 gradients ``gs`` (workers × elements) with shared
    block exponents ``exps``: per block, ``dequantise(Σ_w quantise(g_w, e))`` (int64 sum; the
    bound of :mod:`controller.ina.quant` keeps it within int32)."""
    length = gs.shape[1]
    blocks = -(-length // ELEMS)
    padded = np.zeros((gs.shape[0], blocks * ELEMS), np.float32)
    padded[:, :length] = gs
    out = np.zeros(blocks * ELEMS, np.float32)
    for b in range(blocks):
        e = int(exps[b])
        lanes = slice(b * ELEMS, (b + 1) * ELEMS)
        total = sum(quant.quantise(padded[w, lanes], e, n).astype(np.int64) for w in range(n))
        out[lanes] = quant.dequantise(np.asarray(total, np.int64).astype(np.int32), e, n)
    return out[:length]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker-id", type=int, required=True)
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--job-id", type=int, required=True)
    p.add_argument("--pool", type=int, required=True)
    p.add_argument("--switch-ip", required=True)
    p.add_argument("--bind-ip", required=True)
    p.add_argument("--udp-port", type=int, required=True)
    p.add_argument("--switch-port", type=int, default=INA_UDP_PORT)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--layers", default="64,128,64,10")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--loss", type=float, default=0.0, help="drop probability, send and receive")
    p.add_argument("--timeout-ms", type=float, default=50.0)
    p.add_argument("--start-at", type=float, default=0.0,
                   help="time.time() at which to start the first all-reduce (0: at once)")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    spec = MlpSpec(tuple(int(x) for x in a.layers.split(",")), a.batch, a.seed)
    params = init_params(spec)
    comm = InaCommunicator(JobParams(a.job_id, a.worker_id, a.workers, a.pool),
                           (a.switch_ip, a.switch_port), (a.bind_ip, a.udp_port),
                           timeout_s=a.timeout_ms / 1000, loss_tx=a.loss, loss_rx=a.loss,
                           seed=a.seed * 1000 + a.worker_id)
    steps: list[dict[str, Any]] = []
    ok = True
    wait_s = a.start_at - time.time()
    if wait_s > 0:
        time.sleep(wait_s)
    try:
        for step in range(a.steps):
            g, loss = gradient(spec, params, a.worker_id, step)
            t0 = time.monotonic()
            total = comm.allreduce(g)
            dt = time.monotonic() - t0
            chk = check_step(spec, params, step, a.workers, total, comm.last_exponents)
            ok &= chk["within_bound"] == 1.0 and chk["exact"] == 1.0
            steps.append({"step": step, "loss": loss, "seconds": dt, "elements": int(g.size),
                          **chk})
            params = params - spec.lr * total / a.workers
    except Exception as e:  # noqa: BLE001 - reported in the JSON, exit 1
        ok = False
        steps.append({"error": repr(e)})
    st = comm.stats
    doc = {"worker_id": a.worker_id, "workers": a.workers, "elements": spec.n_params,
           "gradient_bytes": 4 * spec.n_params, "loss_injected": a.loss, "steps": steps, "ok": ok,
           "param_digest": hashlib.sha256(params.tobytes()).hexdigest()[:16],
           "stats": {k: v for k, v in vars(st).items() if k != "seconds"},
           "seconds": st.seconds}
    a.out.write_text(json.dumps(doc, indent=1))
    comm.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
