"""A small MLP trained with numpy: the source of real gradients for the aggregation lab.

Data: ``classes`` Gaussian clusters in ``layers[0]`` dimensions (fixed by ``seed``); worker ``w``
draws its mini-batches from its own stream (data parallelism). Model: fully connected layers
with ReLU, softmax cross-entropy; gradients by backpropagation. Everything is a pure function of
``(seed, worker, step, params)``, so any worker can recompute any other worker's gradient — the
lab uses that to check the switch's sum against the exact float64 sum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class MlpSpec:
    layers: tuple[int, ...] = (64, 128, 64, 10)
    batch: int = 64
    seed: int = 1
    lr: float = 0.1

    @property
    def n_params(self) -> int:
        return sum(a * b + b for a, b in zip(self.layers[:-1], self.layers[1:], strict=True))


def init_params(spec: MlpSpec) -> NDArray[np.float32]:
    """He-initialised weights and zero biases, flattened (float32)."""
    rng = np.random.default_rng(spec.seed)
    parts = []
    for a, b in zip(spec.layers[:-1], spec.layers[1:], strict=True):
        parts.append((rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).ravel())
        parts.append(np.zeros(b))
    return np.concatenate(parts).astype(np.float32)


def _unflatten(spec: MlpSpec, flat: NDArray[np.float32]) -> list[tuple[NDArray, NDArray]]:
    out, i = [], 0
    for a, b in zip(spec.layers[:-1], spec.layers[1:], strict=True):
        w = flat[i:i + a * b].reshape(a, b)
        i += a * b
        out.append((w, flat[i:i + b]))
        i += b
    return out


def batch(spec: MlpSpec, worker: int, step: int) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """Worker ``worker``'s mini-batch of step ``step``: inputs and class labels."""
    centres = np.random.default_rng(spec.seed + 1000).standard_normal((spec.layers[-1], spec.layers[0]))
    rng = np.random.default_rng([spec.seed, worker, step])
    y = rng.integers(0, spec.layers[-1], size=spec.batch)
    x = centres[y] + rng.standard_normal((spec.batch, spec.layers[0])) * 1.5
    return x.astype(np.float32), y


def gradient(spec: MlpSpec, params: NDArray[np.float32], worker: int,
             step: int) -> tuple[NDArray[np.float32], float]:
    """(flattened float32 gradient of the mean cross-entropy, the loss) on worker's batch."""
    x, y = batch(spec, worker, step)
    layers = _unflatten(spec, params)
    acts = [x]
    for k, (w, b) in enumerate(layers):
        z = acts[-1] @ w + b
        acts.append(np.maximum(z, 0) if k < len(layers) - 1 else z)
    logits = acts[-1] - acts[-1].max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    loss = float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean())
    d = p
    d[np.arange(len(y)), y] -= 1
    d /= len(y)
    grads: list[NDArray] = []
    for k in range(len(layers) - 1, -1, -1):
        w, _ = layers[k]
        grads.append(d.sum(axis=0))
        grads.append((acts[k].T @ d).ravel())
        if k:
            d = (d @ w.T) * (acts[k] > 0)
    return np.concatenate(grads[::-1]).astype(np.float32), loss
