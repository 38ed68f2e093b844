"""The alert reference, generated from the Prometheus rule files in ``deploy/prometheus/``.

Also the helpers the tests use to check those files and the Grafana dashboard against the
exporter: :func:`promql_metric_names` pulls the series names out of PromQL expressions.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from controller.docsgen import REPO
from controller.docsgen.markdown import GENERATED_NOTE, code, escape_html, table

RULES_DIR = REPO / "deploy" / "prometheus"

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_DURATION = re.compile(r"\[[^\]]*\]")
_NAME = re.compile(r"(?<![\w:])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])")
_KEYWORDS = frozenset({
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "le", "inf", "nan"})


def promql_metric_names(expr: str) -> set[str]:
    """Series names an expression selects: identifiers that are not functions (followed by
    ``(``), keywords, label names inside ``by (...)``/``on (...)`` or ``{...}``, or in strings
    and range durations. Good for the rules and panels of this repository (checked by tests),
    not a general PromQL parser."""
    text = _STRING.sub('""', expr)
    text = _DURATION.sub("", text)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for m in _NAME.finditer(text):
        name = m.group(1)
        rest = text[m.end():].lstrip()
        if rest.startswith("(") or name in _KEYWORDS or name.startswith("$"):
            continue
        names.add(name)
    return names


def load_rule_groups(path: Path | None = None) -> list[dict[str, Any]]:
    """The ``groups`` of a rule file (``deploy/prometheus/aifabric-rules.yml`` by default)."""
    from ruamel.yaml import YAML

    data = YAML(typ="safe", pure=True).load((path or RULES_DIR / "aifabric-rules.yml").read_text())
    return list(data["groups"])


def alerts_page() -> str:
    """``reference/alerts.md``: every recording and alerting rule shipped."""
    files = sorted(RULES_DIR.glob("*-rules.yml"))
    out = [GENERATED_NOTE.format(what="deploy/prometheus/*-rules.yml"), "",
           "# Alert and recording rules", "",
           "The Prometheus rules shipped in `deploy/prometheus/`, generated from the rule "
           "files. Load them with `rule_files:` (an example configuration is "
           "`deploy/prometheus/prometheus.yml`; the controllers must be scraped under "
           "`job=\"aifabric\"`). Every metric they use is one the exporter serves (see the "
           "[metric reference](metrics.md)); `tests/test_prometheus_rules.py` checks that and "
           "runs `promtool test rules` on `deploy/prometheus/tests/`. How to run Prometheus "
           "and Grafana with them: [monitoring](../operator/monitoring.md).", ""]
    if not files:
        return "\n".join(out + ["No rule files found in this installation.", ""])
    for path in files:
        for group in load_rule_groups(path):
            rules = group.get("rules", [])
            recorded = [r for r in rules if "record" in r]
            alerting = [r for r in rules if "alert" in r]
            out += [f"## Group `{group['name']}` ({code(path.name)})", ""]
            if group.get("interval"):
                out += [f"Evaluated every {group['interval']}.", ""]
            if recorded:
                out += [table(("recording rule", "expression"),
                              [(code(r["record"]), code(" ".join(r["expr"].split())))
                               for r in recorded]), ""]
            for r in alerting:
                ann = r.get("annotations", {})
                labels = r.get("labels", {})
                when = (f"fires once the condition has held for {r['for']}" if r.get("for")
                        else "fires as soon as the condition holds")
                out += [f"### {r['alert']}", "",
                        f"Severity **{labels.get('severity', 'none')}**; {when}.", "",
                        "```promql", r["expr"].strip(), "```", "",
                        f"*Summary:* {escape_html(ann.get('summary', ''))}", "",
                        escape_html(ann.get("description", "")), ""]
    return "\n".join(out).rstrip() + "\n"
