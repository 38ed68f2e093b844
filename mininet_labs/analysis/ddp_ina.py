"""Comparison of DDP runs whose gradients gloo or the aggregation switch all-reduced (pure).

Input: the rank reports of :mod:`mininet_labs.workloads.ddp_ina` (per step the parameters'
SHA-256, the hook's counters, its gradient bound and largest block exponent) and rank 0's
parameters after every step (steps × parameters, float32) of two runs with the same model,
data and seed.

Weight bound, per element, after step ``k`` (first order; SGD ``w ← w − lr·g``)::

    B_k = Σ_{j<=k} [ lr·(b_j + gloo_j) + 2·u·(max|w_j| + lr·2**e_j) · 2 ]

``b_j``: the hook's bound on ``|INA average − exact average|`` of step ``j``
(:func:`controller.ina.ddp.bucket_bound`, from the quantiser's
:func:`controller.ina.quant.error_bound`); ``gloo_j = n·u·2**e_j``
(:func:`controller.ina.ddp.gloo_bound`), gloo's own float32 summation error; the last term is
each run's rounding of the update (two roundings of ``u = 2**-24`` relative, Higham §2.1). It
counts the gradient's error of every step and not its change with weights that already
differ (second order: the difference is ~1e-8 relative); the first step's bound is exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np

U_FLOAT32 = 2.0**-24


def ranks_agree(reports: list[dict[str, Any]]) -> list[bool]:
    """Per step: whether every rank's parameters hash the same."""
    steps = min(len(r["steps"]) for r in reports)
    return [len({r["steps"][k]["param_digest"] for r in reports}) == 1 for k in range(steps)]


def weight_bounds(ina_reports: list[dict[str, Any]], params: np.ndarray[Any, Any], lr: float,
                  n: int, upto: int | None = None) -> list[float]:
    """``B_k`` of the module docstring for every step (of the INA run ``ina_reports``, its
    parameters ``params``) up to ``upto`` steps (None: all)."""
    steps = min(len(r["steps"]) for r in ina_reports)
    if upto is not None:
        steps = min(steps, upto)
    out, acc = [], 0.0
    for k in range(steps):
        b = max(r["steps"][k].get("grad_bound", 0.0) for r in ina_reports)
        e = max(r["steps"][k].get("exp_max", -126) for r in ina_reports)
        wmax = float(np.max(np.abs(params[k])))
        acc += lr * (b + n * U_FLOAT32 * 2.0**e) + 4 * U_FLOAT32 * (wmax + lr * 2.0**e)
        out.append(acc)
    return out


def weight_gaps(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> list[float]:
    """``max |a_k − b_k|`` per step (the shorter run's steps)."""
    k = min(len(a), len(b))
    return [float(np.max(np.abs(a[i].astype(np.float64) - b[i].astype(np.float64))))
            for i in range(k)]


def fallback_steps(reports: list[dict[str, Any]]) -> list[int]:
    """Steps after which some rank's hook was on gloo."""
    steps = min(len(r["steps"]) for r in reports)
    return [k for k in range(steps) if any(r["steps"][k].get("on_gloo") for r in reports)]


def ring_bytes(n_params: int, n: int) -> float:
    """Payload bytes a rank sends in a ring all-reduce of ``n_params`` float32: ``2(n−1)/n ·
    4·n_params`` (reduce-scatter then all-gather; Patarasuk & Yuan 2009)."""
    return 2 * (n - 1) / n * 4 * n_params
