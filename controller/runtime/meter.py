"""Measured load: byte counters → rates → per-link load of pinned flows and background.

:class:`TrafficMeter` is a measurement store the controller keeps beside its state (fed by every
counter sample); :func:`link_loads` is pure over it.

* Per directed switch–switch link u→v, the measured total is the port u→v tx rate, the pinned
  part the rate of our pinned entries at u leaving towards v, and their difference the
  **background** (traffic the controller does not place). A link is left out when a pinned
  entry on it has no rate yet (just installed) or when a rate spans the last plan change (the
  paths it is attributed to were not those the bytes took).
* Where a switch counts its queues' depth (P4: fabric.p4's ``queue_depth_hist``, packets by the
  depth they found at enqueue), the meter also keeps, per port, the histogram of the last
  interval (Δ of the cumulative counts, all priorities summed); :func:`link_loads` turns it into
  ``queued_fraction``: the share of the interval's packets that found at least
  ``standing_depth`` ahead of them. OpenFlow has no queue depth: None there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controller.model.topology import Fabric
from controller.plan.model import Match
from controller.plan.pinned import pinned_match
from controller.te.collectives import FlowDemand
from controller.telemetry.samples import QueueCounters

DirectedLink = tuple[str, str]
Path = tuple[str, ...]


class TrafficMeter:
    """Byte counters → rates (bit/s), per switch port and per pinned entry (no clock of its own).

    Each sample is ``(bytes, now_s)``; a rate is 8 × Δbytes / Δt over the two latest samples of
    the same counter. A counter that went backwards (the entry was re-created, the port
    re-added) or a non-increasing time gives no rate until the next sample.

    Attributes
    ----------
    port_rate_bps : dict of (str, int) to (float, float, float)
        (switch, port) → (tx rate in bit/s, times of the older and newer samples in s).
    entry_rate_bps : dict of (str, Match) to (float, float, float)
        (switch, match of a pinned entry) → (rate in bit/s, times of the two samples in s).
    port_depth : dict of (str, int) to QueueDepth
        (switch, port) → the queue-depth histogram of the last interval (where counted).
    """

    def __init__(self) -> None:
        self._ports: dict[tuple[str, int], tuple[int, float]] = {}
        self._entries: dict[tuple[str, Match], tuple[int, float]] = {}
        self._depth: dict[tuple[str, int], tuple[tuple[int, ...], float]] = {}
        self.port_rate_bps: dict[tuple[str, int], tuple[float, float, float]] = {}
        self.entry_rate_bps: dict[tuple[str, Match], tuple[float, float, float]] = {}
        self.port_depth: dict[tuple[str, int], QueueDepth] = {}

    @staticmethod
    def _update(last: dict[Any, tuple[int, float]], rates: dict[Any, tuple[float, float, float]],
                key: Any, nbytes: int, now_s: float) -> None:
        prev = last.get(key)
        last[key] = (int(nbytes), now_s)
        if prev is None:
            return
        db, dt = int(nbytes) - prev[0], now_s - prev[1]
        if db < 0 or dt <= 0:
            rates.pop(key, None)
            return
        rates[key] = (8.0 * db / dt, prev[1], now_s)

    def ports(self, switch: str, tx_bytes: Mapping[int, int], now_s: float) -> None:
        """Record the tx byte counter of each port of ``switch`` read at ``now_s`` (s)."""
        for port, nbytes in tx_bytes.items():
            self._update(self._ports, self.port_rate_bps, (switch, port), nbytes, now_s)

    def entries(self, switch: str, byte_counts: Mapping[Match, int], now_s: float) -> None:
        """Record the byte counter of each pinned entry (by match) of ``switch`` at ``now_s``.
        Entries that are no longer reported are forgotten."""
        for match, nbytes in byte_counts.items():
            self._update(self._entries, self.entry_rate_bps, (switch, match), nbytes, now_s)
        for key in [k for k in self._entries if k[0] == switch and k[1] not in byte_counts]:
            del self._entries[key]
            self.entry_rate_bps.pop(key, None)

    def queues(self, switch: str, queues: Iterable[QueueCounters], now_s: float) -> None:
        """Record the queue-depth histograms of ``switch``'s queues read at ``now_s`` (s),
        summed per port over its queues; queues without a histogram are ignored. A histogram
        that went backwards (counters reset) gives no interval until the next sample."""
        per_port: dict[int, tuple[list[int], tuple[int, ...], str]] = {}
        for q in queues:
            if q.depth_hist is None:
                continue
            got = per_port.setdefault(q.port, ([0] * len(q.depth_hist), q.depth_bounds,
                                               q.depth_unit))
            for i, n in enumerate(q.depth_hist):
                got[0][i] += n
        for port, (hist, bounds, unit) in per_port.items():
            key = (switch, port)
            prev = self._depth.get(key)
            self._depth[key] = (tuple(hist), now_s)
            if prev is None or len(prev[0]) != len(hist):
                continue
            delta = tuple(a - b for a, b in zip(hist, prev[0], strict=True))
            if min(delta, default=0) < 0 or now_s <= prev[1]:
                self.port_depth.pop(key, None)
                continue
            self.port_depth[key] = QueueDepth(delta, bounds, unit, prev[1], now_s)

    def forget_switch(self, switch: str) -> None:
        """Drop every counter of ``switch`` (it reconnected: counters may restart)."""
        for d in (self._ports, self.port_rate_bps, self._entries, self.entry_rate_bps,
                  self._depth, self.port_depth):
            gone: list[Any] = [k for k in d if k[0] == switch]
            for k in gone:
                del d[k]


@dataclass(frozen=True)
class QueueDepth:
    """One port's queue-depth histogram over one interval: ``packets[i]`` packets found a depth
    in [``bounds[i]``, ``bounds[i+1]``) at enqueue (the last bucket is open-ended), in ``unit``
    (``packets`` on BMv2, ``cells`` on Tofino), between the samples at ``t0_s`` and ``t1_s``."""

    packets: tuple[int, ...]
    bounds: tuple[int, ...]
    unit: str
    t0_s: float
    t1_s: float

    def fraction_at_least(self, depth: int) -> float | None:
        """Share of the interval's packets that found at least ``depth`` ahead of them, counting
        a bucket when its lower bound is ≥ ``depth`` (a lower bound, exact when ``depth`` is a
        bucket bound); None when no packet was enqueued.

        >>> QueueDepth((6, 0, 2, 2), (0, 1, 4, 8), "packets", 0.0, 1.0).fraction_at_least(4)
        0.4
        """
        total = sum(self.packets)
        if total == 0:
            return None
        return sum(n for n, lo in zip(self.packets, self.bounds, strict=False)
                   if lo >= depth) / total


@dataclass(frozen=True)
class LinkLoad:
    """Measured load of one directed switch–switch link u→v over the last statistics interval.

    ``total_bps``: port u→v tx rate; ``pinned_bps``: the rate of our pinned entries at u that
    leave towards v; ``background_bps`` = max(total − pinned, 0); ``planned_bps``: the pinned
    flows' *demands* on the link; all bit/s. ``capacity_bps`` is the link rate.
    ``queued_fraction``: share of the interval's packets that found a standing queue at u's
    egress (:meth:`QueueDepth.fraction_at_least`; None: the switch counts no queue depth, or
    nothing was enqueued).
    """

    link: DirectedLink
    capacity_bps: float
    total_bps: float
    pinned_bps: float
    planned_bps: float
    queued_fraction: float | None = None

    @property
    def background_bps(self) -> float:
        return max(self.total_bps - self.pinned_bps, 0.0)

    @property
    def utilisation(self) -> float:
        """(background + planned demand) / capacity: what the re-balancer acts on."""
        return (self.background_bps + self.planned_bps) / self.capacity_bps

    def describe(self) -> str:
        """``leaf1->spine1 at 1.60 (background 9.0 Mbit/s + pinned demand 15.0 Mbit/s of 15.0;
        measured 15.0 Mbit/s, of which pinned 6.0)``."""
        mb = 1e6
        queued = ("" if self.queued_fraction is None else
                  f"; {self.queued_fraction:.0%} of its packets found a standing queue")
        return (f"{self.link[0]}->{self.link[1]} at {self.utilisation:.2f} (background "
                f"{self.background_bps / mb:.1f} Mbit/s + pinned demand "
                f"{self.planned_bps / mb:.1f} Mbit/s of {self.capacity_bps / mb:.1f}; measured "
                f"{self.total_bps / mb:.1f} Mbit/s, of which pinned {self.pinned_bps / mb:.1f}"
                f"{queued})")


def link_loads(fabric: Fabric, meter: TrafficMeter, paths: Mapping[FlowDemand, Path],
               demands_bps: Mapping[FlowDemand, float], down_links: frozenset[frozenset[str]],
               changed_at_s: float, now_s: float, max_age_s: float = 5.0,
               standing_depth: int | None = None) -> dict[DirectedLink, LinkLoad]:
    """Measured load of every directed switch–switch link whose counters are fresh (newer than
    ``now_s - max_age_s``), measured after the last plan change (``changed_at_s``), and whose
    pinned entries all have rates (module docstring). Bit/s; one round, no persistence filter.
    ``standing_depth`` (the switch's depth unit; None: not used): a link's ``queued_fraction``
    is the share of its port's packets that found at least this depth, from a fresh interval
    after the last plan change."""
    on_link: dict[DirectedLink, list[FlowDemand]] = {}
    for d, p in paths.items():
        for u, v in zip(p[1:-2], p[2:-1], strict=True):
            on_link.setdefault((u, v), []).append(d)

    def fresh(r: tuple[float, float, float] | None) -> bool:
        return r is not None and r[2] >= now_s - max_age_s and r[1] > changed_at_s

    out: dict[DirectedLink, LinkLoad] = {}
    for ln in fabric.links:
        if fabric.is_host(ln.a) or fabric.is_host(ln.b):
            continue
        for u, v in ((ln.a, ln.b), (ln.b, ln.a)):
            if frozenset((u, v)) in down_links:
                continue
            tot = meter.port_rate_bps.get((u, fabric.port_towards(u, v)))
            if tot is None or not fresh(tot):
                continue
            flows = on_link.get((u, v), [])
            rates = [meter.entry_rate_bps.get((u, pinned_match(fabric, d))) for d in flows]
            if not all(fresh(r) for r in rates):
                continue
            pinned = sum(r[0] for r in rates if r is not None)
            planned = sum(demands_bps.get(d, 0.0) for d in flows)
            queued = None
            qd = meter.port_depth.get((u, fabric.port_towards(u, v)))
            if standing_depth is not None and qd is not None \
                    and fresh((0.0, qd.t0_s, qd.t1_s)):
                queued = qd.fraction_at_least(standing_depth)
            out[(u, v)] = LinkLoad((u, v), float(ln.capacity_bps), tot[0], pinned, planned,
                                   queued)
    return out
