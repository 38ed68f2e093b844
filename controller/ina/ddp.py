"""A PyTorch DDP communication hook that all-reduces gradient buckets in the aggregation switch.

Usage (every rank; ``fallback`` is a gloo process group of the same ranks)::

    state = ina_state(fallback, create_job=lambda: client.create_ina_job(
        "job-1", workers), bind=(my_ipv4, my_udp_port))      # collective: every rank calls it
    ddp.register_comm_hook(state, ina_allreduce_hook)

``create_job`` runs on rank 0 only: it asks the controller's northbound ``CreateInaJob`` (the
controller writes the job under its P4Runtime role ``aifabric.ina``) and returns the grant
(``job_id``, ``pool_size``, ``elements_per_packet``, ``service_ipv4``, ``service_port``);
rank 0 broadcasts the grant (or the refusal) to the others over ``fallback``.

Per bucket (:func:`ina_allreduce_hook`): the flattened float32 bucket goes through
:class:`controller.ina.worker.InaCommunicator` (block fixed point, :mod:`controller.ina.quant`;
SwitchML's slots and retransmissions, :mod:`controller.ina.protocol`), the sum comes back,
is divided by the world size (DDP averages gradients) and is returned in a completed
``torch.futures.Future``.

Fallback, decided by every rank alike. A rank whose INA all-reduce fails (job refused at
set-up, a slot unanswered after ``max_retries`` retransmissions — the switch lost —, a
worker-count mismatch, a non-finite gradient) must not fall back alone: the others would wait
on the switch, or sum a different bucket on gloo. So after every bucket's INA attempt the ranks
agree with a one-element ``all_reduce(MIN)`` on ``fallback`` of a status flag (1 = served):
only when every rank got the switch's sum is it used; otherwise every rank all-reduces its
*original* bucket on gloo (the INA result, if a rank had one, is thrown away), and the hook
stays on gloo for the rest of the run (one log line, ``fallback_buckets`` and
``fallback_events`` counters). The flag costs one small gloo all-reduce per bucket (8 bytes of
payload per rank plus TCP headers); the alternative, a collective deadline, would need
synchronised clocks. The training loop never sees an exception from the hook.
"""

# no ``from __future__ import annotations``: DDP checks the hook's annotations as objects
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from controller.ina import quant
from controller.ina.protocol import JobParams
from controller.ina.worker import InaCommunicator

LOG = logging.getLogger("aifabric.ina.ddp")


@dataclass
class InaHookState:
    """What :func:`ina_allreduce_hook` keeps between buckets.

    Attributes
    ----------
    group : ProcessGroup
        gloo group of every rank: the flag agreement and the fallback all-reduce.
    world_size : int
    comm : InaCommunicator or None
        This rank's endpoint of the job; None: no job (refused at set-up), gloo throughout.
    on_gloo : bool
        True once the hook has fallen back (it never returns to the switch in a run).
    reason : str or None
        Why it fell back (the first failing rank's own error, or "another rank failed").
    ina_buckets, fallback_buckets : int
        Buckets the switch summed / buckets gloo summed.
    fallback_events : int
        Times the hook switched to gloo (0 or 1 per run): the metric a dashboard counts.
    grad_bound : float
        Largest per-element bound (:func:`bucket_bound`) on ``|averaged gradient − exact
        average|`` of the INA buckets since :meth:`take_bound` last reset it.
    exp_max : int
        Largest shared block exponent of those buckets (every gradient element ``|g| < 2**e``):
        what :func:`gloo_bound` needs.
    """

    group: Any
    world_size: int
    comm: InaCommunicator | None
    on_gloo: bool = False
    reason: str | None = None
    ina_buckets: int = 0
    fallback_buckets: int = 0
    fallback_events: int = 0
    grad_bound: float = 0.0
    exp_max: int = quant.EXP_MIN
    log: Callable[[str], None] = field(default=LOG.warning)

    def take_bound(self) -> tuple[float, int]:
        """``(grad_bound, exp_max)`` since the last call (then reset)."""
        b, e = self.grad_bound, self.exp_max
        self.grad_bound, self.exp_max = 0.0, quant.EXP_MIN
        return b, e

    def fall_back(self, reason: str) -> None:
        """Switch to gloo for the rest of the run (once: one event, one log line)."""
        if not self.on_gloo:
            self.on_gloo, self.reason = True, reason
            self.fallback_events += 1
            self.log(f"INA all-reduce falls back to gloo for the rest of the run: {reason}")


def bucket_bound(exponents: np.ndarray[Any, Any], n_workers: int) -> float:
    """Largest per-element bound on ``|sum / n − exact sum / n|`` over a bucket's blocks.

    Per block with shared exponent ``e``: :func:`controller.ina.quant.error_bound` with
    ``Σ_w |x_w| <= n·2**e`` (every worker's ``|x| < 2**e``, :mod:`controller.ina.quant` step 3),
    divided by ``n``, plus the float32 rounding of the division (``u·|sum/n|``, ``u = 2**-24``,
    Higham §2.1; ``|sum/n| < 2**e``)."""
    if exponents.size == 0:
        return 0.0
    e = int(np.max(exponents))
    b = quant.error_bound(e, n_workers, np.array([n_workers * 2.0**e]))[0]
    return float(b / n_workers + quant.U_FLOAT32 * 2.0**e)


def gloo_bound(e: int, n_workers: int) -> float:
    """Per-element bound on ``|gloo's average − exact average|`` when every rank's gradient is
    below ``2**e``: DDP divides each by ``n`` (``u`` relative) and gloo sums the ``n`` in
    float32, ``(n−1)·u·Σ|x_w/n| <= (n−1)·u·2**e`` (recursive summation, Higham §4.2, first
    order in ``u = 2**-24``); together ``n·u·2**e``."""
    return n_workers * quant.U_FLOAT32 * 2.0**e


def ina_state(group: Any, create_job: Callable[[], Any] | None, bind: tuple[str, int], *,
              timeout_s: float = 0.2, max_retries: int = 25, loss: float = 0.0,
              seed: int = 0) -> InaHookState:
    """The hook's state for this rank (a collective over ``group``: every rank calls it).

    Parameters
    ----------
    group : ProcessGroup
        gloo group of every rank (the fallback and the agreement).
    create_job : callable or None
        Called on rank 0: the controller's grant (``CreateInaJobResponse`` or any object with
        ``job_id``, ``pool_size``, ``elements_per_packet``, ``service_ipv4``,
        ``service_port``). An exception (refused, controller unreachable) or None: no job,
        every rank on gloo from the start.
    bind : (str, int)
        This rank's address and UDP port for results (the worker entry of the job).
    timeout_s, max_retries : float, int
        The worker library's retransmission timeout and retries per slot: a switch silent for
        about ``timeout_s × max_retries`` is taken as lost.
    loss, seed : float, int
        Loss injection of the worker library (each direction), for experiments.
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    box: list[Any] = [None]
    if rank == 0:
        try:
            g = create_job() if create_job is not None else None
            box[0] = None if g is None else {k: (str(v) if k == "service_ipv4" else int(v)) for k, v in (
                ("job_id", g.job_id), ("pool_size", g.pool_size),
                ("elements_per_packet", g.elements_per_packet),
                ("service_ipv4", g.service_ipv4), ("service_port", g.service_port))}
        except Exception as exc:  # noqa: BLE001 - any refusal means gloo, never a crash
            box[0] = {"refused": f"{type(exc).__name__}: {exc}"[:300]}
    dist.broadcast_object_list(box, src=0, group=group)
    grant = box[0]
    state = InaHookState(group, world, None)
    if grant is None or "refused" in grant:
        state.fall_back("no aggregation job: " + (grant or {}).get("refused", "none asked for"))
        return state
    try:
        params = JobParams(grant["job_id"], rank, world, grant["pool_size"],
                           grant["elements_per_packet"])
        state.comm = InaCommunicator(params, (grant["service_ipv4"], grant["service_port"]), bind,
                                     timeout_s=timeout_s, max_retries=max_retries,
                                     loss_tx=loss, loss_rx=loss, seed=seed)
        ok = 1
    except (ValueError, OSError) as exc:
        state.reason = f"rank {rank}: {exc}"
        ok = 0
    flag = torch.tensor([ok], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    if int(flag.item()) == 0:
        if state.comm is not None:
            state.comm.close()
            state.comm = None
        state.fall_back(state.reason or "another rank could not open its INA socket")
    return state


def ina_allreduce_hook(state: InaHookState,
                       bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook (``DistributedDataParallel.register_comm_hook``): the bucket's
    average over the ranks, summed by the switch, or by gloo after a fallback (module
    docstring). Never raises for a switch or network failure."""
    buf: torch.Tensor = bucket.buffer()
    summed: np.ndarray[Any, Any] | None = None
    why = "another rank's INA all-reduce failed"
    if not state.on_gloo and state.comm is not None:
        try:
            x = buf.detach().to(torch.float32).contiguous().numpy()
            summed = state.comm.allreduce(x)
        except Exception as exc:  # noqa: BLE001 - RetriesExhausted, OSError, ValueError…
            why = f"rank {dist.get_rank(state.group)}: {type(exc).__name__}: {exc}"[:300]
            summed = None
    if not state.on_gloo:
        flag = torch.tensor([1 if summed is not None else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=state.group)
        if int(flag.item()) == 1 and summed is not None:
            avg = torch.from_numpy(summed).div_(state.world_size)
            buf.copy_(avg.view_as(buf))
            state.ina_buckets += 1
            assert state.comm is not None
            exps = np.asarray(state.comm.last_exponents)
            state.grad_bound = max(state.grad_bound, bucket_bound(exps, state.world_size))
            if exps.size:
                state.exp_max = max(state.exp_max, int(exps.max()))
            fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
            fut.set_result(buf)
            return fut
        state.fall_back(why)
    state.fallback_buckets += 1
    dist.all_reduce(buf, group=state.group)
    buf.div_(state.world_size)  # as DDP's built-in all-reduce: sum, then divide
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut
