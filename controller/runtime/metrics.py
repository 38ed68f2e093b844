"""Every Prometheus metric the controller exports, defined here and nowhere else.

Served by ``aifabric controller --metrics-listen HOST:PORT`` at ``/metrics``. Values are read
from :class:`controller.telemetry.Telemetry`, the runtime state and the drivers at scrape time
(a custom collector over a :class:`MetricsSource`), so a scrape always shows the latest sample
and the alerts in force at that moment. The runtime's own counters: southbound messages sent
per switch and kind (``flow-mod``, ``group-mod``, ``bundle``, ``p4-update``, ``p4-write``,
``packet-out``, ...), reconciliations and the entries they sent, transactions and rollbacks, the
policy in force (generation, digest, source).

Units are in the names (Prometheus conventions: ``_bytes``, ``_bits_per_second``, ``_seconds``,
``_ratio`` for 0–1 fractions, ``_total`` for counters). Labels: ``switch``, ``port``, ``peer``
(the node at the other end), ``link`` (``u->v`` for a direction, ``a-b`` for a link), ``src``,
``dst``, ``collective``, ``flow``, ``alert``, ``subject``, ``queue``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from controller.drivers.southbound import SouthboundDriver
    from controller.runtime.controller import ControllerStats
    from controller.runtime.state import RuntimeState
    from controller.telemetry import Telemetry

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from controller.telemetry.alerts import KINDS


@dataclass(frozen=True)
class MetricDef:
    name: str
    kind: str  # "counter", "gauge" or "histogram"
    labels: tuple[str, ...]
    help: str


_PORT = ("switch", "port", "peer")
_LINK = ("link", "src", "dst")
METRICS: tuple[MetricDef, ...] = (
    MetricDef("aifabric_port_rx_bytes", "counter", _PORT, "Bytes received on a switch port "
              "(OpenFlow port statistics; Ethernet frames without FCS)."),
    MetricDef("aifabric_port_tx_bytes", "counter", _PORT, "Bytes sent on a switch port."),
    MetricDef("aifabric_port_rx_packets", "counter", _PORT, "Frames received on a switch port."),
    MetricDef("aifabric_port_tx_packets", "counter", _PORT, "Frames sent on a switch port."),
    MetricDef("aifabric_port_rx_dropped_packets", "counter", _PORT,
              "Frames dropped on receipt by a switch port."),
    MetricDef("aifabric_port_tx_dropped_packets", "counter", _PORT,
              "Frames dropped on transmission by a switch port."),
    MetricDef("aifabric_port_rx_errors", "counter", _PORT, "Receive errors of a switch port."),
    MetricDef("aifabric_port_tx_errors", "counter", _PORT, "Transmit errors of a switch port."),
    MetricDef("aifabric_queue_tx_bytes", "counter", ("switch", "port", "queue"),
              "Bytes sent from an egress queue (OpenFlow queue statistics)."),
    MetricDef("aifabric_queue_dropped_packets", "counter", ("switch", "port", "queue"),
              "Frames an egress queue dropped (overrun)."),
    MetricDef("aifabric_queue_ecn_marked_packets", "counter", ("switch", "port", "queue"),
              "Packets this switch marked ECN CE in an egress queue (P4: fabric.p4 ecn_marked)."),
    MetricDef("aifabric_queue_ce_packets", "counter", ("switch", "port", "queue"),
              "Packets that left an egress queue with ECN CE set, marked there or upstream "
              "(P4: fabric.p4 ecn_ce_tx; the CE marks receivers behind the port see)."),
    MetricDef("aifabric_queue_depth_packets", "histogram", ("switch", "port", "queue"),
              "Packets by the egress queue depth they saw at enqueue (P4: fabric.p4 "
              "queue_depth_hist; le = the bucket's largest depth in full-size packets)."),
    MetricDef("aifabric_link_capacity_bits_per_second", "gauge", _LINK,
              "Rate of a link direction from the topology."),
    MetricDef("aifabric_link_rate_bits_per_second", "gauge", _LINK,
              "Rate of a link direction over the latest sampling interval."),
    MetricDef("aifabric_link_utilisation_ratio", "gauge", _LINK,
              "Rate / capacity of a link direction over the latest sampling interval."),
    MetricDef("aifabric_link_loss_ratio", "gauge", _LINK,
              "Dropped / (sent + dropped) frames of a link direction, latest interval."),
    MetricDef("aifabric_link_bytes", "counter", _LINK,
              "Bytes a link direction carried since the controller started sampling."),
    MetricDef("aifabric_link_dropped_packets", "counter", _LINK,
              "Frames a link direction dropped since the controller started sampling."),
    MetricDef("aifabric_link_microbursts", "counter", _LINK,
              "Sampling intervals whose utilisation exceeded the microburst threshold."),
    MetricDef("aifabric_link_pinned_flows", "gauge", _LINK,
              "Pinned flows whose path uses a link direction."),
    MetricDef("aifabric_link_up", "gauge", ("link",),
              "1 while both ends of a switch-switch link are up, else 0."),
    MetricDef("aifabric_collective_flows", "gauge", ("collective",),
              "Pinned flows of a collective."),
    MetricDef("aifabric_collective_bytes", "counter", ("collective",),
              "Bytes counted by a collective's pinned entries at each flow's first switch."),
    MetricDef("aifabric_collective_collision_links", "gauge", ("collective",),
              "Link directions where a flow of the collective shares with another heavy flow."),
    MetricDef("aifabric_collective_bound_bits_per_second", "gauge", ("collective",),
              "Link-rate bound of a collective: the lowest capacity on its pinned flows' paths "
              "(no flow of it can go faster; the labs' busbw/bound divides by it)."),
    MetricDef("aifabric_flow_bytes", "counter", ("collective", "flow"),
              "Bytes of one pinned flow (its entry at the first switch); flow 'src->dst', "
              "'src->dst #j' for sub-flow j of connections_per_peer."),
    MetricDef("aifabric_flow_path_info", "gauge", ("collective", "flow", "path"),
              "1 for the path (hop list) each pinned flow is installed on."),
    MetricDef("aifabric_host_pair_bytes", "counter", ("src", "dst"),
              "Bytes from src to dst (traffic matrix; src '<leaf>/*' where several hosts "
              "share a leaf and only per-destination entries count the traffic)."),
    MetricDef("aifabric_alert_active", "gauge", ("alert", "subject"),
              "1 for every alert in force (link_down, pinned_path_lost_link, "
              "link_utilisation_high, link_utilisation_peak, link_loss_high)."),
    MetricDef("aifabric_alerts_raised", "counter", ("alert",), "Alerts raised, per kind."),
    MetricDef("aifabric_switch_connected", "gauge", ("switch",),
              "1 while the switch's OpenFlow connection is up."),
    MetricDef("aifabric_switch_samples", "counter", ("switch",),
              "Port-statistics samples received from a switch."),
    MetricDef("aifabric_switch_sample_age_seconds", "gauge", ("switch",),
              "Seconds since the switch's latest port-statistics sample."),
    MetricDef("aifabric_plan_generation", "gauge", (),
              "Plans made current since start (re-plans, re-pins, registrations)."),
    MetricDef("aifabric_pinned_flows", "gauge", (), "Pinned flows installed."),
    MetricDef("aifabric_sample_interval_seconds", "gauge", (),
              "Configured statistics interval."),
    MetricDef("aifabric_southbound_messages", "counter", ("switch", "kind"),
              "Messages the controller sent to a switch, by kind (flow-mod and group-mod count "
              "the changes a bundle carried; bundle counts committed bundles; p4-update, "
              "p4-write: P4Runtime updates and WriteRequests)."),
    MetricDef("aifabric_reconciles", "counter", (),
              "Switches read back and reconciled after they (re)connected."),
    MetricDef("aifabric_reconcile_entries_sent", "counter", (),
              "Entries added, modified or deleted by reconciliations (0 when every switch "
              "held the intended state)."),
    MetricDef("aifabric_transactions", "counter", (),
              "Fabric changes applied as one transaction."),
    MetricDef("aifabric_transactions_failed", "counter", (),
              "Transactions a switch refused (rolled back)."),
    MetricDef("aifabric_policy_generation", "gauge", (),
              "Generation of the policy in force (1 at start, +1 per applied policy)."),
    MetricDef("aifabric_policy_info", "gauge", ("digest", "source"),
              "1 for the policy in force: its document's sha256 and where it came from."),
    MetricDef("aifabric_policy_applied_timestamp_seconds", "gauge", (),
              "When the policy in force was applied (Unix time)."),
    MetricDef("aifabric_switch_role", "gauge", ("switch", "southbound", "role"),
              "1 for each switch's southbound and our role on it (master, backup, none)."),
    MetricDef("aifabric_certificate_expiry_timestamp_seconds", "gauge", ("certificate", "path"),
              "When a certificate file the controller started with stops being valid (the "
              "earliest notAfter in the file, Unix time): certificate controller, ca, etcd-ca "
              "or etcd-client."),
)
BY_NAME = {m.name: m for m in METRICS}


P4_QUEUE_METRICS = frozenset({"aifabric_queue_ecn_marked_packets", "aifabric_queue_ce_packets",
                              "aifabric_queue_depth_packets"})
"""Present only for P4 switches (OpenFlow 1.3 queue statistics have no ECN marks or depth)."""
QUEUE_METRICS = frozenset({"aifabric_queue_tx_bytes", "aifabric_queue_dropped_packets"}
                          | P4_QUEUE_METRICS)
"""Present only when a switch has queues (``--apply-qos`` on Open vSwitch; P4 targets)."""
TLS_METRICS = frozenset({"aifabric_certificate_expiry_timestamp_seconds"})
"""Present only when the controller runs with certificates (``--certs``, ``--cert``)."""
_SUFFIX = {"counter": "_total", "gauge": "", "histogram": "_bucket"}


def metric_names(with_queues: bool = True, with_p4: bool = False,
                 with_tls: bool = False) -> list[str]:
    """The exposed sample names (counters get ``_total``, histograms are named by their
    ``_bucket`` samples), for docs and tests; without the queue metrics when ``with_queues``
    is false, without the P4-only ones unless ``with_p4``, without the certificate ones unless
    ``with_tls``."""
    return [m.name + _SUFFIX[m.kind] for m in METRICS
            if (with_queues or m.name not in QUEUE_METRICS)
            and (with_p4 or m.name not in P4_QUEUE_METRICS)
            and (with_tls or m.name not in TLS_METRICS)]


def depth_buckets(q: Any) -> list[tuple[str, float]] | None:
    """Prometheus buckets (``le``, cumulative count) of a P4 queue's depth histogram
    (:class:`~controller.telemetry.samples.QueueCounters` ``depth_hist``, bucket *b* covering
    depths [bound_b, bound_b+1)), in full-size packets: fabric.p4's bounds are packets; the
    Tofino program's are cells, 19 per 1500-byte packet, with the same buckets
    (p4/fabric/tna/README.md), so bucket *b* gets the packet bound of fabric.p4's bucket *b*.
    None when the sample has no histogram."""
    hist, bounds = getattr(q, "depth_hist", None), tuple(getattr(q, "depth_bounds", ()))
    if not hist or len(hist) != len(bounds):
        return None
    if getattr(q, "depth_unit", "packets") != "packets":
        from controller.drivers.p4runtime.pipeline import QDEPTH_BUCKETS_PKTS
        if len(QDEPTH_BUCKETS_PKTS) != len(bounds):
            return None
        bounds = QDEPTH_BUCKETS_PKTS
    out, total = [], 0.0
    for b, n in enumerate(hist):
        total += n
        out.append((str(bounds[b + 1] - 1) if b + 1 < len(bounds) else "+Inf", total))
    return out


class MetricsSource(Protocol):
    """What the collector reads (a :class:`controller.runtime.controller.Controller`)."""

    @property
    def state(self) -> RuntimeState: ...

    @property
    def telemetry(self) -> Telemetry | None: ...

    @property
    def stats(self) -> ControllerStats: ...

    @property
    def drivers(self) -> Mapping[str, SouthboundDriver]: ...


class TelemetryCollector(Collector):
    """Reads ``source`` (:class:`MetricsSource`) at every scrape. ``mono``: the statistics
    clock (sample ages)."""

    def __init__(self, source: MetricsSource, sample_interval_s: float,
                 mono: Callable[[], float] = time.monotonic,
                 certificates: Mapping[tuple[str, str], float] | None = None) -> None:
        self.source = source
        if source.telemetry is None:
            raise ValueError("the metrics are read from the controller's telemetry: none runs")
        self.telemetry: Telemetry = source.telemetry
        self.sample_interval_s = sample_interval_s
        self.mono = mono
        #: (certificate, path) -> notAfter (Unix s), read once: the files the process loaded
        self.certificates = dict(certificates or {})

    def _families(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for m in METRICS:
            cls = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily,
                   "histogram": HistogramMetricFamily}[m.kind]
            out[m.name] = cls(m.name, m.help, labels=list(m.labels))
        return out

    def collect(self) -> Iterator[Metric]:
        source, tel = self.source, self.telemetry
        st = source.state
        f = self._families()
        fab = st.fabric
        for (sw, port), (_, c) in sorted(tel.port_snapshot().items()):
            peer = fab.port_map.get((sw, port), ("", 0))[0]
            lab = [sw, str(port), peer]
            for field in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_errors",
                          "tx_errors"):
                f[f"aifabric_port_{field}"].add_metric(lab, getattr(c, field))
            f["aifabric_port_rx_dropped_packets"].add_metric(lab, c.rx_dropped)
            f["aifabric_port_tx_dropped_packets"].add_metric(lab, c.tx_dropped)
        for (sw, port, qid), (_, q) in sorted(tel.queue_snapshot().items()):
            lab = [sw, str(port), str(qid)]
            f["aifabric_queue_tx_bytes"].add_metric(lab, q.tx_bytes)
            f["aifabric_queue_dropped_packets"].add_metric(lab, q.dropped_packets)
            if q.ecn_marked_packets is not None:
                f["aifabric_queue_ecn_marked_packets"].add_metric(lab, q.ecn_marked_packets)
            if q.ce_packets is not None:
                f["aifabric_queue_ce_packets"].add_metric(lab, q.ce_packets)
            buckets = depth_buckets(q)
            if buckets is not None:
                f["aifabric_queue_depth_packets"].add_metric(lab, buckets, None)
        for ln in tel.link_status():
            lab = [ln.name, ln.link[0], ln.link[1]]
            f["aifabric_link_capacity_bits_per_second"].add_metric(lab, ln.capacity_bps)
            f["aifabric_link_rate_bits_per_second"].add_metric(lab, ln.rate_bps)
            f["aifabric_link_utilisation_ratio"].add_metric(lab, ln.utilisation)
            f["aifabric_link_loss_ratio"].add_metric(lab, ln.loss_ratio)
            f["aifabric_link_bytes"].add_metric(lab, ln.bytes_total)
            f["aifabric_link_dropped_packets"].add_metric(lab, ln.dropped_total)
            f["aifabric_link_microbursts"].add_metric(lab, ln.microbursts)
            f["aifabric_link_pinned_flows"].add_metric(lab, ln.pinned_flows)
        down = st.down_links
        for link in fab.links:
            if link.a in fab.switch_by_name and link.b in fab.switch_by_name:
                a, b = sorted((link.a, link.b))
                f["aifabric_link_up"].add_metric([f"{a}-{b}"],
                                                 0 if frozenset((a, b)) in down else 1)
        for coll in tel.collective_status():
            f["aifabric_collective_flows"].add_metric([coll.name], len(coll.flows))
            f["aifabric_collective_bytes"].add_metric([coll.name], coll.bytes_total)
            f["aifabric_collective_collision_links"].add_metric([coll.name], len(coll.collision_links))
            caps = [fab.link_between(u, v).capacity_bps
                    for _, p, _ in coll.flows for u, v in zip(p, p[1:], strict=False)]
            if caps:
                f["aifabric_collective_bound_bits_per_second"].add_metric([coll.name], min(caps))
            for d, p, nbytes in coll.flows:
                # sub-flows of one peer pair are told apart, or their series would collide
                label = f"{d.src}->{d.dst}" + (f" #{d.subflow}" if d.subflows > 1 else "")
                f["aifabric_flow_bytes"].add_metric([coll.name, label], nbytes)
                f["aifabric_flow_path_info"].add_metric([coll.name, label, " ".join(p)], 1)
        for (src, dst), nbytes in tel.traffic_matrix().items():
            f["aifabric_host_pair_bytes"].add_metric([src, dst], nbytes)
        for al in tel.active_alerts():
            f["aifabric_alert_active"].add_metric([al.kind, al.subject], 1)
        for kind in KINDS:
            f["aifabric_alerts_raised"].add_metric([kind], tel.alerts.raised_total.get(kind, 0))
        now = self.mono()
        for s in fab.switches:
            sess = st.session(s.name)
            f["aifabric_switch_connected"].add_metric([s.name], 1 if sess.connected else 0)
            f["aifabric_switch_role"].add_metric([s.name, sess.southbound, sess.role], 1)
            f["aifabric_switch_samples"].add_metric([s.name], tel.samples_total.get(s.name, 0))
            if s.name in tel.last_sample_s:
                f["aifabric_switch_sample_age_seconds"].add_metric(
                    [s.name], now - tel.last_sample_s[s.name])
        f["aifabric_plan_generation"].add_metric([], st.plan_generation)
        f["aifabric_pinned_flows"].add_metric([], len(st.placement))
        f["aifabric_sample_interval_seconds"].add_metric([], self.sample_interval_s)
        sent: dict[tuple[str, str], int] = {}
        for drv in source.drivers.values():
            for key, n in drv.messages_sent().items():
                sent[key] = sent.get(key, 0) + n
        for (sw, kind), n in sorted(sent.items()):
            f["aifabric_southbound_messages"].add_metric([sw, kind], n)
        stats = source.stats
        f["aifabric_reconciles"].add_metric([], stats.reconciles)
        f["aifabric_reconcile_entries_sent"].add_metric([], stats.reconcile_entries_sent)
        f["aifabric_transactions"].add_metric([], stats.transactions)
        f["aifabric_transactions_failed"].add_metric([], stats.transactions_failed)
        pol = st.policy
        f["aifabric_policy_generation"].add_metric([], pol.generation)
        f["aifabric_policy_info"].add_metric([pol.digest, pol.source], 1)
        f["aifabric_policy_applied_timestamp_seconds"].add_metric([], pol.applied_unix_s)
        for (name, path), not_after in sorted(self.certificates.items()):
            f["aifabric_certificate_expiry_timestamp_seconds"].add_metric([name, path], not_after)
        yield from f.values()


def registry_for(source: MetricsSource, sample_interval_s: float,
                 certificates: Mapping[str, str] | None = None) -> CollectorRegistry:
    """A registry holding only the controller's metrics. ``certificates``: name → PEM file of
    the certificates the controller runs with (``controller``, ``ca``, ``etcd-ca``,
    ``etcd-client``), read now for ``aifabric_certificate_expiry_timestamp_seconds``.

    Raises
    ------
    OSError, ValueError
        A certificate file that cannot be read or holds no PEM certificate.
    """
    from controller.security.certs import not_after_unix_s

    expiry = {(name, path): not_after_unix_s(Path(path))
              for name, path in (certificates or {}).items()}
    reg = CollectorRegistry(auto_describe=False)
    reg.register(TelemetryCollector(source, sample_interval_s, certificates=expiry))
    return reg


async def start_metrics_server(source: MetricsSource, sample_interval_s: float, host: str,
                               port: int, *, render: Executor, tls: Any = None,
                               basic_auth: Any = None, insecure: bool = False,
                               certificates: Mapping[str, str] | None = None) -> Any:
    """Serve ``/metrics`` on ``host:port`` (0: a free port) with
    :func:`controller.security.metrics_http.serve_metrics` (``tls``: HTTPS; ``basic_auth``:
    answer 401 without it; a non-loopback address needs TLS or ``insecure``; ``certificates``:
    as :func:`registry_for`). Returns the
    :class:`~controller.security.metrics_http.MetricsServer` (``url``, ``port``, ``close()``).

    Raises
    ------
    OSError
        The address cannot be bound, or a certificate file cannot be read.
    ValueError
        A certificate file holds no PEM certificate.
    InsecureChannelRefused
        A non-loopback address without TLS and without ``insecure``.
    """
    from controller.security.metrics_http import serve_metrics

    return await serve_metrics(registry_for(source, sample_interval_s, certificates),
                               render=render, host=host, port=port, tls=tls,
                               basic_auth=basic_auth, insecure=insecure)
