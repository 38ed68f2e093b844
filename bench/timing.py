"""The one timing helper the benchmark scripts share (run them as ``python bench/NAME.py``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TypeVar

RUNS = 5
T = TypeVar("T")


def timed(fn: Callable[[], T], runs: int = RUNS) -> tuple[float, T]:
    """Median wall time in seconds (time.perf_counter) over ``runs`` calls, and the last result."""
    times = []
    result: T
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result
