"""Real ``torch.distributed`` traffic (backend gloo, TCP): one rank per process.

``python -m mininet_labs.workloads.torch_dist allreduce --rank R --world N --seed S --sizes ...``
    An nccl-tests-style sweep: for every collective (``all_reduce``, ``all_gather``,
    ``reduce_scatter``) and size S (nccl-tests' "size": the all-reduce buffer; the gathered
    output of all_gather; the input of reduce_scatter), ``--warmup`` untimed then ``--iters``
    timed operations. Each operation is timed by the rank around the torch call
    (``time.perf_counter``, the buffers refilled outside the timed region); the time of a size
    is the mean over iterations, the largest over ranks (an ``all_reduce(MAX)`` of the ranks'
    times). algbw = S / t, busbw = algbw × 2(n−1)/n (all_reduce) or (n−1)/n (all_gather,
    reduce_scatter): nccl-tests ``doc/PERFORMANCE.md``. Every result is checked exactly
    (rank r contributes the value r + 1, so sums are small integers, exact in float32).

``python -m mininet_labs.workloads.torch_dist ddp --rank R --world N --seed S --layers ...``
    A ``torch.nn`` MLP (Linear + ReLU) wrapped in DistributedDataParallel, trained ``--steps``
    steps with SGD on synthetic data (inputs and labels from ``torch.Generator`` seeded by
    (seed, rank); the model's initial weights from the seed, the same on every rank). A DDP
    communication hook times every gradient bucket's all-reduce (launch to completion); per step
    the report has the step time and the all-reduce time (first launch to last completion).
    After training, the SHA-256 of all parameters' bytes: every rank's must be equal, and equal
    for equal seeds whatever the network did (``torch.use_deterministic_algorithms``, one
    thread; gloo's ring reduces in a fixed order).

Both read ``MASTER_ADDR``/``MASTER_PORT`` (rank 0's host; TCP store) and gloo reads
``GLOO_SOCKET_IFNAME`` from the environment. ``--register HOST:PORT|unix:PATH --job J --name C``:
before the first collective every rank calls
:func:`controller.northbound.client.register_process_group`, so the controller pins the ring's
flows in the direction gloo sends (:func:`gloo_ring_order`), by host address (gloo's ports are
ephemeral), and every rank waits until they are in force. DDP starts without its initial
broadcast of the weights (``init_sync=False``): every rank builds the same weights from the seed.
The report (``--out``) is JSON; on failure ``{"rank", "error"}``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

BUSBW_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n,
                "all_gather": lambda n: (n - 1) / n,
                "reduce_scatter": lambda n: (n - 1) / n}


def gloo_ring_order(ranks: Sequence[str]) -> list[str]:
    """The ranks in the order gloo's ring all-reduce sends: rank i sends to rank i − 1 (measured
    on the lab fabric: with rank i → i + 1 pinned, the pinned flows carried ~1 % of the data and
    the reverse ones the rest), so the ring to pin is r0 → r(n−1) → … → r1 → r0.

    >>> gloo_ring_order(["h1", "h3", "h5", "h7"])
    ['h1', 'h7', 'h5', 'h3']
    """
    return [ranks[0], *reversed(ranks[1:])]


def gloo_ring_client(target: str, insecure: bool = False) -> Any:
    """A :class:`~controller.northbound.client.FabricClient` for ``target`` whose ``register``
    pins the ring in gloo's direction (:func:`gloo_ring_order`): ``register_process_group``
    hands it the ranks in process-group order, rank i → rank i + 1. ``insecure``: plain text
    (the lab's controller runs with ``--insecure``; the client refuses plain text otherwise)."""
    from controller.northbound.client import FabricClient

    class GlooRingClient(FabricClient):
        def register(self, job: str, name: str, ranks: Sequence[str], **kwargs: Any) -> Any:
            return super().register(job, name, gloo_ring_order(list(ranks)), **kwargs)

    return GlooRingClient(target, timeout_s=60.0, insecure=insecure)


def _init(a: argparse.Namespace) -> dict[str, Any]:
    """Join the process group; register it with the controller when asked."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo", rank=a.rank, world_size=a.world,
                            timeout=timedelta(seconds=a.timeout_s))
    reg: dict[str, Any] = {"registered": False}
    if a.register:
        from controller.northbound.client import register_process_group

        t0 = time.perf_counter()
        with gloo_ring_client(a.register, insecure=a.insecure) as fabric:
            reply = register_process_group(fabric, job=a.job, name=a.name, address=a.address)
        reg = {"registered": True, "collective": reply.collective,
               "in_force": reply.confirmation.in_force,
               "apply_ms": round(reply.confirmation.apply_ms, 1),
               "paths": {f"{f.src}->{f.dst}": list(f.hops) for f in reply.flows},
               "wait_s": round(time.perf_counter() - t0, 3)}
    return reg


def _leave() -> None:
    """Leave together: a last barrier, after which nothing is sent. The process then exits
    without tearing gloo down (:func:`main` ends with ``os._exit``): ``destroy_process_group``
    left one rank in three hanging on this machine once its peers were gone."""
    import torch.distributed as dist

    dist.barrier()


def _max_over_ranks(x: float) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def sweep(a: argparse.Namespace) -> dict[str, Any]:
    """The allreduce sweep (module docstring); returns the report."""
    import torch
    import torch.distributed as dist

    reg = _init(a)
    n, r = a.world, a.rank
    results = []
    start = time.time()
    for coll in a.collectives:
        for size in a.sizes:
            count = max(n, size // 4 // n * n)  # float32 elements, a multiple of n
            nbytes = count * 4
            mine = float(r + 1)
            total = float(n * (n + 1) // 2)
            if coll == "all_reduce":
                buf = torch.empty(count)
                expect = torch.full((count,), total)
            elif coll == "all_gather":
                buf = torch.empty(count)
                src = torch.full((count // n,), mine)
                expect = torch.repeat_interleave(torch.arange(1, n + 1, dtype=torch.float32),
                                                 count // n)
            else:
                buf = torch.empty(count // n)
                src = torch.empty(count)
                expect = torch.full((count // n,), total)
            times = []
            ok = True
            for i in range(a.warmup + a.iters):
                if coll == "all_reduce":
                    buf.fill_(mine)
                elif coll == "reduce_scatter":
                    src.fill_(mine)
                t0 = time.perf_counter()
                if coll == "all_reduce":
                    dist.all_reduce(buf)
                elif coll == "all_gather":
                    dist.all_gather_into_tensor(buf, src)
                else:
                    dist.reduce_scatter_tensor(buf, src)
                dt = time.perf_counter() - t0
                if i >= a.warmup:
                    times.append(dt)
                ok = ok and bool(torch.equal(buf, expect))
            t = _max_over_ranks(sum(times) / len(times))
            algbw = nbytes * 8 / t
            results.append({"collective": coll, "size_bytes": nbytes, "time_s": t,
                            "algbw_bps": algbw, "busbw_bps": algbw * BUSBW_FACTOR[coll](n),
                            "busbw_factor": BUSBW_FACTOR[coll](n), "iters": a.iters,
                            "warmup": a.warmup, "correct": ok})
    end = time.time()
    _leave()
    return {"rank": r, "world": n, "kind": "allreduce", "start": start, "end": end,
            "results": results, **reg}


def mlp(layers: Sequence[int]) -> Any:
    """``Linear(l0, l1), ReLU, ..., Linear(lk-1, lk)``."""
    import torch.nn as nn

    mods: list[Any] = []
    for i, (a, b) in enumerate(zip(layers, layers[1:], strict=False)):
        mods.append(nn.Linear(a, b))
        if i < len(layers) - 2:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods)


def weights_digest(model: Any) -> str:
    """SHA-256 (hex) of every parameter's bytes, in the model's order: equal weights, equal
    digests, bit for bit."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def train(a: argparse.Namespace) -> dict[str, Any]:
    """DDP training (module docstring); returns the report."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    reg = _init(a)
    n, r = a.world, a.rank
    torch.manual_seed(a.seed)  # the same initial weights on every rank: no broadcast needed
    model = DistributedDataParallel(mlp(a.layers), bucket_cap_mb=a.bucket_cap_mb,
                                    init_sync=False, broadcast_buffers=False)
    timing: dict[str, list[float]] = {"launch": [], "done": []}

    def timed_allreduce(state, bucket):
        """torch's default all-reduce hook (divide by the world size, then sum), timed. No
        annotations: DDP checks that ``bucket`` is unannotated or ``dist.GradBucket``."""
        timing["launch"].append(time.perf_counter())
        buf = bucket.buffer()
        buf.div_(n)
        fut = dist.all_reduce(buf, async_op=True).get_future()

        def done(f: Any) -> Any:
            timing["done"].append(time.perf_counter())
            return f.value()[0]

        return fut.then(done)

    model.register_comm_hook(None, timed_allreduce)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    gen = torch.Generator().manual_seed(a.seed * 1000 + r)
    n_params = sum(p.numel() for p in model.parameters())
    steps = []
    start = time.time()
    for _ in range(a.steps):
        x = torch.randn(a.batch, a.layers[0], generator=gen)
        y = torch.randint(0, a.layers[-1], (a.batch,), generator=gen)
        timing["launch"].clear()
        timing["done"].clear()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()  # returns once DDP's all-reduces are done
        opt.step()
        t1 = time.perf_counter()
        steps.append({"step_s": t1 - t0, "allreduce_s": max(timing["done"]) - min(timing["launch"]),
                      "buckets": len(timing["launch"]), "loss": float(loss.item())})
    end = time.time()
    digest = weights_digest(model.module)
    digests: list[Any] = [None] * n
    dist.all_gather_object(digests, digest)
    for s in steps:  # the slowest rank's all-reduce time per step
        s["allreduce_s_max"] = _max_over_ranks(s["allreduce_s"])
        s["step_s_max"] = _max_over_ranks(s["step_s"])
    _leave()
    return {"rank": r, "world": n, "kind": "ddp", "start": start, "end": end,
            "n_params": n_params, "grad_bytes": n_params * 4, "steps": steps,
            "weights_digest": digest, "digests_equal": len(set(digests)) == 1,
            "torch": torch.__version__, **reg}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mininet_labs.workloads.torch_dist")
    sub = p.add_subparsers(dest="mode", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--rank", type=int, required=True)
    common.add_argument("--world", type=int, required=True)
    common.add_argument("--seed", type=int, required=True)
    common.add_argument("--address", help="this rank's IPv4 address (for the registration)")
    common.add_argument("--timeout-s", type=float, default=600.0)
    common.add_argument("--register", help="the controller's gRPC target (HOST:PORT or unix:PATH)")
    common.add_argument("--insecure", action="store_true",
                        help="register over plain text (a lab controller run with --insecure)")
    common.add_argument("--job", default="lab")
    common.add_argument("--name", default="torch")
    common.add_argument("--out", type=Path, required=True)
    ar = sub.add_parser("allreduce", parents=[common])
    ar.add_argument("--sizes", type=_ints, required=True, help="bytes, comma-separated")
    ar.add_argument("--collectives", type=lambda t: [x for x in t.split(",") if x],
                    default=list(BUSBW_FACTOR))
    ar.add_argument("--iters", type=int, default=5)
    ar.add_argument("--warmup", type=int, default=1)
    dp = sub.add_parser("ddp", parents=[common])
    dp.add_argument("--layers", type=_ints, required=True)
    dp.add_argument("--steps", type=int, default=3)
    dp.add_argument("--batch", type=int, default=32)
    dp.add_argument("--bucket-cap-mb", type=float, default=25.0)
    dp.add_argument("--lr", type=float, default=0.01)
    a = p.parse_args(argv)
    try:
        rep = sweep(a) if a.mode == "allreduce" else train(a)
    except Exception as exc:  # the failure goes into the report as well as to stderr
        a.out.write_text(json.dumps({"rank": a.rank, "error": f"{type(exc).__name__}: {exc}"}))
        print(f"rank {a.rank}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    a.out.write_text(json.dumps(rep, indent=1))
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # see _leave: no gloo teardown at interpreter exit
