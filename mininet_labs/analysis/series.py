"""Counters over time (pure): reading a sampled counter at any instant, and the bytes of a
binned counter inside a time window."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def interpolate(samples: Sequence[tuple[float, Sequence[float]]], t: float) -> tuple[float, ...]:
    """Counters at time ``t`` from ``[(time, (c1, c2, ...)), ...]`` sorted by time, linear between
    the two samples around ``t``.

    >>> interpolate([(0.0, (0, 10)), (2.0, (20, 10))], 0.5)
    (5.0, 10.0)

    Raises
    ------
    ValueError
        ``t`` is outside the sampled span.
    """
    if not samples or not samples[0][0] <= t <= samples[-1][0]:
        raise ValueError(f"time {t:.3f} outside the sampled span")
    for (t0, a), (t1, b) in zip(samples, samples[1:], strict=False):
        if t0 <= t <= t1:
            f = (t - t0) / (t1 - t0) if t1 > t0 else 0.0
            return tuple(x + f * (y - x) for x, y in zip(a, b, strict=True))
    return tuple(float(x) for x in samples[-1][1])


def binned_in_window(rows: Sequence[Sequence[float]], bin_s: float, start: float,
                     end: float) -> float:
    """Sum of ``[bin start, amount, ...]`` rows inside [``start``, ``end``], each bin counted in
    proportion to its overlap with the window.

    >>> binned_in_window([[0.0, 100], [1.0, 100]], 1.0, 0.5, 1.5)
    100.0
    """
    total = 0.0
    for row in rows:
        overlap = min(end, row[0] + bin_s) - max(start, row[0])
        if overlap > 0:
            total += row[1] * overlap / bin_s
    return total


def counter_deltas(before: Mapping[Any, Sequence[int]], after: Mapping[Any, Sequence[int]],
                   index: int) -> dict[Any, int]:
    """``after[k][index] - before[k][index]`` for every key of ``after`` (0 where ``before``
    lacks it)."""
    return {k: v[index] - (before[k][index] if k in before else 0) for k, v in after.items()}
