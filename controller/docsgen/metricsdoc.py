"""The metric reference, generated from the exporter's own registry.

:func:`served_metrics` builds the registry the controller serves
(:func:`controller.runtime.metrics.registry_for`) over a controller that has just started on a
small fabric (no switch connected, no sample yet) and walks what a scrape of it yields: every
family with its name, type and help, and the sample names Prometheus stores. The collector
yields every family at every scrape, so the families are exactly what ``/metrics`` serves; a
family without samples yet gets the sample name its type gives it (counters ``_total``,
histograms ``_bucket``). Label names are those each family is declared with
(:data:`controller.runtime.metrics.BY_NAME`).

The Prometheus rules in ``deploy/prometheus/`` and the Grafana dashboard use this list, and
their tests check every metric they name is in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controller.docsgen.markdown import GENERATED_NOTE, code, escape_html, rst_to_md, table
from controller.runtime.controller import ControllerStats

PROMETHEUS_OWN = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})
"""Series Prometheus writes itself for every scrape target (not served by the exporter)."""


@dataclass(frozen=True)
class ServedMetric:
    """One metric family of ``/metrics``."""

    name: str                 # family name (a counter's without ``_total``)
    kind: str                 # counter, gauge, histogram
    help: str
    labels: tuple[str, ...]
    samples: tuple[str, ...]  # the series names Prometheus stores
    only: str = ""            # when it is present only under a condition


@dataclass
class _JustStarted:
    """A :class:`controller.runtime.metrics.MetricsSource`: a controller on a 1-spine,
    2-leaf fabric that has just started (no switch connected, no sample)."""

    state: Any
    telemetry: Any
    stats: ControllerStats = field(default_factory=lambda: ControllerStats())
    drivers: dict[str, Any] = field(default_factory=dict)


def _source() -> _JustStarted:
    from controller.model.topology import build_leaf_spine
    from controller.policy.model import Policy
    from controller.runtime.state import PolicyInForce, RuntimeSettings, initial_state
    from controller.telemetry import Telemetry

    fab = build_leaf_spine("docs", 1, 2, 1, 10**9, 10**9, 1.0, 1.0)
    policy = Policy.model_validate({"version": 1, "routing": {"mode": "ecmp"}})
    return _JustStarted(initial_state(fab, PolicyInForce(policy), RuntimeSettings()),
                        Telemetry(fab))


_SAMPLE_SUFFIX = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket",)}


def served_metrics() -> list[ServedMetric]:
    """Every family ``/metrics`` serves, in the order the exporter yields them.

    Raises
    ------
    KeyError
        A served family has no declaration in :data:`controller.runtime.metrics.BY_NAME`
        (its labels would be unknown).
    """
    from controller.runtime import metrics as m

    registry = m.registry_for(_source(), 1.0)
    out = []
    for fam in registry.collect():
        decl = m.BY_NAME[fam.name]
        seen = tuple(dict.fromkeys(s.name for s in fam.samples))
        samples = seen or tuple(fam.name + x for x in _SAMPLE_SUFFIX[fam.type])
        only = ("P4 switches" if fam.name in m.P4_QUEUE_METRICS else
                "switches with queues (`--apply-qos`, P4)" if fam.name in m.QUEUE_METRICS else
                "TLS (`--certs`, `--cert`)" if fam.name in m.TLS_METRICS else "")
        out.append(ServedMetric(fam.name, fam.type, fam.documentation, decl.labels, samples,
                                only))
    return out


def served_sample_names() -> frozenset[str]:
    """The series names the exporter serves (``aifabric_link_bytes_total``, ...)."""
    return frozenset(s for metric in served_metrics() for s in metric.samples)


_GROUPS = (("aifabric_port_", "Ports"), ("aifabric_queue_", "Queues"),
           ("aifabric_link_", "Links"), ("aifabric_collective_", "Collectives"),
           ("aifabric_flow_", "Pinned flows"), ("aifabric_host_pair_", "Traffic matrix"),
           ("aifabric_alert", "Alerts"), ("aifabric_switch_", "Switches"),
           ("aifabric_policy_", "Policy"), ("aifabric_certificate_", "Certificates"),
           ("aifabric_", "Runtime"))


def metrics_page() -> str:
    """``reference/metrics.md``: every metric ``/metrics`` serves."""
    from controller.runtime import metrics as m
    from controller.telemetry import alerts

    served = served_metrics()
    out = [GENERATED_NOTE.format(what="a scrape of controller.runtime.metrics.registry_for"), "",
           "# Metric reference", "",
           "Every metric `aifabric controller --metrics-listen HOST:PORT` serves at "
           "`/metrics`, generated from a scrape of the exporter's own registry "
           f"({len(served)} families). The *series* column is what Prometheus stores "
           "(counters end in `_total`, the histogram is served as `_bucket` series). "
           "Alert and recording rules over these: [alerts](alerts.md); a Grafana dashboard: "
           "`deploy/grafana/aifabric.json`.", "", rst_to_md(m.__doc__), ""]
    groups: dict[str, list[ServedMetric]] = {}
    for metric in served:
        title = next(t for prefix, t in _GROUPS if metric.name.startswith(prefix))
        groups.setdefault(title, []).append(metric)
    for _, title in _GROUPS:
        if title not in groups:
            continue
        out += [f"## {title}", "",
                table(("series", "type", "labels", "meaning"),
                      [("<br>".join(code(s) for s in metric.samples), metric.kind,
                        ", ".join(code(label) for label in metric.labels) or "—",
                        escape_html(metric.help)
                        + (f" *Only with {metric.only}.*" if metric.only else ""))
                       for metric in groups[title]]), ""]
        if title == "Alerts":
            out += ["The `alert` label takes one of these values "
                    "(`controller/telemetry/alerts.py`; thresholds from `aifabric controller "
                    "--util-ceiling --util-window --util-peak --loss-threshold`):", "",
                    ", ".join(code(k) for k in alerts.KINDS) + ".", "",
                    rst_to_md(alerts.__doc__).split("\n\n", 1)[1], ""]
    return "\n".join(out).rstrip() + "\n"
