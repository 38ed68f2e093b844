"""Counters of a P4 switch running fabric.p4 (or fabric_tna.p4) → one
:class:`~controller.drivers.southbound.CounterSample`.

P4Runtime has no port or flow statistics messages: the program counts, and the controller
reads its counters (P4Runtime spec v1.3 §9.6 CounterEntry, §9.7 DirectCounterEntry). One
sample is at most two ReadRequests:

* **ports**: ``port_rx[p]`` and ``port_tx[p]`` (packets and bytes) of every fabric port;
* **queues**: per port and priority ``queue_tx`` (packets, bytes), ``ecn_marked`` (packets the
  switch marked CE), ``ecn_ce_tx`` (packets leaving with CE set) and the eight cells of the
  queue-depth histogram ``queue_depth_hist`` (packets by the depth they saw at enqueue; BMv2's
  P4Runtime server cannot read the depth register, p4lang/PI#376). A queue that never sent a
  packet is left out;
* **entries**: ``pinned_hits``, the direct counter of every ``pinned`` entry, decoded back to
  the plan's (priority, match), so the runtime's meter sees the same entry counters it gets
  from OpenFlow flow statistics.

Byte counts are of the whole frame as the switch handles it (BMv2: the Ethernet frame without
FCS, as Open vSwitch counts).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any

from controller.drivers.p4runtime.decode import decode_entry
from controller.drivers.p4runtime.entities import TableEntry
from controller.drivers.p4runtime.pipeline import P4Target, depth_hist_index, queue_index
from controller.drivers.southbound import CounterKind, CounterSample
from controller.telemetry.samples import EntryCounters, PortCounters, QueueCounters


def cells_for(ports: Collection[int], priorities: Collection[int], kinds: Collection[str],
              buckets: int, have: Collection[str] | None = None) -> list[tuple[str, int | None]]:
    """The indirect counter cells one sample reads (module docstring), of the counters in
    ``have`` (None: all of fabric.p4's)."""
    out: list[tuple[str, int | None]] = []
    for p in sorted(ports):
        if "ports" in kinds:
            out += [("port_rx", p), ("port_tx", p)]
        if "queues" in kinds:
            for prio in sorted(priorities):
                q = queue_index(p, prio)
                out += [("queue_tx", q), ("ecn_marked", q)]
                if have is None or "ecn_ce_tx" in have:
                    out.append(("ecn_ce_tx", q))
                out += [("queue_depth_hist", depth_hist_index(p, prio, b)) for b in range(buckets)]
    return out


def sample_of(switch: str, now_s: float, cells: dict[tuple[str, int], tuple[int, int]],
              direct: list[tuple[TableEntry, int, int]] | None, ports: Collection[int],
              priorities: Collection[int], kinds: Collection[str], target: P4Target
              ) -> CounterSample:
    """The sample of what one read returned (pure; module docstring)."""
    def cell(name: str, i: int) -> tuple[int, int]:
        return cells.get((name, i), (0, 0))

    port_part: tuple[PortCounters, ...] | None = None
    queue_part: tuple[QueueCounters, ...] | None = None
    if "ports" in kinds:
        pc = []
        for p in sorted(ports):
            (rxp, rxb), (txp, txb) = cell("port_rx", p), cell("port_tx", p)
            pc.append(PortCounters(p, rxb, txb, rxp, txp))
        port_part = tuple(pc)
    if "queues" in kinds:
        bounds = target.depth_buckets
        qc = []
        for p in sorted(ports):
            for prio in sorted(priorities):
                q = queue_index(p, prio)
                txp, txb = cell("queue_tx", q)
                if txp == 0:
                    continue
                hist = tuple(cell("queue_depth_hist", depth_hist_index(p, prio, b))[0]
                             for b in range(len(bounds)))
                ce = cell("ecn_ce_tx", q)[0] if "ecn_ce_tx" in target.counters else None
                qc.append(QueueCounters(p, prio, txb, txp, ecn_marked_packets=cell(
                    "ecn_marked", q)[0], ce_packets=ce, depth_hist=hist,
                    depth_bounds=bounds, depth_unit=target.depth_unit))
        queue_part = tuple(qc)
    entry_part: tuple[EntryCounters, ...] | None = None
    if direct is not None:
        ec = []
        for e, packets, nbytes in direct:
            fi = decode_entry(e)
            if fi is not None:
                ec.append(EntryCounters(fi.priority, fi.match, nbytes, packets))
        entry_part = tuple(ec)
    return CounterSample(switch, now_s, ports=port_part, queues=queue_part, entries=entry_part)


async def read_sample(client: Any, switch: str, ports: Collection[int],
                      kinds: frozenset[CounterKind], target: P4Target,
                      priorities: Collection[int] = range(8),
                      clock: Callable[[], float] = time.monotonic) -> CounterSample:
    """Read ``kinds`` of counters from ``client`` and return the sample, stamped with
    ``clock()`` when the reads returned (module docstring).

    Raises
    ------
    controller.drivers.p4runtime.client.P4SwitchError
        A read failed.
    """
    cells = cells_for(ports, priorities, kinds, len(target.depth_buckets), target.counters)
    got = await client.read_cells(cells) if cells else {}
    direct = (await client.read_direct_counters("pinned")
              if "entries" in kinds and "pinned_hits" in target.direct_counters else None)
    return sample_of(switch, clock(), got, direct, ports, priorities, kinds, target)
