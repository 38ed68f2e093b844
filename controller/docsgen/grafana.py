"""The Grafana dashboard of ``deploy/grafana/aifabric.json``, generated from the metric list.

An overview row of the fabric's state (controllers up, switches without a master, links down,
alerts, pinned flows, the policy in force, the busiest links, each collective's rate against
its link-rate bound), then one row per group of metrics with a panel for **every** family the
exporter serves (:func:`controller.docsgen.metricsdoc.served_metrics`): counters as per-second
rates, gauges as they are, the queue-depth histogram as a heatmap, ``1 for ...`` info gauges
and timestamps as tables. A new metric gets its panel at the next
``python -m controller.docsgen dashboard``; ``tests/test_docs.py`` fails while the committed
file differs from what this module generates, or names a series the exporter does not serve.

Queries select ``job="aifabric"`` and the ``$instance`` variable (every replica by default),
through the ``$datasource`` variable (any Prometheus data source; Grafana 10 or later).
"""

from __future__ import annotations

import json
import re
from typing import Any

from controller.docsgen import REPO
from controller.docsgen.metricsdoc import ServedMetric, served_metrics

DASHBOARD = REPO / "deploy" / "grafana" / "aifabric.json"
SEL = 'job="aifabric", instance=~"$instance"'
_DS = {"type": "prometheus", "uid": "${datasource}"}

OVERVIEW: tuple[tuple[str, str, str], ...] = (
    ("Controllers up", 'sum(up{job="aifabric", instance=~"$instance"})', "short"),
    ("Switches without a master",
     f'count(count by (switch) (aifabric_switch_role{{{SEL}}}) unless on (switch) '
     f'count by (switch) (aifabric_switch_role{{{SEL}, role="master"}} == 1)) or vector(0)',
     "short"),
    ("Links down", f"count(min by (link) (aifabric_link_up{{{SEL}}}) == 0) or vector(0)", "short"),
    ("Alerts in force", f"count(aifabric_alert_active{{{SEL}}}) or vector(0)", "short"),
    ("Pinned flows", f"max(aifabric_pinned_flows{{{SEL}}})", "short"),
    ("Policy generation", f"max(aifabric_policy_generation{{{SEL}}})", "short"),
    ("Transactions rolled back (1 h)",
     f"sum(increase(aifabric_transactions_failed_total{{{SEL}}}[1h]))", "short"),
)
"""Stat panels: (title, PromQL, Grafana unit)."""

FABRIC: tuple[tuple[str, str, str, str], ...] = (
    ("Busiest link directions (utilisation)",
     f"topk(10, max by (link) (aifabric_link_utilisation_ratio{{{SEL}}}))", "{{link}}",
     "percentunit"),
    ("Collectives: slowest peer rate / link-rate bound",
     "min by (collective) (max by (collective, peer) (label_replace(8 * "
     f'rate(aifabric_flow_bytes_total{{{SEL}}}[$__rate_interval]), "peer", "$1", "flow", '
     '"([^ ]+).*"))) / on (collective) max by (collective) '
     f"(aifabric_collective_bound_bits_per_second{{{SEL}}})", "{{collective}}", "percentunit"),
)
"""Time series panels: (title, PromQL, legend, Grafana unit)."""


def _unit(m: ServedMetric) -> str:
    n = m.name
    if m.kind == "counter":
        return "Bps" if n.endswith("_bytes") else "pps" if n.endswith("_packets") else "short"
    if n.endswith("_timestamp_seconds"):
        return "dateTimeAsIso"
    for suffix, unit in (("_bits_per_second", "bps"), ("_ratio", "percentunit"),
                         ("_seconds", "s")):
        if n.endswith(suffix):
            return unit
    return "short"


def _legend(m: ServedMetric) -> str:
    return " ".join(["{{instance}}", *(f"{{{{{label}}}}}" for label in m.labels)])


def _by(m: ServedMetric) -> str:
    return ", ".join(("instance", *m.labels))


def _metric_panel(m: ServedMetric, pid: int, x: int, y: int) -> dict[str, Any]:
    series = m.samples[0]
    base: dict[str, Any] = {"id": pid, "datasource": _DS, "gridPos": {"h": 8, "w": 12, "x": x,
                                                                       "y": y},
                            "description": m.help}
    if m.kind == "histogram":
        return base | {
            "type": "heatmap", "title": m.name,
            "targets": [{"refId": "A", "datasource": _DS, "format": "heatmap",
                         "legendFormat": "{{le}}",
                         "expr": f"sum by (le) (rate({series}{{{SEL}}}[$__rate_interval]))"}],
            "options": {"calculate": False, "yAxis": {"unit": "short"}}}
    info = m.kind == "gauge" and (m.help.startswith("1 for") or _unit(m) == "dateTimeAsIso")
    if info:
        return base | {
            "type": "table", "title": m.name,
            "targets": [{"refId": "A", "datasource": _DS, "format": "table", "instant": True,
                         "expr": f"{series}{{{SEL}}}"}],
            "fieldConfig": {"defaults": {"unit": _unit(m)}, "overrides": []},
            "options": {"showHeader": True}}
    if m.kind == "counter":
        expr = f"sum by ({_by(m)}) (rate({series}{{{SEL}}}[$__rate_interval]))"
        title = f"{m.name} (per second)"
    else:
        expr = f"max by ({_by(m)}) ({series}{{{SEL}}})"
        title = m.name
    return base | {
        "type": "timeseries", "title": title,
        "targets": [{"refId": "A", "datasource": _DS, "expr": expr,
                     "legendFormat": _legend(m)}],
        "fieldConfig": {"defaults": {"unit": _unit(m)}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"},
                    "tooltip": {"mode": "multi", "sort": "desc"}}}


def _row(title: str, pid: int, y: int) -> dict[str, Any]:
    return {"id": pid, "type": "row", "title": title, "collapsed": False, "panels": [],
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}}


def dashboard() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model."""
    from controller.docsgen.metricsdoc import _GROUPS

    panels: list[dict[str, Any]] = []
    pid, y = 1, 0
    panels.append(_row("Fabric", pid, y))
    pid, y = pid + 1, y + 1
    w = 24 // len(OVERVIEW) or 1
    for i, (title, expr, unit) in enumerate(OVERVIEW):
        panels.append({"id": pid, "type": "stat", "title": title, "datasource": _DS,
                       "gridPos": {"h": 4, "w": w, "x": i * w, "y": y},
                       "targets": [{"refId": "A", "datasource": _DS, "expr": expr,
                                    "instant": True}],
                       "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                       "options": {"reduceOptions": {"calcs": ["lastNotNull"]},
                                   "colorMode": "value", "graphMode": "none"}})
        pid += 1
    y += 4
    for i, (title, expr, legend, unit) in enumerate(FABRIC):
        panels.append({"id": pid, "type": "timeseries", "title": title, "datasource": _DS,
                       "gridPos": {"h": 9, "w": 12, "x": 12 * (i % 2), "y": y + 9 * (i // 2)},
                       "targets": [{"refId": "A", "datasource": _DS, "expr": expr,
                                    "legendFormat": legend}],
                       "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                       "options": {"legend": {"displayMode": "table", "placement": "right"},
                                   "tooltip": {"mode": "multi", "sort": "desc"}}})
        pid += 1
    y += 9 * ((len(FABRIC) + 1) // 2)
    groups: dict[str, list[ServedMetric]] = {}
    for m in served_metrics():
        title = next(t for prefix, t in _GROUPS if m.name.startswith(prefix))
        groups.setdefault(title, []).append(m)
    for _, title in _GROUPS:
        if title not in groups:
            continue
        panels.append(_row(f"Metrics: {title}", pid, y))
        pid, y = pid + 1, y + 1
        for i, m in enumerate(groups[title]):
            panels.append(_metric_panel(m, pid, 12 * (i % 2), y + 8 * (i // 2)))
            pid += 1
        y += 8 * ((len(groups[title]) + 1) // 2)
    return {
        "title": "aifabric", "uid": "aifabric", "tags": ["aifabric"],
        "description": "Generated by controller/docsgen/grafana.py from the metrics the "
                       "aifabric exporter serves; regenerate, do not edit.",
        "editable": True, "graphTooltip": 1, "schemaVersion": 39, "version": 1,
        "time": {"from": "now-1h", "to": "now"}, "refresh": "30s", "timezone": "",
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource",
             "query": "prometheus", "current": {}, "hide": 0},
            {"name": "instance", "label": "Replica", "type": "query", "datasource": _DS,
             "query": {"query": 'label_values(up{job="aifabric"}, instance)', "refId": "A"},
             "definition": 'label_values(up{job="aifabric"}, instance)', "refresh": 2,
             "includeAll": True, "multi": True, "allValue": ".*", "current": {}, "hide": 0,
             "sort": 1},
        ]},
        "annotations": {"list": []},
        "links": [],
        "panels": panels,
    }


def dashboard_json() -> str:
    """The committed file's text."""
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


def dashboard_exprs(model: dict[str, Any]) -> list[str]:
    """Every PromQL expression of a dashboard model (panel targets and query variables)."""
    exprs = [t["expr"] for p in model.get("panels", []) for t in p.get("targets", [])
             if "expr" in t]
    for v in model.get("templating", {}).get("list", []):
        q = v.get("query")
        if v.get("type") == "query" and isinstance(q, dict):
            # label_values(SELECTOR, label): the selector is the PromQL part
            exprs.append(re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", q["query"]))
    return exprs
