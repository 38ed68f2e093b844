"""The controller's garbage-collector settings (controller/runtime/collector.py): a frozen heap is
left out of collections, and freezing after every adopted placement leaks nothing — which needs
the placer's values to hold no reference cycles (a cycle frozen after it became garbage would be
kept for good)."""

from __future__ import annotations

import gc
import random

import pytest

from controller.model import build_fat_tree
from controller.policy.model import Policy
from controller.runtime.collector import (
    CollectionMeter,
    collector_state,
    configure_collector,
    freeze_heap,
    thaw_heap,
)
from controller.runtime.placement import (
    PlacementInput,
    reoptimise_moves,
    repair_moved,
    te_placement,
)
from controller.te.pathindex import PathIndex
from controller.te.patterns import demand_rates_bps, ring_allreduce, with_subflows
from controller.te.placer import place, reoptimise, repair, restore

FABRIC = build_fat_tree("ft8", 8, 10**9, 10**9, 1.0, 1.0)
DOWN = frozenset({frozenset(("p0a0", "c1"))})


@pytest.fixture
def collector():
    """The collector as the controller sets it; afterwards unfrozen and as it was."""
    was_enabled, thresholds = gc.isenabled(), gc.get_threshold()
    configure_collector()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        if not was_enabled:
            gc.disable()


def _ring(subflows: int = 2):
    hosts = [h.name for h in FABRIC.hosts]
    random.Random(1).shuffle(hosts)
    return with_subflows(ring_allreduce("r", hosts, 1e9), subflows)


def test_the_placer_and_the_runtime_phases_leave_no_reference_cycles(collector):
    ring = _ring()
    gc.collect()
    gc.disable()
    pin = place(FABRIC, demand_rates_bps(FABRIC, [ring]), index=PathIndex(FABRIC))
    assert pin.placement is not None
    rep = repair(pin.placement, DOWN)
    ro = reoptimise(rep.placement)
    back = restore(ro.placement, DOWN)
    policy = Policy.model_validate({"routing": {"mode": "pinned"}})
    te = te_placement(FABRIC, dict(pin.paths), frozenset())
    dec = repair_moved(PlacementInput(FABRIC, policy, dict(pin.paths), DOWN, frozenset(), te))
    again = reoptimise_moves(PlacementInput(FABRIC, policy, dec.paths, DOWN, DOWN, dec.te))
    assert rep.moves and back.index.down == frozenset() and dec.moves and again is not None
    del pin, rep, ro, back, te, dec, again
    assert gc.collect() == 0  # everything was freed by reference counting


def test_a_frozen_placement_is_in_no_generation(collector):
    pin = place(FABRIC, demand_rates_bps(FABRIC, [_ring(1)]), index=PathIndex(FABRIC))
    freeze_heap()
    n = gc.get_freeze_count()
    # frozen objects may still be freed by reference counting (by any thread) between the reads
    assert 0 < collector_state().frozen <= n
    assert gc.get_count()[0] < 50  # the young generation was emptied into the frozen one
    in_gens = {id(o) for g in range(3) for o in gc.get_objects(generation=g)}
    assert id(pin.placement) not in in_gens and id(pin.paths) not in in_gens
    meter = CollectionMeter()
    try:
        gc.collect()
        assert meter.count[2] == 1 and "gen 0/1/2: 0/0/1 collections" in meter.since(
            ((0, 0, 0), (0.0, 0.0, 0.0)))
    finally:
        meter.close()
    assert thaw_heap() >= 0 and gc.get_freeze_count() == 0
    assert id(pin.placement) in {id(o) for o in gc.get_objects(generation=2)}


def test_a_freeze_after_every_adopted_placement_keeps_nothing_that_was_replaced(collector):
    """Link down (repair, re-optimisation) and up (restore, re-optimisation), six times, each
    result adopted and the heap frozen: the failed fabric state (its path index, port tables,
    cones) is freed once the placement on it is replaced, and the frozen count settles."""
    import weakref

    pin = place(FABRIC, demand_rates_bps(FABRIC, [_ring()]), index=PathIndex(FABRIC))
    current = pin.placement
    assert current is not None
    del pin
    freeze_heap()
    counts = []
    for _ in range(6):
        current = repair(current, DOWN).placement
        failed = weakref.ref(current.index)
        assert failed().__dict__.get("_clos_tables") is not None  # its port tables were built
        freeze_heap()
        current = reoptimise(current).placement
        freeze_heap()
        current = reoptimise(restore(current, DOWN)).placement
        freeze_heap()
        counts.append(gc.get_freeze_count())
        assert failed() is None
    assert max(counts[2:]) - min(counts[2:]) <= 0.01 * counts[-1], counts
    assert "thresholds (700, 10, 10)" in collector_state().describe()
