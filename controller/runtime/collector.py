"""The controller process's settings of CPython's cyclic garbage collector.

Why the controller needs its own: a placement at 65,536 GPUs with 12 sub-flows per flow is
786,432 flows — with their node paths and the runtime's maps, millions of container objects that
live as long as the placement. CPython collects the oldest generation when the objects promoted
into it since the last full collection exceed a quarter of those that survived it
(``Modules/gcmodule.c``, ``gc_collect_generations``; the gc module documentation, "thresholds"),
and a full collection traverses every tracked object. A repair allocates enough (tens of
thousands of moves, each with two node paths) to trigger one. On the rail fabric of
bench/te_scale.py (``--k 64 --parts rail``), a spine down with 12 sub-flows (24,473 move), the
repair took 385–418 ms of CPU with the collector as Python sets it — a full collection of
276–302 ms inside it — and 103–106 ms with the collector disabled (three runs each, load average
4–7 on 2 CPUs).

What the controller does instead (:func:`freeze_heap`): after planning and after each adopted
placement it collects the young generations (the garbage the computation left) and then freezes
every object alive (:func:`gc.freeze`): frozen objects sit in a permanent generation that no
collection traverses. The collector stays enabled at CPython's thresholds
(:func:`configure_collector`), but a collection only traverses what was allocated since the last
freeze, so a repair pays for its own objects, not for the placement it repairs: the same repair
took 118–119 ms of CPU (its full collection 3 ms; three runs), and a full collection over the
frozen heap 1 ms instead of 191–276 ms. A freeze took at most 48 ms of CPU there (the first,
after planning 786,432 sub-flows; ten per run, 336–348 ms in all). Objects freed by reference
counting are freed as before, frozen or not; only garbage *cycles* among frozen objects would
stay until :func:`thaw_heap` — the te and runtime values hold none
(tests/test_runtime_collector.py: nothing is left for the collector after a plan, a repair, a
re-optimisation and a restore, and a replaced fabric state is freed under repeated freezes).

Thresholds sized to the heap instead (:data:`HEAP_THRESHOLDS`, a gen-0 threshold of 100,000)
were measured too: no collection ran during those repairs (106 and 127 ms of CPU, two runs), but
full collections are only postponed — one still traversed the whole heap (198–219 ms of CPU at
the end of those runs) when it fell due, on the event loop, and cyclic garbage waits that long.
So the controller freezes.

Where the process calls these (the runtime's edge, not the pure core): :func:`configure_collector`
once at start; :func:`freeze_heap` after the start-up placement is planned and after every
placement the runtime adopts (repair, re-optimisation batch, rebalance, registration, policy
apply or reload).
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass

DEFAULT_THRESHOLDS = (700, 10, 10)
"""CPython's own thresholds (gc module documentation), which the controller keeps."""
HEAP_THRESHOLDS = (100_000, 50, 100)
"""The alternative measured by bench/te_scale.py ``--collector thresholds`` and not chosen."""


@dataclass(frozen=True)
class CollectorState:
    """What the collector is doing now: ``enabled``; ``thresholds`` (gen 0, 1, 2);
    ``frozen`` objects in the permanent generation; ``counts`` per generation since their
    last collection."""

    enabled: bool
    thresholds: tuple[int, int, int]
    frozen: int
    counts: tuple[int, int, int]

    def describe(self) -> str:
        """``collector enabled, thresholds (700, 10, 10), 1,234,567 objects frozen``."""
        return (f"collector {'enabled' if self.enabled else 'DISABLED'}, thresholds "
                f"{self.thresholds}, {self.frozen:,} objects frozen")


class CollectionMeter:
    """The collections the garbage collector runs, per generation, and their CPU time, counted
    through :data:`gc.callbacks` from creation until :meth:`close` (benches and metrics: what a
    piece of work paid the collector, :meth:`since`)."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.cpu_s = [0.0, 0.0, 0.0]
        self._t0 = 0.0
        gc.callbacks.append(self._hook)

    def _hook(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.process_time()
        else:
            g = info["generation"]
            self.count[g] += 1
            self.cpu_s[g] += time.process_time() - self._t0

    def mark(self) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """The counts and CPU times now, for :meth:`since`."""
        return tuple(self.count), tuple(self.cpu_s)

    def since(self, mark: tuple[tuple[int, ...], tuple[float, ...]]) -> str:
        """``gen 0/1/2: 124/11/1 collections, 5/4/356 ms CPU`` since ``mark``."""
        n = [a - b for a, b in zip(self.count, mark[0], strict=True)]
        ms = [(a - b) * 1e3 for a, b in zip(self.cpu_s, mark[1], strict=True)]
        return (f"gen 0/1/2: {n[0]}/{n[1]}/{n[2]} collections, "
                f"{ms[0]:.0f}/{ms[1]:.0f}/{ms[2]:.0f} ms CPU")

    def close(self) -> None:
        """Stop counting."""
        if self._hook in gc.callbacks:
            gc.callbacks.remove(self._hook)


class PauseMeter:
    """The collections' wall time since the last :meth:`take`, through :data:`gc.callbacks`: a
    collection stops the event loop for as long as it runs, so the loop's lateness report
    (:meth:`controller.runtime.controller.Controller._tick_loop`) says how much of it they were.
    """

    def __init__(self) -> None:
        self.total_s = 0.0
        self.longest_s = 0.0
        self.longest_generation = -1
        self._t0 = 0.0
        gc.callbacks.append(self._hook)

    def _hook(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        took = time.perf_counter() - self._t0
        self.total_s += took
        if took > self.longest_s:
            self.longest_s, self.longest_generation = took, info["generation"]

    def take(self) -> tuple[float, float, int]:
        """(total s, longest s, the longest one's generation or -1) since the last take;
        starts counting afresh."""
        out = (self.total_s, self.longest_s, self.longest_generation)
        self.total_s = self.longest_s = 0.0
        self.longest_generation = -1
        return out

    def close(self) -> None:
        """Stop counting."""
        if self._hook in gc.callbacks:
            gc.callbacks.remove(self._hook)


def collector_state() -> CollectorState:
    """The collector's settings and counts now (:class:`CollectorState`)."""
    t0, t1, t2 = gc.get_threshold()
    c0, c1, c2 = gc.get_count()
    return CollectorState(gc.isenabled(), (t0, t1, t2), gc.get_freeze_count(), (c0, c1, c2))


def configure_collector(thresholds: tuple[int, int, int] = DEFAULT_THRESHOLDS) -> None:
    """The controller's collector settings, once at process start: enabled, ``thresholds``."""
    gc.enable()
    gc.set_threshold(*thresholds)


def freeze_heap() -> None:
    """Collect the young generations (0 and 1), then freeze every object alive so that later
    collections never traverse it (module docstring). Call after planning, after each adopted
    placement and after each read-back. Cost: a young collection (milliseconds); the freeze
    itself splices lists. It does not count what is frozen: :func:`gc.get_freeze_count` walks
    the whole permanent generation (27 ms for 3 million objects; once per read-back it made a
    k = 16 cold start take 47 s instead of 13 s)."""
    gc.collect(1)
    gc.freeze()


def thaw_heap() -> int:
    """Unfreeze every object and run a full collection (collects any garbage cycle a freeze
    kept; traverses the whole heap: hundreds of milliseconds at 65,536 GPUs). Returns the
    number of unreachable objects found."""
    gc.unfreeze()
    return gc.collect()


__all__ = ["DEFAULT_THRESHOLDS", "HEAP_THRESHOLDS", "CollectionMeter", "CollectorState", "PauseMeter",
           "collector_state",
           "configure_collector", "freeze_heap", "thaw_heap"]
