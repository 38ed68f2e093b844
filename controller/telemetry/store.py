"""The telemetry state of one fabric: counters in, derived per-link, per-collective and
per-host-pair values and alerts out. Pure (no I/O, no clock: every call takes ``now_s``), and
thread-safe (statistics replies, the sampling round and scrapes run on different threads).

Fed by the OpenFlow driver's statistics replies (through
:class:`controller.runtime.state.ControllerRuntime`) or by :func:`controller.telemetry.samples.poll`
for polled targets; read by the Prometheus collector, the gRPC ``GetStatus`` and the CLI.

Per-collective bytes are those counted by each pinned flow's entry at its **first** switch (the
source's leaf), so every byte is counted once; an entry re-created by a re-pin starts again from
zero and its first sample counts whole. Per-host-pair bytes: see
:func:`controller.telemetry.derive.host_pair_of_entry`.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from controller.model.topology import Fabric
from controller.plan.build import pinned_match
from controller.plan.model import PRIO_PINNED, PRIO_ROUTE, Match
from controller.te.collectives import FlowDemand
from controller.telemetry.alerts import Alert, AlertBook, AlertRules
from controller.telemetry.derive import (
    DEFAULT_MICROBURST_THRESHOLD,
    DirectedLink,
    LinkInterval,
    Path,
    collisions,
    host_pair_of_entry,
    link_interval,
    link_taps,
    pinned_flows_per_link,
)
from controller.telemetry.samples import EntryCounters, PortCounters, QueueCounters


@dataclass(frozen=True)
class LinkStatus:
    """One directed link now: ``rate_bps`` (bit/s) and ``utilisation`` over the latest
    interval (0 when never measured), ``loss_ratio`` of that interval, ``bytes_total`` and
    ``dropped_total`` since the controller started measuring, ``microbursts`` (intervals above
    the threshold), ``pinned_flows`` on it, ``measured_at_s`` (None: never)."""

    link: DirectedLink
    name: str
    fabric_link: bool
    up: bool
    capacity_bps: float
    rate_bps: float
    utilisation: float
    loss_ratio: float
    bytes_total: int
    dropped_total: int
    microbursts: int
    pinned_flows: int
    measured_at_s: float | None


@dataclass(frozen=True)
class CollectiveStatus:
    """One collective: its pinned flows and their paths, the bytes its entries counted, and
    the collision links (directed links it shares with another heavy flow)."""

    name: str
    flows: tuple[tuple[FlowDemand, Path, int], ...]  # (flow, path, bytes)
    bytes_total: int
    collision_links: tuple[DirectedLink, ...]


class Telemetry:
    """Counters → derived values and alerts for ``fabric``.

    Parameters
    ----------
    fabric
        The fabric (links, capacities, hosts).
    rules
        Alert thresholds.
    microburst_threshold
        Utilisation of one interval above which it counts as a microburst.
    history
        Intervals kept per directed link (for ``top``, plots and the utilisation window).
    """

    def __init__(self, fabric: Fabric, rules: AlertRules | None = None,
                 microburst_threshold: float = DEFAULT_MICROBURST_THRESHOLD,
                 history: int = 600) -> None:
        self.fabric = fabric
        self.rules = rules or AlertRules()
        self.microburst_threshold = microburst_threshold
        self.taps = link_taps(fabric)
        self._taps_by_switch: dict[str, list[DirectedLink]] = {}
        for link, tap in self.taps.items():
            self._taps_by_switch.setdefault(tap.switch, []).append(link)
        self._lock = threading.RLock()
        self.ports: dict[tuple[str, int], tuple[float, PortCounters]] = {}
        self._prev_ports: dict[tuple[str, int], tuple[float, PortCounters]] = {}
        self.queues: dict[tuple[str, int, int], tuple[float, QueueCounters]] = {}
        self.last_sample_s: dict[str, float] = {}
        self.samples_total: dict[str, int] = {}
        self.latest: dict[DirectedLink, LinkInterval] = {}
        self._far_used: dict[DirectedLink, float] = {}
        self.history: dict[DirectedLink, deque[LinkInterval]] = {
            k: deque(maxlen=history) for k in self.taps}
        self.link_bytes_total: dict[DirectedLink, int] = dict.fromkeys(self.taps, 0)
        self.link_dropped_total: dict[DirectedLink, int] = dict.fromkeys(self.taps, 0)
        self.microbursts: dict[DirectedLink, int] = dict.fromkeys(self.taps, 0)
        #: switch → (priority, match) → the entry's byte counter at the last sample
        self._entry_last: dict[str, dict[tuple[int, Match], int]] = {}
        self.flow_bytes: dict[FlowDemand, int] = {}
        self.collective_bytes: dict[str, int] = {}
        self.host_pair_bytes: dict[tuple[str, str], int] = {}
        self.paths: dict[FlowDemand, Path] = {}
        self.heavy: frozenset[str] | None = None
        self._flow_at_first: dict[tuple[str, Match], FlowDemand] = {}
        self.down_links: frozenset[frozenset[str]] = frozenset()
        self.alerts = AlertBook(hold_s=self.rules.hold_s)

    # -- inputs --------------------------------------------------------------------------------
    def record_ports(self, switch: str, counters: Sequence[PortCounters],
                     now_s: float) -> list[LinkInterval]:
        """Record ``switch``'s port counters read at ``now_s`` (s); returns the link intervals
        this completed (directions measured at this switch)."""
        with self._lock:
            for c in counters:
                key = (switch, c.port)
                old = self.ports.get(key)
                if old is not None:
                    self._prev_ports[key] = old
                self.ports[key] = (now_s, c)
            self.last_sample_s[switch] = now_s
            self.samples_total[switch] = self.samples_total.get(switch, 0) + 1
            out = []
            for link in self._taps_by_switch.get(switch, ()):
                tap = self.taps[link]
                iv = link_interval(tap, self._prev_ports, self.ports,
                                   self._far_used.get(link, float("-inf")))
                if iv is None or (link in self.latest and self.latest[link].t1_s >= iv.t1_s):
                    continue
                if tap.far is not None and tap.far in self.ports:
                    self._far_used[link] = self.ports[tap.far][0]
                self.latest[link] = iv
                self.history[link].append(iv)
                self.link_bytes_total[link] += iv.bytes
                self.link_dropped_total[link] += iv.dropped
                if iv.utilisation > self.microburst_threshold:
                    self.microbursts[link] += 1
                out.append(iv)
            return out

    def record_queues(self, switch: str, counters: Sequence[QueueCounters], now_s: float) -> None:
        """Record ``switch``'s queue counters read at ``now_s`` (s)."""
        with self._lock:
            for q in counters:
                self.queues[(switch, q.port, q.queue_id)] = (now_s, q)

    def record_entries(self, switch: str, entries: Iterable[EntryCounters], now_s: float) -> None:
        """Record the byte counters of ``switch``'s pinned and route entries (others ignored);
        entries no longer reported are forgotten (a re-created one starts from zero)."""
        del now_s  # counters are cumulative; the time matters only for rates (ports)
        with self._lock:
            before = self._entry_last.get(switch, {})
            now: dict[tuple[int, Match], int] = {}
            for e in entries:
                if e.priority not in (PRIO_PINNED, PRIO_ROUTE):
                    continue
                key = (e.priority, e.match)
                last = before.get(key)
                now[key] = e.bytes
                delta = e.bytes if last is None or e.bytes < last else e.bytes - last
                if delta <= 0:
                    continue
                if e.priority == PRIO_PINNED:
                    d = self._flow_at_first.get((switch, e.match))
                    if d is not None:
                        self.flow_bytes[d] = self.flow_bytes.get(d, 0) + delta
                        self.collective_bytes[d.collective] = (
                            self.collective_bytes.get(d.collective, 0) + delta)
                pair = host_pair_of_entry(self.fabric, switch, e.match)
                if pair is not None:
                    self.host_pair_bytes[pair] = self.host_pair_bytes.get(pair, 0) + delta
            self._entry_last[switch] = now  # entries not reported now are forgotten

    def set_paths(self, paths: Mapping[FlowDemand, Path],
                  heavy: Iterable[str] | None = None) -> None:
        """The pinned paths now installed; ``heavy``: the collectives collisions count (None:
        all). Bytes counted so far stay with their collectives."""
        with self._lock:
            self.paths = dict(paths)
            self.heavy = None if heavy is None else frozenset(heavy)
            self._flow_at_first = {(p[1], pinned_match(self.fabric, d)): d
                                   for d, p in self.paths.items()}

    # -- failures and alerts -------------------------------------------------------------------
    def links_changed(self, down_links: frozenset[frozenset[str]],
                      lost: Mapping[FlowDemand, Path], now_s: float) -> list[Alert]:
        """Record the links now down; raise ``link_down`` for each new one and
        ``pinned_path_lost_link`` for each flow in ``lost`` (flow → the path it had), at once.
        Returns the alerts raised."""
        with self._lock:
            new = down_links - self.down_links
            self.down_links = frozenset(down_links)
            raised = []
            for ln in sorted(new, key=sorted):
                a, b = sorted(ln)
                al = self.alerts.raise_now("link_down", f"{a}-{b}", a,
                                           f"link {a}-{b} is down", now_s)
                if al is not None:
                    raised.append(al)
            for d, p in sorted(lost.items()):
                al = self.alerts.raise_now("pinned_path_lost_link", d.label, p[1],
                                           f"pinned flow {d.label} lost a link of its path "
                                           f"{' '.join(p)}", now_s)
                if al is not None:
                    raised.append(al)
            return raised

    def conditions(self, now_s: float) -> dict[tuple[str, str], tuple[str, str]]:
        """Every alert condition true at ``now_s`` (see :mod:`controller.telemetry.alerts`)."""
        r = self.rules
        out: dict[tuple[str, str], tuple[str, str]] = {}
        for ln in self.down_links:
            a, b = sorted(ln)
            out[("link_down", f"{a}-{b}")] = (a, f"link {a}-{b} is down")
        for d, p in self.paths.items():
            if any(frozenset(e) in self.down_links for e in zip(p, p[1:], strict=False)):
                out[("pinned_path_lost_link", d.label)] = (
                    p[1], f"pinned flow {d.label} crosses a down link: {' '.join(p)}")
        for link, hist in self.history.items():
            if not hist or hist[-1].t1_s < now_s - r.window_s:
                continue
            name = self.taps[link].name
            sw = self.taps[link].switch
            win = [iv for iv in hist if iv.t1_s > now_s - r.window_s]
            span = sum(iv.t1_s - iv.t0_s for iv in win)
            # intervals of no length (both ends read at one instant) carry no rate
            mean = sum(iv.utilisation * (iv.t1_s - iv.t0_s) for iv in win) / span \
                if span > 0 else 0.0
            if mean > r.utilisation_ceiling:
                out[("link_utilisation_high", name)] = (
                    sw, f"{name} mean utilisation {mean:.2f} over {span:.1f} s above ceiling "
                        f"{r.utilisation_ceiling:.2f}")
            last = hist[-1]
            if last.utilisation > r.utilisation_peak:
                out[("link_utilisation_peak", name)] = (
                    sw, f"{name} utilisation {last.utilisation:.2f} over "
                        f"{last.t1_s - last.t0_s:.2f} s above peak {r.utilisation_peak:.2f}")
            if last.packets + last.dropped >= r.min_packets and last.loss_ratio > r.loss_ratio:
                out[("link_loss_high", name)] = (
                    sw, f"{name} lost {last.dropped} of {last.packets + last.dropped} frames "
                        f"({last.loss_ratio:.3f}) above {r.loss_ratio:.3f}")
        return out

    def evaluate(self, now_s: float) -> tuple[list[Alert], list[Alert]]:
        """Raise and clear alerts against the conditions at ``now_s``: (raised, cleared)."""
        with self._lock:
            return self.alerts.update(self.conditions(now_s), now_s)

    # -- outputs -------------------------------------------------------------------------------
    def link_status(self) -> list[LinkStatus]:
        """Every directed link (fabric links first, then host links, by name)."""
        with self._lock:
            on = pinned_flows_per_link(self.paths)
            rows = []
            for link, tap in self.taps.items():
                iv = self.latest.get(link)
                rows.append(LinkStatus(
                    link, tap.name, tap.fabric_link, frozenset(link) not in self.down_links,
                    tap.capacity_bps, iv.rate_bps if iv else 0.0, iv.utilisation if iv else 0.0,
                    iv.loss_ratio if iv else 0.0, self.link_bytes_total[link],
                    self.link_dropped_total[link], self.microbursts[link],
                    len(on.get(link, ())), iv.t1_s if iv else None))
            return sorted(rows, key=lambda s: (not s.fabric_link, s.name))

    def collective_status(self) -> list[CollectiveStatus]:
        """Every collective with pinned flows, by name."""
        with self._lock:
            coll = collisions(self.paths, self.heavy)
            names = sorted({d.collective for d in self.paths} | set(self.collective_bytes))
            # grouped in one pass each (per name, a scan of every path and every collision was
            # quadratic: 1,000 registered collectives held this lock, and the loop, for 14 s)
            flows: dict[str, list[tuple[FlowDemand, Path, int]]] = {}
            for d, p in sorted(self.paths.items()):
                flows.setdefault(d.collective, []).append((d, p, self.flow_bytes.get(d, 0)))
            links: dict[str, list[DirectedLink]] = {}
            for k, fl in coll.items():
                for n in dict.fromkeys(f.collective for f in fl):
                    links.setdefault(n, []).append(k)
            return [CollectiveStatus(n, tuple(flows.get(n, ())), self.collective_bytes.get(n, 0),
                                     tuple(links.get(n, ()))) for n in names]

    def active_alerts(self) -> list[Alert]:
        with self._lock:
            return sorted(self.alerts.active.values(), key=lambda a: (a.kind, a.subject))

    def traffic_matrix(self) -> dict[tuple[str, str], int]:
        """(source, destination) → bytes since start (sources may be ``"<leaf>/*"``)."""
        with self._lock:
            return dict(sorted(self.host_pair_bytes.items()))

    def port_snapshot(self) -> dict[tuple[str, int], tuple[float, PortCounters]]:
        with self._lock:
            return dict(self.ports)

    def queue_snapshot(self) -> dict[tuple[str, int, int], tuple[float, QueueCounters]]:
        with self._lock:
            return dict(self.queues)
