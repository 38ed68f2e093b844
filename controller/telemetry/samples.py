"""What a collector reads from a switch, as plain values (no os-ken, no P4Runtime).

Counters are **cumulative** since the port, queue or entry was created (OpenFlow 1.3.5
§7.3.5.6 ``ofp_port_stats``, §7.3.5.8 ``ofp_queue_stats``, §7.3.5.2 ``ofp_flow_stats``; P4Runtime
``CounterEntry`` with ``byte_count``/``packet_count``). Rates are derived later
(:mod:`controller.telemetry.derive`) from two samples and the times they were read.

A target that is *polled* rather than answering OpenFlow statistics (a P4 switch: indirect
counters per port, registers for queue depth) implements :class:`CounterSource`; :func:`poll`
reads one and hands the values to a :class:`~controller.telemetry.store.Telemetry`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from controller.plan.model import Match


@dataclass(frozen=True)
class PortCounters:
    """Cumulative counters of one switch port (OpenFlow ``ofp_port_stats``).

    ``*_bytes`` are bytes of whole Ethernet frames as the switch counts them (header and
    payload, no preamble or inter-frame gap, no FCS on Open vSwitch); ``*_packets`` frames;
    ``*_dropped`` frames the switch dropped on that port; ``*_errors`` frames in error.
    """

    port: int
    rx_bytes: int
    tx_bytes: int
    rx_packets: int = 0
    tx_packets: int = 0
    rx_dropped: int = 0
    tx_dropped: int = 0
    rx_errors: int = 0
    tx_errors: int = 0


@dataclass(frozen=True)
class QueueCounters:
    """Cumulative counters of one egress queue (OpenFlow ``ofp_queue_stats``).

    ``dropped_packets`` is OpenFlow's ``tx_errors`` ("packets dropped due to overrun").
    ``depth_bytes`` (instantaneous occupancy) and ``ecn_marked_packets`` exist on P4 targets
    that export them (registers); OpenFlow 1.3 has neither, so they stay None there.

    P4 (fabric.p4) also gives: ``ecn_marked_packets`` (packets this switch marked CE),
    ``ce_packets`` (packets that left the queue with CE set, marked here or upstream), and the
    queue-depth histogram ``depth_hist`` (cumulative packets per bucket, counted at enqueue by
    the depth they saw) with each bucket's lower bound in ``depth_bounds`` (the last bucket is
    open-ended), in ``depth_unit`` (``packets`` on BMv2, ``cells`` on Tofino).
    """

    port: int
    queue_id: int
    tx_bytes: int
    tx_packets: int = 0
    dropped_packets: int = 0
    depth_bytes: int | None = None
    ecn_marked_packets: int | None = None
    ce_packets: int | None = None
    depth_hist: tuple[int, ...] | None = None
    depth_bounds: tuple[int, ...] = ()
    depth_unit: str = "packets"


@dataclass(frozen=True)
class EntryCounters:
    """Cumulative counters of one flow entry of ours, identified by (priority, plan match)."""

    priority: int
    match: Match
    bytes: int
    packets: int = 0


@runtime_checkable
class CounterSource(Protocol):
    """A switch whose counters are read on demand (a P4Runtime target, a test fake).

    ``switch`` is its name in the fabric. ``read_port_counters`` returns every port's counters;
    ``read_queue_counters`` every queue's (empty when the target has no queue statistics).
    Both may raise ``OSError``/``ConnectionError`` when the target does not answer.
    """

    switch: str

    def read_port_counters(self) -> Sequence[PortCounters]: ...

    def read_queue_counters(self) -> Sequence[QueueCounters]: ...


class _Recorder(Protocol):
    def record_ports(self, switch: str, counters: Sequence[PortCounters], now_s: float) -> None: ...

    def record_queues(self, switch: str, counters: Sequence[QueueCounters],
                      now_s: float) -> None: ...


def poll(sources: Sequence[CounterSource], telemetry: _Recorder, now_s: float) -> list[str]:
    """Read every source once and record what it returned, stamped ``now_s`` (s).

    Returns
    -------
    list of str
        One ``"<switch>: <error>"`` per source that failed (the others are still recorded).
    """
    failed = []
    for src in sources:
        try:
            ports = src.read_port_counters()
            queues = src.read_queue_counters()
        except (OSError, ConnectionError, TimeoutError) as exc:
            failed.append(f"{src.switch}: {type(exc).__name__}: {exc}")
            continue
        telemetry.record_ports(src.switch, ports, now_s)
        if queues:
            telemetry.record_queues(src.switch, queues, now_s)
    return failed
